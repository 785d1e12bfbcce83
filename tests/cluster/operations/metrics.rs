//! `/metrics` follows what the operator does: an initial apply, a forced
//! re-apply, drift (a deleted child), a prune after a configuration change,
//! and the per-phase gauge when an instance goes away.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, config, delete_shared_class, shared_class};
use kura_core::api::KuraInstance;

const APPLIED: &str = "kura_reconciles_total{result=\"applied\"}";
const PRUNED: &str = "kura_objects_pruned_total";

fn applies(reason: &str) -> String {
    format!("kura_applies_total{{reason=\"{reason}\"}}")
}

/// Waits until `series` reads at least `at_least`.
async fn wait_metric(op: &Operator, series: &str, at_least: f64) -> f64 {
    wait_for(
        &format!("{series} >= {at_least}"),
        Duration::from_secs(60),
        || async { op.metric(series).await.filter(|v| *v >= at_least) },
    )
    .await
}

#[tokio::test]
async fn metrics_count_initial_forced_drift_and_prune() {
    let ns = TestNamespace::new("ops-metrics").await;
    let classes = shared_class(&ns).await;
    // A cloud region: the instance gets a dedicated KuraGateway (served by
    // kura-sim's ingress controller); the switch to host prunes it.
    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", "kura.dev/sim-ingress"));
    wait_for("/metrics to answer", Duration::from_secs(30), || async {
        op.metric(APPLIED).await
    })
    .await;
    assert_eq!(op.metric(&applies("initial")).await, Some(0.0));
    // No election: it leads once its caches have synced.
    wait_for("kura_leader 1", Duration::from_secs(60), || async {
        (op.metric("kura_leader").await == Some(1.0)).then_some(())
    })
    .await;

    let instances: Api<KuraInstance> = ns.api();
    let applied = create_acme(&instances, Duration::from_secs(90)).await;
    assert_eq!(wait_metric(&op, &applies("initial"), 1.0).await, 1.0);
    assert!(op.metric(APPLIED).await.unwrap() >= 1.0);
    // Observed when the reconcile returns, just after its status write.
    wait_metric(&op, "kura_reconcile_duration_seconds_count", 1.0).await;
    assert!(
        applied.inventory.iter().any(|e| e.kind == "KuraGateway"),
        "a dedicated gateway: {:?}",
        applied.inventory
    );

    // Forced: the annotation re-applies an unchanged instance once.
    let forced = op.metric(&applies("forced")).await.unwrap();
    let patch =
        json!({"metadata": {"annotations": {"kura.dev/reapply-at": "2026-11-29T12:00:00Z"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_metric(&op, &applies("forced"), forced + 1.0).await;

    // Drift: a deleted child ConfigMap is re-created, reason `missing`.
    let missing = op.metric(&applies("missing")).await.unwrap();
    let config_map = applied
        .inventory
        .iter()
        .find(|e| e.kind == "ConfigMap")
        .expect("a ConfigMap in the inventory")
        .name
        .clone();
    let config_maps: Api<ConfigMap> = ns.api();
    config_maps
        .delete(&config_map, &DeleteParams::default())
        .await
        .unwrap();
    wait_metric(&op, &applies("missing"), missing + 1.0).await;
    wait_for(
        "the ConfigMap to be back",
        Duration::from_secs(60),
        || async { config_maps.get_opt(&config_map).await.ok()? },
    )
    .await;

    // Prune: the region moves to host networking, the gateway is dropped.
    let pruned = op.metric(PRUNED).await.unwrap();
    let manifest = op.metric(&applies("manifest")).await.unwrap();
    op.set_config(&config(&ns.name, "host", "kura.dev/sim-ingress"));
    let now = wait_metric(&op, PRUNED, pruned + 1.0).await;
    assert!(now > pruned);
    assert!(op.metric(&applies("manifest")).await.unwrap() > manifest);

    // The phase gauge is computed from the cache: it follows a deletion.
    let phases = |body: String| -> f64 {
        body.lines()
            .filter(|l| l.starts_with("kura_instances{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let body = op.get("/metrics").await.unwrap().1;
    assert_eq!(phases(body), 1.0, "one instance");
    instances
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the phase gauge to drop to 0",
        Duration::from_secs(60),
        || async {
            let body = op.get("/metrics").await?.1;
            (phases(body) == 0.0).then_some(())
        },
    )
    .await;
    delete_shared_class(&classes, &ns).await;
}
