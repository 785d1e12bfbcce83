//! Drift in a gateway's children is repaired as it happens: the operator runs
//! with a resync of 10 minutes, so only the watches on the children can bring
//! each repair within seconds.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, Options, config, instance, wait_ready};
use crate::support::{TestNamespace, apply_json, wait_for};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::names;

/// Far below the 10 minute resync.
const REPAIR: Duration = Duration::from_secs(30);

fn by(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    }
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

#[tokio::test]
async fn drift_in_a_gateways_children_is_repaired_at_once() {
    let ns = TestNamespace::new("gw-drift").await;
    let options = Options {
        resync: Some("10m".into()),
        ..Options::default()
    };
    let op = Operator::start_with(&ns.name, &config(&ns.name, "cloud", SIM), &[], options);
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();
    wait_ready(&instances, "acme").await;
    let gateway = names::gateway("acme", "r1");
    let class = Api::<KuraGateway>::namespaced(ns.client.clone(), &ns.name)
        .get(&gateway)
        .await
        .unwrap()
        .spec
        .ingress_class_name;
    let deployments: Api<Deployment> = ns.api();
    let rendered_image = image(&deployments.get(&gateway).await.unwrap());

    // Scaled to zero by someone else.
    deployments
        .patch(
            &gateway,
            &by("scaler"),
            &Patch::Merge(&json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    wait_for(
        "the gateway Deployment to be scaled back to 1",
        REPAIR,
        || async {
            let d = deployments.get(&gateway).await.ok()?;
            (d.spec?.replicas == Some(1)).then_some(())
        },
    )
    .await;

    // Its image changed by someone else.
    let edit = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                       "value": "registry.example/other-gateway:6.6.6"}]);
    deployments
        .patch(
            &gateway,
            &by("editor"),
            &Patch::Json::<()>(serde_json::from_value(edit).unwrap()),
        )
        .await
        .unwrap();
    wait_for("the gateway image to be restored", REPAIR, || async {
        (image(&deployments.get(&gateway).await.ok()?) == rendered_image).then_some(())
    })
    .await;

    // Its Service deleted.
    let services: Api<Service> = ns.api();
    let old = services.get(&gateway).await.unwrap().metadata.uid;
    services
        .delete(&gateway, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the gateway Service to be recreated", REPAIR, || async {
        let s = services.get_opt(&gateway).await.ok()??;
        (s.metadata.uid != old).then_some(())
    })
    .await;

    // Its IngressClass (cluster-scoped, not owned) deleted.
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    let old = classes.get(&class).await.unwrap().metadata.uid;
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the gateway IngressClass to be recreated",
        REPAIR,
        || async {
            let c = classes.get_opt(&class).await.ok()??;
            (c.metadata.uid != old).then_some(())
        },
    )
    .await;

    // Its controller's rights: the RoleBinding (owned) and the
    // ClusterRoleBinding (cluster-scoped, named as the class) deleted.
    let role_bindings: Api<RoleBinding> = ns.api();
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    let old_rb = role_bindings.get(&gateway).await.unwrap().metadata.uid;
    let old_crb = cluster_bindings.get(&class).await.unwrap().metadata.uid;
    role_bindings
        .delete(&gateway, &DeleteParams::default())
        .await
        .unwrap();
    cluster_bindings
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the gateway's bindings to be recreated", REPAIR, || async {
        let rb = role_bindings.get_opt(&gateway).await.ok()??;
        let crb = cluster_bindings.get_opt(&class).await.ok()??;
        (rb.metadata.uid != old_rb && crb.metadata.uid != old_crb).then_some(())
    })
    .await;

    // Each repair is on record.
    let reasons = event_reasons(&ns.client, &ns.name, &gateway).await;
    for needle in [
        "fields of Deployment",
        "missing Service",
        "missing IngressClass",
        "missing RoleBinding",
        "missing ClusterRoleBinding",
    ] {
        assert!(
            reasons.iter().any(|(_, note)| note.contains(needle)),
            "an Event says {needle:?}: {reasons:?}"
        );
    }
    // The class is cluster-scoped: gone with the operator stopped, for good.
    drop(op);
    let _ = classes.delete(&class, &DeleteParams::default()).await;
    let _ = cluster_bindings
        .delete(&class, &DeleteParams::default())
        .await;
}
