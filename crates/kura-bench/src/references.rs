//! The references run (`--references`): the operator beside what users would
//! run instead, each at several numbers of instances in flight, in one run on
//! one plane. The clients:
//!
//! - `operator`: kura-operator, `--concurrency` = in flight;
//! - `peer`: kura-peer (hack/kura-peer), a minimal controller-runtime operator
//!   applying the same objects (src/peer.rs), `MaxConcurrentReconciles`;
//! - `floor`: only the necessary writes, no watches (src/floor.rs);
//! - `direct`: the children server-side applied, all seven at the change too,
//!   no instance and no status (src/direct.rs).
//!
//! Each run has fresh namespaces (`--namespaces`, default 1, the instances
//! dealt over them in turn) and its client runs as its own user
//! (`bench-<client>`, impersonated), so the audit log counts its requests
//! apart. Per phase (create, then a fleet-wide change of the region's domain):
//! the time to cluster (every child exists, or every changed child carries a
//! new `kura.dev/revision`), the time to record (every `appliedRevision` is the
//! new one), the changes of the fleet's objects (watch events: each is an etcd
//! write, whoever made it), the mutating requests and Events by user, and the
//! CPU time of the plane's processes and of the client.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, PostParams};
use serde::Serialize;

use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;

use crate::cluster::Bench;
use crate::fleet::{Expected, Watched, wait_all};
use crate::proc::{self, secs};
use crate::{Args, BenchResult, audit, floor, peer};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    Operator,
    Peer,
    Floor,
    Direct,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Operator => "operator",
            Client::Peer => "peer",
            Client::Floor => "floor",
            Client::Direct => "direct",
        }
    }

    /// Whether it writes the instances' status (the direct client does not).
    fn records(self) -> bool {
        self != Client::Direct
    }
}

