//! Admission of KuraInstances by the real apiserver, with the CRDs from crds/ (the
//! support code applies them server-side): the schema generated from the Rust types
//! must reject malformed input at the door, naming the field, so that a user sees
//! the mistake in `kubectl apply` instead of in an Event later.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kura_core::api::KuraInstance;
use serde_json::{Value, json};

use crate::support::*;

fn instances(ns: &TestNamespace) -> Api<DynamicObject> {
    let resource = ApiResource::erase::<KuraInstance>(&());
    Api::namespaced_with(ns.client.clone(), &ns.name, &resource)
}

/// A well-formed instance; each case breaks one field of it.
pub(crate) fn valid(name: &str) -> Value {
    json!({
        "apiVersion": "kura.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": { "name": name },
        "spec": {
            "account": "acme",
            "region": "eu-west-1",
            "image": "ghcr.io/kura-dev/kura:1.8.2",
            "storage": { "size": "10Gi" },
        },
    })
}

fn env_var(name: &str) -> Value {
    json!({ "name": name, "value": "x" })
}

/// The error of a create that must fail with 422.
async fn rejection(api: &Api<DynamicObject>, body: Value) -> Result<String, String> {
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(status.message),
        Err(other) => Err(format!("expected HTTP 422, got {other}")),
        Ok(_) => Err("accepted".into()),
    }
}

struct Case {
    what: &'static str,
    edit: fn(&mut Value),
    /// The field path the apiserver must name.
    field: &'static str,
    /// A distinctive part of the message: which rule fired.
    says: &'static str,
}

