//! The apiserver throttles the operator: API Priority and Fairness puts the
//! operator's identity (the chart's ServiceAccount, which the operator runs as
//! through an impersonating kubeconfig) in a priority level of its own with the
//! smallest share of the server's concurrency and no queue, so a burst beyond
//! its few seats is answered 429 at once. A fleet of 30 still converges; the
//! 429s are retried with backoff — by kube's client after the server's
//! Retry-After, then by the controller's jittered per-instance backoff — every
//! request is counted, and bounded per instance, from the apiserver's audit
//! log, and the request rate is reported.

use std::time::{Duration, Instant};

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::operations::chart::rbac::apply_chart_rbac;
use crate::operations::chart::{ClusterScopedCleanup, kubectl_run};
use crate::operator::{Operator, config, converged_count, create_fleet, shared_class};
use crate::support::*;
use kura_core::api::KuraInstance;

const FLEET: usize = 30;
/// Mutating requests per instance, 429s included, that a converging fleet may
/// cost. Without throttling an instance takes about 12 (7 applies, status
/// writes, Events); throttled, 25–43 were observed (the client retries a 429
/// after the server's Retry-After, which APF raises up to 32 s while it keeps
/// dropping; a request that outlives the client's 30 s bound fails and its
/// reconcile is retried with backoff, re-applying). A retry loop without
/// backoff makes thousands.
const MAX_REQUESTS_PER_INSTANCE: usize = 100;

/// Deletes the test's cluster-scoped APF objects (with kubectl: a drop cannot
/// await, and blocking the test's runtime on its own client would deadlock).
struct FlowControlCleanup(String);

impl Drop for FlowControlCleanup {
    fn drop(&mut self) {
        let _ = kubectl_run(
            &[
                "delete",
                &format!("flowschema/{0}", self.0),
                &format!("prioritylevelconfiguration/{0}", self.0),
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

/// Mutating requests made as `user` since `since`, from the audit log: (all, 429s).
fn audited_requests(user: &str, since: jiff::Timestamp) -> (usize, usize) {
    let text = audit_text(&audit_log());
    let mut total = 0;
    let mut throttled = 0;
    for e in text
        .lines()
        // The log holds every test's requests: parse only this identity's.
        .filter(|l| l.contains(user))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        // One record per request: the stage after the response (or the panic).
        .filter(|e| e["stage"] == "ResponseComplete" || e["stage"] == "Panic")
        .filter(|e| e["impersonatedUser"]["username"] == user)
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= since)
        })
    {
        total += 1;
        if e["responseStatus"]["code"] == 429 {
            throttled += 1;
        }
    }
    (total, throttled)
}

#[tokio::test]
async fn fleet_converges_while_the_apiserver_throttles_the_operator() {
    let ns = TestNamespace::new("throttle").await;
    let _cleanup = ClusterScopedCleanup(ns.name.clone());
    let classes = shared_class(&ns).await;
    let sa = apply_chart_rbac(&ns, &format!("watchNamespace={}", ns.name));
    let user = format!("system:serviceaccount:{}:{sa}", ns.name);

    // The operator's own priority level: one nominal share (a handful of seats
    // of the server's concurrency), nothing borrowed, excess rejected with 429.
    let name = format!("kura-throttle-{}", ns.name);
    let _flow_cleanup = FlowControlCleanup(name.clone());
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"}}},
    }))
    .unwrap();
    Api::<PriorityLevelConfiguration>::all(ns.client.clone())
        .create(&PostParams::default(), &level)
        .await
        .unwrap();
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": sa, "namespace": ns.name}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }))
    .unwrap();
    let schemas = Api::<FlowSchema>::all(ns.client.clone());
    schemas
        .create(&PostParams::default(), &schema)
        .await
        .unwrap();
    // The apiserver's flow-control controller marks the schema not dangling
    // once it has taken the configuration in.
    wait_for(
        "the flow schema to be in force",
        Duration::from_secs(30),
        || async {
            let s = schemas.get(&name).await.ok()?.status?;
            s.conditions?
                .iter()
                .any(|c| {
                    c.type_.as_deref() == Some("Dangling") && c.status.as_deref() == Some("False")
                })
                .then_some(())
        },
    )
    .await;
    // Bindings reach the authorizer asynchronously: start once a grant works.
    let as_sa = client_as_service_account(&ns.name, &sa).await;
    wait_granted::<KuraInstance>(&as_sa, &ns.name).await;

    let since = jiff::Timestamp::now();
    let kubeconfig = impersonating_kubeconfig(&scratch_dir(&ns.name), &ns.name, &sa);
    let mut op = Operator::start_as(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        kubeconfig,
    );
    let instances: Api<KuraInstance> = ns.api();
    let started = Instant::now();
    create_fleet(&instances, "t", FLEET).await;
    // A bound on convergence, not a speed goal: 30 instances took 213 s here
    // with the machine loaded (APF's Retry-After reaches 32 s while it keeps
    // dropping, and an apply's first names are read too); the request count
    // below is what shows retries are backed off.
    wait_for(
        "the throttled fleet to converge",
        Duration::from_secs(420),
        || async { (converged_count(&instances, None).await == FLEET).then_some(()) },
    )
    .await;
    let took = started.elapsed();
    assert!(op.alive(), "throttling must not make the operator exit");

    let (requests, throttled) = audited_requests(&user, since);
    eprintln!(
        "{FLEET} instances converged in {took:?} under throttling: {requests} mutating requests \
         ({:.1}/s, {:.1} per instance), {throttled} answered 429",
        requests as f64 / took.as_secs_f64(),
        requests as f64 / FLEET as f64,
    );
    assert!(
        throttled > 0,
        "the priority level must actually throttle the operator, or this test shows nothing"
    );
    assert!(
        requests <= FLEET * MAX_REQUESTS_PER_INSTANCE,
        "{requests} mutating requests for {FLEET} instances: retries without backoff?"
    );
    op.kill();
    drop(classes);
}
