//! The fields of a live object that this operator owns: its server-side apply
//! entry in `metadata.managedFields`, whose `fieldsV1` is a set of paths in the
//! structured-merge-diff format (`f:<name>` a field of a map, `k:<json>` the
//! element of an associative list with those key fields, `v:<json>` the element
//! of a set with that value, `i:<n>` an element by index, `.` the map or
//! element itself; an empty set under a path owns all of its value).
//!
//! `--show-diff` compares these with the desired manifest, so a label or field
//! another manager added never shows as a difference: the operator never sends
//! it, and server-side apply leaves it alone (docs/incidents.md #4).

use serde_json::{Map, Value};

use kura_core::keys::FIELD_MANAGER;
use kura_core::kind::ChildKind;

/// The operator's apply entry's `fieldsV1`, if the object has one.
pub fn operator_field_set(object: &Value) -> Option<&Map<String, Value>> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| {
            m["manager"] == FIELD_MANAGER
                && m["operation"] == "Apply"
                && m["subresource"].as_str().unwrap_or("").is_empty()
        })?["fieldsV1"]
        .as_object()
}

/// The part of `object` (of `kind`) the operator owns, with the object's
/// identity (apiVersion, kind, name, namespace) so it reads like a manifest;
/// `None` when the operator owns nothing of it.
pub fn owned_by_operator(kind: ChildKind, object: &Value) -> Option<Value> {
    let set = operator_field_set(object)?;
    let mut owned = project(object, set);
    drop_server_defaults(kind, &mut owned);
    let Value::Object(out) = &mut owned else {
        return None;
    };
    out.insert("apiVersion".into(), kind.api_version().into());
    out.insert("kind".into(), kind.kind().into());
    let meta = out
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        for key in ["name", "namespace"] {
            if let Some(v) = object["metadata"].get(key) {
                meta.insert(key.to_string(), v.clone());
            }
        }
    }
    Some(owned)
}

/// Fields the apiserver fills into a value the operator owns whole (an atomic
/// list): the operator never renders them, and its apply leaves them as they
/// are (the server fills them again), so they are no difference. The claim
/// templates are the one such value among what the operator renders.
fn drop_server_defaults(kind: ChildKind, owned: &mut Value) {
    if kind != ChildKind::StatefulSet {
        return;
    }
    let Some(templates) = owned
        .pointer_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for template in templates.iter_mut().filter_map(Value::as_object_mut) {
        for key in ["apiVersion", "kind", "status"] {
            template.remove(key);
        }
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("volumeMode");
        }
    }
}

/// What of `value` the set `set` names.
pub fn project(value: &Value, set: &Map<String, Value>) -> Value {
    // Nothing below the path: the whole value is owned (a leaf, or an atomic
    // map or list).
    if set.is_empty() {
        return value.clone();
    }
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (path, below) in set {
                let Some(name) = path.strip_prefix("f:") else {
                    continue;
                };
                if let Some(child) = map.get(name) {
                    out.insert(name.to_string(), project(child, as_set(below)));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .filter_map(|(index, item)| {
                    set.iter()
                        .find(|(path, _)| names_element(path, index, item))
                        .map(|(_, below)| project(item, as_set(below)))
                })
                .collect(),
        ),
        // `.` alone on a scalar: the value itself.
        scalar => scalar.clone(),
    }
}

fn as_set(v: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    v.as_object().unwrap_or(&EMPTY)
}

