//! `--shards-proof`: replicas sharing one fleet, against one replica
//! holding it all. The fleet is spread over many namespaces, since a shard is
//! a set of namespaces (the hash of an instance's namespace picks it).
//!
//! 1. one replica holding every shard: N instances created, then a
//!    fleet-wide change (the region's domain: every instance re-applies);
//!    times and peak RSS;
//! 2. two replicas, half the shards each: the same kind of change; time and
//!    each one's peak RSS;
//! 3. kill -9 of one of them a fifth into a change: time until the other
//!    holds its shards (goal: within the lease duration plus one resync),
//!    until every instance converged, and the objects both wrote (goal: none);
//! 4. the killed one back, then a third replica joining a fifth into a
//!    change: the longest stretch in which no instance converged (goal: under
//!    the lease duration, so no shard waited for a Lease to expire), and the
//!    objects written by two replicas (goal: none).
//!
//! Each replica impersonates `replica-<name>`, so the audit log names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::json;

use kura_core::api::{KuraInstance, Phase};
use kura_core::shard::Shards;

use crate::audit::{self, ReplicaWrite};
use crate::cluster::Bench;
use crate::proc::{self, Sampler, secs};
use crate::process::{Process, Scope};
use crate::{Args, BenchResult};

/// Marks the run's instances, so that the bench watches only them.
const RUN_LABEL: &str = "kura-bench/run";

#[derive(Serialize, Default)]
pub struct ShardsReport {
    pub command: String,
    pub date: String,
    pub n: usize,
    pub namespaces: usize,
    pub shards: u32,
    pub lease_s: f64,
    pub resync_s: f64,
    pub concurrency: u16,
    pub versions: crate::report::Versions,
    pub machine: crate::report::Machine,
    /// Which path the replicas measured: `server` (the apiserver's
    /// `shardSelector` on the shard-local caches' lists and watches) or
    /// `client` (label-free: every replica caches the whole fleet and acts
    /// for its shards), from each replica's "shard filter" log line.
    pub list_path: String,
    /// The filter each replica used, by replica.
    pub shard_filter: BTreeMap<String, String>,
    /// Instances per shard (namespaces hash unevenly).
    pub instances_per_shard: BTreeMap<u32, usize>,
    pub one: One,
    pub two: Two,
    pub failover: Failover,
    pub join: Join,
    pub goals: Vec<crate::report::Goal>,
}

#[derive(Serialize, Default)]
pub struct One {
    pub create_s: f64,
    pub change_s: f64,
    pub peak_rss_mib: f64,
}

#[derive(Serialize, Default)]
pub struct Two {
    pub held: BTreeMap<String, BTreeSet<u32>>,
    pub change_s: f64,
    pub peak_rss_mib: BTreeMap<String, f64>,
    pub written_by_two: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize, Default)]
pub struct Failover {
    pub killed: String,
    pub killed_shards: BTreeSet<u32>,
    /// Instances converged when the kill came.
    pub converged_at_kill: usize,
    pub taken_over_s: f64,
    /// From the kill until the last instance converged.
    pub converged_after_kill_s: f64,
    pub change_s: f64,
    pub written_by_two: BTreeMap<String, Vec<String>>,
    /// Requests the apiserver did not answer with success (cut by the kill).
    pub unanswered: Vec<ReplicaWrite>,
}

#[derive(Serialize, Default)]
pub struct Join {
    pub joined: String,
    /// Instances of the change converged when the joining replica started.
    pub converged_at_join: usize,
    /// Whether it started before the change ended (at a small N the change
    /// can end between two polls; nothing about pauses is measured then).
    pub during_change: bool,
    /// From the joining replica's start until it held a shard.
    pub first_shard_s: f64,
    pub held_after: BTreeMap<String, BTreeSet<u32>>,
    pub change_s: f64,
    /// The longest stretch of the change in which no instance of a shard
    /// converged while some of it had still to, by shard.
    pub longest_stall_s: BTreeMap<u32, f64>,
    pub written_by_two: BTreeMap<String, Vec<String>>,
}

