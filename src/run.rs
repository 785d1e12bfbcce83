//! `kura-operator run`: flags (each with an environment variable) and start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kura_core::time::parse_duration;

/// A period something is done every (a resync, a Lease, a watch): not
/// zero, which would make it a busy loop (or a panic of the timer).
fn parse_period(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?} is zero: a period must be longer")),
        d => Ok(d),
    }
}

/// A rate a second: a positive, finite number.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate a second: a positive number (e.g. 5 or 0.5)"
        )),
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Operator configuration file (regions, gateway defaults). Re-read when it changes.
    #[arg(
        long,
        env = "KURA_CONFIG",
        default_value = "/etc/kura-operator/config.yaml"
    )]
    pub config: PathBuf,

    /// Follow the configuration through the API from this ConfigMap,
    /// `NAMESPACE/NAME` (key `config.yaml`; the chart sets its own), instead
    /// of the file after start-up: a change takes effect as soon as the
    /// apiserver has it, not after the kubelet refreshes the mounted file.
    /// Start-up still reads `--config`.
    #[arg(long, env = "KURA_CONFIG_MAP", value_name = "NAMESPACE/NAME")]
    pub config_map: Option<String>,

    /// Watch only this namespace (the chart's namespaced mode, with a Role instead of a ClusterRole).
    /// All namespaces when absent.
    #[arg(long, env = "KURA_WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// Kubeconfig to use; in-cluster or $KUBECONFIG when absent.
    #[arg(long, env = "KURA_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Periodic re-plan of every instance; a converged instance costs no writes.
    #[arg(long, env = "KURA_RESYNC", default_value = "10m", value_parser = parse_period)]
    pub resync: Duration,

    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "KURA_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Elect a leader on a coordination.k8s.io Lease so only one replica reconciles.
    #[arg(long, env = "KURA_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease (defaults to the pod's namespace, then "default").
    #[arg(long, env = "KURA_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Name of the leader-election Lease.
    #[arg(long, env = "KURA_LEASE_NAME", default_value = "kura-operator")]
    pub lease_name: String,

    /// Lease duration; a standby takes over at most this long after the leader dies.
    #[arg(long, env = "KURA_LEASE_DURATION", default_value = "15s", value_parser = parse_period)]
    pub lease_duration: Duration,

    /// Split the fleet into this many shards by a hash of the namespace, each
    /// with its own Lease (`<lease-name>-shard-<i>`), so that several replicas
    /// share it; 1 (the default) is one Lease of `--lease-name` and one
    /// replica reconciling everything. More than 1 needs `--leader-elect`.
    #[arg(long, env = "KURA_SHARDS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: u32,

    /// With several shards, who filters the caches of the kinds read only
    /// within an instance's namespace: the apiserver, by its server-side
    /// sharded list and watch (`shardSelector`, Kubernetes 1.36's
    /// `ShardedListAndWatch` gate), so each replica caches its shards' objects
    /// only; or this process, caching the whole fleet (`client`). `auto`
    /// asks the apiserver once at start.
    #[arg(long, env = "KURA_SHARD_FILTER", value_enum, default_value = "auto")]
    pub shard_filter: crate::shards::select::Choice,

    /// Log format.
    #[arg(long, env = "KURA_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Server-side timeout of each watch request; a watch that outlives it is
    /// re-established (and a stuck apiserver noticed) at least this often.
    #[arg(long, env = "KURA_WATCH_TIMEOUT", default_value = "290s", value_parser = parse_period)]
    pub watch_timeout: Duration,

    /// Instances reconciled at once.
    #[arg(long, env = "KURA_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,

    /// Failed attempts of the same inputs before the instance is Stalled.
    #[arg(long, env = "KURA_RETRY_BUDGET", default_value_t = 5)]
    pub retry_budget: u32,

    /// Wait before a Stalled instance is retried (never less than one minute).
    #[arg(long, env = "KURA_STALL_WINDOW", default_value = "10m", value_parser = parse_duration)]
    pub stall_window: Duration,

    /// Transient failures (throttling, a 5xx from the apiserver or a webhook)
    /// of the same inputs are retried quietly this long, then reported in status,
    /// as an Event and a metric while the retries go on.
    #[arg(long, env = "KURA_TRANSIENT_REPORT_AFTER", default_value = "60s", value_parser = parse_duration)]
    pub transient_report_after: Duration,

    /// Refreshes of counts alone in a status ("1/3 replicas available"
    /// becoming "2/3 …") a second, across every instance and gateway of this
    /// process, up to four seconds' worth at once; each object's also waits
    /// 30 s. A refresh held back is asked again by the object's next pass; any
    /// other change of a status is written at once.
    #[arg(long, env = "KURA_STATUS_REFRESH_RATE", default_value_t = 5.0, value_parser = parse_rate)]
    pub status_refresh_rate: f64,

    /// How long the hosts of a deleted instance stay reserved for an instance
    /// of the same namespace and name (a recreation), before the next
    /// instance asking for them gets them.
    #[arg(long, env = "KURA_HOST_RESERVATION", default_value = "5m", value_parser = parse_duration)]
    pub host_reservation: Duration,

    /// How the caches are filled: a streaming list (the API server's
    /// WatchList, objects sent one by one) where the server serves one, else
    /// paged lists (`auto`, asked once at start); or either, forced.
    #[arg(long, env = "KURA_LIST_STRATEGY", value_enum, default_value = "auto")]
    pub list_strategy: crate::list_strategy::Choice,

    /// The ClusterRole a dedicated gateway's ServiceAccount is bound to in the
    /// gateway's namespace (a RoleBinding): what its ingress controller reads
    /// there. The chart installs it (`<release>-gateway`).
    #[arg(
        long,
        env = "KURA_GATEWAY_ROLE",
        default_value = "kura-operator-gateway"
    )]
    pub gateway_role: String,

    /// The ClusterRole a dedicated gateway's ServiceAccount is bound to
    /// cluster-wide (a ClusterRoleBinding): IngressClasses and Nodes, read
    /// only. The chart installs it (`<release>-gateway-cluster`).
    #[arg(
        long,
        env = "KURA_GATEWAY_CLUSTER_ROLE",
        default_value = "kura-operator-gateway-cluster"
    )]
    pub gateway_cluster_role: String,
}

