//! One function per child kind of an instance. Each returns a complete manifest.

use serde_json::{Value, json};

use super::instance_labels;
use crate::api::GatewayMode;
use crate::config::OperatorConfig;
use crate::keys::*;
use crate::names;
use crate::validate::ValidatedInstance;

fn metadata(instance: &ValidatedInstance, name: &str) -> Value {
    let mut metadata = json!({
        "name": name,
        "namespace": instance.namespace,
        "labels": instance_labels(instance),
    });
    // An instance read from a file (offline `render`) has no uid yet: no owner.
    if !instance.uid.is_empty() {
        metadata["ownerReferences"] = json!([owner_reference(instance)]);
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
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(instance, &instance.name),
        "automountServiceAccountToken": false,
    })
}

pub fn config_map(instance: &ValidatedInstance) -> Value {
    let mut hosts = vec![instance.host.clone()];
    hosts.extend(instance.aliases.iter().cloned());
    let config = json!({
        "account": instance.account,
        "region": instance.region,
        "hosts": hosts,
        "listen": format!(":{CACHE_PORT}"),
        "dataDir": "/var/lib/kura",
    });
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(instance, &config_map_name(instance)),
        "data": { "kura.json": String::from_utf8(super::canonical_json(&config)).expect("JSON is UTF-8") },
    })
}

/// The pod template, without the pod-template-hash annotation (which is derived from it).
pub fn pod_template(instance: &ValidatedInstance, pod_template_hash: &str) -> Value {
    let mut env = vec![
        json!({"name": "KURA_ACCOUNT", "value": instance.account}),
        json!({"name": "KURA_REGION", "value": instance.region}),
        json!({"name": "KURA_CONFIG", "value": "/etc/kura/kura.json"}),
    ];
    for var in &instance.env {
        env.push(match (&var.value, &var.secret_key_ref) {
            (_, Some(r)) => json!({"name": var.name, "valueFrom": {"secretKeyRef": {"name": r.name, "key": r.key}}}),
            (value, None) => json!({"name": var.name, "value": value.clone().unwrap_or_default()}),
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
                m.insert("cpu".into(), json!(cpu));
            }
            if let Some(mem) = &a.memory {
                m.insert("memory".into(), json!(mem));
            }
            resources.insert(part.into(), Value::Object(m));
        }
    }
    let mut labels = instance_labels(instance);
    let mut template = json!({
        "metadata": { "labels": labels.take() },
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
            "containers": [{
                "name": "kura",
                "image": instance.image,
                "ports": [{ "name": "http", "containerPort": CACHE_PORT, "protocol": "TCP" }],
                "env": env,
                "resources": resources,
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
            }],
            "volumes": [{ "name": "config", "configMap": { "name": config_map_name(instance) } }],
        },
    });
    if !pod_template_hash.is_empty() {
        template["metadata"]["annotations"] =
            json!({ ANNOTATION_POD_TEMPLATE_HASH: pod_template_hash });
    }
    template
}

/// A StatefulSet: each replica gets a stable identity and its own cache volume
/// from the claim template; claims are retained on scale-down and deletion, so a
/// rollout can never lose data.
pub fn stateful_set(instance: &ValidatedInstance, pod_template_hash: &str) -> Value {
    let mut claim_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": { "requests": { "storage": instance.storage_size } },
    });
    if let Some(class) = &instance.storage_class {
        claim_spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(instance, &instance.name),
        "spec": {
            "replicas": instance.replicas,
            "serviceName": instance.name,
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": selector(instance) },
            "updateStrategy": { "type": "RollingUpdate" },
            "persistentVolumeClaimRetentionPolicy": { "whenDeleted": "Retain", "whenScaled": "Retain" },
            "template": pod_template(instance, pod_template_hash),
            "volumeClaimTemplates": [{
                "metadata": { "name": "data", "labels": selector(instance) },
                "spec": claim_spec,
            }],
        },
    })
}

pub fn service(instance: &ValidatedInstance) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(instance, &instance.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(instance),
            "ports": [{ "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" }],
        },
    })
}

pub fn pod_disruption_budget(instance: &ValidatedInstance) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(instance, &instance.name),
        "spec": { "maxUnavailable": 1, "selector": { "matchLabels": selector(instance) } },
    })
}

/// Only the cache port is reachable; everything else to the pods is denied.
pub fn network_policy(instance: &ValidatedInstance) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(instance, &instance.name),
        "spec": {
            "podSelector": { "matchLabels": selector(instance) },
            "policyTypes": ["Ingress"],
            "ingress": [{ "ports": [{ "port": CACHE_PORT, "protocol": "TCP" }] }],
        },
    })
}

/// One Ingress per host, all with the resolved ingress class.
pub fn ingresses(instance: &ValidatedInstance) -> Vec<Value> {
    std::iter::once(&instance.host)
        .chain(instance.aliases.iter())
        .enumerate()
        .map(|(i, host)| {
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": metadata(instance, &names::ingress(&instance.name, i, host)),
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
            })
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
