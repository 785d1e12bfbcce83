//! One function per child kind of an instance. Each returns a complete manifest.
//!
//! Nested `Value`s are moved into place (`object["key"] = value`) instead of being
//! interpolated into `json!`, which would copy each of them through serde again:
//! rendering runs for every instance on every reconcile (see docs/benchmarks.md).

use serde_json::{Value, json};

use super::instance_labels;
use crate::api::GatewayMode;
use crate::config::OperatorConfig;
use crate::keys::*;
use crate::names;
use crate::validate::ValidatedInstance;

fn metadata(instance: &ValidatedInstance, name: &str) -> Value {
    let mut metadata = json!({ "name": name, "namespace": instance.namespace });
    metadata["labels"] = instance_labels(instance);
    // An instance read from a file (offline `render`) has no uid yet: no owner.
    if !instance.uid.is_empty() {
        metadata["ownerReferences"] = Value::Array(vec![owner_reference(instance)]);
    }
    metadata
}

/// Every child is owned by its instance, so deleting the instance lets the
/// garbage collector remove the children (and nothing else).
fn owner_reference(instance: &ValidatedInstance) -> Value {
    json!({
        "apiVersion": "kura.dev/v1alpha1",
        "kind": "KuraInstance",
        "name": instance.name,
        "uid": instance.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn selector(instance: &ValidatedInstance) -> Value {
    json!({ LABEL_NAME: "kura", LABEL_INSTANCE: instance.name })
}

fn config_map_name(instance: &ValidatedInstance) -> String {
    format!("{}-config", instance.name)
}

pub fn service_account(instance: &ValidatedInstance) -> Value {
    let mut account = json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "automountServiceAccountToken": false,
    });
    account["metadata"] = metadata(instance, &instance.name);
    account
}

pub fn config_map(instance: &ValidatedInstance) -> Value {
    let hosts: Vec<Value> = std::iter::once(&instance.host)
        .chain(&instance.aliases)
        .map(|h| Value::String(h.clone()))
        .collect();
    let mut config = json!({
        "account": instance.account,
        "region": instance.region,
        "listen": format!(":{CACHE_PORT}"),
        "dataDir": "/var/lib/kura",
    });
    config["hosts"] = Value::Array(hosts);
    let kura_json = super::hash::canonical_string(&config);
    let mut config_map = json!({ "apiVersion": "v1", "kind": "ConfigMap" });
    config_map["metadata"] = metadata(instance, &config_map_name(instance));
    config_map["data"]["kura.json"] = Value::String(kura_json);
    config_map
}

/// The pod template, without the pod-template-hash annotation (which is derived
/// from it: see [`annotate_pod_template`]).
pub fn pod_template(instance: &ValidatedInstance) -> Value {
    let mut env = vec![
        json!({"name": "KURA_ACCOUNT", "value": instance.account}),
        json!({"name": "KURA_REGION", "value": instance.region}),
        json!({"name": "KURA_CONFIG", "value": "/etc/kura/kura.json"}),
    ];
    for var in &instance.env {
        env.push(match (&var.value, &var.secret_key_ref) {
            (_, Some(r)) => json!({"name": var.name, "valueFrom": {"secretKeyRef": {"name": r.name, "key": r.key}}}),
            (value, None) => json!({"name": var.name, "value": value.as_deref().unwrap_or_default()}),
        });
    }
    let mut resources = serde_json::Map::new();
    for (part, amounts) in [
        ("requests", &instance.resources.requests),
        ("limits", &instance.resources.limits),
    ] {
        if let Some(a) = amounts {
            let mut m = serde_json::Map::new();
            if let Some(cpu) = &a.cpu {
                m.insert("cpu".into(), Value::String(cpu.clone()));
            }
            if let Some(mem) = &a.memory {
                m.insert("memory".into(), Value::String(mem.clone()));
            }
            resources.insert(part.into(), Value::Object(m));
        }
    }
    let mut container = json!({
        "name": "kura",
        "image": instance.image,
        "ports": [{ "name": "http", "containerPort": CACHE_PORT, "protocol": "TCP" }],
        "readinessProbe": { "httpGet": { "path": "/up", "port": "http" }, "periodSeconds": 5 },
        "livenessProbe": { "httpGet": { "path": "/up", "port": "http" }, "periodSeconds": 10, "failureThreshold": 6 },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": { "drop": ["ALL"] },
        },
        "volumeMounts": [
            { "name": "data", "mountPath": "/var/lib/kura" },
            { "name": "config", "mountPath": "/etc/kura", "readOnly": true },
        ],
    });
    container["env"] = Value::Array(env);
    container["resources"] = Value::Object(resources);
    let mut template = json!({
        "spec": {
            "serviceAccountName": instance.name,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "fsGroup": 65532,
                "seccompProfile": { "type": "RuntimeDefault" },
            },
            "volumes": [{ "name": "config", "configMap": { "name": config_map_name(instance) } }],
        },
    });
    template["metadata"]["labels"] = instance_labels(instance);
    template["spec"]["containers"] = Value::Array(vec![container]);
    template
}

