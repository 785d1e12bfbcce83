//! What every reconcile shares, in a few parts: the client and the caches;
//! what this process was told (`Settings`); whether it may act and what it
//! reserves (`Acting`, the one answer to "may I act?"); how it reports
//! (`Reporting`); and what it remembers between passes (`Memories`).

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::watch;

use crate::leader::LeaderState;
use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::stores::Stores;
use kura_core::accepted::Accepted;
use kura_core::api::KuraGateway;
use kura_core::retry::RetryPolicy;

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub settings: Settings,
    pub acting: Acting,
    pub report: Reporting,
    pub memory: Memories,
    /// Instances to reconcile now, the instance controller's one wake
    /// channel: the next in line of the rollout budget
    /// (`reconcile::budget::wake_next`), and (from the host claims) those a
    /// freed host concerns.
    pub wake: crate::claims::watch::WakeSender,
    /// The endpoint check's timeout and slots, shared by every reconcile.
    pub endpoint: crate::endpoint::Checker,
}

/// What this process was told: its flags and the configuration in force.
pub struct Settings {
    /// The configuration in force, as accepted (its fleet revision computed).
    pub config: watch::Receiver<Arc<Accepted>>,
    pub policy: RetryPolicy,
    pub resync: Duration,
    /// What a dedicated gateway's ServiceAccount is bound to (`--gateway-role`,
    /// `--gateway-cluster-role`).
    pub gateway_roles: kura_core::render::gateway::GatewayRoles,
    pub faults: Faults,
}

/// Whether this process may act, and the reservations it shares.
pub struct Acting {
    /// May this process act? Per object (`acts_for`, `run`, by its
    /// namespace's shard) and for work that spans shards (`acts_for_any`,
    /// `run_while_acting`): all of the one shard while it leads, without
    /// `--shards`. Nothing else answers it.
    pub shards: Arc<crate::shards::Gate>,
    /// Leading (always, without `--leader-elect`) and with synced caches: what
    /// the probes and metrics report, and what the single shard follows.
    pub leader: watch::Receiver<LeaderState>,
    /// Sharded: the reservations the replicas share (a slot of the fleet
    /// budget, a host); `None` with one shard, where memory serializes them.
    pub ledgers: Option<crate::shards::ledger::Ledgers>,
}

/// How this process reports: Events, metrics, the rationed status refreshes.
pub struct Reporting {
    /// Who publishes Events (see `reconcile::events::publish` for why there is
    /// no long-lived `Recorder`).
    pub reporter: Reporter,
    pub metrics: Arc<Metrics>,
    /// Refreshes of counts alone in a status, rationed across the process.
    pub refreshes: crate::refresh_budget::RefreshBudget,
    /// The fleet rollout's one Event, on this process's Pod.
    pub fleet: crate::fleet_event::FleetRollouts,
}

/// What this process remembers between passes, per object.
#[derive(Default)]
pub struct Memories {
    pub instances: Memory,
    pub gateways: Memory<KuraGateway>,
}

impl Context {
    pub fn config(&self) -> Arc<Accepted> {
        self.settings.config.borrow().clone()
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
