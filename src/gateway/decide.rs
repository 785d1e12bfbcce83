//! The decision about a `KuraGateway`, in the instance's shape (`crate::reconcile::decide`):
//! validate → render → observe (the caches) → who uses it → plan. It reads
//! what was read before it (the caches, this process's memory, the clock, and
//! the gateway's user when the caches do not show one) and writes nothing.

use jiff::Timestamp;

use super::observe::{self};
use super::{collect, validate};
use crate::stores::Stores;
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::config::OperatorConfig;
use kura_core::gateway::observed::Observed;
use kura_core::gateway::plan::{self, Plan};
use kura_core::plan::{RetryPolicy, inputs_key};
use kura_core::render::Desired;
use kura_core::render::gateway::{GatewayRoles, render_gateway};
use kura_core::validate::ValidationErrors;

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

#[derive(Debug)]
pub struct Decision {
    pub observed: Observed,
    /// What the gateway renders to, or why it does not validate.
    pub rendered: Result<Desired, ValidationErrors>,
    /// The inputs key failures and applies belong to (the revision).
    pub key: Option<String>,
    /// Who uses the gateway (an instance, or an Ingress of its class).
    pub user: Option<String>,
    pub plan: Plan,
}

impl Decision {
    pub fn desired(&self) -> Option<&Desired> {
        self.rendered.as_ref().ok()
    }

    /// The caches show nobody using a gateway this operator manages: ask the
    /// apiserver before collecting it (then decide again with its answer).
    pub fn asks_live_user(&self) -> bool {
        matches!(self.plan, Plan::Collect)
    }
}

pub fn decide(i: &Inputs) -> Decision {
    let rendered = validate::validate(i.gw).map(|()| render_gateway(i.gw, i.roles));
    let mut observed = observe::observe(i.gw, i.status.clone(), rendered.as_ref().ok(), i.stores);
    let key = rendered
        .as_ref()
        .ok()
        .map(|d| inputs_key(&d.revision, None));
    observed.just_applied = key.is_some() && i.recently_applied == key.as_deref();
    let user = match &i.live_user {
        Some(live) => live.clone(),
        None => collect::cached_user(i.gw, i.stores, i.config),
    };
    let plan = plan::plan(
        &observed,
        rendered.as_ref(),
        user.as_deref(),
        i.policy,
        i.now,
    );
    Decision {
        observed,
        rendered,
        key,
        user,
        plan,
    }
}
