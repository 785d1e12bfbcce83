//! Deleting a namespace never needs the operator: a gateway carries no
//! finalizer, and the IngressClass it leaves behind (cluster-scoped, out of
//! the garbage collector's reach) is collected when the operator runs again.
//! A gateway of the previous release (with its finalizer, a class without the
//! gateway's uid, children applied under the instances' field manager) is
//! migrated: finalizer removed, class claimed, children handed to the
//! gateway's own field manager with nothing left co-owned by the old one.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, DeleteParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::*;
use crate::operator::{Operator, config, instance, wait_ready};
use crate::support::{TestNamespace, apply_json, wait_for, wait_gone};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::names;

/// The namespace controller (kube-controller-manager) has emptied and removed it.
const NAMESPACE_GONE: Duration = Duration::from_secs(90);

async fn delete_namespace_and_wait(ns: &TestNamespace) {
    let namespaces: Api<Namespace> = Api::all(ns.client.clone());
    namespaces
        .delete(&ns.name, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        "the namespace to be deleted with the operator stopped",
        NAMESPACE_GONE,
        &namespaces,
        &ns.name,
    )
    .await;
}

async fn wait_class_collected(classes: &Api<IngressClass>, class: &str) {
    wait_gone(
        "the deleted gateway's class to be collected",
        T,
        classes,
        class,
    )
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_with_a_gateway_needs_no_operator() {
    let ns = TestNamespace::new("gw-nsdel").await;
    let mut op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();
    wait_ready(&instances, "acme").await;
    let gateway = names::gateway("acme", "r1");
    let class = ns
        .api::<KuraGateway>()
        .get(&gateway)
        .await
        .unwrap()
        .spec
        .ingress_class_name;

    op.kill();
    delete_namespace_and_wait(&ns).await;
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    assert!(
        classes.get_opt(&class).await.unwrap().is_some(),
        "the class outlives its gateway while the operator is stopped"
    );
    op.restart(&[]);
    wait_class_collected(&classes, &class).await;
}

/// Applies a rendered gateway child as the previous release did: under the
/// instances' field manager, a class without the gateway's uid.
async fn apply_as_previous_release(client: &kube::Client, mut body: serde_json::Value) {
    let kind = body["kind"].as_str().unwrap().to_string();
    let (group, version) = match body["apiVersion"].as_str().unwrap().rsplit_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            body["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    if kind == "IngressClass" {
        let meta = &mut body["metadata"];
        if let Some(a) = meta["annotations"].as_object_mut() {
            a.remove("kura.dev/gateway-uid");
        }
        if let Some(l) = meta["labels"].as_object_mut() {
            l.remove("kura.dev/gateway-namespace");
        }
    }
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &kind));
    let api: Api<DynamicObject> = match body["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    apply_json(&api, "kura-operator", body).await.unwrap();
}

#[tokio::test]
async fn a_gateway_of_the_previous_release_is_migrated() {
    let ns = TestNamespace::new("gw-migrate").await;
    let gateways: Api<KuraGateway> = ns.api();
    let gateway = names::gateway("acme", "r1");
    let class = names::gateway_ingress_class(&ns.name, &gateway);
    // As the previous release left it.
    let mut body = gateway_json(
        &gateway,
        "acme",
        &class,
        json!({"app.kubernetes.io/managed-by": "kura-operator", "app.kubernetes.io/name": "kura-gateway",
               "kura.dev/account": "acme", "kura.dev/region": "r1"}),
    );
    body["metadata"]["finalizers"] = json!(["kura.dev/ingress-class"]);
    apply_json(&gateways, "kura-operator", body).await.unwrap();
    let gw = gateways.get(&gateway).await.unwrap();
    for object in kura_core::render::gateway::render_gateway(&gw, &Default::default()).objects {
        apply_as_previous_release(&ns.client, object.body()).await;
    }
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();

    let mut op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    wait_for(
        "the previous release's finalizer to be removed",
        T,
        || async {
            let gw = gateways.get(&gateway).await.ok()?;
            (!gw.metadata
                .finalizers
                .unwrap_or_default()
                .iter()
                .any(|f| f == "kura.dev/ingress-class"))
            .then_some(())
        },
    )
    .await;
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    let uid = gw.metadata.uid.clone().unwrap();
    wait_for(
        "the class to be claimed with the gateway's uid",
        T,
        || async {
            let c = classes.get(&class).await.ok()?;
            (c.metadata.annotations?.get("kura.dev/gateway-uid") == Some(&uid)).then_some(())
        },
    )
    .await;
    let deployments: Api<Deployment> = ns.api();
    let services: Api<Service> = ns.api();
    let migrated = |m: Vec<String>| {
        m.contains(&"kura-operator-gateway/Apply".to_string())
            && !m.iter().any(|m| m.starts_with("kura-operator/"))
    };
    let (d, s, c) = wait_for(
        "every child to be handed to the gateway's field manager",
        T,
        || async {
            let d = deployments.get(&gateway).await.ok()?;
            let s = services.get(&gateway).await.ok()?;
            let c = classes.get(&class).await.ok()?;
            (migrated(managers(&d)) && migrated(managers(&s)) && migrated(managers(&c)))
                .then_some((d, s, c))
        },
    )
    .await;
    // Nothing rendered was lost on the way.
    assert_eq!(d.spec.unwrap().replicas, Some(1));
    assert!(s.spec.unwrap().ports.is_some_and(|p| p.len() == 2));
    assert_eq!(c.spec.unwrap().controller.as_deref(), Some(SIM));
    wait_ready(&instances, "acme").await;

    op.kill();
    delete_namespace_and_wait(&ns).await;
    op.restart(&[]);
    wait_class_collected(&classes, &class).await;
}
