//! docs/incidents.md #4's last line against the real control plane: a converged, idle
//! fleet costs zero mutating API requests. Counted from the apiserver's own audit
//! log, and by resourceVersions.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};

use crate::operator::{Operator, config, create_fleet, delete_shared_class, shared_class};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

const FLEET: usize = 50;

async fn versions<K>(api: Api<K>, out: &mut BTreeMap<String, String>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for o in api.list(&ListParams::default()).await.unwrap().items {
        let m = o.meta();
        out.insert(
            format!("{}/{}", K::kind(&()), m.name.clone().unwrap()),
            m.resource_version.clone().unwrap(),
        );
    }
}

async fn all_versions(ns: &TestNamespace) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    versions::<KuraInstance>(ns.api(), &mut v).await;
    versions::<StatefulSet>(ns.api(), &mut v).await;
    versions::<Service>(ns.api(), &mut v).await;
    versions::<ConfigMap>(ns.api(), &mut v).await;
    versions::<ServiceAccount>(ns.api(), &mut v).await;
    versions::<Ingress>(ns.api(), &mut v).await;
    versions::<NetworkPolicy>(ns.api(), &mut v).await;
    versions::<PodDisruptionBudget>(ns.api(), &mut v).await;
    v
}

#[tokio::test]
async fn converged_idle_fleet_makes_zero_mutating_requests() {
    let ns = TestNamespace::new("idle").await;
    let classes = shared_class(&ns).await;
    let test_start = jiff::Timestamp::now().to_string();
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none")); // resync 3 s
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "i", FLEET).await;
    wait_for(
        "the whole fleet to be Ready",
        Duration::from_secs(180),
        || async {
            let list = instances.list(&ListParams::default()).await.ok()?;
            let ready = list
                .items
                .iter()
                .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
                .count();
            (ready == FLEET).then_some(())
        },
    )
    .await;
    // Let the last status writes of the convergence land before the idle window.
    op.wait_for_log_count("outcome=\"converged\"", FLEET, Duration::from_secs(60))
        .await;

    let idle_start = jiff::Timestamp::now().to_string();
    let before = all_versions(&ns).await;
    // Two resync periods: every instance re-plans at least twice.
    op.wait_for_log_count("outcome=\"converged\"", 2 * FLEET, Duration::from_secs(60))
        .await;
    let after = all_versions(&ns).await;

    let writes: Vec<String> = mutations_since(&ns.name, &idle_start);
    eprintln!(
        "idle fleet of {FLEET}: {} mutating requests, {} objects compared",
        writes.len(),
        before.len()
    );
    assert!(
        writes.is_empty(),
        "a converged idle fleet must not write: {writes:#?}"
    );
    // 7 children and the instance each, plus the namespace's default
    // ServiceAccount and root CA ConfigMap.
    assert_eq!(
        before.len(),
        FLEET * 8 + 2,
        "every child and instance was compared"
    );
    // The counter does see the operator's writes: converging made plenty.
    let converging = mutations_since(&ns.name, &test_start).len();
    assert!(
        converging >= FLEET * 8,
        "the audit log shows the convergence writes ({converging})"
    );
    assert_eq!(before, after, "no resourceVersion changed while idle");
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
