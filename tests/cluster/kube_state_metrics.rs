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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::monitoring::http_get;
use crate::operator::{Operator, Options, config, free_port, instance, wait_ready};
use crate::support::*;
use kura_operator::api::{
    Condition, ConditionStatus, KuraGateway, KuraInstance, Phase, RolloutState,
};

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

/// Where `kube-state-metrics` is (built on first use, then cached).
fn kube_state_metrics_bin() -> PathBuf {
    let out = Command::new(repo().join("scripts/control-plane.sh"))
        .arg("kube-state-metrics")
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/control-plane.sh kube-state-metrics");
    assert!(out.status.success(), "building kube-state-metrics failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("kube-state-metrics")
}

/// The configuration as the chart renders it (the ConfigMap's `kura.yaml`).
fn rendered_config(namespace: &str) -> String {
    let objects = crate::chart::template(
        "kura",
        namespace,
        &["--set", "kubeStateMetrics.enabled=true"],
    );
    let map = crate::chart::of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|m| {
            m["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-kube-state-metrics"))
        })
        .expect("the chart renders the kube-state-metrics ConfigMap");
    map["data"]["kura.yaml"].as_str().unwrap().to_string()
}

/// kube-state-metrics of the test's own, on this namespace only, with the
/// chart's configuration and nothing else; stopped when dropped.
struct KubeStateMetrics {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for KubeStateMetrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl KubeStateMetrics {
    fn start(dir: &Path, namespace: &str) -> KubeStateMetrics {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("kura.yaml");
        std::fs::write(&file, rendered_config(namespace)).unwrap();
        let (port, telemetry) = (free_port(), free_port());
        let log = std::fs::File::create(dir.join("kube-state-metrics.log")).unwrap();
        let child = Command::new(kube_state_metrics_bin())
            .arg(format!("--kubeconfig={}", kubeconfig_path().display()))
            .arg("--custom-resource-state-only")
            .arg(format!(
                "--custom-resource-state-config-file={}",
                file.display()
            ))
            .arg(format!("--namespaces={namespace}"))
            .args(["--host=127.0.0.1", "--telemetry-host=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--telemetry-port={telemetry}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kube-state-metrics");
        KubeStateMetrics {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    /// The `kura_*` samples of `/metrics` (None while nothing answers).
    async fn scrape(&self) -> Option<Vec<Sample>> {
        let (status, body) = http_get(self.port, "/metrics").await?;
        (status == 200).then(|| parse(&body))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kube-state-metrics.log")).unwrap_or_default()
    }
}

type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq, PartialOrd)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

/// The `kura_*` samples of a text exposition, sorted.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples: Vec<Sample> = text
        .lines()
        .filter(|l| l.starts_with("kura_"))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect(line);
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').expect(line))),
                None => (series, Labels::new()),
            };
            Sample {
                name: name.to_string(),
                labels,
                value: value.parse().expect(line),
            }
        })
        .collect();
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples
}

/// `a="x",b="y\"z"` as a map.
fn parse_labels(text: &str) -> Labels {
    let mut labels = Labels::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect(text) {
                (_, '\\') => value.push(chars.next().expect(text).1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.trim_start_matches(',').to_string(), value);
        rest = &after[end + 1..];
    }
    labels
}

