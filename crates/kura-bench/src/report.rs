//! The run's figures: a JSON file (docs/bench/, the run history) and a
//! markdown section, printed, and appended to a file only with `--markdown`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::Counts;
use crate::cluster::Bench;
use crate::{Args, BenchResult};

/// What a region-domain change changes per instance: the Ingress, the ConfigMap
/// (the cache's configuration holds the host) and the StatefulSet (its pod
/// template hash covers that configuration), plus one status patch.
const CHANGE_WRITES_GOAL: f64 = 4.0;

/// The goals set for a fleet size: N=1000 and N=10,000; any other N is
/// measured and not judged.
struct Targets {
    create_ratio: f64,
    /// Per-object stamps: a fleet-wide change touching only some children
    /// must be cheaper than the direct client re-applying all of them.
    change_ratio: f64,
    rss_mib: f64,
    diff_s: f64,
    diff_mib: f64,
}

fn targets(n: usize) -> Option<Targets> {
    match n {
        1000 => Some(Targets {
            create_ratio: 1.25,
            change_ratio: 0.8,
            rss_mib: 64.0,
            diff_s: 10.0,
            diff_mib: 128.0,
        }),
        10_000 => Some(Targets {
            create_ratio: 1.3,
            change_ratio: 1.0,
            rss_mib: 256.0,
            diff_s: 30.0,
            diff_mib: 512.0,
        }),
        _ => None,
    }
}
const RENDER_BENCH: &str = "render+hash <= 20 us: `cargo bench --bench render`, see docs/benchmarks.md (not measured here)";

pub use crate::proc::secs;

#[derive(Serialize, Default)]
pub struct Report {
    pub command: String,
    pub user: String,
    pub date: String,
    pub n: usize,
    /// Namespaces each fleet was spread over (1: one namespace each).
    pub namespaces: usize,
    pub concurrency: u16,
    pub resync_s: f64,
    pub versions: Versions,
    pub machine: Machine,
    pub direct: Direct,
    pub operator: Operator,
    pub resources: Resources,
    pub ratios: Ratios,
    pub goals: Vec<Goal>,
    /// Why the run stopped before its last phase; the figures of the phases
    /// that ended are kept, the others are zero (`write_incomplete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

#[derive(Serialize, Default)]
pub struct Versions {
    pub kura_operator_git: String,
    pub kura_operator: String,
    pub kubernetes: String,
}

#[derive(Serialize, Default)]
pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    pub load_average_at_start: String,
}

/// Wall times of the direct server-side apply; `objects` is per phase.
#[derive(Serialize, Default)]
pub struct Direct {
    pub render_s: f64,
    pub create_s: f64,
    pub change_s: f64,
    pub objects: usize,
    pub create_requests: BTreeMap<String, u64>,
    pub change_requests: BTreeMap<String, u64>,
}

#[derive(Serialize, Default)]
pub struct Operator {
    pub create_s: f64,
    pub change_s: f64,
    /// From writing the configuration file to the operator's log line saying it
    /// read the new one; part of `change_s`.
    pub config_seen_after_s: Option<f64>,
    pub create_requests: BTreeMap<String, u64>,
    pub change_requests: BTreeMap<String, u64>,
    pub idle: Idle,
    pub preview: crate::preview::Preview,
    pub restart: Restart,
    pub budget: crate::budget::Budget,
}

/// The operator restarted on the converged fleet.
#[derive(Serialize, Default)]
pub struct Restart {
    /// From the start of the new process to its log line "caches synced".
    pub caches_synced_s: f64,
    /// From the start to its first reconcile (a converged one).
    pub first_reconcile_s: f64,
    /// VmHWM of the new process: the whole fleet listed at start.
    pub peak_rss_mib: f64,
    /// Two resync periods after the first reconcile.
    pub idle: Idle,
}

#[derive(Serialize, Default)]
pub struct Idle {
    pub window_s: f64,
    /// Reconciles the operator logged as converged during the window.
    pub converged_reconciles: usize,
    pub mutating_requests: Counts,
    pub objects_compared: usize,
    pub resource_version_changes: usize,
    pub changed_by_kind: BTreeMap<String, u64>,
    /// The first 20 changed objects.
    pub changed: Vec<String>,
}

#[derive(Serialize, Default)]
pub struct Resources {
    pub operator: ProcessUse,
    pub apiserver: Option<ProcessUse>,
}

