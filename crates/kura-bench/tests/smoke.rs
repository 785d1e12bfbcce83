//! The scale benchmark driver (`kura-bench`, crates/kura-bench) works end to end
//! against the real control plane at N=5: every phase runs and the report is
//! complete. No performance is asserted; that is what the benchmark is for.
//! The fleet budget's bound is asserted: it is a guarantee, not a speed.

// A client of the cluster, as a user is: the tests create, change and delete
// what they test against. The operator's writer modules (docs/architecture.md,
// "Who writes") do not apply to them.
#![allow(clippy::disallowed_methods)]
// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![allow(clippy::too_many_lines)]

#[allow(dead_code)]
#[path = "../../../tests/cluster/support.rs"]
mod support;

use std::process::Command;

#[tokio::test]
async fn kura_bench_runs_every_phase_at_n5() {
    // Starts the control plane when it does not run, and installs the CRDs.
    let _ = support::client().await;
    let dir = std::env::temp_dir().join(format!("kura-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, markdown) = (dir.join("report.json"), dir.join("benchmarks.md"));
    let output = Command::new(env!("CARGO_BIN_EXE_kura-bench"))
        .args(["--n", "5", "--resync", "2s", "--timeout", "180s"])
        .arg("--operator-bin")
        .arg(operator_bin())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&markdown)
        .output()
        .expect("run kura-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kura-bench failed:\n{stderr}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["n"], 5);
    for (phase, key) in [
        ("direct", "create_s"),
        ("direct", "change_s"),
        ("operator", "create_s"),
        ("operator", "change_s"),
    ] {
        let secs = report[phase][key].as_f64().unwrap_or_default();
        assert!(secs > 0.0, "{phase}.{key} was measured: {secs}");
    }
    // 7 children for each of the 5 instances, in each direct phase.
    assert_eq!(report["direct"]["objects"], 35);
    // The instances, their 7 children each, the namespace's default
    // ServiceAccount and root CA ConfigMap were compared while idle.
    assert_eq!(report["operator"]["idle"]["objects_compared"], 5 * 8 + 2);
    // The restart phase ran: a new process synced its caches, reconciled,
    // and compared the same objects while idle.
    let restart = &report["operator"]["restart"];
    assert!(
        restart["caches_synced_s"].as_f64().unwrap() > 0.0,
        "{restart}"
    );
    assert!(
        restart["first_reconcile_s"].as_f64().unwrap()
            >= restart["caches_synced_s"].as_f64().unwrap(),
        "{restart}"
    );
    assert_eq!(restart["idle"]["objects_compared"], 5 * 8 + 2);
    assert!(
        report["resources"]["operator"]["peak_rss_mib"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(
        report["versions"]["kubernetes"]
            .as_str()
            .unwrap()
            .starts_with('v')
    );
    // Nine goals and the one after a restart.
    assert_eq!(report["goals"].as_array().unwrap().len(), 10);
    // The budget phase: 10% of 5 is below one, so one instance at a time; the
    // peak is what the bench sampled, not what the operator says.
    let budget = &report["operator"]["budget"];
    assert_eq!(budget["max_unavailable"], "10%", "{budget}");
    assert_eq!(budget["bound"], 1, "{budget}");
    assert!(budget["total_s"].as_f64().unwrap() > 0.0, "{budget}");
    assert!(budget["samples"].as_u64().unwrap() > 0, "{budget}");
    let peak = budget["peak_unavailable"].as_u64().unwrap();
    assert!(peak <= 1, "the peak is within the bound: {budget}");
    // With kura-sim's 1 s ready delay, each restart is visible to the sampling.
    assert!(peak >= 1, "a restart was sampled: {budget}");
    assert!(
        report["goals"].as_array().unwrap().iter().any(|g| g["goal"]
            .as_str()
            .unwrap()
            .contains("peak unavailable <= bound")
            && g["met"] == true),
        "{}",
        report["goals"]
    );
    // `kura-operator diff` on the converged fleet: nothing with the
    // configuration in force; with the other domain, the three children that
    // carry the host of each instance.
    let preview = &report["operator"]["preview"];
    assert_eq!(preview["converged"]["exit_code"], 0, "{preview}");
    assert_eq!(preview["edited"]["exit_code"], 1, "{preview}");
    assert_eq!(
        preview["edited_show_diff"]["summary"],
        preview["edited"]["summary"]
    );
    assert_eq!(preview["edited"]["summary"]["changing"], 5, "{preview}");
    assert_eq!(
        preview["edited"]["predicted_requests"],
        serde_json::json!({"patch configmaps": 5, "patch ingresses": 5, "patch statefulsets": 5})
    );

    let md = std::fs::read_to_string(&markdown).unwrap();
    assert!(md.contains("### Scale run"), "{md}");
    assert!(md.contains("| create 5 instances"), "{md}");
    assert!(md.contains("`maxUnavailable: 10%`"), "{md}");
    // The run removed its namespaces and class.
    assert!(stderr.contains("cleaned up"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The references (`--references`) end to end at N=4, one number in flight:
/// every client creates and changes its fleet as its own user, each phase's
/// times are measured, and each user's requests are the writes the client is
/// meant to send. kura-peer is built (or reused) by scripts/control-plane.sh.
#[tokio::test]
async fn kura_bench_references_run_every_client() {
    let _ = support::client().await;
    let dir = std::env::temp_dir().join(format!("kura-bench-refs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("references.json");
    let output = Command::new(env!("CARGO_BIN_EXE_kura-bench"))
        .args([
            "--references",
            "--n",
            "4",
            "--in-flight",
            "2",
            "--timeout",
            "180s",
        ])
        .arg("--operator-bin")
        .arg(operator_bin())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run kura-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kura-bench failed:\n{stderr}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = r["runs"].as_array().unwrap();
    let clients: Vec<&str> = runs.iter().map(|x| x["client"].as_str().unwrap()).collect();
    assert_eq!(clients, ["operator", "peer", "floor", "direct"], "{r}");
    let requests = |run: &serde_json::Value, phase: &str| {
        let user = format!("bench-{}", run["client"].as_str().unwrap());
        run[phase]["by_user"][&user]["requests"].clone()
    };
    for run in runs {
        for phase in ["create", "change"] {
            let p = &run[phase];
            assert!(p["to_cluster_s"].as_f64().unwrap() > 0.0, "{run}");
            // The direct client writes no status: no time to record.
            assert_eq!(
                p["to_record_s"].is_null(),
                run["client"] == "direct",
                "{run}"
            );
        }
        // Every client applied each child kind once per instance at the create.
        let create = requests(run, "create");
        assert_eq!(create["patch statefulsets"], 4, "{run}");
        assert_eq!(create["patch networkpolicies"], 4, "{run}");
    }
    // The floor: the instance, 7 children, 2 status writes at the create;
    // the 3 changed children and 2 status writes at the change.
    let floor = &runs[2];
    let sum = |v: serde_json::Value| -> u64 {
        v.as_object()
            .unwrap()
            .values()
            .map(|c| c.as_u64().unwrap())
            .sum()
    };
    assert_eq!(sum(requests(floor, "create")), 4 * 10, "{floor}");
    assert_eq!(sum(requests(floor, "change")), 4 * 5, "{floor}");
    assert_eq!(
        requests(floor, "change")["patch kurainstances/status"],
        8,
        "{floor}"
    );
    // The peer reconciles the instances the bench created, as the operator
    // does, and records each: applied, then Ready.
    let peer = requests(&runs[1], "create");
    assert!(peer["create kurainstances"].is_null(), "{peer}");
    assert!(
        peer["patch kurainstances/status"].as_u64().unwrap() >= 8,
        "{peer}"
    );
    assert!(stderr.contains("cleaned up"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fleet spread over namespaces (`--namespaces 2`, the N=10,000 run's
/// shape), on a plane of its own: the operator then watches every namespace.
/// Every scale phase but the budget runs over both namespaces of each fleet.
#[tokio::test]
async fn kura_bench_spreads_a_fleet_over_namespaces() {
    let plane = support::PrivatePlane::up("bench-spread", 41);
    let dir = std::env::temp_dir().join(format!("kura-bench-spread-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let output = Command::new(env!("CARGO_BIN_EXE_kura-bench"))
        .args(["--n", "4", "--namespaces", "2", "--skip-budget"])
        .args(["--resync", "2s", "--timeout", "180s"])
        .arg("--operator-bin")
        .arg(operator_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run kura-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kura-bench failed:\n{stderr}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["namespaces"], 2, "{r}");
    assert_eq!(r["direct"]["objects"], 28, "{r}");
    // Every child kind of the direct fleet was applied in its two namespaces.
    assert_eq!(
        r["direct"]["create_requests"]["patch statefulsets"], 4,
        "{r}"
    );
    assert!(r["operator"]["change_s"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(
        r["operator"]["create_requests"]["create kurainstances"], 4,
        "{r}"
    );
    // Instances and children, and each namespace's default ServiceAccount and
    // root CA ConfigMap, compared in both namespaces; nothing changed.
    for idle in [&r["operator"]["idle"], &r["operator"]["restart"]["idle"]] {
        assert_eq!(idle["objects_compared"], 4 * 8 + 2 * 2, "{idle}");
        assert_eq!(idle["resource_version_changes"], 0, "{idle}");
    }
    // `diff -A`: every instance of both namespaces changes with the other domain.
    assert_eq!(
        r["operator"]["preview"]["edited"]["summary"]["changing"], 4,
        "{r}"
    );
    assert!(stderr.contains("removing the direct fleet"), "{stderr}");
    assert!(stderr.contains("cleaned up"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shards proof (`--shards-proof`) end to end at N=16 over 8 namespaces,
/// on a plane of its own: its replicas act for every namespace, and would
/// reconcile other tests' instances on the shared plane. Every phase runs;
/// what the proof holds as guarantees is asserted (no object written by two
/// replicas, across a kill -9 and a join; the killed replica's shards taken
/// over), its timings are not.
#[tokio::test]
async fn kura_bench_shards_proof_runs_every_phase() {
    let plane = support::PrivatePlane::up("bench-shards", 40);
    let dir = std::env::temp_dir().join(format!("kura-bench-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("shards.json");
    let output = Command::new(env!("CARGO_BIN_EXE_kura-bench"))
        .args([
            "--shards-proof",
            "--n",
            "16",
            "--namespaces",
            "8",
            "--shards",
            "4",
        ])
        .args([
            "--lease-duration",
            "6s",
            "--resync",
            "5s",
            "--timeout",
            "240s",
        ])
        .arg("--operator-bin")
        .arg(operator_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run kura-bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kura-bench failed:\n{stderr}");
    // The markdown section, for a reader of --nocapture.
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (r["n"].clone(), r["namespaces"].clone()),
        (16.into(), 8.into())
    );
    // Two namespaces, so four instances, in each shard.
    assert_eq!(
        r["instances_per_shard"],
        serde_json::json!({"0": 4, "1": 4, "2": 4, "3": 4})
    );
    for (phase, key) in [
        ("one", "create_s"),
        ("one", "change_s"),
        ("two", "change_s"),
        ("failover", "taken_over_s"),
        ("failover", "converged_after_kill_s"),
        ("join", "change_s"),
    ] {
        let secs = r[phase][key].as_f64().unwrap_or_default();
        assert!(secs > 0.0, "{phase}.{key} was measured: {r}");
    }
    assert_eq!(r["two"]["held"]["a"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["two"]["held"]["b"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["failover"]["killed_shards"], r["two"]["held"]["a"], "{r}");
    let after: Vec<&String> = r["join"]["held_after"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(after, ["a2", "b", "c"], "{r}");
    for phase in ["two", "failover", "join"] {
        assert_eq!(
            r[phase]["written_by_two"],
            serde_json::json!({}),
            "{phase}: {r}"
        );
    }
    assert!(r["two"]["peak_rss_mib"]["a"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(r["goals"].as_array().unwrap().len(), 4, "{r}");
    assert!(stderr.contains("cleaned up"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The operator binary of this build: `cargo test --workspace` builds it into
/// the same target directory as this test (`target/<profile>/kura-operator`).
fn operator_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("kura-operator");
    assert!(
        bin.exists(),
        "{} is not built: run the tests with `cargo test --workspace`",
        bin.display()
    );
    bin
}
