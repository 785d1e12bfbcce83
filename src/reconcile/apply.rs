//! `apply`: server-side apply of the desired set under one field manager. Fields
//! other actors own are left alone (INCIDENTS.md #4); fields we render are ours
//! (`force`), and an unchanged object is a no-op that keeps its resourceVersion.

use futures::future::try_join_all;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

use super::observe::owned_fields;
use crate::api::InventoryEntry;
use crate::keys::FIELD_MANAGER;
use crate::render::{Desired, ObjectId, RenderedObject};

#[derive(Debug, thiserror::Error)]
#[error("applying {object}: {source}")]
pub struct ApplyError {
    pub object: String,
    #[source]
    pub source: kube::Error,
}

impl ApplyError {
    /// Throttling, server errors and transport failures say nothing about the
    /// input: they are retried with backoff without spending the retry budget
    /// (a throttled fleet must not go Stalled).
    pub fn is_transient(&self) -> bool {
        match &self.source {
            kube::Error::Api(s) => s.code == 429 || s.code >= 500,
            _ => true,
        }
    }
}

pub fn api_resource(id: &ObjectId) -> ApiResource {
    let (group, version) = id
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", id.api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &id.kind);
    let plural = match id.kind.as_str() {
        "NetworkPolicy" => "networkpolicies".to_string(),
        "IngressClass" => "ingressclasses".to_string(),
        "Ingress" => "ingresses".to_string(),
        kind => format!("{}s", kind.to_ascii_lowercase()),
    };
    ApiResource::from_gvk_with_plural(&gvk, &plural)
}

pub fn dynamic_api(client: &Client, id: &ObjectId) -> Api<DynamicObject> {
    let ar = api_resource(id);
    match &id.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Objects the workload and the ingresses depend on go first (a pod cannot be
/// created before its ServiceAccount exists).
fn wave(object: &RenderedObject) -> u8 {
    match object.id.kind.as_str() {
        "StatefulSet" | "Deployment" | "Ingress" => 1,
        _ => 0,
    }
}

/// Apply every object; returns the inventory with each object's owned-field fingerprint.
pub async fn apply(client: &Client, desired: &Desired) -> Result<Vec<InventoryEntry>, ApplyError> {
    let mut fingerprints = std::collections::BTreeMap::new();
    for w in 0..=1 {
        let batch = desired
            .objects
            .iter()
            .filter(|o| wave(o) == w)
            .map(|o| async move {
                let api = dynamic_api(client, &o.id);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let applied = api
                    .patch(&o.id.name, &params, &Patch::Apply(&o.manifest))
                    .await
                    .map_err(|source| ApplyError {
                        object: o.id.to_string(),
                        source,
                    })?;
                Ok::<_, ApplyError>((o.id.clone(), owned_fields(&applied.metadata)))
            });
        fingerprints.extend(try_join_all(batch).await?);
    }
    Ok(desired
        .inventory()
        .into_iter()
        .map(|mut e| {
            e.owned_fields = fingerprints
                .get(&ObjectId::from_inventory(&e))
                .cloned()
                .flatten();
            e
        })
        .collect())
}
