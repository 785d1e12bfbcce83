//! Properties of the revision over generated inputs: any change of a rendered input
//! changes it (so no change can slip through as in docs/incidents.md #1), and the pod
//! template hash moves only with what the pods see (docs/incidents.md #4).

use proptest::prelude::*;

use super::*;
use crate::api::{EnvVar, ResourceAmounts, ResourcesSpec};
use crate::config::NetworkMode;

/// An instance of the examples' shape with generated fields, valid by construction.
fn instances() -> impl Strategy<Value = KuraInstance> {
    let spec = (
        (
            "[a-z0-9]{1,8}",
            1..=16i32,
            proptest::option::of("[a-z]{1,8}\\.example\\.com"),
        ),
        (
            proptest::collection::btree_set("[a-z]{1,8}\\.alias\\.example", 0..4),
            1..1000u32,
        ),
        (
            proptest::option::of("[a-z]{1,8}"),
            proptest::option::of(resources()),
        ),
        (
            envs(),
            prop_oneof![
                Just(GatewayMode::Auto),
                Just(GatewayMode::Dedicated),
                Just(GatewayMode::Shared)
            ],
        ),
        any::<bool>(),
    );
    spec.prop_map(
        |((tag, replicas, host), (aliases, size), (class, resources), (env, mode), metal)| {
            let mut instance = example("acme-eu");
            let s = &mut instance.spec;
            (s.image, s.replicas, s.host) =
                (format!("ghcr.io/kura-dev/kura:{tag}"), replicas, host);
            (s.aliases, s.storage.size) = (aliases.into_iter().collect(), format!("{size}Gi"));
            (s.storage.class, s.resources, s.env) = (class, resources, env);
            // Dedicated is invalid in the host region; Auto stands in for it there.
            s.region = if metal { "fra-metal" } else { "eu-west-1" }.into();
            s.gateway.mode = if metal && mode == GatewayMode::Dedicated {
                GatewayMode::Auto
            } else {
                mode
            };
            instance
        },
    )
}

/// Requests and limits with limits >= requests, as validation demands.
fn resources() -> impl Strategy<Value = ResourcesSpec> {
    (1..4000u32, 0..4000u32, 1..8192u32, 0..8192u32).prop_map(|(cpu, more_cpu, mem, more_mem)| {
        let amounts = |cpu: u32, mem: u32| ResourceAmounts {
            cpu: Some(format!("{cpu}m")),
            memory: Some(format!("{mem}Mi")),
        };
        ResourcesSpec {
            requests: Some(amounts(cpu, mem)),
            limits: Some(amounts(cpu + more_cpu, mem + more_mem)),
        }
    })
}

/// Unique names that never start with the reserved `KURA_`.
fn envs() -> impl Strategy<Value = Vec<EnvVar>> {
    proptest::collection::btree_map("[A-J][A-Z0-9_]{0,6}", "[a-z0-9]{0,8}", 0..4).prop_map(|vars| {
        vars.into_iter()
            .map(|(name, value)| EnvVar {
                name,
                value: Some(value),
                secret_key_ref: None,
            })
            .collect()
    })
}

/// One rendered input, changed to a new value. `prepare` first makes the input
/// matter for the instance (a region's domain matters only without an own host).
#[derive(Clone, Debug)]
enum Change {
    Image(String),
    Replicas(i32),
    Host(Option<String>),
    Aliases(Vec<String>),
    StorageSize(String),
    StorageClass(Option<String>),
    Resources(Option<ResourcesSpec>),
    Env(Vec<EnvVar>),
    /// Flip the resolved mode between Shared and this (Auto or Dedicated) in a cloud region.
    GatewayMode(GatewayMode),
    RegionNetwork,
    RegionSharedClass(String),
    RegionDomain(String),
    RegionStorageClass(Option<String>),
    RegionDefaultCpu(String),
    GatewayImage(String),
    GatewayController(String),
    GatewayReplicas(i32),
}

fn changes() -> impl Strategy<Value = Change> {
    prop_oneof![
        "[a-z0-9]{1,8}".prop_map(|t| Change::Image(format!("ghcr.io/kura-dev/kura:{t}"))),
        (1..=16i32).prop_map(Change::Replicas),
        proptest::option::of("[a-z]{1,8}\\.example\\.com").prop_map(Change::Host),
        proptest::collection::btree_set("[a-z]{1,8}\\.alias\\.example", 0..4)
            .prop_map(|a| Change::Aliases(a.into_iter().collect())),
        (1..1000u32).prop_map(|n| Change::StorageSize(format!("{n}Gi"))),
        proptest::option::of("[a-z]{1,8}").prop_map(Change::StorageClass),
        proptest::option::of(resources()).prop_map(Change::Resources),
        envs().prop_map(Change::Env),
        prop_oneof![Just(GatewayMode::Auto), Just(GatewayMode::Dedicated)]
            .prop_map(Change::GatewayMode),
        Just(Change::RegionNetwork),
        "[a-z][a-z0-9-]{0,10}[a-z0-9]".prop_map(Change::RegionSharedClass),
        "[a-z]{1,8}\\.example".prop_map(Change::RegionDomain),
        proptest::option::of("[a-z]{1,8}").prop_map(Change::RegionStorageClass),
        (1..4000u32).prop_map(|m| Change::RegionDefaultCpu(format!("{m}m"))),
        "[a-z]{1,8}".prop_map(|n| Change::GatewayImage(format!("registry.example/{n}:v1"))),
        "[a-z]{1,8}".prop_map(|n| Change::GatewayController(format!("example.com/{n}"))),
        (1..=8i32).prop_map(Change::GatewayReplicas),
    ]
}

