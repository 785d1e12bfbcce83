//! Who else holds a field this operator renders, read from an object's
//! managedFields (docs/incidents.md #4: name the other writer, exactly).
//!
//! A rival is another manager of the object's spec or metadata, including one
//! that wrote through the scale subresource (`kubectl scale`); status writers
//! never are (they own no rendered field). A rival holds a rendered field when
//! it owns a field that this operator's own apply entry does not (a field both
//! own is shared, not taken) and that the rendered manifest sets (another
//! tool's own annotation is its business).
//!
//! The reflector caches keep of each rival only what it holds that the
//! operator's entry does not ([`exclusive`]), so [`contested`] reads the same
//! from a cached object as from the object the apiserver sent.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use serde_json::{Map, Value};

use super::applied_by;
use crate::keys::{FIELD_MANAGER, GATEWAY_FIELD_MANAGER};

/// The operator's field managers: the instances' and the gateways'.
const OURS: [&str; 2] = [FIELD_MANAGER, GATEWAY_FIELD_MANAGER];

/// An apply entry of one of this operator's field managers (of the object
/// itself, not a subresource).
pub fn is_own_entry(entry: &ManagedFieldsEntry) -> bool {
    OURS.iter().any(|manager| applied_by(entry, manager))
}

/// Another manager that may hold rendered fields: not this operator, not a
/// status writer.
pub fn is_rival(entry: &ManagedFieldsEntry) -> bool {
    entry.manager.as_deref().is_some_and(|m| !OURS.contains(&m))
        && entry.subresource.as_deref() != Some("status")
}

/// How a rival is named: its manager, and the subresource it wrote through.
pub fn name(entry: &ManagedFieldsEntry) -> String {
    let manager = entry.manager.clone().unwrap_or_default();
    match entry.subresource.as_deref().filter(|s| !s.is_empty()) {
        Some(sub) => format!("{manager} ({sub} subresource)"),
        None => manager,
    }
}

/// The fields of `rival` (a fieldsV1 tree) that `ours` does not hold, or
/// `None` when nothing is left. `"."` (the existence of a map or list element,
/// not a value) is never held against anyone.
pub fn exclusive(rival: &Value, ours: Option<&Value>) -> Option<Value> {
    let Value::Object(children) = rival else {
        return None;
    };
    let ours = ours.and_then(Value::as_object);
    let mut left = Map::new();
    for (key, sub) in children {
        if key == "." {
            continue;
        }
        let theirs_only = match ours.and_then(|o| o.get(key)) {
            None => without_markers(sub),
            // One of the two owns the whole field: shared.
            Some(o) if is_leaf(o) || is_leaf(sub) => None,
            Some(o) => exclusive(sub, Some(o)),
        };
        if let Some(v) = theirs_only {
            left.insert(key.clone(), v);
        }
    }
    (!left.is_empty()).then_some(Value::Object(left))
}

/// `fields` without `"."` markers: a leaf stays a leaf; a subtree with
/// nothing but markers is nothing.
fn without_markers(fields: &Value) -> Option<Value> {
    if is_leaf(fields) {
        return Some(Value::Object(Map::new()));
    }
    exclusive(fields, None)
}

/// A field owned as a whole: `{}`.
fn is_leaf(fields: &Value) -> bool {
    fields.as_object().is_none_or(Map::is_empty)
}

/// Whether `fields` (a fieldsV1 tree) owns a value `manifest` sets.
pub fn holds_any(fields: &Value, manifest: &Value) -> bool {
    let Value::Object(children) = fields else {
        return false;
    };
    children.iter().any(|(key, sub)| {
        select(key, manifest)
            .into_iter()
            .any(|value| is_leaf(sub) || holds_any(sub, value))
    })
}

/// What a fieldsV1 key selects in a manifest value: a member (`f:name`), a
/// list element by its key fields (`k:{...}`, an absent key field matching
/// what the apiserver defaults), by value (`v:...`) or by index (`i:N`).
fn select<'a>(key: &str, value: &'a Value) -> Vec<&'a Value> {
    let items = || value.as_array().map(|a| a.iter()).into_iter().flatten();
    if let Some(name) = key.strip_prefix("f:") {
        return value
            .get(name)
            .filter(|v| !v.is_null())
            .into_iter()
            .collect();
    }
    if let Some(json) = key.strip_prefix("k:") {
        let Ok(Value::Object(wanted)) = serde_json::from_str::<Value>(json) else {
            return Vec::new();
        };
        return items()
            .filter(|item| {
                wanted
                    .iter()
                    .all(|(k, v)| item.get(k).is_none_or(|have| have == v))
            })
            .collect();
    }
    if let Some(json) = key.strip_prefix("v:") {
        let Ok(wanted) = serde_json::from_str::<Value>(json) else {
            return Vec::new();
        };
        return items().filter(|item| **item == wanted).collect();
    }
    if let Some(index) = key.strip_prefix("i:") {
        return index
            .parse::<usize>()
            .ok()
            .and_then(|i| value.get(i))
            .into_iter()
            .collect();
    }
    Vec::new()
}

/// Rivals that hold a value `manifest` sets, named, sorted, each once; what
/// `manager` (the operator's field manager of this object) holds is shared.
pub fn contested(meta: &ObjectMeta, manifest: &Value, manager: &str) -> Vec<String> {
    let entries = meta.managed_fields.as_deref().unwrap_or_default();
    let ours = entries
        .iter()
        .find(|e| applied_by(e, manager))
        .and_then(|e| e.fields_v1.as_ref())
        .map(|f| &f.0);
    let mut names: Vec<String> = entries
        .iter()
        .filter(|e| is_rival(e))
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .and_then(|f| exclusive(&f.0, ours))
                .is_some_and(|held| holds_any(&held, manifest))
        })
        .map(name)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests;
