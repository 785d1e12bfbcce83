//! `kura-operator run`: flags (each with an environment variable) and start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Operator configuration file (regions, gateway defaults). Re-read when it changes.
    #[arg(
        long,
        env = "KURA_CONFIG",
        default_value = "/etc/kura-operator/config.yaml"
    )]
    pub config: PathBuf,

    /// Watch only this namespace (the chart's namespaced mode, with a Role instead of a ClusterRole).
    /// All namespaces when absent.
    #[arg(long, env = "KURA_WATCH_NAMESPACE")]
    pub namespace: Option<String>,

    /// Kubeconfig to use; in-cluster or $KUBECONFIG when absent.
    #[arg(long, env = "KURA_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Periodic re-plan of every instance; a converged instance costs no writes.
    #[arg(long, env = "KURA_RESYNC", default_value = "10m", value_parser = parse_duration)]
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
    #[arg(long, env = "KURA_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Log format.
    #[arg(long, env = "KURA_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Server-side timeout of each watch request; a watch that outlives it is
    /// re-established (and a stuck apiserver noticed) at least this often.
    #[arg(long, env = "KURA_WATCH_TIMEOUT", default_value = "290s", value_parser = parse_duration)]
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
}

/// `90s`, `10m`, `1h`, `500ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 30s, 10m or 1h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    }
}

pub fn main(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    telemetry(&args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

fn telemetry(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KURA_LOG")
        .unwrap_or_else(|_| "info,kube=warn".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

async fn run(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Arc;

    use futures::StreamExt;
    use kube::runtime::events::{Recorder, Reporter};

    use crate::config::OperatorConfig;
    use crate::context::{Context, Faults};
    use crate::controller::{self, Scope};
    use crate::reconcile::plan::RetryPolicy;

    let config_text = std::fs::read_to_string(&args.config).map_err(|e| {
        format!(
            "operator config {}: cannot read: {e}",
            args.config.display()
        )
    })?;
    let config = OperatorConfig::load(&args.config)?;
    let client = client(&args).await?;
    check_crds(&client).await?;

    let (config_tx, config_rx) = tokio::sync::watch::channel(Arc::new(config));
    let config_changed = crate::config_watch::follow(args.config.clone(), config_text, config_tx);
    let scope = Scope {
        client: client.clone(),
        namespace: args.namespace.clone(),
        watch_timeout: args.watch_timeout.as_secs().clamp(1, u32::MAX as u64) as u32,
    };
    let mut streams = controller::streams(&scope);
    let reporter = Reporter {
        controller: "kura-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: streams.stores.clone(),
        config: config_rx,
        recorder: Recorder::new(client.clone(), reporter),
        policy: RetryPolicy {
            budget: args.retry_budget,
            stall_window: args.stall_window,
            ..RetryPolicy::default()
        },
        resync: args.resync,
        metrics: Default::default(),
        faults: Faults::from_env(),
        written: Default::default(),
        transient: Default::default(),
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let deployments = std::mem::replace(&mut streams.deployments, futures::stream::empty().boxed());
    let gateways = crate::gateway_controller::gateway_controller(
        &scope,
        deployments,
        ctx.clone(),
        stopped(stop_rx.clone()),
    );
    let instances = controller::instance_controller(
        streams,
        ctx.clone(),
        config_changed,
        args.concurrency,
        stopped(stop_rx.clone()),
    );
    tracing::info!(namespace = ?args.namespace, config = %args.config.display(), "kura-operator running");
    let signal = async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    };
    tokio::join!(instances, gateways, signal);
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

async fn client(args: &RunArgs) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no cluster configuration (in-cluster or $KUBECONFIG): {e}"))?,
    };
    // A request that gets no byte for longer than a watch can stay silent is hung
    // (a paused or half-started apiserver): fail it so the watcher re-establishes.
    // Without this, a watch stuck across an apiserver restart stalled the caches
    // for minutes (tests/cluster/plane_faults.rs).
    config.read_timeout = Some(args.watch_timeout + std::time::Duration::from_secs(15));
    // Likewise a connection (TCP and TLS) that never completes: without a bound,
    // a watch started while the apiserver restarted waited forever.
    config.connect_timeout = Some(std::time::Duration::from_secs(10));
    // A response (its headers; a watch's body may stream for minutes) that does
    // not start within a bound is abandoned, so the watcher retries: a watch sent
    // while the apiserver was restarting hung forever without it
    // (tests/cluster/plane_faults.rs).
    let timeout = tower::timeout::TimeoutLayer::new(RESPONSE_TIMEOUT);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&timeout)
        .build())
}

/// How long any request may wait for its response to start.
const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Fail at start-up, in one line, when the CRDs are not installed.
async fn check_crds(client: &kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for name in ["kurainstances.kura.dev", "kuragateways.kura.dev"] {
        match api.get_opt(name).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(format!("CRD {name} is not installed: kubectl apply -f crds/").into());
            }
            Err(e) => {
                return Err(format!("cannot reach the apiserver to check CRD {name}: {e}").into());
            }
        }
    }
    Ok(())
}
