//! A dedicated gateway's ingress controller runs as a ServiceAccount of its
//! own, bound to the two ClusterRoles the operator is told of (`GatewayRoles`):
//! in its namespace by a RoleBinding it owns, cluster-wide by a
//! ClusterRoleBinding that carries its uid like its IngressClass.

use serde_json::{Value, json};

use super::example_gateway;
use crate::kind::ChildKind;
use crate::render::gateway::{GatewayRoles, render_gateway};

fn roles() -> GatewayRoles {
    GatewayRoles {
        namespaced: "ops-kura-operator-gateway".into(),
        cluster: "ops-kura-operator-gateway-cluster".into(),
    }
}

fn child(kind: ChildKind) -> Value {
    let desired = render_gateway(&example_gateway(), &roles());
    let object = desired
        .objects
        .iter()
        .find(|o| o.id.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} rendered"));
    serde_json::to_value(&object.manifest).unwrap()
}

#[test]
fn the_controller_runs_as_the_gateways_own_service_account() {
    let gw = example_gateway();
    let name = gw.metadata.name.clone().unwrap();
    let deployment = child(ChildKind::Deployment);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], name.as_str());
    assert_eq!(pod["automountServiceAccountToken"], true);
    let account = child(ChildKind::ServiceAccount);
    assert_eq!(account["metadata"]["name"], name.as_str());
    // Only the pod that asks for a token gets one.
    assert_eq!(account["automountServiceAccountToken"], false);
    assert_eq!(
        account["metadata"]["ownerReferences"][0]["kind"],
        "KuraGateway"
    );
}

#[test]
fn the_namespaced_role_is_bound_in_the_gateways_namespace_to_its_account_only() {
    let gw = example_gateway();
    let (name, namespace) = (
        gw.metadata.name.clone().unwrap(),
        gw.metadata.namespace.clone().unwrap(),
    );
    let binding = child(ChildKind::RoleBinding);
    assert_eq!(binding["metadata"]["namespace"], namespace.as_str());
    assert_eq!(binding["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
               "name": "ops-kura-operator-gateway"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": name, "namespace": namespace}])
    );
}

#[test]
fn the_cluster_role_is_bound_by_a_binding_named_and_marked_as_the_class() {
    let class = child(ChildKind::IngressClass);
    let binding = child(ChildKind::ClusterRoleBinding);
    assert_eq!(binding["metadata"]["name"], class["metadata"]["name"]);
    let uid = |o: &Value| o["metadata"]["annotations"]["kura.dev/gateway-uid"].clone();
    assert_eq!(uid(&binding), "u-1");
    assert_eq!(uid(&binding), uid(&class));
    assert_eq!(binding["metadata"]["labels"], class["metadata"]["labels"]);
    assert!(binding["metadata"].get("namespace").is_none());
    assert!(binding["metadata"].get("ownerReferences").is_none());
    assert_eq!(
        binding["roleRef"]["name"],
        "ops-kura-operator-gateway-cluster"
    );
}

/// The roles are the operator's deployment's, not the fleet's: another name
/// changes the bindings and nothing else.
#[test]
fn other_role_names_change_only_the_bindings() {
    let gw = example_gateway();
    let a = render_gateway(&gw, &GatewayRoles::default());
    let b = render_gateway(&gw, &roles());
    for (x, y) in a.objects.iter().zip(&b.objects) {
        let binding = matches!(
            x.id.kind,
            ChildKind::RoleBinding | ChildKind::ClusterRoleBinding
        );
        assert_eq!(x.manifest == y.manifest, !binding, "{}", x.id.kind);
    }
}
