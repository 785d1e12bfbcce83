//! `observe`: read what `plan` and `probe` need from the reflector caches.

pub mod rivals;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::plan::{LiveChild, Observed, Owner};
use super::stores::Stores;
use crate::api::{KuraInstance, KuraInstanceStatus};
use crate::keys::{
    ANNOTATION_ADOPT, ANNOTATION_REAPPLY_AT, ANNOTATION_REVISION, FIELD_MANAGER, KURA_CONTAINER,
    LABEL_MANAGED_BY, MANAGED_BY_VALUE,
};
use crate::kind::ChildKind;
use crate::render::hash::hex_sha256;
use crate::render::{Desired, Manifest, ObjectId};

/// `status`: the status to decide from (the cache's, or a fresher one this
/// process wrote; see `memory::Memory::recall`).
pub fn observe(
    instance: &KuraInstance,
    status: Option<KuraInstanceStatus>,
    desired: Option<&Desired>,
    stores: &Stores,
) -> Observed {
    let status = status.unwrap_or_default();
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let namespace = instance.metadata.namespace.as_deref().unwrap_or_default();
    let uid = instance.metadata.uid.as_deref().unwrap_or_default();
    let mut ids: Vec<ObjectId> = status
        .inventory
        .iter()
        .filter_map(ObjectId::from_inventory)
        .collect();
    if let Some(d) = desired {
        ids.extend(d.objects.iter().map(|o| o.id.clone()));
    }
    ids.extend(stores.labelled_as(namespace, name));
    let rendered = |id: &ObjectId| desired?.objects.iter().find(|o| &o.id == id);
    let children: BTreeMap<ObjectId, LiveChild> = ids
        .into_iter()
        .filter_map(|id| {
            let meta = stores.meta(&id)?;
            let owner = owner(&meta, id.kind, uid, name);
            let mut live = live_child(&meta, owner, rendered(&id).map(|o| &o.manifest));
            if id.kind == ChildKind::Ingress {
                live.ingress_class = stores
                    .ingress(&id)
                    .and_then(|i| i.spec.as_ref()?.ingress_class_name.clone());
            }
            Some((id, live))
        })
        .collect();
    let workload = desired.and_then(|d| {
        let sts_id = &d
            .objects
            .iter()
            .find(|o| o.id.kind == ChildKind::StatefulSet)?
            .id;
        stores.stateful_set(sts_id)
    });
    let running_image = workload.as_ref().and_then(|sts| {
        let pod = sts.spec.as_ref()?.template.spec.as_ref()?;
        pod.containers
            .iter()
            .find(|c| c.name == KURA_CONTAINER)
            .and_then(|c| c.image.clone())
    });
    let image_managers = match (&workload, &running_image) {
        (Some(sts), Some(image)) => image_managers(&sts.metadata, image),
        _ => Vec::new(),
    };
    Observed {
        generation: instance.metadata.generation,
        force_token: instance
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REAPPLY_AT))
            .cloned(),
        paused: instance.spec.paused,
        status,
        children,
        running_image,
        image_managers,
        // Not a cache's to say: the reconcile knows its own recent applies.
        just_applied: false,
    }
}

/// `rendered`: the object as this operator renders it now, if it does; the
/// other managers holding fields of it are named.
pub fn live_child(meta: &ObjectMeta, owner: Owner, rendered: Option<&Manifest>) -> LiveChild {
    let other_managers = match rendered {
        // Serialised only when someone else may hold a field of it (rare).
        Some(m) if meta.managed_fields.iter().flatten().any(rivals::is_rival) => {
            serde_json::to_value(m).map_or_else(|_| Vec::new(), |v| rivals::contested(meta, &v))
        }
        _ => Vec::new(),
    };
    LiveChild {
        revision: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REVISION))
            .cloned(),
        owned_fields: owned_fields(meta),
        other_managers,
        owner,
        ingress_class: None,
    }
}

/// The other managers holding the workload's image (running as `image`).
fn image_managers(meta: &ObjectMeta, image: &str) -> Vec<String> {
    let only_the_image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": KURA_CONTAINER, "image": image}]}}}});
    rivals::contested(meta, &only_the_image)
}

/// Whose an object is, from its metadata. An instance's child is its own when
/// the instance's uid is its controller owner reference: names are not proof
/// (anyone may create an object of any name first), uids cannot be forged from
/// another object. A gateway is shared, so it has no owner: it is ours when
/// this operator created it (labelled, and applied by our field manager).
pub fn owner(meta: &ObjectMeta, kind: ChildKind, instance_uid: &str, instance_name: &str) -> Owner {
    if kind == ChildKind::KuraGateway {
        let labelled = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_MANAGED_BY))
            .is_some_and(|v| v == MANAGED_BY_VALUE);
        let applied_by_us = meta.managed_fields.iter().flatten().any(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some("Apply")
        });
        return if labelled && applied_by_us {
            Owner::Ours
        } else {
            Owner::Foreign("was not created by kura-operator".into())
        };
    }
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    if controller.is_some_and(|r| !instance_uid.is_empty() && r.uid == instance_uid) {
        return Owner::Ours;
    }
    let handed_over = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ADOPT))
        .is_some_and(|v| v == instance_name);
    match controller {
        // Adoption never takes an object from another controller.
        None if handed_over => Owner::Adopt,
        Some(r) => Owner::Foreign(format!("is controlled by {} {}", r.kind, r.name)),
        None => Owner::Foreign(format!(
            "was not created by this instance (to hand it over, annotate it {ANNOTATION_ADOPT}={instance_name})"
        )),
    }
}

/// Fingerprint of the fields this operator's field manager owns (by apply). When
/// another actor takes one of them (an Update or a forced Apply), it changes.
pub fn owned_fields(meta: &ObjectMeta) -> Option<String> {
    let entry = meta
        .managed_fields
        .as_ref()?
        .iter()
        .find(|m| rivals::is_own_entry(m))?;
    let fields = &entry.fields_v1.as_ref()?.0;
    // The reflector caches keep only this fingerprint (controller.rs); a real
    // fieldsV1 is always an object.
    if let serde_json::Value::String(fingerprint) = fields {
        return Some(fingerprint.clone());
    }
    let fields = serde_json::to_vec(fields).ok()?;
    Some(hex_sha256(&fields)[..16].to_string())
}
