//! The chart's kube-state-metrics configuration (files/kube-state-metrics.yaml,
//! as templates/kube-state-metrics.yaml renders it) run by a real
//! kube-state-metrics (built from its Go module by `scripts/control-plane.sh
//! kube-state-metrics`, cached) against the plane, beside the real operator;
//! kura-sim plays the kubelet and the ingress controller. Every per-instance
//! series the chart README promises is there with the labels and values of the
//! live objects, and follows them as they change.
//!
//! Negative control: the scrape is compared with what the objects give as a
//! whole (every `kura_*` sample of the namespace, no more, no fewer), against a
//! list of family names written here from the README, not read from the
//! configuration. So an entry removed from the configuration (or a path in it
//! that reads nothing) leaves its series missing and fails the test, and a
//! family the configuration does not define (`kura_instance_ready` below) is
//! asserted absent.

mod expected;
mod exporter;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::operator::{Operator, Options, config, instance, wait_ready};
use crate::support::*;
use expected::expected;
use exporter::{KubeStateMetrics, Sample, Scrape};
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kura_operator::api::{KuraGateway, KuraInstance, Phase};

const T: Duration = Duration::from_secs(180);

/// The families the chart README promises (written out here, not read from
/// the configuration: see the module comment).
const PROMISED: [&str; 9] = [
    "kura_gateway_condition",
    "kura_gateway_info",
    "kura_instance_condition",
    "kura_instance_condition_since",
    "kura_instance_generation",
    "kura_instance_info",
    "kura_instance_observed_generation",
    "kura_instance_paused",
    "kura_instance_rollout_state",
];

/// Waits until the scrape equals what the objects give and `check` holds
/// for it; returns it. On timeout, the last difference and the log.
async fn scraped_matches(
    ksm: &KubeStateMetrics,
    ns: &TestNamespace,
    what: &str,
    check: impl Fn(&Scrape) -> bool,
) -> Scrape {
    let mut last = String::new();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if let (Some(want), Some(got)) = (expected(ns).await, ksm.scrape().await) {
            let got: Vec<Sample> = got
                .into_iter()
                .filter(|s| s.labels.get("namespace") == Some(&ns.name))
                .collect();
            let scrape = Scrape(got);
            if scrape.0 == want && check(&scrape) {
                return scrape;
            }
            let missing: Vec<_> = want.iter().filter(|s| !scrape.0.contains(s)).collect();
            let extra: Vec<_> = scrape.0.iter().filter(|s| !want.contains(s)).collect();
            last = format!("missing {missing:#?}\nnot expected {extra:#?}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {T:?} waiting for {what}: {last}\nkube-state-metrics log:\n{}",
            ksm.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The region's configuration (dedicated gateways served by kura-sim, so
/// gateways exist too) with default pod memory, whose change is an operator
/// change that restarts pods, and a rollout budget.
fn fleet_config(ns: &str, memory: &str) -> String {
    format!(
        "{}    defaultResources:\n      requests: {{memory: {memory}}}\nrollout:\n  maxUnavailable: 1\n",
        config(ns, "cloud", "kura.dev/sim-ingress")
    )
}

/// The access the chart README tells users to give kube-state-metrics, and
/// no more, for the identity it runs as here (the admin impersonates it).
/// Without `customresourcedefinitions` it exports nothing: it finds custom
/// resources through them (its log then says it may not list them).
struct ReadmeAccess(Api<ClusterRole>, Api<ClusterRoleBinding>, String);

async fn readme_access(ns: &TestNamespace) -> ReadmeAccess {
    let name = format!("kura-ksm-{}", ns.name);
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    let rule = |group: &str, resource: &str| json!({"apiGroups": [group], "resources": [resource], "verbs": ["list", "watch"]});
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [rule("kura.dev", "kurainstances"), rule("kura.dev", "kuragateways"),
                  rule("apiextensions.k8s.io", "customresourcedefinitions")],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "kube-state-metrics", "namespace": ns.name}],
    });
    apply_json(&roles, "test", role).await.unwrap();
    apply_json(&bindings, "test", binding).await.unwrap();
    ReadmeAccess(roles, bindings, name)
}

impl ReadmeAccess {
    async fn remove(self) {
        let _ = self.1.delete(&self.2, &Default::default()).await;
        let _ = self.0.delete(&self.2, &Default::default()).await;
    }
}

