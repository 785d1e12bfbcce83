//! `prune`: after a successful apply, delete this instance's objects that the
//! desired set no longer has. Only objects this instance created (its uid as
//! their controller owner) are deleted; a KuraGateway only when nothing uses it
//! any more; PersistentVolumeClaims are never a candidate (not a kind we render).
//!
//! An object the cache does not show is read from the apiserver, never assumed
//! gone. An object whose deletion failed stays in the inventory, so the next
//! reconcile tries again and status never claims it is gone.

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};

use super::apply::dynamic_api;
use super::observe::owner;
use crate::stores::Stores;
use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::keys::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use kura_core::kind::ChildKind;
use kura_core::outcome::Failure;
use kura_core::outcome::Stage;
use kura_core::plan::Owner;
use kura_core::render::ObjectId;
use kura_core::validate::resolve_gateway;

use kura_core::outcome::PruneOutcome;

/// Who still uses the gateway `gateway` (serving class `class`) of `namespace`,
/// besides the instance `except`: an instance of the namespace that desires it,
/// inventories it or records it (a paused, failing or invalid instance keeps
/// its gateway), or a live Ingress of the namespace on its class. Instances of
/// other namespaces never count: a gateway serves its own namespace only.
pub fn gateway_user(
    gateway: &str,
    class: &str,
    namespace: &str,
    instances: &[KuraInstance],
    ingress_classes_in_use: &[(String, String)],
    except: &str,
    config: &OperatorConfig,
) -> Option<String> {
    let instance_uses = |i: &KuraInstance| {
        if i.metadata.namespace.as_deref() != Some(namespace)
            || i.metadata.name.as_deref() == Some(except)
            || i.metadata.deletion_timestamp.is_some()
        {
            return false;
        }
        let desires = config.regions.get(&i.spec.region).is_some_and(|region| {
            resolve_gateway(
                i.spec.gateway.mode,
                &i.spec.account,
                &i.spec.region,
                region,
                namespace,
            )
            .ok()
            .and_then(|g| g.gateway_name)
            .is_some_and(|g| g == gateway)
        });
        let status = i.status.as_ref();
        let recorded = status.is_some_and(|s| {
            s.inventory
                .iter()
                .any(|e| e.kind == ChildKind::KuraGateway.kind() && e.name == gateway)
                || s.gateway.as_ref().and_then(|g| g.gateway_name.as_deref()) == Some(gateway)
        });
        desires || recorded
    };
    if let Some(i) = instances.iter().find(|i| instance_uses(i)) {
        return Some(format!(
            "KuraInstance {}",
            i.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    ingress_classes_in_use
        .iter()
        .find(|(_, c)| c == class)
        .map(|(ingress, _)| format!("Ingress {ingress}"))
}

/// Every Ingress of `namespace` with its class, read live (anyone's, not only
/// ours: a hand-made Ingress on a gateway's class uses that gateway), except
/// the instance `except`'s own, which its apply just moved.
pub async fn ingress_classes(
    client: &Client,
    namespace: &str,
    except: &str,
) -> Result<Vec<(String, String)>, kube::Error> {
    let list = Api::<Ingress>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|i| {
            i.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_INSTANCE))
                .is_none_or(|v| v != except)
        })
        .filter_map(|i| {
            let class = i.spec?.ingress_class_name?;
            Some((i.metadata.name.unwrap_or_default(), class))
        })
        .collect())
}

/// Why a stale object must stay, judged from its metadata alone: it is not
/// this instance's, or it is no longer labelled as the operator's. (Whether a
/// gateway is still used is [`gateway_user`]'s question.)
pub fn kept_by_metadata(
    meta: &ObjectMeta,
    id: &ObjectId,
    instance_uid: &str,
    instance_name: &str,
) -> Option<String> {
    if let Owner::Foreign(whose) = owner(meta, id.kind, instance_uid, instance_name) {
        return Some(whose);
    }
    // Created by us is not enough: an object whose operator labels someone
    // removed was taken over on purpose, and is left to its new keeper.
    let labels = meta.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let labelled = label(LABEL_MANAGED_BY) == Some(MANAGED_BY_VALUE)
        && (id.kind == ChildKind::KuraGateway || label(LABEL_INSTANCE) == Some(instance_name));
    (!labelled).then(|| {
        format!(
            "no longer labelled {LABEL_MANAGED_BY}={MANAGED_BY_VALUE}, {LABEL_INSTANCE}={instance_name}"
        )
    })
}

pub struct PruneFor<'a> {
    pub uid: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
}

pub async fn prune(
    client: &Client,
    stores: &Stores,
    instance: &PruneFor<'_>,
    stale: &[ObjectId],
    config: &OperatorConfig,
) -> PruneOutcome {
    let mut outcome = PruneOutcome::default();
    for id in stale {
        if let Err(failure) = prune_one(client, stores, instance, id, config, &mut outcome).await {
            outcome.remaining.push(id.clone());
            outcome.failure.get_or_insert(failure);
        }
    }
    outcome
}

async fn prune_one(
    client: &Client,
    stores: &Stores,
    instance: &PruneFor<'_>,
    id: &ObjectId,
    config: &OperatorConfig,
    outcome: &mut PruneOutcome,
) -> Result<(), Failure> {
    let api = dynamic_api(client, id);
    let fail = |verb, e: &kube::Error| crate::reconcile::apply::failure(Stage::Prune, verb, id, e);
    let meta = match stores.meta(id) {
        Some(meta) => meta,
        // Not in the cache: ask, never assume it is gone.
        None => match api.get_opt(&id.name).await {
            Ok(Some(live)) => live.metadata,
            Ok(None) => return Ok(()),
            Err(e) => return Err(fail("read", &e)),
        },
    };
    if let Some(why) = kept_by_metadata(&meta, id, instance.uid, instance.name) {
        outcome.kept.push(format!("{id}: {why}"));
        return Ok(());
    }
    if id.kind == ChildKind::KuraGateway {
        // A live read, not the cache: a deletion must not act on a stale view.
        let ns = id.namespace.clone().unwrap_or_default();
        let instances = Api::<KuraInstance>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| fail("list instances for", &e))?;
        let class = kura_core::names::gateway_ingress_class(&ns, &id.name);
        let on_class = ingress_classes(client, &ns, instance.name)
            .await
            .map_err(|e| fail("list ingresses for", &e))?;
        if let Some(user) = gateway_user(
            &id.name,
            &class,
            &ns,
            &instances.items,
            &on_class,
            instance.name,
            config,
        ) {
            outcome.kept.push(format!("{id}: still used by {user}"));
            return Ok(());
        }
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match crate::reconcile::execute::writes::delete(&api, &id.name, &params).await {
        Ok(_) => outcome.deleted.push(id.to_string()),
        // Gone already, or replaced by another object of the name (the uid
        // precondition failed): nothing of ours to delete.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => return Err(fail("delete", &e)),
    }
    Ok(())
}
