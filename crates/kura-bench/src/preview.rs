//! The read-only preview at scale, after the idle phase: `kura-operator diff`
//! over the converged fleet with the configuration in force (nothing to
//! change) and with the other one (every instance changes); its wall time, its
//! peak memory, and the writes it predicts, which compare with what the change
//! phase wrote (the same edit, the other way round). After the idle phase, so
//! that its reads count in no phase's figures.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::Bench;
use crate::proc::secs;
use crate::{Args, BenchResult, proc};

#[derive(Serialize, Default)]
pub struct Preview {
    pub converged: DiffRun,
    pub edited: DiffRun,
    /// The edit with `--show-diff`: it keeps every live object's operator-owned
    /// fields until the decisions are made.
    pub edited_show_diff: DiffRun,
}

#[derive(Serialize, Default)]
pub struct DiffRun {
    pub wall_s: f64,
    /// VmHWM, read every 10 ms until the process exits.
    pub peak_rss_mib: f64,
    pub exit_code: i32,
    pub summary: serde_json::Value,
    /// What it says the operator will send, as the audit log counts requests
    /// (`patch statefulsets`, `delete kuragateways`).
    pub predicted_requests: BTreeMap<String, u64>,
}

/// `in_force`: the configuration the fleet converged on; `other` the edit.
pub async fn run(args: &Args, bench: &Bench, in_force: u32, other: u32) -> BenchResult<Preview> {
    Ok(Preview {
        converged: diff(args, bench, in_force, false).await?,
        edited: diff(args, bench, other, false).await?,
        edited_show_diff: diff(args, bench, other, true).await?,
    })
}

/// `kura-operator diff` with configuration `version`.
async fn diff(args: &Args, bench: &Bench, version: u32, show_diff: bool) -> BenchResult<DiffRun> {
    let config = bench.workdir.join(format!("diff-config-{version}.yaml"));
    std::fs::write(&config, bench.config(version))?;
    let out = bench.workdir.join(format!("diff-{version}.json"));
    let flags: &[&str] = if show_diff { &["--show-diff"] } else { &[] };
    eprintln!("kura-bench: diff with configuration {version} {flags:?}");
    let start = Instant::now();
    // The operator's scope: its namespace, or (a spread fleet) every one.
    let scope: Vec<&str> = if bench.spread == 1 {
        vec!["-n", &bench.operator_ns]
    } else {
        vec!["-A"]
    };
    let mut child = Command::new(args.operator_bin())
        .arg("diff")
        .args(scope)
        .args(["-o", "json", "--config"])
        .arg(&config)
        .args(flags)
        .arg("--kubeconfig")
        .arg(&bench.kubeconfig)
        .stdout(std::fs::File::create(&out)?)
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut peak_kib = 0;
    let status = loop {
        if let Some(sample) = proc::read(child.id()) {
            peak_kib = peak_kib.max(sample.hwm_kib);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let wall_s = secs(start.elapsed());
    let exit_code = status.code().unwrap_or(-1);
    if exit_code > 1 {
        return Err(format!("kura-operator diff exited {exit_code}").into());
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let mut predicted_requests = BTreeMap::new();
    for object in report["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["objects"].as_array().into_iter().flatten())
    {
        let kind = object["kind"].as_str().unwrap_or_default();
        let plural = kura_core::kind::ChildKind::ALL
            .into_iter()
            .find(|k| k.kind() == kind)
            .map_or("?", |k| k.plural());
        let verb = if object["action"] == "prune" {
            "delete"
        } else {
            "patch"
        };
        *predicted_requests
            .entry(format!("{verb} {plural}"))
            .or_default() += 1;
    }
    let _ = std::fs::remove_file(&out);
    eprintln!("kura-bench: diff with configuration {version}: {wall_s:.2}s, exit {exit_code}");
    Ok(DiffRun {
        wall_s,
        peak_rss_mib: proc::mib(peak_kib),
        exit_code,
        summary: report["summary"].clone(),
        predicted_requests,
    })
}
