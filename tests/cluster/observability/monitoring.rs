//! The chart's monitoring, checked with Prometheus's own tools (built from its
//! Go module by `scripts/control-plane.sh prometheus`, cached): every shipped
//! alert has promtool unit tests and passes them; and a real Prometheus,
//! scraping the real operator with the shipped rules, sees the stalled-instance
//! alert fire and resolve, and gets series for every query of the shipped
//! dashboard that reads the operator's series and data for kubebuilder's
//! resources dashboard. The dashboard's queries of kube-state-metrics series
//! are evaluated against a real kube-state-metrics by
//! tests/cluster/observability/kube_state_metrics.rs, with the helpers below.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::operator::{Operator, Options, delete_shared_class, free_port, instance, shared_class};
use crate::support::*;
use kura_core::api::KuraInstance;

const ALERTS: &str = "charts/kura-operator/files/alerts.yaml";
const ALERT_TESTS: &str = "hack/monitoring/alerts_test.yaml";
const DASHBOARD: &str = "charts/kura-operator/files/dashboard.json";

/// Where `prometheus` and `promtool` are (built on first use, then cached).
fn prometheus_bin() -> PathBuf {
    let out = Command::new(repo().join("scripts/control-plane.sh"))
        .arg("prometheus")
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/control-plane.sh prometheus");
    assert!(out.status.success(), "building prometheus failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new(prometheus_bin().join("promtool"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The names of the alerts the chart ships.
fn shipped_alerts() -> Vec<String> {
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(ALERTS)).unwrap()).unwrap();
    let mut names = Vec::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            if let Some(alert) = rule["alert"].as_str() {
                names.push(alert.to_string());
            }
        }
    }
    names
}

#[test]
fn every_shipped_alert_passes_its_promtool_unit_tests() {
    let (ok, out) = promtool(&["check", "rules", ALERTS]);
    assert!(ok, "promtool check rules:\n{out}");
    let tests: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(ALERT_TESTS)).unwrap()).unwrap();
    let tested: Vec<&str> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().into_iter().flatten())
        .filter(|a| a["exp_alerts"].as_sequence().is_some_and(|e| !e.is_empty()))
        .filter_map(|a| a["alertname"].as_str())
        .collect();
    let alerts = shipped_alerts();
    assert!(alerts.len() >= 9, "{alerts:?}");
    for alert in &alerts {
        assert!(
            tested.contains(&alert.as_str()),
            "{alert} has no promtool test in {ALERT_TESTS} that sees it fire"
        );
    }
    let (ok, out) = promtool(&["test", "rules", ALERT_TESTS]);
    assert!(ok, "promtool test rules:\n{out}");
}

/// The target labels a Kubernetes service discovery (the chart's
/// ServiceMonitor) gives the operator's series, which dashboards select on.
const POD_NAMESPACE: &str = "kura-system";
const POD: &str = "kura-operator-0";

/// The queries of kubebuilder's `grafana/v1-alpha` resources dashboard
/// (controller-resources-metrics.json): the panel and its expression.
const KUBEBUILDER_RESOURCES: [(&str, &str); 2] = [
    (
        "Controller CPU Usage",
        "rate(process_cpu_seconds_total{job=\"$job\", namespace=\"$namespace\", pod=\"$pod\"}[5m]) * 100",
    ),
    (
        "Controller Memory Usage",
        "process_resident_memory_bytes{job=\"$job\", namespace=\"$namespace\", pod=\"$pod\"}",
    ),
];

/// Where the shipped alerts' runbooks are published (the chart's default
/// `prometheusRule.runbookBaseUrl`).
const RUNBOOK_BASE: &str = "https://github.com/kura-dev/kura-operator/blob/main/docs/runbooks";