pub fn main(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Checked before anything starts: a tracing environment this exporter
    // cannot serve is a start-up error, like an invalid configuration.
    let export = crate::traces::export_from(|k| std::env::var(k).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(args, export));
    // The runtime still runs the last export's request.
    crate::traces::shutdown();
    result
}

async fn run(
    args: RunArgs,
    export: crate::traces::Export,
) -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Arc;

    // Start-up checks first, each failing in one line: config, kubeconfig,
    // the metrics address, the CRDs.
    let (config_text, config) = read_config(&args)?;
    let shards = shards(&args)?;
    let gate = Arc::new(crate::shards::Gate::new(shards));
    let metrics = Arc::new(crate::metrics::Metrics::default());
    let Clients {
        client,
        reports,
        fence,
    } = connect(&args, shards, &metrics).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (probes, serving, metrics_addr) = serve_probes(&args, metrics, stop_rx.clone()).await?;
    let crds = check_crds(&client).await?;
    // Logging starts only now: a start-up failure is the one line main() prints
    // (kube's own error log of a failed connection would be a second one).
    crate::traces::init(&args.log_format, export, tokio::runtime::Handle::current())?;

    let pod = PodReports::new(reports);
    let (config_changed, config_rx) =
        follow_config(&args, &client, &pod, &probes, (config_text, config))?;
    follow_crds(&client, crds, &gate, &pod, &probes);
    // The instance controller's one wake channel: the budget's next in line
    // (`Context::wake`) and instances a freed host concerns (claims).
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
    let caches = Caches::start(&args, &client, &gate, &probes, wake_tx.clone()).await;
    // Instances a name conflict stalled, woken when a name they wait for changes.
    let stores = &caches.streams.stores;
    stores.foreign.wake_through(Some(wake_tx.clone()), None);
    let (leader_tx, leader_rx) = leader_channel(&args, &probes.metrics);
    let ledgers = (shards.count() > 1).then(|| {
        let lease = lease_settings(&args, fence.clone());
        crate::shards::ledger::Ledgers::new(client.clone(), &lease.namespace, &lease.name)
            .counted(&probes.metrics)
    });
    let wiring = Wiring {
        client,
        config: config_rx,
        pod: pod_events_target(&pod.client, &pod.reporter),
        reporter: pod.reporter,
        leader: leader_rx,
        wake: wake_tx,
        gate: gate.clone(),
    };
    let ctx = Arc::new(context(&args, wiring, &caches.streams, &probes, ledgers));
    let (released_tx, released_rx) = tokio::sync::oneshot::channel::<()>();
    let lease = args
        .leader_elect
        .then(|| lease_settings(&args, fence.clone()));
    let election = election(ctx.clone(), probes.clone(), lease, leader_tx, released_rx);
    let controllers = controllers(
        &args,
        (caches.streams, caches.gateways),
        ctx.clone(),
        config_changed,
        wake_rx,
        stop_rx,
        released_tx,
    );
    tracing::info!(namespace = ?args.namespace, config = %args.config.display(), metrics = %metrics_addr, leader_elect = args.leader_elect, shards = args.shards, "kura-operator running");
    tokio::select! {
        _ = async { tokio::join!(controllers, election, until_signal(stop_tx)) } => {}
        _ = follow_leader(ctx.clone(), probes.metrics.clone()) => {}
        _ = sweep_memory(ctx.clone()) => {}
        _ = crate::reconcile::endpoint_check::watch_addresses(ctx.clone()) => {}
        _ = caches.foreign_names => {}
    }
    let _ = serving.await;
    Ok(())
}

