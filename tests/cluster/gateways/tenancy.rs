//! A gateway belongs to its namespace. A tenant of another namespace who
//! creates a KuraGateway of the same name that claims the first one's
//! IngressClass gets it reported as invalid; the class is neither deleted nor
//! rewritten, with a namespaced operator per namespace and with one operator
//! for all namespaces. An instance of another namespace (same account and
//! region, so the same gateway name) never keeps a gateway alive.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::Client;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, Options, config, instance, wait_ready};
use crate::support::{TestNamespace, apply_json, create_namespace, wait_for, wait_gone};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::names;

/// The victim's gateway and class once its instance `acme` is Ready. Its
/// host is the namespace's own: the same account in two namespaces shares a
/// gateway name, never a host (one host is one instance's, across namespaces).
async fn victim(client: &Client, ns: &str) -> (String, IngressClass) {
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
    let mut acme = instance("acme", IMAGE);
    acme["spec"]["host"] = json!(format!("acme.{ns}.kura.test"));
    apply_json(&instances, "test", acme).await.unwrap();
    wait_ready(&instances, "acme").await;
    let gateway = names::gateway("acme", "r1");
    let gw = Api::<KuraGateway>::namespaced(client.clone(), ns)
        .get(&gateway)
        .await
        .unwrap();
    let class = Api::<IngressClass>::all(client.clone())
        .get(&gw.spec.ingress_class_name)
        .await
        .unwrap();
    (gateway, class)
}

/// The tenant's KuraGateway in `ns`: the victim's gateway name and class, an
/// account of its own (so that anything rendered from it would differ).
async fn attack(client: &Client, ns: &str, gateway: &str, class: &IngressClass) {
    let class_name = class.metadata.name.clone().unwrap();
    let gateways: Api<KuraGateway> = Api::namespaced(client.clone(), ns);
    let body = gateway_json(gateway, "evil", &class_name, json!({}));
    apply_json(&gateways, "tenant", body).await.unwrap();
}

