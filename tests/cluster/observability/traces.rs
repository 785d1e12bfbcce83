//! Traces (issue 26.3): the real operator binary on the real control plane,
//! exporting over OTLP/HTTP to a receiver inside the test (`receiver`: it
//! plays the collector). Each reconcile is a trace of its steps, named in
//! the JSON log and as the reconcile histogram's exemplar; a fleet rollout
//! links its instances' reconciles to one trace; without the OTEL_*
//! environment (or with `OTEL_TRACES_EXPORTER=none`) nothing is exported and
//! no exporter runs.

mod receiver;

use std::time::Duration;

use kube::api::Api;
use serde_json::Value;

use self::receiver::{Received, Receiver, attribute, hex};
use crate::operator::{Operator, config, delete_shared_class, instance, shared_class, wait_ready};
use crate::support::{TestNamespace, apply_json, wait_for};
use k8s_openapi::api::networking::v1::IngressClass;
use kura_core::api::{KuraInstance, KuraInstanceStatus};

const T: Duration = Duration::from_secs(90);

/// The operator's environment to export to `receiver`, quickly (100 ms
/// between batches instead of 5 s).
fn otel_env(receiver: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("KURA_LOG_FORMAT", "json".into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_SERVICE_NAME", "kura-traces-test".into()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=test".into(),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
}

fn start(ns: &TestNamespace, env: &[(&'static str, String)]) -> Operator {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Operator::start_with_env(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &env,
    )
}

/// The operator under `env`, and the instance `acme` it made Ready (the
/// shared class is deleted at the end of the test).
async fn acme_ready(
    ns: &TestNamespace,
    env: &[(&'static str, String)],
) -> (Operator, Api<IngressClass>, KuraInstanceStatus) {
    let classes = shared_class(ns).await;
    let op = start(ns, env);
    let instances: Api<KuraInstance> = ns.api();
    let body = instance("acme", "registry.example/kura:1.0.0");
    apply_json(&instances, "test", body).await.unwrap();
    let status = wait_ready(&instances, "acme").await;
    (op, classes, status)
}

/// The root `reconcile` spans of `instance` in `namespace`.
fn reconciles<'a>(spans: &'a [Received], namespace: &str, instance: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|r| {
            let a = &r.span.attributes;
            r.span.name == "reconcile"
                && r.span.parent_span_id.is_empty()
                && attribute(a, "namespace").as_deref() == Some(namespace)
                && attribute(a, "instance").as_deref() == Some(instance)
        })
        .collect()
}

/// The spans whose parent is `root`, in its trace, by start.
fn children<'a>(spans: &'a [Received], root: &Received) -> Vec<&'a Received> {
    let mut out: Vec<&Received> = spans
        .iter()
        .filter(|r| r.span.trace_id == root.span.trace_id)
        .filter(|r| r.span.parent_span_id == root.span.span_id)
        .collect();
    out.sort_by_key(|r| r.span.start_time_unix_nano);
    out
}

/// Threads of the SDK's exporter (`OpenTelemetry.Traces.BatchProcessor`,
/// cut to 15 bytes by the kernel) in the operator's process.
fn exporter_threads(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the operator's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("OpenTelemetry"))
        .count()
}