/// The operator's clients: the one its decisions write through (fenced,
/// when elected: no write leaves this process once its Lease time ran out)
/// and the one its reports on its own Pod go through.
struct Clients {
    client: kube::Client,
    /// Reports on this process's own Pod (an invalid configuration, an
    /// incompatible CRD) are made by every replica, leading or not: a client
    /// of their own, outside the fence, which guards what a leader decides.
    reports: kube::Client,
    fence: std::sync::Arc<crate::fence::Fence>,
}

async fn connect(
    args: &RunArgs,
    shards: kura_core::shard::Shards,
    metrics: &crate::metrics::Metrics,
) -> Result<Clients, Box<dyn std::error::Error>> {
    use std::sync::Arc;
    // A read may stay silent for as long as a watch does.
    let read_timeout = args.watch_timeout + std::time::Duration::from_secs(15);
    // Elected, no write leaves this process once its Lease time ran out.
    let fence = Arc::new(
        if args.leader_elect {
            crate::fence::Fence::elected(shards, &lease_namespace(args))
        } else {
            crate::fence::Fence::open()
        }
        .counted(metrics.writes_fenced.clone()),
    );
    let client = observed_client(
        args.kubeconfig.as_deref(),
        read_timeout,
        metrics.runtime.clone(),
        fence.clone(),
    )
    .await?;
    let reports = observed_client(
        args.kubeconfig.as_deref(),
        read_timeout,
        metrics.runtime.clone(),
        Arc::new(crate::fence::Fence::open()),
    )
    .await?;
    Ok(Clients {
        client,
        reports,
        fence,
    })
}

/// The configuration file as read at start-up (its text, for the follower
/// to tell a change from it) and as parsed.
fn read_config(
    args: &RunArgs,
) -> Result<(String, kura_core::config::OperatorConfig), Box<dyn std::error::Error>> {
    let config_text = std::fs::read_to_string(&args.config).map_err(|e| {
        format!(
            "operator config {}: cannot read: {e}",
            args.config.display()
        )
    })?;
    let config = kura_core::config::OperatorConfig::load(&args.config)?;
    Ok((config_text, config))
}

/// The fleet's shards (`--shards`); more than one needs an election.
fn shards(args: &RunArgs) -> Result<kura_core::shard::Shards, Box<dyn std::error::Error>> {
    if args.shards > 1 && !args.leader_elect {
        return Err(format!(
            "--shards {}: needs --leader-elect (each shard has its own Lease)",
            args.shards
        )
        .into());
    }
    Ok(kura_core::shard::Shards::new(args.shards).unwrap_or(kura_core::shard::Shards::ONE))
}

