//! Pure, infallible, deterministic rendering: `(ValidatedInstance, OperatorConfig)`
//! → the full set of an instance's children, their hashes and the revision. No
//! clock, no environment, no client; maps are sorted (`BTreeMap`/`serde_json::Map`).

mod children;
pub mod gateway;
pub mod hash;
pub mod object;

pub use hash::canonical_json;
pub use object::{Desired, ObjectId, RenderedObject};

use serde_json::Value;

use crate::config::OperatorConfig;
use crate::keys::*;
use crate::validate::ValidatedInstance;

/// Render every child of an instance and stamp the revision into each of them.
pub fn render(instance: &ValidatedInstance, config: &OperatorConfig) -> Desired {
    let config_map = children::config_map(instance);
    let mut template = children::pod_template(instance);
    let pod_template_hash = hash::pod_template_hash(&template, &config_map);
    children::annotate_pod_template(&mut template, &pod_template_hash);
    let mut objects = vec![
        children::service_account(instance),
        config_map,
        children::stateful_set(instance, template),
        children::service(instance),
        children::pod_disruption_budget(instance),
        children::network_policy(instance),
    ];
    objects.extend(children::ingresses(instance));
    if let Some(gateway) = children::gateway(instance, config) {
        objects.push(gateway);
    }
    Desired::from_objects(objects, pod_template_hash, instance.image.clone())
}

/// Labels every child of an instance carries.
pub(crate) fn instance_labels(instance: &ValidatedInstance) -> Value {
    serde_json::json!({
        LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_NAME: "kura",
        LABEL_INSTANCE: instance.name,
        LABEL_ACCOUNT: instance.account,
        LABEL_REGION: instance.region,
    })
}

#[cfg(test)]
mod tests;
