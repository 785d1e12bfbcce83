//! The gateway's executor: carries out its decision's effects (a collection,
//! or an apply with the release that follows it), as `reconcile::execute`
//! does an instance's, and turns what happened into an `Outcome` and the
//! time to look again.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::carry_out::{Steps, carry_out};
use super::collect;
use crate::context::Context;
use crate::pass::Error;
use crate::reconcile::name_wait;
use kura_core::api::KuraGateway;
use kura_core::gateway::plan::Plan;
use kura_core::gateway::status::Outcome;
use kura_core::judge::Effect;
use kura_core::judge::gateway::GatewayDecision;
use kura_core::outcome::Failure;
use kura_core::plan::{SETTLE, until};

/// Carries out the plan: what happened and when to look again, or `None`
/// when the gateway was collected (deleted).
pub async fn execute(
    ctx: &Context,
    gw: &Arc<KuraGateway>,
    decision: &GatewayDecision,
    now: Timestamp,
) -> Result<Option<(Outcome, Duration)>, Error> {
    for effect in &decision.effects {
        match effect {
            Effect::Collect => {
                collect::collect(ctx, gw)
                    .await
                    .map_err(|failure| collect_failed(ctx, gw, failure, now))?;
                return Ok(None);
            }
            Effect::Apply { waves } => {
                let (Plan::Apply { reasons, .. }, Ok(desired)) =
                    (&decision.plan, &decision.rendered)
                else {
                    unreachable!("an apply is the effect of a valid gateway's Plan::Apply");
                };
                let release = decision
                    .effects
                    .iter()
                    .find_map(|e| match e {
                        Effect::Release { objects } => Some(objects.clone()),
                        _ => None,
                    })
                    .unwrap_or_default();
                let steps = Steps {
                    reasons: reasons.clone(),
                    apply: kura_core::judge::ops(waves),
                    release,
                    key: decision.key.as_deref().unwrap_or_default(),
                };
                let done = carry_out(ctx, gw, &decision.observed, desired, steps, now).await?;
                return Ok(Some(done));
            }
            // Carried out with the apply it follows; the status is the report's.
            Effect::Release { .. } | Effect::WriteStatus => {}
            // An instance's effects are not a gateway's.
            Effect::StandDown | Effect::ReserveSlot | Effect::ClaimHosts | Effect::Prune { .. } => {
            }
        }
    }
    Ok(Some(wrote_nothing(ctx, decision, now)))
}

/// The outcome of a decision that writes nothing before its report, and
/// when to look again.
fn wrote_nothing(ctx: &Context, decision: &GatewayDecision, now: Timestamp) -> (Outcome, Duration) {
    match (&decision.plan, &decision.rendered) {
        (Plan::Invalid(errors), _) | (Plan::Apply { .. }, Err(errors)) => {
            (Outcome::Invalid(errors.clone()), ctx.settings.resync)
        }
        // Retried when the other object changes or goes (the watches map it here).
        (Plan::NameConflict(conflicts), _) => (
            Outcome::NameConflict(conflicts.clone()),
            ctx.settings.resync,
        ),
        (Plan::Backoff { at }, _) => (Outcome::Waiting, until(*at, now)),
        // A name conflict's stall ends when its names are free, which a pass
        // at each resync finds (`reconcile::name_wait`); any other's with its window.
        (Plan::Stalled { at }, _) => {
            let wait = until(*at, now);
            let by_a_name = name_wait::stalled_by_a_name(&decision.observed.status.conditions);
            (
                Outcome::Waiting,
                if by_a_name {
                    wait.min(ctx.settings.resync)
                } else {
                    wait
                },
            )
        }
        (Plan::ConflictHold { at, managers }, _) => (
            Outcome::ConflictHold {
                managers: managers.clone(),
            },
            until(*at, now),
        ),
        (Plan::Converged, _) => (Outcome::Converged, ctx.settings.resync),
        (Plan::Settling, _) => (Outcome::Converged, SETTLE),
        (Plan::Collect, _) | (Plan::Apply { .. }, Ok(_)) => {
            unreachable!("a collection or an apply is carried out by its effects")
        }
    }
}

/// A failed collection (or the live read before it), retried quickly.
pub fn collect_failed(ctx: &Context, gw: &KuraGateway, failure: Failure, now: Timestamp) -> Error {
    let failures = ctx
        .memory
        .gateways
        .transient_failure(gw, "collect", now)
        .failures;
    Error::Collect { failure, failures }
}