/// Resolves once `stop` says so.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`, served while the
/// apiserver is still being reached (alive, not ready) until `stop`; the
/// probes and the address bound.
async fn serve_probes(
    args: &RunArgs,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<
    (
        std::sync::Arc<crate::server::Probes>,
        tokio::task::JoinHandle<std::io::Result<()>>,
        SocketAddr,
    ),
    Box<dyn std::error::Error>,
> {
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| format!("--metrics-addr {}: {e}", args.metrics_addr))?;
    let metrics_addr = listener.local_addr()?;
    let probes = std::sync::Arc::new(crate::server::Probes::with_metrics(metrics));
    // Read and checked before: an invalid start-up configuration exits.
    probes.metrics.set_config_valid(true);
    let serving = tokio::spawn(crate::server::serve(
        listener,
        probes.clone(),
        stopped(stop),
    ));
    Ok((probes, serving, metrics_addr))
}

/// Who reports on this process's own Pod, through the client outside the fence.
struct PodReports {
    client: kube::Client,
    reporter: kube::runtime::events::Reporter,
}

impl PodReports {
    fn new(client: kube::Client) -> PodReports {
        let reporter = kube::runtime::events::Reporter {
            controller: "kura-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        PodReports { client, reporter }
    }
}

/// Follows the configuration (`--config-map`, else the file) from the one
/// read at start-up: the ticks of its changes, and the configuration in force.
#[allow(clippy::type_complexity)]
fn follow_config(
    args: &RunArgs,
    client: &kube::Client,
    pod: &PodReports,
    probes: &crate::server::Probes,
    (config_text, config): (String, kura_core::config::OperatorConfig),
) -> Result<
    (
        impl futures::Stream<Item = ()> + Send + 'static,
        tokio::sync::watch::Receiver<std::sync::Arc<kura_core::accepted::Accepted>>,
    ),
    Box<dyn std::error::Error>,
> {
    let (config_tx, config_rx) = tokio::sync::watch::channel(std::sync::Arc::new(
        kura_core::accepted::Accepted::new(config),
    ));
    let report = crate::config_watch::Report {
        metrics: probes.metrics.clone(),
        events: crate::config_watch::PodEvents::from_env(pod.client.clone(), pod.reporter.clone()),
    };
    let source = match &args.config_map {
        Some(at) => {
            let (namespace, name) = at
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .ok_or_else(|| format!("--config-map {at:?}: expected NAMESPACE/NAME"))?;
            crate::config_watch::Source::ConfigMap {
                client: client.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            }
        }
        None => crate::config_watch::Source::File(args.config.clone()),
    };
    let (config_changed, config_state) =
        crate::config_watch::follow(source, config_text, config_tx, report);
    probes.set_config_state(config_state);
    Ok((config_changed, config_rx))
}

/// Follows the installed CRDs (`crd_check`): nothing is reconciled while one
/// is incompatible.
fn follow_crds(
    client: &kube::Client,
    crds: Vec<crate::crd_check::Pair>,
    gate: &std::sync::Arc<crate::shards::Gate>,
    pod: &PodReports,
    probes: &crate::server::Probes,
) {
    probes.set_crds(crate::crd_check::follow(
        client.clone(),
        crds,
        crate::crd_check::Report {
            gate: gate.clone(),
            metrics: probes.metrics.clone(),
            events: pod_events_target(&pod.client, &pod.reporter),
        },
    ));
}

/// The caches and the controllers' streams, and the follower of the names
/// of objects without the operator's label.
struct Caches<F> {
    streams: crate::controller::streams::Streams,
    gateways: crate::controller::streams::GatewayStreams,
    foreign_names: F,
}

impl Caches<()> {
    /// Instances a freed host concerns go to `wake`.
    async fn start(
        args: &RunArgs,
        client: &kube::Client,
        gate: &std::sync::Arc<crate::shards::Gate>,
        probes: &crate::server::Probes,
        wake: crate::claims::watch::WakeSender,
    ) -> Caches<impl std::future::Future<Output = ()> + Send + 'static> {
        let scope = scope(args, client, gate, probes).await;
        let (streams, gateways) = crate::controller::streams::streams(&scope, wake);
        probes.set_instances(streams.stores.instances.clone());
        let foreign_names = crate::controller::foreign::follow_foreign_names(
            &scope,
            streams.stores.foreign.clone(),
        );
        Caches {
            streams,
            gateways,
            foreign_names,
        }
    }
}

