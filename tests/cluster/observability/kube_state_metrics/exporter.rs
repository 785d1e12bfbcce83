//! kube-state-metrics run by the test, and what it exports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::observability::monitoring::http_get;
use crate::operator::free_port;
use crate::support::*;

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
    let objects = crate::operations::chart::template(
        "kura",
        namespace,
        &["--set", "kubeStateMetrics.enabled=true"],
    );
    let map = crate::operations::chart::of_kind(&objects, "ConfigMap")
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
pub struct KubeStateMetrics {
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
    /// As the identity `kubeconfig` names, in `dir` (removed on drop).
    pub fn start(dir: &Path, namespace: &str, kubeconfig: &Path) -> KubeStateMetrics {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("kura.yaml");
        std::fs::write(&file, rendered_config(namespace)).unwrap();
        let (port, telemetry) = (free_port(), free_port());
        let log = std::fs::File::create(dir.join("kube-state-metrics.log")).unwrap();
        let child = Command::new(kube_state_metrics_bin())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
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

    /// Where it serves `/metrics`, as a scrape target.
    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `kura_*` samples of `/metrics` (None while nothing answers).
    pub async fn scrape(&self) -> Option<Vec<Sample>> {
        let (status, body) = http_get(self.port, "/metrics").await?;
        (status == 200).then(|| parse(&body))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kube-state-metrics.log")).unwrap_or_default()
    }
}

pub type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq, PartialOrd)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

/// The `kura_*` samples of a text exposition, sorted.
pub fn parse(text: &str) -> Vec<Sample> {
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

/// One scrape's samples of the test namespace.
pub struct Scrape(pub Vec<Sample>);

impl Scrape {
    /// The value of the one sample of `name` for instance `instance` whose
    /// labels include `labels`.
    pub fn value(&self, name: &str, instance: &str, labels: &[(&str, &str)]) -> Option<f64> {
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

    pub fn label(&self, name: &str, instance: &str, label: &str) -> Option<String> {
        let s = self
            .0
            .iter()
            .find(|s| s.name == name && s.labels["name"] == instance)?;
        s.labels.get(label).cloned()
    }

    /// A label of `kura_instance_info`.
    pub fn info(&self, instance: &str, label: &str) -> Option<String> {
        self.label("kura_instance_info", instance, label)
    }

    /// `kura_instance_condition{condition="Ready"}`.
    pub fn ready(&self, instance: &str) -> Option<f64> {
        let ready = [("condition", "Ready")];
        self.value("kura_instance_condition", instance, &ready)
    }

    /// `kura_instance_condition_since{condition="Ready"}`.
    pub fn ready_since(&self, instance: &str) -> Option<f64> {
        let ready = [("condition", "Ready")];
        self.value("kura_instance_condition_since", instance, &ready)
    }

    pub fn families(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.0.iter().map(|s| s.name.as_str()).collect();
        names.dedup();
        names
    }
}
