//! Phases 2–4: the release operator in its own namespace, N instances created,
//! a fleet-wide configuration change, then an idle window of two resync periods;
//! memory and CPU time of the operator and the apiserver throughout. The same
//! operator then serves the diff preview and the budget phase.

use std::collections::BTreeMap;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;

use crate::cluster::Bench;
use crate::fleet::{self, Watched, wait_all};
use crate::proc::secs;
use crate::proc::{self, Sampler};
use crate::process::{CONVERGED, Process, settle};
use crate::report::{Idle, Phases, ProcessUse, Report, Resources, Restart};
use crate::{Args, BenchResult, audit};

/// The operator's phases, each recorded in `report` as it ends: a run that
/// stops part-way (a timeout at N=10,000, Ctrl-C) keeps the figures of the
/// phases before (`Report::incomplete`). The operator process is killed when
/// dropped.
pub async fn run(args: &Args, bench: &Bench, report: &mut Report) -> BenchResult<()> {
    let n = args.instances();
    let ns = &bench.namespaces_of(&bench.operator_ns);
    let timeout = args.phase_timeout();
    let expected = fleet::expected(
        |i| bench.namespace_of(&bench.operator_ns, i),
        n,
        &OperatorConfig::parse(&bench.config(1))?,
    )?;
    let watched = Watched::start(&bench.client, ns).await?;
    let mut op = Process::spawn(args, bench, &bench.config(1))?;
    op.wait_running().await?;
    let apiserver = std::fs::read_to_string(args.apiserver_pid_file())
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let sampler = Sampler::start([Some(op.pid()), apiserver].into_iter().flatten().collect());
    let sample = |pid: Option<u32>| pid.and_then(proc::read).unwrap_or_default();
    let (op_pid, mut marks) = (Some(op.pid()), Vec::new());
    marks.push((sample(op_pid), sample(apiserver)));
    // Until the resources of the whole run are taken (after the preview), the
    // peak so far is recorded at each phase's end, for a run that stops before.
    report.resources.operator.rss_at_start_mib = proc::mib(marks[0].0.rss_kib);
    let out = &mut report.operator;

    eprintln!("kura-bench: operator create: {n} instances");
    let mark = audit::Mark::now(&args.audit_log());
    let start = Instant::now();
    create_instances(bench, n, args.concurrency.into()).await?;
    let done = wait_all("operator create: converged", n, timeout, || {
        watched.converged(&expected, None)
    })
    .await?;
    out.create_s = secs(done - start);
    eprintln!("kura-bench: operator create: {:.2}s", out.create_s);
    report.resources.operator.peak_rss_mib = proc::mib(sampler.peak_kib(op.pid()));
    settle(&watched, n, timeout).await?;
    let out = &mut report.operator;
    out.create_requests = audit::count(&args.audit_log(), &mark, ns, &bench.user)?.by_client;
    marks.push((sample(op_pid), sample(apiserver)));

    eprintln!("kura-bench: operator change: new region domain in the configuration file");
    let previous = watched.applied_revisions();
    let mark = audit::Mark::now(&args.audit_log());
    let (start, written) = (Instant::now(), jiff::Timestamp::now());
    op.set_config(&bench.config(2))?;
    let done = wait_all("operator change: re-applied", n, timeout, || {
        watched.converged(&expected, Some(&previous))
    })
    .await?;
    out.change_s = secs(done - start);
    // The operator polls its configuration file (config_watch::POLL_INTERVAL).
    out.config_seen_after_s = op
        .logged_at("operator configuration changed")
        .and_then(|t| t.duration_since(written).try_into().ok())
        .map(secs);
    eprintln!("kura-bench: operator change: {:.2}s", out.change_s);
    report.resources.operator.peak_rss_mib = proc::mib(sampler.peak_kib(op.pid()));
    settle(&watched, n, timeout).await?;
    let out = &mut report.operator;
    out.change_requests = audit::count(&args.audit_log(), &mark, ns, &bench.user)?.by_client;
    marks.push((sample(op_pid), sample(apiserver)));

    out.idle = idle(args, bench, &op).await?;
    marks.push((sample(op_pid), sample(apiserver)));
    out.preview = crate::preview::run(args, bench, 2, 1).await?;
    report.resources = Resources {
        operator: usage(&marks, |m| m.0, sampler.peak_kib(op.pid()), true),
        apiserver: apiserver.map(|pid| usage(&marks, |m| m.1, sampler.peak_kib(pid), false)),
    };
    // After the resources are taken: the budget phase's restarts are no part
    // of the peaks and CPU times that earlier runs recorded.
    drop(sampler);
    report.operator.restart = restart(args, bench, &mut op).await?;
    report.operator.budget = crate::budget::run(args, bench, &op, &watched, &expected).await?;
    Ok(())
}