/// The role this process has, as the election finds it: nobody reconciles
/// before every cache has listed once (a restarted operator would see every
/// child "missing" and re-apply the whole fleet). Elected, a replica is
/// ready only once it has read its Lease: before, it could not take over,
/// and a test or a rollout would take it for a standby that can. Elected,
/// `leader_election_master_status` follows it (as client-go does, only with
/// an election).
fn leader_channel(
    args: &RunArgs,
    metrics: &crate::metrics::Metrics,
) -> (
    tokio::sync::watch::Sender<crate::leader::LeaderState>,
    tokio::sync::watch::Receiver<crate::leader::LeaderState>,
) {
    if args.leader_elect {
        metrics.runtime.leader_election(&args.lease_name);
    }
    tokio::sync::watch::channel(crate::leader::LeaderState {
        leading: false,
        healthy: !args.leader_elect,
    })
}

/// Where the caches look (`--namespace`), how they list (asked once), and
/// whether the apiserver filters the shard-local ones to this process's shards.
async fn scope(
    args: &RunArgs,
    client: &kube::Client,
    gate: &std::sync::Arc<crate::shards::Gate>,
    probes: &crate::server::Probes,
) -> crate::controller::scope::Scope {
    let instances_api: kube::Api<kura_core::api::KuraInstance> = match &args.namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    let list = crate::list_strategy::choose(args.list_strategy, &instances_api).await;
    // Probed with the Services the filtered caches hold (a custom resource's
    // list does not report the filter: apiextensions' lists carry no shardInfo).
    let services_api: kube::Api<k8s_openapi::api::core::v1::Service> = match &args.namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    let filter = crate::shards::select::choose(
        args.shard_filter,
        gate.shards(),
        client,
        services_api.resource_url(),
    )
    .await;
    probes
        .metrics
        .set_shards_filtered_by_server(filter == crate::shards::select::Filter::Server);
    let select = (filter == crate::shards::select::Filter::Server).then(|| {
        crate::shards::select::Selection {
            gate: gate.clone(),
            client: client.clone(),
        }
    });
    crate::controller::scope::Scope {
        client: client.clone(),
        list,
        namespace: args.namespace.clone(),
        watch_timeout: args.watch_timeout.as_secs().clamp(1, u32::MAX as u64) as u32,
        host_reservation: args.host_reservation,
        select,
    }
}

/// What the reconciles share besides the flags and the caches.
struct Wiring {
    client: kube::Client,
    config: tokio::sync::watch::Receiver<std::sync::Arc<kura_core::accepted::Accepted>>,
    reporter: kube::runtime::events::Reporter,
    /// The operator's own Pod, for the fleet rollout's Event (`None` outside a
    /// pod; its client is replaced by the fenced one).
    pod: Option<crate::crd_check::EventTarget>,
    leader: tokio::sync::watch::Receiver<crate::leader::LeaderState>,
    wake: crate::claims::watch::WakeSender,
    gate: std::sync::Arc<crate::shards::Gate>,
}

