//! The path logic of `rivals`, on managedFields as the apiserver writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::{contested, exclusive, holds_any};
use crate::keys::FIELD_MANAGER;

/// A StatefulSet as this operator renders it (the parts the cases touch).
fn manifest() -> Value {
    json!({
        "metadata": {"name": "a", "annotations": {"kura.dev/revision": "r1"},
                     "labels": {"app.kubernetes.io/managed-by": "kura-operator"}},
        "spec": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "kura", "image": "k:1",
                            "ports": [{"name": "http", "containerPort": 8080}]}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}},
    })
}

/// This operator's own entry: everything it renders.
fn ours() -> Value {
    json!({
        "f:metadata": {"f:annotations": {"f:kura.dev/revision": {}},
                       "f:labels": {"f:app.kubernetes.io/managed-by": {}}},
        "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {
            "f:containers": {"k:{\"name\":\"kura\"}": {".": {}, "f:name": {}, "f:image": {},
                "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:containerPort": {}}}}},
            "f:tolerations": {}}}},
    })
}

/// Ours, less the fields another manager took.
fn ours_without(path: &[&str]) -> Value {
    let mut v = ours();
    let (last, parents) = path.split_last().unwrap();
    let mut node = &mut v;
    for p in parents {
        node = node.get_mut(*p).unwrap();
    }
    node.as_object_mut().unwrap().remove(*last).unwrap();
    v
}

fn entry(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> Value {
    json!({"manager": manager, "operation": operation, "subresource": subresource,
           "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn meta(entries: Vec<Value>) -> ObjectMeta {
    serde_json::from_value(json!({"name": "a", "managedFields": entries})).unwrap()
}

#[test]
fn an_annotation_of_its_own_is_not_a_rendered_field() {
    let m = meta(vec![
        entry("kura-operator", "Apply", None, ours()),
        entry(
            "annotator",
            "Update",
            None,
            json!({"f:metadata": {"f:annotations": {".": {}, "f:example.com/note": {}}}}),
        ),
    ]);
    assert!(contested(&m, &manifest(), FIELD_MANAGER).is_empty());
}

#[test]
fn a_rendered_field_taken_names_its_new_owner_only() {
    let m = meta(vec![
        entry(
            "kura-operator",
            "Apply",
            None,
            ours_without(&["f:spec", "f:replicas"]),
        ),
        entry(
            "annotator",
            "Apply",
            None,
            json!({"f:metadata": {"f:annotations": {"f:example.com/note": {}}}}),
        ),
        entry(
            "rival",
            "Apply",
            None,
            json!({"f:spec": {"f:replicas": {}}}),
        ),
    ]);
    assert_eq!(contested(&m, &manifest(), FIELD_MANAGER), ["rival"]);
}

#[test]
fn a_field_both_own_is_shared_not_taken() {
    // Another applier sets the same replicas: both own it, nothing was taken.
    let m = meta(vec![
        entry("kura-operator", "Apply", None, ours()),
        entry(
            "gitops",
            "Apply",
            None,
            json!({"f:spec": {"f:replicas": {}}}),
        ),
    ]);
    assert!(contested(&m, &manifest(), FIELD_MANAGER).is_empty());
    assert_eq!(
        exclusive(&json!({"f:spec": {"f:replicas": {}}}), Some(&ours())),
        None
    );
}

#[test]
fn the_scale_subresource_is_a_rival_and_status_writers_never_are() {
    let m = meta(vec![
        entry(
            "kura-operator",
            "Apply",
            None,
            ours_without(&["f:spec", "f:replicas"]),
        ),
        entry(
            "kubectl",
            "Update",
            Some("scale"),
            json!({"f:spec": {"f:replicas": {}}}),
        ),
        entry(
            "kube-controller-manager",
            "Update",
            Some("status"),
            json!({"f:status": {"f:replicas": {}}, "f:spec": {"f:replicas": {}}}),
        ),
    ]);
    assert_eq!(
        contested(&m, &manifest(), FIELD_MANAGER),
        ["kubectl (scale subresource)"]
    );
}

#[test]
fn list_elements_are_matched_by_their_keys() {
    let kura = r#"k:{"name":"kura"}"#;
    let sidecar = r#"k:{"name":"istio-proxy"}"#;
    let image = |container: &str| {
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        container: {".": {}, "f:image": {}}}}}}})
    };
    // The image of the rendered container; a sidecar's is someone else's.
    assert!(holds_any(&image(kura), &manifest()));
    assert!(!holds_any(&image(sidecar), &manifest()));
    // A key field the manifest leaves to the apiserver's default still matches.
    let port = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {kura: {"f:ports": {
        r#"k:{"containerPort":8080,"protocol":"TCP"}"#: {"f:name": {}}}}}}}}});
    assert!(holds_any(&port, &manifest()));
    let other_port = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {kura: {"f:ports": {
        r#"k:{"containerPort":9090,"protocol":"TCP"}"#: {"f:name": {}}}}}}}}});
    assert!(!holds_any(&other_port, &manifest()));
    // Set elements by value, elements by index.
    let labels = json!({"list": ["a", "b"]});
    assert!(holds_any(&json!({"f:list": {"v:\"b\"": {}}}), &labels));
    assert!(!holds_any(&json!({"f:list": {"v:\"c\"": {}}}), &labels));
    assert!(holds_any(&json!({"f:list": {"i:1": {}}}), &labels));
    assert!(!holds_any(&json!({"f:list": {"i:2": {}}}), &labels));
}

#[test]
fn a_taken_container_image_is_held_and_the_element_itself_is_not() {
    let kura = r#"k:{"name":"kura"}"#;
    let mut taken = ours();
    taken["f:spec"]["f:template"]["f:spec"]["f:containers"][kura]
        .as_object_mut()
        .unwrap()
        .remove("f:image");
    // `kubectl set image`: an update of the image, and "." of the element.
    let setter =
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {kura: {"f:image": {}}}}}}});
    assert_eq!(exclusive(&setter, Some(&taken)), Some(setter.clone()));
    let m = meta(vec![
        entry("kura-operator", "Apply", None, taken),
        entry("kubectl-set", "Update", None, setter),
    ]);
    assert_eq!(contested(&m, &manifest(), FIELD_MANAGER), ["kubectl-set"]);
    // Co-listing the element ("." only) holds no value.
    let lister = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {kura: {".": {}}}}}}});
    assert_eq!(exclusive(&lister, None), None);
}

#[test]
fn a_whole_field_on_one_side_is_shared() {
    // An atomic list owned whole by us, granular by them (or the reverse).
    let granular = json!({"f:spec": {"f:template": {"f:spec": {"f:tolerations": {"k:{\"key\":\"dedicated\"}": {}}}}}});
    assert_eq!(exclusive(&granular, Some(&ours())), None);
    let whole = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}});
    assert_eq!(exclusive(&whole, Some(&ours())), None);
}
