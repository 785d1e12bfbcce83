//! `prune`: after a successful apply, delete what the previous inventory held and
//! the new revision does not. Only objects labelled as this instance's are
//! candidates; a KuraGateway goes only when no instance's desired state still
//! references it; PersistentVolumeClaims are never touched.

use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};

use super::apply::dynamic_api;
use super::stores::Stores;
use crate::api::KuraInstance;
use crate::config::OperatorConfig;
use crate::keys::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::render::ObjectId;
use crate::validate::resolve_gateway;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub deleted: Vec<String>,
    /// Stale objects left in place, with why (not ours, still referenced).
    pub kept: Vec<String>,
}

/// Whether any instance other than `except` desires the gateway `gateway_name`.
pub fn gateway_in_use(
    gateway_name: &str,
    namespace: &str,
    instances: &[KuraInstance],
    except: &str,
    config: &OperatorConfig,
) -> bool {
    instances.iter().any(|i| {
        let name = i.metadata.name.as_deref().unwrap_or_default();
        if name == except || i.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let Some(region) = config.regions.get(&i.spec.region) else {
            return false;
        };
        resolve_gateway(
            i.spec.gateway.mode,
            &i.spec.account,
            &i.spec.region,
            region,
            namespace,
        )
        .ok()
        .and_then(|g| g.gateway_name)
        .is_some_and(|g| g == gateway_name)
    })
}

pub async fn prune(
    client: &Client,
    stores: &Stores,
    instance_name: &str,
    stale: &[ObjectId],
    config: &OperatorConfig,
) -> Result<PruneOutcome, kube::Error> {
    let mut outcome = PruneOutcome::default();
    for id in stale {
        if id.kind == "PersistentVolumeClaim" {
            outcome
                .kept
                .push(format!("{id}: data is never deleted by a rollout"));
            continue;
        }
        let Some(meta) = stores.meta(id) else {
            continue;
        };
        let labels = meta.labels.clone().unwrap_or_default();
        if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
            outcome.kept.push(format!(
                "{id}: not labelled {LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
            ));
            continue;
        }
        if id.kind == "KuraGateway" {
            // A live read, not the cache: a deletion must not act on a stale view.
            let ns = id.namespace.clone().unwrap_or_default();
            let instances = Api::<KuraInstance>::namespaced(client.clone(), &ns)
                .list(&ListParams::default())
                .await?;
            if gateway_in_use(&id.name, &ns, &instances.items, instance_name, config) {
                outcome
                    .kept
                    .push(format!("{id}: still used by another instance"));
                continue;
            }
        } else if labels.get(LABEL_INSTANCE).map(String::as_str) != Some(instance_name) {
            outcome.kept.push(format!(
                "{id}: not labelled {LABEL_INSTANCE}={instance_name}"
            ));
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: meta.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match dynamic_api(client, id).delete(&id.name, &params).await {
            Ok(_) => outcome.deleted.push(id.to_string()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(outcome)
}