impl Change {
    fn prepare(&self, instance: &mut KuraInstance) {
        let spec = &mut instance.spec;
        match self {
            Change::GatewayMode(_) => spec.region = "eu-west-1".into(),
            Change::RegionNetwork => spec.gateway.mode = GatewayMode::Auto,
            Change::RegionSharedClass(_) => spec.gateway.mode = GatewayMode::Shared,
            Change::RegionDomain(_) => spec.host = None,
            Change::RegionStorageClass(_) => spec.storage.class = None,
            Change::RegionDefaultCpu(_) => spec.resources = None,
            Change::GatewayImage(_) | Change::GatewayController(_) | Change::GatewayReplicas(_) => {
                spec.region = "eu-west-1".into();
                spec.gateway.mode = GatewayMode::Dedicated;
            }
            _ => {}
        }
    }

    fn apply(&self, instance: &mut KuraInstance, config: &mut OperatorConfig) {
        let spec = &mut instance.spec;
        let region = config.regions.get_mut(&spec.region).unwrap();
        match self.clone() {
            Change::Image(v) => spec.image = v,
            Change::Replicas(v) => spec.replicas = v,
            Change::Host(v) => spec.host = v,
            Change::Aliases(v) => spec.aliases = v,
            Change::StorageSize(v) => spec.storage.size = v,
            Change::StorageClass(v) => spec.storage.class = v,
            Change::Resources(v) => spec.resources = v,
            Change::Env(v) => spec.env = v,
            Change::GatewayMode(v) if spec.gateway.mode == GatewayMode::Shared => {
                spec.gateway.mode = v
            }
            Change::GatewayMode(_) => spec.gateway.mode = GatewayMode::Shared,
            Change::RegionNetwork if region.network == NetworkMode::Host => {
                region.network = NetworkMode::Cloud
            }
            Change::RegionNetwork => region.network = NetworkMode::Host,
            Change::RegionSharedClass(v) => region.shared_ingress_class = v,
            Change::RegionDomain(v) => region.domain = v,
            Change::RegionStorageClass(v) => region.storage_class = v,
            Change::RegionDefaultCpu(v) => {
                region
                    .default_resources
                    .requests
                    .get_or_insert_default()
                    .cpu = Some(v)
            }
            Change::GatewayImage(v) => config.gateway.image = v,
            Change::GatewayController(v) => config.gateway.controller = v,
            Change::GatewayReplicas(v) => config.gateway.replicas = v,
        }
    }
}

/// The inputs as comparable values: a "change" to the same value is no change.
fn snapshot(
    instance: &KuraInstance,
    config: &OperatorConfig,
) -> (serde_json::Value, OperatorConfig) {
    (serde_json::to_value(instance).unwrap(), config.clone())
}

proptest! {
    #[test]
    fn every_generated_instance_serialises_in_canonical_form(instance in instances()) {
        let desired = render_with(&instance, &config());
        prop_assert_eq!(non_canonical_object(&desired), None);
    }

    #[test]
    fn changing_any_one_rendered_input_changes_the_revision(mut instance in instances(), change in changes()) {
        change.prepare(&mut instance);
        let config = config();
        let (mut changed, mut changed_config) = (instance.clone(), config.clone());
        change.apply(&mut changed, &mut changed_config);
        prop_assume!(snapshot(&instance, &config) != snapshot(&changed, &changed_config));
        let before = render_with(&instance, &config);
        let after = render_with(&changed, &changed_config);
        prop_assert_ne!(before.revision, after.revision, "{:?} left the revision unchanged", change);
    }

    /// An ingress class concerns no pod: a new revision, but the pods must not roll.
    #[test]
    fn a_new_shared_ingress_class_changes_the_revision_but_not_the_pod_template_hash(
        mut instance in instances(),
        class in "[a-z][a-z0-9-]{0,10}[a-z0-9]",
    ) {
        instance.spec.gateway.mode = GatewayMode::Shared;
        let config = config();
        let mut changed = config.clone();
        changed.regions.get_mut(&instance.spec.region).unwrap().shared_ingress_class = class.clone();
        prop_assume!(class != config.regions[&instance.spec.region].shared_ingress_class);
        let (before, after) = (render_with(&instance, &config), render_with(&instance, &changed));
        prop_assert_ne!(before.revision, after.revision);
        prop_assert_eq!(before.pod_template_hash, after.pod_template_hash);
    }

    #[test]
    fn a_new_image_changes_the_revision_and_the_pod_template_hash(
        instance in instances(),
        tag in "[a-z0-9]{1,8}",
    ) {
        let mut changed = instance.clone();
        changed.spec.image = format!("ghcr.io/kura-dev/kura:{tag}");
        prop_assume!(changed.spec.image != instance.spec.image);
        let (before, after) = (render_with(&instance, &config()), render_with(&changed, &config()));
        prop_assert_ne!(before.revision, after.revision);
        prop_assert_ne!(before.pod_template_hash, after.pod_template_hash);
    }
}
