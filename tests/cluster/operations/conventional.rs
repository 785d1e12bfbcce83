//! The conventional metric families (controller-runtime's names, labels and
//! buckets) against the real operator: reconciles, the work queue, the REST
//! client's requests, leader election; then a reconcile hung on a held
//! request shows as the oldest reconcile in progress, and a held watch as a
//! stale resource, both back to normal once the requests go through.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::*;
use crate::faults::api_proxy::ApiProxy;
use crate::operator::{Operator, Options, config, delete_shared_class, sample, shared_class};
use kura_core::api::KuraInstance;

const INSTANCE: &str = "{controller=\"kurainstance\"}";
const QUEUE: &str = "{name=\"kurainstance\",controller=\"kurainstance\"}";

/// `series` once it is exported and `accept` holds of it.
async fn wait_series(op: &Operator, series: &str, what: &str, accept: impl Fn(f64) -> bool) -> f64 {
    wait_for(
        &format!("{series} {what}"),
        Duration::from_secs(90),
        || async {
            let body = op.get("/metrics").await?.1;
            sample(&body, series).filter(|v| accept(*v))
        },
    )
    .await
}

#[tokio::test]
async fn conventional_families_follow_reconciles_and_show_a_hung_reconcile_and_watch() {
    let ns = TestNamespace::new("ops-conventional").await;
    let classes = shared_class(&ns).await;
    let proxy = ApiProxy::start().await;
    let options = Options {
        kubeconfig: Some(proxy.kubeconfig(&scratch_dir(&ns.name))),
        lease_duration: Some(Duration::from_secs(15)),
        // A held watch is noticed at its next start.
        args: vec!["--watch-timeout=5s".into()],
        ..Options::default()
    };
    let op = Operator::start_with(
        &ns.name,
        &config(&ns.name, "host", "kura.dev/sim-ingress"),
        &[],
        options,
    );
    let lease = "leader_election_master_status{name=\"kura-operator\"}";
    wait_series(&op, lease, "= 1", |v| v == 1.0).await;
    let instances: Api<KuraInstance> = ns.api();
    create_acme(&instances, Duration::from_secs(90)).await;
    // Every reconcile of the operator requeues itself (the resync).
    let requeued =
        "controller_runtime_reconcile_total{controller=\"kurainstance\",result=\"requeue_after\"}";
    wait_series(&op, requeued, ">= 1", |v| v >= 1.0).await;
    let body = op.get("/metrics").await.unwrap().1;
    let at_least_one = [
        format!("controller_runtime_reconcile_time_seconds_count{INSTANCE}"),
        "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"kurainstance\"}"
            .to_string(),
        format!("workqueue_adds_total{QUEUE}"),
        format!("workqueue_queue_duration_seconds_count{QUEUE}"),
        format!("workqueue_work_duration_seconds_count{QUEUE}"),
        format!(
            "rest_client_requests_total{{code=\"200\",method=\"PATCH\",host=\"127.0.0.1:{}\"}}",
            proxy.port
        ),
        format!(
            "rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"127.0.0.1:{}\"}}",
            proxy.port
        ),
    ];
    for series in &at_least_one {
        assert!(
            sample(&body, series).is_some_and(|v| v >= 1.0),
            "{series} in\n{body}"
        );
    }
    for (series, expected) in [
        (
            format!("controller_runtime_max_concurrent_reconciles{INSTANCE}"),
            16.0,
        ),
        (
            format!("controller_runtime_reconcile_errors_total{INSTANCE}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_panics_total{INSTANCE}"),
            0.0,
        ),
        (format!("workqueue_retries_total{QUEUE}"), 0.0),
        (
            "controller_runtime_reconcile_total{controller=\"kuragateway\",result=\"error\"}"
                .into(),
            0.0,
        ),
    ] {
        assert_eq!(
            sample(&body, &series),
            Some(expected),
            "{series} in\n{body}"
        );
    }
    let fresh = |resource: &str| format!("kura_watch_staleness_seconds{{resource=\"{resource}\"}}");
    for resource in [
        "kurainstances",
        "statefulsets",
        "configmaps",
        "ingressclasses",
    ] {
        let staleness = sample(&body, &fresh(resource));
        assert!(
            staleness.is_some_and(|s| s < 30.0),
            "{resource}: {staleness:?}"
        );
    }

    // The StatefulSets API hangs: a forced re-apply waits on its StatefulSet
    // (up to the client's 30 s response bound), and the StatefulSet watch,
    // restarted every 5 s, gets no answer.
    proxy.stall(Some("/statefulsets"));
    let patch =
        json!({"metadata": {"annotations": {"kura.dev/reapply-at": "2026-12-01T12:00:00Z"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let oldest = format!("kura_reconcile_oldest_in_progress_seconds{INSTANCE}");
    wait_series(&op, &oldest, ">= 5", |v| v >= 5.0).await;
    let workers = format!("controller_runtime_active_workers{INSTANCE}");
    assert!(op.metric(&workers).await.unwrap() >= 1.0);
    let unfinished = format!("workqueue_unfinished_work_seconds{QUEUE}");
    assert!(op.metric(&unfinished).await.unwrap() >= 5.0);
    wait_series(&op, &fresh("statefulsets"), ">= 15", |v| v >= 15.0).await;
    assert!(
        op.metric(&fresh("kurainstances")).await.unwrap() < 15.0,
        "only the held resource is stale"
    );

    proxy.stall(None);
    wait_series(&op, &oldest, "back to 0", |v| v == 0.0).await;
    wait_series(&op, &fresh("statefulsets"), "< 10 again", |v| v < 10.0).await;
    delete_shared_class(&classes, &ns).await;
}