/// Whether the path element `path` names the list element `item` at `index`.
fn names_element(path: &str, index: usize, item: &Value) -> bool {
    if let Some(key) = path.strip_prefix("k:") {
        let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else {
            return false;
        };
        key.iter()
            .all(|(field, want)| item.get(field) == Some(want))
    } else if let Some(v) = path.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| &v == item)
    } else if let Some(i) = path.strip_prefix("i:") {
        i.parse::<usize>() == Ok(index)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A Service as the apiserver returns it after an apply by the operator and
    /// an update by another manager that added a label and a port.
    fn service() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "acme", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": {"app.kubernetes.io/name": "kura", "team": "blue"},
                "finalizers": ["kura.dev/a", "other/b"],
                "managedFields": [
                    {"manager": "kura-operator", "operation": "Apply", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {"f:app.kubernetes.io/name": {}},
                            "f:finalizers": {"v:\"kura.dev/a\"": {}},
                        },
                        "f:spec": {
                            "f:ports": {"k:{\"port\":8080,\"protocol\":\"TCP\"}": {
                                ".": {}, "f:name": {}, "f:port": {}}},
                            "f:selector": {},
                        },
                     }},
                    {"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:team": {}}},
                        "f:spec": {"f:ports": {"k:{\"port\":9090,\"protocol\":\"TCP\"}": {}}},
                     }},
                    {"manager": "kura-operator", "operation": "Apply", "subresource": "status",
                     "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
                ],
            },
            "spec": {
                "clusterIP": "10.0.0.1",
                "ports": [
                    {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080},
                    {"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": 9090},
                ],
                "selector": {"app": "kura", "kura.dev/instance": "acme"},
                "type": "ClusterIP",
            },
            "status": {"loadBalancer": {}},
        })
    }

    #[test]
    fn only_the_operators_fields_remain_with_the_identity() {
        let owned = owned_by_operator(ChildKind::Service, &service()).unwrap();
        assert_eq!(
            owned,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "acme", "namespace": "ns",
                    "labels": {"app.kubernetes.io/name": "kura"},
                    "finalizers": ["kura.dev/a"],
                },
                "spec": {
                    // `k:` picks the element by its keys; of it only the owned fields.
                    "ports": [{"name": "http", "port": 8080}],
                    // An empty set owns the whole (atomic) value.
                    "selector": {"app": "kura", "kura.dev/instance": "acme"},
                },
            })
        );
    }

    #[test]
    fn the_dot_alone_keeps_an_empty_map_and_an_index_picks_an_element() {
        let set = json!({"f:a": {".": {}}, "f:list": {"i:1": {}}});
        let value = json!({"a": {"x": 1}, "list": ["zero", "one", "two"], "b": 2});
        assert_eq!(
            project(&value, set.as_object().unwrap()),
            json!({"a": {}, "list": ["one"]})
        );
    }

    #[test]
    fn a_key_with_several_fields_must_match_them_all() {
        let set = json!({"k:{\"name\":\"a\",\"port\":1}": {"f:x": {}}});
        let list = json!([
            {"name": "a", "port": 2, "x": "no"},
            {"name": "a", "port": 1, "x": "yes"},
        ]);
        assert_eq!(
            project(&list, set.as_object().unwrap()),
            json!([{"x": "yes"}])
        );
    }

    #[test]
    fn what_the_apiserver_fills_into_the_claim_templates_is_not_shown() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "acme", "managedFields": [{
                "manager": "kura-operator", "operation": "Apply",
                "fieldsV1": {"f:spec": {"f:replicas": {}, "f:volumeClaimTemplates": {}}},
            }]},
            "spec": {"replicas": 1, "volumeClaimTemplates": [{
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                         "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Pending"},
            }]},
        });
        assert_eq!(
            owned_by_operator(ChildKind::StatefulSet, &sts).unwrap()["spec"],
            json!({"replicas": 1, "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }]})
        );
    }

    #[test]
    fn no_entry_of_the_operator_is_nothing_owned() {
        let mut s = service();
        s["metadata"]["managedFields"][0]["manager"] = json!("someone");
        assert_eq!(owned_by_operator(ChildKind::Service, &s), None);
        // A status entry of the operator's is not its apply entry.
        let mut s = service();
        s["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_eq!(owned_by_operator(ChildKind::Service, &s), None);
    }
}
