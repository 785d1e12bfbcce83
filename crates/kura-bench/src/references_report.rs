//! The references run's figures: `docs/bench/references-<date>-n<N>.json` and
//! a markdown table per phase, printed (docs/benchmarks.md is edited by hand).

use std::fmt::Write as _;

use serde::Serialize;

use crate::references::{PhaseFigures, References, Run};
use crate::report::{json_path, repo};
use crate::{Args, BenchResult};

#[derive(Serialize)]
struct Written<'a> {
    command: String,
    date: String,
    load_average_at_start: String,
    #[serde(flatten)]
    references: &'a References,
}

pub fn write(args: &Args, r: &References) -> BenchResult<()> {
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| json_path("references", r.n));
    let written = Written {
        command: std::env::var("KURA_BENCH_COMMAND")
            .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
        date: jiff::Timestamp::now()
            .round(jiff::Unit::Second)?
            .to_string(),
        load_average_at_start: std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
        references: r,
    };
    if let Some(dir) = json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&json, serde_json::to_string_pretty(&written)? + "\n")?;
    let shown = json
        .strip_prefix(repo())
        .unwrap_or(&json)
        .display()
        .to_string();
    println!("{}", markdown(r, &shown));
    eprintln!("kura-bench: wrote {}", json.display());
    Ok(())
}

fn markdown(r: &References, json: &str) -> String {
    let mut s = format!("\n### References, N={} (JSON: `{json}`)\n", r.n);
    for (phase, pick) in [
        (
            "create",
            (|run: &Run| &run.create) as fn(&Run) -> &PhaseFigures,
        ),
        ("change (region domain)", |run: &Run| &run.change),
    ] {
        let _ = writeln!(
            s,
            "\n{phase}, per instance: writes are changes of the fleet's objects (watch events), all and less the plane's controllers'; requests and Events the client's own (audit log)\n\n\
             | client | in flight | to cluster | to record | settled | writes: client's ≈, all | requests | Events | apiserver CPU | client CPU |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for run in &r.runs {
            let _ = writeln!(s, "{}", row(run, pick(run), r.n));
        }
    }
    s
}

/// The resources of the objects a fleet's watches count.
const FLEET_RESOURCES: [&str; 8] = [
    "kurainstances",
    "statefulsets",
    "configmaps",
    "services",
    "serviceaccounts",
    "ingresses",
    "networkpolicies",
    "poddisruptionbudgets",
];

/// The fleet's changes less the plane's controllers' requests on its objects
/// (the controller manager's status updates of StatefulSets and
/// PodDisruptionBudgets, kura-sim's of Ingresses, each taken for a write):
/// about the client's own etcd writes, with the bench's creates of the
/// instances that the operator and the peer reconcile.
fn client_writes(p: &PhaseFigures) -> u64 {
    let all: u64 = p.writes.values().sum();
    let controllers: u64 = p
        .by_user
        .iter()
        .filter(|(user, _)| user.starts_with("system:") || *user == "kura-sim")
        .flat_map(|(_, r)| &r.requests)
        .filter(|(request, _)| {
            let mut words = request.split_whitespace();
            let verb = words.next().unwrap_or("");
            let resource = words.next().unwrap_or("").split('/').next().unwrap_or("");
            verb != "delete" && FLEET_RESOURCES.contains(&resource)
        })
        .map(|(_, count)| count)
        .sum();
    all.saturating_sub(controllers)
}

fn row(run: &Run, p: &PhaseFigures, n: usize) -> String {
    let per = |v: u64| v as f64 / n.max(1) as f64;
    let client = serde_json::to_value(run.client)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let own = p.by_user.get(&format!("bench-{client}"));
    let requests = own.map_or(0, |u| u.requests.values().sum());
    let events = own.map_or(0, |u| u.events);
    let cpu = |name: &str| {
        p.cpu_s
            .get(name)
            .map_or("–".into(), |c| format!("{c:.2} s"))
    };
    format!(
        "| {client} | {} | {:.2} s | {} | {:.2} s | {:.2}, {:.2} | {:.2} | {:.2} | {} | {} |",
        run.in_flight,
        p.to_cluster_s,
        p.to_record_s.map_or("–".into(), |t| format!("{t:.2} s")),
        p.settled_s,
        per(client_writes(p)),
        per(p.writes.values().sum()),
        per(requests),
        per(events),
        cpu("kube-apiserver"),
        cpu(&client),
    )
}
