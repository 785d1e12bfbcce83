//! Reflector stores of everything a reconcile observes: the decision is rebuilt
//! from these caches of cluster state on every pass, and a converged pass reads
//! nothing from the apiserver.

pub mod cached;
pub mod foreign;
pub mod labelled;
pub mod unseen;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use self::cached::{CachedIngress, CachedMeta, CachedObject, CachedStatefulSet};
use self::labelled::Labelled;
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::cached_sts::LiveClaim;
use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

#[derive(Clone)]
pub struct Stores {
    pub instances: Store<KuraInstance>,
    pub gateways: Store<KuraGateway>,
    pub stateful_sets: Store<CachedStatefulSet>,
    pub ingresses: Store<CachedIngress>,
    pub ingress_classes: Store<IngressClass>,
    pub services: Store<CachedMeta<Service>>,
    pub config_maps: Store<CachedMeta<ConfigMap>>,
    pub service_accounts: Store<CachedMeta<ServiceAccount>>,
    pub pod_disruption_budgets: Store<CachedMeta<PodDisruptionBudget>>,
    pub network_policies: Store<CachedMeta<NetworkPolicy>>,
    pub deployments: Store<PartialObjectMeta<Deployment>>,
    /// The gateways' RoleBindings (by the operator's label).
    pub role_bindings: Store<PartialObjectMeta<RoleBinding>>,
    /// Every ClusterRoleBinding, like every IngressClass: a gateway's is
    /// named as its class, and one of that name someone else made must be seen.
    pub cluster_role_bindings: Store<PartialObjectMeta<ClusterRoleBinding>>,
    /// The dedicated gateways' pods (by label), their names, labels and
    /// `PodScheduled` condition only (`kura_core::gateway::pods::compact`).
    pub gateway_pods: Store<Pod>,
    /// Who holds which host, kept up to date from the instance and Ingress watches.
    pub claims: std::sync::Arc<crate::claims::Claims>,
    /// The children above by the instance they are labelled as, kept up to
    /// date from their watches.
    pub labelled: std::sync::Arc<Labelled>,
    /// The names of the objects of the label-cached kinds that do not carry
    /// the operator's label, kept from their own watches (`foreign`).
    pub foreign: std::sync::Arc<foreign::ForeignNames>,
    /// What this process wrote of the children that the caches have not
    /// shown yet (`unseen`): [`Stores::meta`] answers with the fresher.
    pub unseen: std::sync::Arc<unseen::Unseen>,
}