/// After the operator acted on the tenant's gateway: the victim's class is
/// intact, the tenant's gateway is reported invalid (naming the field),
/// nothing is applied for it, and a Warning Event says why.
async fn assert_attack_failed(client: &Client, ns: &str, gateway: &str, before: &IngressClass) {
    let gateways: Api<KuraGateway> = Api::namespaced(client.clone(), ns);
    let conditions = acted_on(&gateways, gateway).await;
    let name = before.metadata.name.clone().unwrap();
    let after = Api::<IngressClass>::all(client.clone())
        .get_opt(&name)
        .await
        .unwrap()
        .unwrap_or_else(|| {
            panic!("the IngressClass {name} of another namespace's gateway was deleted")
        });
    assert_eq!(
        after.metadata.uid, before.metadata.uid,
        "{name} was replaced"
    );
    assert_eq!(
        (
            &after.metadata.labels,
            &after.metadata.annotations,
            &after.spec
        ),
        (
            &before.metadata.labels,
            &before.metadata.annotations,
            &before.spec
        ),
        "{name} was rewritten by the tenant's gateway"
    );
    let conditions = conditions.expect("the tenant's gateway is reported, not deleted");
    let valid = conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .unwrap_or_else(|| panic!("a Valid condition on the tenant's gateway: {conditions:?}"));
    assert_eq!(valid.status, kura_core::api::ConditionStatus::False);
    assert!(
        valid.message.contains("spec.ingressClassName") && valid.message.contains(ns),
        "the condition names the field and the class the namespace may use: {}",
        valid.message
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    assert!(
        deployments.get_opt(gateway).await.unwrap().is_none(),
        "nothing is applied for an invalid gateway"
    );
    wait_for(
        "a Warning Event InvalidSpec on the tenant's gateway",
        T,
        || async {
            event_reasons(client, ns, gateway)
                .await
                .iter()
                .any(|(reason, note)| {
                    reason == "InvalidSpec" && note.contains("spec.ingressClassName")
                })
                .then_some(())
        },
    )
    .await;
}

/// Namespaced mode: one operator per namespace, each with cluster-wide
/// IngressClass permissions.
#[tokio::test]
async fn a_tenant_cannot_get_another_namespaces_class_deleted_or_rewritten() {
    let a = TestNamespace::new("gw-victim").await;
    let b = TestNamespace::new("gw-tenant").await;
    let _op_a = Operator::start(&a.name, &config(&a.name, "cloud", SIM));
    let _op_b = Operator::start(&b.name, &config(&b.name, "cloud", SIM));
    let (gateway, class) = victim(&a.client, &a.name).await;
    attack(&b.client, &b.name, &gateway, &class).await;
    assert_attack_failed(&b.client, &b.name, &gateway, &class).await;
    // The victim is unaffected.
    wait_ready(&a.api::<KuraInstance>(), "acme").await;
}

/// A private plane `name` (the `index`th) with `namespaces`, and an operator
/// there for all namespaces (its own is `<name>-all`).
async fn all_namespaces(
    name: &str,
    index: u16,
    namespaces: [&str; 2],
) -> (PrivatePlane, Client, Operator) {
    let plane = private_plane(name, index);
    let client = plane.client().await;
    for ns in namespaces {
        create_namespace(&client, ns).await;
    }
    let options = Options {
        kubeconfig: Some(plane.kubeconfig()),
        all_namespaces: true,
        ..Options::default()
    };
    let op = Operator::start_with(
        &format!("{name}-all"),
        &config("plane", "cloud", SIM),
        &[],
        options,
    );
    (plane, client, op)
}

/// All-namespaces mode: one operator sees the victim, the tenant, and an
/// instance of the victim's account in a third namespace.
#[tokio::test]
async fn a_tenant_cannot_claim_another_namespaces_class_from_an_all_namespaces_operator() {
    let (_plane, client, _op) = all_namespaces("gw-tenancy", 0, ["victim", "tenant"]).await;
    let (gateway, class) = victim(&client, "victim").await;
    attack(&client, "tenant", &gateway, &class).await;
    assert_attack_failed(&client, "tenant", &gateway, &class).await;
}

/// All-namespaces mode: `acme` in `a` and `acme` in `b` resolve to gateways of
/// the same name, one per namespace. Once `a`'s instance is gone, `a`'s gateway
/// and its class are collected; `b`'s stay.
#[tokio::test]
async fn an_instance_of_another_namespace_does_not_keep_a_gateway() {
    let (_plane, client, _op) = all_namespaces("gw-elsewhere", 1, ["a", "b"]).await;
    let (gateway, a_class) = victim(&client, "a").await;
    let (_, b_class) = victim(&client, "b").await;
    assert_ne!(a_class.metadata.name, b_class.metadata.name);

    let a_instances: Api<KuraInstance> = Api::namespaced(client.clone(), "a");
    a_instances
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    let a_gateways: Api<KuraGateway> = Api::namespaced(client.clone(), "a");
    wait_gone(
        "a's unused gateway to be collected",
        T,
        &a_gateways,
        &gateway,
    )
    .await;
    let classes: Api<IngressClass> = Api::all(client.clone());
    let a_class = a_class.metadata.name.unwrap();
    wait_gone("a's gateway class to be collected", T, &classes, &a_class).await;
    let b_gateways: Api<KuraGateway> = Api::namespaced(client.clone(), "b");
    assert!(
        b_gateways.get_opt(&gateway).await.unwrap().is_some(),
        "b's gateway stays"
    );
    let b_class = b_class.metadata.name.unwrap();
    assert!(
        classes.get_opt(&b_class).await.unwrap().is_some(),
        "b's class stays"
    );
}

/// What admission can check without the namespace: the class must be
/// `kura-gw.<something>.<the gateway's name>`, and the name a Service name.
#[tokio::test]
async fn a_gateway_naming_a_class_not_its_own_is_refused_at_admission() {
    let ns = TestNamespace::new("gw-admission").await;
    let gateways: Api<KuraGateway> = ns.api();
    for (name, class, field) in [
        ("edge", "shared-ingress", "spec.ingressClassName"),
        ("edge", "kura-gw.other.gw-acme", "spec.ingressClassName"),
        ("edge.x", "kura-gw.ns.edge.x", "metadata.name"),
    ] {
        let refused = apply_json(
            &gateways,
            "tenant",
            gateway_json(name, "acme", class, json!({})),
        )
        .await
        .expect_err("refused at admission");
        let message = refused.to_string();
        assert!(message.contains(field), "{name} {class}: {message}");
    }
    // Negative control: its own class is admitted.
    let own = names::gateway_ingress_class(&ns.name, "edge");
    apply_json(
        &gateways,
        "tenant",
        gateway_json("edge", "acme", &own, json!({})),
    )
    .await
    .unwrap();
}
