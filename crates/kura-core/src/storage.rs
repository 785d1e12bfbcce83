//! Storage is fixed when the workload is created. A StatefulSet's volume claim
//! templates cannot be updated (the apiserver refuses with 422), so rendering a
//! new storage class (an edit of the region's `storageClass`, or a spec from
//! before the admission rule) into a live StatefulSet would make every later
//! apply of the instance fail, image fixes included, for good.
//!
//! The mechanism chosen: keep rendering the claim template the StatefulSet was
//! created with, and report the difference (`StorageChangePending`). Nothing is
//! recreated and no claim is touched: data is never at risk, and the change
//! reaches every instance created from then on (and one whose StatefulSet is
//! deleted on purpose; its retained claims keep their class). Recreating the
//! StatefulSet with orphaned pods, as some storage operators do, would not move
//! the existing claims to the new class either; it would only make the
//! template lie about them.

pub use crate::cached_sts::LiveClaim;
use crate::validate::ValidatedInstance;

/// What the spec and configuration ask for that the live claim template keeps otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingStorage {
    pub wanted: LiveClaim,
    pub kept: LiveClaim,
}

impl std::fmt::Display for PendingStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |c: &Option<String>| c.clone().unwrap_or_else(|| "(cluster default)".into());
        let mut parts = Vec::new();
        if self.wanted.class != self.kept.class {
            parts.push(format!(
                "storage class {} is configured, the StatefulSet keeps {}",
                show(&self.wanted.class),
                show(&self.kept.class)
            ));
        }
        if self.wanted.size != self.kept.size {
            parts.push(format!(
                "size {} is configured, the StatefulSet keeps {}",
                show(&self.wanted.size),
                show(&self.kept.size)
            ));
        }
        write!(
            f,
            "{} (volume claim templates cannot change: instances created from now on get the new storage; this one keeps its data where it is)",
            parts.join("; ")
        )
    }
}

/// Pins the instance's storage to what its live StatefulSet was created with.
/// Returns what was asked for and not given, if anything.
pub fn pin(instance: &mut ValidatedInstance, live: Option<&LiveClaim>) -> Option<PendingStorage> {
    let live = live?;
    let wanted = LiveClaim {
        class: instance.storage_class.clone(),
        size: Some(instance.storage_size.clone()),
    };
    // A template without a size cannot come from this operator: nothing to pin to.
    let kept = LiveClaim {
        class: live.class.clone(),
        size: live.size.clone().or_else(|| wanted.size.clone()),
    };
    if kept == wanted {
        return None;
    }
    instance.storage_class = kept.class.clone();
    if let Some(size) = &kept.size {
        instance.storage_size = size.clone();
    }
    Some(PendingStorage { wanted, kept })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OperatorConfig;
    use crate::validate::validate;

    fn instance(class: Option<&str>) -> ValidatedInstance {
        let config = OperatorConfig::parse(include_str!("../../../examples/config.yaml")).unwrap();
        let mut spec = serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
            "spec": {"account": "a", "region": "eu-west-1", "image": "k:1", "storage": {"size": "1Gi"}},
        });
        if let Some(c) = class {
            spec["spec"]["storage"]["class"] = c.into();
        }
        validate(&serde_json::from_value(spec).unwrap(), &config).unwrap()
    }

    fn live(class: Option<&str>, size: &str) -> LiveClaim {
        LiveClaim {
            class: class.map(String::from),
            size: Some(size.into()),
        }
    }

    #[test]
    fn no_workload_yet_renders_what_is_configured() {
        let mut v = instance(Some("fast"));
        assert_eq!(pin(&mut v, None), None);
        assert_eq!(v.storage_class.as_deref(), Some("fast"));
    }

    #[test]
    fn the_live_template_wins_and_the_difference_is_reported() {
        let mut v = instance(Some("fast"));
        let pending = pin(&mut v, Some(&live(Some("standard"), "1Gi"))).unwrap();
        assert_eq!(v.storage_class.as_deref(), Some("standard"));
        let said = pending.to_string();
        assert!(
            said.contains("storage class fast is configured, the StatefulSet keeps standard"),
            "{said}"
        );
        // A template with no class (the cluster's default class) is kept as such.
        let mut v = instance(Some("fast"));
        pin(&mut v, Some(&live(None, "1Gi"))).unwrap();
        assert_eq!(v.storage_class, None);
    }

    #[test]
    fn the_same_storage_is_nothing_to_report() {
        let mut v = instance(Some("fast"));
        assert_eq!(pin(&mut v, Some(&live(Some("fast"), "1Gi"))), None);
    }

    #[test]
    fn a_size_from_before_the_admission_rule_is_kept_too() {
        let mut v = instance(None);
        let class = v.storage_class.clone();
        let pending = pin(
            &mut v,
            Some(&LiveClaim {
                class: class.clone(),
                size: Some("5Gi".into()),
            }),
        )
        .unwrap();
        assert_eq!(v.storage_size, "5Gi");
        assert!(
            pending
                .to_string()
                .contains("size 1Gi is configured, the StatefulSet keeps 5Gi")
        );
    }
}