/// The reconcile histogram's exemplars in `/metrics`: their trace ids.
fn exemplars(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_time_seconds_bucket{"))
        .filter_map(|l| {
            let rest = l.split_once(" # {trace_id=\"")?.1;
            Some(rest.split_once('"')?.0.to_string())
        })
        .collect()
}

fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn a_reconcile_is_a_trace_of_its_steps_named_in_the_log_and_the_histogram() {
    let receiver = Receiver::start().await;
    let ns = TestNamespace::new("traces").await;
    let (op, classes, status) = acme_ready(&ns, &otel_env(&receiver)).await;

    // The pass that applied: decide, the apply's waves, prune, probe and the
    // status write, each a child of the reconcile, in one trace.
    let (root, steps) = wait_for("the trace of the reconcile that applied", T, || async {
        let spans = receiver.spans();
        reconciles(&spans, &ns.name, "acme")
            .into_iter()
            .find_map(|root| {
                let steps: Vec<Received> = children(&spans, root).into_iter().cloned().collect();
                let names: Vec<&str> = steps.iter().map(|s| s.span.name.as_str()).collect();
                ["decide", "apply_wave", "prune", "probe", "status_write"]
                    .iter()
                    .all(|n| names.contains(n))
                    .then(|| (root.clone(), steps))
            })
    })
    .await;
    let names: Vec<&str> = steps.iter().map(|s| s.span.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"decide"), "{names:?}");
    let waves: Vec<String> = steps
        .iter()
        .filter(|s| s.span.name == "apply_wave")
        .map(|s| attribute(&s.span.attributes, "wave").expect("a wave number"))
        .collect();
    assert!(!waves.is_empty(), "{names:?}");
    let position = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(position("apply_wave") < position("prune"), "{names:?}");
    assert!(position("prune") < position("probe"), "{names:?}");
    assert!(position("probe") < position("status_write"), "{names:?}");
    let a = &root.span.attributes;
    assert_eq!(attribute(a, "revision"), status.applied_revision_short);
    // OpenTelemetry's name for the namespace; the instance under `kura.`.
    assert_eq!(
        attribute(a, "k8s.namespace.name").as_deref(),
        Some(ns.name.as_str())
    );
    assert_eq!(attribute(a, "kura.instance.name").as_deref(), Some("acme"));
    assert_eq!(attribute(a, "origin").as_deref(), Some("User"));
    // The user's own change is no fleet rollout: no link.
    assert!(root.span.links.is_empty(), "{:?}", root.span.links);
    assert_eq!(
        attribute(&root.resource, "service.name").as_deref(),
        Some("kura-traces-test")
    );
    assert_eq!(
        attribute(&root.resource, "deployment.environment").as_deref(),
        Some("test")
    );

    // The log names the trace: every line of that pass carries its id.
    let trace_id = hex(&root.span.trace_id);
    let lines = json_lines(&op.log());
    let named: Vec<&Value> = lines
        .iter()
        .filter(|l| l["spans"][0]["trace_id"] == trace_id.as_str())
        .collect();
    assert!(!named.is_empty(), "no log line names trace {trace_id}");
    for line in named {
        assert_eq!(line["spans"][0]["name"], "reconcile", "{line}");
        assert_eq!(line["spans"][0]["instance"], "acme", "{line}");
    }

    // The histogram's exemplars are traces the receiver got.
    wait_for(
        "an exemplar naming a received reconcile trace",
        T,
        || async {
            let (_, metrics) = op.get("/metrics").await?;
            let received: Vec<String> = receiver
                .spans()
                .iter()
                .filter(|r| r.span.name == "reconcile")
                .map(|r| hex(&r.span.trace_id))
                .collect();
            exemplars(&metrics)
                .iter()
                .any(|id| received.contains(id))
                .then_some(())
        },
    )
    .await;
    assert_eq!(exporter_threads(op.pid()), 1);
    delete_shared_class(&classes, &ns).await;
}

#[tokio::test]
async fn a_fleet_rollout_links_its_instances_reconciles_to_one_trace() {
    let receiver = Receiver::start().await;
    let ns = TestNamespace::new("traces-rollout").await;
    let classes = shared_class(&ns).await;
    let op = start(&ns, &otel_env(&receiver));
    let instances: Api<KuraInstance> = ns.api();
    for name in ["acme", "globex"] {
        let body = instance(name, "registry.example/kura:1.0.0");
        apply_json(&instances, "test", body).await.unwrap();
    }
    for name in ["acme", "globex"] {
        wait_ready(&instances, name).await;
    }
    // The operator's configuration changes what every instance renders: one
    // fleet rollout.
    let changed = config(&ns.name, "host", "example.com/none").replace("kura.test", "kura2.test");
    op.set_config(&changed);
    let accepted = kura_core::accepted::Accepted::new(
        kura_core::config::OperatorConfig::parse(&changed).unwrap(),
    );
    let rollout = kura_operator::traces::rollout_context(accepted.fleet_revision());
    let rollout_trace = hex(&rollout.trace_id().to_bytes());
    for name in ["acme", "globex"] {
        let linked = wait_for(
            &format!("{name}'s reconcile linked to the rollout"),
            T,
            || {
                let spans = receiver.spans();
                let found = reconciles(&spans, &ns.name, name)
                    .into_iter()
                    .filter(|r| {
                        attribute(&r.span.attributes, "origin").as_deref() == Some("Operator")
                    })
                    .find_map(|r| r.span.links.first().cloned());
                async move { found }
            },
        )
        .await;
        assert_eq!(hex(&linked.trace_id), rollout_trace, "{name}");
        assert_eq!(
            attribute(&linked.attributes, "kura.fleet_revision").as_deref(),
            Some(accepted.fleet_revision())
        );
    }
    // The rollout's own span, under the ids the links name: a backend
    // searched for the rollout's trace id finds a span, sent once by this
    // process however many reconciles link to it.
    let sent = wait_for("the fleet_rollout span", T, || {
        let found: Vec<Received> = receiver
            .spans()
            .into_iter()
            .filter(|r| r.span.name == "fleet_rollout")
            .collect();
        async move { (!found.is_empty()).then_some(found) }
    })
    .await;
    assert_eq!(sent.len(), 1, "once per process and revision");
    let span = &sent[0].span;
    assert_eq!(hex(&span.trace_id), rollout_trace);
    assert_eq!(hex(&span.span_id), hex(&rollout.span_id().to_bytes()));
    assert_eq!(
        attribute(&span.attributes, "kura.fleet_revision").as_deref(),
        Some(accepted.fleet_revision())
    );
    delete_shared_class(&classes, &ns).await;
}

