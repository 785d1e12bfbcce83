//! Drift against the real control plane: a deleted child comes back, an
//! out-of-band edit of a field the operator renders is restored, a field another
//! manager owns survives a re-apply (docs/incidents.md #4), and a change that does not
//! concern the pods (the ingress class) does not roll them.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator::{config, ready_instance};
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn replicas(sts: &StatefulSet) -> Option<i32> {
    sts.spec.as_ref().and_then(|s| s.replicas)
}

#[tokio::test]
async fn drift_is_repaired_and_foreign_fields_survive() {
    let scenario = ready_instance("drift").await;
    let (op, instances, ns) = (&scenario.op, &scenario.instances, &scenario.ns);

    // A deleted child is recreated.
    let cms: Api<ConfigMap> = ns.api();
    let old_uid = cms.get("acme-config").await.unwrap().metadata.uid;
    cms.delete("acme-config", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the deleted ConfigMap to be recreated", T, || async {
        let cm = cms.get_opt("acme-config").await.ok()??;
        (cm.metadata.uid != old_uid).then_some(())
    })
    .await;

    // An out-of-band edit (an Update by another manager) of a field the operator
    // renders is taken back.
    let sts: Api<StatefulSet> = ns.api();
    let edit = json!({"spec": {"replicas": 3}});
    sts.patch(
        "acme",
        &PatchParams {
            field_manager: Some("intruder".into()),
            ..Default::default()
        },
        &Patch::Merge(&edit),
    )
    .await
    .unwrap();
    wait_for("spec.replicas to be restored to 1", T, || async {
        (replicas(&sts.get("acme").await.ok()?) == Some(1)).then_some(())
    })
    .await;

    // An annotation another manager applied survives a forced re-apply.
    let services: Api<Service> = ns.api();
    let note = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "acme", "annotations": {"example.com/owner-note": "keep me"}}});
    services
        .patch(
            "acme",
            &PatchParams::apply("other-tool"),
            &Patch::Apply(&note),
        )
        .await
        .unwrap();
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "drift-1"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    wait_for("the forced re-apply to be acknowledged", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.last_handled_reapply_at.as_deref() == Some("drift-1")).then_some(())
    })
    .await;
    let svc = services.get("acme").await.unwrap();
    assert_eq!(
        svc.metadata
            .annotations
            .unwrap_or_default()
            .get("example.com/owner-note")
            .map(String::as_str),
        Some("keep me"),
        "another manager's annotation must survive the re-apply"
    );

    // Changing only the ingress class (the region's shared class) is a new
    // revision, but the pod template is untouched: no rollout.
    let before = sts.get("acme").await.unwrap();
    let revision_before = instances
        .get("acme")
        .await
        .unwrap()
        .status
        .unwrap()
        .applied_revision;
    let other = format!("other-{}", ns.name);
    scenario
        .classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
            "metadata": {"name": other}, "spec": {"controller": "kura.dev/sim-ingress"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    op.set_config(
        &config(&ns.name, "host", "example.com/none")
            .replace(&format!("shared-{}", ns.name), &other),
    );
    let ingresses: Api<Ingress> = ns.api();
    wait_for("the ingress to move to the new class", T, || async {
        let ing = ingresses.get("acme").await.ok()?;
        (ing.spec?.ingress_class_name.as_deref() == Some(other.as_str())).then_some(())
    })
    .await;
    // The status lands after the apply: wait for it to name the new class.
    let after_status = wait_for("the status to record the new class", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let on_new = s.gateway.as_ref()?.ingress_class_name == other;
        (on_new && s.applied_revision == s.desired_revision).then_some(s)
    })
    .await;
    assert_ne!(
        after_status.applied_revision, revision_before,
        "the class change is a new revision"
    );
    let after = sts.get("acme").await.unwrap();
    assert_eq!(
        after.metadata.generation, before.metadata.generation,
        "the StatefulSet spec did not change: no rollout"
    );
    let hash = |s: &StatefulSet| {
        s.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap()["kura.dev/pod-template-hash"]
            .clone()
    };
    assert_eq!(hash(&after), hash(&before));
    let _ = scenario.classes.delete(&other, &Default::default()).await;
    scenario.finish().await;
}
