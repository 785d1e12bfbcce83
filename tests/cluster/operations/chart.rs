//! The Helm chart (charts/kura-operator) with the real `helm` and the real
//! control plane: lint, schema, rendering, server-side dry run, install under
//! the `restricted` Pod Security profile, and RBAC as the operator would use it.
//! The operator itself does not run here (no image can be built): these tests
//! prove what the chart gives it.

mod install;
pub(crate) mod rbac;
mod render;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_yaml::Value;

use crate::support::*;

pub fn chart_dir() -> PathBuf {
    repo().join("charts/kura-operator")
}

/// What a command printed, and whether it succeeded.
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(cmd: &mut Command, stdin: Option<&str>) -> Output {
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait for command");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The cached helm, pointed at the test control plane.
pub fn helm(args: &[&str]) -> Output {
    run(
        Command::new(tool("helm"))
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args(args),
        None,
    )
}

pub fn kubectl_run(args: &[&str], stdin: Option<&str>) -> Output {
    run(
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args(args),
        stdin,
    )
}

/// The Kubernetes version `helm template` and `helm lint` render for: the
/// plane's minor. (The cached helm is built from its Go module without the
/// release's ldflags, so its own default is 1.20, which the chart's
/// `kubeVersion` refuses.)
pub const KUBE_VERSION: &str = "1.36.0";

/// `helm template` of the chart as text; panics (with helm's message) on failure.
pub fn template_text(release: &str, namespace: &str, extra: &[&str]) -> String {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "-n",
        namespace,
        "--kube-version",
        KUBE_VERSION,
    ];
    args.extend_from_slice(extra);
    let out = helm(&args);
    assert!(out.ok, "helm {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `helm template` of the chart, one YAML value per object.
pub fn template(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(&template_text(release, namespace, extra))
        .map(|doc| Value::deserialize(doc).expect("helm output is YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The chart's two ClusterRoles for dedicated gateways, rendered for release
/// `release` in `namespace` and applied as they are; their names, for the
/// operator's `--gateway-role` and `--gateway-cluster-role`. Cluster-scoped:
/// the caller deletes them (label `app.kubernetes.io/instance=<release>`,
/// [`ClusterScopedCleanup`]), on the plane of `kubeconfig` (the test plane's
/// when `None`).
pub fn apply_gateway_roles(
    release: &str,
    namespace: &str,
    kubeconfig: Option<&std::path::Path>,
) -> [String; 2] {
    let role = format!("{namespace}-{release}-kura-operator-gateway");
    let names = [role.clone(), format!("{role}-cluster")];
    let objects = template(release, namespace, &["-s", "templates/rbac.yaml"]);
    let roles: Vec<String> = of_kind(&objects, "ClusterRole")
        .into_iter()
        .filter(|r| names.iter().any(|n| r["metadata"]["name"] == n.as_str()))
        .map(|r| serde_yaml::to_string(r).unwrap())
        .collect();
    assert_eq!(roles.len(), 2, "the chart's gateway ClusterRoles {names:?}");
    let kubeconfig = kubeconfig.map_or_else(kubeconfig_path, |k| k.to_path_buf());
    let out = run(
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["apply", "-f", "-"]),
        Some(&roles.join("---\n")),
    );
    assert!(out.ok, "applying the gateway ClusterRoles: {}", out.stderr);
    names
}

pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Uninstalls a Helm release when dropped (its ClusterRoles outlive the
/// namespace otherwise), also when the test fails.
pub struct Release {
    pub name: String,
    pub namespace: String,
}

impl Release {
    /// `helm install` with the CRDs left out (`crds.enabled=false`): support
    /// installs them from crds/, and concurrent tests share them.
    pub fn install(name: &str, namespace: &str, extra: &[&str]) -> Release {
        let chart = chart_dir();
        let mut args = vec![
            "install",
            name,
            chart.to_str().unwrap(),
            "-n",
            namespace,
            "--set",
            "crds.enabled=false",
        ];
        args.extend_from_slice(extra);
        let release = Release {
            name: name.into(),
            namespace: namespace.into(),
        };
        let out = helm(&args);
        assert!(out.ok, "helm {args:?} failed: {}", out.stderr);
        release
    }

    pub fn uninstall(&self) -> Output {
        helm(&[
            "uninstall",
            &self.name,
            "-n",
            &self.namespace,
            "--ignore-not-found",
        ])
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.uninstall();
    }
}

/// Deletes cluster-scoped objects rendered for `release` (applied without helm)
/// when dropped.
pub struct ClusterScopedCleanup(pub String);

impl Drop for ClusterScopedCleanup {
    fn drop(&mut self) {
        let _ = kubectl_run(
            &[
                "delete",
                "clusterrole,clusterrolebinding",
                "-l",
                &format!("app.kubernetes.io/instance={}", self.0),
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

#[test]
fn chart_crds_are_copies_of_repo_crds() {
    let listing = |dir: PathBuf| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let repo_crds = listing(repo().join("crds"));
    let chart_crds = listing(chart_dir().join("files/crds"));
    assert!(!repo_crds.is_empty(), "crds/ has no CRDs");
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&repo_crds),
        names(&chart_crds),
        "charts/kura-operator/files/crds must hold exactly crds/: run scripts/sync-chart-crds.sh"
    );
    for ((name, a), (_, b)) in repo_crds.iter().zip(&chart_crds) {
        assert!(
            a == b,
            "charts/kura-operator/files/crds/{name} differs from crds/{name}: run scripts/sync-chart-crds.sh"
        );
    }
}

#[test]
fn helm_lint_passes_also_strict() {
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    for values in [
        &[][..],
        &[
            "--set",
            "replicas=3,watchNamespace=apps,serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true,kubeStateMetrics.enabled=true",
        ][..],
    ] {
        for strict in [false, true] {
            let mut args = vec!["lint", chart, "--kube-version", KUBE_VERSION];
            if strict {
                args.push("--strict");
            }
            args.extend_from_slice(values);
            let out = helm(&args);
            assert!(
                out.ok && out.stdout.contains("0 chart(s) failed"),
                "helm {args:?}:\n{}{}",
                out.stdout,
                out.stderr
            );
        }
    }
}

#[tokio::test]
async fn helm_template_is_accepted_by_server_dry_run() {
    let ns = TestNamespace::new("chart-dry").await;
    // The default (all namespaces, one replica, CRDs included) and namespaced
    // mode with leader election and a PodDisruptionBudget.
    for extra in [
        vec![],
        vec![
            "--set".into(),
            format!("replicas=2,watchNamespace={}", ns.name),
        ],
    ] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let manifests = template_text(&ns.name, &ns.name, &extra);
        let kinds: Vec<String> = template(&ns.name, &ns.name, &extra)
            .iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .collect();
        let out = kubectl_run(&["apply", "--dry-run=server", "-f", "-"], Some(&manifests));
        assert!(
            out.ok,
            "server dry run rejected the chart ({extra:?}):\n{}{}",
            out.stdout, out.stderr
        );
        // kubectl prints one line per object; every rendered object was checked.
        assert_eq!(
            out.stdout
                .lines()
                .filter(|l| l.contains("(server dry run)"))
                .count(),
            kinds.len(),
            "{kinds:?}\n{}",
            out.stdout
        );
        if extra.is_empty() {
            assert!(kinds.contains(&"CustomResourceDefinition".to_string()));
        } else {
            assert!(kinds.contains(&"PodDisruptionBudget".to_string()));
            assert!(kinds.contains(&"Role".to_string()));
        }
    }
    // A dry run persists nothing.
    let out = kubectl_run(
        &[
            "get",
            "all,configmaps,serviceaccounts",
            "-n",
            &ns.name,
            "-l",
            &format!("app.kubernetes.io/instance={}", ns.name),
            "-o",
            "name",
        ],
        None,
    );
    assert!(
        out.ok && out.stdout.trim().is_empty(),
        "{}{}",
        out.stdout,
        out.stderr
    );
}

/// files/kube-prometheus-stack-values.yaml gives the kube-state-metrics
/// subchart of kube-prometheus-stack the chart's kube-state-metrics
/// configuration, the same document as files/kube-state-metrics.yaml (so the
/// two cannot drift), the access the chart README lists (list and watch of
/// both kinds and of CRDs) and nothing else; the README names the file in
/// the command it gives.
#[test]
fn kube_prometheus_stack_values_carry_the_kube_state_metrics_configuration() {
    let files = chart_dir().join("files");
    let read = |name: &str| -> Value {
        serde_yaml::from_str(&std::fs::read_to_string(files.join(name)).unwrap()).unwrap()
    };
    let values = read("kube-prometheus-stack-values.yaml");
    let keys = |v: &Value| -> Vec<String> {
        v.as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(keys(&values), ["kube-state-metrics"]);
    let ksm = &values["kube-state-metrics"];
    assert_eq!(keys(ksm), ["customResourceState", "rbac"]);
    let state = &ksm["customResourceState"];
    assert_eq!(keys(state), ["enabled", "config"]);
    assert_eq!(state["enabled"], Value::Bool(true));
    assert_eq!(
        state["config"],
        read("kube-state-metrics.yaml"),
        "kube-state-metrics.customResourceState.config of files/kube-prometheus-stack-values.yaml \
         differs from files/kube-state-metrics.yaml"
    );
    assert_eq!(keys(&ksm["rbac"]), ["extraRules"]);
    let rules: Value = serde_yaml::from_str(
        "- {apiGroups: [kura.dev], resources: [kurainstances, kuragateways], verbs: [list, watch]}\n\
         - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [list, watch]}\n",
    )
    .unwrap();
    assert_eq!(ksm["rbac"]["extraRules"], rules);

    // The README's console commands (`$ ...`), continued lines joined as a
    // shell joins them.
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut pending: Option<String> = None;
    for line in readme.lines().map(str::trim) {
        let line = match (pending.take(), line.strip_prefix("$ ")) {
            (Some(head), _) => format!("{head} {line}"),
            (None, Some(command)) => command.to_string(),
            (None, None) => continue,
        };
        match line.strip_suffix('\\') {
            Some(head) => pending = Some(head.trim_end().to_string()),
            None => commands.push(line),
        }
    }
    let command = "helm upgrade --install kube-prometheus-stack prometheus-community/kube-prometheus-stack \
                   -n monitoring --create-namespace --reuse-values \
                   -f charts/kura-operator/files/kube-prometheus-stack-values.yaml";
    assert!(
        commands.iter().any(|c| c == command),
        "the chart README gives `{command}`"
    );
}
