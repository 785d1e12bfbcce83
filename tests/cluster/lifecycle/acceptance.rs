//! "Passes validation" means "the apiserver accepts it". Specs at and past every limit
//! (the corpus of crates/kura-core/src/render/tests/hostile/corpus.yaml and generated ones) go through
//! `validate`; the instance and everything `render` makes of the valid ones (its
//! children, its KuraGateway and the gateway's own children) go to the real apiserver
//! as server-side dry-run applies, in a namespace of the longest name, under a
//! configuration of the longest domains. Conversely, what validation rejects the CRD
//! schema rejects too where it can; the rest the apiserver would reject or the cache
//! would trip over.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::{StreamExt, stream};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance, ResourceAmounts};
use kura_core::config::OperatorConfig;
use kura_core::kind::ChildKind;
use kura_core::render::gateway::render_gateway;
use kura_core::render::hostile::{Corpus, corpus};
use kura_core::render::{Desired, ObjectId, render};
use kura_core::validate::{ValidatedInstance, validate};
use kura_operator::reconcile::apply::dynamic_api;

/// Generated specs that must pass validation, beyond the corpus's valid cases.
const GENERATED_VALID: usize = 300;
/// Dry-run requests in flight at once.
const CONCURRENCY: usize = 16;
/// So that owner references are rendered, as the operator renders them.
const UID: &str = "6f1c2a4e-0000-4000-8000-00000000a11c";

/// 63 characters, the longest namespace name: it is part of a dedicated gateway's
/// IngressClass name.
async fn longest_namespace() -> TestNamespace {
    let ns = TestNamespace::new(&format!("accept-{}", "n".repeat(49))).await;
    assert_eq!(ns.name.len(), 63, "{}", ns.name);
    ns
}

/// One input: where it came from, the instance and the configuration it renders under.
struct Input {
    origin: String,
    instance: Value,
    config: OperatorConfig,
}

fn parse(instance: &Value, namespace: &str) -> KuraInstance {
    let mut instance: KuraInstance =
        serde_json::from_value(instance.clone()).expect("a KuraInstance");
    instance.metadata.namespace = Some(namespace.to_string());
    instance.metadata.uid = Some(UID.to_string());
    instance
}

/// The corpus's valid cases, then generated specs until GENERATED_VALID of them pass
/// validation (a fixed seed: a failure reproduces). Returns how many were generated.
fn inputs(corpus: &Corpus, namespace: &str) -> (Vec<Input>, usize) {
    let mut inputs: Vec<Input> = corpus
        .cases
        .iter()
        .filter(|c| c.valid)
        .map(|case| Input {
            origin: format!("corpus: {}", case.case),
            instance: corpus.instance(Some(case)),
            config: OperatorConfig::parse(&corpus.config(Some(case))).expect("a valid config"),
        })
        .collect();
    let config = OperatorConfig::parse(&corpus.config(None)).expect("the corpus's configuration");
    let strategy = kura_core::render::hostile::specs(corpus);
    let mut runner = TestRunner::deterministic();
    let (mut generated, mut valid) = (0, 0);
    while valid < GENERATED_VALID {
        assert!(
            generated < 20 * GENERATED_VALID,
            "only {valid} of {generated} generated specs pass validation"
        );
        let spec = strategy.new_tree(&mut runner).expect("a spec").current();
        generated += 1;
        if validate(&parse(&spec, namespace), &config).is_ok() {
            valid += 1;
            inputs.push(Input {
                origin: format!("generated #{generated}"),
                instance: spec,
                config: config.clone(),
            });
        }
    }
    (inputs, generated)
}

/// Every object of a rendering, with the dedicated gateway's own children.
fn with_gateway_children(desired: Desired) -> Vec<(Target, Value)> {
    let mut objects = Vec::new();
    for o in desired.objects {
        if o.id.kind == ChildKind::KuraGateway {
            // The gateway controller renders these from the KuraGateway as stored.
            let mut gateway: KuraGateway = serde_json::from_value(o.body()).expect("a KuraGateway");
            gateway.metadata.uid = Some(UID.to_string());
            for child in render_gateway(&gateway, &Default::default()).objects {
                objects.push((Target::Child(child.id.clone()), child.body()));
            }
        }
        objects.push((Target::Child(o.id.clone()), o.body()));
    }
    objects
}

