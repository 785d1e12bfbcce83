//! `apply`: server-side apply of the objects `plan` chose, under one field
//! manager. Fields other actors own are left alone (docs/incidents.md #4); fields we
//! render are ours (`force`). An object the caches do not show is created with
//! a create-only apply, which the apiserver refuses when the name is taken: an
//! existing object is never taken over unless it is this instance's own (the
//! cache lagged) or was handed over with `kura.dev/adopt`.

use std::collections::BTreeMap;

use futures::future::join_all;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use super::observe::{owned_fields_by, owner};
use super::plan::{ApplyOp, Owner};
use crate::keys::{CREATE_ONLY_RESOURCE_VERSION, FIELD_MANAGER};
use crate::render::{Desired, ObjectId, RenderedObject};

/// Where a reconcile failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Apply,
    Prune,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Throttling, a server error (a webhook whose service is down answers
    /// 500), the apiserver out of reach: says nothing about the input.
    Transient,
    /// The apiserver, a webhook or an admission policy refused the request.
    Rejected,
    /// An object of the name exists and is not this instance's.
    NameConflict,
}

/// One failed request, with everything a user needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{verb} {object}: {message}")]
pub struct Failure {
    pub stage: Stage,
    pub class: FailureClass,
    pub object: String,
    pub verb: &'static str,
    /// The HTTP status of the apiserver's answer, when it answered.
    pub code: Option<u16>,
    pub message: String,
}

impl Failure {
    pub fn from_kube(stage: Stage, verb: &'static str, object: &ObjectId, e: &kube::Error) -> Self {
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

    pub fn is_transient(&self) -> bool {
        self.class == FailureClass::Transient
    }
}

pub fn dynamic_api(client: &Client, id: &ObjectId) -> Api<DynamicObject> {
    let ar = id.kind.api_resource();
    match &id.namespace {
        Some(ns) if id.kind.namespaced() => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}

/// The instance the objects are applied for: judges whose an existing object is.
pub struct For<'a> {
    pub uid: &'a str,
    pub name: &'a str,
}

/// Send `ops` in waves; returns the owned-field fingerprint of each object sent.
/// A wave with a failure ends the apply (nothing of a later wave is sent); its
/// name conflicts are reported together, each object named.
pub async fn apply(
    client: &Client,
    desired: &Desired,
    ops: &[ApplyOp],
    instance: &For<'_>,
) -> Result<BTreeMap<ObjectId, Option<String>>, Failure> {
    apply_as(client, desired, ops, instance, FIELD_MANAGER).await
}

/// [`apply`] under another of the operator's field managers (a gateway's).
pub async fn apply_as(
    client: &Client,
    desired: &Desired,
    ops: &[ApplyOp],
    instance: &For<'_>,
    manager: &str,
) -> Result<BTreeMap<ObjectId, Option<String>>, Failure> {
    let mut fingerprints = BTreeMap::new();
    let mut waves: Vec<u8> = ops.iter().map(|op| op.id.kind.wave()).collect();
    waves.sort_unstable();
    waves.dedup();
    for wave in waves {
        let batch = ops
            .iter()
            .filter(|op| op.id.kind.wave() == wave)
            .filter_map(|op| Some((op, desired.objects.iter().find(|o| o.id == op.id)?)))
            .map(|(op, object)| apply_one(client, op, object, instance, manager));
        let mut failures = Vec::new();
        for result in join_all(batch).await {
            match result {
                Ok((id, fingerprint)) => {
                    fingerprints.insert(id, fingerprint);
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
) -> Result<(ObjectId, Option<String>), Failure> {
    let api = dynamic_api(client, &op.id);
    let fail = |verb, e: &kube::Error| Failure::from_kube(Stage::Apply, verb, &op.id, e);
    if op.clear_address {
        clear_address(&api, &op.id)
            .await
            .map_err(|e| fail("clear the address of", &e))?;
    }
    let params = PatchParams::apply(manager).force();
    let applied = if op.create {
        let mut body = object.body();
        body["metadata"]["resourceVersion"] = CREATE_ONLY_RESOURCE_VERSION.into();
        match api.patch(&op.id.name, &params, &Patch::Apply(&body)).await {
            Ok(created) => created,
            // The name is taken: by this instance's own object the cache has not
            // shown yet, by an object handed over, or by someone else's.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let live = api.get(&op.id.name).await.map_err(|e| fail("read", &e))?;
                match owner(&live.metadata, op.id.kind, instance.uid, instance.name) {
                    Owner::Ours | Owner::Adopt => api
                        .patch(&op.id.name, &params, &Patch::Apply(&object.manifest))
                        .await
                        .map_err(|e| fail("apply", &e))?,
                    Owner::Foreign(whose) => {
                        return Err(Failure {
                            stage: Stage::Apply,
                            class: FailureClass::NameConflict,
                            object: op.id.to_string(),
                            verb: "create",
                            code: Some(409),
                            message: format!("{} exists and {whose}", op.id),
                        });
                    }
                }
            }
            Err(e) => return Err(fail("create", &e)),
        }
    } else if op.keep_live_template {
        let live = api.get(&op.id.name).await.map_err(|e| fail("read", &e))?;
        let body = with_live_template(object.body(), &live.data, &live.metadata);
        api.patch(&op.id.name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| fail("apply", &e))?
    } else {
        api.patch(&op.id.name, &params, &Patch::Apply(&object.manifest))
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
    Ok((op.id.clone(), owned_fields_by(&applied.metadata, manager)))
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
        .and_then(|a| a.get(crate::keys::ANNOTATION_REVISION));
    if let Some(stamp) = stamp {
        body["metadata"]["annotations"][crate::keys::ANNOTATION_REVISION] = stamp.clone().into();
    }
    body
}

/// Removes the addresses an ingress controller wrote into an Ingress's status.
async fn clear_address(api: &Api<DynamicObject>, id: &ObjectId) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": null}}});
    match api
        .patch_status(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
