//! Two writers, one field (docs/incidents.md #4) against the real control plane:
//! another field manager keeps force-applying a field this operator renders. The
//! operator's policy is explicit — it takes the field back and says so in an
//! Event naming the other manager — and it does not ping-pong: at most three
//! take-backs a minute, then a FieldConflict condition until the window ends.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::ready_instance;

#[tokio::test]
async fn contested_field_is_taken_back_a_bounded_number_of_times() {
    let scenario = ready_instance("conflict").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let applies_before = op.log().matches(" taken by rival").count();

    // The test plays a rival controller: whenever the StatefulSet does not have
    // its 4 replicas, it force-applies them (for 40 s, polling every 200 ms).
    let sts: Api<StatefulSet> = ns.api();
    let rival = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "acme"}, "spec": {"replicas": 4}});
    let started = Instant::now();
    let mut rival_writes = 0;
    while started.elapsed() < Duration::from_secs(40) {
        let current = sts.get("acme").await.unwrap().spec.and_then(|s| s.replicas);
        if current != Some(4) {
            sts.patch(
                "acme",
                &PatchParams::apply("rival").force(),
                &Patch::Apply(&rival),
            )
            .await
            .unwrap();
            rival_writes += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // the rival's own poll interval
    }
    let take_backs = op.log().matches(" taken by rival").count() - applies_before;
    eprintln!(
        "rival wrote {rival_writes} times in 40 s; the operator took the field back {take_backs} times"
    );
    assert!(take_backs >= 1, "the operator takes its field back");
    assert!(
        take_backs <= 3,
        "no ping-pong: at most 3 take-backs a minute, got {take_backs}"
    );

    let status = instances.get("acme").await.unwrap().status.unwrap();
    let cond = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FieldConflict")
        .unwrap_or_else(|| {
            panic!(
                "a FieldConflict condition while contested: conflict {:?}, conditions {:?}",
                status.conflict, status.conditions
            )
        });
    assert!(
        cond.message.contains("rival"),
        "the condition names the other manager: {}",
        cond.message
    );
    let events: Api<Event> = ns.api();
    let notes: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FieldConflict"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("rival")),
        "an Event names the other manager: {notes:?}"
    );
    scenario.finish().await;
}

/// The StatefulSet's FieldConflict Event notes, oldest first.
async fn field_conflict_notes(ns: &crate::support::TestNamespace) -> Vec<String> {
    let events: Api<Event> = ns.api();
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FieldConflict"))
        .filter_map(|e| e.message)
        .collect()
}

/// Names exactly the managers that hold a field the operator renders: one
/// takes `spec.replicas`, another only adds an annotation of its own (which
/// the operator neither renders nor touches). Only the first is named, in the
/// Events, in `status.conflict` and in the FieldConflict condition.
#[tokio::test]
async fn only_the_manager_holding_a_rendered_field_is_named() {
    let scenario = ready_instance("conflict-named").await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let sts: Api<StatefulSet> = ns.api();
    let note = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "acme", "annotations": {"example.com/note": "kept"}}});
    sts.patch(
        "acme",
        &PatchParams::apply("annotator"),
        &Patch::Apply(&note),
    )
    .await
    .unwrap();
    let rival = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "acme"}, "spec": {"replicas": 4}});
    // Two take-backs: the FieldConflict condition is there from the second.
    for n in 1..=2 {
        sts.patch(
            "acme",
            &PatchParams::apply("rival").force(),
            &Patch::Apply(&rival),
        )
        .await
        .unwrap();
        crate::support::wait_for(
            &format!("take-back {n} of spec.replicas"),
            Duration::from_secs(60),
            || async {
                let s = instances.get("acme").await.ok()?.status?;
                let replicas = sts.get("acme").await.ok()?.spec?.replicas;
                (s.conflict.is_some_and(|c| c.take_backs >= n) && replicas != Some(4)).then_some(())
            },
        )
        .await;
    }
    let status = instances.get("acme").await.unwrap().status.unwrap();
    assert_eq!(
        status.conflict.as_ref().unwrap().managers,
        ["rival"],
        "status.conflict names the manager that took a rendered field"
    );
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FieldConflict")
        .unwrap_or_else(|| {
            panic!(
                "a FieldConflict condition after two take-backs: conflict {:?}, conditions {:?}",
                status.conflict, status.conditions
            )
        });
    assert!(
        condition.message.contains("rival") && !condition.message.contains("annotator"),
        "the condition names the rival only: {}",
        condition.message
    );
    // Events are published beside the status write: wait for the rival's.
    let notes = crate::support::wait_for(
        "a FieldConflict Event naming the rival",
        Duration::from_secs(30),
        || async {
            let notes = field_conflict_notes(ns).await;
            notes.iter().any(|n| n.contains("rival")).then_some(notes)
        },
    )
    .await;
    assert!(
        notes.iter().all(|n| !n.contains("annotator")),
        "no Event names the annotator: {notes:?}"
    );
    let annotations = sts.get("acme").await.unwrap().metadata.annotations.unwrap();
    assert_eq!(
        annotations.get("example.com/note").map(String::as_str),
        Some("kept"),
        "the other tool's annotation survives the take-backs"
    );
    scenario.finish().await;
}