async fn create_instances(bench: &Bench, n: usize, concurrency: usize) -> BenchResult<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let ns = bench.namespace_of(&bench.operator_ns, i);
            let api: Api<KuraInstance> = Api::namespaced(bench.client.clone(), &ns);
            async move {
                let instance: KuraInstance = serde_json::from_value(Bench::instance(&ns, i))?;
                api.create(&PostParams::default(), &instance).await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Two resync periods with nothing changing: every mutating request (audit log)
/// and every resourceVersion change of the instances and their children.
/// The operator stopped (SIGTERM, as a rolling update does) and started again
/// on the converged fleet: the time to its caches synced and to its first
/// reconcile, its peak RSS (the whole fleet listed at once), then an idle
/// window of two resync periods, which must write nothing.
async fn restart(args: &Args, bench: &Bench, op: &mut Process) -> BenchResult<Restart> {
    eprintln!("kura-bench: restart: the operator stopped and started again");
    op.stop().await?;
    let start = Instant::now();
    *op = Process::spawn(args, bench, &bench.config(2))?;
    let sampler = Sampler::start(vec![op.pid()]);
    let limit = args.phase_timeout();
    op.wait_logged("caches synced", limit).await?;
    let caches_synced_s = secs(start.elapsed());
    op.wait_logged(CONVERGED, limit).await?;
    let first_reconcile_s = secs(start.elapsed());
    let idle = idle(args, bench, op).await?;
    let peak_rss_mib = proc::mib(sampler.peak_kib(op.pid()));
    eprintln!(
        "kura-bench: restart: caches synced after {caches_synced_s:.2}s, first reconcile after {first_reconcile_s:.2}s, peak RSS {peak_rss_mib:.1} MiB"
    );
    Ok(Restart {
        caches_synced_s,
        first_reconcile_s,
        peak_rss_mib,
        idle,
    })
}

async fn idle(args: &Args, bench: &Bench, op: &Process) -> BenchResult<Idle> {
    let ns = &bench.namespaces_of(&bench.operator_ns);
    // The status writes of the last Ready transitions may still be in flight.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = 2 * args.resync + Duration::from_secs(2);
    eprintln!(
        "kura-bench: idle: {:.0}s (two resync periods)",
        window.as_secs_f64()
    );
    let before = resource_versions(&bench.client, ns).await?;
    let reconciles_before = op.log_count(CONVERGED);
    let mark = audit::Mark::now(&args.audit_log());
    tokio::time::sleep(window).await;
    let after = resource_versions(&bench.client, ns).await?;
    let requests = audit::count(&args.audit_log(), &mark, ns, &bench.user)?;
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .chain(after.keys().filter(|k| !before.contains_key(*k)).cloned())
        .collect();
    Ok(Idle {
        window_s: secs(window),
        converged_reconciles: op.log_count(CONVERGED) - reconciles_before,
        mutating_requests: requests,
        objects_compared: before.len(),
        resource_version_changes: changed.len(),
        changed_by_kind: changed.iter().fold(BTreeMap::new(), |mut m, k| {
            *m.entry(k.split('/').next().unwrap_or("").to_string())
                .or_default() += 1;
            m
        }),
        changed: changed.into_iter().take(20).collect(),
    })
}

async fn versions<K>(
    client: &Client,
    namespaces: &[String],
    out: &mut BTreeMap<String, String>,
) -> BenchResult<()>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let (api, spread): (Api<K>, bool) = match namespaces {
        [one] => (Api::namespaced(client.clone(), one), false),
        _ => (Api::all(client.clone()), true),
    };
    for o in api.list_metadata(&ListParams::default()).await?.items {
        let ns = o.metadata.namespace.unwrap_or_default();
        if spread && !namespaces.contains(&ns) {
            continue;
        }
        let name = o.metadata.name.unwrap_or_default();
        let key = if spread {
            format!("{}/{ns}/{name}", K::kind(&()))
        } else {
            format!("{}/{name}", K::kind(&()))
        };
        out.insert(key, o.metadata.resource_version.unwrap_or_default());
    }
    Ok(())
}

/// The instances and every kind of child, including each namespace's default
/// ServiceAccount and root CA ConfigMap (which nothing should touch either).
async fn resource_versions(
    client: &Client,
    ns: &[String],
) -> BenchResult<BTreeMap<String, String>> {
    let mut v = BTreeMap::new();
    versions::<KuraInstance>(client, ns, &mut v).await?;
    versions::<StatefulSet>(client, ns, &mut v).await?;
    versions::<Service>(client, ns, &mut v).await?;
    versions::<ConfigMap>(client, ns, &mut v).await?;
    versions::<ServiceAccount>(client, ns, &mut v).await?;
    versions::<Ingress>(client, ns, &mut v).await?;
    versions::<NetworkPolicy>(client, ns, &mut v).await?;
    versions::<PodDisruptionBudget>(client, ns, &mut v).await?;
    Ok(v)
}

/// CPU time per phase from the samples taken at the phase boundaries (start,
/// after create, after change, after idle) and the memory peaks.
fn usage<T: Fn(&(proc::Sample, proc::Sample)) -> proc::Sample>(
    marks: &[(proc::Sample, proc::Sample)],
    pick: T,
    sampled_peak_kib: u64,
    hwm_is_run_peak: bool,
) -> ProcessUse {
    let s: Vec<proc::Sample> = marks.iter().map(pick).collect();
    ProcessUse {
        // The operator started with this run, so its VmHWM is the run's peak; the
        // shared apiserver's covers its whole life and is reported separately.
        peak_rss_mib: proc::mib(if hwm_is_run_peak {
            s[3].hwm_kib
        } else {
            sampled_peak_kib
        }),
        sampled_peak_rss_mib: proc::mib(sampled_peak_kib),
        lifetime_hwm_mib: proc::mib(s[3].hwm_kib),
        rss_at_start_mib: proc::mib(s[0].rss_kib),
        cpu_s: Phases {
            create: proc::cpu_seconds(s[0], s[1]),
            change: proc::cpu_seconds(s[1], s[2]),
            idle: proc::cpu_seconds(s[2], s[3]),
            total: proc::cpu_seconds(s[0], s[3]),
        },
    }
}
