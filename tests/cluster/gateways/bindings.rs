//! A dedicated gateway's bindings are names anyone could have taken first: a
//! RoleBinding in the gateway's namespace named like the gateway, and a
//! ClusterRoleBinding named like its IngressClass. Bindings of those names
//! that are not the gateway's (made by an administrator, binding other roles)
//! are reported as a name conflict, naming them, and left exactly as they
//! were: never rebound, never deleted, with nothing else of the gateway
//! applied meanwhile. Once they are gone, the gateway heals with its own.
//! (Not checked here: what the operator would do to them without its
//! ownership rule; no build without it was run.)

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, config, instance};
use crate::support::{TestNamespace, apply_json, wait_for};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::names;

/// An administrator's binding of the ClusterRole `view` to the user `alice`.
fn admins_binding(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    })
}

fn bound_to(
    role: &k8s_openapi::api::rbac::v1::RoleRef,
    subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>,
) -> (String, Vec<String>) {
    let names = subjects
        .iter()
        .flatten()
        .map(|s| format!("{}/{}", s.kind, s.name))
        .collect();
    (role.name.clone(), names)
}

#[tokio::test]
async fn bindings_of_the_gateways_names_that_are_not_its_own_are_reported_and_left_alone() {
    let ns = TestNamespace::new("gw-bindings").await;
    let gateway = names::gateway("acme", "r1");
    let class = names::gateway_ingress_class(&ns.name, &gateway);
    let role_bindings: Api<RoleBinding> = ns.api();
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    role_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(admins_binding(&gateway, Some(&ns.name))).unwrap(),
        )
        .await
        .unwrap();
    cluster_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(admins_binding(&class, None)).unwrap(),
        )
        .await
        .unwrap();
    let admins = ("view".to_string(), vec!["User/alice".to_string()]);

    let op = Operator::start(&ns.name, &config(&ns.name, "cloud", SIM));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(&instances, "test", instance("acme", IMAGE))
        .await
        .unwrap();
    let gateways: Api<KuraGateway> = ns.api();
    let deployments: Api<Deployment> = ns.api();
    let conflict = |kind_and_name: String| {
        let gateways = gateways.clone();
        async move {
            wait_for(
                &format!("a name conflict naming {kind_and_name}"),
                T,
                || async {
                    let gw = gateways
                        .get_opt(&names::gateway("acme", "r1"))
                        .await
                        .ok()??;
                    let ready = condition(&gw, "Ready")?;
                    (ready.reason == "NameConflict" && ready.message.contains(&kind_and_name))
                        .then_some(ready.message)
                },
            )
            .await
        }
    };
    let untouched = || async {
        let rb = role_bindings.get_opt(&gateway).await.unwrap();
        let crb = cluster_bindings.get_opt(&class).await.unwrap();
        for (what, bound, managers) in [
            (
                "RoleBinding",
                rb.as_ref().map(|b| bound_to(&b.role_ref, &b.subjects)),
                rb.as_ref().map(managers),
            ),
            (
                "ClusterRoleBinding",
                crb.as_ref().map(|b| bound_to(&b.role_ref, &b.subjects)),
                crb.as_ref().map(managers),
            ),
        ] {
            if let Some(bound) = bound {
                assert_eq!(bound, admins, "{what} rebound");
                let managers = managers.unwrap();
                assert!(
                    managers.iter().all(|m| !m.starts_with("kura-operator")),
                    "{what} written by the operator: {managers:?}"
                );
            }
        }
    };

    // Both taken: the plan finds the ClusterRoleBinding (the operator sees
    // every binding's metadata cluster-wide) and applies nothing at all.
    conflict(format!("ClusterRoleBinding {class}")).await;
    untouched().await;
    assert!(deployments.get_opt(&gateway).await.unwrap().is_none());

    // The administrator removes that one: the RoleBinding (a name held by an
    // object without the operator's label) is found before it is written,
    // reported, and left alone too.
    cluster_bindings
        .delete(&class, &DeleteParams::default())
        .await
        .unwrap();
    conflict(format!("RoleBinding {}/{gateway}", ns.name)).await;
    untouched().await;

    // And that one: the gateway gets its own bindings, bound to the chart's
    // gateway roles (the operator's defaults here), and its Deployment.
    role_bindings
        .delete(&gateway, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the gateway's own bindings", T, || async {
        let rb = role_bindings.get_opt(&gateway).await.ok()??;
        let crb = cluster_bindings.get_opt(&class).await.ok()??;
        let sa = format!("ServiceAccount/{gateway}");
        (bound_to(&rb.role_ref, &rb.subjects).1 == [sa.clone()]
            && bound_to(&crb.role_ref, &crb.subjects).1 == [sa]
            && rb.role_ref.name != "view"
            && crb.role_ref.name != "view")
            .then_some(())
    })
    .await;
    wait_for("the gateway Deployment", T, || async {
        deployments.get_opt(&gateway).await.ok()?
    })
    .await;
    drop(op);
    let _ = cluster_bindings
        .delete(&class, &DeleteParams::default())
        .await;
    let _ = Api::<k8s_openapi::api::networking::v1::IngressClass>::all(ns.client.clone())
        .delete(&class, &DeleteParams::default())
        .await;
}