#[derive(Serialize, Default)]
pub struct ProcessUse {
    /// The operator: VmHWM. The apiserver: the highest RSS sampled (every 200 ms).
    pub peak_rss_mib: f64,
    pub sampled_peak_rss_mib: f64,
    pub lifetime_hwm_mib: f64,
    pub rss_at_start_mib: f64,
    /// Each phase runs until the next begins, so it includes its settling wait.
    pub cpu_s: Phases,
}

#[derive(Serialize, Default)]
pub struct Phases {
    pub create: f64,
    pub change: f64,
    pub idle: f64,
    pub total: f64,
}

#[derive(Serialize, Default)]
pub struct Ratios {
    pub create: f64,
    pub change: f64,
}

#[derive(Serialize)]
pub struct Goal {
    pub goal: String,
    pub measured: String,
    /// None where the run cannot say (RSS below N=1000, the render benchmark).
    pub met: Option<bool>,
}

fn cmd(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The repository: this crate is `crates/kura-bench` in it.
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

impl Report {
    pub async fn start(args: &Args, bench: &Bench) -> BenchResult<Report> {
        let repo = repo().to_string_lossy().to_string();
        let mut git = cmd("git", &["-C", &repo, "rev-parse", "--short=12", "HEAD"]);
        if !cmd(
            "git",
            &["-C", &repo, "status", "--porcelain", "--untracked-files=no"],
        )
        .is_empty()
        {
            git.push_str("-dirty");
        }
        let op_bin = args.operator_bin().to_string_lossy().to_string();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default();
        Ok(Report {
            command: std::env::var("KURA_BENCH_COMMAND")
                .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
            date: jiff::Timestamp::now()
                .round(jiff::Unit::Second)?
                .to_string(),
            user: bench.user.clone(),
            n: args.instances(),
            namespaces: bench.spread,
            concurrency: args.concurrency,
            resync_s: args.resync.as_secs_f64(),
            versions: Versions {
                kura_operator_git: git,
                kura_operator: cmd(&op_bin, &["--version"]),
                kubernetes: bench.client.apiserver_version().await?.git_version,
            },
            machine: Machine {
                cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
                cpu,
                load_average_at_start: std::fs::read_to_string("/proc/loadavg")
                    .unwrap_or_default()
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" "),
            },
            ..Default::default()
        })
    }

    pub fn finish(&mut self) {
        // A run with --skip-direct has no direct figures: its ratios are NaN
        // (null in the JSON) and their goals not judged.
        let ratio = |op: f64, direct: f64| {
            if direct > 0.0 {
                (op / direct * 100.0).round() / 100.0
            } else {
                f64::NAN
            }
        };
        self.ratios = Ratios {
            create: ratio(self.operator.create_s, self.direct.create_s),
            change: ratio(self.operator.change_s, self.direct.change_s),
        };
        let t = targets(self.n);
        self.goals = [
            self.speed_goals(t.as_ref()),
            self.idle_goals(),
            self.resource_goals(t.as_ref()),
            vec![
                budget_goal(&self.operator.budget),
                Goal {
                    goal: RENDER_BENCH.into(),
                    measured: String::new(),
                    met: None,
                },
            ],
        ]
        .into_iter()
        .flatten()
        .collect();
    }

    /// Create and change against the direct client, and the writes of a change.
    fn speed_goals(&self, t: Option<&Targets>) -> Vec<Goal> {
        let create_goal = t.map(|t| t.create_ratio);
        let change_goal = t.map(|t| t.change_ratio);
        vec![
            Goal {
                goal: format!("create: operator / direct <= {}", shown(create_goal)),
                measured: format!("{:.2}", self.ratios.create),
                met: judged_ratio(create_goal, self.ratios.create),
            },
            Goal {
                goal: format!(
                    "fleet-wide change: operator / direct <= {} (only the changed objects are sent)",
                    shown(change_goal)
                ),
                measured: format!("{:.2}", self.ratios.change),
                met: judged_ratio(change_goal, self.ratios.change),
            },
            Goal {
                goal: format!(
                    "fleet-wide change: operator writes per instance <= {CHANGE_WRITES_GOAL} (3 changed children + 1 status patch; Events not counted)"
                ),
                measured: format!(
                    "{:.2}",
                    per_instance(&self.operator.change_requests, self.n)
                ),
                met: Some(
                    per_instance(&self.operator.change_requests, self.n) <= CHANGE_WRITES_GOAL,
                ),
            },
        ]
    }

    /// No writes while idle, before and after a restart.
    fn idle_goals(&self) -> Vec<Goal> {
        let idle = &self.operator.idle;
        let restart = &self.operator.restart.idle;
        vec![
        Goal {
            goal: "idle: zero mutating requests by the operator (excluding Events)".into(),
            measured: format!(
                "{}; any user: {} ({})",
                idle.mutating_requests.by_client.values().sum::<u64>(),
                idle.mutating_requests.total,
                requests(&idle.mutating_requests.by_user)
            ),
            met: Some(idle.mutating_requests.by_client.is_empty()),
        },
        Goal {
            goal: "idle: zero resourceVersion changes".into(),
            measured: format!(
                "{} of {} ({})",
                idle.resource_version_changes,
                idle.objects_compared,
                requests(&idle.changed_by_kind)
            ),
            met: Some(idle.resource_version_changes == 0),
        },
        Goal {
            goal: "after a restart: zero mutating requests by the operator and zero resourceVersion changes in two resync periods".into(),
            measured: format!(
                "{} requests, {} of {} objects changed; caches synced after {:.2} s, first reconcile after {:.2} s, peak RSS {} MiB",
                restart.mutating_requests.by_client.values().sum::<u64>(),
                restart.resource_version_changes,
                restart.objects_compared,
                self.operator.restart.caches_synced_s,
                self.operator.restart.first_reconcile_s,
                self.operator.restart.peak_rss_mib,
            ),
            met: Some(
                restart.mutating_requests.by_client.is_empty()
                    && restart.resource_version_changes == 0,
            ),
        },
        ]
    }

    /// The operator's and `diff`'s memory, and `diff`'s time.
    fn resource_goals(&self, t: Option<&Targets>) -> Vec<Goal> {
        // The higher of the first process and the restarted one (which lists
        // the whole fleet at once).
        let rss = self
            .resources
            .operator
            .peak_rss_mib
            .max(self.operator.restart.peak_rss_mib);
        let preview = &self.operator.preview;
        let diff_s = preview.converged.wall_s.max(preview.edited.wall_s);
        let diff_mib = preview
            .converged
            .peak_rss_mib
            .max(preview.edited.peak_rss_mib);
        vec![
            Goal {
                goal: format!("operator peak RSS <= {} MiB", shown(t.map(|t| t.rss_mib))),
                measured: format!("{rss} MiB at N={}", self.n),
                met: t.map(|t| rss <= t.rss_mib),
            },
            Goal {
                goal: format!(
                    "diff <= {} s and <= {} MiB (the slower of its runs without --show-diff)",
                    shown(t.map(|t| t.diff_s)),
                    shown(t.map(|t| t.diff_mib))
                ),
                measured: format!("{:.2} s, {} MiB at N={}", diff_s, diff_mib, self.n),
                met: t
                    .as_ref()
                    .map(|t| diff_s <= t.diff_s && diff_mib <= t.diff_mib),
            },
        ]
    }
}