/// Every shipped alert links its runbook, a page of docs/runbooks that says
/// what the alert means, how to confirm it and what to do.
#[test]
fn every_shipped_alert_links_its_runbook() {
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(repo().join(ALERTS)).unwrap()).unwrap();
    let alerts: Vec<&serde_yaml::Value> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect();
    assert!(alerts.len() >= 9);
    for rule in alerts {
        let alert = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
        assert_eq!(url, format!("{RUNBOOK_BASE}/{alert}.md"), "{alert}");
        let page = repo().join(format!("docs/runbooks/{alert}.md"));
        let text = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{alert}: {}: {e}", page.display()));
        for section in [
            format!("# {alert}\n"),
            "## What it means".into(),
            "## How to confirm".into(),
            "## What to do".into(),
        ] {
            assert!(
                text.contains(&section),
                "{}: no {section:?}",
                page.display()
            );
        }
    }
}

/// A Prometheus of the test's own, scraping every second and evaluating the
/// shipped rules every second; stopped when dropped.
pub(crate) struct Prometheus {
    child: Child,
    port: u16,
    _dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

impl Prometheus {
    /// Scraping the operator at `target` as the job `kura-operator`, with
    /// the target labels of a Kubernetes service discovery.
    async fn start(dir: &Path, target: &str) -> Prometheus {
        let job = format!(
            "- job_name: kura-operator\n  static_configs: [{{targets: ['{target}'], \
             labels: {{namespace: {POD_NAMESPACE}, pod: {POD}}}}}]\n"
        );
        Prometheus::start_scraping(dir, &job).await
    }

    /// Scraping what `scrape_configs` (the list of the configuration's
    /// `scrape_configs`, in YAML) names, in `dir` (removed on drop).
    pub(crate) async fn start_scraping(dir: &Path, scrape_configs: &str) -> Prometheus {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [{alerts}]\n\
             scrape_configs:\n{scrape_configs}",
            alerts = repo().join(ALERTS).display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus_bin().join("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            child,
            port,
            _dir: dir.to_path_buf(),
        };
        wait_for(
            "Prometheus to be ready",
            Duration::from_secs(60),
            || async {
                let (status, _) = prometheus.get("/-/ready").await?;
                (status == 200).then_some(())
            },
        )
        .await;
        prometheus
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path).await
    }

    /// The `data` of an API answer.
    async fn api(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await.expect("Prometheus answers");
        assert_eq!(status, 200, "{path}: {body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        answer["data"].clone()
    }

    /// The result of the instant query `expr` (its series).
    pub(crate) async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self
            .api(&format!("/api/v1/query?query={}", percent_encode(expr)))
            .await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The state of the active alert `name` (pending, firing), if any.
    async fn alert(&self, name: &str) -> Option<String> {
        let data = self.api("/api/v1/alerts").await;
        data["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == name)
            .map(|a| a["state"].as_str().unwrap_or_default().to_string())
    }
}

/// `GET path` on 127.0.0.1:`port` (HTTP/1.0: the body is not chunked): the
/// status code and body, or None when nothing answers (yet).
pub(crate) async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    conn.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    conn.read_to_string(&mut response).await.ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join(DASHBOARD)).unwrap()).unwrap()
}

/// The dashboard's variables as Grafana fills them for these tests' Prometheus:
/// `job` the operator's scrape job, every other one All (its `allValue`, a
/// regular expression its queries match with `=~`), unless `chosen` gives it
/// a value; and Grafana's `$__rate_interval`.
fn variable_values(dashboard: &Value, chosen: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let name = variable["name"].as_str().unwrap();
        let value = match chosen.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => value.to_string(),
            None if name == "job" => "kura-operator".to_string(),
            None => {
                assert_eq!(variable["includeAll"], true, "variable {name}: no All");
                let all = variable["allValue"].as_str();
                all.unwrap_or_else(|| panic!("variable {name}: no allValue"))
                    .to_string()
            }
        };
        values.insert(name.to_string(), value);
    }
    for (name, _) in chosen {
        assert!(
            values.contains_key(*name),
            "the dashboard has no variable {name}"
        );
    }
    values.insert("__rate_interval".into(), "1m".into());
    values
}

