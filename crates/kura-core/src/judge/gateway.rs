//! The decision about a `KuraGateway`, in the instance's shape
//! ([`super::instance`]): plan what the snapshot shows, and the effects that
//! carry the plan out.

use jiff::Timestamp;

use super::{Effect, waves};
use crate::api::KuraGateway;
use crate::gateway::observed::Observed;
use crate::gateway::plan::{self, Plan};
use crate::plan::{RetryPolicy, inputs_key};
use crate::render::Desired;
use crate::render::gateway::{GatewayRoles, render_gateway};
use crate::validate::ValidationErrors;

/// Validates and renders (the snapshot's read renders first, since what it
/// observes are the objects the gateway renders to).
pub fn prepare(gw: &KuraGateway, roles: &GatewayRoles) -> Result<Desired, ValidationErrors> {
    crate::gateway::validate::validate(gw).map(|()| render_gateway(gw, roles))
}

/// Everything the decision about a gateway reads, read before it starts.
#[derive(Debug)]
pub struct GatewaySnapshot {
    /// What the gateway renders to, or why it does not validate.
    pub rendered: Result<Desired, ValidationErrors>,
    /// What the caches show, with the status to decide from.
    pub observed: Observed,
    /// The inputs key this process applied within `plan::SETTLE`, if any.
    pub recently_applied: Option<String>,
    /// Who uses the gateway (an instance, or an Ingress of its class): from
    /// the caches, or read live when the caches showed nobody.
    pub user: Option<String>,
}

#[derive(Debug)]
pub struct GatewayDecision {
    pub observed: Observed,
    /// What the gateway renders to, or why it does not validate.
    pub rendered: Result<Desired, ValidationErrors>,
    /// The inputs key failures and applies belong to (the revision).
    pub key: Option<String>,
    /// Who uses the gateway.
    pub user: Option<String>,
    pub plan: Plan,
    /// What carries the plan out, in order.
    pub effects: Vec<Effect>,
}

impl GatewayDecision {
    pub fn desired(&self) -> Option<&Desired> {
        self.rendered.as_ref().ok()
    }

    /// The caches show nobody using a gateway this operator manages: ask the
    /// apiserver before collecting it (then decide again with its answer).
    pub fn asks_live_user(&self) -> bool {
        matches!(self.plan, Plan::Collect)
    }
}

/// The decision about the gateway of `snapshot`: pure.
pub fn judge_gateway(
    snapshot: GatewaySnapshot,
    policy: &RetryPolicy,
    now: Timestamp,
) -> GatewayDecision {
    let GatewaySnapshot {
        rendered,
        mut observed,
        recently_applied,
        user,
    } = snapshot;
    let key = rendered
        .as_ref()
        .ok()
        .map(|d| inputs_key(&d.revision, None));
    observed.just_applied = key.is_some() && recently_applied == key;
    let plan = plan::plan(&observed, rendered.as_ref(), user.as_deref(), policy, now);
    let effects = match (&plan, &rendered) {
        // A gateway collected has no status left to write.
        (Plan::Collect, _) => vec![Effect::Collect],
        (Plan::Apply { apply, release, .. }, Ok(_)) => vec![
            Effect::Apply {
                waves: waves(apply),
            },
            Effect::Release {
                objects: release.clone(),
            },
            Effect::WriteStatus,
        ],
        _ => vec![Effect::WriteStatus],
    };
    GatewayDecision {
        observed,
        rendered,
        key,
        user,
        plan,
        effects,
    }
}
