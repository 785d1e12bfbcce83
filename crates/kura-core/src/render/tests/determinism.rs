//! The same input renders the same bytes, whatever the order of map keys in the
//! YAML it came from and whatever the order of set-like lists. Env
//! order is the exception that proves it: it is meaningful, so it counts.

use serde_yaml::{Mapping, Value};

use super::*;

/// Every object's canonical bytes, with identity, hash and the revision stamp.
fn fingerprint(desired: &Desired) -> Vec<(ObjectId, String, Vec<u8>)> {
    desired
        .objects
        .iter()
        .map(|o| (o.id.clone(), o.hash.clone(), canonical_json(&o.body())))
        .collect()
}

#[track_caller]
fn assert_same_render(a: &Desired, b: &Desired) {
    assert_eq!(a.revision, b.revision);
    assert_eq!(a.pod_template_hash, b.pod_template_hash);
    assert_eq!(fingerprint(a), fingerprint(b));
}

/// Reverse the key order of every mapping in a YAML document, recursively: the
/// worst case of "the same document written by someone else".
fn reverse_keys(value: Value) -> Value {
    match value {
        Value::Mapping(map) => {
            let entries: Vec<(Value, Value)> = map.into_iter().collect();
            let mut reversed = Mapping::new();
            for (k, v) in entries.into_iter().rev() {
                reversed.insert(k, reverse_keys(v));
            }
            Value::Mapping(reversed)
        }
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(reverse_keys).collect()),
        other => other,
    }
}

fn reverse_keys_of_every_document(text: &str) -> String {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).unwrap();
            serde_yaml::to_string(&reverse_keys(value)).unwrap()
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn the_same_input_renders_identical_bytes_and_revision_across_runs() {
    let config = config();
    for instance in examples() {
        let first = render_with(&instance, &config);
        let second = render_with(
            &instance.clone(),
            &OperatorConfig::parse(EXAMPLE_CONFIG).unwrap(),
        );
        assert_same_render(&first, &second);
        // The YAML the CLI prints is byte-identical too.
        let yaml = |d: &Desired| -> Vec<String> {
            d.objects
                .iter()
                .map(|o| serde_yaml::to_string(&o.body()).unwrap())
                .collect()
        };
        assert_eq!(yaml(&first), yaml(&second));
    }
}

#[test]
fn config_yaml_with_regions_and_fields_in_another_order_renders_the_same() {
    let shuffled_text = reverse_keys_of_every_document(EXAMPLE_CONFIG);
    assert!(shuffled_text.find("fra-metal") < shuffled_text.find("eu-west-1"));
    let shuffled = OperatorConfig::parse(&shuffled_text).unwrap();
    for instance in examples() {
        assert_same_render(
            &render_with(&instance, &config()),
            &render_with(&instance, &shuffled),
        );
    }
}

#[test]
fn instance_yaml_with_keys_in_another_order_renders_the_same() {
    let shuffled = parse_instances(&reverse_keys_of_every_document(EXAMPLE_INSTANCES));
    assert_eq!(shuffled.len(), examples().len());
    for (original, reordered) in examples().iter().zip(&shuffled) {
        assert_same_render(
            &render_with(original, &config()),
            &render_with(reordered, &config()),
        );
    }
}

#[test]
fn alias_order_does_not_change_the_rendering() {
    let with_aliases = |aliases: [&str; 3]| {
        let mut instance = example("globex-eu");
        instance.spec.aliases = aliases.map(String::from).to_vec();
        render_with(&instance, &config())
    };
    let sorted = with_aliases(["a.example.com", "b.example.com", "c.example.com"]);
    let shuffled = with_aliases(["c.example.com", "a.example.com", "b.example.com"]);
    assert_same_render(&sorted, &shuffled);
}

/// Kubernetes expands `$(VAR)` from earlier variables only, so env order is meaning.
#[test]
fn env_order_changes_the_revision() {
    let with_env = |names: [&str; 2]| {
        let mut instance = example("acme-eu");
        instance.spec.env = names
            .map(|n| serde_json::from_value(serde_json::json!({"name": n, "value": n})).unwrap())
            .to_vec();
        render_with(&instance, &config())
    };
    assert_ne!(with_env(["A", "B"]).revision, with_env(["B", "A"]).revision);
}

#[test]
fn objects_come_in_canonical_order() {
    for instance in examples() {
        let desired = render_with(&instance, &config());
        let ids: Vec<&ObjectId> = desired.objects.iter().map(|o| &o.id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "not strictly sorted: {ids:?}"
        );
    }
}

/// What the spec asks to be rendered ignores when: an edit of a window or a
/// pause is no change of the user's (`render::hash::spec_hash`).
#[test]
fn editing_a_window_or_a_pause_is_no_change_of_what_the_spec_renders() {
    let spec: crate::api::KuraInstanceSpec = serde_json::from_value(serde_json::json!({
        "account": "acme", "region": "eu-west-1", "image": "kura:1",
        "storage": {"size": "1Gi"}
    }))
    .unwrap();
    let hash = crate::render::hash::spec_hash;
    let mut when = spec.clone();
    when.paused = true;
    when.pause = Some(crate::api::PauseSpec {
        reason: Some("why".into()),
        ..Default::default()
    });
    when.maintenance_window = Some(crate::api::MaintenanceWindow {
        days: vec![crate::api::Weekday::Monday],
        start: "02:00".into(),
        duration: "1h".into(),
        time_zone: None,
    });
    assert_eq!(hash(&spec), hash(&when));
    let mut image = spec.clone();
    image.image = "kura:2".into();
    assert_ne!(hash(&spec), hash(&image));
}