/// `expr` with its variables (`$name`, `${name}`) replaced by `values`, as
/// Grafana does. `$1` and the like are left as they are (label_replace's
/// references: Grafana has no such variable), and so is a `$` without a
/// name; any other unknown name fails.
fn substitute(expr: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').unwrap_or_else(|| panic!("{expr}"));
                (&braced[..end], &braced[end + 1..])
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push('$');
            out.push_str(name);
        } else {
            let value = values.get(name);
            out.push_str(value.unwrap_or_else(|| panic!("unknown variable ${name} in {expr}")));
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// Every query of the shipped dashboard (panel title, expression), its
/// variables as Grafana would fill them (`variable_values`).
pub(crate) fn dashboard_queries(chosen: &[(&str, &str)]) -> Vec<(String, String)> {
    let dashboard = dashboard();
    let values = variable_values(&dashboard, chosen);
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = substitute(target["expr"].as_str().unwrap(), &values);
            queries.push((panel["title"].as_str().unwrap().to_string(), expr));
        }
    }
    queries
}

/// The queries of the dashboard's variables, `label_values(selector,
/// label)`: the variable, its selector (the variables before it filled in as
/// in `dashboard_queries`) and the label whose values it lists.
pub(crate) fn dashboard_variable_queries(chosen: &[(&str, &str)]) -> Vec<(String, String, String)> {
    let dashboard = dashboard();
    let values = variable_values(&dashboard, chosen);
    let mut queries = Vec::new();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().unwrap();
        assert_eq!(variable["definition"].as_str(), Some(query));
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("not label_values(selector, label): {query}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        queries.push((
            variable["name"].as_str().unwrap().to_string(),
            substitute(selector.trim(), &values),
            label.trim().to_string(),
        ));
    }
    queries
}

/// The values of `label` over the series of `selector`, sorted, as
/// Grafana's `label_values` lists them.
pub(crate) async fn label_values(
    prometheus: &Prometheus,
    selector: &str,
    label: &str,
) -> Vec<String> {
    let mut values: Vec<String> = prometheus
        .query(selector)
        .await
        .iter()
        .filter_map(|s| s["metric"][label].as_str().map(String::from))
        .collect();
    values.sort();
    values.dedup();
    values
}

/// The families kube-state-metrics exports with the chart's configuration
/// (files/kube-state-metrics.yaml): `<metricNamePrefix>_<name>`.
fn kube_state_metrics_families() -> Vec<String> {
    let config: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("charts/kura-operator/files/kube-state-metrics.yaml"))
            .unwrap(),
    )
    .unwrap();
    let mut families = Vec::new();
    for resource in config["spec"]["resources"].as_sequence().unwrap() {
        let prefix = resource["metricNamePrefix"].as_str().unwrap();
        for metric in resource["metrics"].as_sequence().unwrap() {
            families.push(format!("{prefix}_{}", metric["name"].as_str().unwrap()));
        }
    }
    families
}

/// Whether `expr` reads a family kube-state-metrics exports (a whole name:
/// `kura_gateway_reconciles_total` is the operator's own): such a query has
/// series only where kube-state-metrics runs with the chart's configuration.
pub(crate) fn reads_kube_state_metrics(expr: &str) -> bool {
    let families = kube_state_metrics_families();
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .any(|word| families.iter().any(|f| f == word))
}

#[test]
fn dashboard_variables_are_filled_in_as_grafana_does() {
    let values = variable_values(&dashboard(), &[("instance", "acme")]);
    assert_eq!(values["job"], "kura-operator");
    assert_eq!(values["namespace"], ".+", "All");
    assert_eq!(values["instance"], "acme");
    let expr = r#"label_replace(x{namespace=~"$namespace", name=~"${instance}"}[$__rate_interval], "r", "$1", "l", "(.+)")"#;
    assert_eq!(
        substitute(expr, &values),
        r#"label_replace(x{namespace=~".+", name=~"acme"}[1m], "r", "$1", "l", "(.+)")"#
    );
    assert!(reads_kube_state_metrics(
        "max(kura_instance_condition_since{})"
    ));
    assert!(!reads_kube_state_metrics(
        "rate(kura_gateway_reconciles_total[1m]) + kura_instances"
    ));
}

