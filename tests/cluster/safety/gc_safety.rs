//! Rollout garbage collection deletes only what it should, against the real
//! control plane: an unlabelled object (even one that was once in the inventory),
//! the cache's PersistentVolumeClaims and a gateway another instance or a live
//! Ingress still uses all survive every rollout; an orphaned gateway and its
//! IngressClass go.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator::{Operator, config, delete_shared_class, shared_class, wait_ready};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance};

const T: Duration = Duration::from_secs(60);

/// Instances of account acme share its gateway; each has a host of its own,
/// since a host is served to one instance only.
fn acme(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name},
        "spec": {"account": "acme", "host": format!("{name}.acme.kura.test"), "region": "r1",
                 "image": "registry.example/kura:1.0.0", "storage": {"size": "1Gi"}},
    });
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    v
}

#[tokio::test]
async fn rollouts_never_delete_what_they_should_not() {
    let ns = TestNamespace::new("gc").await;
    let classes = shared_class(&ns).await;
    // Dedicated gateways' classes are served by kura-sim here, so instances get Ready.
    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", "kura.dev/sim-ingress"));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        acme(
            "a1",
            json!({"replicas": 2, "aliases": ["extra.example.com"]}),
        ),
    )
    .await
    .unwrap();
    apply_json(&instances, "test", acme("a2", json!({})))
        .await
        .unwrap();
    wait_ready(&instances, "a1").await;
    wait_ready(&instances, "a2").await;
    let gateways: Api<KuraGateway> = ns.api();
    let gw = gateways.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(gw.len(), 1, "a1 and a2 share one gateway");
    let gw_name = gw[0].metadata.name.clone().unwrap();
    let gw_class = gw[0].spec.ingress_class_name.clone();

    // An unlabelled object that merely looks like ours.
    let cms: Api<ConfigMap> = ns.api();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "a1-config-old"}})).unwrap(),
    )
    .await
    .unwrap();

    // An object that was in the inventory but is no longer labelled as a1's
    // (someone took it over while a1 was paused) is not deleted when a1 drops it.
    let ingresses: Api<Ingress> = ns.api();
    let alias = wait_ready(&instances, "a1")
        .await
        .inventory
        .into_iter()
        .find(|e| e.kind == "Ingress" && e.name != "a1")
        .unwrap()
        .name;
    apply_json(
        &instances,
        "test",
        acme(
            "a1",
            json!({"replicas": 2, "aliases": ["extra.example.com"], "paused": true}),
        ),
    )
    .await
    .unwrap();
    wait_for("a1 to be Paused", T, || async {
        (instances.get("a1").await.ok()?.status?.phase == Some(kura_core::api::Phase::Paused))
            .then_some(())
    })
    .await;
    let unlabel = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": null, "kura.dev/instance": null}}});
    ingresses
        .patch(&alias, &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    // Unpause with: no alias, one replica (scale-down), and the shared class
    // instead of the dedicated gateway that a2 still uses.
    apply_json(
        &instances,
        "test",
        acme("a1", json!({"replicas": 1, "gateway": {"mode": "Shared"}})),
    )
    .await
    .unwrap();
    wait_for("a1 to move to the shared class", T, || async {
        let ing = ingresses.get("a1").await.ok()?;
        (ing.spec?.ingress_class_name == Some(format!("shared-{}", ns.name))).then_some(())
    })
    .await;
    let status = wait_ready(&instances, "a1").await;
    assert!(
        !status.inventory.iter().any(|e| e.kind == "KuraGateway"),
        "a1 no longer uses the gateway"
    );

    assert!(
        ingresses.get_opt(&alias).await.unwrap().is_some(),
        "the unlabelled former child survives"
    );
    assert!(
        cms.get_opt("a1-config-old").await.unwrap().is_some(),
        "the unlabelled look-alike survives"
    );
    assert!(
        gateways.get_opt(&gw_name).await.unwrap().is_some(),
        "the gateway a2 still uses survives a1's rollout"
    );
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    for claim in ["data-a1-0", "data-a1-1"] {
        assert!(
            pvcs.get_opt(claim).await.unwrap().is_some(),
            "{claim} survives the rollout and the scale-down"
        );
    }

    // a2 goes. The Ingress taken over above still routes through the
    // gateway's class: the gateway stays while anything uses it.
    instances
        .delete("a2", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone("a2's Ingress to be collected", T, &ingresses, "a2").await;
    assert!(
        gateways.get_opt(&gw_name).await.unwrap().is_some(),
        "a gateway whose class a live Ingress uses is not collected"
    );
    // Once nothing uses it (the taken-over Ingress is deleted by its keeper),
    // it goes, with its class.
    ingresses
        .delete(&alias, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone("the orphaned gateway to be deleted", T, &gateways, &gw_name).await;
    let all_classes: Api<IngressClass> = Api::all(ns.client.clone());
    wait_gone(
        "the gateway's IngressClass to be deleted",
        T,
        &all_classes,
        &gw_class,
    )
    .await;
    assert!(pvcs.get_opt("data-a1-0").await.unwrap().is_some());
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