/// A goal's bound as shown: "(no goal at this N)" without one.
fn shown(goal: Option<f64>) -> String {
    goal.map_or("(no goal at this N)".into(), |g| g.to_string())
}

/// Whether the ratio `r` met `goal`; not judged without a goal or a ratio.
fn judged_ratio(goal: Option<f64>, r: f64) -> Option<bool> {
    goal.map(|g| r <= g).filter(|_| !r.is_nan())
}

/// The budget phase's goal: the measured peak within the bound.
fn budget_goal(b: &crate::budget::Budget) -> Goal {
    Goal {
        goal: format!(
            "fleet change with maxUnavailable {}: peak unavailable <= bound ({}% of N, at least 1)",
            b.max_unavailable,
            crate::budget::PERCENT
        ),
        measured: format!(
            "peak {} not Ready, bound {} (sampled every 200 ms)",
            b.peak_unavailable, b.bound
        ),
        met: (!b.skipped).then_some(b.peak_unavailable <= b.bound),
    }
}

fn default_json(n: usize) -> PathBuf {
    json_path("scale", n)
}

/// `docs/bench/<what>-<date>-n<N>.json` in the repository: the run history.
pub fn json_path(what: &str, n: usize) -> PathBuf {
    let stamp = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H%M%SZ")
        .to_string();
    repo().join(format!("docs/bench/{what}-{stamp}-n{n}.json"))
}

