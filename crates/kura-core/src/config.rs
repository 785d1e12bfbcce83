//! The operator configuration: regions and gateway defaults, read from a YAML
//! file (mounted from a ConfigMap by the chart). It is an input of every
//! rendering, so changing it changes revisions.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::api::instance::{DNS_LABEL, IMAGE_REF};
use crate::api::{MaintenanceWindow, ResourcesSpec};
use crate::names::GATEWAY_CLASS_PREFIX;
use crate::rollout::{MaxUnavailable, RolloutConfig};
use crate::rules::{self, FieldError, ValidationErrors, matches, resources};

/// A domain leaves room in a host of 253 characters for an account and a region.
const MAX_DOMAIN: usize = 180;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorConfig {
    #[serde(default)]
    pub gateway: GatewayDefaults,
    /// Keyed by region name (a DNS label).
    pub regions: BTreeMap<String, RegionConfig>,
    /// How changes the operator originates (this file, a new release) roll
    /// through the fleet (`crate::rollout`).
    #[serde(default)]
    pub rollout: RolloutConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayDefaults {
    /// Image of the dedicated gateway's ingress controller: Traefik v3 (the
    /// gateway Deployment passes Traefik's flags).
    pub image: String,
    /// `IngressClass.spec.controller` of dedicated gateways: Traefik serves
    /// only classes of `traefik.io/ingress-controller`.
    pub controller: String,
    pub replicas: i32,
    /// Dedicated gateways also bind :80/:443 on their node (hostPort), where
    /// no load balancer gives their Service an address. Off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_ports: bool,
}

impl Default for GatewayDefaults {
    fn default() -> Self {
        GatewayDefaults {
            image: "docker.io/library/traefik:v3.6.12".into(),
            controller: "traefik.io/ingress-controller".into(),
            replicas: 1,
            host_ports: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Cloud networking: load balancers exist, a dedicated gateway can get an address.
    Cloud,
    /// Bare-metal host networking: only one process can bind :80/:443 on a node,
    /// so instances share the region's ingress class.
    Host,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegionConfig {
    pub network: NetworkMode,
    /// The region's shared ingress class.
    pub shared_ingress_class: String,
    /// DNS domain; an instance's default host is `<account>.<region>.<domain>`.
    pub domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    #[serde(default)]
    pub default_resources: ResourcesSpec,
    /// The maintenance window of the region's instances that set none
    /// (`crate::window`); none: changes of the operator go at any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<MaintenanceWindow>,
    /// Whether an instance becomes active only once its endpoint answers
    /// through its Ingress (`crate::endpoint`): yes unless `enabled: false`.
    /// Not rendered: out of the fleet revision.
    #[serde(default, skip_serializing_if = "EndpointCheck::is_default")]
    pub endpoint_check: EndpointCheck,
}

/// The check that an instance's endpoint answers: `GET http://<host><path>`
/// sent to `<the address its Ingress reports>:<port>`. On unless
/// `enabled: false`, because an address proves nothing (docs/incidents.md
/// #1); a region turns it off where the operator's pod cannot reach the
/// addresses its Ingresses report (some clusters cannot reach their own load
/// balancer from inside).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointCheck {
    /// Absent means on: `endpointCheck: {port: 8080}` moves the check, it
    /// does not turn it off.
    #[serde(default = "EndpointCheck::default_enabled")]
    pub enabled: bool,
    #[serde(default = "EndpointCheck::default_port")]
    pub port: u16,
    #[serde(default = "EndpointCheck::default_path")]
    pub path: String,
}

impl EndpointCheck {
    fn default_enabled() -> bool {
        true
    }
    fn default_port() -> u16 {
        80
    }
    fn default_path() -> String {
        "/up".into()
    }
    fn is_default(&self) -> bool {
        *self == EndpointCheck::default()
    }
}

impl Default for EndpointCheck {
    fn default() -> Self {
        EndpointCheck {
            enabled: Self::default_enabled(),
            port: Self::default_port(),
            path: Self::default_path(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("operator config {path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("operator config {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("operator config {path}: {errors}")]
    Invalid {
        path: String,
        errors: ValidationErrors,
    },
}

impl ConfigError {
    /// The same error, naming where the text came from (a file, a ConfigMap's key).
    pub fn at(self, path: impl Into<String>) -> ConfigError {
        let path = path.into();
        match self {
            ConfigError::Read { source, .. } => ConfigError::Read { path, source },
            ConfigError::Parse { source, .. } => ConfigError::Parse { path, source },
            ConfigError::Invalid { errors, .. } => ConfigError::Invalid { path, errors },
        }
    }
}

impl OperatorConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&text).map_err(|e| e.at(shown))
    }

    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: OperatorConfig =
            serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
                path: "<inline>".into(),
                source,
            })?;
        config.validate().map_err(|errors| ConfigError::Invalid {
            path: "<inline>".into(),
            errors,
        })?;
        Ok(config)
    }

    /// Every rule, every error with its path; an invalid configuration never starts
    /// the operator (and is never partially used). What an instance renders from it
    /// (the gateway's image and IngressClass controller, a region's domain and
    /// classes) is held to the rules the apiserver applies to the rendered objects.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = Vec::new();
        let gw = &self.gateway;
        if gw.image.len() > 255 || !matches(IMAGE_REF, &gw.image) {
            errs.push(FieldError::new(
                "gateway.image",
                format!(
                    "{:?} is not an image reference with an explicit tag or digest",
                    gw.image
                ),
            ));
        }
        if let Err(why) = rules::domain_prefixed_path(&gw.controller) {
            errs.push(FieldError::new("gateway.controller", why));
        }
        if !(1..=8).contains(&gw.replicas) {
            errs.push(FieldError::new(
                "gateway.replicas",
                "must be between 1 and 8",
            ));
        }
        if self.regions.is_empty() {
            errs.push(FieldError::new(
                "regions",
                "at least one region is required",
            ));
        }
        for (name, region) in &self.regions {
            check_region(name, region, &mut errs);
        }
        check_rollout(&self.rollout, &mut errs);
        ValidationErrors::from_vec(errs)
    }
}

