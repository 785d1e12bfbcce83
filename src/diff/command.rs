//! `kura-operator diff`: flags and the pipeline read → decide → print.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;

use super::read::{self, Scope};
use super::report::Report;
use super::{diff_instance, follow_freed_hosts, keep_used_gateways};
use kura_core::accepted::Accepted;
use kura_core::config::OperatorConfig;

#[derive(clap::Args, Debug, Clone)]
pub struct DiffArgs {
    /// Namespace of the instances (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// Instances of every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,

    /// Only the instances with these labels (a label selector, e.g. `tier=gold`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,

    /// The namespace the operator watches (its `--namespace`, the chart's
    /// `watchNamespace`): the fleet its budget counts and its host claims
    /// span. Every namespace when absent, as the operator.
    #[arg(long, env = "KURA_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Operator configuration file, as `run` reads it.
    #[arg(
        long,
        env = "KURA_CONFIG",
        default_value = "/etc/kura-operator/config.yaml"
    )]
    pub config: PathBuf,

    /// Read the configuration from a ConfigMap instead, `NAMESPACE/NAME` (the
    /// chart's `<release>-config`, key `config.yaml`); it takes precedence over
    /// `--config` (which $KURA_CONFIG may set).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub config_map: Option<String>,

    /// Kubeconfig to use; in-cluster or $KUBECONFIG when absent.
    #[arg(long, env = "KURA_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,

    /// Show each changed object as a unified diff of its fields owned by the
    /// operator against the desired manifest.
    #[arg(long)]
    pub show_diff: bool,
}

/// Bound on each read: a preview that hangs helps nobody.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Instances whose names to create are read at a time.
const TAKEN_NAME_READS: usize = 16;

pub fn main(args: DiffArgs) -> Result<Report, Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

pub async fn run(args: DiffArgs) -> Result<Report, Box<dyn std::error::Error>> {
    let client = crate::run::client(args.kubeconfig.as_deref(), READ_TIMEOUT).await?;
    let config = Accepted::new(match &args.config_map {
        Some(at) => {
            let (namespace, name) = at
                .split_once('/')
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .ok_or_else(|| format!("--config-map {at:?}: expected NAMESPACE/NAME"))?;
            read::config_map(&client, namespace, name).await?
        }
        None => OperatorConfig::load(&args.config)?,
    });
    let scope = Scope {
        namespace: match (args.all_namespaces, args.namespace) {
            (true, _) => None,
            (false, Some(ns)) => Some(ns),
            (false, None) => Some(client.default_namespace().to_string()),
        },
        selector: args.selector,
    };
    let instances = read::instances(&client, &scope).await?;
    // The operator decides over everything it watches: the fleet budget
    // counts every instance, host claims every instance's Ingresses. So the
    // caches are those of its scope (the whole cluster unless it watches one
    // namespace), whatever is shown.
    let (fleet_scope, note) = match &args.watch_namespace {
        Some(watched) => (read::Scope::namespace(watched), None),
        None => read::fleet_scope(&client, &scope).await?,
    };
    let fleet = read::instances(&client, &fleet_scope).await?;
    let fleet_size = fleet.len();
    let live = read::live(&client, &fleet_scope, &fleet, args.show_diff).await?;
    drop(fleet);
    let mut diffs: Vec<_> = instances
        .iter()
        .map(|i| diff_instance(i, &config, &live, args.show_diff))
        .collect();
    follow_freed_hosts(&instances, &mut diffs, &config, &live, args.show_diff);
    drop(live);
    read_taken_names(&client, &instances, &mut diffs).await?;
    // A gateway is pruned only when nothing else of its namespace uses it: read
    // what decides it for the namespaces where that question arises.
    let mut namespaces: Vec<String> = diffs
        .iter()
        .filter(|d| d.pruned_gateways().next().is_some())
        .map(|d| d.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    for namespace in namespaces {
        let (all, ingresses) = read::gateway_users(&client, &namespace).await?;
        for d in diffs.iter_mut().filter(|d| d.namespace == namespace) {
            keep_used_gateways(d, &all, &ingresses, &config);
        }
    }
    Ok(Report::new(diffs)
        .with_budget(&config.rollout, fleet_size)
        .with_notes(note.into_iter().collect()))
}

/// The caches list only labelled objects: the names the operator would
/// create are read, as it reads them before its first write (or after a
/// lone create it sends is refused). Rare on a running fleet (nothing to
/// create), so a few at a time.
async fn read_taken_names(
    client: &kube::Client,
    instances: &[kura_core::api::KuraInstance],
    diffs: &mut [super::InstanceDiff],
) -> Result<(), Box<dyn std::error::Error>> {
    let reads = instances
        .iter()
        .zip(diffs.iter())
        .enumerate()
        .filter_map(|(at, (i, d))| {
            let ids = super::names_to_read(d);
            let uid = i.metadata.uid.clone().unwrap_or_default();
            let name = d.name.clone();
            (!ids.is_empty()).then_some(async move {
                let taken = read::taken_names(client, &ids, &uid, &name).await;
                (at, taken)
            })
        });
    let found: Vec<_> = futures::stream::iter(reads)
        .buffer_unordered(TAKEN_NAME_READS)
        .collect()
        .await;
    for (at, taken) in found {
        super::names_found(&mut diffs[at], taken?);
    }
    Ok(())
}
