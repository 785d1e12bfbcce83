//! Image drift, bounded: an admission policy that pins the tag to its digest
//! runs the desired image (no endless re-apply), and a second writer of the
//! image gets as many take-backs as any other contested field, then a held,
//! reported conflict naming it.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::faults::admission_fakes;
use crate::operator::{apply_acme, instance, ready_instance, scenario, wait_ready};
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn running_image(sts: &StatefulSet) -> Option<String> {
    sts.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

#[tokio::test]
async fn a_policy_pinning_the_tag_to_its_digest_does_not_make_drift_permanent() {
    let scenario = scenario("pinned", &[]).await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let digest = "b".repeat(64);
    let _pin = admission_fakes::pin_images(&ns.name, &digest);
    // A new policy takes a moment to be enforced: wait until a dry-run shows it.
    let sts: Api<StatefulSet> = ns.api();
    wait_for("the policy to be enforced", T, || async {
        let dry = PatchParams::apply("probe").dry_run();
        let probe = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "probe"},
            "spec": {"serviceName": "x", "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
        let out = sts.patch("probe", &dry, &Patch::Apply(&probe)).await.ok()?;
        running_image(&out)?.contains("@sha256:").then_some(())
    })
    .await;
    apply_acme(instances).await;
    wait_ready(instances, "acme").await;
    let pinned = running_image(&sts.get("acme").await.unwrap()).unwrap();
    assert_eq!(
        pinned,
        format!("registry.example/kura:1.0.0@sha256:{digest}"),
        "the policy is in force (this test plays an image-policy controller)"
    );

    // Several resyncs (3 s each) go by: no apply, no write of the StatefulSet.
    let since = jiff::Timestamp::now().to_string();
    let applies = op.log().matches(" applied ").count();
    op.wait_for_log_count("outcome=\"converged\"", 4, T).await;
    let sts_writes = mutations_since(&ns.name, &since)
        .iter()
        .filter(|m| m.contains("statefulsets acme"))
        .count();
    assert_eq!(
        op.log().matches(" applied ").count(),
        applies,
        "no apply for an image the policy pinned"
    );
    assert_eq!(sts_writes, 0, "the pinned StatefulSet is left alone");
    scenario.finish().await;
}

#[tokio::test]
async fn a_second_writer_of_the_image_gets_bounded_take_backs_and_is_named() {
    let scenario = ready_instance("rival-writer").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);
    let sts: Api<StatefulSet> = ns.api();
    // Applies whose reasons include the image (old and new wording alike).
    let image_applies = || {
        op.log()
            .lines()
            .filter(|l| l.contains(" applied ") && l.contains("reasons=") && l.contains("image"))
            .count()
    };
    let take_backs_before = image_applies();

    // The test plays a second deployer: whenever the image is not its own, it
    // sets it, as `kubectl set image` does (an update under its own manager),
    // for 40 s, polling every 200 ms.
    let rival_image = "registry.example/kura:rival";
    let started = Instant::now();
    let mut rival_writes = 0;
    while started.elapsed() < Duration::from_secs(40) {
        let current = sts.get("acme").await.unwrap();
        if running_image(&current).as_deref() != Some(rival_image) {
            let patch = json!({"spec": {"template": {"spec": {"containers": [
                {"name": "kura", "image": rival_image}]}}}});
            sts.patch(
                "acme",
                &PatchParams {
                    field_manager: Some("kubectl-set".into()),
                    ..Default::default()
                },
                &Patch::Strategic(&patch),
            )
            .await
            .unwrap();
            rival_writes += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // the rival's own poll interval
    }
    let take_backs = image_applies() - take_backs_before;
    eprintln!(
        "rival wrote {rival_writes} times in 40 s; the operator took the image back {take_backs} times"
    );
    assert!(take_backs >= 1, "the operator takes its image back");
    assert!(
        take_backs <= 3,
        "no ping-pong of pod rollouts: at most 3 take-backs a minute, got {take_backs}"
    );
    let status = instances.get("acme").await.unwrap().status.unwrap();
    let conflict = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FieldConflict")
        .expect("a FieldConflict condition while contested");
    assert!(
        conflict.message.contains("kubectl-set"),
        "names the other writer: {}",
        conflict.message
    );
    // A user's change is never held by the conflict window.
    apply_json(
        instances,
        "test",
        instance("acme", "registry.example/kura:3.0.0"),
    )
    .await
    .unwrap();
    wait_for("the user's image", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.applied_image.as_deref() == Some("registry.example/kura:3.0.0")).then_some(())
    })
    .await;
    scenario.finish().await;
}
