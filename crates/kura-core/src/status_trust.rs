//! Which records of an instance's status the operator wrote itself.
//!
//! Status is a report, and anyone allowed to write the status subresource
//! (a tenant's script, another controller) can write any of it. The operator
//! reads some of it back as hints (the rollout record, the inventory, retry
//! and take-back counts), so it must tell its own records from others'. The
//! apiserver does: every write of status is a managedFields entry naming
//! its field manager, and the fields an update *changed* become that
//! manager's. A top-level status field that a manager other than the
//! operator's holds was written (or last changed) by someone else: the
//! operator does not trust it, and its next status write (which replaces
//! the whole status, `reconcile::status::write_status`) takes it back.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};

use crate::keys::{FIELD_MANAGER, GATEWAY_FIELD_MANAGER};

fn foreign_status_entry(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref() == Some("status")
        && entry
            .manager
            .as_deref()
            .is_none_or(|m| m != FIELD_MANAGER && m != GATEWAY_FIELD_MANAGER)
}

/// The top-level status fields (`rollout`, `inventory`, …) an entry holds.
fn status_fields(entry: &ManagedFieldsEntry) -> impl Iterator<Item = String> + '_ {
    entry
        .fields_v1
        .as_ref()
        .and_then(|f| f.0.get("f:status")?.as_object())
        .into_iter()
        .flat_map(|fields| fields.keys())
        .filter_map(|k| k.strip_prefix("f:").map(str::to_string))
}

/// Trims `meta`'s managedFields to what [`foreign_status_fields`] reads: the
/// entries of other managers on the status subresource, each with only the
/// top-level status fields it holds.
pub fn compact(meta: &mut ObjectMeta) {
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let kept: Vec<ManagedFieldsEntry> = entries
        .iter()
        .filter(|e| foreign_status_entry(e))
        .map(|e| {
            let fields: serde_json::Map<String, serde_json::Value> = status_fields(e)
                .map(|f| (format!("f:{f}"), serde_json::json!({})))
                .collect();
            ManagedFieldsEntry {
                manager: e.manager.clone(),
                operation: e.operation.clone(),
                subresource: e.subresource.clone(),
                fields_v1: Some(FieldsV1(serde_json::json!({ "f:status": fields }))),
                ..Default::default()
            }
        })
        .filter(|e| status_fields(e).next().is_some())
        .collect();
    meta.managed_fields = (!kept.is_empty()).then_some(kept);
}

/// The top-level status fields some manager other than the operator holds.
pub fn foreign_status_fields(meta: &ObjectMeta) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| foreign_status_entry(e))
        .flat_map(status_fields)
        .collect()
}

/// Whether the operator can take status field `field` (its camelCase name)
/// as its own record.
pub fn written_by_operator(meta: &ObjectMeta, field: &str) -> bool {
    !foreign_status_fields(meta).contains(field)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(entries: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({ "managedFields": entries })).unwrap()
    }

    #[test]
    fn a_record_another_manager_wrote_is_not_the_operators() {
        let m = meta(json!([
            {"manager": "kura-operator", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}, "f:inventory": {}}}},
            {"manager": "intruder", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:rollout": {"f:state": {}}}}},
            {"manager": "kubectl", "operation": "Update",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:rollout": {}}}},
        ]));
        assert!(!written_by_operator(&m, "rollout"));
        assert!(written_by_operator(&m, "inventory"));
        assert!(written_by_operator(&m, "phase"));
    }

    #[test]
    fn compacting_keeps_only_what_says_whose_a_status_field_is() {
        let mut m = meta(json!([
            {"manager": "kura-operator", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}},
            {"manager": "intruder", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:rollout": {"f:state": {}, "f:since": {}}}}},
            {"manager": "kubectl-client-side-apply", "operation": "Update",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:image": {}}}},
        ]));
        let before = foreign_status_fields(&m);
        compact(&mut m);
        assert_eq!(foreign_status_fields(&m), before);
        let kept = m.managed_fields.as_ref().unwrap();
        assert_eq!(kept.len(), 1, "only the other manager's status entry");
        assert_eq!(
            kept[0].fields_v1.as_ref().unwrap().0,
            json!({"f:status": {"f:rollout": {}}})
        );
        let mut none = meta(json!([
            {"manager": "kura-operator", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]));
        compact(&mut none);
        assert_eq!(
            none.managed_fields, None,
            "nothing kept for the operator's own"
        );
    }
}
