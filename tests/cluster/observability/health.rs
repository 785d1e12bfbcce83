//! Health as the tools people run read it, from live objects: kstatus
//! (sigs.k8s.io/cli-utils, the library of Flux's health checks and kpt, run by
//! hack/kstatus), Flux with the chart's `healthCheckExprs`
//! (files/flux-health-checks.yaml, evaluated by Flux's own CEL status reader,
//! github.com/fluxcd/pkg/runtime/cel, run by hack/fluxhealth), `kubectl wait
//! --for=condition=Ready`, and the Argo CD health checks of hack/argocd (Lua,
//! run with Debian's `lua5.1`: Argo CD's interpreter is Lua 5.1), also on their
//! own test cases.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::operator::{Operator, config, delete_shared_class, instance, shared_class};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

/// hack/kstatus, built once per test binary (Go's cache makes it quick).
fn kstatus_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| go_build("kstatus")).clone()
}

/// hack/`<name>` built into the test binary's scratch directory.
fn go_build(name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(repo().join("hack").join(name))
        .status()
        .unwrap_or_else(|e| panic!("go build hack/{name}: {e:?}"));
    assert!(status.success(), "go build hack/{name} failed");
    out
}

/// kstatus's (status, message) of `object`.
fn kstatus(object: &Value) -> (String, String) {
    let out = run_with_input(
        Command::new(kstatus_bin()).stdout(Stdio::piped()),
        object.to_string().as_bytes(),
        "run kstatus",
    );
    assert!(out.status.success(), "kstatus failed on {object}");
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        line["status"].as_str().unwrap().to_string(),
        line["message"].as_str().unwrap().to_string(),
    )
}

/// hack/fluxhealth, built once per test binary.
fn fluxhealth_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| go_build("fluxhealth")).clone()
}

/// What Flux's health check makes of `object` with the chart's
/// `healthCheckExprs`: (status, evaluation error). An expression Flux cannot
/// evaluate gives Unknown, which Flux's wait treats as not ready yet.
fn flux(object: &Value) -> (String, String) {
    let checks = repo().join("charts/kura-operator/files/flux-health-checks.yaml");
    let out = run_with_input(
        Command::new(fluxhealth_bin())
            .arg(checks)
            .stdout(Stdio::piped()),
        object.to_string().as_bytes(),
        "run fluxhealth",
    );
    assert!(out.status.success(), "fluxhealth failed on {object}");
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        line["status"].as_str().unwrap().to_string(),
        line["error"].as_str().unwrap_or_default().to_string(),
    )
}

