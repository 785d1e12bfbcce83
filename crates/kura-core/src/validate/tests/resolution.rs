//! What valid input resolves to: the gateway per region, defaults from the region,
//! and inputs whose order carries no meaning.

use super::*;

fn accepted(edit: impl FnOnce(&mut KuraInstance)) -> ValidatedInstance {
    let mut valid = instance();
    edit(&mut valid);
    validate(&valid, &config()).expect("the edited instance must be valid")
}

/// docs/incidents.md #1: Auto in a bare-metal region must land on the shared class.
#[test]
fn auto_resolves_to_the_shared_class_in_a_host_region() {
    let v = accepted(|i| i.spec.region = "fra-metal".into());
    let shared = ResolvedGateway {
        mode: GatewayMode::Shared,
        ingress_class_name: "kura-shared".into(),
        gateway_name: None,
    };
    assert_eq!(v.gateway, shared);
}

#[test]
fn auto_resolves_to_a_dedicated_gateway_in_a_cloud_region() {
    let v = accepted(|_| {});
    let dedicated = ResolvedGateway {
        mode: GatewayMode::Dedicated,
        ingress_class_name: "kura-gw.kura-demo.gw-acme-eu-west-1-b48d34c4".into(),
        gateway_name: Some("gw-acme-eu-west-1-b48d34c4".into()),
    };
    assert_eq!(v.gateway, dedicated);
}

#[test]
fn shared_in_a_cloud_region_uses_the_regions_shared_class() {
    let v = accepted(|i| i.spec.gateway.mode = GatewayMode::Shared);
    assert_eq!(
        (v.gateway.mode, v.gateway.gateway_name),
        (GatewayMode::Shared, None)
    );
    assert_eq!(v.gateway.ingress_class_name, "kura-shared");
}

#[test]
fn resources_merge_field_by_field_with_the_region_defaults() {
    // eu-west-1 defaults: requests {cpu: 100m, memory: 256Mi}, limits {memory: 512Mi}.
    let own = resources(amounts(Some("1"), None), amounts(Some("2"), None));
    let v = accepted(|i| i.spec.resources = Some(own));
    let merged = resources(
        amounts(Some("1"), Some("256Mi")),
        amounts(Some("2"), Some("512Mi")),
    );
    assert_eq!(v.resources, merged);
}

#[test]
fn an_instance_without_resources_gets_the_region_defaults() {
    let v = accepted(|i| i.spec.resources = None);
    assert_eq!(v.resources, config().regions["eu-west-1"].default_resources);
}

#[test]
fn equal_limits_and_requests_in_different_notations_are_accepted() {
    let r = resources(
        amounts(Some("1500m"), Some("1024Mi")),
        amounts(Some("1.5"), Some("1Gi")),
    );
    let v = accepted(|i| i.spec.resources = Some(r.clone()));
    assert_eq!(v.resources, r);
}

#[test]
fn host_defaults_to_account_region_and_domain() {
    assert_eq!(accepted(|_| {}).host, "acme.eu-west-1.kura.example.com");
    let own = accepted(|i| i.spec.host = Some("cache.acme.example".into()));
    assert_eq!(own.host, "cache.acme.example");
}

#[test]
fn storage_class_defaults_to_the_regions_and_the_instances_own_wins() {
    assert_eq!(accepted(|_| {}).storage_class.as_deref(), Some("standard"));
    let own = accepted(|i| i.spec.storage.class = Some("fast".into()));
    assert_eq!(own.storage_class.as_deref(), Some("fast"));
}

#[test]
fn an_image_pinned_by_digest_only_is_accepted() {
    let digest = format!("ghcr.io/kura-dev/kura@sha256:{}", "ab".repeat(32));
    assert_eq!(accepted(|i| i.spec.image = digest.clone()).image, digest);
}

/// Aliases are a set in the CRD; only a sorted form keeps their order out of the revision.
#[test]
fn aliases_are_sorted_and_env_keeps_its_order() {
    let v = accepted(|i| {
        i.spec.aliases = vec!["b.example.com".into(), "a.example.com".into()];
        i.spec.env = vec![env("ZED", "1"), env("ALPHA", "2")];
    });
    assert_eq!(v.aliases, ["a.example.com", "b.example.com"]);
    let names: Vec<&str> = v.env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["ZED", "ALPHA"],
        "env order is meaningful ($(VAR) references)"
    );
}

#[test]
fn every_example_instance_is_valid() {
    let text = include_str!("../../../../../examples/instances.yaml");
    for doc in serde_yaml::Deserializer::from_str(text) {
        let example: KuraInstance = serde::Deserialize::deserialize(doc).unwrap();
        let name = example.metadata.name.clone();
        validate(&example, &config()).unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
}