/// What is dry-run applied: the instance itself, or one of the objects rendered for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Instance { namespace: String, name: String },
    Child(ObjectId),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Instance { namespace, name } => write!(f, "KuraInstance {namespace}/{name}"),
            Target::Child(id) => id.fmt(f),
        }
    }
}

/// A server-side dry-run apply: the apiserver validates (and admits) the object as it
/// would for a real apply, and stores nothing.
async fn dry_run_apply(client: &Client, target: &Target, body: &Value) -> Result<(), String> {
    let params = PatchParams::apply("kura-operator").force().dry_run();
    let (api, name) = match target {
        Target::Instance { namespace, name } => (
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                namespace,
                &ApiResource::erase::<KuraInstance>(&()),
            ),
            name,
        ),
        Target::Child(id) => (dynamic_api(client, id), &id.name),
    };
    api.patch(name, &params, &Patch::Apply(body))
        .await
        .map(drop)
        .map_err(|e| match e {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })
}

#[tokio::test]
async fn validation_implies_acceptance() {
    let ns = longest_namespace().await;
    let corpus = corpus();
    let started = Instant::now();
    let (inputs, generated) = inputs(&corpus, &ns.name);

    // Objects shared by several inputs (a gateway) are sent once.
    let mut objects: BTreeMap<(Target, String), (String, Value)> = BTreeMap::new();
    let mut failures = Vec::new();
    for input in &inputs {
        let instance = parse(&input.instance, &ns.name);
        let Ok(valid) = validate(&instance, &input.config) else {
            failures.push(format!("{}: fails validation", input.origin));
            continue;
        };
        let mut body = input.instance.clone();
        body["metadata"]["namespace"] = json!(ns.name);
        let own = (
            Target::Instance {
                namespace: ns.name.clone(),
                name: valid.name.clone(),
            },
            body,
        );
        let children = with_gateway_children(render(&valid, &input.config));
        for (id, body) in std::iter::once(own).chain(children) {
            let key = (id, serde_json::to_string(&body).expect("JSON"));
            objects.entry(key).or_insert((input.origin.clone(), body));
        }
    }
    let total = objects.len();
    let client = &ns.client;
    let results: Vec<Option<String>> = stream::iter(objects)
        .map(|((id, _), (origin, body))| async move {
            let result = dry_run_apply(client, &id, &body).await;
            result.err().map(|e| format!("{origin}: {id}: {e}"))
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    failures.extend(results.into_iter().flatten());
    eprintln!(
        "{} inputs ({} corpus cases, {GENERATED_VALID} of {generated} generated specs valid), \
         {total} distinct objects dry-run applied in {:.1?}",
        inputs.len(),
        inputs.len() - GENERATED_VALID,
        started.elapsed()
    );
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for failure in &failures {
        let kind = failure
            .split(": ")
            .nth(1)
            .and_then(|id| id.split(' ').next());
        *by_kind.entry(kind.unwrap_or("?")).or_default() += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {total} objects of valid specs were rejected ({by_kind:?}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The path as the apiserver reports a list-level rule: up to the first index.
fn field_of(path: &str) -> &str {
    path.split('[').next().unwrap_or(path)
}

#[tokio::test]
async fn what_validation_rejects_the_crd_schema_rejects_too() {
    let ns = TestNamespace::new("accept-admission").await;
    let corpus = corpus();
    let resource = ApiResource::erase::<KuraInstance>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in corpus.cases.iter().filter(|c| c.admission.is_some()) {
        let (says, path) = (case.admission.as_deref().unwrap(), case.rejected.as_deref());
        let mut body = corpus.instance(Some(case));
        body["metadata"]["namespace"] = json!(ns.name);
        let object: DynamicObject = serde_json::from_value(body).expect("an object");
        checked += 1;
        match api.create(&dry_run, &object).await {
            Err(kube::Error::Api(s))
                if s.code == 422
                    && s.message.contains(says)
                    && s.message.contains(field_of(path.unwrap_or_default())) => {}
            Err(kube::Error::Api(s)) => failures.push(format!(
                "{}: expected {:?} and {says:?} in the rejection: {}",
                case.case, path, s.message
            )),
            Err(e) => failures.push(format!("{}: {e}", case.case)),
            Ok(_) => failures.push(format!(
                "{}: admitted, though validation says {:?}",
                case.case,
                case.says.as_deref().unwrap_or_default()
            )),
        }
    }
    assert!(checked >= 60, "the corpus has {checked} admission cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rejections that need the operator configuration cannot happen at admission: here
/// `validate` is bypassed (its output edited) to show what the apiserver, or the
/// cache, would make of them.
#[tokio::test]
async fn what_validation_rejects_for_the_configuration_the_apiserver_rejects_or_would_misbehave() {
    let ns = TestNamespace::new("accept-converse").await;
    let corpus = corpus();
    let config = OperatorConfig::parse(&corpus.config(None)).unwrap();
    let base: ValidatedInstance = validate(&parse(&corpus.instance(None), &ns.name), &config)
        .expect("the corpus's base instance is valid");
    let client = &ns.client;
    let object = |v: &ValidatedInstance, kind: ChildKind| -> (Target, Value) {
        let desired = render(v, &config);
        let o = desired.objects.iter().find(|o| o.id.kind == kind).unwrap();
        (Target::Child(o.id.clone()), o.body())
    };

    // A default host of 254 characters (the longest account in the longest region):
    // the Ingress is rejected.
    let mut long_host = base.clone();
    let domain = &config.regions["eu-west-1"].domain;
    long_host.host = format!("{}.{}.{domain}", "a".repeat(40), "r".repeat(32));
    assert_eq!(long_host.host.len(), 254);
    let (id, body) = object(&long_host, ChildKind::Ingress);
    let err = dry_run_apply(client, &id, &body).await.unwrap_err();
    assert!(err.contains("must be no more than 253 characters"), "{err}");

    // An own memory limit below the region's default request: the StatefulSet is rejected.
    let mut low_limit = base.clone();
    low_limit.resources.limits = Some(ResourceAmounts {
        cpu: None,
        memory: Some("128Mi".into()),
    });
    assert_eq!(
        low_limit
            .resources
            .requests
            .as_ref()
            .unwrap()
            .memory
            .as_deref(),
        Some("256Mi")
    );
    let (id, body) = object(&low_limit, ChildKind::StatefulSet);
    let err = dry_run_apply(client, &id, &body).await.unwrap_err();
    assert!(
        err.contains("must be less than or equal to memory limit"),
        "{err}"
    );

    // A gateway controller that is no domain-prefixed path: the IngressClass is rejected.
    let (_, gateway) = object(&base, ChildKind::KuraGateway);
    let mut gateway: KuraGateway = serde_json::from_value(gateway).unwrap();
    gateway.spec.controller = "Example.com/ingress".into();
    let class = render_gateway(&gateway, &Default::default());
    let class = class
        .objects
        .iter()
        .find(|o| o.id.kind == ChildKind::IngressClass)
        .unwrap();
    let err = dry_run_apply(client, &Target::Child(class.id.clone()), &class.body())
        .await
        .unwrap_err();
    assert!(err.contains("spec.controller"), "{err}");

    // A host label of 64 characters passes the apiserver, but no resolver looks such a
    // name up (RFC 1035: labels of at most 63 octets): the instance would never be
    // reachable, so validation is stricter than the apiserver here on purpose.
    let mut long_label = base.clone();
    long_label.host = format!("{}.example.com", "a".repeat(64));
    let (id, body) = object(&long_label, ChildKind::Ingress);
    dry_run_apply(client, &id, &body).await.unwrap();

    // A NUL in an env value passes the apiserver, but a process environment cannot
    // carry it (each entry ends at NUL): the container would never start.
    let mut nul = base.clone();
    nul.env = vec![kura_core::api::EnvVar {
        name: "NUL".into(),
        value: Some("a\0b".into()),
        secret_key_ref: None,
    }];
    let (id, body) = object(&nul, ChildKind::StatefulSet);
    dry_run_apply(client, &id, &body).await.unwrap();
}
