//! Tests of the pure renderer, in groups: the typed output's canonical form, determinism, golden revisions, properties
//! of the revision, the founding incident, the metadata every child carries, and a
//! full snapshot (kept here so that it lives in src/render/snapshots/).

use super::*;
use crate::api::{GatewayMode, KuraInstance};
use crate::validate::validate;

mod canonical;
mod determinism;
mod gateway_rights;
mod golden;
pub(crate) mod hostile;
mod incident;
pub(crate) mod kube_rules;
mod metadata;
mod names;
mod properties;

const EXAMPLE_CONFIG: &str = include_str!("../../../../examples/config.yaml");
const EXAMPLE_INSTANCES: &str = include_str!("../../../../examples/instances.yaml");

fn config() -> OperatorConfig {
    OperatorConfig::parse(EXAMPLE_CONFIG).expect("the example configuration is valid")
}

fn parse_instances(text: &str) -> Vec<KuraInstance> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a KuraInstance"))
        .collect()
}

fn examples() -> Vec<KuraInstance> {
    parse_instances(EXAMPLE_INSTANCES)
}

fn example(name: &str) -> KuraInstance {
    examples()
        .into_iter()
        .find(|i| i.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no example instance {name}"))
}

/// A dedicated gateway as the operator sees it (namespace and uid set).
fn example_gateway() -> crate::api::KuraGateway {
    let mut gateway = crate::api::KuraGateway::new(
        "globex-eu-west-1",
        crate::api::KuraGatewaySpec {
            account: "globex".into(),
            region: "eu-west-1".into(),
            ingress_class_name: "kura-gw.kura.globex-eu-west-1".into(),
            controller: "k8s.io/ingress-nginx".into(),
            image: "registry.k8s.io/ingress-nginx/controller:v1.11.2".into(),
            host_ports: false,
            replicas: 2,
        },
    );
    gateway.metadata.namespace = Some("kura".into());
    gateway.metadata.uid = Some("u-1".into());
    gateway
}

fn render_with(instance: &KuraInstance, config: &OperatorConfig) -> Desired {
    let validated = validate(instance, config).expect("the instance is valid");
    render(&validated, config)
}

fn find<'a>(desired: &'a Desired, kind: &str) -> Vec<&'a RenderedObject> {
    desired
        .objects
        .iter()
        .filter(|o| o.id.kind.kind() == kind)
        .collect()
}

/// The richest example (dedicated gateway, alias, own resources and storage class),
/// with a uid so that the owner references show. Review a change here like a diff
/// of what every such instance gets applied.
#[test]
fn full_render_of_globex_eu_matches_the_snapshot() {
    let mut instance = example("globex-eu");
    instance.metadata.uid = Some("6f1c2a4e-0000-4000-8000-000000000001".into());
    let desired = render_with(&instance, &config());
    let objects: Vec<serde_json::Value> = desired.objects.iter().map(|o| o.body()).collect();
    let rendered = serde_json::json!({
        "revision": desired.revision,
        "podTemplateHash": desired.pod_template_hash,
        "image": desired.image,
        "objects": objects,
    });
    insta::assert_yaml_snapshot!(rendered);
}