#[tokio::test]
async fn a_real_prometheus_sees_the_stalled_alert_fire_and_resolve_and_every_dashboard_query_has_series()
 {
    let ns = TestNamespace::new("monitoring").await;
    let classes = shared_class(&ns).await;
    let _policy = crate::faults::stall::deny_big_statefulsets(&ns).await;
    let options = Options {
        args: ["--retry-budget", "1", "--stall-window", "60s"]
            .map(String::from)
            .to_vec(),
        // leader_election_master_status is exported with an election only.
        lease_duration: Some(Duration::from_secs(15)),
        ..Options::default()
    };
    let op = Operator::start_in(&ns.name, options);
    let dir = std::env::temp_dir().join(format!("kura-prometheus-{}", ns.name));
    let prometheus = Prometheus::start(&dir, &format!("127.0.0.1:{}", op.metrics_port)).await;
    wait_for("a first scrape", Duration::from_secs(60), || async {
        let up = prometheus.query("up{job=\"kura-operator\"} == 1").await;
        (!up.is_empty()).then_some(())
    })
    .await;

    // Rejected by the policy on every try: Stalled after one attempt.
    let instances: Api<KuraInstance> = ns.api();
    let mut spec = instance("acme", "registry.example/kura:1.0.0");
    spec["spec"]["replicas"] = json!(3);
    apply_json(&instances, "test", spec).await.unwrap();
    wait_for(
        "KuraInstancesStalled to fire",
        Duration::from_secs(120),
        || async { (prometheus.alert("KuraInstancesStalled").await? == "firing").then_some(()) },
    )
    .await;
    assert_eq!(
        prometheus.alert("KuraOperatorAbsent").await,
        None,
        "the operator is scraped"
    );

    // Fixed: the instance applies, the alert resolves.
    instances
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    wait_for(
        "KuraInstancesStalled to resolve",
        Duration::from_secs(120),
        || async {
            prometheus
                .alert("KuraInstancesStalled")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;

    // Every dashboard query of the operator's series returns series (a wrong
    // name or label would not); the job variable lists the operator's job.
    let queries: Vec<_> = dashboard_queries(&[])
        .into_iter()
        .filter(|(_, expr)| !reads_kube_state_metrics(expr))
        .collect();
    assert!(queries.len() >= 20, "{queries:?}");
    let jobs = dashboard_variable_queries(&[])
        .into_iter()
        .find(|(name, _, _)| name == "job")
        .unwrap();
    assert_eq!(
        label_values(&prometheus, &jobs.1, &jobs.2).await,
        ["kura-operator"]
    );
    wait_for(
        "every dashboard query to return series",
        Duration::from_secs(90),
        || async {
            for (title, expr) in &queries {
                if prometheus.query(expr).await.is_empty() {
                    eprintln!("no series yet for {title:?}: {expr}");
                    return None;
                }
            }
            Some(())
        },
    )
    .await;

    // kubebuilder's resources dashboard: its variables as Grafana fills them
    // (label_values of controller_runtime_reconcile_total), then its panels
    // get the process's CPU and memory.
    let reconciles = prometheus
        .query(&format!(
            "controller_runtime_reconcile_total{{job=\"kura-operator\", namespace=\"{POD_NAMESPACE}\"}}"
        ))
        .await;
    let pod = reconciles
        .first()
        .and_then(|s| s["metric"]["pod"].as_str())
        .expect("the dashboard's pod variable has a value");
    for (title, expr) in KUBEBUILDER_RESOURCES {
        let expr = expr
            .replace("$job", "kura-operator")
            .replace("$namespace", POD_NAMESPACE)
            .replace("$pod", pod);
        let value = wait_for(
            &format!("kubebuilder's {title:?} to have data"),
            Duration::from_secs(30),
            || async {
                let series = prometheus.query(&expr).await;
                series.first()?["value"][1].as_str()?.parse::<f64>().ok()
            },
        )
        .await;
        assert!(value >= 0.0, "{title}: {expr} = {value}");
        if title.contains("Memory") {
            assert!(value > 1e6, "{title}: {expr} = {value} bytes");
        }
    }
    delete_shared_class(&classes, &ns).await;
}

/// The schema node at `path` under `schema` (an object's properties, an
/// array's items are walked through), if the CRD has it.
fn schema_at<'a>(schema: &'a serde_yaml::Value, path: &[String]) -> Option<&'a serde_yaml::Value> {
    let mut node = schema;
    for part in path {
        while node["type"].as_str() == Some("array") {
            node = &node["items"];
        }
        node = node["properties"].get(part.as_str())?;
    }
    Some(node)
}