fn key<K: kube::runtime::reflector::Lookup<DynamicType = ()>>(id: &ObjectId) -> ObjectRef<K> {
    let r = ObjectRef::new(&id.name);
    match &id.namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

impl Stores {
    /// Metadata of any object kind the operator renders, from its cache.
    pub fn meta(&self, id: &ObjectId) -> Option<ObjectMeta> {
        // An object being deleted is as good as missing: it must be created
        // again, once it is gone (see [`Stores::terminating`]).
        self.any_meta(id).filter(|m| m.deletion_timestamp.is_none())
    }

    /// The finalizers holding `id`, when the cache shows it being deleted
    /// (a deletionTimestamp): it is not to be applied until it is gone.
    pub fn terminating(&self, id: &ObjectId) -> Option<Vec<String>> {
        let meta = self.any_meta(id)?;
        meta.deletion_timestamp?;
        Some(meta.finalizers.unwrap_or_default())
    }

    /// Metadata of `id` from its cache, being deleted or not; or from this
    /// process's own write of it, if the cache has not shown that yet.
    fn any_meta(&self, id: &ObjectId) -> Option<ObjectMeta> {
        self.unseen.fresher(id, self.of(id.kind).meta(id))
    }

    /// The cache of `kind`: the one place that matches a kind to its store.
    pub fn of(&self, kind: ChildKind) -> &dyn KindStore {
        match kind {
            ChildKind::StatefulSet => &self.stateful_sets,
            ChildKind::Deployment => &self.deployments,
            ChildKind::Ingress => &self.ingresses,
            ChildKind::IngressClass => &self.ingress_classes,
            ChildKind::NetworkPolicy => &self.network_policies,
            ChildKind::PodDisruptionBudget => &self.pod_disruption_budgets,
            ChildKind::Service => &self.services,
            ChildKind::ConfigMap => &self.config_maps,
            ChildKind::ServiceAccount => &self.service_accounts,
            ChildKind::KuraGateway => &self.gateways,
            ChildKind::RoleBinding => &self.role_bindings,
            ChildKind::ClusterRoleBinding => &self.cluster_role_bindings,
        }
    }

    /// Every cache has listed its kind once (the instances' included).
    pub async fn synced(&self) {
        let children = ChildKind::ALL.map(|kind| self.of(kind).ready());
        let _ = futures::join!(
            self.instances.wait_until_ready(),
            futures::future::join_all(children)
        );
    }

    pub fn labelled_as(&self, namespace: &str, name: &str) -> Vec<ObjectId> {
        self.labelled.of(namespace, name)
    }

    /// Index every labelled child anew, from the stores as they are (`diff`
    /// fills its stores from lists, not watches).
    pub fn index_labels(&self) {
        for kind in ChildKind::ALL.into_iter().filter(|k| k.watched_by_label()) {
            self.of(kind).index_labels(kind, &self.labelled);
        }
    }

    /// The `data` claim template of the instance's live StatefulSet.
    pub fn live_claim(&self, namespace: &str, name: &str) -> Option<LiveClaim> {
        let id = ObjectId {
            kind: ChildKind::StatefulSet,
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        };
        kura_core::cached_sts::data_claim(&*self.stateful_set(&id)?)
    }

    /// [`Stores::workload_serving`] of an instance.
    pub fn serving(&self, instance: &kura_core::api::KuraInstance) -> bool {
        self.workload_serving(
            instance.metadata.namespace.as_deref().unwrap_or_default(),
            instance.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// Whether every pod of the instance's live StatefulSet serves now
    /// (`cached_sts::serving`); false when it has none.
    pub fn workload_serving(&self, namespace: &str, name: &str) -> bool {
        let id = ObjectId {
            kind: ChildKind::StatefulSet,
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        };
        self.stateful_sets
            .get(&key(&id))
            .is_some_and(|sts| kura_core::cached_sts::serves(sts.replicas()))
    }

    pub fn stateful_set(&self, id: &ObjectId) -> Option<std::sync::Arc<StatefulSet>> {
        let cached = self.stateful_sets.get(&key(id))?;
        Some(std::sync::Arc::new(cached.stateful_set()))
    }

    pub fn ingress(&self, id: &ObjectId) -> Option<std::sync::Arc<Ingress>> {
        let cached = self.ingresses.get(&key(id))?;
        Some(std::sync::Arc::new(cached.ingress()))
    }

    pub fn ingress_class(&self, name: &str) -> Option<std::sync::Arc<IngressClass>> {
        self.ingress_classes.get(&ObjectRef::new(name))
    }

    /// What keeps the gateway serving `class` from serving, said by its
    /// pods: `gateway <name>: pod <pod> cannot be scheduled: <the scheduler's
    /// message>`; `None` for a class of no gateway, or one whose pods are placed.
    pub fn gateway_trouble(&self, class: &IngressClass) -> Option<String> {
        let (namespace, name) = class_gateway(&class.metadata)?;
        let stuck = self.unschedulable_gateway_pods(&namespace, &name);
        kura_core::gateway::pods::report(&name, &stuck)
    }

    /// The pods of gateway `namespace/name` the scheduler cannot place, by pod name.
    pub fn unschedulable_gateway_pods(
        &self,
        namespace: &str,
        name: &str,
    ) -> Vec<kura_core::gateway::pods::Unschedulable> {
        let mut stuck: Vec<_> = self
            .gateway_pods
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(kura_core::keys::LABEL_GATEWAY))
                    .is_some_and(|g| g == name)
            })
            .filter_map(|p| kura_core::gateway::pods::unschedulable(p))
            .collect();
        stuck.sort_by(|a, b| a.pod.cmp(&b.pod));
        stuck
    }
}

/// The gateway (namespace, name) a cluster-scoped child (its IngressClass or
/// ClusterRoleBinding) was made for, by the labels the operator puts on them.
pub fn class_gateway(meta: &ObjectMeta) -> Option<(String, String)> {
    let labels = meta.labels.as_ref()?;
    Some((
        labels
            .get(kura_core::keys::LABEL_GATEWAY_NAMESPACE)?
            .clone(),
        labels.get(kura_core::keys::LABEL_GATEWAY)?.clone(),
    ))
}

/// A cache of one kind, whatever the type it holds.
pub trait KindStore: Sync {
    /// The metadata of the object `id`, deleted or not.
    fn meta(&self, id: &ObjectId) -> Option<ObjectMeta>;
    /// Resolves once the cache has listed its kind.
    fn ready(&self) -> futures::future::BoxFuture<'_, ()>;
    /// Indexes every object by the instance label it carries.
    fn index_labels(&self, kind: ChildKind, labelled: &Labelled);
}

impl<K: CachedObject> KindStore for Store<K> {
    fn meta(&self, id: &ObjectId) -> Option<ObjectMeta> {
        self.get(&key(id)).map(|o| o.metadata())
    }

    fn ready(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.wait_until_ready().await;
        })
    }

    fn index_labels(&self, kind: ChildKind, labelled: &Labelled) {
        labelled.reset(kind, self);
    }
}