/// Runs an instance to Ready and two more passes under `env`, then checks
/// that no trace left the operator: no exporter thread, no trace id in the
/// log or the histogram, and (when given) nothing at `receiver`.
async fn untraced(prefix: &str, env: &[(&'static str, String)], receiver: Option<&Receiver>) {
    let ns = TestNamespace::new(prefix).await;
    let (op, classes, _) = acme_ready(&ns, env).await;
    // Passes after Ready (the tests' resync is 3 s), each long after a
    // 100 ms batch would have gone.
    op.wait_for_log_count("\"reconciled\"", 2, T).await;
    assert_eq!(exporter_threads(op.pid()), 0);
    let log = op.log();
    assert!(!log.contains("trace_id"), "{log}");
    let (_, metrics) = op.get("/metrics").await.expect("/metrics");
    assert!(
        metrics.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"kurainstance\"}"
        ),
        "{metrics}"
    );
    assert_eq!(exemplars(&metrics), Vec::<String>::new());
    if let Some(receiver) = receiver {
        assert_eq!(receiver.requests(), 0);
    }
    delete_shared_class(&classes, &ns).await;
}

#[tokio::test]
async fn without_otel_variables_nothing_is_exported_and_no_exporter_runs() {
    // The harness removes every inherited OTEL_* variable (operator.rs).
    untraced("traces-off", &[("KURA_LOG_FORMAT", "json".into())], None).await;
}

#[tokio::test]
async fn otel_traces_exporter_none_sends_nothing_to_the_endpoint() {
    let receiver = Receiver::start().await;
    let mut env = otel_env(&receiver);
    env.push(("OTEL_TRACES_EXPORTER", "none".into()));
    untraced("traces-none", &env, Some(&receiver)).await;
}

/// OTLP over TLS to a collector whose certificate a private CA signed: the
/// exporter trusts the CA `OTEL_EXPORTER_OTLP_CERTIFICATE` names and the
/// spans arrive. The negative control first: without that variable the
/// system's roots do not trust the receiver, every handshake fails and no
/// span arrives.
#[tokio::test]
async fn spans_reach_a_collector_over_tls_that_trusts_the_named_ca() {
    let ns = TestNamespace::new("traces-tls").await;
    let dir = crate::support::scratch_dir(&ns.name).join("otlp-tls");
    let receiver = Receiver::start_tls(&dir).await;
    let mut env = otel_env(&receiver);
    let (op, classes, _) = acme_ready(&ns, &env).await;
    wait_for("a failed TLS handshake (the CA not trusted)", T, || async {
        (receiver.handshakes_failed() > 0).then_some(())
    })
    .await;
    assert_eq!(
        receiver.requests(),
        0,
        "nothing is sent over a connection not trusted"
    );
    drop(op);

    let ca = dir.join(receiver::tls::CA);
    env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.display().to_string()));
    // The new process reconciles acme as it starts: a trace of its own.
    let op = start(&ns, &env);
    let root = wait_for("a reconcile span received over TLS", T, || async {
        reconciles(&receiver.spans(), &ns.name, "acme")
            .first()
            .map(|r| (*r).clone())
    })
    .await;
    assert_eq!(
        attribute(&root.span.attributes, "k8s.namespace.name").as_deref(),
        Some(ns.name.as_str())
    );
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

/// A dedicated gateway's pass is a trace of its own too: `reconcile_gateway`
/// with its steps as children, exported with the semantic-convention names.
#[tokio::test]
async fn a_gateways_reconcile_is_a_trace_of_its_steps() {
    let receiver = Receiver::start().await;
    let ns = TestNamespace::new("traces-gw").await;
    let env = otel_env(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let config = config(&ns.name, "cloud", crate::gateways::SIM);
    let op = Operator::start_with_env(&ns.name, &config, &env);
    let instances: Api<KuraInstance> = ns.api();
    let body = instance("acme", crate::gateways::IMAGE);
    apply_json(&instances, "test", body).await.unwrap();
    wait_ready(&instances, "acme").await;
    let gateway = kura_core::names::gateway("acme", "r1");

    let (root, names) = wait_for("the trace of the gateway's apply", T, || async {
        let spans = receiver.spans();
        spans.iter().find_map(|root| {
            let a = &root.span.attributes;
            let ours = root.span.name == "reconcile_gateway"
                && root.span.parent_span_id.is_empty()
                && attribute(a, "gateway").as_deref() == Some(gateway.as_str());
            let names: Vec<String> = children(&spans, root)
                .iter()
                .map(|s| s.span.name.clone())
                .collect();
            (ours
                && ["decide", "apply_wave", "status_write"]
                    .iter()
                    .all(|n| names.iter().any(|m| m == n)))
            .then(|| (root.clone(), names))
        })
    })
    .await;
    assert_eq!(
        names.first().map(String::as_str),
        Some("decide"),
        "{names:?}"
    );
    let a = &root.span.attributes;
    assert_eq!(
        attribute(a, "k8s.namespace.name").as_deref(),
        Some(ns.name.as_str())
    );
    assert_eq!(
        attribute(a, "kura.gateway.name").as_deref(),
        Some(gateway.as_str())
    );
    assert!(attribute(a, "revision").is_some_and(|r| !r.is_empty()));
    drop(op);
}