/// Every path the kube-state-metrics configuration reads names a field of
/// its kind's CRD schema (metadata aside), and a StateSet's states are the
/// field's enum: a misspelt path would give a series that never appears.
#[test]
fn kube_state_metrics_paths_are_fields_of_the_crds() {
    let config: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("charts/kura-operator/files/kube-state-metrics.yaml"))
            .unwrap(),
    )
    .unwrap();
    let path_of = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect()
    };
    let mut checked = 0;
    for resource in config["spec"]["resources"].as_sequence().unwrap() {
        let kind = resource["groupVersionKind"]["kind"].as_str().unwrap();
        let plural = format!("{}s", kind.to_lowercase());
        let crd: serde_yaml::Value = serde_yaml::from_str(
            &std::fs::read_to_string(repo().join(format!("crds/kura.dev_{plural}.yaml"))).unwrap(),
        )
        .unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut check = |path: Vec<String>, what: &str| {
            if path.first().map(String::as_str) == Some("metadata") {
                return;
            }
            assert!(
                schema_at(schema, &path).is_some(),
                "{kind} {what}: {path:?} is not in the CRD"
            );
            checked += 1;
        };
        for metric in resource["metrics"].as_sequence().unwrap() {
            let name = metric["name"].as_str().unwrap();
            let each = &metric["each"];
            let kind_of = each["type"].as_str().unwrap();
            let body = match kind_of {
                "Info" => &each["info"],
                "Gauge" => &each["gauge"],
                "StateSet" => &each["stateSet"],
                other => panic!("{other}"),
            };
            let base = body.get("path").map(&path_of).unwrap_or_default();
            if !base.is_empty() {
                check(base.clone(), name);
            }
            if let Some(value) = body.get("valueFrom") {
                check([base.clone(), path_of(value)].concat(), name);
            }
            if let Some(labels) = body["labelsFromPath"].as_mapping() {
                for (label, path) in labels {
                    let label = label.as_str().unwrap();
                    check(
                        [base.clone(), path_of(path)].concat(),
                        &format!("{name} {label}"),
                    );
                }
            }
            if kind_of == "StateSet" {
                let states: Vec<&str> = body["list"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap())
                    .collect();
                let field = schema_at(schema, &base).unwrap();
                let allowed: Vec<&str> = field["enum"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap())
                    .collect();
                // Every state a value the field can take (a series may
                // follow some of them only, as kura_instance_paused does).
                let unknown: Vec<&&str> = states.iter().filter(|s| !allowed.contains(s)).collect();
                assert!(
                    unknown.is_empty(),
                    "{kind} {name}: {unknown:?} not in {allowed:?}"
                );
            }
        }
    }
    assert!(checked >= 15, "{checked} paths checked");
}