/// A run that stopped part-way: its JSON only, named `…-incomplete.json`
/// (no ratios or goals, which would compare zeros; no markdown section).
pub fn write_incomplete(args: &Args, report: &Report) -> BenchResult<()> {
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| default_json(report.n))
        .with_extension("incomplete.json");
    write_json(&json, report)?;
    eprintln!(
        "kura-bench: the run stopped ({}); the figures of the phases that ended are in {}",
        report.incomplete.as_deref().unwrap_or("?"),
        json.display()
    );
    Ok(())
}

fn write_json(json: &Path, report: &Report) -> BenchResult<()> {
    if let Some(dir) = json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(json, serde_json::to_string_pretty(report)? + "\n")?;
    Ok(())
}

pub fn write(args: &Args, report: &Report) -> BenchResult<()> {
    let json = args.json.clone().unwrap_or_else(|| default_json(report.n));
    write_json(&json, report)?;
    let shown = json
        .strip_prefix(repo())
        .unwrap_or(&json)
        .display()
        .to_string();
    let section = markdown(report, &shown);
    println!("{section}");
    // The run history is the JSON files; docs/benchmarks.md keeps the current
    // figures, edited by hand from this section. Appending is asked for.
    match &args.markdown {
        Some(md) => {
            let mut text = std::fs::read_to_string(md).unwrap_or_default();
            text.push_str(&section);
            std::fs::write(md, text)?;
            eprintln!(
                "kura-bench: wrote {} and appended to {}",
                json.display(),
                md.display()
            );
        }
        None => eprintln!(
            "kura-bench: wrote {} (docs/benchmarks.md keeps the current figures: fold the section above into it by hand)",
            json.display()
        ),
    }
    Ok(())
}

/// Writes per instance in a phase's requests.
fn per_instance(requests: &BTreeMap<String, u64>, n: usize) -> f64 {
    requests.values().sum::<u64>() as f64 / n.max(1) as f64
}

/// The fleet-wide change's writes per instance, by request, direct and operator side by side.
fn change_table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n| fleet-wide change: writes per instance | direct apply | operator |\n|---|---:|---:|"
    );
    let keys: std::collections::BTreeSet<&String> = r
        .direct
        .change_requests
        .keys()
        .chain(r.operator.change_requests.keys())
        .collect();
    let per = |m: &BTreeMap<String, u64>, k: &str| {
        m.get(k).copied().unwrap_or(0) as f64 / r.n.max(1) as f64
    };
    for k in keys {
        let _ = writeln!(
            s,
            "| {k} | {:.2} | {:.2} |",
            per(&r.direct.change_requests, k),
            per(&r.operator.change_requests, k)
        );
    }
    let _ = writeln!(
        s,
        "| total | {:.2} | {:.2} |",
        per_instance(&r.direct.change_requests, r.n),
        per_instance(&r.operator.change_requests, r.n)
    );
    s
}

fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "n/a",
    }
}

