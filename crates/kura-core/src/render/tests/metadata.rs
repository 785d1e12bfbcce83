//! What every rendered object carries: the labels that select and own it, the
//! revision it came from, and an owner reference so that deleting the instance lets
//! the garbage collector clean up. The KuraGateway is shared by the instances of an
//! account and region, so it belongs to none of them.

use serde_json::Value;

use super::*;

const UID: &str = "6f1c2a4e-0000-4000-8000-000000000002";

struct Case {
    instance: String,
    uid: Option<&'static str>,
    desired: Desired,
}

/// Every example rendered with a uid (as the operator sees it) and without (offline).
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for mut instance in examples() {
        for uid in [None, Some(UID)] {
            instance.metadata.uid = uid.map(String::from);
            out.push(Case {
                instance: instance.metadata.name.clone().unwrap(),
                uid,
                desired: render_with(&instance, &config()),
            });
        }
    }
    out
}

fn label<'a>(object: &'a RenderedObject, key: &str) -> Option<&'a str> {
    object.manifest.metadata.labels.get(key).map(String::as_str)
}

fn is_gateway(object: &RenderedObject) -> bool {
    object.id.kind == crate::kind::ChildKind::KuraGateway
}

#[test]
fn every_instance_child_carries_the_managed_by_and_instance_labels() {
    for case in cases() {
        for o in case.desired.objects.iter().filter(|o| !is_gateway(o)) {
            assert_eq!(
                label(o, LABEL_MANAGED_BY),
                Some(MANAGED_BY_VALUE),
                "{}",
                o.id
            );
            assert_eq!(
                label(o, LABEL_INSTANCE),
                Some(case.instance.as_str()),
                "{}",
                o.id
            );
        }
    }
}

#[test]
fn the_shared_gateway_carries_account_and_region_labels_but_no_instance_label() {
    let desired = render_with(&example("globex-eu"), &config());
    let gateway = find(&desired, "KuraGateway")[0];
    assert_eq!(label(gateway, LABEL_MANAGED_BY), Some(MANAGED_BY_VALUE));
    assert_eq!(label(gateway, LABEL_ACCOUNT), Some("globex"));
    assert_eq!(label(gateway, LABEL_REGION), Some("eu-west-1"));
    assert_eq!(label(gateway, LABEL_INSTANCE), None);
}

/// Every object carries its own content hash: a change of one object leaves
/// the others' stamps alone (so only it is sent), and instances sharing a
/// gateway never fight over its stamp.
#[test]
fn every_object_carries_its_own_content_hash() {
    for case in cases() {
        for o in &case.desired.objects {
            let body = o.body();
            let stamped = body["metadata"]["annotations"][ANNOTATION_REVISION].as_str();
            assert_eq!(stamped, Some(o.hash.as_str()), "{}", o.id);
        }
    }
}

#[test]
fn every_instance_child_has_an_owner_reference_exactly_when_the_instance_has_a_uid() {
    for case in cases() {
        for o in case.desired.objects.iter().filter(|o| !is_gateway(o)) {
            let body = o.body();
            let owners = &body["metadata"]["ownerReferences"];
            match case.uid {
                None => assert_eq!(owners, &Value::Null, "{}", o.id),
                Some(uid) => {
                    let owner = &owners.as_array().expect("one owner reference")[..];
                    assert_eq!(owner.len(), 1, "{}", o.id);
                    assert_eq!(owner[0]["kind"], "KuraInstance");
                    assert_eq!(owner[0]["name"], case.instance.as_str());
                    assert_eq!(owner[0]["uid"], uid);
                    assert_eq!(owner[0]["controller"], true);
                }
            }
        }
    }
}

/// Owned by one instance, the gateway would be collected while another still uses it.
#[test]
fn the_shared_gateway_is_owned_by_no_instance() {
    let mut instance = example("globex-eu");
    instance.metadata.uid = Some(UID.into());
    let desired = render_with(&instance, &config());
    let gateway = find(&desired, "KuraGateway")[0];
    assert_eq!(gateway.body()["metadata"]["ownerReferences"], Value::Null);
}

/// The stamp is derived from the hashes, so it cannot be part of them.
#[test]
fn object_hashes_are_taken_before_the_revision_stamp() {
    for case in cases() {
        for o in &case.desired.objects {
            let mut unstamped = o.body();
            let annotations = unstamped["metadata"]["annotations"]
                .as_object_mut()
                .unwrap();
            annotations.remove(ANNOTATION_REVISION);
            if annotations.is_empty() {
                unstamped["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
            }
            assert_eq!(o.hash, hash::object_hash(&unstamped), "{}", o.id);
        }
    }
}
