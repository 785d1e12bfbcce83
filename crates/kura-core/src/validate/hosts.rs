//! The hosts of an instance: its own or the default `<account>.<region>.<domain>`,
//! and its aliases. Each becomes an Ingress rule host and a line of the cache's
//! configuration, so each must be a name the apiserver accepts and DNS resolves,
//! and each alias needs an Ingress name of its own.

use std::collections::{BTreeMap, BTreeSet};

use super::FieldError;
use super::rules::{self, MAX_SUBDOMAIN};
use crate::api::instance::{KuraInstanceSpec, MAX_ALIASES};
use crate::names;

/// The syntax of `spec.host` and of every alias, and the number of aliases.
pub(super) fn check_own(spec: &KuraInstanceSpec, errs: &mut Vec<FieldError>) {
    if let Some(host) = &spec.host {
        host_field("spec.host", host, errs);
    }
    if spec.aliases.len() > MAX_ALIASES {
        errs.push(FieldError::new(
            "spec.aliases",
            format!("at most {MAX_ALIASES} aliases, got {}", spec.aliases.len()),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, alias) in spec.aliases.iter().enumerate() {
        host_field(&format!("spec.aliases[{i}]"), alias, errs);
        if !seen.insert(alias.as_str()) {
            errs.push(FieldError::new(
                format!("spec.aliases[{i}]"),
                format!("duplicate alias {alias:?}"),
            ));
        }
    }
}

fn host_field(path: &str, host: &str, errs: &mut Vec<FieldError>) {
    if let Err(why) = rules::host(host, MAX_SUBDOMAIN) {
        errs.push(FieldError::new(path, format!("{host:?} {why}")));
    }
}

/// The instance's host: `spec.host`, or the default from the account, the region and
/// the region's domain, which only the configuration makes known (so only here can
/// it be checked). Returns the host when it is valid.
pub(super) fn resolve(
    spec: &KuraInstanceSpec,
    domain: &str,
    errs: &mut Vec<FieldError>,
) -> Option<String> {
    if let Some(host) = &spec.host {
        return Some(host.clone());
    }
    let host = default_host(&spec.account, &spec.region, domain);
    let path = format!(
        "spec.host (defaulted from account, region and regions.{}.domain)",
        spec.region
    );
    match rules::host(&host, MAX_SUBDOMAIN) {
        Ok(()) => Some(host),
        Err(why) => {
            errs.push(FieldError::new(
                path,
                format!("{host:?} {why}; set spec.host"),
            ));
            None
        }
    }
}

/// The host of an instance without `spec.host`: `<account>.<region>.<domain>`
/// (also what `claims` counts as the instance's host).
pub fn default_host(account: &str, region: &str, domain: &str) -> String {
    format!("{account}.{region}.{domain}")
}

/// No alias may repeat the host (two Ingresses for one host), and no two aliases may
/// get the same Ingress name (a 32-bit hash of the host: unlikely, but then one would
/// silently replace the other).
pub(super) fn check_aliases_against(
    spec: &KuraInstanceSpec,
    name: &str,
    host: &str,
    errs: &mut Vec<FieldError>,
) {
    let defaulted = if spec.host.is_none() {
        " (defaulted from account, region and the region's domain)"
    } else {
        ""
    };
    let mut ingress_names: BTreeMap<String, (usize, &str)> = BTreeMap::new();
    for (i, alias) in spec.aliases.iter().enumerate() {
        let path = format!("spec.aliases[{i}]");
        if alias == host {
            errs.push(FieldError::new(
                path,
                format!("{alias:?} is already the instance's host{defaulted}"),
            ));
            continue;
        }
        let ingress = names::alias_ingress(name, alias);
        match ingress_names.get(&ingress) {
            Some((first, other)) if *other != alias => errs.push(FieldError::new(
                path,
                format!("{alias:?} gets the same Ingress name {ingress:?} as spec.aliases[{first}] ({other:?}); use another alias"),
            )),
            Some(_) => {} // a duplicate, reported with the syntax
            None => {
                ingress_names.insert(ingress, (i, alias));
            }
        }
    }
}