/// The reconciles' context.
fn context(
    args: &RunArgs,
    wiring: Wiring,
    streams: &crate::controller::streams::Streams,
    probes: &crate::server::Probes,
    ledgers: Option<crate::shards::ledger::Ledgers>,
) -> crate::context::Context {
    // Through the decisions' (fenced) client, as an instance's Events go: a
    // process past its Lease time says nothing more of the fleet either.
    let fleet = crate::fleet_event::FleetRollouts::new(
        wiring
            .pod
            .map(|(_, reporter, pod)| (wiring.client.clone(), reporter, pod)),
    );
    crate::context::Context {
        client: wiring.client,
        stores: streams.stores.clone(),
        settings: crate::context::Settings {
            config: wiring.config,
            policy: kura_core::plan::RetryPolicy {
                budget: args.retry_budget,
                stall_window: args.stall_window,
                transient_report_after: args.transient_report_after,
                ..kura_core::plan::RetryPolicy::default()
            },
            resync: args.resync,
            gateway_roles: kura_core::render::gateway::GatewayRoles {
                namespaced: args.gateway_role.clone(),
                cluster: args.gateway_cluster_role.clone(),
            },
            faults: crate::context::Faults::from_env(),
        },
        acting: crate::context::Acting {
            shards: wiring.gate,
            leader: wiring.leader,
            ledgers,
        },
        report: crate::context::Reporting {
            reporter: wiring.reporter,
            metrics: probes.metrics.clone(),
            refreshes: crate::refresh_budget::RefreshBudget::new(args.status_refresh_rate),
            fleet,
        },
        memory: Default::default(),
        wake: wiring.wake,
        // 3 s per check (from the request, not the wait for a slot); 32 in
        // flight, a quarter of them per namespace unless only one is watched.
        endpoint: {
            let checker = crate::endpoint::Checker::new(Duration::from_secs(3), 32);
            if args.namespace.is_some() {
                checker.single_tenant()
            } else {
                checker
            }
        },
    }
}

/// Both controllers, until `stop`: built at once, run when awaited. Every
/// instance is reconciled on a configuration change (`config_changed`),
/// every object of a shard this process starts to act for; `wake` names
/// instances to reconcile now. Once both stopped, `released` is told: the
/// Lease is given up only then, so the next leader never overlaps with a
/// reconcile of ours.
fn controllers(
    args: &RunArgs,
    (streams, gateway_streams): (
        crate::controller::streams::Streams,
        crate::controller::streams::GatewayStreams,
    ),
    ctx: std::sync::Arc<crate::context::Context>,
    config_changed: impl futures::Stream<Item = ()> + Send + 'static,
    wake: tokio::sync::mpsc::UnboundedReceiver<
        kube::runtime::reflector::ObjectRef<kura_core::api::KuraInstance>,
    >,
    stop: tokio::sync::watch::Receiver<bool>,
    released: tokio::sync::oneshot::Sender<()>,
) -> impl std::future::Future<Output = ()> {
    // Gateways a name conflict stalled, woken when a name they wait for changes.
    let (gateway_wake_tx, gateway_wake) = tokio::sync::mpsc::unbounded_channel();
    ctx.stores.foreign.wake_through(None, Some(gateway_wake_tx));
    let gateways = crate::controller::gateway::gateway_controller(
        gateway_streams,
        args.namespace.clone(),
        ctx.clone(),
        (ctx.acting.shards.acquired(), gateway_wake),
        stopped(stop.clone()),
    );
    let instances = crate::controller::instance::instance_controller(
        streams,
        ctx.clone(),
        futures::stream::select(config_changed, ctx.acting.shards.acquired()),
        wake,
        args.concurrency,
        stopped(stop),
    );
    async move {
        tokio::join!(instances, gateways);
        let _ = released.send(());
    }
}

/// Leader election once the caches synced (with `lease`), or leading from
/// then on without one; until `released`: the controllers stopped.
async fn election(
    ctx: std::sync::Arc<crate::context::Context>,
    probes: std::sync::Arc<crate::server::Probes>,
    lease: Option<crate::leader::LeaseSettings>,
    leader_tx: tokio::sync::watch::Sender<crate::leader::LeaderState>,
    released: tokio::sync::oneshot::Receiver<()>,
) {
    let mut released = std::pin::pin!(async move {
        let _ = released.await;
    });
    // A shutdown before the caches synced (the apiserver out of reach)
    // must not wait for them.
    tokio::select! {
        _ = crate::controller::streams::caches_synced(&ctx.stores) => {}
        _ = &mut released => return,
    }
    probes.set_synced();
    tracing::info!("caches synced");
    let Some(settings) = lease else {
        // Without an election this process leads from now on.
        leader_tx.send_replace(crate::leader::LeaderState {
            leading: true,
            healthy: true,
        });
        let _ = released.await;
        return;
    };
    // Campaign only with warm caches: a new leader reconciles at once.
    probes.set_leader(ctx.acting.leader.clone());
    let client = ctx.client.clone();
    if ctx.acting.shards.shards().count() > 1 {
        crate::shards::coordinate(
            client,
            settings,
            ctx.acting.shards.clone(),
            leader_tx,
            released,
        )
        .await;
    } else {
        crate::leader::campaign(client, settings, leader_tx, released).await;
    }
}

