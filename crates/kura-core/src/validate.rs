//! `validate`: every failure path of turning a `KuraInstance` and the operator
//! configuration into render inputs. `render` itself cannot fail.
//!
//! The CRD schema rejects most bad input at admission; these checks repeat the
//! schema's rules (objects can predate a CRD upgrade) and add the ones that need
//! the configuration (the region must exist; a dedicated gateway cannot serve a
//! host-network region; the default host must fit). Passing them means the
//! apiserver accepts every rendered object: each name, host, label value, key and
//! quantity is held to Kubernetes' own rule (`rules`), and where the apiserver
//! accepts what could never work (a DNS label of 64 characters, a NUL in the
//! environment) to the stricter one.

mod env;
mod hosts;

pub(crate) use crate::rules::resources;
pub use crate::rules::{self, FieldError, ValidationErrors, matches};
pub use hosts::default_host;

use crate::api::instance::*;
use crate::config::{NetworkMode, OperatorConfig, RegionConfig};
use crate::names;

/// The gateway an instance resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedGateway {
    /// `Dedicated` or `Shared`, never `Auto`.
    pub mode: GatewayMode,
    pub ingress_class_name: String,
    /// The `KuraGateway` name, for a dedicated gateway.
    pub gateway_name: Option<String>,
}

/// Everything `render` needs, checked. Constructed only by [`validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedInstance {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub account: String,
    pub region: String,
    pub image: String,
    pub replicas: i32,
    pub host: String,
    /// Sorted: aliases are a set, so their order never changes the rendering.
    pub aliases: Vec<String>,
    pub storage_size: String,
    pub storage_class: Option<String>,
    pub resources: ResourcesSpec,
    pub env: Vec<EnvVar>,
    pub gateway: ResolvedGateway,
}

/// Resolve `gateway.mode` for a region: `Auto` is `Shared` in host-network regions
/// (a dedicated gateway can never bind :80/:443 on a single bare-metal node) and
/// `Dedicated` in cloud regions.
pub fn resolve_gateway(
    mode: GatewayMode,
    account: &str,
    region_name: &str,
    region: &RegionConfig,
    namespace: &str,
) -> Result<ResolvedGateway, FieldError> {
    let effective = match (mode, region.network) {
        (GatewayMode::Auto, NetworkMode::Host) | (GatewayMode::Shared, _) => GatewayMode::Shared,
        (GatewayMode::Auto, NetworkMode::Cloud) | (GatewayMode::Dedicated, NetworkMode::Cloud) => {
            GatewayMode::Dedicated
        }
        (GatewayMode::Dedicated, NetworkMode::Host) => {
            return Err(FieldError::new(
                "spec.gateway.mode",
                format!(
                    "Dedicated is not possible in region {region_name:?}: it uses host networking, where a dedicated gateway can never bind :80/:443; use Auto or Shared"
                ),
            ));
        }
    };
    Ok(match effective {
        GatewayMode::Shared => ResolvedGateway {
            mode: GatewayMode::Shared,
            ingress_class_name: region.shared_ingress_class.clone(),
            gateway_name: None,
        },
        _ => {
            let gateway = names::gateway(account, region_name);
            ResolvedGateway {
                mode: GatewayMode::Dedicated,
                ingress_class_name: names::gateway_ingress_class(namespace, &gateway),
                gateway_name: Some(gateway),
            }
        }
    })
}

pub fn validate(
    instance: &KuraInstance,
    config: &OperatorConfig,
) -> Result<ValidatedInstance, ValidationErrors> {
    let mut errs = Vec::new();
    let spec = &instance.spec;
    let name = instance.metadata.name.clone().unwrap_or_default();
    let namespace = instance
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());

    check_name(&name, &mut errs);
    let before = errs.len();
    label_field("spec.account", &spec.account, MAX_ACCOUNT, &mut errs);
    label_field("spec.region", &spec.region, MAX_REGION, &mut errs);
    let account_and_region_valid = errs.len() == before;
    check_own_fields(spec, &mut errs);
    let region = region_of(spec, config, &mut errs);
    let gateway = region.and_then(|r| {
        resolve_gateway(
            spec.gateway.mode,
            &spec.account,
            &spec.region,
            r,
            &namespace,
        )
        .map_err(|e| errs.push(e))
        .ok()
    });
    // What needs the region: the default host, and the region's default resources.
    let host = region
        .filter(|_| account_and_region_valid)
        .and_then(|r| hosts::resolve(spec, &r.domain, &mut errs));
    if let Some(host) = &host {
        hosts::check_aliases_against(spec, &name, host, &mut errs);
    }
    check_resources_within_region(spec, region, &mut errs);

    ValidationErrors::from_vec(errs)?;
    let (Some(region), Some(gateway), Some(host)) = (region, gateway, host) else {
        unreachable!("a missing region, gateway or host is always reported as an error above")
    };
    Ok(ValidatedInstance {
        name,
        namespace,
        uid: instance.metadata.uid.clone().unwrap_or_default(),
        account: spec.account.clone(),
        region: spec.region.clone(),
        image: spec.image.clone(),
        replicas: spec.replicas,
        host,
        aliases: sorted(&spec.aliases),
        storage_size: spec.storage.size.clone(),
        storage_class: spec
            .storage
            .class
            .clone()
            .or_else(|| region.storage_class.clone()),
        resources: resources::merge(spec.resources.as_ref(), &region.default_resources),
        env: spec.env.clone(),
        gateway,
    })
}

