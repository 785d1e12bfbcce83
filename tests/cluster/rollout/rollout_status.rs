//! `kura-operator rollout status` follows a budgeted fleet change on the real
//! control plane: `--watch` exits 0 once every instance is done (and not
//! before), 1 naming the instance whose failure halted the rollout, and 2
//! naming the instances not done when `--timeout` runs out first.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, ListParams};
use serde_json::json;

use crate::operator::{
    Operator, converged_count, create_fleet, delete_shared_class, fleet_config, shared_class,
};
use crate::rollout::budget::annotate;
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

const N: usize = 6;
const T: Duration = Duration::from_secs(180);

/// `kura-operator rollout status ARGS` against the tests' plane: exit code,
/// stdout, stderr. Its stdout is a pipe: plain lines, no bar.
fn rollout_status(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .args(["rollout", "status"])
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .output()
        .expect("run kura-operator rollout status");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The counts lines it printed (one per change of the counts).
fn counts_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with("fleet revision"))
        .collect()
}

/// `done D/N` of a counts line.
fn done_of(line: &str) -> (usize, usize) {
    let rest = line
        .split(": done ")
        .nth(1)
        .unwrap_or_else(|| panic!("no done count in {line:?}"));
    let fraction = rest.split(',').next().unwrap();
    let (done, total) = fraction.split_once('/').unwrap();
    (done.parse().unwrap(), total.parse().unwrap())
}

/// Each instance's applied and desired revisions.
async fn revisions(
    instances: &Api<KuraInstance>,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    instances
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|i| {
            let s = i.status.unwrap_or_default();
            (
                i.metadata.name.unwrap_or_default(),
                (s.applied_revision, s.desired_revision),
            )
        })
        .collect()
}

/// A fleet of `N` converged instances under an operator with `rollout`, in
/// a namespace whose kura-sim pods take `annotations`' time to be Ready.
async fn fleet(
    prefix: &str,
    rollout: &str,
    annotations: serde_json::Value,
) -> (TestNamespace, Operator, Api<KuraInstance>) {
    let ns = TestNamespace::new(prefix).await;
    annotate(&ns, annotations).await;
    shared_class(&ns).await;
    let op = Operator::start(&ns.name, &fleet_config(&ns.name, "256Mi", rollout));
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "r", N).await;
    wait_for("the fleet to converge", T, || async {
        (converged_count(&instances, None).await == N).then_some(())
    })
    .await;
    (ns, op, instances)
}

async fn delete_class(ns: &TestNamespace) {
    let classes: Api<k8s_openapi::api::networking::v1::IngressClass> = Api::all(ns.client.clone());
    delete_shared_class(&classes, ns).await;
}

/// The fleet's default pod memory set to `memory` (a change of every pod
/// template), once every instance desires its new revision; the revisions
/// before.
async fn change_memory(
    op: &Operator,
    ns: &TestNamespace,
    instances: &Api<KuraInstance>,
    memory: &str,
    rollout: &str,
) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let before = revisions(instances).await;
    op.set_config(&fleet_config(&ns.name, memory, rollout));
    change_seen(instances, &before).await;
    before
}

/// The operator has read the new configuration for every instance: each
/// desires a revision other than the one it ran before.
async fn change_seen(
    instances: &Api<KuraInstance>,
    before: &BTreeMap<String, (Option<String>, Option<String>)>,
) {
    wait_for("every instance to desire the new revision", T, || async {
        let now = revisions(instances).await;
        (now.len() == N
            && now
                .iter()
                .all(|(n, (_, desired))| before.get(n).is_some_and(|(old, _)| old != desired)))
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn rollout_status_times_out_during_a_budgeted_change_then_follows_it_to_its_end() {
    // One at a time, each restart Ready after 3 s: the change lasts well
    // beyond the first, short wait.
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10m\n";
    let (ns, op, instances) = fleet(
        "rollout-status",
        rollout,
        json!({"sim.kura.dev/ready-delay": "3s"}),
    )
    .await;
    let (code, stdout, stderr) = rollout_status(&["-n", &ns.name]);
    assert_eq!(code, 0, "a converged fleet is done: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!("rollout complete: {N}/{N} instances done")),
        "{stdout}"
    );

    let before = change_memory(&op, &ns, &instances, "320Mi", rollout).await;

    // A timeout shorter than the rollout: 2, naming what is not done.
    let (code, stdout, stderr) = rollout_status(&["-n", &ns.name, "--watch", "--timeout", "2s"]);
    assert_eq!(code, 2, "timed out: {stdout}{stderr}");
    eprintln!("rollout status --watch --timeout 2s:\n{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("timed out: not done: "), "{stdout}");
    assert!(
        last.contains(&format!("{}/r", ns.name)),
        "names instances: {last}"
    );

    // Followed to its end: 0, the last counts all done. The bound is wide:
    // six restarts one at a time take about a minute, and twice that on a
    // machine loaded beside the suite (seen: 5 of 6 done at 120 s).
    let (code, stdout, stderr) = rollout_status(&["-n", &ns.name, "--watch", "--timeout", "300s"]);
    assert_eq!(code, 0, "done: {stdout}{stderr}");
    eprintln!("rollout status --watch, to the end:\n{stdout}");
    let lines = counts_lines(&stdout);
    assert!(
        done_of(lines[0]).0 < N,
        "it began while the change was under way: {stdout}"
    );
    assert_eq!(
        done_of(lines.last().unwrap()),
        (N, N),
        "the last counts say every instance is done: {stdout}"
    );
    assert!(
        stdout.ends_with(&format!("rollout complete: {N}/{N} instances done\n")),
        "{stdout}"
    );
    // What it said is what status says: every instance Ready on the new revision.
    let list = instances.list(&ListParams::default()).await.unwrap().items;
    for i in &list {
        let s = i.status.clone().unwrap_or_default();
        let name = i.metadata.name.clone().unwrap_or_default();
        assert_eq!(s.phase, Some(Phase::Ready), "{name}");
        assert_eq!(s.applied_revision, s.desired_revision, "{name}");
        assert_ne!(
            s.applied_revision, before[&name].0,
            "{name} took the change"
        );
    }
    drop(op);
    delete_class(&ns).await;
}

#[tokio::test]
async fn rollout_status_exits_1_naming_the_instance_whose_failure_halts_the_rollout() {
    // The first admitted never becomes Ready on the change: after 10 s its
    // rollout has failed, and it holds the others.
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10s\n";
    let (ns, op, instances) = fleet(
        "rollout-halt",
        rollout,
        json!({"sim.kura.dev/ready-delay": "1s", "sim.kura.dev/never-ready": "\"333Mi\""}),
    )
    .await;
    change_memory(&op, &ns, &instances, "333Mi", rollout).await;

    let (code, stdout, stderr) = rollout_status(&["-n", &ns.name, "--watch", "--timeout", "120s"]);
    assert_eq!(code, 1, "halted: {stdout}{stderr}");
    eprintln!("rollout status --watch, halted:\n{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!("rollout halted: held by {}/r00 (failed)", ns.name),
        "{stdout}"
    );
    let counts = counts_lines(&stdout);
    let final_counts = counts.last().unwrap();
    assert!(
        final_counts.contains("failed 1") && done_of(final_counts) == (0, N),
        "{stdout}"
    );
    // Without --watch, the same verdict at once.
    let (code, stdout, _) = rollout_status(&["-n", &ns.name]);
    assert_eq!(code, 1, "{stdout}");
    drop(op);
    delete_class(&ns).await;
}
