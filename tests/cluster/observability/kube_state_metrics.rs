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
//!
//! kube-state-metrics runs with the access files/kube-prometheus-stack-values.yaml
//! gives it (`rbac.extraRules`) and no more. A real Prometheus scrapes it (with
//! `honor_labels`, as kube-prometheus-stack's ServiceMonitor does) and the
//! operator, and evaluates every query of the shipped dashboard that reads
//! these series, its variables filled in as Grafana does: each has series, the
//! namespace and instance variables list the namespace and its instances and
//! filter every such query, and the rollout panel counts the instance whose
//! rollout is over done, the one waiting for its window not.

mod expected;
mod exporter;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::observability::monitoring::{
    Prometheus, dashboard_queries, dashboard_variable_queries, label_values,
    reads_kube_state_metrics,
};
use crate::operator::{Operator, Options, fleet_config_on, instance, wait_ready};
use crate::support::*;
use expected::expected;
use exporter::{KubeStateMetrics, Sample, Scrape};
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kura_core::api::{KuraGateway, KuraInstance, Phase};

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

/// The region's network and gateway controller: dedicated gateways served
/// by kura-sim, so gateways exist too. Its default pod memory changes below:
/// an operator change that restarts pods, paced by the rollout budget.
const NETWORK: &str = "cloud";
const GATEWAY_CONTROLLER: &str = "kura.dev/sim-ingress";
/// The rollout budget.
const ROLLOUT: &str = "  maxUnavailable: 1\n";

/// The access files/kube-prometheus-stack-values.yaml gives kube-state-metrics
/// (`rbac.extraRules`: the access the chart README lists, as
/// tests/cluster/operations/chart.rs checks), and no more, for the identity it runs as
/// here (the admin impersonates it). Without `customresourcedefinitions` it
/// exports nothing: it finds custom resources through them (its log then
/// says it may not list them).
struct ShippedAccess(Api<ClusterRole>, Api<ClusterRoleBinding>, String);

async fn shipped_access(ns: &TestNamespace) -> ShippedAccess {
    let name = format!("kura-ksm-{}", ns.name);
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(ns.client.clone());
    let values: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            repo().join("charts/kura-operator/files/kube-prometheus-stack-values.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let rules = &values["kube-state-metrics"]["rbac"]["extraRules"];
    assert!(rules.as_array().is_some_and(|r| !r.is_empty()), "{rules}");
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "kube-state-metrics", "namespace": ns.name}],
    });
    apply_json(&roles, "test", role).await.unwrap();
    apply_json(&bindings, "test", binding).await.unwrap();
    ShippedAccess(roles, bindings, name)
}

impl ShippedAccess {
    async fn remove(self) {
        let _ = self.1.delete(&self.2, &Default::default()).await;
        let _ = self.0.delete(&self.2, &Default::default()).await;
    }
}

/// The dashboard's rollout panel.
const ROLLOUT_PANEL: &str = "Rollout: instances done of total";

/// The rollout panel's values (done, of total), its variables `chosen` (All
/// otherwise).
async fn rollout_done_of_total(
    prometheus: &Prometheus,
    chosen: &[(&str, &str)],
) -> Vec<Option<f64>> {
    let mut values = Vec::new();
    for (title, expr) in dashboard_queries(chosen) {
        if title == ROLLOUT_PANEL {
            let series = prometheus.query(&expr).await;
            assert!(series.len() <= 1, "{title}: {expr}: {series:?}");
            let value = series
                .first()
                .and_then(|s| s["value"][1].as_str()?.parse().ok());
            values.push(value);
        }
    }
    assert_eq!(values.len(), 2, "{ROLLOUT_PANEL}: done, and total");
    values
}

/// The dashboard's queries of kube-state-metrics series, its variables
/// `chosen` (All otherwise).
fn per_instance_queries(chosen: &[(&str, &str)]) -> Vec<(String, String)> {
    dashboard_queries(chosen)
        .into_iter()
        .filter(|(_, expr)| reads_kube_state_metrics(expr))
        .collect()
}

