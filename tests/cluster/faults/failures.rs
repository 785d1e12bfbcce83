//! Errors reach status (docs/incidents.md #2): a webhook that is down, a policy that
//! refuses a deletion, a forced re-apply that is rejected, a status written from
//! the end of time. Each is real admission control of the real apiserver.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::faults::admission_fakes;
use crate::operator::{
    apply_acme, instance, ready_instance, ready_instance_with, scenario, wait_ready,
};
use crate::support::*;
use kura_core::api::{KuraInstance, KuraInstanceStatus};

const T: Duration = Duration::from_secs(90);

/// How long transient failures stay quiet in these tests (the default is a minute).
const REPORT_AFTER: &str = "--transient-report-after=4s";

fn ready_reason(s: &KuraInstanceStatus) -> Option<(String, String, String)> {
    let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((
        format!("{:?}", c.status),
        c.reason.clone(),
        c.message.clone(),
    ))
}

async fn event_notes(ns: &TestNamespace, reason: &str) -> Vec<String> {
    ns.api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// Writes in the audit log to `resource` in `ns` since `since`, by anyone but
/// the control plane (see `support::mutations_since`).
fn writes_to(ns: &str, since: &str, resource: &str) -> usize {
    mutations_since(ns, since)
        .iter()
        .filter(|m| m.split(' ').nth(1) == Some(resource))
        .count()
}

#[tokio::test]
async fn a_webhook_that_is_down_is_reported_and_each_retry_sends_only_what_failed() {
    let scenario = ready_instance_with("webhook-down", &[REPORT_AFTER]).await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let before = wait_ready(instances, "acme").await;

    let down = admission_fakes::webhook_down(&ns.name);
    let sts: Api<StatefulSet> = ns.api();
    wait_for("the webhook to be enforced", T, || async {
        admission_fakes::statefulset_refused(&sts, 1, "x:1")
            .await
            .then_some(())
    })
    .await;
    let since = jiff::Timestamp::now().to_string();
    bump_image_of(instances, "acme", "registry.example/kura:2.0.0").await;

    // Reported, after the quiet window, naming the object, the verb and the
    // server's message; the old revision is no longer claimed Ready.
    let failed = wait_for("the failure in status", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let (status, reason, message) = ready_reason(&s)?;
        (status == "False" && reason == "ApplyFailed").then_some((s, message))
    })
    .await;
    let (status, message) = failed;
    assert!(
        message.contains("apply StatefulSet") && message.contains("webhook"),
        "names the object, the verb and the server's message: {message}"
    );
    assert_ne!(status.applied_revision, status.desired_revision);
    assert_eq!(status.applied_revision, before.applied_revision);
    wait_for("an ApplyFailed Event", T, || async {
        let notes = event_notes(ns, "ApplyFailed").await;
        notes.iter().any(|n| n.contains("webhook")).then_some(())
    })
    .await;
    let failures = op
        .metric("kura_failures_total{stage=\"apply\",class=\"transient\"}")
        .await
        .unwrap();
    assert!(failures >= 1.0, "the failure is counted: {failures}");

    // Retries went on (transient: fast), each sending only the StatefulSet:
    // the other children of the new revision went through on the first try.
    op.wait_for_log_count("apply failed", 2, T).await;
    let sts_writes = writes_to(&ns.name, &since, "statefulsets");
    let config_map_writes = writes_to(&ns.name, &since, "configmaps");
    eprintln!("statefulset writes {sts_writes}, configmap writes {config_map_writes}");
    assert!(sts_writes >= 3, "the StatefulSet is retried: {sts_writes}");
    assert!(
        config_map_writes <= 1,
        "children that went through are not sent again: {config_map_writes} ConfigMap writes"
    );

    // The webhook comes back: the instance converges with no other step.
    down.lift();
    let after = wait_ready(instances, "acme").await;
    assert_ne!(after.applied_revision, before.applied_revision);
    scenario.finish().await;
}

#[tokio::test]
async fn a_policy_that_refuses_a_deletion_is_reported_and_the_object_stays_in_the_inventory() {
    let scenario = scenario("prune-denied", &[]).await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let mut with_alias = instance("acme", "registry.example/kura:1.0.0");
    with_alias["spec"]["aliases"] = json!(["alias.example.com"]);
    apply_json(instances, "test", with_alias).await.unwrap();
    let before = wait_ready(instances, "acme").await;
    let alias = before
        .inventory
        .iter()
        .find(|e| e.kind == "Ingress" && e.name != "acme")
        .expect("the alias Ingress is inventoried")
        .name
        .clone();

    let policy = admission_fakes::deny(
        &ns.name,
        "networking.k8s.io",
        "ingresses",
        &["DELETE"],
        "true",
        "ingresses are not deleted here",
    );
    let ingresses: Api<Ingress> = ns.api();
    wait_for("the policy to be enforced", T, || async {
        let dry = kube::api::DeleteParams {
            dry_run: true,
            ..Default::default()
        };
        ingresses.delete(&alias, &dry).await.is_err().then_some(())
    })
    .await;

    // Remove the alias: the new revision applies, its prune is refused.
    apply_acme(instances).await;
    let status = wait_for("the refused deletion in status", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let (status, reason, _) = ready_reason(&s)?;
        (status == "False" && reason == "PruneFailed").then_some(s)
    })
    .await;
    let (_, _, message) = ready_reason(&status).unwrap();
    assert!(
        message.contains(&format!("delete Ingress {}/{alias}", ns.name))
            && message.contains("not deleted here"),
        "names the object, the verb and the policy's message: {message}"
    );
    // What is live and what status says agree: the new revision is applied,
    // and the Ingress that is still there is still in the inventory.
    assert_eq!(status.applied_revision, status.desired_revision);
    assert!(
        status.inventory.iter().any(|e| e.name == alias),
        "the undeleted Ingress stays inventoried: {:?}",
        status.inventory
    );
    assert!(ingresses.get_opt(&alias).await.unwrap().is_some());
    wait_for("a PruneFailed Event", T, || async {
        (!event_notes(ns, "PruneFailed").await.is_empty()).then_some(())
    })
    .await;

    // The policy goes: the next retry deletes it and the instance is Ready.
    policy.lift();
    let after = wait_for("the retried prune", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let ready = ready_reason(&s)?.0 == "True";
        (ready && !s.inventory.iter().any(|e| e.name == alias)).then_some(s)
    })
    .await;
    assert!(ingresses.get_opt(&alias).await.unwrap().is_none());
    assert_eq!(after.applied_revision, after.desired_revision);
    scenario.finish().await;
}

