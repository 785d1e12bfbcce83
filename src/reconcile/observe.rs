//! `observe`: read what `plan` and `probe` need from the reflector caches.

use kura_core::fields::{applied_by, owned_fields_by, rivals};

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::stores::Stores;
use kura_core::api::{InventoryEntry, KuraInstance, KuraInstanceStatus};
use kura_core::keys::{
    ANNOTATION_ADOPT, ANNOTATION_GATEWAY_UID, ANNOTATION_REAPPLY_AT, ANNOTATION_REVISION,
    FIELD_MANAGER, KURA_CONTAINER, LABEL_GATEWAY, LABEL_MANAGED_BY, MANAGED_BY_VALUE,
};
use kura_core::kind::ChildKind;
use kura_core::plan::{LiveChild, Observed, Owner};
use kura_core::render::{Desired, Manifest, ObjectId};

/// `status`: the status to decide from (the cache's, or a fresher one this
/// process wrote; see `memory::Memory::recall`).
pub fn observe(
    instance: &KuraInstance,
    status: Option<KuraInstanceStatus>,
    desired: Option<&Desired>,
    stores: &Stores,
) -> Observed {
    let mut status = status.unwrap_or_default();
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let namespace = instance.metadata.namespace.as_deref().unwrap_or_default();
    let ignored_inventory = keep_own_inventory(&mut status.inventory, namespace);
    forget_records_of_others(&mut status, &instance.metadata);
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
    let children = children(ids, desired, stores, (uid, name));
    let terminating = desired
        .iter()
        .flat_map(|d| &d.objects)
        .filter(|o| !children.contains_key(&o.id))
        .filter_map(|o| Some((o.id.clone(), stores.terminating(&o.id)?)))
        .collect();
    let Running {
        image: running_image,
        pod_template_hash: running_pod_template_hash,
        image_managers,
    } = running(desired, stores);
    Observed {
        generation: instance.metadata.generation,
        force_token: instance
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REAPPLY_AT))
            .cloned(),
        paused: instance.spec.paused,
        spec_hash: Some(kura_core::render::hash::spec_hash(&instance.spec)),
        status,
        children,
        terminating,
        running_image,
        running_pod_template_hash,
        image_managers,
        ignored_inventory,
        // Not a cache's to say: the reconcile knows its own recent applies.
        just_applied: false,
        // The fleet's, not this instance's: set by the reconcile (`budget::view`).
        budget: Default::default(),
    }
}

/// The live children among `ids`, each as [`LiveChild`] (whose it is, its
/// revision, the fields we own), for the instance `(uid, name)`.
fn children(
    ids: Vec<ObjectId>,
    desired: Option<&Desired>,
    stores: &Stores,
    (uid, name): (&str, &str),
) -> BTreeMap<ObjectId, LiveChild> {
    let rendered = |id: &ObjectId| desired?.objects.iter().find(|o| &o.id == id);
    ids.into_iter()
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
        .collect()
}

/// What the workload runs now, as its cache shows it.
#[derive(Default)]
struct Running {
    image: Option<String>,
    pod_template_hash: Option<String>,
    /// The other managers holding its image.
    image_managers: Vec<String>,
}

fn running(desired: Option<&Desired>, stores: &Stores) -> Running {
    let workload = desired.and_then(|d| {
        let sts_id = &d
            .objects
            .iter()
            .find(|o| o.id.kind == ChildKind::StatefulSet)?
            .id;
        stores.stateful_set(sts_id)
    });
    let Some(workload) = workload else {
        return Running::default();
    };
    let image = kura_core::cached_sts::image(&workload).map(str::to_string);
    let image_managers = match &image {
        Some(image) => image_managers(&workload.metadata, image),
        None => Vec::new(),
    };
    Running {
        pod_template_hash: kura_core::cached_sts::pod_template_hash(&workload).map(str::to_string),
        image,
        image_managers,
    }
}

/// Forgets the records of `status` that another manager wrote (see
/// `status_trust`): the rollout record (it would hold or order the fleet),
/// the inventory, the retry and take-back counts. The next status write
/// replaces them with the operator's own.
pub fn forget_records_of_others(status: &mut KuraInstanceStatus, meta: &ObjectMeta) {
    let others = kura_core::status_trust::foreign_status_fields(meta);
    if others.contains("rollout") {
        status.rollout = None;
    }
    if others.contains("inventory") {
        status.inventory.clear();
    }
    if others.contains("retry") {
        status.retry = None;
    }
    if others.contains("conflict") {
        status.conflict = None;
    }
}

