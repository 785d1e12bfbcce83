//! `kura-bench`: convergence at scale against the apiserver's own limit.
//!
//! One run, against a running control plane (scripts/control-plane.sh):
//!
//! 1. direct: `kura-operator render` N instances and server-side apply the children
//!    into a fresh namespace with the operator's concurrency and wave order (the
//!    ceiling), then the same after a fleet-wide configuration change;
//! 2. operator: the release operator in a second namespace; create N KuraInstances
//!    and time until every applied revision equals the desired one and every child
//!    exists;
//! 3. change the operator's configuration file (the region's domain, so every host
//!    and so every revision changes) and time until every instance re-applied;
//! 4. idle for two resync periods: mutating requests (audit log) and
//!    resourceVersion changes;
//! 5. the operator's and the apiserver's memory and CPU time during 2–4;
//! 6. `kura-operator diff` on the converged fleet, with its configuration and
//!    with the other one: wall time, peak memory, the writes it predicts;
//! 7. the fleet budget: a configuration changing every pod template with
//!    `rollout.maxUnavailable: 10%` (kura-sim makes new pods Ready after 1 s);
//!    the total time until every instance applied it and is Ready again, and the
//!    peak of instances not Ready, sampled every 200 ms, against the bound.
//!
//! Phases 1–6 run with `maxUnavailable: 100%`, so the budget paces none of
//! their restarts and their ratios compare with runs from before it existed.
//!
//! Writes a JSON report to docs/bench/ and prints a markdown section (appended to
//! a file only with `--markdown`).

// A client of the cluster, as a user is: it creates the fleets it measures and
// changes them. The operator's writer modules (docs/architecture.md, "Who
// writes") do not apply to it.
#![allow(clippy::disallowed_methods)]
// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![cfg_attr(test, allow(clippy::too_many_lines))]

mod audit;
mod budget;
mod cluster;
mod direct;
mod fleet;
mod floor;
mod operator;
mod peer;
mod preview;
mod proc;
mod process;
mod references;
mod references_report;
mod report;
mod shards;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kura_core::time::parse_duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "kura-bench",
    about = "Scale benchmark: operator convergence against direct server-side apply"
)]
pub struct Args {
    /// Instances in each namespace.
    #[arg(long, default_value_t = 1000)]
    pub n: usize,
    /// Quick mode: N=100.
    #[arg(long, conflicts_with = "n")]
    pub quick: bool,
    /// The operator's --resync; the idle phase lasts two of them.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub resync: Duration,
    /// The operator's --concurrency, and the direct client's instances in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// Kubeconfig of the control plane; its directory holds audit.log and kube-apiserver.pid.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// The operator binary (default: kura-operator next to this binary).
    #[arg(long)]
    pub operator_bin: Option<PathBuf>,
    /// The apiserver's audit log (default: audit.log next to the kubeconfig).
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// The apiserver's pid file (default: kube-apiserver.pid next to the kubeconfig).
    #[arg(long)]
    pub apiserver_pid_file: Option<PathBuf>,
    /// JSON report (default: docs/bench/scale-<date>-n<N>.json in the repository).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Markdown file the results are appended to (default: none; the section is
    /// printed, and docs/benchmarks.md is edited by hand from it).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Limit of each phase and each settling wait (default: 120 s + 0.5 s per
    /// instance); the budget phase adds 90 s per wave of admissions.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Skip phase 7, the fleet budget (its waves of 10% take the longest at a
    /// large N; phases 1–6 do not depend on it).
    #[arg(long)]
    pub skip_budget: bool,
    /// Skip the direct client's phases: the operator's figures alone (memory,
    /// idle, restart, `diff`), without the ratios. At N=10,000 a whole run
    /// needs more than two hours; the ratios need the direct client in the
    /// same run, and are reported as not measured.
    #[arg(long)]
    pub skip_direct: bool,
    /// Leave the region's `endpointCheck` setting out of the operator's
    /// configuration: an operator built before the setting existed (before
    /// issue 23) refuses a configuration that names it. For a comparison with
    /// such a build (`--operator-bin`) on the same plane; an operator that
    /// knows the setting would then check endpoints, which nothing answers.
    #[arg(long)]
    pub without_endpoint_check_setting: bool,
    /// Instead of the scale phases, the shards proof (src/shards.rs): one
    /// replica against two sharing the fleet, a kill -9 during a change, a
    /// third joining one. The instances are spread over `--namespaces`.
    #[arg(long)]
    pub shards_proof: bool,
    /// Namespaces each fleet is spread over, the instances dealt over them in
    /// turn (default 1, in which the operator runs with `--namespace`; more,
    /// and it watches the cluster). The shards proof's default is 100 (a
    /// shard is a set of namespaces).
    #[arg(long)]
    pub namespaces: Option<usize>,
    /// The shards proof's `--shards` of every replica.
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    /// The shards proof's `--lease-duration` (the chart's default).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// The shards proof's `--shard-filter` of every replica: `server` needs a
    /// plane with the `ShardedListAndWatch` feature gate
    /// (`KURA_FEATURE_GATES=ShardedListAndWatch=true scripts/control-plane.sh up`).
    /// The report says which filter each replica used.
    #[arg(long, value_enum, default_value_t = kura_operator::shards::select::Choice::Auto)]
    pub shard_filter: kura_operator::shards::select::Choice,
    /// Instead of the scale phases, the references (src/references.rs): each
    /// of `--clients` creates and changes a fleet of its own, at each of
    /// `--in-flight`.
    #[arg(long, conflicts_with = "shards_proof")]
    pub references: bool,
    /// The references' clients, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "operator,peer,floor,direct"
    )]
    pub clients: Vec<references::Client>,
    /// The references' instances in flight (the operator's `--concurrency`,
    /// the peer's workers, the floor's and the direct client's instances at once).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub in_flight: Vec<u16>,
    /// The references' clients in order, then in the reverse order (A-B-B-A),
    /// at each number in flight.
    #[arg(long)]
    pub abba: bool,
    /// The kura-peer binary (default: built or reused by
    /// `scripts/control-plane.sh kura-peer`).
    #[arg(long)]
    pub peer_bin: Option<PathBuf>,
    /// kura-peer publishes a Normal Event per apply, as the operator does
    /// (default: Events only on errors).
    #[arg(long)]
    pub peer_kura_events: bool,
}

