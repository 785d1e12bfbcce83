//! Which gateways are collected: only those the operator created, and only
//! when nothing of their namespace uses them. A hand-made KuraGateway (even
//! one labelled like the operator's) is served and never collected; a paused
//! instance keeps its gateway across a configuration change that moves every
//! other instance off it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, config, instance, shared_class, wait_ready};
use crate::support::{TestNamespace, apply_json, wait_for, wait_gone};
use kura_core::api::{ConditionStatus, KuraGateway, KuraInstance, Phase};
use kura_core::names;

#[tokio::test]
async fn a_hand_made_gateway_is_served_and_never_collected() {
    let ns = TestNamespace::new("gw-hand").await;
    let _op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    let instances: Api<KuraInstance> = ns.api();
    let gateways: Api<KuraGateway> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    let classes: Api<IngressClass> = Api::all(ns.client.clone());

    // Labelled like the operator's, but written by someone else.
    let class = names::gateway_ingress_class(&ns.name, "edge");
    let labels = json!({"app.kubernetes.io/managed-by": "kura-operator"});
    apply_json(
        &gateways,
        "platform-team",
        gateway_json("edge", "acme", &class, labels),
    )
    .await
    .unwrap();
    let served = wait_for(
        "the operator to serve or delete the hand-made gateway",
        T,
        || async {
            match gateways.get_opt("edge").await.ok()? {
                None => Some(false),
                Some(_) => deployments.get_opt("edge").await.ok()?.map(|_| true),
            }
        },
    )
    .await;
    assert!(served, "the hand-made KuraGateway edge was deleted");
    wait_for("the hand-made gateway's class", T, || async {
        classes.get_opt(&class).await.ok()?.map(|_| ())
    })
    .await;

    // Control: the operator's own gateway is collected once nothing uses it.
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();
    wait_ready(&instances, "acme").await;
    let own = names::gateway("acme", "r1");
    instances
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        "the operator's unused gateway to be collected",
        T,
        &gateways,
        &own,
    )
    .await;

    let managed = wait_for(
        "the hand-made gateway to say it is never collected",
        T,
        || async { condition(&gateways.get("edge").await.ok()?, "Managed") },
    )
    .await;
    assert_eq!(managed.status, ConditionStatus::False, "{managed:?}");
    assert!(managed.message.contains("never"), "{managed:?}");
    assert!(gateways.get_opt("edge").await.unwrap().is_some());
    assert!(deployments.get_opt("edge").await.unwrap().is_some());

    // Deleted by its owner, its class (cluster-scoped, out of reach of the
    // garbage collector) is collected by the operator.
    gateways
        .delete("edge", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        "the deleted hand-made gateway's class to be collected",
        T,
        &classes,
        &class,
    )
    .await;
}

fn paused(name: &str, paused: bool) -> serde_json::Value {
    let mut v = instance(name, IMAGE);
    v["spec"]["paused"] = json!(paused);
    v["spec"]["account"] = json!("acme");
    // One account, so one gateway; a host each, since a host is one instance's.
    v["spec"]["host"] = json!(format!("{name}.acme.kura.test"));
    v
}

#[tokio::test]
async fn a_paused_instance_keeps_its_gateway_across_a_region_change() {
    let ns = TestNamespace::new("gw-paused").await;
    let shared = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    let instances: Api<KuraInstance> = ns.api();
    let gateways: Api<KuraGateway> = ns.api();
    let ingresses: Api<Ingress> = ns.api();
    for name in ["p", "q"] {
        apply_json(&instances, "test", paused(name, false))
            .await
            .unwrap();
    }
    for name in ["p", "q"] {
        wait_ready(&instances, name).await;
    }
    let gateway = names::gateway("acme", "r1");
    let class = gateways
        .get(&gateway)
        .await
        .unwrap()
        .spec
        .ingress_class_name;

    apply_json(&instances, "test", paused("p", true))
        .await
        .unwrap();
    wait_for("p to be Paused", T, || async {
        (instances.get("p").await.ok()?.status?.phase == Some(Phase::Paused)).then_some(())
    })
    .await;
    let q_before = wait_ready(&instances, "q").await.applied_revision;
    // The region moves to host networking: every instance to the shared class.
    op.set_config(&config(&ns.name, "host", SIM));
    let shared_name = format!("shared-{}", ns.name);
    let on_shared = |name: &'static str| {
        let ingresses = ingresses.clone();
        let shared_name = shared_name.clone();
        async move {
            let ing = ingresses.get(name).await.ok()?;
            (ing.spec?.ingress_class_name? == shared_name).then_some(())
        }
    };
    wait_for("q to move to the shared class", T, || on_shared("q")).await;
    // Ready on the new revision: the Ingress is written before the status of
    // the same apply, so a status read now may still be the old one.
    let q = wait_for("q Ready on the new revision", T, || async {
        let s = instances.get("q").await.ok()?.status?;
        (s.phase == Some(Phase::Ready)
            && s.applied_revision == s.desired_revision
            && s.applied_revision != q_before)
            .then_some(s)
    })
    .await;
    assert!(
        !q.inventory.iter().any(|e| e.kind == "KuraGateway"),
        "q no longer uses the gateway"
    );
    // Two gateway reconciles after q moved (one a resync, 3 s here), or the
    // gateway gone.
    let passes = r#"kura_gateway_reconciles_total{result="converged"}"#;
    let base = op.metric(passes).await.unwrap_or(0.0);
    let kept = wait_for(
        "two gateway passes after the change, or the gateway gone",
        T,
        || async {
            if gateways.get_opt(&gateway).await.ok()?.is_none() {
                return Some(false);
            }
            (op.metric(passes).await? >= base + 2.0).then_some(true)
        },
    )
    .await;
    assert!(kept, "the paused instance p lost its gateway {gateway}");
    let in_use = condition(&gateways.get(&gateway).await.unwrap(), "InUse");
    assert!(
        in_use
            .as_ref()
            .is_some_and(|c| c.message.contains("KuraInstance p")),
        "the gateway says who keeps it: {in_use:?}"
    );
    let p_ingress = ingresses.get("p").await.unwrap();
    assert_eq!(
        p_ingress.spec.unwrap().ingress_class_name.as_deref(),
        Some(class.as_str()),
        "nothing of a paused instance is changed"
    );

    // Unpaused, p moves too, and then nothing uses the gateway any more.
    apply_json(&instances, "test", paused("p", false))
        .await
        .unwrap();
    wait_for("p to move to the shared class", T, || on_shared("p")).await;
    wait_gone(
        "the gateway nothing uses to be collected",
        T,
        &gateways,
        &gateway,
    )
    .await;
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    wait_gone("its class to be collected", T, &classes, &class).await;
    // So is its ClusterRoleBinding (named as the class; nothing can own it),
    // and the garbage collector takes its ServiceAccount and RoleBinding.
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    let role_bindings: Api<RoleBinding> = ns.api();
    wait_for("its bindings to be collected", T, || async {
        let crb = cluster_bindings.get_opt(&class).await.ok()?;
        let rb = role_bindings.get_opt(&gateway).await.ok()?;
        (crb.is_none() && rb.is_none()).then_some(())
    })
    .await;
    assert!(
        gateways
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let _ = shared.delete(&shared_name, &Default::default()).await;
}