fn sample(name: &str, base: &Labels, extra: &[(&str, Option<&str>)], value: f64) -> Sample {
    let mut labels = base.clone();
    for (k, v) in extra {
        // A label whose path reads nothing is left out, not empty.
        if let Some(v) = v {
            labels.insert(k.to_string(), v.to_string());
        }
    }
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

fn base_labels(kind: &str, namespace: &str, name: &str) -> Labels {
    [
        ("customresource_group", "kura.dev"),
        ("customresource_kind", kind),
        ("customresource_version", "v1alpha1"),
        ("namespace", namespace),
        ("name", name),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `kura_<kind>_condition` (1 True, else 0) per condition, and for instances
/// `_condition_since` (the last transition, Unix seconds).
fn condition_samples(prefix: &str, base: &Labels, conditions: &[Condition]) -> Vec<Sample> {
    let mut out = Vec::new();
    for c in conditions {
        let value = f64::from(u8::from(c.status == ConditionStatus::True));
        let labels = [
            ("condition", Some(c.type_.as_str())),
            ("reason", Some(c.reason.as_str())),
        ];
        out.push(sample(&format!("{prefix}_condition"), base, &labels, value));
        if prefix == "kura_instance" {
            let at: jiff::Timestamp = c.last_transition_time.as_deref().unwrap().parse().unwrap();
            let since = at.as_second() as f64;
            out.push(sample(
                &format!("{prefix}_condition_since"),
                base,
                &labels[..1],
                since,
            ));
        }
    }
    out
}

/// The series the README promises for one instance, from its live object.
fn instance_samples(i: &KuraInstance) -> Vec<Sample> {
    let meta = &i.metadata;
    let base = base_labels(
        "KuraInstance",
        meta.namespace.as_deref().unwrap(),
        meta.name.as_deref().unwrap(),
    );
    let s = i.status.clone().unwrap_or_default();
    let phase = s.phase.map(|p| serde_json::to_value(p).unwrap());
    let info = [
        ("account", Some(i.spec.account.as_str())),
        ("region", Some(i.spec.region.as_str())),
        ("phase", phase.as_ref().and_then(|p| p.as_str())),
        ("desired_revision", s.desired_revision_short.as_deref()),
        ("applied_revision", s.applied_revision_short.as_deref()),
        (
            "ingress_class",
            s.gateway.as_ref().map(|g| g.ingress_class_name.as_str()),
        ),
    ];
    let mut out = vec![
        sample("kura_instance_info", &base, &info, 1.0),
        sample(
            "kura_instance_paused",
            &base,
            &[],
            f64::from(u8::from(i.spec.paused)),
        ),
        sample(
            "kura_instance_generation",
            &base,
            &[],
            meta.generation.unwrap() as f64,
        ),
    ];
    if let Some(g) = s.observed_generation {
        out.push(sample(
            "kura_instance_observed_generation",
            &base,
            &[],
            g as f64,
        ));
    }
    out.extend(condition_samples("kura_instance", &base, &s.conditions));
    // A StateSet: every state, 1 for the current one; nothing without a record.
    for (state, name) in [
        (RolloutState::Waiting, "Waiting"),
        (RolloutState::Admitted, "Admitted"),
    ] {
        if let Some(r) = &s.rollout {
            let value = f64::from(u8::from(r.state == state));
            let labels = [("state", Some(name))];
            out.push(sample("kura_instance_rollout_state", &base, &labels, value));
        }
    }
    out
}

fn gateway_samples(g: &KuraGateway) -> Vec<Sample> {
    let meta = &g.metadata;
    let base = base_labels(
        "KuraGateway",
        meta.namespace.as_deref().unwrap(),
        meta.name.as_deref().unwrap(),
    );
    let class = [("ingress_class", Some(g.spec.ingress_class_name.as_str()))];
    let mut out = vec![sample("kura_gateway_info", &base, &class, 1.0)];
    let conditions = g
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    out.extend(condition_samples("kura_gateway", &base, &conditions));
    out
}

/// Every sample the namespace's objects give now, sorted.
async fn expected(ns: &TestNamespace) -> Option<Vec<Sample>> {
    let lp = ListParams::default();
    let instances = ns.api::<KuraInstance>().list(&lp).await.ok()?;
    let gateways = ns.api::<KuraGateway>().list(&lp).await.ok()?;
    let mut out: Vec<Sample> = instances.items.iter().flat_map(instance_samples).collect();
    out.extend(gateways.items.iter().flat_map(gateway_samples));
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Some(out)
}

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

/// One scrape's samples of the test namespace.
struct Scrape(Vec<Sample>);

impl Scrape {
    /// The value of the one sample of `name` for instance `instance` whose
    /// labels include `labels`.
    fn value(&self, name: &str, instance: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = self.0.iter().filter(|s| {
            s.name == name
                && s.labels["name"] == instance
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        });
        let first = found.next()?;
        assert!(
            found.next().is_none(),
            "several {name} {labels:?} of {instance}"
        );
        Some(first.value)
    }

    fn label(&self, name: &str, instance: &str, label: &str) -> Option<String> {
        let s = self
            .0
            .iter()
            .find(|s| s.name == name && s.labels["name"] == instance)?;
        s.labels.get(label).cloned()
    }

    fn families(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.0.iter().map(|s| s.name.as_str()).collect();
        names.dedup();
        names
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
    let ksm = KubeStateMetrics::start(&dir, &ns.name);
    let first = scraped_matches(
        &ksm,
        &ns,
        "the series of a Ready and a Stalled instance",
        |s| {
            s.value(
                "kura_instance_condition",
                "broken",
                &[("condition", "Ready")],
            ) == Some(0.0)
        },
    )
    .await;
    assert_eq!(
        first
            .label("kura_instance_info", "ready", "phase")
            .as_deref(),
        Some("Ready")
    );
    assert_eq!(
        first
            .label("kura_instance_info", "broken", "phase")
            .as_deref(),
        Some("Stalled")
    );
    assert_eq!(
        first.value(
            "kura_instance_condition",
            "ready",
            &[("condition", "Ready")]
        ),
        Some(1.0)
    );
    assert_eq!(first.value("kura_instance_paused", "ready", &[]), Some(0.0));
    // "Not Ready since": the Ready condition's last transition, while it is 0.
    let not_ready_since = first
        .value(
            "kura_instance_condition_since",
            "broken",
            &[("condition", "Ready")],
        )
        .unwrap();
    assert!(not_ready_since > 1.7e9, "{not_ready_since}");
    let ready_info = |s: &Scrape, label| s.label("kura_instance_info", "ready", label);
    assert!(ready_info(&first, "desired_revision").is_some_and(|r| r.len() >= 7));
    assert_eq!(
        ready_info(&first, "desired_revision"),
        ready_info(&first, "applied_revision")
    );
    assert!(ready_info(&first, "ingress_class").is_some());

    // Fixed: Ready, and so is its series; its "not Ready since" is gone.
    instances
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let fixed = scraped_matches(&ksm, &ns, "broken's series to say Ready", |s| {
        s.value(
            "kura_instance_condition",
            "broken",
            &[("condition", "Ready")],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(
        fixed
            .label("kura_instance_info", "broken", "phase")
            .as_deref(),
        Some("Ready")
    );
    let since = fixed.value(
        "kura_instance_condition_since",
        "broken",
        &[("condition", "Ready")],
    );
    assert!(since.unwrap() > not_ready_since, "the transition moved");

    // An operator change (the configuration's) waits for ready's window:
    // its rollout state says Waiting, its revisions differ.
    op.set_config(&fleet_config(&ns.name, "320Mi"));
    let waiting = scraped_matches(&ksm, &ns, "ready's rollout to wait", |s| {
        s.value(
            "kura_instance_rollout_state",
            "ready",
            &[("state", "Waiting")],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(
        waiting.families(),
        PROMISED,
        "every promised family, and no other"
    );
    assert!(!waiting.families().contains(&"kura_instance_ready"));
    let state = |s| waiting.value("kura_instance_rollout_state", "ready", &[("state", s)]);
    assert_eq!(state("Admitted"), Some(0.0));
    assert_ne!(
        ready_info(&waiting, "desired_revision"),
        ready_info(&waiting, "applied_revision")
    );

    // Paused: the gauge says so.
    instances
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let paused = scraped_matches(&ksm, &ns, "broken's series to say paused", |s| {
        s.value("kura_instance_paused", "broken", &[]) == Some(1.0)
    })
    .await;
    assert_eq!(
        paused
            .label("kura_instance_info", "broken", "phase")
            .as_deref(),
        Some("Paused")
    );
    drop(ksm);
    drop(op);
}
