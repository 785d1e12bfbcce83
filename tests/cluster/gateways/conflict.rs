//! Two writers, one field, on a gateway's child (issue 22, item 8): someone
//! keeps scaling the gateway's Deployment (`kubectl scale`, as an autoscaler
//! would). The gateway takes `spec.replicas` back as an instance takes its
//! StatefulSet's: at most three times a window, then it holds until the
//! window ends, and it says so: a conflict record and a FieldConflict
//! condition on the KuraGateway naming the other manager, and an Event.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, DeleteParams};

use super::*;
use crate::operator::{Operator, config, instance, wait_ready};
use crate::support::{TestNamespace, apply_json, wait_for};
use kura_core::api::{ConditionStatus, KuraGateway, KuraInstance};
use kura_core::names;
use kura_core::plan::{CONFLICT_WINDOW, MAX_TAKE_BACKS};

/// Far above the seconds a take-back takes (a watch event, at most the
/// 3 s settle after the previous one, an apply): a scale still standing
/// after this long is held, not slow to be taken back.
const TAKE_BACK: Duration = Duration::from_secs(12);

const SCALER: &str = "kubectl (scale subresource)";

fn scale(ns: &TestNamespace, deployment: &str, replicas: i32) {
    let out = std::process::Command::new(crate::support::kubectl())
        .arg("--kubeconfig")
        .arg(crate::support::kubeconfig_path())
        .args(["-n", &ns.name, "scale", "deployment", deployment])
        .arg(format!("--replicas={replicas}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `check` until it answers or `timeout` passes (then `None`).
async fn within<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // the poll interval
    }
}

#[tokio::test]
async fn a_scaled_gateway_is_taken_back_a_bounded_number_of_times_and_reported() {
    let ns = TestNamespace::new("gw-fight").await;
    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();
    wait_ready(&instances, "acme").await;
    let gateway = names::gateway("acme", "r1");
    let gateways: Api<KuraGateway> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    let class = gateways
        .get(&gateway)
        .await
        .unwrap()
        .spec
        .ingress_class_name;
    let replicas = || async { deployments.get(&gateway).await.ok()?.spec?.replicas };
    wait_for("the gateway Deployment at 1 replica", T, || async {
        (replicas().await == Some(1)).then_some(())
    })
    .await;

    // Ten scales at most, each taken back or not: count the reverts.
    let started = Instant::now();
    let mut take_backs = 0;
    let mut held = None;
    for n in 0..10 {
        let want = 2 + n % 2;
        scale(&ns, &gateway, want);
        let reverted = within(TAKE_BACK, || async {
            (replicas().await == Some(1)).then_some(())
        })
        .await;
        if reverted.is_none() {
            held = Some(want);
            break;
        }
        take_backs += 1;
        assert!(
            take_backs <= MAX_TAKE_BACKS,
            "no fight: at most {MAX_TAKE_BACKS} take-backs in the window, the gateway took the \
             replicas back {take_backs} times in {:?}",
            started.elapsed()
        );
    }
    eprintln!(
        "{take_backs} take-backs, then held at {held:?}, after {:?}",
        started.elapsed()
    );
    assert!(take_backs >= 1, "the gateway takes its field back");
    let held = held.expect("a scale is held once the take-backs are spent");

    // Held because the take-backs are spent, and said on the gateway.
    let status = gateways.get(&gateway).await.unwrap().status.unwrap();
    let conflict = status
        .conflict
        .clone()
        .expect("the KuraGateway records the conflict");
    assert_eq!(conflict.take_backs, MAX_TAKE_BACKS, "{conflict:?}");
    assert_eq!(conflict.managers, [SCALER], "the record names the manager");
    let field_conflict = condition(&gateways.get(&gateway).await.unwrap(), "FieldConflict")
        .expect("a FieldConflict condition on the KuraGateway");
    assert_eq!(field_conflict.status, ConditionStatus::True);
    assert!(
        field_conflict.message.contains(SCALER),
        "the condition names the manager: {}",
        field_conflict.message
    );
    wait_for(
        "a FieldConflict Event on the KuraGateway naming the manager",
        T,
        || async {
            let events = event_reasons(&ns.client, &ns.name, &gateway).await;
            events
                .iter()
                .any(|(reason, note)| reason == "FieldConflict" && note.contains(SCALER))
                .then_some(())
        },
    )
    .await;

    // The other value stands until the window ends, then it is taken back.
    let window_start: jiff::Timestamp = conflict.window_start.parse().unwrap();
    let window_end = window_start + jiff::SignedDuration::try_from(CONFLICT_WINDOW).unwrap();
    let until_end = || {
        let left = window_end.duration_since(jiff::Timestamp::now());
        Duration::try_from(left).unwrap_or_default()
    };
    // A second's margin for the operator's clock reading against ours.
    let hold = until_end().saturating_sub(Duration::from_secs(1));
    let reverted_early = within(hold, || async {
        let now = replicas().await;
        (now != Some(held)).then_some(now)
    })
    .await;
    assert_eq!(
        reverted_early, None,
        "the Deployment keeps {held} replicas until the window ends ({window_end})"
    );
    wait_for(
        "the replicas to be taken back after the window",
        until_end() + T,
        || async { (replicas().await == Some(1)).then_some(()) },
    )
    .await;

    drop(op);
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    let _ = classes.delete(&class, &DeleteParams::default()).await;
}
