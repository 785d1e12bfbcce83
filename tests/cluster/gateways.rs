//! Dedicated gateways against the real control plane: a gateway serves and is
//! kept by its own namespace only, its IngressClass cannot be claimed from
//! another namespace, only gateways the operator created are collected (and not
//! while anything still uses them), drift in its children is repaired as it
//! happens (a contested field at most three times a minute, then held and
//! reported), bindings of its names made by someone else are reported and left
//! alone, and deleting a namespace never waits for the operator. A host is
//! served to one instance only (`host_claims`), and generated names cannot
//! collide (`names`).

mod bindings;
mod collection;
mod conflict;
mod drift;
pub(crate) mod host_claims;
mod migration;
mod names;
mod tenancy;

use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::support::{PrivatePlane, WAIT_CRDS, wait_for};
use kura_core::api::{Condition, KuraGateway};

/// The IngressClass controller kura-sim serves (it plays the ingress
/// controller a real gateway would run, and gives Ingresses an address).
pub const SIM: &str = "kura.dev/sim-ingress";
pub const IMAGE: &str = "registry.example/kura:1.0.0";
pub const T: Duration = Duration::from_secs(60);

pub fn condition(gw: &KuraGateway, type_: &str) -> Option<Condition> {
    gw.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// A KuraGateway as someone other than the operator writes it.
pub fn gateway_json(
    name: &str,
    account: &str,
    class: &str,
    labels: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway",
        "metadata": {"name": name, "labels": labels},
        "spec": {"account": account, "region": "r1", "ingressClassName": class,
                 "controller": SIM, "image": "registry.example/gateway:1.0.0", "replicas": 1},
    })
}

/// Waits until the operator did something about the gateway `name`: deleted
/// it (`None`), or reported on it in its status (its conditions).
pub async fn acted_on(gateways: &Api<KuraGateway>, name: &str) -> Option<Vec<Condition>> {
    wait_for("the operator to act on the gateway", T, || async {
        match gateways.get_opt(name).await.ok()? {
            None => Some(None),
            Some(g) => g
                .status
                .filter(|s| !s.conditions.is_empty())
                .map(|s| Some(s.conditions)),
        }
    })
    .await
}

/// The field managers of an object's spec and metadata (not its status),
/// with the operation, e.g. `kura-operator-gateway/Apply`.
pub fn managers<K: Resource>(object: &K) -> Vec<String> {
    let mut out: Vec<String> = object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .map(|m| {
            format!(
                "{}/{}",
                m.manager.as_deref().unwrap_or(""),
                m.operation.as_deref().unwrap_or("")
            )
        })
        .collect();
    out.sort();
    out
}

/// Reasons of the Events in `namespace` about the KuraGateway `name`.
pub async fn event_reasons(client: &Client, namespace: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("KuraGateway") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A control plane of the test's own, for an operator that watches every
/// namespace (on the shared plane it would reconcile every other test's
/// instances). Ports apart from the shared plane's and other checkouts'.
pub fn private_plane(name: &str, index: u16) -> PrivatePlane {
    let api: u16 = std::env::var("KURA_API_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(16443);
    // 40.. keeps clear of plane_faults (1); one slot per checkout's API port.
    let offset = 40 + (api.saturating_sub(16443) / 100) * 4 + index;
    let plane = PrivatePlane::up(name, offset);
    let status = std::process::Command::new(crate::support::kubectl())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(WAIT_CRDS)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the CRDs did not become established");
    plane
}
