//! The kinds of object the operator renders, applies, watches and prunes, as one
//! type: adding a kind is one edit here that the compiler then completes
//! everywhere a kind is matched (caches, apply waves, API paths).

use kube::core::{ApiResource, GroupVersionKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildKind {
    ClusterRoleBinding,
    ConfigMap,
    Deployment,
    Ingress,
    IngressClass,
    KuraGateway,
    NetworkPolicy,
    PodDisruptionBudget,
    RoleBinding,
    Service,
    ServiceAccount,
    StatefulSet,
}

impl ChildKind {
    pub const ALL: [ChildKind; 12] = [
        ChildKind::ClusterRoleBinding,
        ChildKind::ConfigMap,
        ChildKind::Deployment,
        ChildKind::Ingress,
        ChildKind::IngressClass,
        ChildKind::KuraGateway,
        ChildKind::NetworkPolicy,
        ChildKind::PodDisruptionBudget,
        ChildKind::RoleBinding,
        ChildKind::Service,
        ChildKind::ServiceAccount,
        ChildKind::StatefulSet,
    ];

    pub const fn api_version(self) -> &'static str {
        match self {
            ChildKind::ConfigMap | ChildKind::Service | ChildKind::ServiceAccount => "v1",
            ChildKind::Deployment | ChildKind::StatefulSet => "apps/v1",
            ChildKind::Ingress | ChildKind::IngressClass | ChildKind::NetworkPolicy => {
                "networking.k8s.io/v1"
            }
            ChildKind::PodDisruptionBudget => "policy/v1",
            ChildKind::KuraGateway => "kura.dev/v1alpha1",
            ChildKind::RoleBinding | ChildKind::ClusterRoleBinding => {
                "rbac.authorization.k8s.io/v1"
            }
        }
    }

    pub const fn kind(self) -> &'static str {
        match self {
            ChildKind::ClusterRoleBinding => "ClusterRoleBinding",
            ChildKind::ConfigMap => "ConfigMap",
            ChildKind::Deployment => "Deployment",
            ChildKind::Ingress => "Ingress",
            ChildKind::IngressClass => "IngressClass",
            ChildKind::KuraGateway => "KuraGateway",
            ChildKind::NetworkPolicy => "NetworkPolicy",
            ChildKind::PodDisruptionBudget => "PodDisruptionBudget",
            ChildKind::RoleBinding => "RoleBinding",
            ChildKind::Service => "Service",
            ChildKind::ServiceAccount => "ServiceAccount",
            ChildKind::StatefulSet => "StatefulSet",
        }
    }

    /// The resource name in API paths.
    pub const fn plural(self) -> &'static str {
        match self {
            ChildKind::ClusterRoleBinding => "clusterrolebindings",
            ChildKind::ConfigMap => "configmaps",
            ChildKind::Deployment => "deployments",
            ChildKind::Ingress => "ingresses",
            ChildKind::IngressClass => "ingressclasses",
            ChildKind::KuraGateway => "kuragateways",
            ChildKind::NetworkPolicy => "networkpolicies",
            ChildKind::PodDisruptionBudget => "poddisruptionbudgets",
            ChildKind::RoleBinding => "rolebindings",
            ChildKind::Service => "services",
            ChildKind::ServiceAccount => "serviceaccounts",
            ChildKind::StatefulSet => "statefulsets",
        }
    }

    pub const fn namespaced(self) -> bool {
        !matches!(
            self,
            ChildKind::IngressClass | ChildKind::ClusterRoleBinding
        )
    }

    /// A gateway renders it, and nothing else does: its Deployment, its
    /// ServiceAccount's bindings and its IngressClass. (A gateway's Service
    /// and ServiceAccount are kinds an instance renders too.)
    pub const fn of_gateway_only(self) -> bool {
        matches!(
            self,
            ChildKind::Deployment
                | ChildKind::IngressClass
                | ChildKind::RoleBinding
                | ChildKind::ClusterRoleBinding
        )
    }

    /// Apply order: what workloads and ingresses depend on goes first (a pod
    /// cannot be created before its ServiceAccount exists).
    pub const fn wave(self) -> u8 {
        match self {
            ChildKind::StatefulSet | ChildKind::Deployment | ChildKind::Ingress => 1,
            _ => 0,
        }
    }

    /// An instance renders it (a gateway renders the others,
    /// [`ChildKind::of_gateway_only`]). The operator's caches hold it by the
    /// operator's label, except a `KuraGateway`, held whoever labelled it:
    /// ownership, not the label, decides whose it is.
    pub const fn of_instance(self) -> bool {
        !self.of_gateway_only()
    }

    /// The caches hold it only when it carries the operator's label, and
    /// index it by the instance label it carries (`stores::labelled`).
    pub const fn watched_by_label(self) -> bool {
        self.of_instance() && !matches!(self, ChildKind::KuraGateway)
    }

    /// The caches hold only the objects of it that carry the operator's
    /// label: anyone else's, under a name the operator creates, is unseen by
    /// them (`stores::foreign` keeps those names). The instance's children
    /// and the gateway's namespaced ones; not the cluster-scoped IngressClass
    /// and ClusterRoleBinding nor a `KuraGateway`, cached whoever labelled them.
    pub const fn cached_by_label(self) -> bool {
        self.namespaced() && !matches!(self, ChildKind::KuraGateway)
    }

    /// Its content is in the pod-template hash (the workload, and the
    /// configuration file its pods mount): a change of it restarts pods, so
    /// an operator-originated one waits for the rollout budget.
    pub const fn restarts_pods(self) -> bool {
        matches!(self, ChildKind::StatefulSet | ChildKind::ConfigMap)
    }

    /// The kind of an `apiVersion` and `kind` pair (as found in a status
    /// inventory, which anyone with access can write), if it is one of ours.
    pub fn parse(api_version: &str, kind: &str) -> Option<ChildKind> {
        ChildKind::ALL
            .into_iter()
            .find(|k| k.api_version() == api_version && k.kind() == kind)
    }

    pub fn api_resource(self) -> ApiResource {
        let (group, version) = self
            .api_version()
            .rsplit_once('/')
            .unwrap_or(("", self.api_version()));
        let gvk = GroupVersionKind::gvk(group, version, self.kind());
        ApiResource::from_gvk_with_plural(&gvk, self.plural())
    }
}

impl std::fmt::Display for ChildKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::ChildKind;

    #[test]
    fn every_kind_parses_back_from_its_api_version_and_kind() {
        for k in ChildKind::ALL {
            assert_eq!(ChildKind::parse(k.api_version(), k.kind()), Some(k));
            assert_eq!(k.api_resource().plural, k.plural());
        }
        assert_eq!(ChildKind::parse("v1", "PersistentVolumeClaim"), None);
        assert_eq!(ChildKind::parse("apps/v1", "ConfigMap"), None);
    }
}
