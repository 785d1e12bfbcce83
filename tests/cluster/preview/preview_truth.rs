//! The preview is the truth (issue 21, item 4): what `kura-operator diff -o
//! json` says the operator will write (per object: created, updated, pruned)
//! is exactly what the operator then writes, read from the apiserver's audit
//! log, and once it has converged `diff` has nothing left to change.
//!
//! Every test here runs on a control plane of its own, with an operator that
//! watches every namespace: a fleet spread over two namespaces is what tells
//! `diff -n NS` from `diff -A`, and such an operator on the shared plane would
//! reconcile the other tests' instances. Its kura-sim plays the kubelet (pods
//! Ready) and the ingress controller of the region classes.
//!
//! Each step: the operator is stopped (SIGSTOP: it keeps its caches and its
//! memory, as a running operator does, but neither reads nor writes), the
//! edit is made, `diff` is run with the configuration the operator will then
//! run with, the operator is continued, and once `diff` reports nothing to
//! change (and every instance has been reconciled once more) the operator's
//! writes since the edit are compared with the prediction.
//!
//! `divergence`: four fixed cases, where `diff` and the operator disagreed on
//! main when this was written (`cargo test --test cluster --
//! preview::preview_truth::divergence`). `property`: generated fleets and edits, seeded
//! (`KURA_PREVIEW_SEED`, `KURA_PREVIEW_CASES`).

mod divergence;
pub mod property;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::operator::{NO_ENDPOINT_CHECK, Operator, Options};
use crate::support::{PrivatePlane, wait_for};
use kura_core::keys::GATEWAY_FIELD_MANAGER;
use kura_core::kind::ChildKind;

/// Per object (`Kind namespace/name`), the writes: `create`, `update`, `prune`.
pub type Writes = BTreeMap<String, Vec<String>>;

/// The region classes every bench serves (kura-sim gives their Ingresses an address).
pub const CLASSES: [&str; 2] = ["shared-a", "shared-b"];

/// A private plane, its operator watching every namespace, and where `diff`
/// reads its configuration. Fields drop in order: the operator stops first.
pub struct Bench {
    pub op: Operator,
    pub client: Client,
    pub dir: PathBuf,
    /// The configuration the operator runs with (and `diff` is given).
    pub config: String,
    pub plane: PrivatePlane,
}

impl Bench {
    /// A plane of its own (port offset `offset`), the region classes, and an
    /// operator (resync 3s) on `config`.
    pub async fn start(name: &str, offset: u16, config: &str, args: &[&str]) -> Bench {
        let plane = PrivatePlane::up(name, offset);
        let client = plane.client().await;
        let classes: Api<IngressClass> = Api::all(client.clone());
        for class in CLASSES {
            classes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "metadata": {"name": class},
                        "spec": {"controller": "kura.dev/sim-ingress"},
                    }))
                    .unwrap(),
                )
                .await
                .unwrap();
        }
        let options = Options {
            kubeconfig: Some(plane.kubeconfig()),
            all_namespaces: true,
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Options::default()
        };
        let op = Operator::start_with(name, config, &[], options);
        let dir = plane.state.join("preview");
        std::fs::create_dir_all(&dir).unwrap();
        Bench {
            op,
            client,
            dir,
            config: config.to_string(),
            plane,
        }
    }

    pub async fn namespace(&self, name: &str, annotations: Value) {
        Api::<Namespace>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": name, "annotations": annotations}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
    }

    /// The operator stops reading and writing (SIGSTOP) until [`Bench::resume`].
    pub fn pause(&self) {
        self.op.signal("-STOP");
    }

    pub fn resume(&self) {
        self.op.signal("-CONT");
    }

    /// The configuration file `diff` reads: what the operator runs with, or
    /// will run with once [`Bench::set_config`] is called.
    pub fn config_file(&self, text: &str) -> PathBuf {
        let path = self.dir.join("config.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The operator's configuration file replaced (it re-reads it within 2s).
    pub fn set_config(&mut self, text: &str) {
        self.config = text.to_string();
        self.op.set_config(text);
    }

    /// `kura-operator diff -o json` on this plane under `config`, scoped by
    /// `scope` (`["-A"]`, `["-n", NS]`): exit code and report.
    pub fn diff(&self, config: &str, scope: &[&str]) -> (i32, Value) {
        let path = self.config_file(config);
        let mut args = scope.to_vec();
        args.extend(["--config", path.to_str().unwrap(), "-o", "json"]);
        let (code, out, err) = crate::preview::diff::diff_raw(&self.plane.kubeconfig(), &args);
        let report = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("diff {args:?} exited {code}: {e}: {out}{err}"));
        (code, report)
    }

    pub fn audit_log(&self) -> PathBuf {
        self.plane.state.join("audit.log")
    }

    /// Waits until `diff -A` (the operator's scope) under the configuration in
    /// force has nothing left to write or delete, then until the operator has
    /// reconciled `instances` more times (its resync), so that a write it would
    /// make after converging is counted too. Returns the last report.
    pub async fn converge(&self, instances: usize, what: &str) -> (i32, Value) {
        let config = self.config.clone();
        let report = wait_for(
            &format!("diff -A to report nothing to change ({what})"),
            Duration::from_secs(120),
            || {
                let (code, report) = self.diff(&config, &["-A"]);
                async move { nothing_to_change(&report).then_some((code, report)) }
            },
        )
        .await;
        self.op
            .wait_for_log_count("outcome=", instances, Duration::from_secs(60))
            .await;
        report
    }
}

