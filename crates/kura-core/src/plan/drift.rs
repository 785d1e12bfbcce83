//! Drift of rendered objects, judged one object at a time from what the
//! caches show and what the last apply recorded: the part of `plan` that the
//! instance and the gateway controllers share.

use std::collections::BTreeMap;

use super::{ApplyOp, ApplyReason, LiveChild, Owner};
use crate::api::InventoryEntry;
use crate::render::{ObjectId, RenderedObject};

/// Objects of the desired names that exist and are someone else's.
pub fn name_conflicts(
    objects: &[RenderedObject],
    children: &BTreeMap<ObjectId, LiveChild>,
) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| match &children.get(&o.id)?.owner {
            Owner::Foreign(whose) => Some(format!("{} exists and {whose}", o.id)),
            _ => None,
        })
        .collect()
}

/// Objects of the desired names that are being deleted, each with the
/// finalizers holding it.
pub fn terminating(
    objects: &[RenderedObject],
    terminating: &BTreeMap<ObjectId, Vec<String>>,
) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| {
            let finalizers = terminating.get(&o.id)?;
            Some(if finalizers.is_empty() {
                format!("{} is being deleted", o.id)
            } else {
                format!(
                    "{} is being deleted, held by finalizers {}",
                    o.id,
                    finalizers.join(", ")
                )
            })
        })
        .collect()
}

/// Why each object must be sent: missing, handed over, carrying another
/// revision, or fields taken by another manager.
pub fn child_reasons(
    objects: &[RenderedObject],
    children: &BTreeMap<ObjectId, LiveChild>,
    inventory: &[InventoryEntry],
) -> Vec<ApplyReason> {
    objects
        .iter()
        .filter_map(|object| match children.get(&object.id) {
            None => Some(ApplyReason::ChildMissing(object.id.to_string())),
            Some(live) if live.owner == Owner::Adopt => {
                Some(ApplyReason::Adopted(object.id.to_string()))
            }
            Some(live) if live.revision.as_deref() != object.stamp() => {
                Some(ApplyReason::ChildRevision(object.id.to_string()))
            }
            Some(live) if fields_taken(inventory, object, live) => Some(ApplyReason::FieldDrift(
                object.id.to_string(),
                live.other_managers.clone(),
            )),
            Some(_) => None,
        })
        .collect()
}

/// The fingerprint of the fields the operator owns moved since its last apply
/// of the object (as the inventory recorded it).
///
/// Only a record of the very version the object carries (its stamp is the
/// recorded hash) can say so. An apply whose status write never landed (the
/// process, or a replica whose shard another took over, was killed between
/// the two) leaves the object a version the record does not know, with the
/// fingerprint of the operator's own apply: that is no drift, and sending it
/// again would be a second write of the same revision (by a second replica,
/// after a failover). Another manager holding fields of it still counts.
pub fn fields_taken(
    inventory: &[InventoryEntry],
    object: &RenderedObject,
    live: &LiveChild,
) -> bool {
    let Some(entry) = inventory
        .iter()
        .find(|e| ObjectId::from_inventory(e).as_ref() == Some(&object.id))
    else {
        return false;
    };
    let Some(recorded) = entry.owned_fields.as_deref() else {
        return false;
    };
    if live.revision.as_deref() == Some(entry.hash.as_str()) {
        live.owned_fields.as_deref() != Some(recorded)
    } else {
        !live.other_managers.is_empty()
    }
}

/// The object as the cluster has it is not what this revision renders.
pub fn differs(
    object: &RenderedObject,
    live: Option<&LiveChild>,
    inventory: &[InventoryEntry],
) -> bool {
    match live {
        None => true,
        Some(l) => {
            l.owner == Owner::Adopt
                || l.revision.as_deref() != object.stamp()
                || fields_taken(inventory, object, l)
        }
    }
}

/// How to send `object`: created (only if the name is free) when the caches
/// show nothing; an Ingress moving to another class loses its old address.
pub fn op(object: &RenderedObject, live: Option<&LiveChild>) -> ApplyOp {
    ApplyOp {
        id: object.id.clone(),
        create: live.is_none(),
        clear_address: live.is_some_and(|l| {
            let want = object
                .manifest
                .ingress_spec()
                .map(|s| &s.ingress_class_name);
            l.ingress_class.is_some() && l.ingress_class.as_ref() != want
        }),
        keep_live_template: false,
    }
}

/// The inventory after an apply: every object with the fingerprint of the
/// fields the operator owns, from the apply's answer for what was sent;
/// otherwise what the cache shows now (which matched the record, or it would
/// have been sent), or the record.
pub fn inventory_after(
    objects: &[RenderedObject],
    children: &BTreeMap<ObjectId, LiveChild>,
    previous: &[InventoryEntry],
    sent: &BTreeMap<ObjectId, Option<String>>,
) -> Vec<InventoryEntry> {
    objects
        .iter()
        .map(|o| {
            let owned = match sent.get(&o.id) {
                Some(fingerprint) => fingerprint.clone(),
                None => children
                    .get(&o.id)
                    .and_then(|live| live.owned_fields.clone())
                    .or_else(|| {
                        previous
                            .iter()
                            .find(|e| ObjectId::from_inventory(e).as_ref() == Some(&o.id))
                            .and_then(|e| e.owned_fields.clone())
                    }),
            };
            o.id.inventory_entry(o.hash.clone(), owned)
        })
        .collect()
}