/// Stamp the hash of the pod-relevant inputs into the template: a change of it is
/// what rolls the pods, and nothing else does (INCIDENTS.md #4).
pub fn annotate_pod_template(template: &mut Value, pod_template_hash: &str) {
    template["metadata"]["annotations"] =
        json!({ ANNOTATION_POD_TEMPLATE_HASH: pod_template_hash });
}

/// A StatefulSet: each replica gets a stable identity and its own cache volume
/// from the claim template; claims are retained on scale-down and deletion, so a
/// rollout can never lose data.
pub fn stateful_set(instance: &ValidatedInstance, template: Value) -> Value {
    let mut claim_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": { "requests": { "storage": instance.storage_size } },
    });
    if let Some(class) = &instance.storage_class {
        claim_spec["storageClassName"] = Value::String(class.clone());
    }
    let mut claim_template = json!({ "metadata": { "name": "data" } });
    claim_template["metadata"]["labels"] = selector(instance);
    claim_template["spec"] = claim_spec;
    let mut set = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "spec": {
            "replicas": instance.replicas,
            "serviceName": instance.name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": { "type": "RollingUpdate" },
            "persistentVolumeClaimRetentionPolicy": { "whenDeleted": "Retain", "whenScaled": "Retain" },
        },
    });
    set["metadata"] = metadata(instance, &instance.name);
    set["spec"]["selector"]["matchLabels"] = selector(instance);
    set["spec"]["template"] = template;
    set["spec"]["volumeClaimTemplates"] = Value::Array(vec![claim_template]);
    set
}

pub fn service(instance: &ValidatedInstance) -> Value {
    let mut service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "spec": {
            "type": "ClusterIP",
            "ports": [{ "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" }],
        },
    });
    service["metadata"] = metadata(instance, &instance.name);
    service["spec"]["selector"] = selector(instance);
    service
}

pub fn pod_disruption_budget(instance: &ValidatedInstance) -> Value {
    let mut budget = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "spec": { "maxUnavailable": 1 },
    });
    budget["metadata"] = metadata(instance, &instance.name);
    budget["spec"]["selector"]["matchLabels"] = selector(instance);
    budget
}

/// Only the cache port is reachable; everything else to the pods is denied.
pub fn network_policy(instance: &ValidatedInstance) -> Value {
    let mut policy = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "spec": {
            "policyTypes": ["Ingress"],
            "ingress": [{ "ports": [{ "port": CACHE_PORT, "protocol": "TCP" }] }],
        },
    });
    policy["metadata"] = metadata(instance, &instance.name);
    policy["spec"]["podSelector"]["matchLabels"] = selector(instance);
    policy
}

/// One Ingress per host, all with the resolved ingress class.
pub fn ingresses(instance: &ValidatedInstance) -> Vec<Value> {
    std::iter::once(&instance.host)
        .chain(instance.aliases.iter())
        .enumerate()
        .map(|(i, host)| {
            let mut ingress = json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "spec": {
                    "ingressClassName": instance.gateway.ingress_class_name,
                    "rules": [{
                        "host": host,
                        "http": { "paths": [{
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": { "service": { "name": instance.name, "port": { "name": "http" } } },
                        }]},
                    }],
                },
            });
            ingress["metadata"] = metadata(instance, &names::ingress(&instance.name, i, host));
            ingress
        })
        .collect()
}

/// The dedicated gateway, when the instance resolved to one. It is shared by every
/// instance of the same account and region in the namespace, so it carries no
/// owner reference to any one of them: it is deleted when no instance's desired
/// state references it any more (see reconcile::prune and the gateway controller).
pub fn gateway(instance: &ValidatedInstance, config: &OperatorConfig) -> Option<Value> {
    if instance.gateway.mode != GatewayMode::Dedicated {
        return None;
    }
    let name = instance.gateway.gateway_name.as_ref()?;
    Some(json!({
        "apiVersion": "kura.dev/v1alpha1",
        "kind": "KuraGateway",
        "metadata": {
            "name": name,
            "namespace": instance.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                LABEL_NAME: "kura-gateway",
                LABEL_ACCOUNT: instance.account,
                LABEL_REGION: instance.region,
            },
        },
        "spec": {
            "account": instance.account,
            "region": instance.region,
            "ingressClassName": instance.gateway.ingress_class_name,
            "controller": config.gateway.controller,
            "image": config.gateway.image,
            "replicas": config.gateway.replicas,
        },
    }))
}