async fn merge(instances: &Api<KuraInstance>, name: &str, patch: serde_json::Value) {
    let params = PatchParams::default();
    instances
        .patch(name, &params, &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_real_kube_state_metrics_exports_the_promised_per_instance_series() {
    let ns = TestNamespace::new("ksm").await;
    let _policy = crate::stall::deny_big_statefulsets(&ns).await;
    let options = Options {
        args: ["--retry-budget", "1", "--stall-window", "60s"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    };
    let op = Operator::start_with(&ns.name, &fleet_config(&ns.name, "256Mi"), &[], options);
    let instances: Api<KuraInstance> = ns.api();
    // `ready` serves; its window is closed, so an operator change waits.
    // `broken` is refused by the policy on every try: Stalled.
    let mut ready = instance("ready", "registry.example/kura:1.0.0");
    ready["spec"]["account"] = json!(format!("ready-{}", ns.name));
    ready["spec"]["maintenanceWindow"] = crate::windows::closed_window();
    let mut broken = instance("broken", "registry.example/kura:1.0.0");
    broken["spec"]["account"] = json!(format!("broken-{}", ns.name));
    broken["spec"]["replicas"] = json!(3);
    apply_json(&instances, "test", ready).await.unwrap();
    apply_json(&instances, "test", broken).await.unwrap();
    wait_ready(&instances, "ready").await;
    wait_for("broken to be Stalled", T, || async {
        let s = instances.get("broken").await.ok()?.status?;
        (s.phase == Some(Phase::Stalled)).then_some(())
    })
    .await;

    let dir = std::env::temp_dir().join(format!("kura-ksm-{}", ns.name));
    let _ = std::fs::remove_dir_all(&dir);
    let access = readme_access(&ns).await;
    let kubeconfig = crate::ops::impersonating_kubeconfig(&dir, &ns.name, "kube-state-metrics");
    let ksm = KubeStateMetrics::start(&dir, &ns.name, &kubeconfig);
    let first = scraped_matches(&ksm, &ns, "a Ready and a Stalled instance", |s| {
        s.ready("broken") == Some(0.0)
    })
    .await;
    assert_eq!(first.info("ready", "phase").as_deref(), Some("Ready"));
    assert_eq!(first.info("broken", "phase").as_deref(), Some("Stalled"));
    assert_eq!(first.ready("ready"), Some(1.0));
    let not_paused = [("phase", "Paused")];
    assert_eq!(
        first.value("kura_instance_paused", "ready", &not_paused),
        Some(0.0)
    );
    // "Not Ready since": the Ready condition's last transition, while it is 0.
    let not_ready_since = first.ready_since("broken").unwrap();
    assert!(not_ready_since > 1.7e9, "{not_ready_since}");
    let revision = first.info("ready", "desired_revision");
    assert!(
        revision.as_ref().is_some_and(|r| r.len() >= 7),
        "{revision:?}"
    );
    assert_eq!(revision, first.info("ready", "applied_revision"));
    assert!(first.info("ready", "ingress_class").is_some());

    // Fixed: Ready, and so is its series; the Ready condition's transition moved.
    merge(&instances, "broken", json!({"spec": {"replicas": 1}})).await;
    let fixed = scraped_matches(&ksm, &ns, "broken's series to say Ready", |s| {
        s.ready("broken") == Some(1.0)
    })
    .await;
    assert_eq!(fixed.info("broken", "phase").as_deref(), Some("Ready"));
    assert!(fixed.ready_since("broken").unwrap() > not_ready_since);

    // An operator change (the configuration's) waits for ready's window:
    // its rollout state says Waiting, its revisions differ.
    op.set_config(&fleet_config(&ns.name, "320Mi"));
    let rollout =
        |s: &Scrape, state| s.value("kura_instance_rollout_state", "ready", &[("state", state)]);
    let waiting = scraped_matches(&ksm, &ns, "ready's rollout to wait", |s| {
        rollout(s, "Waiting") == Some(1.0)
    })
    .await;
    let families = waiting.families();
    assert_eq!(families, PROMISED, "every promised family, and no other");
    assert!(!families.contains(&"kura_instance_ready"));
    assert_eq!(rollout(&waiting, "Admitted"), Some(0.0));
    let applied = waiting.info("ready", "applied_revision");
    assert_ne!(waiting.info("ready", "desired_revision"), applied);

    // Paused: the series says so, from the operator's status.
    let paused_series = |s: &Scrape, name| s.value("kura_instance_paused", name, &[]);
    merge(&instances, "broken", json!({"spec": {"paused": true}})).await;
    let paused = scraped_matches(&ksm, &ns, "broken's series to say paused", |s| {
        paused_series(s, "broken") == Some(1.0)
    })
    .await;
    assert_eq!(paused.info("broken", "phase").as_deref(), Some("Paused"));

    // A pause whose end has passed: the operator resumed (spec.paused stays
    // true) and broken is Stalled again: not paused, and not Ready.
    let past = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(1);
    let patch = json!({"spec": {"replicas": 3, "pause": {"until": past.to_string()}}});
    merge(&instances, "broken", patch).await;
    let ended = scraped_matches(&ksm, &ns, "broken's pause to be over", |s| {
        s.info("broken", "phase").as_deref() == Some("Stalled")
    })
    .await;
    assert_eq!(paused_series(&ended, "broken"), Some(0.0));
    assert_eq!(ended.ready("broken"), Some(0.0));
    drop(ksm);
    drop(op);
    access.remove().await;
    // The dedicated gateways' classes are cluster-scoped: the namespace's
    // deletion does not take them, and the operator is gone.
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    for g in ns
        .api::<KuraGateway>()
        .list(&Default::default())
        .await
        .unwrap()
    {
        let _ = classes
            .delete(&g.spec.ingress_class_name, &Default::default())
            .await;
    }
}
