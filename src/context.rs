//! What every reconcile shares: the client, the caches, the current operator
//! configuration, the retry policy, the Event reporter, metrics.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::watch;

use crate::leader::LeaderState;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::stores::Stores;
use kura_core::api::KuraGateway;
use kura_core::config::OperatorConfig;
use kura_core::retry::RetryPolicy;

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub config: watch::Receiver<Arc<OperatorConfig>>,
    /// Who publishes Events (see `reconcile::events::publish` for why there is
    /// no long-lived `Recorder`).
    pub reporter: Reporter,
    pub policy: RetryPolicy,
    pub resync: Duration,
    pub metrics: Arc<Metrics>,
    /// Leading (always, without `--leader-elect`) and with synced caches: only
    /// then does anything reconcile.
    pub leader: watch::Receiver<LeaderState>,
    pub faults: Faults,
    /// Instances to reconcile now, the instance controller's one wake
    /// channel: the next in line of the rollout budget
    /// (`reconcile::budget::wake_next`), and (from the host claims) those a
    /// freed host concerns.
    pub wake: crate::claims::watch::WakeSender,
    /// What this process remembers per instance between reconciles.
    pub memory: Memory,
    /// The same, per gateway.
    pub gateway_memory: Memory<KuraGateway>,
    /// Refreshes of counts alone in a status, rationed across the process.
    pub refreshes: crate::refresh_budget::RefreshBudget,
    /// The endpoint check's timeout and slots, shared by every reconcile.
    pub endpoint: crate::endpoint::Checker,
    /// Which shards this process acts for (all of the one shard while it
    /// leads, without `--shards`).
    pub shards: Arc<crate::shards::Gate>,
    /// Sharded: the reservations the replicas share (a slot of the fleet
    /// budget, a host); `None` with one shard, where memory serializes them.
    pub ledgers: Option<crate::shards::ledger::Ledgers>,
    /// What a dedicated gateway's ServiceAccount is bound to (`--gateway-role`,
    /// `--gateway-cluster-role`).
    pub gateway_roles: kura_core::render::gateway::GatewayRoles,
}

impl Context {
    pub fn config(&self) -> Arc<OperatorConfig> {
        self.config.borrow().clone()
    }

    /// Only the leader reconciles: a standby keeps its caches warm and waits.
    /// Sharded: it holds at least one shard.
    pub fn leading(&self) -> bool {
        self.leader.borrow().leading
    }
}

/// Fault injection for the crash-recovery tests: with
/// `KURA_FAULT_EXIT_AFTER_APPLY=1` the process exits right after applying and
/// pruning, before the status write, as a kill at that point would.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub exit_after_apply: bool,
}

impl Faults {
    pub fn from_env() -> Faults {
        Faults {
            exit_after_apply: std::env::var("KURA_FAULT_EXIT_AFTER_APPLY").is_ok_and(|v| v == "1"),
        }
    }

    pub fn after_apply(&self) {
        if self.exit_after_apply {
            eprintln!(
                "kura-operator: fault injection: exiting after apply, before the status write"
            );
            std::process::exit(137);
        }
    }
}
