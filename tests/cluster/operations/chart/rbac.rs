//! The chart's RBAC, applied from `helm template` and exercised as the chart's
//! ServiceAccount (impersonated): it can do what the operator does and nothing
//! the operator must not.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};

use super::*;

/// One question: may the ServiceAccount do `verb` on `group`/`resource`?
pub(crate) struct Access {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: Option<&'static str>,
    namespace: Option<String>,
    name: Option<String>,
}

pub(crate) fn access(verb: &'static str, group: &'static str, resource: &'static str) -> Access {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (resource, None),
    };
    Access {
        verb,
        group,
        resource,
        subresource,
        namespace: None,
        name: None,
    }
}

impl Access {
    pub(crate) fn ns(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }
    fn named(mut self, name: &'static str) -> Self {
        self.name = Some(name.to_string());
        self
    }
    fn named_owned(mut self, name: String) -> Self {
        self.name = Some(name);
        self
    }
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} {}{}{} in {}{}",
            self.verb,
            if self.group.is_empty() {
                "core"
            } else {
                self.group
            },
            format_args!("/{}", self.resource),
            self.subresource
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            self.namespace.as_deref().unwrap_or("<cluster>"),
            self.name
                .as_ref()
                .map(|n| format!(" (name {n})"))
                .unwrap_or_default(),
        )
    }
}

pub(crate) async fn allowed(client: &Client, a: &Access) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(a.verb.into()),
                group: Some(a.group.into()),
                resource: Some(a.resource.into()),
                subresource: a.subresource.map(Into::into),
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview")
        .status
        .expect("review status")
        .allowed
}

/// Applies the rendered ServiceAccount and RBAC of release `ns.name` in `ns`;
/// returns the ServiceAccount's name.
pub(crate) fn apply_chart_rbac(ns: &TestNamespace, values: &str) -> String {
    let rendered = template_text(
        &ns.name,
        &ns.name,
        &[
            "--set",
            values,
            "-s",
            "templates/serviceaccount.yaml",
            "-s",
            "templates/rbac.yaml",
        ],
    );
    let out = kubectl_run(&["apply", "-f", "-"], Some(&rendered));
    assert!(out.ok, "applying the chart's RBAC: {}", out.stderr);
    format!("{}-kura-operator", ns.name)
}

