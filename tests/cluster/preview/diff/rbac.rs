//! diff as an identity that may only get, list and watch.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::diff;
use crate::operator::ready_instance;
use crate::support::*;

/// A Role that may get, list and watch what `diff` reads, and nothing else.
fn read_only_role(ns: &str, with_stateful_sets: bool) -> Value {
    let mut rules = vec![
        json!({"apiGroups": ["kura.dev"], "resources": ["kurainstances", "kuragateways"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [""], "resources": ["services", "configmaps", "serviceaccounts"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]}),
    ];
    if with_stateful_sets {
        rules.push(json!({"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]}));
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "kura-diff", "namespace": ns},
        "rules": rules,
    })
}

#[tokio::test]
async fn diff_runs_as_an_identity_that_can_only_read() {
    let r = ready_instance("diff-rbac").await;
    let ns = &r.ns;
    let sas: Api<ServiceAccount> = ns.api();
    apply_json(
        &sas,
        "test",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "previewer"}}),
    )
    .await
    .unwrap();
    let roles: Api<Role> = ns.api();
    apply_json(&roles, "test", read_only_role(&ns.name, true))
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    apply_json(
        &bindings,
        "test",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "kura-diff"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kura-diff"},
            "subjects": [{"kind": "ServiceAccount", "name": "previewer", "namespace": ns.name}],
        }),
    )
    .await
    .unwrap();
    // The configuration as the chart ships it: a ConfigMap, key config.yaml.
    let edited = crate::operator::config(&ns.name, "host", "example.com/none")
        .replace("domain: kura.test", "domain: kura2.test");
    let maps: Api<ConfigMap> = ns.api();
    apply_json(
        &maps,
        "test",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kura-operator-config"},
               "data": {"config.yaml": edited}}),
    )
    .await
    .unwrap();
    let as_sa = client_as_service_account(&ns.name, "previewer").await;
    wait_granted::<StatefulSet>(&as_sa, &ns.name).await;

    let kubeconfig = impersonating_kubeconfig(&scratch_dir(&ns.name), &ns.name, "previewer");
    let user = format!("system:serviceaccount:{}:previewer", ns.name);
    let since = jiff::Timestamp::now();
    let config_map = format!("{}/kura-operator-config", ns.name);
    let (code, out, err) = diff(
        &kubeconfig,
        &["-n", &ns.name, "--config-map", &config_map, "-o", "json"],
    );
    assert_eq!(code, 1, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["summary"]["changing"], 1, "{out}");
    assert_eq!(report["summary"]["objectsWritten"], 3, "{out}");

    // Nothing mutating was even attempted as that identity (the audit log
    // records every mutating request, refused or not).
    let text = audit_text(&audit_log());
    let attempted: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= since)
        })
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["resource"]))
        .collect();
    assert!(attempted.is_empty(), "{attempted:?}");
    // Negative control: the identity really cannot write.
    let refused = Api::<ConfigMap>::namespaced(as_sa.clone(), &ns.name)
        .patch(
            "kura-operator-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );

    // Without a read it needs, it fails with one line naming what it could not read.
    apply_json(&roles, "test", read_only_role(&ns.name, false))
        .await
        .unwrap();
    wait_for(
        "the grant to be withdrawn",
        Duration::from_secs(30),
        || async {
            Api::<StatefulSet>::namespaced(as_sa.clone(), &ns.name)
                .list(&ListParams::default())
                .await
                .err()
        },
    )
    .await;
    let (code, out, err) = diff(&kubeconfig, &["-n", &ns.name, "--config-map", &config_map]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("list statefulsets in namespace {}", ns.name))
            && err.contains("forbidden"),
        "{err}"
    );
    r.finish().await;
}
