//! `--show-diff`: a unified diff of the YAML of a live object's fields owned by
//! the operator (`fields`) against the desired manifest. Both are JSON values
//! with sorted keys, so the lines of equal parts line up.

use serde_json::Value;

use kura_core::render::ObjectId;

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// `live`: the YAML of the live object's fields owned by the operator, absent
/// when the object is created; `desired` absent: it is pruned.
pub fn unified(id: &ObjectId, live: Option<&str>, desired: Option<&Value>) -> String {
    let live_yaml = live.unwrap_or_default();
    let desired_yaml = desired.map(yaml).unwrap_or_default();
    let live_header = match live {
        Some(_) => format!("live {id} (fields owned by kura-operator)"),
        None => format!("live {id} (absent)"),
    };
    let desired_header = match desired {
        Some(_) => format!("desired {id}"),
        None => format!("desired {id} (pruned)"),
    };
    similar::TextDiff::from_lines(live_yaml, &desired_yaml)
        .unified_diff()
        .context_radius(CONTEXT)
        .header(&live_header, &desired_header)
        .to_string()
}

pub fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| format!("# not YAML: {e}\n"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use kura_core::kind::ChildKind;

    fn id() -> ObjectId {
        ObjectId {
            kind: ChildKind::Ingress,
            namespace: Some("ns".into()),
            name: "acme".into(),
        }
    }

    #[test]
    fn a_changed_field_is_one_line_out_and_one_in() {
        let live = json!({"kind": "Ingress", "spec": {"rules": [{"host": "a.kura.test"}]}});
        let desired = json!({"kind": "Ingress", "spec": {"rules": [{"host": "a.kura2.test"}]}});
        let diff = unified(&id(), Some(&yaml(&live)), Some(&desired));
        assert!(
            diff.starts_with(
                "--- live Ingress ns/acme (fields owned by kura-operator)\n+++ desired Ingress ns/acme\n"
            ),
            "{diff}"
        );
        assert!(
            diff.contains("\n-  - host: a.kura.test\n+  - host: a.kura2.test\n"),
            "{diff}"
        );
        assert_eq!(
            diff.lines().filter(|l| l.starts_with('-')).count(),
            2,
            "{diff}"
        );
    }

    #[test]
    fn equal_objects_show_no_hunk() {
        let v = json!({"kind": "Ingress"});
        let diff = unified(&id(), Some(&yaml(&v)), Some(&v));
        assert!(!diff.contains("@@"), "{diff}");
    }

    #[test]
    fn a_created_object_is_all_added_and_a_pruned_one_all_removed() {
        let v = json!({"kind": "Ingress", "metadata": {"name": "acme"}});
        let created = unified(&id(), None, Some(&v));
        assert!(
            created.contains("(absent)") && created.contains("+kind: Ingress"),
            "{created}"
        );
        let pruned = unified(&id(), Some(&yaml(&v)), None);
        assert!(
            pruned.contains("(pruned)") && pruned.contains("-kind: Ingress"),
            "{pruned}"
        );
    }
}
