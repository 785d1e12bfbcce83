use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::json;

use super::{Asker, stall_over};
use crate::stores::foreign::ForeignNames;
use kura_core::api::conditions::{READY, STALLED};
use kura_core::api::{Condition, ConditionStatus, KuraInstance};
use kura_core::keys::ANNOTATION_ADOPT;
use kura_core::kind::ChildKind;
use kura_core::render::{Desired, ObjectId};

type Meta = PartialObjectMeta<ConfigMap>;

/// The example acme-eu as the operator renders it.
fn desired() -> Desired {
    let config =
        kura_core::config::OperatorConfig::parse(include_str!("../../../examples/config.yaml"))
            .unwrap();
    let instance: KuraInstance = serde_yaml::from_str(
        include_str!("../../../examples/instances.yaml")
            .split("\n---\n")
            .next()
            .unwrap(),
    )
    .unwrap();
    let validated = kura_core::validate::validate(&instance, &config).unwrap();
    kura_core::render::render(&validated, &config)
}

fn config_map_id(d: &Desired) -> ObjectId {
    d.objects
        .iter()
        .find(|o| o.id.kind == ChildKind::ConfigMap)
        .unwrap()
        .id
        .clone()
}

fn holder(id: &ObjectId, extra: serde_json::Value) -> Meta {
    let mut m = json!({"name": id.name, "namespace": id.namespace});
    if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    Meta {
        metadata: serde_json::from_value(m).unwrap(),
        ..Meta::default()
    }
}

/// Every kind listed, `held` holding its names.
fn names_with(held: &[(ChildKind, Meta)]) -> ForeignNames {
    let names = ForeignNames::default();
    for kind in ChildKind::ALL.into_iter().filter(|k| k.cached_by_label()) {
        names.event(kind, &Event::<Meta>::Init);
        for (k, m) in held.iter().filter(|(k, _)| *k == kind) {
            names.event(*k, &Event::InitApply(m.clone()));
        }
        names.event(kind, &Event::<Meta>::InitDone);
    }
    names
}

fn stalled(reason: &str) -> Vec<Condition> {
    let c = |type_: &str, status, reason: &str| Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: None,
    };
    vec![
        c(READY, ConditionStatus::False, reason),
        c(STALLED, ConditionStatus::True, reason),
    ]
}

const ASKER: Asker = Asker {
    uid: "uid-acme",
    name: "acme",
};

#[test]
fn a_name_conflicts_stall_is_over_once_the_other_object_is_gone() {
    let d = desired();
    let cm = config_map_id(&d);
    let none = BTreeMap::new();
    let names = names_with(&[(ChildKind::ConfigMap, holder(&cm, json!({})))]);
    let conditions = stalled("NameConflict");
    assert!(!stall_over(&conditions, &d, &none, &names, &ASKER));
    // The user deletes it: the watch of unlabelled names says so.
    names.event(ChildKind::ConfigMap, &Event::Delete(holder(&cm, json!({}))));
    assert!(stall_over(&conditions, &d, &none, &names, &ASKER));
}

#[test]
fn a_name_handed_over_with_the_adopt_annotation_ends_the_stall() {
    let d = desired();
    let cm = config_map_id(&d);
    let handed = holder(&cm, json!({"annotations": {ANNOTATION_ADOPT: "acme"}}));
    let names = names_with(&[(ChildKind::ConfigMap, handed)]);
    let none = BTreeMap::new();
    assert!(stall_over(
        &stalled("NameConflict"),
        &d,
        &none,
        &names,
        &ASKER
    ));
    // Handed to another instance: still someone else's.
    let other = holder(&cm, json!({"annotations": {ANNOTATION_ADOPT: "globex"}}));
    let names = names_with(&[(ChildKind::ConfigMap, other)]);
    assert!(!stall_over(
        &stalled("NameConflict"),
        &d,
        &none,
        &names,
        &ASKER
    ));
}

#[test]
fn names_not_known_yet_or_another_stall_end_nothing() {
    let d = desired();
    let none = BTreeMap::new();
    // No kind has listed: nothing is known to be free.
    let unknown = ForeignNames::default();
    assert!(!stall_over(
        &stalled("NameConflict"),
        &d,
        &none,
        &unknown,
        &ASKER
    ));
    // Stalled for another reason (a rejected apply): the names say nothing of it.
    let free = names_with(&[]);
    assert!(!stall_over(
        &stalled("ApplyRejected"),
        &d,
        &none,
        &free,
        &ASKER
    ));
    // Not stalled at all.
    assert!(!stall_over(&[], &d, &none, &free, &ASKER));
    assert!(stall_over(
        &stalled("NameConflict"),
        &d,
        &none,
        &free,
        &ASKER
    ));
}
