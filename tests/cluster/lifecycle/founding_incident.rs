//! docs/incidents.md #1, replayed against the real control plane: an instance wedged
//! in activation behind a dedicated gateway is re-applied when the operator
//! configuration moves its region to the shared class — with no image change and
//! no manual step — and the orphaned gateway is garbage-collected.

use std::time::Duration;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::operator::{Operator, config, instance};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance, Phase};

const IMAGE: &str = "registry.example/kura:1.0.0";

#[tokio::test]
async fn wedged_dedicated_instance_moves_to_shared_class_on_config_change() {
    let ns = TestNamespace::new("founding").await;
    // The shared class is served by the simulated ingress controller (kura-sim
    // plays the region's ingress controller); the dedicated gateway's controller
    // name is served by nothing, so its ingresses never get an address: the wedge.
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    let shared = format!("shared-{}", ns.name);
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": shared, "labels": {"kura.dev/test": ns.name}},
                "spec": {"controller": "kura.dev/sim-ingress"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let op = Operator::start(
        &ns.name,
        &config(&ns.name, "cloud", "example.com/absent-controller"),
    );
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();

    // Wedged: applied, waiting for an address that can never come, and saying why.
    let wedged = wait_for(
        "the instance to wedge in activation",
        Duration::from_secs(60),
        || async {
            let i = instances.get("acme").await.ok()?;
            let s = i.status?;
            let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
            (s.phase == Some(Phase::Activating) && ready.reason == "IngressNoAddress")
                .then_some((s.clone(), ready.message.clone()))
        },
    )
    .await;
    let (wedged_status, message) = wedged;
    assert!(
        message.contains("has no address") && message.contains("kura-gw."),
        "the reason names the object and cause: {message}"
    );
    let gateways: Api<KuraGateway> = ns.api();
    assert_eq!(
        gateways
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1,
        "a dedicated gateway exists"
    );

    // Negative control: while wedged and nothing changes, repeated reconciles apply nothing.
    let applies_when_wedged = op.log().matches("outcome=\"applied\"").count();
    assert_eq!(
        applies_when_wedged,
        1,
        "one apply brought it here: {}",
        op.log()
    );
    op.wait_for_log_count("outcome=\"converged\"", 3, Duration::from_secs(60))
        .await;
    assert_eq!(
        op.log().matches("outcome=\"applied\"").count(),
        applies_when_wedged,
        "no apply while wedged: {}",
        op.log()
    );
    let still = instances.get("acme").await.unwrap().status.unwrap();
    assert_eq!(
        still.applied_revision, wedged_status.applied_revision,
        "the revision is unchanged without a config change"
    );

    // A force re-apply while wedged is acted on and acknowledged (the wedge stays:
    // the class still has no controller).
    let force =
        serde_json::json!({"metadata": {"annotations": {"kura.dev/reapply-at": "while-wedged"}}});
    instances
        .patch(
            "acme",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&force),
        )
        .await
        .unwrap();
    wait_for(
        "the force token to be acknowledged while wedged",
        Duration::from_secs(60),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            (s.last_handled_reapply_at.as_deref() == Some("while-wedged")).then_some(())
        },
    )
    .await;
    assert_eq!(
        op.log().matches("outcome=\"applied\"").count(),
        2,
        "the force token re-applied once"
    );

    // The fix: the region becomes a host-network region (shared class), image unchanged.
    op.set_config(&config(&ns.name, "host", "example.com/absent-controller"));
    let ingresses: Api<Ingress> = ns.api();
    let ready = wait_for(
        "the instance to become Ready on the shared class",
        Duration::from_secs(90),
        || async {
            let i = instances.get("acme").await.ok()?;
            let s = i.status?;
            (s.phase == Some(Phase::Ready)).then_some(s)
        },
    )
    .await;
    assert_ne!(
        ready.applied_revision, wedged_status.applied_revision,
        "the rendered change is a new revision"
    );
    assert_eq!(
        ready.applied_image.as_deref(),
        Some(IMAGE),
        "no image change was needed"
    );
    let ing = ingresses.get("acme").await.unwrap();
    assert_eq!(
        ing.spec.unwrap().ingress_class_name.as_deref(),
        Some(shared.as_str())
    );
    wait_empty(
        "the orphaned KuraGateway to be deleted",
        Duration::from_secs(60),
        &gateways,
    )
    .await;
    let _ = classes.delete(&shared, &Default::default()).await;
}