/// Until SIGTERM or Ctrl-C, then tells everything to stop.
async fn until_signal(stop: tokio::sync::watch::Sender<bool>) {
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop.send(true);
}

/// Drops the memory of instances and gateways that left the caches (deleted,
/// or out of scope): the one cleanup of `memory::Memory`, once a minute.
async fn sweep_memory(ctx: std::sync::Arc<crate::context::Context>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let live = ctx
            .stores
            .instances
            .state()
            .iter()
            .filter_map(|i| i.metadata.uid.clone())
            .collect();
        ctx.memory.instances.retain(&live);
        let live = ctx
            .stores
            .gateways
            .state()
            .iter()
            .filter_map(|g| g.metadata.uid.clone())
            .collect();
        ctx.memory.gateways.retain(&live);
    }
}

/// Keeps the leader gauge equal to the role, and with one shard the shards
/// this process acts for (`shards::Gate::follow`); never returns while the
/// role can change.
async fn follow_leader(
    ctx: std::sync::Arc<crate::context::Context>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) {
    let mut rx = ctx.acting.leader.clone();
    loop {
        let state = *rx.borrow_and_update();
        if ctx.acting.shards.shards().count() == 1 {
            ctx.acting.shards.follow(state);
        }
        metrics.set_leader(state.leading);
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

fn lease_namespace(args: &RunArgs) -> String {
    args.lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into())
}

/// The single Lease's settings (a sharded fleet derives its shards' from
/// them): it holds `fence` open for shard 0.
fn lease_settings(
    args: &RunArgs,
    fence: std::sync::Arc<crate::fence::Fence>,
) -> crate::leader::LeaseSettings {
    crate::leader::LeaseSettings {
        namespace: lease_namespace(args),
        name: args.lease_name.clone(),
        identity: crate::leader::identity(),
        duration: args.lease_duration,
        // Found by a sharded replica's planner, which refuses to act beside it.
        labels: [
            (
                kura_core::keys::LABEL_SHARDS_OF.to_string(),
                args.lease_name.clone(),
            ),
            (
                kura_core::keys::LABEL_SHARD_COUNT.to_string(),
                "1".to_string(),
            ),
        ]
        .into(),
        fence: Some((fence, 0)),
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// A client from `kubeconfig`, or in-cluster or `$KUBECONFIG` when absent.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    read_timeout: std::time::Duration,
) -> Result<kube::Client, Box<dyn std::error::Error>> {
    observed_client(
        kubeconfig,
        read_timeout,
        Default::default(),
        std::sync::Arc::new(crate::fence::Fence::open()),
    )
    .await
}

/// [`client`], its requests counted and its lists and watches followed in
/// `metrics` (`rest_client_requests_total`, `kura_watch_staleness_seconds`),
/// its writes sent only while `fence` allows them.
pub async fn observed_client(
    kubeconfig: Option<&std::path::Path>,
    read_timeout: std::time::Duration,
    metrics: std::sync::Arc<crate::metrics::runtime::RuntimeMetrics>,
    fence: std::sync::Arc<crate::fence::Fence>,
) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("kubeconfig {}: {}", path.display(), first_line(&e)))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no cluster configuration (in-cluster or $KUBECONFIG): {e}"))?,
    };
    // Bounds on hung requests (a paused or half-started apiserver), so that a
    // request fails and is retried instead of waiting forever.
    config.read_timeout = Some(read_timeout);
    config.connect_timeout = Some(std::time::Duration::from_secs(10));
    // A response whose headers do not come within a bound is abandoned (a watch's
    // body may then stream for minutes: only its start is bounded).
    let timeout = tower::timeout::TimeoutLayer::new(RESPONSE_TIMEOUT);
    // Outside the timeout: a request it abandons counts as one without a response.
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let observed = crate::metrics::rest::RestLayer::new(metrics, &host);
    // Next to kube's own stack (its retries, auth and connection): the fence
    // reads the clock when a write is about to be handed to it, and abandons
    // one still in it (a 429 retried) when the Lease time runs out; below
    // it, the sockets of writes refuse every byte past that time.
    let bottom = crate::fence::client_bottom(config, fence.clone())?;
    Ok(bottom
        .with_layer(&crate::fence::FenceLayer(fence))
        .with_layer(&timeout)
        .with_layer(&observed)
        .build())
}

