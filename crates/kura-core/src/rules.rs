//! Kubernetes' own rules for the names and values the operator writes, as the
//! apiserver applies them (k8s.io/apimachinery/pkg/util/validation), plus the DNS
//! rules a host needs to resolve at all. Each returns why a value breaks the rule;
//! the caller adds the field path (and the value, where it helps).
//!
//! Also the building blocks of every validation (`validate`, the configuration's):
//! a rejected field, the errors of one object, the API's patterns, and the rules
//! of resource quantities (`resources`). Depends on the API's patterns only.

pub(crate) mod resources;

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use regex::Regex;

use crate::api::instance::{DNS_LABEL, DNS_SUBDOMAIN, DNS1035_LABEL, LABEL_VALUE, SECRET_KEY};

/// One rejected field: its path from the object root and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    pub fn from_vec(errors: Vec<FieldError>) -> Result<(), ValidationErrors> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(errors))
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

thread_local! {
    static COMPILED: RefCell<HashMap<&'static str, Regex>> = RefCell::new(HashMap::new());
}

/// Whether `value` matches one of the API's pattern constants (compiled once per thread).
pub fn matches(pattern: &'static str, value: &str) -> bool {
    COMPILED.with(|cache| {
        let mut cache = cache.borrow_mut();
        let re = cache
            .entry(pattern)
            .or_insert_with(|| Regex::new(pattern).expect("API patterns are valid regexes"));
        re.is_match(value)
    })
}

pub const MAX_LABEL: usize = 63;
pub const MAX_SUBDOMAIN: usize = 253;
/// `IngressClass.spec.controller`.
pub const MAX_CONTROLLER: usize = 250;

