//! `observe`: read what `plan` and `probe` need from the reflector caches.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::plan::{LiveChild, Observed};
use super::stores::Stores;
use crate::api::KuraInstance;
use crate::keys::{ANNOTATION_REAPPLY_AT, ANNOTATION_REVISION, FIELD_MANAGER};
use crate::render::hash::hex_sha256;
use crate::render::{Desired, ObjectId};

pub fn observe(instance: &KuraInstance, desired: Option<&Desired>, stores: &Stores) -> Observed {
    let status = instance.status.clone().unwrap_or_default();
    let mut ids: Vec<ObjectId> = status
        .inventory
        .iter()
        .map(ObjectId::from_inventory)
        .collect();
    if let Some(d) = desired {
        ids.extend(d.objects.iter().map(|o| o.id.clone()));
    }
    let children: BTreeMap<ObjectId, LiveChild> = ids
        .into_iter()
        .filter_map(|id| {
            let meta = stores.meta(&id)?;
            Some((id, live_child(&meta)))
        })
        .collect();
    let running_image = desired.and_then(|d| {
        let sts_id = d
            .objects
            .iter()
            .find(|o| o.id.kind == "StatefulSet")?
            .id
            .clone();
        let sts = stores.stateful_set(&sts_id)?;
        let pod = sts.spec.as_ref()?.template.spec.as_ref()?;
        pod.containers
            .iter()
            .find(|c| c.name == "kura")
            .and_then(|c| c.image.clone())
    });
    Observed {
        generation: instance.metadata.generation,
        force_token: instance
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REAPPLY_AT))
            .cloned(),
        paused: instance.spec.paused,
        status,
        children,
        running_image,
        // Not a cache's to say: the reconcile knows its own recent applies.
        just_applied: false,
    }
}

pub fn live_child(meta: &ObjectMeta) -> LiveChild {
    LiveChild {
        revision: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REVISION))
            .cloned(),
        owned_fields: owned_fields(meta),
        other_managers: other_managers(meta),
    }
}

fn other_managers(meta: &ObjectMeta) -> Vec<String> {
    let mut names: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .filter_map(|m| m.manager.clone())
        .filter(|m| m != FIELD_MANAGER)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Fingerprint of the fields this operator's field manager owns (by apply). When
/// another actor takes one of them (an Update or a forced Apply), it changes.
pub fn owned_fields(meta: &ObjectMeta) -> Option<String> {
    let entry = meta.managed_fields.as_ref()?.iter().find(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.operation.as_deref() == Some("Apply")
            && m.subresource.as_deref().unwrap_or("").is_empty()
    })?;
    let fields = &entry.fields_v1.as_ref()?.0;
    // The reflector caches keep only this fingerprint (controller.rs); a real
    // fieldsV1 is always an object.
    if let serde_json::Value::String(fingerprint) = fields {
        return Some(fingerprint.clone());
    }
    let fields = serde_json::to_vec(fields).ok()?;
    Some(hex_sha256(&fields)[..16].to_string())
}