fn check_rollout(rollout: &RolloutConfig, errs: &mut Vec<FieldError>) {
    match &rollout.max_unavailable {
        MaxUnavailable::Count(0) => errs.push(FieldError::new(
            "rollout.maxUnavailable",
            "must be at least 1 (0 would hold every change the operator originates for good)",
        )),
        MaxUnavailable::Percent(p) if rollout.max_unavailable.percent().is_none_or(|n| n == 0) => {
            errs.push(FieldError::new(
                "rollout.maxUnavailable",
                format!("{p:?} is not a count or a percentage from 1% to 100%"),
            ))
        }
        _ => {}
    }
    match crate::time::parse_duration(&rollout.progress_deadline) {
        Ok(d) if d >= std::time::Duration::from_secs(10) => {}
        Ok(_) => errs.push(FieldError::new(
            "rollout.progressDeadline",
            "must be at least 10s (pods need time to become Ready)",
        )),
        Err(why) => errs.push(FieldError::new("rollout.progressDeadline", why)),
    }
    if let Some(label) = &rollout.canary_label
        && let Err(why) = rules::qualified_name(label)
    {
        errs.push(FieldError::new("rollout.canaryLabel", why));
    }
    if let Some(d) = &rollout.window_deadline {
        if let Some(at) = &d.at
            && let Err(why) = crate::window::deadline_at(at)
        {
            errs.push(FieldError::new("rollout.windowDeadline.at", why));
        }
        if let Some(after) = &d.after
            && let Err(why) = crate::time::parse_duration(after)
        {
            errs.push(FieldError::new("rollout.windowDeadline.after", why));
        }
    }
}

fn check_region(name: &str, region: &RegionConfig, errs: &mut Vec<FieldError>) {
    let at = |field: &str| format!("regions.{name}.{field}");
    if name.len() > 32 || !matches(DNS_LABEL, name) {
        errs.push(FieldError::new(
            format!("regions.{name}"),
            "region name must be a DNS label of at most 32 characters",
        ));
    }
    let class = &region.shared_ingress_class;
    if let Err(why) = rules::dns_subdomain(class) {
        errs.push(FieldError::new(at("sharedIngressClass"), why));
    } else if class.starts_with(GATEWAY_CLASS_PREFIX) {
        errs.push(FieldError::new(
            at("sharedIngressClass"),
            format!("{class:?}: the prefix {GATEWAY_CLASS_PREFIX} is reserved for the classes of dedicated gateways"),
        ));
    }
    // The end of every default host `<account>.<region>.<domain>`.
    if let Err(why) = rules::host(&region.domain, MAX_DOMAIN) {
        errs.push(FieldError::new(at("domain"), why));
    }
    if let Some(class) = &region.storage_class
        && let Err(why) = rules::dns_subdomain(class)
    {
        errs.push(FieldError::new(at("storageClass"), why));
    }
    let check = &region.endpoint_check;
    if check.port == 0 {
        errs.push(FieldError::new(
            at("endpointCheck.port"),
            "must be 1 to 65535",
        ));
    }
    if !check.path.starts_with('/')
        || check
            .path
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        errs.push(FieldError::new(
            at("endpointCheck.path"),
            format!(
                "{:?}: an absolute path (starting with /), without spaces",
                check.path
            ),
        ));
    }
    let defaults = at("defaultResources");
    resources::check_syntax(&defaults, &region.default_resources, errs);
    let own = resources::Source {
        resources: &region.default_resources,
        path: &defaults,
    };
    resources::check_limits_cover_requests(own, None, errs);
    if let Some(w) = &region.maintenance_window
        && let Err((field, why)) = crate::window::Window::parse(w)
    {
        errs.push(FieldError::new(
            at(&format!("maintenanceWindow.{field}")),
            why,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const EXAMPLE: &str = include_str!("../../../examples/config.yaml");

    #[test]
    fn example_config_is_valid() {
        let config = OperatorConfig::parse(EXAMPLE).unwrap();
        assert!(
            config
                .regions
                .values()
                .any(|r| r.network == NetworkMode::Cloud)
        );
        assert!(
            config
                .regions
                .values()
                .any(|r| r.network == NetworkMode::Host)
        );
    }

    #[test]
    fn unknown_field_is_rejected_with_its_name() {
        let err = OperatorConfig::parse("regions: {}\nregoins: {}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("regoins"), "{err}");
    }
}