/// How long any request may wait for its response to start.
const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The YAML parser appends a source snippet on further lines; the first says it all.
fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// Fail at start-up, in one line, when the CRDs are not installed; the
/// installed ones, for `crd_check` to judge (an incompatible one does not
/// stop the process: it waits, unready, for the fix).
async fn check_crds(
    client: &kube::Client,
) -> Result<Vec<crate::crd_check::Pair>, Box<dyn std::error::Error>> {
    Ok(crate::crd_check::installed(client).await?)
}

/// Where `crd_check` publishes its Events: the operator's own Pod, when
/// the downward API names it.
fn pod_events_target(
    client: &kube::Client,
    reporter: &kube::runtime::events::Reporter,
) -> Option<crate::crd_check::EventTarget> {
    let var = |name: &str| std::env::var(name).ok();
    let (name, namespace, uid) = (var("POD_NAME"), var("POD_NAMESPACE"), var("POD_UID"));
    let pod = crate::config_watch::pod_reference(name, namespace, uid)?;
    Some((client.clone(), reporter.clone(), pod))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refresh_rate_is_a_positive_finite_number() {
        assert_eq!(super::parse_rate("5"), Ok(5.0));
        assert_eq!(super::parse_rate("0.2"), Ok(0.2));
        for bad in ["0", "-1", "inf", "NaN", "five", ""] {
            let err = super::parse_rate(bad).unwrap_err();
            assert!(err.contains("positive number"), "{bad}: {err}");
        }
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        run: super::RunArgs,
    }

    fn flags(args: &[&str]) -> Result<super::RunArgs, String> {
        use clap::Parser;
        Flags::try_parse_from(std::iter::once("kura-operator").chain(args.iter().copied()))
            .map(|f| f.run)
            .map_err(|e| e.to_string())
    }

    /// Every duration flag reads what `time::parse_duration` reads: hours and
    /// minutes together, ISO 8601, plain seconds; a negative one is refused
    /// naming the flag.
    #[test]
    fn a_period_of_zero_is_refused_naming_the_flag() {
        for flag in ["--resync", "--lease-duration", "--watch-timeout"] {
            let err = flags(&[flag, "0s"]).unwrap_err().to_string();
            assert!(err.contains(flag) && err.contains("is zero"), "{err}");
        }
    }

    #[test]
    fn duration_flags_read_hours_and_minutes_together() {
        use std::time::Duration;
        let run = flags(&[
            "--resync",
            "1h30m",
            "--lease-duration",
            "PT20S",
            "--watch-timeout",
            "290",
            "--stall-window",
            "1h 5m",
            "--host-reservation",
            "2m30s",
        ])
        .unwrap();
        assert_eq!(run.resync, Duration::from_secs(5400));
        assert_eq!(run.lease_duration, Duration::from_secs(20));
        assert_eq!(run.watch_timeout, Duration::from_secs(290));
        assert_eq!(run.stall_window, Duration::from_secs(3900));
        assert_eq!(run.host_reservation, Duration::from_secs(150));
        let err = flags(&["--resync=-1h"]).unwrap_err();
        assert!(
            err.contains("--resync") && err.contains("is negative"),
            "{err}"
        );
        let err = flags(&["--resync", "1 fortnight"]).unwrap_err();
        assert!(
            err.contains("--resync") && err.contains("is not a duration such as 90s, 10m or 1h30m"),
            "{err}"
        );
    }
}