fn cases() -> Vec<Case> {
    let case = |what, edit, field, says| Case {
        what,
        edit,
        field,
        says,
    };
    vec![
        case(
            "replicas 0",
            |v| v["spec"]["replicas"] = json!(0),
            "spec.replicas",
            "greater than or equal to 1",
        ),
        case(
            "replicas 17",
            |v| v["spec"]["replicas"] = json!(17),
            "spec.replicas",
            "less than or equal to 16",
        ),
        case(
            "replicas not a number",
            |v| v["spec"]["replicas"] = json!("two"),
            "spec.replicas",
            "must be of type integer",
        ),
        case(
            "image without tag",
            |v| v["spec"]["image"] = json!("ghcr.io/kura-dev/kura"),
            "spec.image",
            "should match",
        ),
        case(
            "no image",
            |v| _ = v["spec"].as_object_mut().unwrap().remove("image"),
            "spec.image",
            "Required value",
        ),
        case(
            "account not a DNS label",
            |v| v["spec"]["account"] = json!("Acme"),
            "spec.account",
            "should match",
        ),
        case(
            "region over 32 characters",
            |v| v["spec"]["region"] = json!("r".repeat(33)),
            "spec.region",
            "Too long",
        ),
        case(
            "host not a DNS subdomain",
            |v| v["spec"]["host"] = json!("-cache.example.com"),
            "spec.host",
            "should match",
        ),
        case(
            "no storage",
            |v| _ = v["spec"].as_object_mut().unwrap().remove("storage"),
            "spec.storage",
            "Required value",
        ),
        case(
            "storage size 10GB",
            |v| v["spec"]["storage"]["size"] = json!("10GB"),
            "spec.storage.size",
            "should match",
        ),
        case(
            "gateway mode Bogus",
            |v| v["spec"]["gateway"] = json!({"mode": "Bogus"}),
            "spec.gateway.mode",
            r#"Unsupported value: "Bogus""#,
        ),
        case(
            "env value and secretKeyRef",
            |v| {
                v["spec"]["env"] =
                    json!([{"name": "T", "value": "x", "secretKeyRef": {"name": "s", "key": "k"}}])
            },
            "spec.env[0]",
            "exactly one of value or secretKeyRef",
        ),
        case(
            "env without value or secretKeyRef",
            |v| v["spec"]["env"] = json!([{"name": "T"}]),
            "spec.env[0]",
            "exactly one of value or secretKeyRef",
        ),
        case(
            "env KURA_ prefix",
            |v| v["spec"]["env"] = json!([env_var("KURA_DEBUG")]),
            "spec.env[0].name",
            "KURA_ prefix is reserved",
        ),
        case(
            "env name not a variable name",
            |v| v["spec"]["env"] = json!([env_var("1BAD")]),
            "spec.env[0].name",
            "should match",
        ),
        case(
            "65 env vars",
            |v| v["spec"]["env"] = (0..65).map(|n| env_var(&format!("V{n}"))).collect(),
            "spec.env",
            "Too many",
        ),
        case(
            "4097-character env value",
            |v| v["spec"]["env"] = json!([{"name": "BIG", "value": "x".repeat(4097)}]),
            "spec.env[0].value",
            "Too long",
        ),
        case(
            "duplicate env name",
            |v| v["spec"]["env"] = json!([env_var("A"), env_var("A")]),
            "spec.env[1]",
            "Duplicate value",
        ),
        case(
            "secretKeyRef name not a DNS subdomain",
            |v| {
                v["spec"]["env"] =
                    json!([{"name": "T", "secretKeyRef": {"name": "Bad_Name", "key": "k"}}])
            },
            "spec.env[0].secretKeyRef.name",
            "should match",
        ),
        case(
            "limits.memory below requests.memory",
            |v| {
                v["spec"]["resources"] =
                    json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}})
            },
            "spec.resources",
            "resources.limits.memory must be at least resources.requests.memory",
        ),
        case(
            "limits.cpu below requests.cpu",
            |v| {
                v["spec"]["resources"] =
                    json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})
            },
            "spec.resources",
            "resources.limits.cpu must be at least resources.requests.cpu",
        ),
        case(
            "cpu not a quantity",
            |v| v["spec"]["resources"] = json!({"requests": {"cpu": "lots"}}),
            "spec.resources.requests.cpu",
            "should match",
        ),
        case(
            "9 aliases",
            |v| v["spec"]["aliases"] = (0..9).map(|n| json!(format!("a{n}.example.com"))).collect(),
            "spec.aliases",
            "Too many",
        ),
        case(
            "duplicate alias",
            |v| v["spec"]["aliases"] = json!(["a.example.com", "a.example.com"]),
            "spec.aliases[1]",
            "Duplicate value",
        ),
        // A CEL rule on the root: the message carries the path, the apiserver reports <nil>.
        case(
            "metadata.name over 40 characters",
            |v| v["metadata"]["name"] = json!("n".repeat(41)),
            "metadata.name",
            "must be at most 40 characters",
        ),
        // Generated gateway names start with it: an instance's Service must never take one's name.
        case(
            "metadata.name with the reserved prefix gw-",
            |v| v["metadata"]["name"] = json!("gw-acme-c1"),
            "metadata.name",
            "reserved",
        ),
        // Alias Ingresses are named <instance>.<hash>: a dot keeps them apart from instances.
        case(
            "metadata.name with a dot",
            |v| v["metadata"]["name"] = json!("acme.0a1b2c3d"),
            "metadata.name",
            "DNS-1035 label",
        ),
        case(
            "metadata.name starting with a digit",
            |v| v["metadata"]["name"] = json!("1acme"),
            "metadata.name",
            "DNS-1035 label",
        ),
        case(
            "host that is an IP address",
            |v| v["spec"]["host"] = json!("10.0.0.1"),
            "spec.host",
            "not an IP address",
        ),
        case(
            "alias with a label of 64 characters",
            |v| v["spec"]["aliases"] = json!([format!("{}.example.com", "a".repeat(64))]),
            "spec.aliases",
            "at most 63 characters",
        ),
        case(
            "alias equal to the host",
            |v| {
                v["spec"]["host"] = json!("a.example.com");
                v["spec"]["aliases"] = json!(["a.example.com"]);
            },
            "spec.aliases",
            "must not repeat spec.host",
        ),
        case(
            "secretKeyRef key '..'",
            |v| {
                v["spec"]["env"] =
                    json!([{"name": "T", "secretKeyRef": {"name": "s", "key": ".."}}])
            },
            "spec.env[0].secretKeyRef.key",
            "'..'",
        ),
        case(
            "env value with a NUL character",
            |v| v["spec"]["env"] = json!([{"name": "T", "value": "a\u{0}b"}]),
            "spec.env[0].value",
            "NUL",
        ),
    ]
}

#[tokio::test]
async fn malformed_instances_are_rejected_naming_the_field() {
    let ns = TestNamespace::new("adm-bad").await;
    let failures = malformed_rejected(&instances(&ns)).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every malformed case created through `api`: what was not rejected as it
/// should be (also run on other Kubernetes versions, tests/cluster/platform/versions.rs).
pub(crate) async fn malformed_rejected(api: &Api<DynamicObject>) -> Vec<String> {
    let cases = cases();
    assert!(cases.len() >= 18);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut body = valid(&format!("bad-{i}"));
        (case.edit)(&mut body);
        match rejection(api, body).await {
            Ok(message) if message.contains(case.field) && message.contains(case.says) => {}
            Ok(message) => failures.push(format!(
                "{}: expected {:?} and {:?} in: {message}",
                case.what, case.field, case.says
            )),
            Err(e) => failures.push(format!("{}: {e}", case.what)),
        }
    }
    failures
}

