//! The pure core's cost per instance: every reconcile of every instance validates,
//! renders and hashes, so this bounds what a large, idle fleet costs in CPU.
//! Results and the command are in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kura_operator::api::KuraInstance;
use kura_operator::config::OperatorConfig;
use kura_operator::render::render;
use kura_operator::validate::validate;

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

criterion_group!(benches, core);
criterion_main!(benches);
