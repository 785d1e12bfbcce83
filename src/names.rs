//! Names of rendered objects: bounded so that every derived name stays a valid
//! DNS label, and stable so that a rename never happens behind the user's back.

use sha2::{Digest, Sha256};

/// The `KuraGateway` of an account in a region.
pub fn gateway(account: &str, region: &str) -> String {
    bounded(&format!("gw-{account}-{region}"), 50)
}

/// The cluster-scoped IngressClass a dedicated gateway serves. Namespaced so that
/// two namespaces' gateways never collide; dots separate DNS labels unambiguously.
pub fn gateway_ingress_class(namespace: &str, gateway: &str) -> String {
    format!("kura-gw.{namespace}.{gateway}")
}

/// The Ingress serving one host of an instance: the primary host keeps the
/// instance's name, each alias gets a stable suffix derived from the host.
pub fn ingress(instance: &str, host_index: usize, host: &str) -> String {
    if host_index == 0 {
        instance.to_string()
    } else {
        format!("{instance}-{}", short_hash(host, 8))
    }
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
        assert!(a.len() <= 50 && b.len() <= 50);
        assert_ne!(a, b);
        assert_eq!(gateway("acme", "eu-west-1"), "gw-acme-eu-west-1");
    }
}
