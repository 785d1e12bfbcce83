//! managedFields: which of an object's fields a manager holds, by apply. The
//! operator's own entries are fingerprinted (`fingerprint`); other managers are
//! rivals (`rivals`).

pub mod rivals;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};

use crate::keys::FIELD_MANAGER;
use crate::render::hash::hex_sha256;

/// An apply of the object itself (not a subresource) by `manager`.
pub fn applied_by(entry: &ManagedFieldsEntry, manager: &str) -> bool {
    entry.manager.as_deref() == Some(manager)
        && entry.operation.as_deref() == Some("Apply")
        && entry.subresource.as_deref().unwrap_or("").is_empty()
}

/// Fingerprint of the fields this operator's field manager owns (by apply). When
/// another actor takes one of them (an Update or a forced Apply), it changes.
pub fn owned_fields(meta: &ObjectMeta) -> Option<String> {
    owned_fields_by(meta, FIELD_MANAGER)
}

/// [`owned_fields`] of another of the operator's field managers.
pub fn owned_fields_by(meta: &ObjectMeta, manager: &str) -> Option<String> {
    let entry = meta
        .managed_fields
        .as_ref()?
        .iter()
        .find(|m| applied_by(m, manager))?;
    fingerprint(entry.fields_v1.as_ref()?)
}

/// A short hash of a managedFields entry's fields.
pub fn fingerprint(fields: &FieldsV1) -> Option<String> {
    // The reflector caches keep only this fingerprint (compact.rs); a real
    // fieldsV1 is always an object.
    if let serde_json::Value::String(fingerprint) = &fields.0 {
        return Some(fingerprint.clone());
    }
    let fields = serde_json::to_vec(&fields.0).ok()?;
    Some(hex_sha256(&fields)[..16].to_string())
}
