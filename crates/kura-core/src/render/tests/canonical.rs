//! The typed manifests serialise straight into the canonical form (render/hash.rs):
//! every type declares its keys in byte order, and the writer (render/writer.rs)
//! writes exactly what serde_json writes. If either stopped holding, a revision
//! would depend on field declaration order and no golden vector might notice.

use proptest::prelude::*;
use serde::Serialize;

use super::*;
use crate::render::gateway::render_gateway;
use crate::render::writer::write_json;

#[track_caller]
fn assert_canonical(desired: &Desired) {
    if let Some(mismatch) = non_canonical_object(desired) {
        panic!("{mismatch}");
    }
}

#[test]
fn every_example_child_serialises_in_canonical_form() {
    for mut instance in examples() {
        assert_canonical(&render_with(&instance, &config()));
        instance.metadata.uid = Some("6f1c2a4e-0000-4000-8000-000000000001".into());
        assert_canonical(&render_with(&instance, &config()));
    }
}

#[test]
fn every_gateway_child_serialises_in_canonical_form() {
    let desired = render_gateway(&example_gateway(), &Default::default());
    assert_eq!(desired.objects.len(), 6);
    assert_canonical(&desired);
}

/// Everything the writer can meet, and some it should not, against serde_json.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Sample {
    text: String,
    #[serde(rename = "kura.dev/\"odd\" key\n")]
    odd_key: u8,
    numbers: (i64, u64, f64, f64),
    nothing: Option<String>,
    list: Vec<Option<bool>>,
    map: std::collections::BTreeMap<String, Vec<i32>>,
    unit: (),
    variants: Vec<Variant>,
    character: char,
}

#[derive(Serialize)]
enum Variant {
    Unit,
    Newtype(String),
    Tuple(i8, String),
    Struct { a: u16, b: Option<&'static str> },
}

proptest! {
    #[test]
    fn the_writer_writes_what_serde_json_writes(
        text in ".{0,40}|[\\x00-\\x7f]{0,40}",
        key in ".{0,12}",
        (i, u, f) in (any::<i64>(), any::<u64>(), any::<f64>()),
        character in any::<char>(),
    ) {
        let sample = Sample {
            text: text.clone(),
            odd_key: 7,
            numbers: (i, u, f, f64::NAN),
            nothing: None,
            list: vec![Some(true), None, Some(false)],
            map: [(key, vec![i32::MIN, 0, i32::MAX]), (text.clone(), vec![])].into(),
            unit: (),
            variants: vec![
                Variant::Unit,
                Variant::Newtype(text.clone()),
                Variant::Tuple(-1, text),
                Variant::Struct { a: 2, b: None },
            ],
            character,
        };
        let mut written = Vec::new();
        write_json(&sample, &mut written).unwrap();
        prop_assert_eq!(
            String::from_utf8(written).unwrap(),
            serde_json::to_string(&sample).unwrap()
        );
    }
}

/// Map keys must be strings in JSON; serde_json quotes numbers, which no manifest has.
#[test]
fn the_writer_refuses_a_map_key_that_is_not_a_string() {
    let map: std::collections::BTreeMap<i32, i32> = [(1, 2)].into();
    assert!(write_json(&map, &mut Vec::new()).is_err());
}