impl Args {
    pub fn instances(&self) -> usize {
        if self.quick { 100 } else { self.n }
    }

    pub fn phase_timeout(&self) -> Duration {
        self.timeout.unwrap_or(
            Duration::from_secs(120) + Duration::from_millis(500) * self.instances() as u32,
        )
    }

    fn beside_kubeconfig(&self, file: &str) -> PathBuf {
        self.kubeconfig.with_file_name(file)
    }

    pub fn audit_log(&self) -> PathBuf {
        self.audit_log
            .clone()
            .unwrap_or_else(|| self.beside_kubeconfig("audit.log"))
    }

    pub fn apiserver_pid_file(&self) -> PathBuf {
        self.apiserver_pid_file
            .clone()
            .unwrap_or_else(|| self.beside_kubeconfig("kube-apiserver.pid"))
    }

    pub fn operator_bin(&self) -> PathBuf {
        self.operator_bin.clone().unwrap_or_else(|| {
            let me = std::env::current_exe().expect("current executable");
            me.with_file_name("kura-operator")
        })
    }
}

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> BenchResult<()> {
    let bench = cluster::Bench::setup(&args).await?;
    if args.shards_proof {
        let namespaces = shards::namespaces(&args, &bench);
        let outcome = tokio::select! {
            r = shards::run(&args, &bench, &namespaces) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        };
        shards::cleanup(&bench, &namespaces).await;
        bench.cleanup().await;
        return shards::write(&args, &outcome?);
    }
    if args.references {
        let outcome = tokio::select! {
            r = references::run(&args, &bench) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        };
        bench.cleanup().await;
        let references = outcome?;
        references_report::write(&args, &references)?;
        return match &references.incomplete {
            Some(why) => Err(format!("the references stopped: {why}").into()),
            None => Ok(()),
        };
    }
    // Ctrl-C drops the phases (which kills the operator) and still cleans up:
    // the cluster is shared.
    let mut report = match report::Report::start(&args, &bench).await {
        Ok(report) => report,
        Err(e) => {
            bench.cleanup().await;
            return Err(e);
        }
    };
    let outcome = tokio::select! {
        r = phases(&args, &bench, &mut report) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
    };
    bench.cleanup().await;
    match outcome {
        Ok(()) => {
            report.finish();
            report::write(&args, &report)
        }
        // The phases that ended keep their figures (a run at N=10,000 takes
        // hours; its create and change are worth keeping when the settling
        // after them times out).
        Err(e) => {
            report.incomplete = Some(e.to_string());
            report::write_incomplete(&args, &report)?;
            Err(e)
        }
    }
}

/// Every phase in order, each recorded in `report` as it ends; the
/// namespaces and the class are removed by the caller whatever happens here.
async fn phases(
    args: &Args,
    bench: &cluster::Bench,
    report: &mut report::Report,
) -> BenchResult<()> {
    if args.skip_direct {
        eprintln!("kura-bench: --skip-direct: no direct client, no ratios");
        return operator::run(args, bench, report).await;
    }
    report.direct = direct::run(args, bench).await?;
    if bench.spread > 1 {
        // The operator then watches the whole cluster: the direct fleet's
        // objects would sit in its caches (and count in its memory).
        eprintln!("kura-bench: removing the direct fleet before the operator's phases");
        let direct = bench.namespaces_of(&bench.direct_ns);
        bench.delete_namespaces(&direct).await;
        // Its deletion loads the plane (and would fill the caches of an
        // operator watching the cluster): the operator starts after it, or
        // the run stops. 70,000 objects took more than ten minutes.
        if !bench.wait_gone(&direct, args.phase_timeout()).await {
            return Err("the direct fleet's namespaces were not gone in time".into());
        }
    }
    operator::run(args, bench, report).await
}