/// `diff`'s report has no object to write or delete.
pub fn nothing_to_change(report: &Value) -> bool {
    let s = &report["summary"];
    s["changing"] == 0 && s["objectsWritten"] == 0 && s["objectsPruned"] == 0
}

/// The writes a report predicts, for the instances of `namespaces`.
pub fn predicted(report: &Value, namespaces: &BTreeSet<String>) -> Writes {
    let mut out = Writes::new();
    for i in report["instances"].as_array().unwrap() {
        let instance_ns = i["namespace"].as_str().unwrap();
        if !namespaces.contains(instance_ns) {
            continue;
        }
        for o in i["objects"].as_array().unwrap() {
            let ns = o["namespace"].as_str().unwrap_or(instance_ns);
            out.entry(format!(
                "{} {ns}/{}",
                o["kind"].as_str().unwrap(),
                o["name"].as_str().unwrap()
            ))
            .or_default()
            .push(o["action"].as_str().unwrap().to_string());
        }
    }
    out
}

/// What the operator wrote to the children in `namespaces` since `since`, from
/// the audit log at `log`: every successful create, update (a server-side
/// apply answered 200), create (answered 201) and delete of an object of a
/// kind an instance renders. Status subresources (reports, and the address an
/// apply clears) are not the objects' writes; the gateway controller's
/// applies are not the instance's.
pub fn written(log: &Path, since: jiff::Timestamp, namespaces: &BTreeSet<String>) -> Writes {
    let mut out = Writes::new();
    for w in audited_writes(log, since, namespaces) {
        out.entry(w.object).or_default().push(w.action.to_string());
    }
    out
}

/// One write of [`written`], with when the apiserver received it and the
/// request's URI.
pub struct AuditedWrite {
    /// `Kind namespace/name`.
    pub object: String,
    pub action: &'static str,
    pub at: jiff::Timestamp,
    pub uri: String,
}

/// The writes [`written`] counts, one by one, in the log's order.
pub fn audited_writes(
    log: &Path,
    since: jiff::Timestamp,
    namespaces: &BTreeSet<String>,
) -> Vec<AuditedWrite> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    for e in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let r = &e["objectRef"];
        let Some(ns) = r["namespace"].as_str() else {
            continue;
        };
        let code = e["responseStatus"]["code"].as_i64().unwrap_or(0);
        let at = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let user = e["user"]["username"].as_str().unwrap_or("");
        let uri = e["requestURI"].as_str().unwrap_or("");
        let Some(at) = at.filter(|t| *t >= since) else {
            continue;
        };
        if !namespaces.contains(ns)
            || e["stage"] != "ResponseComplete"
            || !r["subresource"].is_null()
            || user.starts_with("system:")
            || !(200..300).contains(&code)
            || uri.contains(&format!("fieldManager={GATEWAY_FIELD_MANAGER}"))
        {
            continue;
        }
        let resource = r["resource"].as_str().unwrap_or("");
        let Some(kind) = ChildKind::ALL.into_iter().find(|k| k.plural() == resource) else {
            continue;
        };
        let action = match e["verb"].as_str().unwrap_or("") {
            "create" => "create",
            "patch" if code == 201 => "create",
            "patch" | "update" => "update",
            "delete" => "prune",
            _ => continue,
        };
        out.push(AuditedWrite {
            object: format!("{} {ns}/{}", kind.kind(), r["name"].as_str().unwrap_or("")),
            action,
            at,
            uri: uri.to_string(),
        });
    }
    out
}

/// The objects of a report, one line each, for failure messages.
pub fn shown(report: &Value) -> String {
    let mut out = String::new();
    for i in report["instances"].as_array().into_iter().flatten() {
        out += &format!(
            "  {}/{}: {}{}{}\n",
            i["namespace"].as_str().unwrap_or(""),
            i["name"].as_str().unwrap_or(""),
            i["state"].as_str().unwrap_or(""),
            if i["podRestart"] == true {
                ", pods restart"
            } else {
                ""
            },
            if i["waitsForBudget"] == true {
                " (waits for the budget)"
            } else {
                ""
            },
        );
        for o in i["objects"].as_array().into_iter().flatten() {
            out += &format!(
                "    {} {} {}: {}\n",
                o["action"].as_str().unwrap_or(""),
                o["kind"].as_str().unwrap_or(""),
                o["name"].as_str().unwrap_or(""),
                o["why"].as_str().unwrap_or("")
            );
        }
        for p in i["problems"].as_array().into_iter().flatten() {
            out += &format!("    problem: {}\n", p["message"].as_str().unwrap_or(""));
        }
    }
    out += &format!("  summary: {}\n", report["summary"]);
    out
}

/// An operator configuration: `gateway` defaults and regions r1 and r2, each
/// host-network (no dedicated gateways: their controller's writes are not an
/// instance's), given as (domain, shared class, default CPU request). The
/// endpoint check is off: kura-sim serves the classes, at addresses where
/// nothing answers.
pub fn config_yaml(regions: &[(&str, &str, &str, Option<&str>)]) -> String {
    let mut text = String::from(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: kura.dev/sim-ingress\n  replicas: 1\nregions:\n",
    );
    for (name, domain, class, cpu) in regions {
        text += &format!(
            "  {name}:\n    network: host\n    sharedIngressClass: {class}\n    domain: {domain}\n{NO_ENDPOINT_CHECK}"
        );
        if let Some(cpu) = cpu {
            text += &format!("    defaultResources:\n      requests: {{cpu: {cpu}}}\n");
        }
    }
    text
}
