//! Names of rendered objects. They cannot collide by construction: an instance's
//! objects take its name (a DNS label, never starting with the gateway prefix) or add
//! a fixed suffix; an alias Ingress adds a dot, which no instance name has; a gateway
//! starts with the reserved prefix and ends in a hash of its whole identity. Names
//! are bounded so that every name derived from them stays valid.

use sha2::{Digest, Sha256};

/// Every dedicated gateway's name starts with it; admission and `validate` refuse it
/// in instance names, so an instance's Service can never take a gateway's name.
pub const GATEWAY_PREFIX: &str = "gw-";

/// A gateway's name is its Service's (a DNS-1035 label) and a label value.
const MAX_GATEWAY: usize = 50;

/// The `KuraGateway` of an account in a region: readable, and unique because the hash
/// covers the identity with a separator neither part can contain (`a-b`/`c` and
/// `a`/`b-c` read alike but hash apart).
pub fn gateway(account: &str, region: &str) -> String {
    let identity = short_hash(&format!("{account}/{region}"), 8);
    bounded(
        &format!("{GATEWAY_PREFIX}{account}-{region}-{identity}"),
        MAX_GATEWAY,
    )
}

/// Every dedicated gateway's IngressClass name starts with it; the configuration
/// refuses it for a region's shared class.
pub const GATEWAY_CLASS_PREFIX: &str = "kura-gw.";

/// The cluster-scoped IngressClass a dedicated gateway serves. Namespaced so that
/// two namespaces' gateways never collide; dots separate DNS labels unambiguously.
pub fn gateway_ingress_class(namespace: &str, gateway: &str) -> String {
    format!("{GATEWAY_CLASS_PREFIX}{namespace}.{gateway}")
}

/// The gateway (namespace, name) a class of [`gateway_ingress_class`] is
/// named for: a namespace is a DNS label, so its end is the first dot.
pub fn parse_gateway_ingress_class(class: &str) -> Option<(&str, &str)> {
    let (namespace, gateway) = class.strip_prefix(GATEWAY_CLASS_PREFIX)?.split_once('.')?;
    (!namespace.is_empty() && !gateway.is_empty()).then_some((namespace, gateway))
}

/// The Ingress serving one host of an instance: the primary host keeps the
/// instance's name; an alias gets `<instance>.<hash of the host>`, a DNS subdomain
/// no instance (a DNS label) can be named.
pub fn ingress(instance: &str, host_index: usize, host: &str) -> String {
    if host_index == 0 {
        instance.to_string()
    } else {
        alias_ingress(instance, host)
    }
}

pub fn alias_ingress(instance: &str, alias: &str) -> String {
    format!("{instance}.{}", short_hash(alias, 8))
}

/// `base` if it fits in `max` characters, otherwise a prefix and a hash of the
/// whole, so distinct inputs keep distinct names.
pub fn bounded(base: &str, max: usize) -> String {
    if base.len() <= max {
        return base.to_string();
    }
    let hash = short_hash(base, 8);
    let prefix = base[..max - 9].trim_end_matches('-');
    format!("{prefix}-{hash}")
}

pub fn short_hash(input: &str, len: usize) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    Sha256::digest(input.as_bytes())
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]])
        .take(len)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_gateway_names_stay_bounded_and_distinct() {
        let a = gateway(&"a".repeat(40), &"r".repeat(32));
        let b = gateway(&"a".repeat(40), &format!("{}s", "r".repeat(31)));
        assert!(a.len() <= MAX_GATEWAY && b.len() <= MAX_GATEWAY);
        assert_ne!(a, b);
        assert!(a.starts_with(GATEWAY_PREFIX) && b.starts_with(GATEWAY_PREFIX));
    }

    /// Pinned: a change renames every dedicated gateway (the rollout replaces them).
    #[test]
    fn a_gateway_name_is_readable_and_ends_in_the_hash_of_its_identity() {
        let expected = format!("gw-acme-eu-west-1-{}", short_hash("acme/eu-west-1", 8));
        assert_eq!(gateway("acme", "eu-west-1"), expected);
    }

    /// The reported collision: both read `gw-a-b-c`.
    #[test]
    fn accounts_and_regions_that_join_alike_get_distinct_gateways() {
        assert_ne!(gateway("a-b", "c"), gateway("a", "b-c"));
        assert!(gateway("a-b", "c").starts_with("gw-a-b-c-"));
    }

    #[test]
    fn a_gateway_class_name_gives_back_its_namespace_and_gateway() {
        let class = gateway_ingress_class("team-a", "gw-acme-r1-1234abcd");
        assert_eq!(
            parse_gateway_ingress_class(&class),
            Some(("team-a", "gw-acme-r1-1234abcd"))
        );
        assert_eq!(parse_gateway_ingress_class("shared"), None);
        assert_eq!(parse_gateway_ingress_class("kura-gw.team-a"), None);
        assert_eq!(parse_gateway_ingress_class("kura-gw..x"), None);
    }

    #[test]
    fn an_alias_ingress_is_named_with_a_dot_and_the_primary_keeps_the_instance_name() {
        assert_eq!(ingress("acme", 0, "acme.example.com"), "acme");
        let alias = ingress("acme", 1, "cache.acme.example");
        assert_eq!(
            alias,
            format!("acme.{}", short_hash("cache.acme.example", 8))
        );
    }
}