fn requests(map: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn markdown(r: &Report, json: &str) -> String {
    let mut s = String::new();
    let spread = if r.namespaces > 1 {
        format!(" in {} namespaces", r.namespaces)
    } else {
        String::new()
    };
    let _ = writeln!(s, "\n### Scale run {}, N={}{spread}\n", r.date, r.n);
    let _ = writeln!(
        s,
        "Command: `{}` · kura-operator {} ({}) · Kubernetes {} · {} cores ({}), load average at start {} · concurrency {} · resync {}s · JSON: `{json}`\n",
        r.command,
        r.versions.kura_operator_git,
        r.versions.kura_operator,
        r.versions.kubernetes,
        r.machine.cores,
        r.machine.cpu,
        r.machine.load_average_at_start,
        r.concurrency,
        r.resync_s,
    );
    s.push_str(&measures(r));
    s.push_str(&diff_and_budget_rows(r));
    s.push_str(&change_table(r));
    s.push_str(&goals_and_notes(r));
    s
}

/// The table's rows of the create, change, idle and restart phases and the
/// processes' resources.
fn measures(r: &Report) -> String {
    let mut s = String::new();
    let op = &r.resources.operator;
    let idle = &r.operator.idle;
    let _ = writeln!(
        s,
        "| measure | direct apply | operator | operator / direct |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| create {} instances (7 children each) | {:.2} s | {:.2} s | {:.2} |",
        r.n, r.direct.create_s, r.operator.create_s, r.ratios.create
    );
    let _ = writeln!(
        s,
        "| fleet-wide change (region domain) | {:.2} s | {:.2} s | {:.2} |",
        r.direct.change_s, r.operator.change_s, r.ratios.change
    );
    let _ = writeln!(
        s,
        "| idle {:.0} s: mutating requests, resourceVersion changes | | {}, {} of {} | |",
        idle.window_s,
        idle.mutating_requests.total,
        idle.resource_version_changes,
        idle.objects_compared
    );
    let restart = &r.operator.restart;
    let _ = writeln!(
        s,
        "| restarted (SIGTERM, then started): caches synced, first reconcile; peak RSS; idle {:.0} s: mutating requests, resourceVersion changes | | {:.2} s, {:.2} s; {} MiB; {}, {} of {} | |",
        restart.idle.window_s,
        restart.caches_synced_s,
        restart.first_reconcile_s,
        restart.peak_rss_mib,
        restart.idle.mutating_requests.total,
        restart.idle.resource_version_changes,
        restart.idle.objects_compared
    );
    let _ = writeln!(
        s,
        "| operator peak RSS (VmHWM); CPU create / change / idle | | {} MiB; {:.2} / {:.2} / {:.2} s | |",
        op.peak_rss_mib, op.cpu_s.create, op.cpu_s.change, op.cpu_s.idle
    );
    if let Some(api) = &r.resources.apiserver {
        let _ = writeln!(
            s,
            "| apiserver peak RSS (sampled; {} MiB at start); CPU create / change / idle | | {} MiB; {:.2} / {:.2} / {:.2} s | |",
            api.rss_at_start_mib,
            api.peak_rss_mib,
            api.cpu_s.create,
            api.cpu_s.change,
            api.cpu_s.idle
        );
    }
    s
}

/// The table's rows of `kura-operator diff` and of the change under the budget.
fn diff_and_budget_rows(r: &Report) -> String {
    let mut s = String::new();
    let preview = &r.operator.preview;
    for (what, run) in [
        ("in force (nothing to change)", &preview.converged),
        ("edited (every instance changes)", &preview.edited),
        ("edited, `--show-diff`", &preview.edited_show_diff),
    ] {
        let _ = writeln!(
            s,
            "| `kura-operator diff`, configuration {what}: wall time, peak RSS, exit code | | {:.2} s, {} MiB, {} | |",
            run.wall_s, run.peak_rss_mib, run.exit_code
        );
    }
    let budget = &r.operator.budget;
    if budget.skipped {
        s.push_str("| fleet-wide change with the budget | | skipped (`--skip-budget`) | |\n");
    } else {
        let _ = writeln!(
            s,
            "| fleet-wide change with `maxUnavailable: {}` (region domain, pods Ready {} after creation): total time; peak instances not Ready (bound {}); peak StatefulSets not ready | | {:.2} s; {}; {} | |",
            budget.max_unavailable,
            budget.ready_delay,
            budget.bound,
            budget.total_s,
            budget.peak_unavailable,
            budget.peak_stateful_sets_not_ready
        );
    }
    s
}

/// The goals, judged, and what the audit log counted.
fn goals_and_notes(r: &Report) -> String {
    let mut s = String::new();
    let idle = &r.operator.idle;
    let preview = &r.operator.preview;
    let _ = writeln!(s, "\n| goal | measured | |\n|---|---|---|");
    for g in &r.goals {
        let _ = writeln!(s, "| {} | {} | {} |", g.goal, g.measured, mark(g.met));
    }
    let _ = writeln!(
        s,
        "\nThe operator read the changed configuration file {} s after it was written (it watches the file). \
         Mutating requests by the kubeconfig's user `{}` (the direct client; the operator) in the namespace until each phase settled (audit log, excluding Events): \
         direct create: {}; operator create: {}; operator change: {}. Idle, any user: {}; {} converged reconciles in the window.",
        r.operator
            .config_seen_after_s
            .map_or("?".into(), |s| format!("{s:.2}")),
        r.user,
        requests(&r.direct.create_requests),
        requests(&r.operator.create_requests),
        requests(&r.operator.change_requests),
        requests(&idle.mutating_requests.by_request),
        idle.converged_reconciles,
    );
    let _ = writeln!(
        s,
        "\n`kura-operator diff` with the edit undone, after the idle phase, predicted these writes (the same edit the other way round, so compare with the operator's change phase above): {}.",
        requests(&preview.edited.predicted_requests),
    );
    s
}