/// Waits until `client` may do every access of `can`. Bindings reach the
/// authorizer's cache asynchronously: only after this is a denial trusted.
pub(crate) async fn wait_allowed(client: &Client, can: &[Access]) {
    wait_for(
        "every grant to take effect",
        Duration::from_secs(30),
        || async {
            for a in can {
                if !allowed(client, a).await {
                    eprintln!("not (yet) allowed: {}", a.describe());
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// Applies the chart's RBAC (see [`apply_chart_rbac`]) and checks `can` and `cannot` as that ServiceAccount.
async fn check_rbac(ns: &TestNamespace, values: &str, can: &[Access], cannot: &[Access]) {
    let sa = apply_chart_rbac(ns, values);
    let client = client_as_service_account(&ns.name, &sa).await;
    wait_allowed(&client, can).await;
    for a in cannot {
        assert!(
            !allowed(&client, a).await,
            "must not be allowed: {}",
            a.describe()
        );
    }
}

/// Namespaced mode (`watchNamespace`): a Role in the watched namespace, the
/// cluster-scoped needs through a ClusterRole, nothing in any other namespace.
#[tokio::test]
async fn namespaced_mode_grants_only_what_the_operator_needs() {
    let ns = TestNamespace::new("chart-rbac").await;
    let other = TestNamespace::new("chart-rbac-other").await;
    let _cleanup = ClusterScopedCleanup(ns.name.clone());
    let here = ns.name.as_str();
    let there = other.name.as_str();
    let values = format!("watchNamespace={here},leaderElection.enabled=true");
    let can = [
        access("patch", "kura.dev", "kurainstances/status").ns(here),
        access("watch", "kura.dev", "kurainstances").ns(here),
        access("update", "kura.dev", "kurainstances/finalizers").ns(here),
        access("delete", "kura.dev", "kuragateways").ns(here),
        access("create", "apps", "statefulsets").ns(here),
        access("delete", "networking.k8s.io", "ingresses").ns(here),
        access("create", "events.k8s.io", "events").ns(here),
        access("create", "coordination.k8s.io", "leases").ns(here),
        access("get", "coordination.k8s.io", "leases")
            .ns(here)
            .named("kura-operator"),
        access("update", "coordination.k8s.io", "leases")
            .ns(here)
            .named("kura-operator"),
        // Cluster-scoped, in namespaced mode too.
        access("create", "networking.k8s.io", "ingressclasses"),
        access("get", "apiextensions.k8s.io", "customresourcedefinitions")
            .named("kurainstances.kura.dev"),
        // Watched by name: the check of the CRDs whenever they change.
        access("watch", "apiextensions.k8s.io", "customresourcedefinitions")
            .named("kuragateways.kura.dev"),
        // A dedicated gateway's rights: its RoleBinding and ClusterRoleBinding,
        // to the chart's two gateway ClusterRoles.
        access("create", "rbac.authorization.k8s.io", "rolebindings").ns(here),
        access("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        access("bind", "rbac.authorization.k8s.io", "clusterroles")
            .ns(here)
            .named_owned(format!("{here}-{here}-kura-operator-gateway")),
        access("bind", "rbac.authorization.k8s.io", "clusterroles")
            .named_owned(format!("{here}-{here}-kura-operator-gateway-cluster")),
        access("list", "", "pods").ns(here),
    ];
    let cannot = [
        access("get", "", "secrets").ns(here),
        access("delete", "", "persistentvolumeclaims").ns(here),
        access("list", "apps", "statefulsets").ns(there),
        access("list", "kura.dev", "kurainstances").ns(there),
        access("list", "apps", "statefulsets"),
        // The spec is the user's; only status and the operator's metadata (patch).
        access("update", "kura.dev", "kurainstances").ns(here),
        access("delete", "kura.dev", "kurainstances").ns(here),
        access("get", "coordination.k8s.io", "leases")
            .ns(here)
            .named("someone-else"),
        access("get", "coordination.k8s.io", "leases")
            .ns(there)
            .named("kura-operator"),
        access("get", "apiextensions.k8s.io", "customresourcedefinitions")
            .named("secrets.example.com"),
        access("watch", "apiextensions.k8s.io", "customresourcedefinitions"),
        access("create", "rbac.authorization.k8s.io", "rolebindings").ns(there),
        // Binding: the gateways' two ClusterRoles only, never another.
        access("bind", "rbac.authorization.k8s.io", "clusterroles")
            .ns(here)
            .named("admin"),
        access("bind", "rbac.authorization.k8s.io", "clusterroles").named("cluster-admin"),
        access("escalate", "rbac.authorization.k8s.io", "clusterroles"),
        // The gateways' pods are listed by label; no pod is read or written.
        access("get", "", "pods").ns(here),
        access("create", "", "pods/exec").ns(here),
    ];
    check_rbac(&ns, &values, &can, &cannot).await;

    // The same through real requests: a grant works, the denials are 403s.
    let client = client_as_service_account(here, &format!("{here}-kura-operator")).await;
    let lp = ListParams::default();
    Api::<StatefulSet>::namespaced(client.clone(), here)
        .list(&lp)
        .await
        .expect("listing statefulsets in the watched namespace");
    for result in [
        Api::<StatefulSet>::namespaced(client.clone(), there)
            .list(&lp)
            .await
            .map(|_| ()),
        Api::<Secret>::namespaced(client.clone(), here)
            .list(&lp)
            .await
            .map(|_| ()),
    ] {
        match result {
            Err(kube::Error::Api(s)) if s.code == 403 => {}
            other => panic!("expected 403, got {other:?}"),
        }
    }
}

/// All-namespaces mode (the default): the namespaced rules through a
/// ClusterRole, still no Secrets or PVCs anywhere, Pods only listed (the
/// gateways', by label), and no Lease rights without leader election.
#[tokio::test]
async fn cluster_mode_grants_only_what_the_operator_needs() {
    let ns = TestNamespace::new("chart-rbac-all").await;
    let other = TestNamespace::new("chart-rbac-all-other").await;
    let _cleanup = ClusterScopedCleanup(ns.name.clone());
    let here = ns.name.as_str();
    let there = other.name.as_str();
    let can = [
        access("patch", "kura.dev", "kurainstances/status").ns(there),
        access("list", "kura.dev", "kurainstances"),
        access("create", "apps", "statefulsets").ns(there),
        access("list", "apps", "statefulsets").ns(there),
        access("create", "events.k8s.io", "events").ns(there),
        access("patch", "policy", "poddisruptionbudgets").ns(there),
        access("create", "networking.k8s.io", "ingressclasses"),
        access("list", "", "pods"),
        access("create", "rbac.authorization.k8s.io", "rolebindings").ns(there),
    ];
    let cannot = [
        access("get", "", "secrets").ns(there),
        access("list", "", "secrets"),
        access("get", "", "pods").ns(there),
        access("delete", "", "persistentvolumeclaims").ns(there),
        access("bind", "rbac.authorization.k8s.io", "clusterroles").named("cluster-admin"),
        access("get", "coordination.k8s.io", "leases")
            .ns(here)
            .named("kura-operator"),
        access("update", "apps", "statefulsets").ns(there),
    ];
    // Leader election is on by default; turned off, no Lease rights remain.
    check_rbac(
        &ns,
        "replicas=1,leaderElection.enabled=false",
        &can,
        &cannot,
    )
    .await;
}