/// `kubectl scale` writes `spec.replicas` through the scale subresource, under
/// its own manager: the take-back names it.
#[tokio::test]
async fn a_kubectl_scale_is_attributed_to_its_manager() {
    let scenario = ready_instance("conflict-scale").await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let out = std::process::Command::new(crate::support::kubectl())
        .arg("--kubeconfig")
        .arg(crate::support::kubeconfig_path())
        .args([
            "-n",
            &ns.name,
            "scale",
            "statefulset",
            "acme",
            "--replicas=3",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conflict = crate::support::wait_for(
        "the scale to be taken back",
        Duration::from_secs(60),
        || async { instances.get("acme").await.ok()?.status?.conflict },
    )
    .await;
    assert_eq!(
        conflict.managers,
        ["kubectl (scale subresource)"],
        "status.conflict names kubectl's scale"
    );
    crate::support::wait_for(
        "a FieldConflict Event naming kubectl's scale",
        Duration::from_secs(30),
        || async {
            let notes = field_conflict_notes(ns).await;
            let named = notes
                .iter()
                .any(|n| n.contains("kubectl (scale subresource)"));
            eprintln!("FieldConflict Events: {notes:?}");
            named.then_some(())
        },
    )
    .await;
    scenario.finish().await;
}

/// A new image in the spec is the user's own change: no field was taken from
/// the operator, so nothing is reported as a conflict or counted as a take-back.
#[tokio::test]
async fn a_new_image_in_the_spec_is_no_conflict() {
    let scenario = ready_instance("conflict-upgrade").await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    crate::support::apply_json(
        instances,
        "test",
        crate::operator::instance("acme", "registry.example/kura:2.0.0"),
    )
    .await
    .unwrap();
    let status = crate::support::wait_for(
        "the new image to be applied and Ready",
        Duration::from_secs(60),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            (s.applied_image.as_deref() == Some("registry.example/kura:2.0.0")
                && s.phase == Some(kura_core::api::Phase::Ready))
            .then_some(s)
        },
    )
    .await;
    assert_eq!(status.conflict, None, "no take-back was counted");
    // The upgrade's Applied Event is out, and what is published with it
    // (a FieldConflict would be) follows it at once.
    let events: Api<Event> = ns.api();
    crate::support::wait_for(
        "the upgrade's Applied Event",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?.items;
            let count = |r: &str| {
                list.iter()
                    .filter(|e| e.reason.as_deref() == Some(r))
                    .count()
            };
            (count("Applied") >= 2).then_some(())
        },
    )
    .await;
    let notes = field_conflict_notes(ns).await;
    assert!(notes.is_empty(), "no FieldConflict Event: {notes:?}");
    scenario.finish().await;
}
