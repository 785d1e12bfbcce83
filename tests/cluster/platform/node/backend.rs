//! Item 5 of issue 23, the backend's half: the route through the node's real
//! ingress controller works and reaches the instance's pod, and that pod
//! answers the region's health path with 503: the instance is not Ready,
//! naming the status.
//!
//! How it stays honest: the stand-in Kura (hack/control-plane/standin) answers
//! `STANDIN_UNAVAILABLE_PATH` (here /health, set in the instance's spec.env)
//! with 503 while its probes' path, /up, stays 200. So the pod stays Ready and
//! its route in Traefik stays, and the 503 the check gets is the backend's.
//! (A backend failing its readiness probe is dropped from the endpoints
//! first: Traefik then answers 404 for it, which is another step's message.)

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;
use kura_core::api::{ConditionStatus, KuraInstance};
use serde_json::json;

use super::ingress::{IngressNode, http_get, node_config};
use crate::operator::{Operator, Options, instance, wait_ready};
use crate::support::{apply_json, wait_for};

fn config(path: &str) -> String {
    format!(
        "{}    endpointCheck: {{enabled: true, path: {path}}}\n",
        node_config()
    )
}

/// The backend answers the health path with 503 through a working route: the
/// instance is not Ready, reason EndpointNotAnswering, the message naming HTTP
/// 503; the region's check moved to a path the backend answers (/up), it is
/// Ready, with the same pod. Without the check (`enabled: false`, or before
/// issue 23) the instance is Ready throughout: the first wait times out.
#[tokio::test]
async fn a_backend_answering_503_makes_the_instance_not_ready_naming_the_status() {
    let Some(node) = IngressNode::get("backend").await else {
        return;
    };
    let client = node.client.clone();
    let ns = node.namespace("backend").await;
    node.volume_for(&ns, "data-acme-0").await;
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        ..Options::default()
    };
    let op = Operator::start_with(&ns, &config("/health"), &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["gateway"] = json!({"mode": "Shared"});
    acme["spec"]["env"] = json!([{"name": "STANDIN_UNAVAILABLE_PATH", "value": "/health"}]);
    apply_json(&instances, "test", acme).await.unwrap();

    let down = wait_for(
        "the instance to be not Ready naming the backend's 503",
        Duration::from_secs(180),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let c = s.conditions.into_iter().find(|c| c.type_ == "Ready")?;
            (c.status == ConditionStatus::False && c.message.contains("HTTP 503")).then_some(c)
        },
    )
    .await;
    assert_eq!(down.reason, "EndpointNotAnswering", "{down:?}");
    assert!(
        down.message.contains(&format!("{}:80", node.address)),
        "names the address and port: {}",
        down.message
    );
    eprintln!("not Ready: {}", down.message);
    // The route is there and reaches the pod, which is Ready: /up answers
    // 200, /health is the backend's own 503 (the stand-in's text).
    let host = Api::<Ingress>::namespaced(client.clone(), &ns)
        .get("acme")
        .await
        .unwrap()
        .spec
        .unwrap()
        .rules
        .unwrap()[0]
        .host
        .clone()
        .unwrap();
    let health = http_get(&node.address, 80, &host, "/health").await;
    assert!(
        matches!(&health, Ok((503, body)) if body.contains("STANDIN_UNAVAILABLE_PATH")),
        "the backend's 503, not the controller's: {health:?}"
    );
    let up = http_get(&node.address, 80, &host, "/up").await;
    assert!(matches!(up, Ok((200, _))), "{up:?}");
    let pod = Api::<Pod>::namespaced(client.clone(), &ns)
        .get("acme-0")
        .await
        .unwrap();
    let uid = pod.metadata.uid.clone();
    let pod_ready = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(pod_ready, "the pod stays Ready (its probes are on /up)");

    // The check on a path the backend answers: Ready, the pod unchanged.
    op.set_config(&config("/up"));
    wait_ready(&instances, "acme").await;
    let same = Api::<Pod>::namespaced(client.clone(), &ns)
        .get("acme-0")
        .await
        .unwrap();
    assert_eq!(
        same.metadata.uid, uid,
        "no restart: the check is not rendered"
    );
    drop(op);
}