/// A DNS label (RFC 1123): names of StatefulSets and namespaces.
pub fn dns_label(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_LABEL || !matches(DNS_LABEL, value) {
        return Err(
            "must be a DNS label: at most 63 lower-case letters, digits and '-', \
             starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A DNS-1035 label: names of Services, which must start with a letter.
pub fn dns1035_label(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_LABEL || !matches(DNS1035_LABEL, value) {
        return Err(
            "must be a DNS-1035 label: at most 63 lower-case letters, digits and '-', \
             starting with a letter and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A DNS subdomain (RFC 1123): names of most objects, class names.
pub fn dns_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_SUBDOMAIN || !matches(DNS_SUBDOMAIN, value) {
        return Err("must be a DNS subdomain of at most 253 characters".into());
    }
    Ok(())
}

/// A host a client can reach by name, of at most `max` characters. Stricter than the
/// apiserver's Ingress host rule (a DNS subdomain that is not an IP address), which
/// lets through names no resolver looks up: labels over 63 characters, and names
/// ending in a numeric label, which URL parsers read as an IPv4 address. Wildcards,
/// which the apiserver accepts as the first label, are refused: each host names the
/// instance's endpoint and is written to the cache's configuration.
pub fn host(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.contains('*') {
        return Err("is a wildcard; wildcard hosts are not supported \
             (each host is an endpoint of its own)"
            .into());
    }
    if value.len() > max {
        let n = value.len();
        return Err(format!("is {n} characters; a host has at most {max}"));
    }
    if !matches(DNS_SUBDOMAIN, value) {
        return Err("must be a DNS subdomain: lower-case letters, digits, '-' and '.'".into());
    }
    if let Some(long) = value.split('.').find(|l| l.len() > MAX_LABEL) {
        let n = long.len();
        return Err(format!(
            "has a label of {n} characters; DNS labels have at most 63"
        ));
    }
    if ends_in_a_number(value) {
        return Err(
            "is an IP address or ends in a numeric label; a host must be a DNS name".into(),
        );
    }
    Ok(())
}

/// IPv4 addresses in every notation the apiserver parses (also with leading zeros)
/// end in a numeric label, and so do the names URL parsers take for addresses.
fn ends_in_a_number(host: &str) -> bool {
    host.rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
}

/// A label value: at most 63 characters of alphanumerics, '-', '_' and '.', starting
/// and ending alphanumeric, or empty.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL || !matches(LABEL_VALUE, value) {
        return Err(
            "is not a valid label value: at most 63 letters, digits, '-', '_' \
             and '.', starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A label or annotation key: an optional DNS subdomain prefix and '/', then a name
/// that is a non-empty label value.
pub fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = key
        .split_once('/')
        .map_or((None, key), |(p, n)| (Some(p), n));
    if let Some(prefix) = prefix {
        dns_subdomain(prefix).map_err(|e| format!("its prefix {e}"))?;
    }
    if name.is_empty() {
        return Err("has an empty name".into());
    }
    label_value(name).map_err(|e| format!("its name {e}"))
}

/// A key of a Secret or ConfigMap, which names a file when mounted.
pub fn config_map_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_SUBDOMAIN || !matches(SECRET_KEY, key) {
        return Err("must be 1 to 253 letters, digits, '-', '_' or '.'".into());
    }
    if key == "." || key.starts_with("..") {
        return Err("must not be '.' or start with '..' (a key names a file)".into());
    }
    Ok(())
}

/// `IngressClass.spec.controller`: a domain-prefixed path such as `example.com/ingress`.
pub fn domain_prefixed_path(value: &str) -> Result<(), String> {
    let why = format!(
        "must be a domain-prefixed path such as example.com/ingress, at most {MAX_CONTROLLER} characters"
    );
    if value.len() > MAX_CONTROLLER {
        return Err(format!("{why}; got {}", value.len()));
    }
    let path_chars = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    match value.split_once('/') {
        Some((domain, path))
            if dns_subdomain(domain).is_ok()
                && !path.is_empty()
                && path.chars().all(path_chars) =>
        {
            Ok(())
        }
        _ => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_follow_the_apiservers_rule_and_dns() {
        let max =
            "a".repeat(63) + "." + &"b".repeat(63) + "." + &"c".repeat(63) + "." + &"d".repeat(61);
        for ok in [
            "cache",
            "1.2.3.example.com",
            "0x7f.example.com",
            "xn--kse-qla.de",
            &max,
        ] {
            assert_eq!(host(ok, 253), Ok(()), "{ok}");
        }
        let too_long = max.clone() + "d";
        for (bad, says) in [
            ("", "empty"),
            ("1.2.3.4", "IP address"),
            ("010.001.001.001", "IP address"),
            ("cache.42", "numeric label"),
            ("*.example.com", "wildcard"),
            (&format!("{}.io", "a".repeat(64)), "at most 63"),
            (&too_long, "254 characters"),
            ("cache.example.com.", "DNS subdomain"),
            ("Cache.io", "DNS subdomain"),
            ("a..b", "DNS subdomain"),
        ] {
            let err = host(bad, 253).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn names_by_kind_follow_the_apiserver() {
        assert!(dns1035_label("acme").is_ok() && dns1035_label("1acme").is_err());
        assert!(dns_label("1acme").is_ok() && dns_label("a.b").is_err());
        assert!(dns_label(&"a".repeat(63)).is_ok() && dns_label(&"a".repeat(64)).is_err());
        assert!(dns_subdomain("a.b").is_ok() && dns_subdomain(&"a".repeat(254)).is_err());
    }

    #[test]
    fn label_values_and_keys_follow_the_apiserver() {
        for ok in ["", "a", "A_b.c-D", &"x".repeat(63)] {
            assert_eq!(label_value(ok), Ok(()), "{ok:?}");
        }
        for bad in ["-a", "a-", "a/b", &"x".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad:?}");
        }
        assert!(qualified_name("kura.dev/instance").is_ok());
        assert!(qualified_name("app.kubernetes.io/managed-by").is_ok());
        for bad in ["Kura.dev/x", "kura.dev/", "a/b/c", ""] {
            assert!(qualified_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn config_map_keys_follow_the_apiserver() {
        for ok in [".token", "a..b", "KEY_1", &"k".repeat(253)] {
            assert_eq!(config_map_key(ok), Ok(()), "{ok:?}");
        }
        for bad in ["", ".", "..", "..data", "a/b", &"k".repeat(254)] {
            assert!(config_map_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ingress_class_controllers_follow_the_apiserver() {
        assert!(domain_prefixed_path("kura.dev/sim-ingress").is_ok());
        for bad in ["nginx", "Example.com/x", "example.com/", "example.com/a b"] {
            assert!(domain_prefixed_path(bad).is_err(), "{bad:?}");
        }
        let at_most = format!("{}.io/{}", "a".repeat(63), "p".repeat(250 - 67));
        assert_eq!(at_most.len(), 250);
        assert!(domain_prefixed_path(&at_most).is_ok());
        assert!(domain_prefixed_path(&(at_most + "p")).is_err());
    }
}
