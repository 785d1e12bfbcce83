//! A configuration the operator accepted (at start, or from its watch), with
//! what every pass derives from it computed once, when it is accepted: its
//! fleet revision. Passes read it from the configuration watch; nothing
//! recomputes it per pass, and a parsed `OperatorConfig` carries no cache
//! that a later edit of it could leave stale.

use std::ops::Deref;

use crate::config::OperatorConfig;

#[derive(Clone, Debug, PartialEq)]
pub struct Accepted {
    config: OperatorConfig,
    fleet_revision: String,
}

impl Accepted {
    pub fn new(config: OperatorConfig) -> Accepted {
        let fleet_revision = fleet_revision(&config);
        Accepted {
            config,
            fleet_revision,
        }
    }

    /// Identifies what the operator originates with this configuration and
    /// this release: the instances of one operator-originated rollout share
    /// it (`crate::rollout`).
    pub fn fleet_revision(&self) -> &str {
        &self.fleet_revision
    }

    pub fn config(&self) -> &OperatorConfig {
        &self.config
    }
}

/// Identifies what the operator would originate with `config` and this
/// release (kept by [`Accepted`], computed once when a configuration is
/// accepted). The `rollout` section itself renders nothing,
/// so it is left out: tuning the budget is not a new rollout.
fn fleet_revision(config: &crate::config::OperatorConfig) -> String {
    let mut value = serde_json::to_value(config).expect("the configuration serialises");
    if let Some(map) = value.as_object_mut() {
        map.remove("rollout");
        // What renders nothing is no new rollout: when a change may go
        // (the maintenance window) and the endpoint check of each region.
        if let Some(regions) = map.get_mut("regions").and_then(|r| r.as_object_mut()) {
            for region in regions.values_mut().filter_map(|r| r.as_object_mut()) {
                region.remove("maintenanceWindow");
                region.remove("endpointCheck");
            }
        }
    }
    let mut bytes = crate::render::canonical_json(&value);
    bytes.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
    crate::render::hash::hex_sha256(&bytes)[..16].to_string()
}

/// An accepted configuration is read as the configuration it is.
impl Deref for Accepted {
    type Target = OperatorConfig;

    fn deref(&self) -> &OperatorConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = include_str!("../../../examples/config.yaml");

    /// The endpoint check renders nothing: turning it off (or moving it) is
    /// no fleet rollout.
    #[test]
    fn the_endpoint_check_is_not_in_the_fleet_revision() {
        let before = OperatorConfig::parse(CONFIG).unwrap();
        for check in ["{enabled: false}", "{port: 8080, path: /health}"] {
            let mut tree: serde_yaml::Value = serde_yaml::from_str(CONFIG).unwrap();
            tree["regions"]["eu-west-1"]["endpointCheck"] = serde_yaml::from_str(check).unwrap();
            let after = OperatorConfig::parse(&serde_yaml::to_string(&tree).unwrap()).unwrap();
            assert_ne!(before, after, "{check} is read");
            assert_eq!(
                Accepted::new(before.clone()).fleet_revision(),
                Accepted::new(after).fleet_revision(),
                "{check}"
            );
        }
    }

    #[test]
    fn the_fleet_revision_is_computed_when_accepted_and_ignores_the_rollout_section() {
        let config = OperatorConfig::parse(CONFIG).unwrap();
        let accepted = Accepted::new(config.clone());
        assert_eq!(accepted.fleet_revision().len(), 16);
        let mut tuned = config.clone();
        tuned.rollout.canary_label = Some("canary".into());
        assert_eq!(
            Accepted::new(tuned).fleet_revision(),
            accepted.fleet_revision(),
            "tuning the budget is no new rollout"
        );
        let mut changed = config;
        changed.gateway.image.push_str("-next");
        assert_ne!(
            Accepted::new(changed).fleet_revision(),
            accepted.fleet_revision()
        );
    }
}
