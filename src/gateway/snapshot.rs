//! The snapshot a gateway's pass decides from, read first, in the instance's
//! shape (`crate::reconcile::snapshot`): what it renders to (validate →
//! render, pure), what the caches show of it, and who uses it (from the
//! caches, or the apiserver's answer when asked). The decision is
//! `kura_core::judge::gateway::judge_gateway`, a pure function of this value.

use jiff::Timestamp;

use super::{collect, observe};
use crate::reconcile::name_wait;
use crate::stores::Stores;
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::config::OperatorConfig;
use kura_core::judge::gateway::{GatewayDecision, GatewaySnapshot, judge_gateway, prepare};
use kura_core::plan::RetryPolicy;
use kura_core::render::gateway::GatewayRoles;

/// Where the snapshot is read from.
pub struct Inputs<'a> {
    pub gw: &'a KuraGateway,
    pub config: &'a OperatorConfig,
    pub roles: &'a GatewayRoles,
    pub stores: &'a Stores,
    /// The status to decide from (`Memory::recall`).
    pub status: Option<KuraGatewayStatus>,
    /// The inputs key this process applied within `plan::SETTLE`, if any.
    pub recently_applied: Option<&'a str>,
    /// Who uses the gateway as read live (`collect::live_user`), when the
    /// caches showed nobody: only a gateway about to be collected is asked.
    pub live_user: Option<Option<String>>,
    pub policy: &'a RetryPolicy,
    pub now: Timestamp,
}

/// Reads the snapshot of `i.gw`.
pub fn read(i: &Inputs) -> GatewaySnapshot {
    let rendered = prepare(i.gw, i.roles);
    let mut observed = observe::observe(i.gw, i.status.clone(), rendered.as_ref().ok(), i.stores);
    let asker = name_wait::Asker {
        uid: i.gw.metadata.uid.as_deref().unwrap_or_default(),
        name: i.gw.metadata.name.as_deref().unwrap_or_default(),
    };
    if let Ok(desired) = &rendered
        && name_wait::stall_over(
            &observed.status.conditions,
            desired,
            &observed.children,
            &i.stores.foreign,
            &asker,
        )
    {
        // The names a name conflict stalled on are free again: try again.
        observed.status.retry = None;
    }
    let user = match &i.live_user {
        Some(live) => live.clone(),
        None => collect::cached_user(i.gw, i.stores, i.config),
    };
    GatewaySnapshot {
        rendered,
        observed,
        recently_applied: i.recently_applied.map(str::to_string),
        user,
    }
}

/// Reads the snapshot and decides: the pass's decision.
pub fn decide_from(i: &Inputs) -> GatewayDecision {
    judge_gateway(read(i), i.policy, i.now)
}