/// The positive control: without it, a schema rejecting everything would pass above.
#[tokio::test]
async fn well_formed_instances_are_accepted_with_schema_defaults() {
    let ns = TestNamespace::new("adm-ok").await;
    let api = instances(&ns);
    let object: DynamicObject = serde_json::from_value(valid("minimal")).unwrap();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    // The schema's defaults match serde's, so what the operator reads is what was stored.
    assert_eq!(created.data["spec"]["replicas"], 1);
    assert_eq!(created.data["spec"]["gateway"]["mode"], "Auto");

    let text = std::fs::read_to_string(repo().join("examples/instances.yaml")).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut body: Value = serde::Deserialize::deserialize(doc).unwrap();
        body["metadata"]["namespace"] = json!(ns.name);
        let name = body["metadata"]["name"].clone();
        let object: DynamicObject = serde_json::from_value(body).unwrap();
        let result = api.create(&PostParams::default(), &object).await;
        assert!(result.is_ok(), "example {name} rejected: {result:?}");
    }
}

/// Account, region and storage size cannot change (the volume claim templates of a
/// StatefulSet cannot); an allowed change to the same object shows the rejection
/// is the rule's and not the request's.
#[tokio::test]
async fn immutable_fields_cannot_change_after_creation() {
    let ns = TestNamespace::new("adm-immutable").await;
    let api = instances(&ns);
    let object: DynamicObject = serde_json::from_value(valid("fixed")).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();

    let api = &api;
    let patch = |spec: Value| async move {
        let body = Patch::Merge(json!({ "spec": spec }));
        api.patch("fixed", &PatchParams::default(), &body).await
    };
    for (spec, field, says) in [
        (
            json!({"account": "other"}),
            "spec.account",
            "account is immutable",
        ),
        (
            json!({"region": "fra-metal"}),
            "spec.region",
            "region is immutable",
        ),
        (
            json!({"storage": {"size": "20Gi"}}),
            "spec.storage.size",
            "storage.size is immutable",
        ),
    ] {
        match patch(spec.clone()).await {
            Err(kube::Error::Api(s)) if s.code == 422 => assert!(
                s.message.contains(field) && s.message.contains(says),
                "{spec}: expected {field:?} and {says:?} in: {}",
                s.message
            ),
            other => panic!("{spec} must be rejected with 422, got {other:?}"),
        }
    }
    let scaled = patch(json!({"replicas": 3}))
        .await
        .expect("replicas may change");
    assert_eq!(scaled.data["spec"]["replicas"], 3);
}

/// A StatefulSet's volume claim templates cannot change, so neither can the storage
/// class: not changed, and not added or removed either (a rule on the field alone
/// never sees an absent old or new value). Changing replicas shows the rejections are
/// the rule's.
#[tokio::test]
async fn storage_class_cannot_be_added_removed_or_changed() {
    let ns = TestNamespace::new("adm-class").await;
    let api = instances(&ns);
    let create = |name: &str, class: Option<&str>| {
        let mut body = valid(name);
        if let Some(class) = class {
            body["spec"]["storage"]["class"] = json!(class);
        }
        serde_json::from_value::<DynamicObject>(body).unwrap()
    };
    api.create(&PostParams::default(), &create("plain", None))
        .await
        .unwrap();
    api.create(&PostParams::default(), &create("classy", Some("fast")))
        .await
        .unwrap();

    let api = &api;
    let patch = |name: &'static str, storage: Value| async move {
        let body = Patch::Merge(json!({ "spec": { "storage": storage } }));
        api.patch(name, &PatchParams::default(), &body).await
    };
    let mut failures = Vec::new();
    for (name, storage, what) in [
        ("plain", json!({"class": "fast"}), "added"),
        ("classy", json!({"class": "slow"}), "changed"),
        ("classy", json!({"class": null}), "removed"),
    ] {
        match patch(name, storage).await {
            Err(kube::Error::Api(s))
                if s.code == 422
                    && s.message.contains("spec.storage.class")
                    && s.message.contains("storage.class is immutable") => {}
            Err(e) => failures.push(format!(
                "class {what}: expected spec.storage.class and why in: {e}"
            )),
            Ok(o) => failures.push(format!(
                "class {what}: admitted, storage now {}",
                o.data["spec"]["storage"]
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for name in ["plain", "classy"] {
        let body = Patch::Merge(json!({ "spec": { "replicas": 2 } }));
        let scaled = api.patch(name, &PatchParams::default(), &body).await;
        assert!(scaled.is_ok(), "{name}: replicas may change: {scaled:?}");
    }
}
