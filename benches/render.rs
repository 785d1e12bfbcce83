//! The pure core's cost per instance: every reconcile of every instance validates,
//! renders and hashes, so this bounds what a large, idle fleet costs in CPU.
//! Results and the command are in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::render::render;
use kura_core::validate::validate;

/// The operator's allocator (src/main.rs), so that the figures are the operator's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// globex-eu: the richest example (dedicated gateway, an alias, own resources),
/// with a uid as the operator sees it, so owner references are rendered too.
fn example() -> (KuraInstance, OperatorConfig) {
    let config = OperatorConfig::parse(include_str!("../examples/config.yaml")).unwrap();
    let text = include_str!("../examples/instances.yaml");
    let mut instance = serde_yaml::Deserializer::from_str(text)
        .map(|doc| -> KuraInstance { serde::Deserialize::deserialize(doc).unwrap() })
        .find(|i| i.metadata.name.as_deref() == Some("globex-eu"))
        .expect("examples/instances.yaml has globex-eu");
    instance.metadata.uid = Some("6f1c2a4e-0000-4000-8000-000000000001".into());
    (instance, config)
}

fn core(c: &mut Criterion) {
    let (instance, config) = example();
    c.bench_function("validate+render+hash/globex-eu", |b| {
        b.iter(|| {
            let validated = validate(black_box(&instance), black_box(&config)).unwrap();
            render(&validated, &config)
        })
    });
    let validated = validate(&instance, &config).unwrap();
    c.bench_function("render+hash/globex-eu", |b| {
        b.iter(|| render(black_box(&validated), black_box(&config)))
    });
    c.bench_function("validate/globex-eu", |b| {
        b.iter(|| validate(black_box(&instance), black_box(&config)).unwrap())
    });
}

/// A reconcile's host check among a thousand instances, each with its own
/// host, an alias and a serving Ingress: an index lookup, not a scan.
fn claims(c: &mut Criterion) {
    use k8s_openapi::api::networking::v1::Ingress;
    use kube::runtime::{reflector, watcher};
    use kura_operator::claims::Claims;

    let (instance, config) = example();
    let claims = Claims::new(kura_core::claims::index::DEFAULT_RESERVATION, None);
    let (instances, _) = reflector::store::<KuraInstance>();
    let fleet = |i: usize| {
        let mut other = instance.clone();
        other.metadata.name = Some(format!("i{i}"));
        other.metadata.uid = Some(format!("uid-{i}"));
        other.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_700_000_000 + i as i64).unwrap(),
            ));
        other.spec.account = format!("acct{i}");
        other.spec.aliases = vec![format!("alias{i}.example.com")];
        other
    };
    for i in 0..1000 {
        let other = fleet(i);
        claims.instance_event(&instances, &watcher::Event::Apply(other.clone()));
        let ingress: Ingress = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("i{i}"), "namespace": "kura-demo",
                "labels": {"app.kubernetes.io/managed-by": "kura-operator", "kura.dev/instance": format!("i{i}")},
                "ownerReferences": [{"apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                    "name": format!("i{i}"), "uid": format!("uid-{i}"), "controller": true}],
                // Its rules applied by the operator: an Ingress of ours serves.
                "managedFields": [{"manager": "kura-operator", "operation": "Apply",
                    "fieldsV1": {"f:spec": {"f:rules": {}}}}]},
            "spec": {"rules": [{"host": format!("acct{i}.eu-west-1.kura.example.com")}]},
        }))
        .unwrap();
        claims.ingress_event(&watcher::Event::Apply(ingress), Vec::new);
    }
    let me = fleet(500);
    let now = jiff::Timestamp::now();
    c.bench_function("claims/decide-among-1000", |b| {
        b.iter(|| {
            claims
                .claim(black_box(&me), black_box(&config), black_box(now))
                .unwrap()
        })
    });
}

/// A round of the address watch at 10,000 instances: all behind one shared
/// controller's address (one request), and each behind its own (a dedicated
/// gateway each: 300 requests, the cap). The requests are what it costs the
/// network; this is what it costs the CPU, every 10 s.
fn address_watch(c: &mut Criterion) {
    use kura_core::endpoint::addresses::{Addresses, Watched};
    use kura_core::endpoint::{Answer, Target};
    use std::time::{Duration, Instant};

    let every = Duration::from_secs(10);
    let fleet = |addresses: usize| {
        let t0 = Instant::now() - every;
        let mut a = Addresses::default();
        for i in 0..10_000 {
            let j = i % addresses;
            let watched = Watched {
                namespace: format!("tenant{}", i % 100),
                name: format!("i{i}"),
                target: Target {
                    address: format!("10.{}.{}.{}", j / 65536, j / 256 % 256, j % 256),
                    port: 80,
                    host: format!("acct{i}.eu-west-1.kura.example.com"),
                    path: "/up".into(),
                    account: format!("acct{i}"),
                },
            };
            a.answered(watched, &format!("uid-{i}"), &Answer::Answered, t0);
        }
        a
    };
    for (label, addresses) in [("one-address", 1), ("10000-addresses", 10_000)] {
        let mut a = fleet(addresses);
        let probes = a.round(Instant::now(), every).len();
        eprintln!("address-watch/{label}: {probes} requests a round for 10,000 instances");
        c.bench_function(
            &format!("address-watch/round-10000-instances-{label}"),
            |b| b.iter(|| a.round(black_box(Instant::now()), every)),
        );
    }
}

criterion_group!(benches, core, claims, address_watch);
criterion_main!(benches);
