//! Force re-apply, and a crash between apply and the status write, against the
//! real control plane.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{
    Operator, apply_acme, config, delete_shared_class, ready_instance, shared_class, wait_ready,
};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

#[tokio::test]
async fn force_annotation_reapplies_and_is_acknowledged() {
    let scenario = ready_instance("force").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let applies_before = op.log().matches("outcome=\"applied\"").count();

    let patch =
        json!({"metadata": {"annotations": {"kura.dev/reapply-at": "2026-11-29T10:00:00Z"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let status = wait_for(
        "the force token to be acknowledged",
        Duration::from_secs(60),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            (s.last_handled_reapply_at.as_deref() == Some("2026-11-29T10:00:00Z")).then_some(s)
        },
    )
    .await;
    assert_eq!(status.phase, Some(Phase::Ready));
    assert_eq!(
        op.log().matches("outcome=\"applied\"").count(),
        applies_before + 1,
        "everything matched, yet it re-applied once"
    );
    let events: Api<Event> = ns.api();
    // The second Applied of the instance, minutes after the first, says why it
    // applied; folded into the first Event's series (as a long-lived kube
    // Recorder does within six minutes, its key ignoring the note) it would
    // still read "initial", with a count of 2.
    wait_for(
        "a ForcedReapply Event and an Applied Event saying why (the audit trail)",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            let has = |reason: &str, note: &str| {
                list.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message.as_deref().is_some_and(|m| m.contains(note))
                })
            };
            (has("ForcedReapply", "kura.dev/reapply-at") && has("Applied", ": forced"))
                .then_some(())
        },
    )
    .await;
    scenario.finish().await;
}

#[tokio::test]
async fn crash_between_apply_and_status_write_recovers() {
    let ns = TestNamespace::new("crash").await;
    let classes = shared_class(&ns).await;
    // The fault hook exits the process right after apply and prune, before status.
    let mut op = Operator::start_with_env(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &[("KURA_FAULT_EXIT_AFTER_APPLY", "1")],
    );
    let instances: Api<KuraInstance> = ns.api();
    apply_acme(&instances).await;
    let exit = op.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(exit.code(), Some(137), "the fault hook fired");
    let sts: Api<StatefulSet> = ns.api();
    assert!(
        sts.get_opt("acme").await.unwrap().is_some(),
        "children were applied before the crash"
    );
    let before = instances.get("acme").await.unwrap();
    assert!(
        before.status.and_then(|s| s.applied_revision).is_none(),
        "the status write never happened"
    );

    op.restart(&[]);
    let status = wait_ready(&instances, "acme").await;
    assert_eq!(
        status.inventory.len(),
        7,
        "one inventory entry per child: {:?}",
        status.inventory
    );
    let all = sts.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 1, "no duplicate workload");
    delete_shared_class(&classes, &ns).await;
}

/// A crash between the apply of a change and its status write: the children
/// carry the new revision with the fingerprint of the killed process's own
/// apply (the change adds fields: the region's default resources), while the
/// status still records the old revision's. The restarted process records
/// the apply and sends nothing again: its own fields are no other manager's
/// drift. Before, every child whose fields the change had added read as
/// "field-drift" and was written a second time (after a shard's failover, by
/// a second replica: a double write of one revision).
#[tokio::test]
async fn a_crash_after_a_changes_apply_is_not_taken_for_drift() {
    let mut scenario = ready_instance("crash-change").await;
    let instances = scenario.instances.clone();
    let ns = scenario.ns.name.clone();
    let before = instances.get("acme").await.unwrap().status.unwrap();
    scenario.op.restart(&[("KURA_FAULT_EXIT_AFTER_APPLY", "1")]);
    scenario.op.set_config(&format!(
        "{}    defaultResources:\n      requests: {{cpu: 100m}}\n",
        config(&ns, "host", "example.com/none")
    ));
    let exit = scenario.op.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(exit.code(), Some(137), "the fault hook fired");
    let sts: Api<StatefulSet> = scenario.ns.api();
    let live = sts.get("acme").await.unwrap();
    let requests = live.spec.unwrap().template.spec.unwrap().containers[0]
        .resources
        .clone()
        .and_then(|r| r.requests);
    assert!(
        requests.is_some_and(|r| r.contains_key("cpu")),
        "the change was applied before the crash"
    );
    let recorded = instances.get("acme").await.unwrap().status.unwrap();
    assert_eq!(
        recorded.applied_revision, before.applied_revision,
        "the status write of the change never happened"
    );

    scenario.op.restart(&[]);
    wait_for("the change recorded", Duration::from_secs(90), || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.applied_revision != before.applied_revision
            && s.applied_revision == s.desired_revision
            && s.phase == Some(Phase::Ready))
        .then_some(())
    })
    .await;
    let drift = scenario
        .op
        .metric("kura_applies_total{reason=\"field-drift\"}")
        .await
        .unwrap();
    assert_eq!(
        drift, 0.0,
        "the restarted process took its own apply for drift"
    );
    scenario.finish().await;
}