#[derive(Serialize, Default)]
pub struct References {
    pub n: usize,
    pub in_flight: Vec<u16>,
    pub order: Vec<Client>,
    pub runs: Vec<Run>,
    /// Why the run stopped before its last client (the runs before it are
    /// kept: at N=10,000 the references take hours).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

#[derive(Serialize)]
pub struct Run {
    pub client: Client,
    pub in_flight: u16,
    pub namespaces: Vec<String>,
    pub create: PhaseFigures,
    pub change: PhaseFigures,
    /// The client process's VmHWM (operator and peer; the others run in the bench).
    pub client_peak_rss_mib: Option<f64>,
}

#[derive(Serialize, Default)]
pub struct PhaseFigures {
    pub to_cluster_s: f64,
    /// None for the direct client, which writes no status.
    pub to_record_s: Option<f64>,
    /// Until every instance is Ready (or, direct, rolled out) again.
    pub settled_s: f64,
    /// Changes of the fleet's objects by kind (watch events): etcd writes.
    pub writes: BTreeMap<String, u64>,
    /// Mutating requests and Events by user (audit log).
    pub by_user: BTreeMap<String, audit::UserRequests>,
    /// CPU seconds by process: kube-apiserver, etcd, kube-controller-manager,
    /// kura-sim, and the client when it is a process.
    pub cpu_s: BTreeMap<String, f64>,
}

pub async fn run(args: &Args, bench: &Bench) -> BenchResult<References> {
    let peer_bin = if args.clients.contains(&Client::Peer) {
        Some(peer::binary(args)?)
    } else {
        None
    };
    let mut order = args.clients.clone();
    if args.abba {
        order.extend(args.clients.iter().rev());
    }
    let mut out = References {
        n: args.instances(),
        in_flight: args.in_flight.clone(),
        order: order.clone(),
        runs: Vec::new(),
        incomplete: None,
    };
    for &in_flight in &args.in_flight {
        for (k, &client) in order.iter().enumerate() {
            let base = format!("{}-{}-{in_flight}-{k}", bench.operator_ns, client.name());
            let namespaces: Vec<String> = match bench.spread {
                1 => vec![base],
                spread => (0..spread).map(|j| format!("{base}-{j}")).collect(),
            };
            eprintln!(
                "kura-bench: references: {} at {in_flight} in flight",
                client.name()
            );
            let run = one(
                args,
                bench,
                client,
                in_flight,
                &namespaces,
                peer_bin.as_deref(),
            )
            .await;
            bench.delete_namespaces(&namespaces).await;
            bench.wait_gone(&namespaces, args.phase_timeout()).await;
            match run {
                Ok(run) => out.runs.push(run),
                Err(e) => {
                    out.incomplete = Some(format!("{} at {in_flight}: {e}", client.name()));
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// The process under test, when the client is one.
enum Running {
    Operator(crate::process::Process),
    Peer(peer::Peer),
    InBench,
}

impl Running {
    fn pid(&self) -> Option<u32> {
        match self {
            Running::Operator(p) => Some(p.pid()),
            Running::Peer(p) => Some(p.pid()),
            Running::InBench => None,
        }
    }
}

/// What a run needs beside its client: the fleet, the watches, the configurations.
struct Fleet<'a> {
    args: &'a Args,
    bench: &'a Bench,
    client: Client,
    in_flight: usize,
    namespaces: Vec<String>,
    watched: Watched,
    expected: Vec<Expected>,
    configs: [OperatorConfig; 2],
    kube: kube::Client,
}

async fn one(
    args: &Args,
    bench: &Bench,
    client: Client,
    in_flight: u16,
    namespaces: &[String],
    peer_bin: Option<&std::path::Path>,
) -> BenchResult<Run> {
    for namespace in namespaces {
        bench.create_namespace(namespace).await?;
    }
    let namespace_of = |i: usize| namespaces[i % namespaces.len()].clone();
    let user = format!("bench-{}", client.name());
    let kubeconfig = bench.kubeconfig_as(&user)?;
    let configs = [
        OperatorConfig::parse(&bench.config(1))?,
        OperatorConfig::parse(&bench.config(2))?,
    ];
    let n = args.instances();
    let fleet = Fleet {
        args,
        bench,
        client,
        in_flight: in_flight.into(),
        namespaces: namespaces.to_vec(),
        watched: Watched::start(&bench.client, namespaces).await?,
        expected: crate::fleet::expected(namespace_of, n, &configs[0])?,
        configs,
        kube: crate::cluster::client(&kubeconfig).await?,
    };
    let running = match client {
        Client::Operator => {
            let mut a = args.clone();
            a.concurrency = in_flight;
            let scope = match namespaces {
                [one] => crate::process::Scope::NamespaceAs(one, &kubeconfig),
                _ => crate::process::Scope::ClusterAs(&kubeconfig),
            };
            let mut op = crate::process::Process::spawn_in(&a, bench, &bench.config(1), scope)?;
            op.wait_running().await?;
            Running::Operator(op)
        }
        Client::Peer => {
            let bin = peer_bin.ok_or("no kura-peer binary")?;
            let template = peer::template(args, bench, 1)?;
            let p = peer::Peer::start(
                bin,
                bench,
                namespaces,
                in_flight,
                &kubeconfig,
                args.peer_kura_events,
                &template,
            )
            .await?;
            Running::Peer(p)
        }
        Client::Floor | Client::Direct => Running::InBench,
    };
    let (create, created) = fleet.create(&running).await?;
    let change = fleet.change(&running, &created).await?;
    let client_peak_rss_mib = running
        .pid()
        .and_then(proc::read)
        .map(|s| proc::mib(s.hwm_kib));
    Ok(Run {
        client,
        in_flight,
        namespaces: namespaces.to_vec(),
        create,
        change,
        client_peak_rss_mib,
    })
}

/// A child a change renews: kind, namespace, name, its stamp before.
type Renewed = (String, String, String, String);

/// What the create leaves for the change: the floor's instances, the direct
/// client's nothing.
type Created = Vec<floor::Created>;

impl Fleet<'_> {
    fn n(&self) -> usize {
        self.expected.len()
    }

    /// Instance `i`'s namespace: the instances are dealt over them in turn.
    fn namespace_of(&self, i: usize) -> String {
        self.namespaces[i % self.namespaces.len()].clone()
    }

    async fn create(&self, running: &Running) -> BenchResult<(PhaseFigures, Created)> {
        let what = format!("{} create", self.client.name());
        let meter = Meter::start(self, running);
        let start = Instant::now();
        let work = async {
            match self.client {
                Client::Operator | Client::Peer => {
                    self.create_instances().await?;
                    Ok(Vec::new())
                }
                Client::Floor => {
                    let ns = |i| self.namespace_of(i);
                    floor::create(&self.kube, ns, self.n(), self.in_flight, &self.configs[0]).await
                }
                Client::Direct => {
                    self.apply_direct(0).await?;
                    Ok(Vec::new())
                }
            }
        };
        let wait = self.times(
            &what,
            start,
            || self.watched.children_exist(&self.expected),
            None,
        );
        let (created, times) = futures::try_join!(work, wait)?;
        Ok((meter.finish(self, running, start, times).await?, created))
    }

    async fn change(&self, running: &Running, created: &Created) -> BenchResult<PhaseFigures> {
        let what = format!("{} change", self.client.name());
        let before = self.changed_stamps()?;
        let previous = self.watched.applied_revisions();
        let meter = Meter::start(self, running);
        let start = Instant::now();
        let work = async {
            match running {
                Running::Operator(op) => op.set_config(&self.bench.config(2)),
                Running::Peer(p) => p.set_template(&peer::template(self.args, self.bench, 2)?),
                Running::InBench if self.client == Client::Floor => {
                    floor::change(&self.kube, created, self.in_flight, &self.configs[1]).await
                }
                Running::InBench => self.apply_direct(1).await,
            }
        };
        // Instances every renewed child of which carries a new stamp.
        let renewed = || {
            before
                .iter()
                .filter(|children| {
                    children.iter().all(|(kind, ns, name, old)| {
                        self.watched
                            .stamp(kind, ns, name)
                            .is_some_and(|now| now != *old)
                    })
                })
                .count()
        };
        let wait = self.times(&what, start, renewed, Some(&previous));
        let ((), times) = futures::try_join!(work, wait)?;
        meter.finish(self, running, start, times).await
    }

    /// The time to cluster (`cluster` counts the instances done), then the
    /// time to record; seconds from `start`.
    async fn times(
        &self,
        what: &str,
        start: Instant,
        cluster: impl FnMut() -> usize,
        previous: Option<&std::collections::HashMap<String, String>>,
    ) -> BenchResult<(f64, Option<f64>)> {
        let limit = self.args.phase_timeout();
        let done = wait_all(&format!("{what}: to cluster"), self.n(), limit, cluster).await?;
        let to_cluster = secs(done - start);
        let to_record = if self.client.records() {
            let done = wait_all(&format!("{what}: to record"), self.n(), limit, || {
                self.watched.converged(&self.expected, previous)
            })
            .await?;
            Some(secs(done - start))
        } else {
            None
        };
        eprintln!("kura-bench:   {what}: to cluster {to_cluster:.2}s, to record {to_record:?}");
        Ok((to_cluster, to_record))
    }

    /// By instance, (kind, namespace, name, stamp now) of every child the
    /// change renews: those whose render differs between the two configurations.
    fn changed_stamps(&self) -> BenchResult<Vec<Vec<Renewed>>> {
        let instance: KuraInstance =
            serde_json::from_value(Bench::instance(&self.namespaces[0], 0))?;
        let render = |c: &OperatorConfig| -> BenchResult<_> {
            let valid = kura_core::validate::validate(&instance, c).map_err(|e| e.to_string())?;
            Ok(kura_core::render::render(&valid, c))
        };
        let (old, new) = (render(&self.configs[0])?, render(&self.configs[1])?);
        let kinds: Vec<&str> = floor::changed(&old, &new)
            .iter()
            .map(|o| o.id.kind.kind())
            .collect();
        Ok(self
            .expected
            .iter()
            .map(|e| {
                e.children
                    .iter()
                    .filter(|(k, _)| kinds.contains(&k.as_str()))
                    .map(|(k, name)| {
                        let stamp = self
                            .watched
                            .stamp(k, &e.namespace, name)
                            .unwrap_or_default();
                        (k.clone(), e.namespace.clone(), name.clone(), stamp)
                    })
                    .collect()
            })
            .collect())
    }

    async fn create_instances(&self) -> BenchResult<()> {
        futures::stream::iter(0..self.n())
            .map(|i| {
                let ns = self.namespace_of(i);
                let api: Api<KuraInstance> = Api::namespaced(self.bench.client.clone(), &ns);
                async move {
                    let instance: KuraInstance = serde_json::from_value(Bench::instance(&ns, i))?;
                    api.create(&PostParams::default(), &instance).await?;
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
                }
            })
            .buffer_unordered(self.in_flight)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// The direct client: kura-core's render of every instance (no uid, as
    /// `kura-operator render` prints it) under configuration `k`, all applied.
    async fn apply_direct(&self, k: usize) -> BenchResult<()> {
        let config = &self.configs[k];
        let groups = (0..self.n())
            .map(|i| {
                let instance: KuraInstance =
                    serde_json::from_value(Bench::instance(&self.namespace_of(i), i))?;
                let valid =
                    kura_core::validate::validate(&instance, config).map_err(|e| e.to_string())?;
                Ok(kura_core::render::render(&valid, config)
                    .objects
                    .iter()
                    .map(|o| o.body())
                    .collect())
            })
            .collect::<BenchResult<Vec<Vec<serde_json::Value>>>>()?;
        crate::direct::apply_all(&self.kube, &groups, self.in_flight).await
    }
}

/// The figures taken around a phase: the audit log's mark, the watch
/// counts and the processes' CPU at its start.
struct Meter {
    mark: audit::Mark,
    writes: BTreeMap<String, u64>,
    cpu: BTreeMap<String, proc::Sample>,
}

/// The plane's processes (pid files beside the kubeconfig) and the client's.
fn processes(fleet: &Fleet, running: &Running) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = [
        "kube-apiserver",
        "etcd",
        "kube-controller-manager",
        "kura-sim",
    ]
    .into_iter()
    .filter_map(|name| {
        let file = fleet.bench.kubeconfig.with_file_name(format!("{name}.pid"));
        let pid = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
        Some((name.to_string(), pid))
    })
    .collect();
    if let Some(pid) = running.pid() {
        out.insert(fleet.client.name().to_string(), pid);
    }
    out
}

impl Meter {
    fn start(fleet: &Fleet, running: &Running) -> Meter {
        Meter {
            mark: audit::Mark::now(&fleet.args.audit_log()),
            writes: fleet.watched.writes(),
            cpu: processes(fleet, running)
                .into_iter()
                .filter_map(|(name, pid)| Some((name, proc::read(pid)?)))
                .collect(),
        }
    }

    /// Wait until the phase settled (every instance Ready and rolled out), then
    /// take the figures.
    async fn finish(
        self,
        fleet: &Fleet<'_>,
        running: &Running,
        start: Instant,
        (to_cluster_s, to_record_s): (f64, Option<f64>),
    ) -> BenchResult<PhaseFigures> {
        let (n, limit) = (fleet.n(), fleet.args.phase_timeout());
        wait_all("rollouts", n, limit, || fleet.watched.rolled_out()).await?;
        if fleet.client.records() {
            wait_all("instances Ready", n, limit, || {
                fleet.watched.ready_instances()
            })
            .await?;
        }
        let settled_s = secs(start.elapsed());
        let mut writes = fleet.watched.writes();
        for (kind, count) in &self.writes {
            *writes.entry(kind.clone()).or_default() -= count;
        }
        writes.retain(|_, v| *v > 0);
        let cpu_s = processes(fleet, running)
            .into_iter()
            .filter_map(|(name, pid)| {
                let (from, to) = (*self.cpu.get(&name)?, proc::read(pid)?);
                Some((name, proc::cpu_seconds(from, to)))
            })
            .collect();
        Ok(PhaseFigures {
            to_cluster_s,
            to_record_s,
            settled_s,
            writes,
            by_user: audit::by_user(&fleet.args.audit_log(), &self.mark, &fleet.namespaces)?,
            cpu_s,
        })
    }
}
