//! The floor client: exactly the writes an instance needs, in the operator's
//! order, with no watches and no decisions. A create is the instance, the
//! children of wave 0, those of wave 1, the applied status and the Ready
//! status; a change is what the new configuration changes (the ConfigMap,
//! then the StatefulSet and the Ingress for a new region domain), then the
//! applied and the Ready status. The children are kura-core's render of the
//! instance (its uid from the create), the operator's own renderer.

use futures::{StreamExt, TryStreamExt, future::try_join_all};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::render::{Desired, RenderedObject};
use kura_operator::reconcile::apply::dynamic_api;

use crate::BenchResult;
use crate::cluster::Bench;

/// The floor's field manager, its own in managedFields.
const FIELD_MANAGER: &str = "kura-floor";

/// An instance the floor created: what its change needs.
pub struct Created {
    instance: KuraInstance,
    desired: Desired,
}

/// Create `n` instances in `namespace_of(i)`, `in_flight` at a time.
pub async fn create(
    client: &Client,
    namespace_of: impl Fn(usize) -> String,
    n: usize,
    in_flight: usize,
    config: &OperatorConfig,
) -> BenchResult<Vec<Created>> {
    futures::stream::iter(0..n)
        .map(|i| create_one(client, namespace_of(i), i, config))
        .buffered(in_flight)
        .try_collect()
        .await
}

async fn create_one(
    client: &Client,
    namespace: String,
    i: usize,
    config: &OperatorConfig,
) -> BenchResult<Created> {
    let api: Api<KuraInstance> = Api::namespaced(client.clone(), &namespace);
    let instance: KuraInstance = serde_json::from_value(Bench::instance(&namespace, i))?;
    let instance = api.create(&PostParams::default(), &instance).await?;
    let desired = render(&instance, config)?;
    let all: Vec<&RenderedObject> = desired.objects.iter().collect();
    apply_waves(client, &all).await?;
    record(&api, &instance, &desired).await?;
    Ok(Created { instance, desired })
}

/// Apply what `config` changes of every created instance, `in_flight` at a time.
pub async fn change(
    client: &Client,
    created: &[Created],
    in_flight: usize,
    config: &OperatorConfig,
) -> BenchResult<()> {
    futures::stream::iter(created)
        .map(|c| change_one(client, c, config))
        .buffer_unordered(in_flight)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn change_one(client: &Client, c: &Created, config: &OperatorConfig) -> BenchResult<()> {
    let desired = render(&c.instance, config)?;
    let changed = changed(&c.desired, &desired);
    apply_waves(client, &changed).await?;
    let namespace = c.instance.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<KuraInstance> = Api::namespaced(client.clone(), namespace);
    record(&api, &c.instance, &desired).await
}

/// The objects of `new` whose content differs from `old`'s (by kura-core's
/// per-object hash): what a configuration change has to send.
pub fn changed<'a>(old: &Desired, new: &'a Desired) -> Vec<&'a RenderedObject> {
    new.objects
        .iter()
        .filter(|o| {
            old.objects
                .iter()
                .find(|p| p.id == o.id)
                .is_none_or(|p| p.hash != o.hash)
        })
        .collect()
}

fn render(instance: &KuraInstance, config: &OperatorConfig) -> BenchResult<Desired> {
    let valid = kura_core::validate::validate(instance, config)
        .map_err(|e| format!("a bench instance is invalid: {e}"))?;
    Ok(kura_core::render::render(&valid, config))
}

/// Server-side apply `objects` in the operator's waves, a wave's side by side.
async fn apply_waves(client: &Client, objects: &[&RenderedObject]) -> BenchResult<()> {
    for wave in 0..=1 {
        let batch = objects
            .iter()
            .filter(|o| o.id.kind.wave() == wave)
            .map(|o| async move {
                dynamic_api(client, &o.id)
                    .patch(
                        &o.id.name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&o.manifest),
                    )
                    .await
                    .map_err(|e| format!("applying {}: {e}", o.id))
            });
        try_join_all(batch).await?;
    }
    Ok(())
}

/// The applied status, then the Ready status (two merge patches, as the
/// operator's status writes are): the floor does not wait for the pods.
async fn record(api: &Api<KuraInstance>, instance: &KuraInstance, d: &Desired) -> BenchResult<()> {
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let generation = instance.metadata.generation.unwrap_or(1);
    for phase in ["Activating", "Ready"] {
        let body = json!({ "status": status(generation, &d.revision, &d.image, phase) });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    Ok(())
}

/// The status the reference clients write (the floor here, kura-peer its own
/// copy): the revision applied and the phase, with its Ready condition.
pub fn status(generation: i64, revision: &str, image: &str, phase: &str) -> Value {
    let short: String = revision.chars().take(12).collect();
    let (ready, reason, message) = if phase == "Ready" {
        ("True", "Ready", "the StatefulSet rolled out")
    } else {
        (
            "False",
            "Activating",
            "applied; waiting for the StatefulSet to roll out",
        )
    };
    json!({
        "observedGeneration": generation,
        "phase": phase,
        "desiredRevision": revision,
        "desiredRevisionShort": short,
        "appliedRevision": revision,
        "appliedRevisionShort": short,
        "appliedImage": image,
        "conditions": [{
            "type": "Ready", "status": ready, "reason": reason, "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": jiff::Timestamp::now().round(jiff::Unit::Second).unwrap_or_default().to_string(),
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::REGION;

    fn config(domain: &str) -> OperatorConfig {
        OperatorConfig::parse(&format!(
            "gateway:\n  image: g:1\n  controller: kura.dev/sim-ingress\n  replicas: 1\n\
             regions:\n  {REGION}:\n    network: host\n    sharedIngressClass: c\n    domain: {domain}\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_new_region_domain_changes_the_config_map_the_stateful_set_and_the_ingress() {
        let instance: KuraInstance =
            serde_json::from_value(Bench::instance("ns", 7)).expect("an instance");
        let old = render(&instance, &config("v1.example")).unwrap();
        let new = render(&instance, &config("v2.example")).unwrap();
        let mut kinds: Vec<&str> = changed(&old, &new)
            .iter()
            .map(|o| o.id.kind.kind())
            .collect();
        kinds.sort();
        assert_eq!(kinds, ["ConfigMap", "Ingress", "StatefulSet"]);
        assert!(changed(&new, &new).is_empty());
    }
}
