//! Two writers, one field (INCIDENTS.md #4) against the real control plane:
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
        .expect("a FieldConflict condition while contested");
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
