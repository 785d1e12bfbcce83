//! Hostile input: arbitrary specs and configurations never panic `validate` or
//! `render`; every rejection names a field path and a reason.

use proptest::prelude::*;
use serde_json::json;

use crate::api::KuraInstance;
use crate::config::OperatorConfig;
use crate::render::render;
use crate::validate::validate;

/// Strings that are sometimes valid names, sometimes hostile.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]{1,12}",
        "[a-z0-9-]{0,70}",
        ".{0,300}",
        Just(String::new()),
        Just("KURA_X".to_string()),
        "[A-Za-z_][A-Za-z0-9_]{0,10}",
        "[a-z0-9./:@-]{1,80}",
        "[1-9][0-9]{0,3}(Mi|Gi|Ti|GB|m|)",
    ]
}

fn instance() -> impl Strategy<Value = serde_json::Value> {
    (
        (text(), text(), text(), text(), any::<i32>()),
        (proptest::option::of(text()), proptest::collection::vec(text(), 0..10), text(), proptest::option::of(text())),
        proptest::collection::vec((text(), proptest::option::of(text()), proptest::option::of((text(), text()))), 0..70),
        (prop_oneof![Just("Auto"), Just("Dedicated"), Just("Shared")], proptest::option::of((text(), text(), text(), text()))),
    )
        .prop_map(|((name, account, region, image, replicas), (host, aliases, size, class), env, (mode, res))| {
            let env: Vec<_> = env
                .into_iter()
                .map(|(n, v, r)| json!({"name": n, "value": v, "secretKeyRef": r.map(|(a, b)| json!({"name": a, "key": b}))}))
                .collect();
            json!({
                "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                "metadata": {"name": name, "namespace": "ns", "uid": "u"},
                "spec": {
                    "account": account, "region": region, "image": image, "replicas": replicas,
                    "host": host, "aliases": aliases, "storage": {"size": size, "class": class},
                    "env": env, "gateway": {"mode": mode},
                    "resources": res.map(|(a, b, c, d)| json!({"requests": {"cpu": a, "memory": b}, "limits": {"cpu": c, "memory": d}})),
                },
            })
        })
}

fn config() -> impl Strategy<Value = String> {
    (text(), text(), text(), text(), prop_oneof![Just("cloud"), Just("host"), Just("metal")], any::<i8>()).prop_map(
        |(region, class, domain, controller, network, replicas)| {
            format!(
                "gateway: {{image: {controller:?}, controller: {controller:?}, replicas: {replicas}}}\n\
                 regions:\n  {region:?}: {{network: {network}, sharedIngressClass: {class:?}, domain: {domain:?}}}\n  \
                 r1: {{network: host, sharedIngressClass: shared, domain: kura.test}}\n"
            )
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_specs_and_configs_never_panic_and_rejections_name_a_field(spec in instance(), cfg in config()) {
        let config = match OperatorConfig::parse(&cfg) {
            Ok(c) => c,
            Err(e) => {
                // A configuration error names its field (or the YAML position).
                let msg = e.to_string();
                prop_assert!(msg.contains("regions") || msg.contains("gateway") || msg.contains("line"), "{msg}");
                OperatorConfig::parse("regions: {r1: {network: host, sharedIngressClass: shared, domain: kura.test}}").unwrap()
            }
        };
        let Ok(instance) = serde_json::from_value::<KuraInstance>(spec) else { return Ok(()) };
        match validate(&instance, &config) {
            Ok(v) => {
                let desired = render(&v, &config);
                prop_assert!(desired.objects.iter().all(|o| !o.id.name.is_empty()));
                // Hostile strings (quotes, control characters) are written as the
                // canonical form escapes them.
                prop_assert_eq!(crate::render::non_canonical_object(&desired), None);
            }
            Err(errors) => {
                prop_assert!(!errors.0.is_empty());
                for e in &errors.0 {
                    prop_assert!(e.path.starts_with("spec.") || e.path.starts_with("metadata."), "{e}");
                    prop_assert!(!e.message.is_empty(), "{e}");
                }
            }
        }
    }
}