/// The run's namespaces (instance `i` in namespace `i % M`), where the
/// Leases live, and a cache of the run's instances.
struct Fleet<'a> {
    args: &'a Args,
    bench: &'a Bench,
    namespaces: Vec<String>,
    instances: Store<KuraInstance>,
    task: tokio::task::JoinHandle<()>,
    n: usize,
    /// The shard filter each replica logged at its start.
    filters: std::sync::Mutex<BTreeMap<String, String>>,
}

/// The path measured, from the filters the replicas used.
fn list_path(filters: &BTreeMap<String, String>) -> String {
    let used: BTreeSet<&str> = filters.values().map(String::as_str).collect();
    match used.into_iter().collect::<Vec<_>>()[..] {
        ["server"] => "server-side sharded list and watch: the shard-local caches hold the held shards' objects".into(),
        ["client"] => "label-free: every replica caches the whole fleet and acts for its shards".into(),
        _ => format!("mixed: {filters:?}"),
    }
}

impl Drop for Fleet<'_> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The run's namespaces, `<operator namespace>-<k>`, as many in each shard
/// (names in sequence hash unevenly, see the chart's README; the proof
/// measures replicas sharing the work, not one shard's luck).
pub fn namespaces(args: &Args, bench: &Bench) -> Vec<String> {
    let Some(shards) = Shards::new(args.shards) else {
        return Vec::new();
    };
    let each = args
        .namespaces
        .unwrap_or(100)
        .div_ceil(args.shards as usize);
    let mut per_shard: BTreeMap<u32, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for k in 0..1_000_000 {
        let ns = format!("{}-{k}", bench.operator_ns);
        let count = per_shard.entry(shards.of_namespace(&ns)).or_default();
        if *count < each {
            *count += 1;
            out.push(ns);
        }
        if out.len() == each * args.shards as usize {
            break;
        }
    }
    out
}

/// Every phase in order; the caller removes the namespaces whatever happens.
pub async fn run(args: &Args, bench: &Bench, namespaces: &[String]) -> BenchResult<ShardsReport> {
    let n = args.instances();
    let base = crate::report::Report::start(args, bench).await?;
    let shards = Shards::new(args.shards).ok_or("--shards must be at least 1")?;
    let mut out = ShardsReport {
        command: base.command,
        date: base.date,
        n,
        namespaces: namespaces.len(),
        shards: args.shards,
        lease_s: secs(args.lease_duration),
        resync_s: secs(args.resync),
        concurrency: args.concurrency,
        versions: base.versions,
        machine: base.machine,
        ..Default::default()
    };
    for i in 0..n {
        *out.instances_per_shard
            .entry(shards.of_namespace(&namespaces[i % namespaces.len()]))
            .or_default() += 1;
    }
    let fleet = Fleet::start(args, bench, namespaces, n).await?;
    out.one = fleet.one().await?;
    let (mut a, b, two) = fleet.two().await?;
    out.two = two;
    let (b, failover) = fleet.failover(&mut a, b).await?;
    out.failover = failover;
    out.join = fleet.join(b).await?;
    out.shard_filter = fleet.filters.lock().expect("filters").clone();
    out.list_path = list_path(&out.shard_filter);
    out.goals = goals(&out);
    Ok(out)
}

