//! `apply`: server-side apply of the objects `plan` chose, under one field
//! manager. Fields other actors own are left alone (docs/incidents.md #4); fields we
//! render are ours (`force`). An object the caches do not show is created with
//! a create-only apply, which the apiserver refuses when the name is taken: an
//! existing object is never taken over unless it is this instance's own (the
//! cache lagged) or was handed over with `kura.dev/adopt`.
//!
//! All or nothing: the caches show only labelled objects, so a name someone
//! else's unlabelled object holds is unknown to `plan`. Before the first write
//! of an apply that creates anything (and sends more than that one object),
//! every name it creates is checked against the names of unlabelled objects
//! (`stores::foreign`, a watch of its own; read per name until it has
//! listed); one that is taken by someone else's object fails the whole apply
//! as a name conflict listing each, and nothing is written.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;
use kube::Client;
use kube::api::{Api, DynamicObject, GetParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use tracing::Instrument;

use super::observe::owner;
use crate::stores::Stores;
use crate::stores::foreign::{ForeignNames, Lookup};
use kura_core::compact::{compact_child, compact_managed_fields};
use kura_core::fields::owned_fields_by;
use kura_core::keys::{CREATE_ONLY_RESOURCE_VERSION, FIELD_MANAGER};
use kura_core::plan::{ApplyOp, Owner};
use kura_core::render::{Desired, ObjectId, RenderedObject};

use kura_core::outcome::{Failure, FailureClass, Stage};

/// A failed request as the apiserver (or the way to it) answered.
pub fn failure(stage: Stage, verb: &'static str, object: &ObjectId, e: &kube::Error) -> Failure {
    let (class, code, message) = match e {
        kube::Error::Api(s) => {
            let transient = s.code == 429 || s.code >= 500 || s.code == 409;
            let class = if transient {
                FailureClass::Transient
            } else {
                FailureClass::Rejected
            };
            (class, Some(s.code), format!("{} ({})", s.message, s.code))
        }
        other => (FailureClass::Transient, None, other.to_string()),
    };
    Failure {
        stage,
        class,
        object: object.to_string(),
        verb,
        code,
        message,
    }
}

pub fn dynamic_api(client: &Client, id: &ObjectId) -> Api<DynamicObject> {
    api_of(client, id)
}

/// The API of `id`'s kind and namespace, for any dynamic view of its objects.
fn api_of<K>(client: &Client, id: &ObjectId) -> Api<K>
where
    K: kube::Resource<
            DynamicType = kube::api::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    let ar = id.kind.api_resource();
    match &id.namespace {
        Some(ns) if id.kind.namespaced() => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// [`dynamic_api`] answering with metadata only: an apply's answer is read
/// for its managedFields alone, and parsing whole objects (a StatefulSet's
/// runs to kilobytes) cost memory and CPU on both sides of every apply.
fn metadata_api(client: &Client, id: &ObjectId) -> Api<PartialObjectMeta<DynamicObject>> {
    api_of(client, id)
}

/// The instance the objects are applied for: judges whose an existing object is.
pub struct For<'a> {
    pub uid: &'a str,
    pub name: &'a str,
}

/// Send `ops` in waves; returns the owned-field fingerprint of each object sent.
/// The names it creates are checked first (`check_names`): a name taken by
/// someone else fails the apply before anything is written. A wave with a
/// failure ends the apply (nothing of a later wave is sent); its name
/// conflicts are reported together, each object named. Each answer is kept
/// as what the caches will show (`stores::unseen`), the objects of a wave
/// that failed in part included, until they do.
pub async fn apply(
    client: &Client,
    stores: &Stores,
    desired: &Desired,
    ops: &[ApplyOp],
    instance: &For<'_>,
) -> Result<BTreeMap<ObjectId, Option<String>>, Failure> {
    apply_as(client, stores, desired, ops, instance, FIELD_MANAGER).await
}

/// [`apply`] under another of the operator's field managers (a gateway's).
pub async fn apply_as(
    client: &Client,
    stores: &Stores,
    desired: &Desired,
    ops: &[ApplyOp],
    instance: &For<'_>,
    manager: &str,
) -> Result<BTreeMap<ObjectId, Option<String>>, Failure> {
    let ops = &check_names(client, &stores.foreign, ops, instance).await?;
    let mut fingerprints = BTreeMap::new();
    let mut waves: Vec<u8> = ops.iter().map(|op| op.id.kind.wave()).collect();
    waves.sort_unstable();
    waves.dedup();
    for wave in waves {
        let batch: Vec<_> = ops
            .iter()
            .filter(|op| op.id.kind.wave() == wave)
            .filter_map(|op| Some((op, desired.objects.iter().find(|o| o.id == op.id)?)))
            .map(|(op, object)| apply_one(client, op, object, instance, manager))
            .collect();
        let span = tracing::info_span!("apply_wave", wave, objects = batch.len());
        let mut failures = Vec::new();
        for result in join_all(batch).instrument(span).await {
            match result {
                Ok((id, mut answer)) => {
                    fingerprints.insert(id.clone(), owned_fields_by(&answer.metadata, manager));
                    // Kept as its cache keeps it.
                    compact_child(&mut answer);
                    compact_managed_fields(&mut answer);
                    stores.unseen.wrote(&id, answer.metadata);
                }
                Err(failure) => failures.push(failure),
            }
        }
        if let Some(failure) = first_failure(failures) {
            return Err(failure);
        }
    }
    Ok(fingerprints)
}

/// Whether the names `ops` create must be read before the first write: it
/// creates something, and sends more than that one object (a lone create-only
/// apply is its own check: refused, it wrote nothing).
pub fn names_to_check(ops: &[ApplyOp]) -> Vec<&ApplyOp> {
    if ops.len() < 2 {
        return Vec::new();
    }
    ops.iter().filter(|op| op.create).collect()
}

/// Checks every name `ops` would create before anything is written. Someone
/// else's object under one of them: the name conflicts, all of them, as one
/// failure, and nothing is sent. This instance's own (the cache lagged) or
/// one handed over: sent as an apply, not a create.
///
/// What the caches do not hold, `names` (`stores::foreign`) does: a name no
/// unlabelled object holds costs no request. A name it shows as held is read
/// (consistently, from etcd) before it is reported, so a name freed a moment
/// ago is not a conflict. A kind whose names have not listed yet is read
/// per name, from the apiserver's watch cache (`resourceVersion=0`), a name
/// seen as taken read again consistently. Either way a stale answer is safe:
/// a name taken a moment ago and not yet seen is refused by its create-only
/// apply (as is one whose read failed: throttled, timed out; failing the
/// apply instead made a throttled fleet retry seven reads and seven writes
/// until all fourteen got through at once, seen on the real plane under API
/// Priority and Fairness).
async fn check_names(
    client: &Client,
    names: &ForeignNames,
    ops: &[ApplyOp],
    instance: &For<'_>,
) -> Result<Vec<ApplyOp>, Failure> {
    let reads = names_to_check(ops).into_iter().map(|op| async move {
        let api = dynamic_api(client, &op.id);
        let read = match names.lookup(&op.id) {
            Lookup::Free => Ok(None),
            Lookup::Held(_) => api.get_metadata_opt(&op.id.name).await,
            Lookup::Unknown => {
                match api
                    .get_metadata_opt_with(&op.id.name, &GetParams::any())
                    .await
                {
                    Ok(Some(found)) if judge(op, &found, instance).is_err() => {
                        api.get_metadata_opt(&op.id.name).await
                    }
                    other => other,
                }
            }
        };
        (op, read)
    });
    let mut failures = Vec::new();
    let mut existing = BTreeSet::new();
    for (op, read) in join_all(reads).await {
        match read {
            Ok(None) => {}
            Ok(Some(found)) => match judge(op, &found, instance) {
                Ok(()) => {
                    existing.insert(op.id.clone());
                }
                Err(conflict) => failures.push(conflict),
            },
            Err(e) => {
                tracing::debug!(object = %op.id, error = %e, "name not checked before the apply")
            }
        }
    }
    if let Some(failure) = first_failure(failures) {
        return Err(failure);
    }
    Ok(ops
        .iter()
        .map(|op| ApplyOp {
            create: op.create && !existing.contains(&op.id),
            ..op.clone()
        })
        .collect())
}

/// An object found under a name `op` creates: this instance's (or handed
/// over), or a name conflict.
fn judge(
    op: &ApplyOp,
    found: &PartialObjectMeta<DynamicObject>,
    instance: &For<'_>,
) -> Result<(), Failure> {
    match owner(&found.metadata, op.id.kind, instance.uid, instance.name) {
        Owner::Ours | Owner::Adopt => Ok(()),
        Owner::Foreign(whose) => Err(name_conflict(&op.id, &whose)),
    }
}

fn name_conflict(id: &ObjectId, whose: &str) -> Failure {
    Failure {
        stage: Stage::Apply,
        class: FailureClass::NameConflict,
        object: id.to_string(),
        verb: "create",
        code: Some(409),
        message: format!("{id} exists and {whose}"),
    }
}

/// The failure to report for a wave: all name conflicts in one, else the
/// first rejection, else the first transient failure (what a user can act on
/// comes first).
fn first_failure(mut failures: Vec<Failure>) -> Option<Failure> {
    let conflicts: Vec<Failure> = failures
        .iter()
        .filter(|f| f.class == FailureClass::NameConflict)
        .cloned()
        .collect();
    if let Some(first) = conflicts.first() {
        let message = conflicts
            .iter()
            .map(|f| f.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let object = conflicts
            .iter()
            .map(|f| f.object.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Some(Failure {
            message,
            object,
            ..first.clone()
        });
    }
    failures.sort_by_key(|f| f.class == FailureClass::Transient);
    failures.into_iter().next()
}

async fn apply_one(
    client: &Client,
    op: &ApplyOp,
    object: &RenderedObject,
    instance: &For<'_>,
    manager: &str,
) -> Result<(ObjectId, PartialObjectMeta<DynamicObject>), Failure> {
    let api = dynamic_api(client, &op.id);
    let meta = metadata_api(client, &op.id);
    let fail = |verb, e: &kube::Error| failure(Stage::Apply, verb, &op.id, e);
    if op.clear_address {
        clear_address(&api, &op.id)
            .await
            .map_err(|e| fail("clear the address of", &e))?;
    }
    let params = PatchParams::apply(manager).force();
    let applied = if op.create {
        let mut body = object.body();
        body["metadata"]["resourceVersion"] = CREATE_ONLY_RESOURCE_VERSION.into();
        match crate::reconcile::execute::writes::patch(
            &meta,
            &op.id.name,
            &params,
            &Patch::Apply(&body),
        )
        .await
        {
            Ok(created) => created,
            // The name is taken: by this instance's own object the cache has not
            // shown yet, by an object handed over, or by someone else's.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let live = meta.get(&op.id.name).await.map_err(|e| fail("read", &e))?;
                match owner(&live.metadata, op.id.kind, instance.uid, instance.name) {
                    Owner::Ours | Owner::Adopt => {
                        crate::reconcile::execute::writes::patch(
                            &meta,
                            &op.id.name,
                            &params,
                            &Patch::Apply(&object.manifest),
                        )
                        .await
                    }
                    .map_err(|e| fail("apply", &e))?,
                    Owner::Foreign(whose) => return Err(name_conflict(&op.id, &whose)),
                }
            }
            Err(e) => return Err(fail("create", &e)),
        }
    } else if op.keep_live_template {
        let live = api.get(&op.id.name).await.map_err(|e| fail("read", &e))?;
        let body = with_live_template(object.body(), &live.data, &live.metadata);
        crate::reconcile::execute::writes::patch(&meta, &op.id.name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| fail("apply", &e))?
    } else {
        crate::reconcile::execute::writes::patch(
            &meta,
            &op.id.name,
            &params,
            &Patch::Apply(&object.manifest),
        )
        .await
        .map_err(|e| fail("apply", &e))?
    };
    if op.clear_address {
        // Again after the class moved: the old controller may have written the
        // address back in between.
        clear_address(&api, &op.id)
            .await
            .map_err(|e| fail("clear the address of", &e))?;
    }
    Ok((op.id.clone(), applied))
}

/// The workload as rendered, with the pod template and revision stamp it runs
/// now (`ApplyOp::keep_live_template`): everything else of it is repaired,
/// and no pod restarts.
pub fn with_live_template(
    mut body: serde_json::Value,
    live: &serde_json::Value,
    live_meta: &kube::api::ObjectMeta,
) -> serde_json::Value {
    if let Some(template) = live.pointer("/spec/template") {
        body["spec"]["template"] = template.clone();
    }
    let stamp = live_meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(kura_core::keys::ANNOTATION_REVISION));
    if let Some(stamp) = stamp {
        body["metadata"]["annotations"][kura_core::keys::ANNOTATION_REVISION] =
            stamp.clone().into();
    }
    body
}

/// Removes the addresses an ingress controller wrote into an Ingress's status.
async fn clear_address(api: &Api<DynamicObject>, id: &ObjectId) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": null}}});
    match crate::reconcile::execute::writes::patch_status(
        api,
        &id.name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_core::kind::ChildKind;

    fn op(kind: ChildKind, name: &str, create: bool) -> ApplyOp {
        ApplyOp {
            id: ObjectId {
                kind,
                namespace: Some("ns".into()),
                name: name.into(),
            },
            create,
            clear_address: false,
            keep_live_template: false,
        }
    }

    fn conflict(object: &str) -> Failure {
        name_conflict(
            &ObjectId {
                kind: ChildKind::Service,
                namespace: Some("ns".into()),
                name: object.into(),
            },
            "was not created by this instance",
        )
    }

    /// Every name an apply creates is read before its first write, in every
    /// wave; a lone create is its own check; updates are never read.
    #[test]
    fn the_names_an_apply_creates_are_read_first_unless_it_sends_one_object() {
        let first_apply = [
            op(ChildKind::ConfigMap, "a-config", true),
            op(ChildKind::Service, "a", true),
            op(ChildKind::StatefulSet, "a", true),
        ];
        let read: Vec<&str> = names_to_check(&first_apply)
            .iter()
            .map(|op| op.id.name.as_str())
            .collect();
        assert_eq!(read, ["a-config", "a", "a"]);
        // A deleted child created again alone: no read.
        assert!(names_to_check(&first_apply[..1]).is_empty());
        // A change of existing objects: no read.
        let change = [
            op(ChildKind::ConfigMap, "a-config", false),
            op(ChildKind::StatefulSet, "a", false),
        ];
        assert!(names_to_check(&change).is_empty());
        // A change with a create among it: that one is read.
        let mixed = [
            op(ChildKind::ConfigMap, "a-config", false),
            op(ChildKind::NetworkPolicy, "a", true),
        ];
        let read: Vec<ChildKind> = names_to_check(&mixed).iter().map(|op| op.id.kind).collect();
        assert_eq!(read, [ChildKind::NetworkPolicy]);
    }

    /// Every name conflict is reported in one failure, before a rejection or
    /// a transient failure of another read.
    #[test]
    fn name_conflicts_are_reported_together_and_first() {
        let transient = Failure {
            class: FailureClass::Transient,
            code: Some(503),
            verb: "read",
            ..conflict("b")
        };
        let failure = first_failure(vec![transient.clone(), conflict("a"), conflict("c")])
            .expect("a failure");
        assert_eq!(failure.class, FailureClass::NameConflict);
        assert_eq!(failure.object, "Service ns/a, Service ns/c");
        assert!(
            failure.message.contains("Service ns/a exists")
                && failure.message.contains("Service ns/c exists"),
            "{}",
            failure.message
        );
        assert_eq!(first_failure(vec![transient.clone()]), Some(transient));
        assert_eq!(first_failure(Vec::new()), None);
    }
}
