//! Deleting instances against the real control plane: children go through owner
//! references (the garbage collector), a gateway goes with the last instance that
//! used it (with its cluster-scoped IngressClass, through the gateway's
//! finalizer), a gateway still in use stays, and the cache's volumes stay.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::operator::{Operator, config, wait_ready};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::names;

const T: Duration = Duration::from_secs(60);

/// Instances of one account share its gateway; each has a host of its own,
/// since a host is served to one instance only.
fn of_account(name: &str, account: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name},
        "spec": {"account": account, "host": format!("{name}.{account}.kura.test"), "region": "r1",
                 "image": "registry.example/kura:1.0.0", "storage": {"size": "1Gi"}},
    })
}

#[tokio::test]
async fn deleting_instances_removes_their_children_and_only_unused_gateways() {
    let ns = TestNamespace::new("delete").await;
    // Dedicated gateways' classes are served by kura-sim here, so instances get Ready.
    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", "kura.dev/sim-ingress"));
    let instances: Api<KuraInstance> = ns.api();
    for (name, account) in [("a1", "acme"), ("a2", "acme"), ("b1", "beta")] {
        apply_json(&instances, "test", of_account(name, account))
            .await
            .unwrap();
    }
    for name in ["a1", "a2", "b1"] {
        wait_ready(&instances, name).await;
    }
    let gateways: Api<KuraGateway> = ns.api();
    let (acme_gw, beta_gw) = (names::gateway("acme", "r1"), names::gateway("beta", "r1"));
    let beta_class = gateways
        .get(&beta_gw)
        .await
        .unwrap()
        .spec
        .ingress_class_name;
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    assert!(pvcs.get_opt("data-b1-0").await.unwrap().is_some());

    instances
        .delete("a1", &DeleteParams::default())
        .await
        .unwrap();
    instances
        .delete("b1", &DeleteParams::default())
        .await
        .unwrap();
    let sts: Api<StatefulSet> = ns.api();
    let cms: Api<ConfigMap> = ns.api();
    wait_for(
        "the deleted instances' children to be garbage-collected",
        T,
        || async {
            let gone = sts.get_opt("a1").await.ok()?.is_none()
                && sts.get_opt("b1").await.ok()?.is_none()
                && cms.get_opt("b1-config").await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    wait_gone(
        "the gateway only b1 used to be deleted",
        T,
        &gateways,
        &beta_gw,
    )
    .await;
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    wait_gone("its IngressClass to be deleted", T, &classes, &beta_class).await;
    // The gateway controller has made its pass (beta's is gone); acme's is still used by a2.
    assert!(
        gateways.get_opt(&acme_gw).await.unwrap().is_some(),
        "a gateway in use is never deleted"
    );
    assert!(sts.get_opt("a2").await.unwrap().is_some());
    assert!(
        pvcs.get_opt("data-b1-0").await.unwrap().is_some(),
        "volumes are never deleted"
    );
    drop(op);
}