/// `value` as a Lua expression (a table constructor for objects and arrays).
fn lua(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut out = String::from("\"");
            for b in s.bytes() {
                match b {
                    b'"' | b'\\' => {
                        out.push('\\');
                        out.push(b as char);
                    }
                    0x20..=0x7e => out.push(b as char),
                    _ => out.push_str(&format!("\\{b}")),
                }
            }
            out.push('"');
            out
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("[{}] = {}", lua(&Value::String(k.clone())), lua(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// The Argo CD health check of `kind` (`health.lua`, as Argo CD runs it: the
/// object in the global `obj`, the script's return value the health) on `object`.
fn argo_health(kind: &str, object: &Value) -> (String, String) {
    let script = std::fs::read_to_string(argo_dir(kind).join("health.lua")).unwrap();
    let chunk = format!(
        "obj = {}\nlocal hs = (function()\n{script}\nend)()\nio.write(hs.status, \"\\n\", hs.message or \"\")\n",
        lua(object)
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "health-{kind}-{}-{:?}.lua",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, chunk).unwrap();
    let out = Command::new("lua5.1")
        .arg(&path)
        .output()
        .expect("lua5.1 (Debian's package lua5.1; scripts/dev.sh test installs it)");
    assert!(
        out.status.success(),
        "{kind}/health.lua failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (status, message) = text.split_once('\n').unwrap_or((&text, ""));
    (status.to_string(), message.to_string())
}

fn argo_dir(kind: &str) -> PathBuf {
    repo().join("hack/argocd/kura.dev").join(kind)
}

/// Argo CD's own test-case format (health_test.yaml: each input file and the
/// health expected of it), for both kinds.
#[test]
fn argo_cd_health_checks_pass_their_test_cases() {
    for kind in ["KuraInstance", "KuraGateway"] {
        let dir = argo_dir(kind);
        let tests: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(dir.join("health_test.yaml")).unwrap())
                .unwrap();
        let cases = tests["tests"].as_sequence().unwrap();
        assert!(cases.len() >= 4, "{kind}: {} cases", cases.len());
        // Every case, then every difference (not only the first).
        let mut wrong = Vec::new();
        for case in cases {
            let input = case["inputPath"].as_str().unwrap();
            let object: Value =
                serde_yaml::from_str(&std::fs::read_to_string(dir.join(input)).unwrap()).unwrap();
            let want = &case["healthStatus"];
            let want = (
                want["status"].as_str().unwrap().to_string(),
                want["message"].as_str().unwrap_or_default().to_string(),
            );
            let got = argo_health(kind, &object);
            if got != want {
                wrong.push(format!("{kind} {input}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}

/// The chart's values file for the argo-cd Helm chart: the health checks of
/// hack/argocd (their one source), as `configs.cm` entries of `argocd-cm`.
fn argocd_values() -> String {
    let mut out = String::from(
        "# Values for the argo-cd Helm chart (argo/argo-cd): the health checks of\n\
         # KuraInstance and KuraGateway as argocd-cm entries. Generated from\n\
         # hack/argocd/kura.dev/*/health.lua (their source, with Argo CD's test cases);\n\
         # tests/cluster/observability/health.rs fails when this file differs from them.\n\
         #   helm upgrade --install argocd argo/argo-cd -n argocd --reuse-values \\\n\
         #     -f argocd-values.yaml\n\
         configs:\n  cm:\n",
    );
    for kind in ["KuraInstance", "KuraGateway"] {
        let lua = std::fs::read_to_string(argo_dir(kind).join("health.lua")).unwrap();
        out.push_str(&format!(
            "    resource.customizations.health.kura.dev_{kind}: |\n"
        ));
        for line in lua.lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str(&format!("      {line}\n"));
            }
        }
    }
    out
}

/// files/argocd-values.yaml is what hack/argocd's checks give, byte for
/// byte, and reads back (as Helm reads it) as exactly those checks.
#[test]
fn argo_cd_values_file_carries_the_checks_as_they_are() {
    let path = repo().join("charts/kura-operator/files/argocd-values.yaml");
    let want = argocd_values();
    let values: serde_yaml::Value = serde_yaml::from_str(&want).unwrap();
    let cm = values["configs"]["cm"].as_mapping().unwrap();
    assert_eq!(cm.len(), 2, "{cm:?}");
    for kind in ["KuraInstance", "KuraGateway"] {
        let lua = std::fs::read_to_string(argo_dir(kind).join("health.lua")).unwrap();
        let key = format!("resource.customizations.health.kura.dev_{kind}");
        assert_eq!(cm[key.as_str()].as_str(), Some(lua.as_str()), "{key}");
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    if got != want {
        let fresh = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("argocd-values.yaml");
        std::fs::write(&fresh, &want).unwrap();
        panic!(
            "{} differs from hack/argocd's health checks: the current one is {}; copy it over",
            path.display(),
            fresh.display()
        );
    }
}

/// The chart README's Flux Kustomization carries the shipped
/// `healthCheckExprs` as they are, and its Argo CD part names the values file.
#[test]
fn chart_readme_gives_the_shipped_checks() {
    let chart = repo().join("charts/kura-operator");
    let readme = std::fs::read_to_string(chart.join("README.md")).unwrap();
    let flux = &readme[readme.find("\n### Flux\n").expect("a Flux section")..];
    let block = flux.split("```yaml\n").nth(1).unwrap();
    let block = &block[..block.find("```").unwrap()];
    let kustomization: serde_yaml::Value = serde_yaml::from_str(block).unwrap();
    let file: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart.join("files/flux-health-checks.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        kustomization["apiVersion"].as_str(),
        Some("kustomize.toolkit.fluxcd.io/v1")
    );
    assert_eq!(
        kustomization["spec"]["healthCheckExprs"], file["healthCheckExprs"],
        "the README's healthCheckExprs differ from files/flux-health-checks.yaml"
    );
    let argo = &readme[readme.find("\n### Argo CD\n").expect("an Argo CD section")..];
    assert!(argo.contains("-f charts/kura-operator/files/argocd-values.yaml"));
    assert!(chart.join("files/argocd-values.yaml").exists());
}

/// Each recorded shape of the operator's objects (`argo_dir(kind)/testdata`),
/// with what kstatus and what Flux with the chart's `healthCheckExprs` make
/// of it.
const RECORDED: [(&str, &str, &str, &str); 15] = [
    // (kind, file, kstatus, Flux)
    ("KuraInstance", "ready", "Current", "Current"),
    ("KuraInstance", "activating", "InProgress", "InProgress"),
    ("KuraInstance", "no-status", "Current", "Unknown"),
    ("KuraInstance", "old-generation", "InProgress", "InProgress"),
    ("KuraInstance", "stalled", "Failed", "Failed"),
    ("KuraInstance", "invalid", "Failed", "Failed"),
    ("KuraInstance", "paused", "Current", "Current"),
    ("KuraInstance", "paused-expired-stalled", "Failed", "Failed"),
    ("KuraInstance", "paused-expired-ready", "Current", "Current"),
    (
        "KuraInstance",
        "paused-not-seen",
        "InProgress",
        "InProgress",
    ),
    ("KuraGateway", "ready", "Current", "Current"),
    ("KuraGateway", "no-status", "Current", "Unknown"),
    ("KuraGateway", "old-generation", "InProgress", "InProgress"),
    ("KuraGateway", "stalled", "Failed", "Failed"),
    ("KuraGateway", "retrying", "InProgress", "InProgress"),
];

/// The recorded object `file` of `kind`.
fn recorded(kind: &str, file: &str) -> Value {
    let path = argo_dir(kind).join("testdata").join(format!("{file}.yaml"));
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// kstatus on the same recorded objects: what Flux's health checks and kpt
/// make of each shape the operator writes.
#[test]
fn kstatus_reads_each_recorded_shape() {
    for (kind, file, expected, _) in RECORDED {
        let (status, message) = kstatus(&recorded(kind, file));
        assert_eq!(status, expected, "{kind} {file}: {message}");
    }
}

/// Flux with the chart's `healthCheckExprs` on the same recorded objects:
/// where kstatus alone calls an instance without status Current, Flux waits.
#[test]
fn flux_health_checks_read_each_recorded_shape() {
    for (kind, file, _, expected) in RECORDED {
        let object = recorded(kind, file);
        let (status, error) = flux(&object);
        assert_eq!(status, expected, "{kind} {file}: {error}");
        if status == "Unknown" {
            assert!(
                error.contains("no such attribute"),
                "{kind} {file}: {error}"
            );
        }
    }
}

async fn live(instances: &Api<KuraInstance>, name: &str) -> Value {
    serde_json::to_value(instances.get(name).await.unwrap()).unwrap()
}

/// `kubectl wait --for=condition=CONDITION` on `name`, bounded by `timeout`.
fn kubectl_wait(ns: &str, name: &str, condition: &str, timeout: &str) -> bool {
    Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args([
            "wait",
            "-n",
            ns,
            &format!("kurainstance/{name}"),
            &format!("--for=condition={condition}"),
            &format!("--timeout={timeout}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("kubectl wait")
        .success()
}

/// The phase the operator reports for `name`, once it has observed the
/// current generation.
async fn wait_phase(instances: &Api<KuraInstance>, name: &str, phase: Phase) {
    wait_for(
        &format!("{name} to be {phase:?} at its generation"),
        Duration::from_secs(90),
        || async {
            let i = instances.get(name).await.ok()?;
            let s = i.status?;
            (s.phase == Some(phase) && s.observed_generation == i.metadata.generation).then_some(())
        },
    )
    .await;
}

/// An instance before the operator's first status, applied, after a spec
/// change the operator has not seen, Stalled, invalid, paused, and with a
/// pause whose end has passed (Stalled, and resumed to Ready), as kstatus,
/// Flux with the chart's health checks, `kubectl wait` and the Argo CD check
/// read each.
#[tokio::test]
async fn kstatus_flux_kubectl_wait_and_argo_cd_read_every_state_of_a_live_instance() {
    let ns = TestNamespace::new("health").await;
    let classes = shared_class(&ns).await;
    let _policy = crate::faults::stall::deny_big_statefulsets(&ns).await;
    let instances: Api<KuraInstance> = ns.api();

    // Before any status: kstatus cannot tell (Current, documented); Argo CD
    // and Flux with the chart's checks wait (Flux: Unknown, not Current).
    apply_json(
        &instances,
        "test",
        instance("early", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    let early = live(&instances, "early").await;
    assert_eq!(kstatus(&early).0, "Current");
    assert_eq!(flux(&early).0, "Unknown", "{}", flux(&early).1);
    assert_eq!(
        argo_health("KuraInstance", &early),
        (
            "Progressing".into(),
            "Waiting for the operator's first status".into()
        )
    );

    let region = config(&ns.name, "host", "example.com/none");
    let args = ["--retry-budget", "1", "--stall-window", "60s"];
    let mut op = Operator::start_full(&ns.name, &region, &args, &[]);
    // Activating (its pods not available yet) or Ready, as the plane allows
    // (kura-sim marks pods Ready; a plane with a node runs them for real).
    let phase = wait_for("early applied", Duration::from_secs(90), || async {
        let s = instances.get("early").await.ok()?.status?;
        s.phase
            .filter(|p| matches!(p, Phase::Activating | Phase::Ready))
    })
    .await;
    let applied = live(&instances, "early").await;
    let expected = match phase {
        Phase::Ready => ("Current", "Healthy"),
        _ => ("InProgress", "Progressing"),
    };
    let phase_now = applied["status"]["phase"].as_str().unwrap_or_default();
    if phase_now == format!("{phase:?}") {
        assert_eq!(kstatus(&applied).0, expected.0, "{phase:?}");
        assert_eq!(flux(&applied).0, expected.0, "{phase:?}");
        assert_eq!(
            argo_health("KuraInstance", &applied).0,
            expected.1,
            "{phase:?}"
        );
    }
    assert!(kubectl_wait(&ns.name, "early", "Valid", "10s"));

    // A spec change the operator has not seen (it is stopped): every reader
    // waits for the new generation, kubectl wait included (the generation is
    // on every condition).
    op.kill();
    let patch = json!({"spec": {"image": "registry.example/kura:1.0.1"}});
    instances
        .patch("early", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let changed = live(&instances, "early").await;
    let (status, message) = kstatus(&changed);
    assert_eq!(status, "InProgress", "{message}");
    assert!(message.contains("generation is 2"), "{message}");
    assert_eq!(flux(&changed).0, "InProgress");
    assert_eq!(argo_health("KuraInstance", &changed).0, "Progressing");
    assert!(
        !kubectl_wait(&ns.name, "early", "Valid", "2s"),
        "kubectl wait must not take the old generation's condition"
    );
    let op = Operator::start_full(&ns.name, &region, &args, &[]);
    assert!(kubectl_wait(&ns.name, "early", "Valid", "60s"));
    let seen = live(&instances, "early").await;
    assert!(!kstatus(&seen).1.contains("generation is 2"), "{seen}");

    // Stalled: Failed with the reason, Degraded in Argo CD.
    let mut big = instance("big", "registry.example/kura:1.0.0");
    big["spec"]["replicas"] = json!(3);
    apply_json(&instances, "test", big).await.unwrap();
    wait_for("big to be Stalled", Duration::from_secs(90), || async {
        let s = instances.get("big").await.ok()?.status?;
        (s.phase == Some(Phase::Stalled)).then_some(())
    })
    .await;
    let stalled = live(&instances, "big").await;
    let (status, message) = kstatus(&stalled);
    assert_eq!(status, "Failed");
    assert!(message.contains("at most 2 replicas"), "{message}");
    assert_eq!(flux(&stalled).0, "Failed");
    let (health, why) = argo_health("KuraInstance", &stalled);
    assert_eq!(health, "Degraded");
    assert!(why.contains("at most 2 replicas"), "{why}");

    // Invalid (a region the configuration does not know): failed for all.
    let mut bad = instance("bad", "registry.example/kura:1.0.0");
    bad["spec"]["region"] = json!("nowhere");
    apply_json(&instances, "test", bad).await.unwrap();
    wait_phase(&instances, "bad", Phase::Invalid).await;
    let invalid = live(&instances, "bad").await;
    assert_eq!(kstatus(&invalid).0, "Failed");
    assert_eq!(flux(&invalid).0, "Failed");
    let (health, why) = argo_health("KuraInstance", &invalid);
    assert_eq!(health, "Degraded");
    assert!(why.contains("spec.region"), "{why}");

    // Paused until an hour from now: settled for kstatus and Flux (a Flux
    // health check goes on), Suspended for Argo CD with who, why and until
    // when, and no Ready for kubectl wait.
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    let pause = |until: jiff::Timestamp| json!({"spec": {"paused": true, "pause": {"by": "alice", "reason": "migration", "until": until.to_string()}}});
    instances
        .patch(
            "early",
            &PatchParams::default(),
            &Patch::Merge(&pause(later)),
        )
        .await
        .unwrap();
    wait_phase(&instances, "early", Phase::Paused).await;
    let paused = live(&instances, "early").await;
    let (status, message) = kstatus(&paused);
    assert_eq!(
        status, "Current",
        "a paused instance reads {status}: {message}"
    );
    assert_eq!(flux(&paused).0, "Current");
    let (health, why) = argo_health("KuraInstance", &paused);
    assert_eq!(health, "Suspended");
    assert!(why.contains("paused by alice (migration)"), "{why}");
    assert!(why.contains(&later.to_string()), "{why}");
    assert!(!kubectl_wait(&ns.name, "early", "Ready", "2s"));

    // The pause's end has passed: the operator resumed, spec.paused is still
    // true. Resumed to Ready: Healthy, not Suspended.
    let past = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(1);
    instances
        .patch(
            "early",
            &PatchParams::default(),
            &Patch::Merge(&pause(past)),
        )
        .await
        .unwrap();
    wait_phase(&instances, "early", Phase::Ready).await;
    let resumed = live(&instances, "early").await;
    assert_eq!(resumed["spec"]["paused"], json!(true));
    assert_eq!(kstatus(&resumed).0, "Current");
    assert_eq!(flux(&resumed).0, "Current");
    assert_eq!(argo_health("KuraInstance", &resumed).0, "Healthy");
    assert!(kubectl_wait(&ns.name, "early", "Ready", "10s"));

    // An ended pause on the instance the policy refuses: the operator
    // resumed and it is Stalled again: Degraded, Failed, whatever the spec.
    instances
        .patch("big", &PatchParams::default(), &Patch::Merge(&pause(past)))
        .await
        .unwrap();
    wait_phase(&instances, "big", Phase::Stalled).await;
    let stalled = live(&instances, "big").await;
    assert_eq!(stalled["spec"]["paused"], json!(true));
    assert_eq!(kstatus(&stalled).0, "Failed");
    assert_eq!(flux(&stalled).0, "Failed");
    let (health, why) = argo_health("KuraInstance", &stalled);
    assert_eq!(health, "Degraded", "{why}");
    assert!(why.contains("at most 2 replicas"), "{why}");
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