/// The fields that need nothing but themselves: image, replicas, own hosts,
/// storage, the resources' syntax, env.
fn check_own_fields(spec: &KuraInstanceSpec, errs: &mut Vec<FieldError>) {
    if spec.image.len() > 255 || !matches(IMAGE_REF, &spec.image) {
        errs.push(FieldError::new(
            "spec.image",
            format!(
                "{:?} is not an image reference with an explicit tag or digest",
                spec.image
            ),
        ));
    }
    if !(1..=MAX_REPLICAS).contains(&spec.replicas) {
        errs.push(FieldError::new(
            "spec.replicas",
            format!(
                "must be between 1 and {MAX_REPLICAS}, got {}",
                spec.replicas
            ),
        ));
    }
    hosts::check_own(spec, errs);
    if !matches(STORAGE_SIZE, &spec.storage.size) {
        errs.push(FieldError::new(
            "spec.storage.size",
            format!(
                "{:?} is not a size such as 10Gi (Mi, Gi or Ti)",
                spec.storage.size
            ),
        ));
    }
    if let Some(class) = &spec.storage.class {
        subdomain_field("spec.storage.class", class, errs);
    }
    if let Some(resources) = &spec.resources {
        resources::check_syntax("spec.resources", resources, errs);
    }
    env::check(&spec.env, errs);
    check_when(spec, errs);
}

/// The instance's region in the configuration, or an error naming the known ones.
fn region_of<'c>(
    spec: &KuraInstanceSpec,
    config: &'c OperatorConfig,
    errs: &mut Vec<FieldError>,
) -> Option<&'c RegionConfig> {
    let region = config.regions.get(&spec.region);
    if region.is_none() && !spec.region.is_empty() {
        let known: Vec<&str> = config.regions.keys().map(String::as_str).collect();
        errs.push(FieldError::new(
            "spec.region",
            format!(
                "region {:?} is not in the operator configuration (known: {})",
                spec.region,
                known.join(", ")
            ),
        ));
    }
    region
}

/// The instance's own resources, over the region's defaults: every limit
/// covers its request.
fn check_resources_within_region(
    spec: &KuraInstanceSpec,
    region: Option<&RegionConfig>,
    errs: &mut Vec<FieldError>,
) {
    let Some(own) = &spec.resources else {
        return;
    };
    let defaults_path = format!("regions.{}.defaultResources", spec.region);
    let defaults = region.map(|r| resources::Source {
        resources: &r.default_resources,
        path: &defaults_path,
    });
    let own = resources::Source {
        resources: own,
        path: "spec.resources",
    };
    resources::check_limits_cover_requests(own, defaults, errs);
}

/// The instance's name is its Service's (a DNS-1035 label), and its children append
/// suffixes; the gateway prefix is reserved, so that no instance's object can ever
/// take a dedicated gateway's name. The CRD refuses the same at admission, but an
/// instance can predate that rule.
fn check_name(name: &str, errs: &mut Vec<FieldError>) {
    let message = if rules::dns1035_label(name).is_err() {
        format!(
            "{name:?} must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter (it names the instance's Service)"
        )
    } else if name.len() > MAX_INSTANCE_NAME {
        format!(
            "must be at most {MAX_INSTANCE_NAME} characters (children append suffixes), got {}",
            name.len()
        )
    } else if name.starts_with(names::GATEWAY_PREFIX) {
        format!(
            "{name:?}: the prefix {} is reserved for the names of dedicated gateways",
            names::GATEWAY_PREFIX
        )
    } else {
        return;
    };
    errs.push(FieldError::new("metadata.name", message));
}

/// The window and the pause's end: the CRD's rules again (objects can
/// predate them), so that what admission takes is valid here and what it
/// refuses is not; and what the CRD cannot check (a time zone must exist).
fn check_when(spec: &KuraInstanceSpec, errs: &mut Vec<FieldError>) {
    if let Some(w) = &spec.maintenance_window
        && let Err((field, why)) = crate::window::Window::admitted(w)
    {
        errs.push(FieldError::new(
            format!("spec.maintenanceWindow.{field}"),
            why,
        ));
    }
    if let Some(until) = spec.pause.as_ref().and_then(|p| p.until.as_ref())
        && let Err(why) = pause_end(until)
    {
        errs.push(FieldError::new("spec.pause.until", why));
    }
}

/// `spec.pause.until` as the CRD takes it: an RFC 3339 time after
/// 2000-01-01T00:00:00Z (its CEL rule). One past jiff's range (the year 9999)
/// is a pause for ever.
fn pause_end(until: &str) -> Result<(), String> {
    let floor = jiff::Timestamp::from_second(946_684_800).expect("2000-01-01 is a time");
    match crate::time::rfc3339(until)? {
        at if at > floor => Ok(()),
        _ => Err(format!(
            "{until:?} must be after 2000-01-01T00:00:00Z, such as 2026-12-24T18:00:00Z"
        )),
    }
}

/// Aliases are a set (`x-kubernetes-list-type: set`): their order carries no
/// meaning, so it must not reach the rendered ConfigMap and change the revision.
fn sorted(aliases: &[String]) -> Vec<String> {
    let mut aliases = aliases.to_vec();
    aliases.sort_unstable();
    aliases
}

fn label_field(path: &str, value: &str, max: usize, errs: &mut Vec<FieldError>) {
    if value.is_empty() || value.len() > max || !matches(DNS_LABEL, value) {
        errs.push(FieldError::new(path, format!("{value:?} must be a DNS label (lower-case letters, digits, '-') of 1 to {max} characters")));
    }
}

fn subdomain_field(path: &str, value: &str, errs: &mut Vec<FieldError>) {
    if let Err(why) = rules::dns_subdomain(value) {
        errs.push(FieldError::new(path, format!("{value:?} {why}")));
    }
}

#[cfg(test)]
mod tests;
