//! The upgrade path from earlier releases (I/O): their finalizer on every
//! gateway, and gateway children applied under the instances' field manager.

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::observe::has_legacy_finalizer;
use crate::reconcile::apply::dynamic_api;
use crate::reconcile::observe::owner;
use kura_core::api::KuraGateway;
use kura_core::keys::{FIELD_MANAGER, LEGACY_GATEWAY_FINALIZER};
use kura_core::kind::ChildKind;
use kura_core::names;
use kura_core::outcome::Failure;
use kura_core::outcome::Stage;
use kura_core::plan::Owner;
use kura_core::render::ObjectId;

fn gateway_id(gw: &KuraGateway) -> ObjectId {
    ObjectId {
        kind: ChildKind::KuraGateway,
        namespace: gw.metadata.namespace.clone(),
        name: gw.metadata.name.clone().unwrap_or_default(),
    }
}

/// Removes the finalizer earlier releases put on every gateway: it held a
/// namespace's deletion for as long as the operator did not run. A gateway
/// already being deleted first loses the class made for it, as the earlier
/// release would have done, but only the gateway's own: the class of its
/// namespace and name, carrying its uid or (made by that release) its labels.
/// Returns whether there was a finalizer to remove.
pub async fn drop_legacy_finalizer(client: &Client, gw: &KuraGateway) -> Result<bool, Failure> {
    if !has_legacy_finalizer(gw) {
        return Ok(false);
    }
    let id = gateway_id(gw);
    let namespace = id.namespace.clone().unwrap_or_default();
    let fail = |verb, object: &ObjectId, e: &kube::Error| {
        crate::reconcile::apply::failure(Stage::Prune, verb, object, e)
    };
    if gw.metadata.deletion_timestamp.is_some() {
        let class = ObjectId {
            kind: ChildKind::IngressClass,
            namespace: None,
            name: names::gateway_ingress_class(&namespace, &id.name),
        };
        let api = dynamic_api(client, &class);
        let uid = gw.metadata.uid.as_deref().unwrap_or_default();
        if let Some(live) = api
            .get_opt(&class.name)
            .await
            .map_err(|e| fail("read", &class, &e))?
            && !matches!(
                owner(&live.metadata, ChildKind::IngressClass, uid, &id.name),
                Owner::Foreign(_)
            )
        {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: live.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            match crate::reconcile::execute::writes::delete(&api, &class.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(fail("delete", &class, &e)),
            }
        }
    }
    let finalizers = gw.metadata.finalizers.clone().unwrap_or_default();
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != LEGACY_GATEWAY_FINALIZER)
        .collect();
    // `test` first: another writer's finalizer added meanwhile is never dropped
    // (the patch fails and the next reconcile sees both).
    let patch = serde_json::json!([
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]);
    let patch = Patch::<()>::Json(serde_json::from_value(patch).expect("a JSON patch"));
    let api = Api::<KuraGateway>::namespaced(client.clone(), &namespace);
    crate::reconcile::execute::writes::patch(&api, &id.name, &PatchParams::default(), &patch)
        .await
        .map_err(|e| fail("remove the finalizer of", &id, &e))?;
    Ok(true)
}

/// Releases what the instances' field manager still holds of objects an
/// earlier release applied: an apply of an empty intent under that manager,
/// sent after the gateway's manager applied the whole intent, so every field
/// stays (owned by the gateway's manager) and none stays co-owned by a
/// manager that will never apply it again. Returns the objects released.
pub async fn release_old_manager(
    client: &Client,
    ids: &[ObjectId],
) -> Result<Vec<String>, Failure> {
    let mut released = Vec::new();
    for id in ids {
        let mut metadata = serde_json::json!({ "name": id.name });
        if let Some(ns) = &id.namespace {
            metadata["namespace"] = ns.clone().into();
        }
        let empty = serde_json::json!({
            "apiVersion": id.kind.api_version(),
            "kind": id.kind.kind(),
            "metadata": metadata,
        });
        let api = dynamic_api(client, id);
        let params = PatchParams::apply(FIELD_MANAGER);
        match crate::reconcile::execute::writes::patch(
            &api,
            &id.name,
            &params,
            &Patch::Apply(&empty),
        )
        .await
        {
            Ok(_) => released.push(id.to_string()),
            // An empty apply of an object that is gone would create it: never
            // mind a 404 (only an existing object can have been applied).
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(crate::reconcile::apply::failure(
                    Stage::Apply,
                    "release fields of",
                    id,
                    &e,
                ));
            }
        }
    }
    Ok(released)
}
