//! Collection (I/O): who uses a gateway, deleting a gateway the operator
//! created once nothing uses it, and the sweep of the IngressClasses and
//! ClusterRoleBindings whose gateway is gone. A deletion acts on live reads, never on a cache alone.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};

use crate::context::Context;
use crate::reconcile::prune::{gateway_user, ingress_classes};
use crate::stores::Stores;
use kube::runtime::reflector::Lookup;
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::config::OperatorConfig;
use kura_core::keys::{
    ANNOTATION_GATEWAY_UID, LABEL_GATEWAY, LABEL_GATEWAY_NAMESPACE, LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
};
use kura_core::kind::ChildKind;
use kura_core::names;
use kura_core::outcome::Failure;
use kura_core::outcome::Stage;
use kura_core::render::ObjectId;

fn identity(gw: &KuraGateway) -> (&str, &str) {
    (
        gw.metadata.namespace.as_deref().unwrap_or_default(),
        gw.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The first user of `instances` (in name order, so that the answer is
/// stable) and then of `ingresses`.
fn first_user(
    gw: &KuraGateway,
    instances: &[Arc<KuraInstance>],
    ingresses: &[(String, String)],
    config: &OperatorConfig,
) -> Option<String> {
    let (namespace, name) = identity(gw);
    // The class the gateway serves, not whatever its spec names.
    let class = names::gateway_ingress_class(namespace, name);
    let mut instances: Vec<&Arc<KuraInstance>> = instances
        .iter()
        .filter(|i| i.metadata.namespace.as_deref() == Some(namespace))
        .collect();
    instances.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let used_by_instance = instances.into_iter().find_map(|i| {
        gateway_user(
            name,
            &class,
            namespace,
            std::slice::from_ref(i.as_ref()),
            &[],
            "",
            config,
        )
    });
    used_by_instance.or_else(|| gateway_user(name, &class, namespace, &[], ingresses, "", config))
}

/// Who uses the gateway according to the caches (the operator's own Ingresses only).
pub fn cached_user(gw: &KuraGateway, stores: &Stores, config: &OperatorConfig) -> Option<String> {
    let (namespace, _) = identity(gw);
    let mut ingresses: Vec<(String, String)> = stores
        .ingresses
        .state()
        .iter()
        .filter(|i| i.namespace().as_deref() == Some(namespace))
        .filter_map(|i| Some((i.name()?.into_owned(), i.class_name()?.to_string())))
        .collect();
    ingresses.sort();
    first_user(gw, &stores.instances.state(), &ingresses, config)
}

/// Who uses the gateway according to live lists of its namespace's instances
/// and Ingresses (anyone's: a hand-made Ingress on its class uses it too).
pub async fn live_user(
    client: &Client,
    gw: &KuraGateway,
    config: &OperatorConfig,
) -> Result<Option<String>, Failure> {
    let (namespace, name) = identity(gw);
    let id = ObjectId {
        kind: ChildKind::KuraGateway,
        namespace: Some(namespace.to_string()),
        name: name.to_string(),
    };
    let fail = |verb, e: &kube::Error| crate::reconcile::apply::failure(Stage::Prune, verb, &id, e);
    let instances: Vec<Arc<KuraInstance>> =
        Api::<KuraInstance>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(|e| fail("list instances for", &e))?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
    let ingresses = ingress_classes(client, namespace, "")
        .await
        .map_err(|e| fail("list ingresses for", &e))?;
    Ok(first_user(gw, &instances, &ingresses, config))
}

/// Deletes a gateway nothing uses (only this very object: a uid precondition),
/// with an Event that says why. Its Deployment and Service go with it (owner
/// references); its class is collected by [`sweep`].
pub async fn collect(ctx: &Context, gw: &Arc<KuraGateway>) -> Result<(), Failure> {
    let (namespace, name) = identity(gw);
    let id = ObjectId {
        kind: ChildKind::KuraGateway,
        namespace: Some(namespace.to_string()),
        name: name.to_string(),
    };
    let note = kura_core::gateway::status::collected(namespace);
    tracing::info!(%namespace, gateway = %name, "{}", note.note);
    let mut event = crate::reconcile::events::event(note);
    event.action = "Collect".into();
    crate::reconcile::events::publish(ctx, gw, vec![event]);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: gw.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    let api = Api::<KuraGateway>::namespaced(ctx.client.clone(), namespace);
    match crate::reconcile::execute::writes::delete(&api, name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or replaced by another gateway of the name.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(crate::reconcile::apply::failure(
            Stage::Prune,
            "delete",
            &id,
            &e,
        )),
    }
}

/// A cluster-scoped child the operator created for a gateway (its
/// IngressClass or ClusterRoleBinding): (the gateway's namespace, name, uid),
/// from the object's own labels and annotation.
fn gateway_of(meta: &ObjectMeta) -> Option<(&str, &str, &str)> {
    let labels = meta.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    Some((
        labels.get(LABEL_GATEWAY_NAMESPACE)?,
        labels.get(LABEL_GATEWAY)?,
        meta.annotations.as_ref()?.get(ANNOTATION_GATEWAY_UID)?,
    ))
}

/// The gateway a class event concerns, to reconcile it (a deleted class is
/// created again).
pub fn class_owner(meta: &ObjectMeta) -> Option<(String, String)> {
    crate::stores::class_gateway(meta)
}

/// The cluster-scoped children of gateways, as the caches show them: what
/// nothing can own, so what the sweep collects.
fn cluster_scoped(stores: &Stores) -> Vec<(ChildKind, ObjectMeta)> {
    let classes = stores.ingress_classes.state().into_iter();
    let bindings = stores.cluster_role_bindings.state().into_iter();
    classes
        .map(|c| (ChildKind::IngressClass, c.metadata.clone()))
        .chain(bindings.map(|b| (ChildKind::ClusterRoleBinding, b.metadata.clone())))
        .collect()
}

/// Deletes every IngressClass and ClusterRoleBinding the operator created for
/// a gateway (in `namespace`, when the operator watches one) whose gateway no
/// longer exists: its uid is on no cached gateway, and a live read of the
/// gateway it names finds none, or another object of the name. Objects
/// without the uid (made by hand, or by an earlier release) are never
/// candidates. Returns the objects deleted, as `<Kind>/<name>`.
pub async fn sweep(ctx: &Context, namespace: Option<&str>) -> Vec<String> {
    let live: HashSet<String> = ctx
        .stores
        .gateways
        .state()
        .iter()
        .filter_map(|g| g.metadata.uid.clone())
        .collect();
    let mut deleted = Vec::new();
    for (kind, meta) in cluster_scoped(&ctx.stores) {
        let Some((gw_namespace, gw_name, uid)) = gateway_of(&meta) else {
            continue;
        };
        // Only the shard that owns the gateway's namespace collects for it.
        if live.contains(uid)
            || namespace.is_some_and(|n| n != gw_namespace)
            || !ctx.acting.shards.acts_for(gw_namespace)
            || !gateway_gone(ctx, gw_namespace, gw_name, uid).await
        {
            continue;
        }
        if let Some(name) = delete_leftover(ctx, kind, &meta, gw_namespace, gw_name).await {
            deleted.push(format!("{kind}/{name}"));
        }
    }
    deleted
}

/// Whether a live read finds no gateway `namespace/name` with `uid`; a failed
/// read is not an answer (the sweep retries later).
async fn gateway_gone(ctx: &Context, namespace: &str, name: &str, uid: &str) -> bool {
    let gateways = Api::<KuraGateway>::namespaced(ctx.client.clone(), namespace);
    match gateways.get_opt(name).await {
        Ok(found) => found.is_none_or(|g| g.metadata.uid.as_deref() != Some(uid)),
        Err(e) => {
            tracing::warn!(%namespace, gateway = %name, error = %e, "cannot read the gateway of a leftover cluster-scoped object; the sweep retries later");
            false
        }
    }
}

/// Deletes one leftover, on the condition that it is still the object the
/// cache showed (its uid). Its name once deleted.
async fn delete_leftover(
    ctx: &Context,
    kind: ChildKind,
    meta: &ObjectMeta,
    gw_namespace: &str,
    gw_name: &str,
) -> Option<String> {
    let name = meta.name.clone()?;
    let id = ObjectId {
        kind,
        namespace: None,
        name: name.clone(),
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    let api = crate::reconcile::apply::dynamic_api(&ctx.client, &id);
    let result = ctx
        .acting
        .shards
        .run(
            gw_namespace,
            crate::reconcile::execute::writes::delete(&api, &name, &params),
        )
        .await?;
    match result {
        Ok(_) => {
            tracing::info!(%kind, %name, namespace = %gw_namespace, gateway = %gw_name, "deleted a leftover of a deleted gateway");
            Some(name)
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => None,
        Err(e) => {
            tracing::warn!(%kind, %name, error = %e, "cannot delete a leftover of a deleted gateway; the sweep retries later");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::first_user;
    use kura_core::api::{KuraGateway, KuraInstance};
    use kura_core::config::OperatorConfig;

    const CONFIG: &str = "regions:\n  r1:\n    network: cloud\n    sharedIngressClass: shared\n    domain: kura.test\n";

    fn instance(namespace: &str, name: &str, account: &str) -> Arc<KuraInstance> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"account": account, "region": "r1", "image": "k:1", "storage": {"size": "1Gi"}},
            }))
            .unwrap(),
        )
    }

    fn gateway(namespace: &str) -> KuraGateway {
        let name = kura_core::names::gateway("acme", "r1");
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"account": "acme", "region": "r1", "controller": "c", "image": "g:1",
                     "ingressClassName": kura_core::names::gateway_ingress_class(namespace, &name)},
        }))
        .unwrap()
    }

    #[test]
    fn only_instances_of_the_gateways_namespace_use_it() {
        let config = OperatorConfig::parse(CONFIG).unwrap();
        let elsewhere = [instance("b", "x", "acme")];
        assert_eq!(first_user(&gateway("a"), &elsewhere, &[], &config), None);
        let here = [instance("b", "x", "acme"), instance("a", "y", "acme")];
        assert_eq!(
            first_user(&gateway("a"), &here, &[], &config).as_deref(),
            Some("KuraInstance y")
        );
    }

    /// The first user by name, whatever the cache's order: a stable condition.
    #[test]
    fn the_user_named_is_the_first_by_name() {
        let config = OperatorConfig::parse(CONFIG).unwrap();
        let users = [instance("a", "zed", "acme"), instance("a", "amy", "acme")];
        assert_eq!(
            first_user(&gateway("a"), &users, &[], &config).as_deref(),
            Some("KuraInstance amy")
        );
    }

    #[test]
    fn an_ingress_on_the_class_the_gateway_serves_uses_it_not_one_on_the_class_its_spec_names() {
        let config = OperatorConfig::parse(CONFIG).unwrap();
        let mut gw = gateway("a");
        let served = gw.spec.ingress_class_name.clone();
        gw.spec.ingress_class_name = "kura-gw.other.x".into();
        let on_spec = [("i".to_string(), "kura-gw.other.x".to_string())];
        assert_eq!(first_user(&gw, &[], &on_spec, &config), None);
        let on_served = [("i".to_string(), served)];
        assert_eq!(
            first_user(&gw, &[], &on_served, &config).as_deref(),
            Some("Ingress i")
        );
    }
}
