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

pub fn main(_args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("not yet".into())
}
