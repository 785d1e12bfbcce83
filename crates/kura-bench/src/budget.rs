//! Phase 7: the fleet budget at scale. On the settled fleet, a configuration
//! that changes every instance's pod template (a third region domain) with
//! `rollout.maxUnavailable: 10%`; the instances are sampled every 200 ms for
//! how many are not Ready, until every one applied the new revision and is
//! Ready again. Last, so that its restarts count in no other phase's figures.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

use crate::cluster::Bench;
use crate::fleet::{Expected, Watched};
use crate::proc::secs;
use crate::process::{Process, settle};
use crate::{Args, BenchResult};

/// The budget of this phase, a percentage of the instances.
pub const PERCENT: usize = 10;
/// The configuration version of this phase: a domain no earlier phase used.
const VERSION: u32 = 3;
/// kura-sim's slow start (a namespace annotation, counted from each pod's
/// creation): with pods Ready the moment they exist, an instance would be
/// unavailable for a few hundred milliseconds, and the waves would be too
/// short for the sampling to see. Set only now, so no earlier phase waits on it.
const READY_DELAY: &str = "1s";
const READY_DELAY_ANNOTATION: &str = "sim.kura.dev/ready-delay";
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// Allowance per wave of admissions on top of the phase limit: a waiting
/// instance looks again every 30 s (the operator's `WAITING_RECHECK`) when no
/// freed slot wakes it, and a slot can stay taken for up to a minute after its
/// instance is Ready (`memory::PENDING_AT_MOST`); at N=5, one instance at a
/// time, the first smoke runs took about a minute per instance.
const WAVE_ALLOWANCE: Duration = Duration::from_secs(90);

#[derive(Serialize, Default)]
pub struct Budget {
    /// Not run (`--skip-budget`): every other field is empty.
    pub skipped: bool,
    /// `rollout.maxUnavailable` of the configuration written.
    pub max_unavailable: String,
    /// What it allows: 10% of N rounded down, at least one.
    pub bound: usize,
    /// kura-sim's delay before a new pod is Ready.
    pub ready_delay: String,
    /// From writing the configuration until every instance applied the new
    /// revision, is Ready and its StatefulSet rolled out.
    pub total_s: f64,
    /// The most instances whose Ready condition was not True in one sample.
    pub peak_unavailable: usize,
    /// When that peak was first sampled, from the write.
    pub peak_at_s: f64,
    /// The most StatefulSets with fewer ready replicas than wanted in one sample.
    pub peak_stateful_sets_not_ready: usize,
    pub samples: usize,
    /// From the write to the operator's log line saying it read the file.
    pub config_seen_after_s: Option<f64>,
}

/// `PERCENT` of `n`, rounded down, at least one: the bound as the issue states
/// it, computed here rather than by the operator's code under test.
pub fn bound(n: usize) -> usize {
    (n * PERCENT / 100).max(1)
}

pub async fn run(
    args: &Args,
    bench: &Bench,
    op: &Process,
    watched: &Watched,
    expected: &[Expected],
) -> BenchResult<Budget> {
    if args.skip_budget {
        return Ok(Budget {
            skipped: true,
            ..Budget::default()
        });
    }
    let n = args.instances();
    settle(watched, n, args.phase_timeout()).await?;
    let waves = n.div_ceil(bound(n)) as u32;
    let timeout = args.phase_timeout() + WAVE_ALLOWANCE * waves;
    set_ready_delay(bench).await?;
    let max_unavailable = format!("{PERCENT}%");
    eprintln!(
        "kura-bench: budget: new region domain with maxUnavailable {max_unavailable} (bound {}), pods Ready {READY_DELAY} after creation",
        bound(n)
    );
    let previous = watched.applied_revisions();
    let (start, written) = (Instant::now(), jiff::Timestamp::now());
    op.set_config(&bench.config_with_budget(VERSION, &max_unavailable))?;
    let mut out = Budget {
        max_unavailable,
        bound: bound(n),
        ready_delay: READY_DELAY.into(),
        ..Budget::default()
    };
    let mut last_print = start;
    loop {
        let unavailable = watched.unavailable_instances();
        out.samples += 1;
        if unavailable > out.peak_unavailable {
            out.peak_unavailable = unavailable;
            out.peak_at_s = secs(start.elapsed());
        }
        out.peak_stateful_sets_not_ready = out
            .peak_stateful_sets_not_ready
            .max(watched.stateful_sets_not_ready());
        let applied = watched.converged(expected, Some(&previous));
        if applied == n && unavailable == 0 && watched.rolled_out() == n {
            out.total_s = secs(start.elapsed());
            break;
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "budget: {applied}/{n} applied, {unavailable} not Ready after {timeout:?}"
            )
            .into());
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "kura-bench:   budget: {applied}/{n} applied, {unavailable} not Ready (peak {}) after {:.0}s",
                out.peak_unavailable,
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    out.config_seen_after_s = op
        .logged_at("operator configuration changed")
        .and_then(|t| t.duration_since(written).try_into().ok())
        .map(secs);
    eprintln!(
        "kura-bench: budget: {:.2}s, peak {} not Ready (bound {})",
        out.total_s, out.peak_unavailable, out.bound
    );
    Ok(out)
}

/// Ask kura-sim for a slow start in the operator's namespaces.
async fn set_ready_delay(bench: &Bench) -> BenchResult<()> {
    let namespaces: Api<Namespace> = Api::all(bench.client.clone());
    let patch = json!({"metadata": {"annotations": {READY_DELAY_ANNOTATION: READY_DELAY}}});
    for ns in bench.namespaces_of(&bench.operator_ns) {
        namespaces
            .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}
