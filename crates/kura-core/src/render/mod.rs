//! Pure, infallible, deterministic rendering: `(ValidatedInstance, OperatorConfig)`
//! → the full set of an instance's children, their hashes and the revision. No
//! clock, no environment, no client; the output is typed, in canonical key order (see `manifest`).

mod children;
pub mod gateway;
pub mod hash;
pub mod kinds;
pub mod manifest;
pub mod object;
mod writer;

pub use hash::canonical_json;
pub use manifest::Manifest;
pub use object::{Desired, ObjectId, RenderedObject};

use crate::config::OperatorConfig;
use crate::keys::*;
use crate::validate::ValidatedInstance;

/// Render every child of an instance and stamp the revision into each of them.
pub fn render(instance: &ValidatedInstance, config: &OperatorConfig) -> Desired {
    let data = children::config_map_data(instance);
    let mut template = children::pod_template(instance);
    let pod_template_hash = hash::pod_template_hash(&template, &data);
    children::annotate_pod_template(&mut template, &pod_template_hash);
    let mut objects = vec![
        children::service_account(instance),
        children::config_map(instance, data),
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
pub(crate) fn instance_labels(instance: &ValidatedInstance) -> manifest::Labels {
    manifest::Labels::from([
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_string()),
        (LABEL_NAME, "kura".to_string()),
        (LABEL_INSTANCE, instance.name.clone()),
        (LABEL_ACCOUNT, instance.account.clone()),
        (LABEL_REGION, instance.region.clone()),
    ])
}

/// The first object whose typed serialisation (by the hashing writer or by
/// serde_json) differs from the definition, `canonical_json` of its value.
#[cfg(test)]
pub(crate) fn non_canonical_object(desired: &Desired) -> Option<String> {
    desired.objects.iter().find_map(|o| {
        let mut typed = Vec::new();
        hash::write_typed(&o.manifest, &mut typed);
        let definition = canonical_json(&o.body());
        let by_serde_json = serde_json::to_vec(&o.manifest).expect("a manifest serialises");
        (typed != definition || by_serde_json != definition).then(|| {
            format!(
                "{}:\n  written:    {}\n  serde_json: {}\n  canonical:  {}",
                o.id,
                String::from_utf8_lossy(&typed),
                String::from_utf8_lossy(&by_serde_json),
                String::from_utf8_lossy(&definition)
            )
        })
    })
}

#[cfg(any(test, feature = "fixtures"))]
pub mod hostile;
#[cfg(test)]
pub(crate) mod tests;
