//! What the apiserver checks of the names, labels and hosts of every rendered object
//! (and of what its controllers derive from them), mirrored with `validate::rules`: a
//! renderer or validation change that the apiserver would refuse fails here in
//! milliseconds. tests/cluster/lifecycle/acceptance.rs asks the real apiserver.

use serde_json::Value;

use super::*;
use crate::api::KuraGateway;
use crate::render::gateway::render_gateway;
use crate::validate::rules;

/// Everything wrong with `desired` and with its dedicated gateway's own children.
pub(crate) fn violations(desired: &Desired) -> Vec<String> {
    let mut found = Vec::new();
    for object in &desired.objects {
        let body = object.body();
        check_object(&object.id, &body, &mut found);
        if object.id.kind == crate::kind::ChildKind::KuraGateway {
            let mut gateway: KuraGateway = serde_json::from_value(body).expect("a KuraGateway");
            gateway.metadata.uid = Some("u".into());
            for child in &render_gateway(&gateway, &Default::default()).objects {
                check_object(&child.id, &child.body(), &mut found);
            }
        }
    }
    found
}

fn check_object(id: &ObjectId, body: &Value, found: &mut Vec<String>) {
    let mut check = |what: &str, result: Result<(), String>| {
        if let Err(why) = result {
            found.push(format!("{id}: {what}: {why}"));
        }
    };
    let name = id.name.as_str();
    match id.kind.kind() {
        "Service" => check("name", rules::dns1035_label(name)),
        // Pods are named <statefulset>-<ordinal>, each a hostname; the controller
        // labels them with <statefulset>-<revision hash of 10>, and names claims
        // data-<statefulset>-<ordinal>.
        "StatefulSet" => {
            check("name", rules::dns_label(name));
            let last = body["spec"]["replicas"].as_i64().unwrap_or(1) - 1;
            check("pod name", rules::dns_label(&format!("{name}-{last}")));
            let revision = format!("{name}-{}", "f".repeat(10));
            check("controller-revision-hash", rules::label_value(&revision));
            check(
                "claim name",
                rules::dns_subdomain(&format!("data-{name}-{last}")),
            );
        }
        // ReplicaSets are named <deployment>-<pod template hash of 10>.
        "Deployment" => {
            check("name", rules::dns_subdomain(name));
            let replica_set = format!("{name}-{}", "f".repeat(10));
            check("ReplicaSet name", rules::dns_subdomain(&replica_set));
        }
        _ => check("name", rules::dns_subdomain(name)),
    }
    if let Some(namespace) = &id.namespace {
        check("namespace", rules::dns_label(namespace));
    }
    let spec = &body["spec"];
    match id.kind.kind() {
        "Ingress" => {
            let class = spec["ingressClassName"].as_str().unwrap_or_default();
            check("ingressClassName", rules::dns_subdomain(class));
            for rule in spec["rules"].as_array().into_iter().flatten() {
                let host = rule["host"].as_str().unwrap_or_default();
                check("host", rules::host(host, rules::MAX_SUBDOMAIN));
                for path in rule["http"]["paths"].as_array().into_iter().flatten() {
                    let service = path["backend"]["service"]["name"].as_str();
                    check("backend", rules::dns1035_label(service.unwrap_or_default()));
                }
            }
        }
        "StatefulSet" => {
            let pod = &spec["template"]["spec"];
            let account = pod["serviceAccountName"].as_str().unwrap_or_default();
            check("serviceAccountName", rules::dns_subdomain(account));
            for claim in spec["volumeClaimTemplates"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(class) = claim["spec"]["storageClassName"].as_str() {
                    check("storageClassName", rules::dns_subdomain(class));
                }
            }
            for env in pod["containers"][0]["env"].as_array().into_iter().flatten() {
                if let Some(secret) = env["valueFrom"].get("secretKeyRef") {
                    let (name, key) = (&secret["name"], &secret["key"]);
                    check(
                        "secret",
                        rules::dns_subdomain(name.as_str().unwrap_or_default()),
                    );
                    check(
                        "secret key",
                        rules::config_map_key(key.as_str().unwrap_or_default()),
                    );
                }
            }
        }
        "KuraGateway" => {
            let class = spec["ingressClassName"].as_str().unwrap_or_default();
            check("ingressClassName", rules::dns_subdomain(class));
        }
        "IngressClass" => {
            let controller = spec["controller"].as_str().unwrap_or_default();
            check("controller", rules::domain_prefixed_path(controller));
        }
        _ => {}
    }
    check_labels(body, &mut check);
}

/// Every `labels`, `matchLabels` and `annotations` map anywhere in the object.
fn check_labels(value: &Value, check: &mut impl FnMut(&str, Result<(), String>)) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let is_map = matches!(key.as_str(), "labels" | "matchLabels" | "annotations");
                if let (true, Value::Object(map)) = (is_map, field) {
                    for (k, v) in map {
                        check("key", rules::qualified_name(k));
                        if key != "annotations" {
                            check("label value", rules::label_value(v.as_str().unwrap_or("?")));
                        }
                    }
                } else {
                    check_labels(field, check);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| check_labels(i, check)),
        _ => {}
    }
}

#[test]
fn every_example_renders_only_what_the_apiserver_accepts() {
    for instance in examples() {
        let found = violations(&render_with(&instance, &config()));
        assert!(found.is_empty(), "{found:#?}");
    }
}

/// The mirror must see what it is for: a renderer that named a Service after an
/// instance starting with a digit, or an alias after an IP address.
#[test]
fn the_mirror_catches_a_name_or_host_the_apiserver_refuses() {
    let valid = validate(&example("globex-eu"), &config()).unwrap();
    let mut broken = valid.clone();
    (broken.name, broken.aliases) = ("1globex".into(), vec!["1.2.3.4".into()]);
    let found = violations(&render(&broken, &config()));
    assert!(
        found
            .iter()
            .any(|v| v.contains("Service") && v.contains("DNS-1035")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|v| v.contains("host") && v.contains("IP address")),
        "{found:#?}"
    );
}