/// The dashboard against `prometheus`, while `broken` has taken the
/// operator's change (done) and `ready` waits for its window (not done).
async fn the_dashboard_shows_the_instances(prometheus: &Prometheus, ns: &TestNamespace) {
    let queries = per_instance_queries(&[]);
    assert!(queries.len() >= 8, "{queries:#?}");
    wait_for(
        "every per-instance query of the dashboard to have series, and one instance of two done",
        T,
        || async {
            for (title, expr) in &queries {
                if prometheus.query(expr).await.is_empty() {
                    eprintln!("no series yet for {title:?}: {expr}");
                    return None;
                }
            }
            let counts = rollout_done_of_total(prometheus, &[]).await;
            if counts != [Some(1.0), Some(2.0)] {
                eprintln!("{ROLLOUT_PANEL}: {counts:?}");
                return None;
            }
            Some(())
        },
    )
    .await;

    // The variables list the namespace and its instances (the namespace
    // chosen or All); a namespace without instances has none.
    let elsewhere = format!("{}-elsewhere", ns.name);
    let listed = |chosen: &str| {
        let chosen = chosen.to_string();
        async move {
            let mut listed = BTreeMap::new();
            for (name, selector, label) in
                dashboard_variable_queries(&[("namespace", chosen.as_str())])
            {
                if reads_kube_state_metrics(&selector) {
                    listed.insert(name, label_values(prometheus, &selector, &label).await);
                }
            }
            listed
        }
    };
    let all = listed(".+").await;
    assert_eq!(all.keys().collect::<Vec<_>>(), ["instance", "namespace"]);
    assert_eq!(all["namespace"], [ns.name.as_str()]);
    assert_eq!(all["instance"], ["broken", "ready"]);
    assert_eq!(listed(&ns.name).await["instance"], ["broken", "ready"]);
    assert!(listed(&elsewhere).await["instance"].is_empty());

    // Every query follows the variables: one instance chosen, its rows
    // alone; another namespace, nothing.
    let chosen = [("namespace", ns.name.as_str()), ("instance", "ready")];
    for (title, expr) in per_instance_queries(&chosen) {
        let series = prometheus.query(&expr).await;
        assert!(!series.is_empty(), "{title}: {expr}");
        for s in &series {
            let name = &s["metric"]["name"];
            assert!(name.is_null() || name == "ready", "{title}: {expr}: {s}");
        }
    }
    for (title, expr) in per_instance_queries(&[("namespace", elsewhere.as_str())]) {
        let series = prometheus.query(&expr).await;
        assert!(series.is_empty(), "{title}: {expr}: {series:?}");
    }
    assert_eq!(
        rollout_done_of_total(prometheus, &chosen).await,
        [Some(0.0), Some(1.0)]
    );
    let broken = [("instance", "broken")];
    assert_eq!(
        rollout_done_of_total(prometheus, &broken).await,
        [Some(1.0), Some(1.0)]
    );

    // The table: a row per instance from each query, and a rollout state
    // for the one in a rollout alone.
    for (title, expr) in dashboard_queries(&[]) {
        if title != "Instances" {
            continue;
        }
        let mut rows: Vec<String> = prometheus
            .query(&expr)
            .await
            .iter()
            .map(|s| {
                let name = s["metric"]["name"].as_str().unwrap_or_default();
                match s["metric"]["state"].as_str() {
                    Some(state) => format!("{name} {state}"),
                    None => name.to_string(),
                }
            })
            .collect();
        rows.sort();
        if expr.contains("kura_instance_rollout_state") {
            assert_eq!(rows, ["ready Waiting"], "{expr}");
        } else {
            assert_eq!(rows, ["broken", "ready"], "{expr}");
        }
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
    let _policy = crate::faults::stall::deny_big_statefulsets(&ns).await;
    let options = Options {
        args: ["--retry-budget", "1", "--stall-window", "60s"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    };
    let op = Operator::start_with(
        &ns.name,
        &fleet_config_on(&ns.name, NETWORK, GATEWAY_CONTROLLER, "256Mi", ROLLOUT),
        &[],
        options,
    );
    let instances: Api<KuraInstance> = ns.api();
    // `ready` serves; its window is closed, so an operator change waits.
    // `broken` is refused by the policy on every try: Stalled.
    let mut ready = instance("ready", "registry.example/kura:1.0.0");
    ready["spec"]["account"] = json!(format!("ready-{}", ns.name));
    ready["spec"]["maintenanceWindow"] = crate::rollout::windows::closed_window();
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
    let access = shipped_access(&ns).await;
    let kubeconfig = crate::support::impersonating_kubeconfig(&dir, &ns.name, "kube-state-metrics");
    let ksm = KubeStateMetrics::start(&dir, &ns.name, &kubeconfig);
    let jobs = format!(
        "- job_name: kube-state-metrics\n  honor_labels: true\n  static_configs: [{{targets: ['{}']}}]\n\
         - job_name: kura-operator\n  static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
        ksm.target(),
        op.metrics_port
    );
    let prometheus_dir = std::env::temp_dir().join(format!("kura-ksm-prometheus-{}", ns.name));
    let prometheus = Prometheus::start_scraping(&prometheus_dir, &jobs).await;
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
    op.set_config(&fleet_config_on(
        &ns.name,
        NETWORK,
        GATEWAY_CONTROLLER,
        "320Mi",
        ROLLOUT,
    ));
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
    the_dashboard_shows_the_instances(&prometheus, &ns).await;

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
    drop(prometheus);
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