#[tokio::test]
async fn a_forced_reapply_that_is_rejected_stays_visible_until_one_succeeds() {
    let scenario = ready_instance("force-fails").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);

    // Every write of a StatefulSet here is refused (a change freeze).
    let freeze = admission_fakes::deny(
        &ns.name,
        "apps",
        "statefulsets",
        &["CREATE", "UPDATE"],
        "true",
        "change freeze",
    );
    let sts: Api<StatefulSet> = ns.api();
    wait_for("the freeze to be enforced", T, || async {
        admission_fakes::statefulset_refused(&sts, 1, "x:1")
            .await
            .then_some(())
    })
    .await;
    let annotate =
        |token: &str| json!({"metadata": {"annotations": {"kura.dev/reapply-at": token}}});
    instances
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(&annotate("t1")),
        )
        .await
        .unwrap();
    let failed = wait_for("the rejected force in status", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (ready_reason(&s)?.1 == "ApplyFailed").then_some(s)
    })
    .await;
    assert_ne!(
        failed.last_handled_reapply_at.as_deref(),
        Some("t1"),
        "a force whose apply failed is not handled"
    );
    // Passes go by (resync 3 s): the failure stays visible, never Ready again.
    op.wait_for_log_count("apply failed", 2, T).await;
    let s = instances.get("acme").await.unwrap().status.unwrap();
    assert_eq!(ready_reason(&s).unwrap().0, "False", "{:?}", s.conditions);
    assert_ne!(s.last_handled_reapply_at.as_deref(), Some("t1"));

    // The freeze ends: the force goes through, acknowledged, Ready again.
    freeze.lift();
    wait_for("the force to be handled", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.last_handled_reapply_at.as_deref() == Some("t1") && ready_reason(&s)?.0 == "True")
            .then_some(())
    })
    .await;
    scenario.finish().await;
}

#[tokio::test]
async fn a_status_from_the_end_of_time_neither_crashes_nor_wedges_the_operator() {
    let mut far = scenario("far-future", &[]).await;
    let instances = far.instances.clone();
    for name in ["acme", "other"] {
        apply_json(
            &instances,
            "test",
            instance(name, "registry.example/kura:1.0.0"),
        )
        .await
        .unwrap();
        wait_ready(&instances, name).await;
    }
    // Someone with access writes times at the end of what RFC 3339 holds (and
    // of what the operator's time type holds, a day earlier).
    let (near_end, beyond) = ("9999-12-30T21:59:59Z", "9999-12-31T23:59:59Z");
    let revision = instances
        .get("acme")
        .await
        .unwrap()
        .status
        .unwrap()
        .desired_revision
        .unwrap();
    let status = json!({"status": {
        "conflict": {"takeBacks": 9_000_000_000_i64, "windowStart": near_end, "managers": ["x"]},
        "retry": {"failures": 9_000_000_000_i64, "inputsKey": format!("{revision}/"),
                  "lastError": "x", "lastFailureTime": beyond},
    }});
    instances
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    // Read at start-up too: a restart must not turn it into a crash loop.
    far.op.restart(&[]);
    // A change that must be reconciled, on both instances.
    for name in ["acme", "other"] {
        bump_image_of(&instances, name, "registry.example/kura:2.0.0").await;
    }
    for name in ["acme", "other"] {
        wait_for("the new image to be applied", T, || async {
            let s = instances.get(name).await.ok()?.status?;
            (s.applied_image.as_deref() == Some("registry.example/kura:2.0.0")).then_some(())
        })
        .await;
        wait_ready(&instances, name).await;
    }
    assert!(
        far.op.alive(),
        "the operator is still running:\n{}",
        far.op.log()
    );
    assert!(!far.op.log().contains("panicked"), "no reconcile panicked");
    far.finish().await;
}

async fn bump_image_of(instances: &Api<KuraInstance>, name: &str, image: &str) {
    apply_json(instances, "test", instance(name, image))
        .await
        .unwrap();
}
