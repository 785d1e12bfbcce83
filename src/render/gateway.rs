//! Children of a `KuraGateway`: its IngressClass, ingress controller Deployment
//! and Service. Pure, like the instance renderer.

use serde_json::json;

use super::Desired;
use crate::api::KuraGateway;
use crate::keys::*;

pub fn render_gateway(gw: &KuraGateway) -> Desired {
    let name = gw.metadata.name.clone().unwrap_or_default();
    let namespace = gw.metadata.namespace.clone().unwrap_or_default();
    let uid = gw.metadata.uid.clone().unwrap_or_default();
    let labels = json!({
        LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_NAME: "kura-gateway",
        LABEL_GATEWAY: name,
        LABEL_ACCOUNT: gw.spec.account,
        LABEL_REGION: gw.spec.region,
    });
    let selector = json!({ LABEL_NAME: "kura-gateway", LABEL_GATEWAY: name });
    let metadata = json!({
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway", "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    // Cluster-scoped: no owner reference is possible; the gateway's finalizer removes it.
    let ingress_class = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": { "name": gw.spec.ingress_class_name, "labels": labels },
        "spec": { "controller": gw.spec.controller },
    });
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": gw.spec.replicas,
            "selector": { "matchLabels": selector },
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "automountServiceAccountToken": true,
                    "securityContext": { "runAsNonRoot": true, "runAsUser": 101, "seccompProfile": { "type": "RuntimeDefault" } },
                    "containers": [{
                        "name": "controller",
                        "image": gw.spec.image,
                        "args": [
                            format!("--ingress-class={}", gw.spec.ingress_class_name),
                            format!("--controller-class={}", gw.spec.controller),
                            format!("--watch-namespace={namespace}"),
                            format!("--publish-service={namespace}/{name}"),
                            "--http-port=8080".to_string(),
                            "--https-port=8443".to_string(),
                        ],
                        "ports": [
                            { "name": "http", "containerPort": 8080, "protocol": "TCP" },
                            { "name": "https", "containerPort": 8443, "protocol": "TCP" },
                        ],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": { "drop": ["ALL"] },
                        },
                    }],
                },
            },
        },
    });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "LoadBalancer",
            "selector": selector,
            "ports": [
                { "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" },
                { "name": "https", "port": 443, "targetPort": "https", "protocol": "TCP" },
            ],
        },
    });
    Desired::from_objects(
        vec![ingress_class, deployment, service],
        String::new(),
        gw.spec.image.clone(),
    )
}