impl<'a> Fleet<'a> {
    async fn start(
        args: &'a Args,
        bench: &'a Bench,
        namespaces: &[String],
        n: usize,
    ) -> BenchResult<Fleet<'a>> {
        let api: Api<Namespace> = Api::all(bench.client.clone());
        for ns in namespaces {
            let ns = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
            api.create(&PostParams::default(), &ns).await?;
        }
        let (reader, writer) = reflector::store();
        let selector = format!("{RUN_LABEL}={}", bench.operator_ns);
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<KuraInstance>::all(bench.client.clone()),
                watcher::Config::default().labels(&selector),
            )
            .default_backoff(),
        );
        let task = tokio::spawn(stream.for_each(|_| async {}));
        reader.wait_until_ready().await?;
        Ok(Fleet {
            args,
            bench,
            namespaces: namespaces.to_vec(),
            instances: reader,
            task,
            n,
            filters: Default::default(),
        })
    }

    /// Phase 1: one replica holds every shard.
    async fn one(&self) -> BenchResult<One> {
        let mut one = self.replica("one", 1).await?;
        let sampler = Sampler::start(vec![one.pid()]);
        self.balanced(&[("one", self.args.shards as usize)]).await?;
        eprintln!(
            "kura-bench: shards: one replica, {} instances in {} namespaces",
            self.n,
            self.namespaces.len()
        );
        let start = Instant::now();
        self.create_instances().await?;
        let done = self.converged_since(None).await?;
        let create_s = secs(done - start);
        self.settle().await?;
        let change_s = self.change(&[&one], 2).await?;
        let peak_rss_mib = proc::mib(sampler.peak_kib(one.pid()));
        eprintln!(
            "kura-bench: shards: one replica: create {create_s:.1}s, change {change_s:.1}s, peak RSS {peak_rss_mib} MiB"
        );
        // SIGTERM: it releases its Leases, so the next replicas start at once.
        one.stop().await?;
        Ok(One {
            create_s,
            change_s,
            peak_rss_mib,
        })
    }

    /// Phase 2: two replicas, half the shards each.
    async fn two(&self) -> BenchResult<(Process, Process, Two)> {
        let a = self.replica("a", 2).await?;
        let b = self.replica("b", 2).await?;
        let sampler = Sampler::start(vec![a.pid(), b.pid()]);
        let half = self.args.shards as usize / 2;
        let held = self
            .balanced(&[("a", half), ("b", self.args.shards as usize - half)])
            .await?;
        let mark = audit::Mark::now(&self.args.audit_log());
        let change_s = self.change(&[&a, &b], 3).await?;
        let writes = audit::replica_writes(&self.args.audit_log(), &mark, &self.namespaces)?;
        let peak_rss_mib = [("a", &a), ("b", &b)]
            .into_iter()
            .map(|(name, p)| (name.to_string(), proc::mib(sampler.peak_kib(p.pid()))))
            .collect();
        eprintln!(
            "kura-bench: shards: two replicas ({held:?}): change {change_s:.1}s, peak RSS {peak_rss_mib:?} MiB"
        );
        Ok((
            a,
            b,
            Two {
                held,
                change_s,
                peak_rss_mib,
                written_by_two: audit::written_by_two(&writes),
            },
        ))
    }

    /// Phase 3: `a` killed a fifth into a change; `b` takes its shards.
    async fn failover(&self, a: &mut Process, b: Process) -> BenchResult<(Process, Failover)> {
        let killed_shards = self.held().await.remove("a").unwrap_or_default();
        let mark = audit::Mark::now(&self.args.audit_log());
        let previous = self.applied();
        let start = Instant::now();
        a.set_config(&self.bench.config(4))?;
        b.set_config(&self.bench.config(4))?;
        let fifth = self.wait_converged(&previous, self.n / 5).await?;
        a.kill();
        let killed = Instant::now();
        eprintln!("kura-bench: shards: killed a (shards {killed_shards:?}) with {fifth} converged");
        self.balanced(&[("b", self.args.shards as usize)]).await?;
        let taken_over_s = secs(killed.elapsed());
        self.wait_converged(&previous, self.n).await?;
        let converged_after_kill_s = secs(killed.elapsed());
        let change_s = secs(start.elapsed());
        self.settle().await?;
        let writes = audit::replica_writes(&self.args.audit_log(), &mark, &self.namespaces)?;
        eprintln!(
            "kura-bench: shards: taken over after {taken_over_s:.1}s, converged {converged_after_kill_s:.1}s after the kill"
        );
        Ok((
            b,
            Failover {
                killed: "a".into(),
                killed_shards,
                converged_at_kill: fifth,
                taken_over_s,
                converged_after_kill_s,
                change_s,
                written_by_two: audit::written_by_two(&writes),
                unanswered: writes
                    .into_iter()
                    .filter(|w| !(200..300).contains(&w.code))
                    .collect(),
            },
        ))
    }

    /// Phase 4: the killed replica back, then `c` joining a fifth into a
    /// change.
    async fn join(&self, b: Process) -> BenchResult<Join> {
        let a = self.replica("a2", 4).await?;
        let half = self.args.shards as usize / 2;
        self.balanced(&[("a2", half), ("b", self.args.shards as usize - half)])
            .await?;
        let mark = audit::Mark::now(&self.args.audit_log());
        let previous = self.applied();
        let start = Instant::now();
        a.set_config(&self.bench.config(5))?;
        b.set_config(&self.bench.config(5))?;
        let mut c: Option<(Process, Instant)> = None;
        let mut converged_at_join = 0;
        let mut first_shard_s = None;
        let mut stalls: BTreeMap<u32, Stall> = BTreeMap::new();
        let deadline = start + self.args.phase_timeout();
        loop {
            let done = self.converged(Some(&previous));
            for (shard, (d, total)) in self.converged_by_shard(&previous) {
                stalls.entry(shard).or_default().observe(d, total);
            }
            // c is started before the loop can end: at a small N the whole
            // change can land between two polls, and c then joins a fleet
            // that has converged (the report says so; the pause goal is not
            // judged then).
            if c.is_none() && done >= self.n / 5 {
                eprintln!("kura-bench: shards: c joins with {done} converged");
                converged_at_join = done;
                c = Some((self.replica("c", 5).await?, Instant::now()));
            }
            if done >= self.n {
                break;
            }
            if let (Some((_, joined)), None) = (&c, first_shard_s)
                && self.held().await.contains_key("c")
            {
                first_shard_s = Some(secs(joined.elapsed()));
            }
            if Instant::now() > deadline {
                return Err(format!("shards: join: {done}/{} converged", self.n).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let change_s = secs(start.elapsed());
        let (c, joined) = c.ok_or("shards: join: c was never started")?;
        // Every shard held, each replica at least one (4 shards over 3).
        let held_after = self.wait_held_by(&["a2", "b", "c"]).await?;
        let first_shard_s = first_shard_s.unwrap_or_else(|| secs(joined.elapsed()));
        self.settle().await?;
        let writes = audit::replica_writes(&self.args.audit_log(), &mark, &self.namespaces)?;
        drop((a, b, c));
        let longest_stall_s: BTreeMap<u32, f64> = stalls
            .into_iter()
            .map(|(shard, s)| (shard, secs(s.longest)))
            .collect();
        eprintln!(
            "kura-bench: shards: c held a shard {first_shard_s:.1}s after it started; longest stall by shard {longest_stall_s:?}; {held_after:?}"
        );
        Ok(Join {
            joined: "c".into(),
            converged_at_join,
            during_change: converged_at_join < self.n,
            first_shard_s,
            held_after,
            change_s,
            longest_stall_s,
            written_by_two: audit::written_by_two(&writes),
        })
    }

    /// A replica acting for the whole plane; `version`: its configuration's.
    async fn replica(&self, name: &str, version: u32) -> BenchResult<Process> {
        let kubeconfig = self.kubeconfig_of(name)?;
        let mut p = Process::spawn_in(
            self.args,
            self.bench,
            &self.bench.config(version),
            Scope::Replica {
                name,
                kubeconfig: &kubeconfig,
                lease_namespace: &self.bench.operator_ns,
                lease_duration: self.args.lease_duration,
                shards: self.args.shards,
                shard_filter: self.args.shard_filter,
            },
        )?;
        p.wait_running().await?;
        let filter = p
            .logged_field("shard filter", "filter")
            .unwrap_or_else(|| "not logged".into());
        self.filters
            .lock()
            .expect("filters")
            .insert(name.to_string(), filter);
        Ok(p)
    }

    /// The bench's kubeconfig, impersonating `replica-<name>` with the
    /// bench user's powers (system:masters on the local plane).
    fn kubeconfig_of(&self, name: &str) -> BenchResult<PathBuf> {
        let text = std::fs::read_to_string(&self.bench.kubeconfig)?;
        let mut kc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let users = kc["users"]
            .as_sequence_mut()
            .ok_or("the kubeconfig has no users")?;
        for u in users {
            u["user"]["as"] = format!("replica-{name}").into();
            u["user"]["as-groups"] = serde_yaml::to_value(["system:masters"])?;
        }
        let path = self
            .bench
            .workdir
            .join(format!("replica-{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&kc)?)?;
        Ok(path)
    }

    async fn create_instances(&self) -> BenchResult<()> {
        let label = self.bench.operator_ns.clone();
        futures::stream::iter(0..self.n)
            .map(|i| {
                let ns = self.namespaces[i % self.namespaces.len()].clone();
                let client = self.bench.client.clone();
                let label = label.clone();
                async move {
                    let mut v = Bench::instance(&ns, i);
                    v["metadata"]["labels"] = json!({ RUN_LABEL: label });
                    let instance: KuraInstance = serde_json::from_value(v)?;
                    Api::<KuraInstance>::namespaced(client, &ns)
                        .create(&PostParams::default(), &instance)
                        .await?;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
                }
            })
            .buffer_unordered(self.args.concurrency.into())
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// A fleet-wide change given to `replicas`; its time until every
    /// instance re-applied, then settled.
    async fn change(&self, replicas: &[&Process], version: u32) -> BenchResult<f64> {
        let previous = self.applied();
        let start = Instant::now();
        for r in replicas {
            r.set_config(&self.bench.config(version))?;
        }
        let done = self.converged_since(Some(&previous)).await?;
        self.settle().await?;
        Ok(secs(done - start))
    }

    async fn converged_since(
        &self,
        previous: Option<&HashMap<String, String>>,
    ) -> BenchResult<Instant> {
        crate::fleet::wait_all(
            "shards: converged",
            self.n,
            self.args.phase_timeout(),
            || self.converged(previous),
        )
        .await
    }

    /// Until `count` instances converged since `previous`; how many had.
    async fn wait_converged(
        &self,
        previous: &HashMap<String, String>,
        count: usize,
    ) -> BenchResult<usize> {
        let deadline = Instant::now() + self.args.phase_timeout();
        loop {
            let done = self.converged(Some(previous));
            if done >= count {
                return Ok(done);
            }
            if Instant::now() > deadline {
                return Err(format!("shards: {done}/{count} converged").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every instance Ready: one phase's restarts are not counted in the next.
    async fn settle(&self) -> BenchResult<()> {
        crate::fleet::wait_all("shards: Ready", self.n, self.args.phase_timeout(), || {
            self.instances
                .state()
                .iter()
                .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
                .count()
        })
        .await?;
        Ok(())
    }

    /// Instances whose applied revision is the desired one (and not what
    /// `previous` recorded).
    fn converged(&self, previous: Option<&HashMap<String, String>>) -> usize {
        self.instances
            .state()
            .iter()
            .filter(|i| is_converged(i, previous))
            .count()
    }

    /// By shard: instances converged since `previous`, and all of them.
    fn converged_by_shard(
        &self,
        previous: &HashMap<String, String>,
    ) -> BTreeMap<u32, (usize, usize)> {
        let shards = Shards::new(self.args.shards).unwrap_or(Shards::ONE);
        let mut out: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
        for i in self.instances.state() {
            let shard = shards.of_namespace(i.metadata.namespace.as_deref().unwrap_or(""));
            let entry = out.entry(shard).or_default();
            entry.1 += 1;
            if is_converged(&i, Some(previous)) {
                entry.0 += 1;
            }
        }
        out
    }

    fn applied(&self) -> HashMap<String, String> {
        self.instances
            .state()
            .iter()
            .filter_map(|i| Some((key(i), i.status.as_ref()?.applied_revision.clone()?)))
            .collect()
    }

    /// Shards by the replica holding their Lease (`bench-<name>-<hex>`).
    async fn held(&self) -> BTreeMap<String, BTreeSet<u32>> {
        let leases: Api<Lease> =
            Api::namespaced(self.bench.client.clone(), &self.bench.operator_ns);
        let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for i in 0..self.args.shards {
            let holder = leases
                .get_opt(&format!("kura-operator-shard-{i}"))
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity)
                .and_then(|h| Some(h.strip_prefix("bench-")?.rsplit_once('-')?.0.to_string()));
            if let Some(name) = holder {
                out.entry(name).or_default().insert(i);
            }
        }
        out
    }

    /// Until the replicas hold exactly these counts of shards.
    async fn balanced(
        &self,
        want: &[(&str, usize)],
    ) -> BenchResult<BTreeMap<String, BTreeSet<u32>>> {
        let limit = self.args.lease_duration * 3 + self.args.resync;
        let start = Instant::now();
        loop {
            let held = self.held().await;
            let counts: BTreeMap<&str, usize> =
                held.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
            if want.iter().all(|(r, c)| counts.get(r) == Some(c)) && counts.len() == want.len() {
                return Ok(held);
            }
            if start.elapsed() > limit {
                return Err(
                    format!("shards: not balanced as {want:?} after {limit:?}: {held:?}").into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Until every shard is held, and each of `replicas` holds one.
    async fn wait_held_by(
        &self,
        replicas: &[&str],
    ) -> BenchResult<BTreeMap<String, BTreeSet<u32>>> {
        let limit = self.args.lease_duration * 3 + self.args.resync;
        let start = Instant::now();
        loop {
            let held = self.held().await;
            let total: usize = held.values().map(BTreeSet::len).sum();
            if total == self.args.shards as usize && replicas.iter().all(|r| held.contains_key(*r))
            {
                return Ok(held);
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "shards: {replicas:?} do not share the shards after {limit:?}: {held:?}"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Its applied revision is the desired one (and not what `previous`
/// recorded).
fn is_converged(i: &KuraInstance, previous: Option<&HashMap<String, String>>) -> bool {
    let Some(s) = &i.status else { return false };
    let applied = s.applied_revision.as_deref();
    applied.is_some()
        && applied == s.desired_revision.as_deref()
        && previous.is_none_or(|p| p.get(&key(i)).map(String::as_str) != applied)
}

fn key(i: &KuraInstance) -> String {
    format!(
        "{}/{}",
        i.metadata.namespace.as_deref().unwrap_or(""),
        i.metadata.name.as_deref().unwrap_or("")
    )
}

/// The longest time a shard's converged count stood still while some of
/// its instances had still to converge, from its first convergence on (the
/// change's own start, reading the configuration, is not a stall).
#[derive(Default)]
struct Stall {
    last: Option<(usize, Instant)>,
    longest: Duration,
}

impl Stall {
    fn observe(&mut self, done: usize, total: usize) {
        let now = Instant::now();
        match self.last {
            _ if done >= total => {}
            Some((d, since)) if d == done => self.longest = self.longest.max(now - since),
            _ if done > 0 => self.last = Some((done, now)),
            _ => {}
        }
    }
}

fn goals(r: &ShardsReport) -> Vec<crate::report::Goal> {
    use crate::report::Goal;
    let bound = r.lease_s + r.resync_s;
    let longest = r.join.longest_stall_s.values().copied().fold(0.0, f64::max);
    vec![
        Goal {
            goal: format!(
                "kill -9: shards taken over within the lease duration plus one resync ({bound} s)"
            ),
            measured: format!("{:.1} s", r.failover.taken_over_s),
            met: Some(r.failover.taken_over_s <= bound),
        },
        Goal {
            goal: "kill -9: no object written by two replicas (successful writes, audit log)"
                .into(),
            measured: format!("{}", r.failover.written_by_two.len()),
            met: Some(r.failover.written_by_two.is_empty()),
        },
        Goal {
            goal: format!(
                "a joining replica: no pause (no shard without a convergence as long as the lease, {} s)",
                r.lease_s
            ),
            measured: if r.join.during_change {
                format!("{:.1} s", longest)
            } else {
                format!(
                    "not measured: the change ended ({} converged) before c started",
                    r.join.converged_at_join
                )
            },
            met: r.join.during_change.then_some(longest < r.lease_s),
        },
        Goal {
            goal: "a joining replica: no object written by two replicas".into(),
            measured: format!(
                "{}",
                r.join.written_by_two.len() + r.two.written_by_two.len()
            ),
            met: Some(r.join.written_by_two.is_empty() && r.two.written_by_two.is_empty()),
        },
    ]
}

pub fn write(args: &Args, r: &ShardsReport) -> BenchResult<()> {
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| crate::report::json_path("shards", r.n));
    if let Some(dir) = json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&json, serde_json::to_string_pretty(r)? + "\n")?;
    let mut md = format!(
        "### Shards: {} replicas against one, N={} in {} namespaces, {} shards ({})\n\n`{}`; {}\n\n",
        2, r.n, r.namespaces, r.shards, r.date, r.command, r.list_path
    );
    let rss: Vec<String> = r
        .two
        .peak_rss_mib
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    md += "| | one replica | two replicas |\n|---|---|---|\n";
    md += &format!(
        "| fleet change | {:.1} s | {:.1} s |\n",
        r.one.change_s, r.two.change_s
    );
    md += &format!(
        "| peak RSS (MiB) | {} | {} |\n\n",
        r.one.peak_rss_mib,
        rss.join(", ")
    );
    md += &format!(
        "kill -9 of a replica holding {:?} with {} of {} converged: taken over after {:.1} s, every instance converged {:.1} s after the kill; requests cut by the kill: {}.\n\n",
        r.failover.killed_shards,
        r.failover.converged_at_kill,
        r.n,
        r.failover.taken_over_s,
        r.failover.converged_after_kill_s,
        r.failover.unanswered.len()
    );
    md += &format!(
        "A third replica joining a change with {} of {} converged: its first shard after {:.1} s, longest stall by shard (s) {:?}, shards after: {:?}.\n\n",
        r.join.converged_at_join,
        r.n,
        r.join.first_shard_s,
        r.join.longest_stall_s,
        r.join.held_after
    );
    md += "| goal | measured | met |\n|---|---|---|\n";
    for g in &r.goals {
        md += &format!(
            "| {} | {} | {} |\n",
            g.goal,
            g.measured,
            g.met.map_or("-", |m| if m { "yes" } else { "no" })
        );
    }
    println!("{md}");
    eprintln!("kura-bench: wrote {}", json.display());
    Ok(())
}

/// The run's namespaces deleted (the caller removes the rest), waited for
/// (bounded), so that their collection does not load the next run.
pub async fn cleanup(bench: &Bench, namespaces: &[String]) {
    let api: Api<Namespace> = Api::all(bench.client.clone());
    for ns in namespaces {
        let _ = api.delete(ns, &DeleteParams::background()).await;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(600) {
        let mut left = 0;
        for ns in namespaces {
            if !matches!(api.get_opt(ns).await, Ok(None)) {
                left += 1;
            }
        }
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "kura-bench: shards: namespaces still terminating after 600s; left to the namespace controller"
    );
}