/// Drops the inventory entries that cannot be this instance's, and returns
/// them (as `kind namespace/name`) to be reported. An instance renders its
/// objects in its own namespace only; status is anyone's to write, so an
/// entry naming another namespace (or a cluster-scoped object) is a forgery
/// or a mistake, and reading it would tell the writer whether an object of
/// another tenant exists.
pub fn keep_own_inventory(inventory: &mut Vec<InventoryEntry>, namespace: &str) -> Vec<String> {
    let mut ignored = Vec::new();
    inventory.retain(|e| {
        let own = e.namespace.as_deref() == Some(namespace);
        if !own {
            ignored.push(format!(
                "{} {}/{}",
                e.kind,
                e.namespace.as_deref().unwrap_or("(cluster)"),
                e.name
            ));
        }
        own
    });
    ignored
}

/// `rendered`: the object as this operator renders it now, if it does; the
/// other managers holding fields of it are named.
pub fn live_child(meta: &ObjectMeta, owner: Owner, rendered: Option<&Manifest>) -> LiveChild {
    live_child_as(meta, owner, FIELD_MANAGER, rendered)
}

/// [`live_child`] of an object `manager` applies (a gateway's children have
/// a field manager of their own).
pub fn live_child_as(
    meta: &ObjectMeta,
    owner: Owner,
    manager: &str,
    rendered: Option<&Manifest>,
) -> LiveChild {
    let other_managers = match rendered {
        // Serialised only when someone else may hold a field of it (rare).
        Some(m) if meta.managed_fields.iter().flatten().any(rivals::is_rival) => {
            serde_json::to_value(m)
                .map_or_else(|_| Vec::new(), |v| rivals::contested(meta, &v, manager))
        }
        _ => Vec::new(),
    };
    LiveChild {
        revision: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_REVISION))
            .cloned(),
        owned_fields: owned_fields_by(meta, manager),
        other_managers,
        owner,
        ingress_class: None,
    }
}

/// The other managers holding the workload's image (running as `image`).
fn image_managers(meta: &ObjectMeta, image: &str) -> Vec<String> {
    let only_the_image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": KURA_CONTAINER, "image": image}]}}}});
    rivals::contested(meta, &only_the_image, FIELD_MANAGER)
}

/// Whose an object is, from its metadata. An instance's child is its own when
/// the instance's uid is its controller owner reference: names are not proof
/// (anyone may create an object of any name first), uids cannot be forged from
/// another object. A gateway is shared, so it has no owner: it is ours when
/// this operator created it (labelled, and applied by our field manager). A
/// gateway's IngressClass is cluster-scoped, so it cannot be owned either: it
/// is the gateway's (`owner_uid`, `owner_name`) when it carries its uid.
pub fn owner(meta: &ObjectMeta, kind: ChildKind, owner_uid: &str, owner_name: &str) -> Owner {
    match kind {
        ChildKind::KuraGateway => gateway_owner(meta),
        ChildKind::IngressClass | ChildKind::ClusterRoleBinding => {
            class_owner(meta, owner_uid, owner_name)
        }
        _ => controller_owner(meta, owner_uid, owner_name),
    }
}

fn controller_owner(meta: &ObjectMeta, instance_uid: &str, instance_name: &str) -> Owner {
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

fn labelled_managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY_VALUE)
}

/// A gateway is ours when the instances' field manager applied its spec: a
/// status write (of any manager) or a label proves nothing.
fn gateway_owner(meta: &ObjectMeta) -> Owner {
    let applied_by_us = meta
        .managed_fields
        .iter()
        .flatten()
        .any(|m| applied_by(m, FIELD_MANAGER));
    if labelled_managed(meta) && applied_by_us {
        Owner::Ours
    } else {
        Owner::Foreign("was not created by kura-operator".into())
    }
}

fn class_owner(meta: &ObjectMeta, gateway_uid: &str, gateway_name: &str) -> Owner {
    let annotated = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_GATEWAY_UID));
    match annotated {
        Some(uid) if !gateway_uid.is_empty() && uid == gateway_uid => Owner::Ours,
        Some(uid) => Owner::Foreign(format!("belongs to another KuraGateway (uid {uid})")),
        // An earlier release created it for this gateway, before classes
        // carried the uid: labelled as the gateway's and applied by the
        // operator (the class name, derived from the gateway's namespace and
        // name, admits no other gateway).
        None if labelled_managed(meta)
            && meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_GATEWAY))
                .is_some_and(|v| v == gateway_name)
            && meta
                .managed_fields
                .iter()
                .flatten()
                .any(|m| applied_by(m, FIELD_MANAGER)) =>
        {
            Owner::Adopt
        }
        None => Owner::Foreign(format!(
            "was not created by kura-operator for this gateway (it has no {ANNOTATION_GATEWAY_UID} annotation)"
        )),
    }
}
