//! The executor: carries out a decision's effects, in order, and turns what
//! happened into an `Outcome` and the time to look again. It is where a
//! pass's writes start: the apply and the prune (`carry_out`), what the
//! decision reserves (a host before an apply, a slot of the fleet budget for
//! an admission: `reservations`, each checked again under its lock, since
//! another pass may have taken it since the decision), and the hosts input
//! nobody can apply gives up. `Effect::WriteStatus` is the report's
//! (`report::Pass::write`), after the probe.

pub mod writes;

use std::time::Duration;

use jiff::Timestamp;

use super::carry_out;
use super::reservations::{self, Ask};
use crate::context::Context;
use crate::pass::Error;
use kura_core::accepted::Accepted;
use kura_core::api::{KuraInstance, RolloutState};
use kura_core::claims::Conflict;
use kura_core::judge::Effect;
use kura_core::judge::instance::{InstanceDecision as Decision, Valid, Verdict};
use kura_core::outcome::Outcome;
use kura_core::plan::{Plan, until};
use kura_core::rollout::Admission;

/// While a child is being deleted, look again this often.
const TERMINATING_RECHECK: Duration = Duration::from_secs(5);
/// A waiting instance is woken when a slot frees (`budget::wake_next`); this
/// is the fallback.
const WAITING_RECHECK: Duration = Duration::from_secs(30);
/// After its admission is recorded, an instance applies on the next pass.
const ADMITTED_RECHECK: Duration = Duration::from_millis(100);
/// The log line of an admission decided and then refused, the slot taken
/// meanwhile: a handover of the slot that costs a recheck.
pub const SLOT_TAKEN: &str = "the budget's slot was taken since the decision";
/// After joining the rollout queue, look again this soon: the queue of those
/// reconciled at the same moment has formed by then.
const JOIN_RECHECK: Duration = Duration::from_secs(2);

/// Carries out `decision.effects` up to the status write.
pub async fn execute(
    ctx: &Context,
    instance: &KuraInstance,
    decision: &Decision,
    config: &Accepted,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let ask = Ask {
        instance,
        observed: &decision.observed,
        stores: &ctx.stores,
        memory: &ctx.memory.instances,
        config,
        now,
    };
    for effect in &decision.effects {
        match effect {
            Effect::StandDown => ctx.stores.claims.stand_down(instance),
            Effect::ReserveSlot => return reserve_slot(ctx, &ask).await,
            Effect::ClaimHosts => {
                let taken = reservations::of(ctx).take_hosts(&ask).await;
                if let Err(conflict) = taken.map_err(Error::Ledger)? {
                    return Ok(host_conflict(ctx, conflict, now));
                }
            }
            Effect::Apply { waves } => {
                let valid = decision.valid().expect("only a valid instance applies");
                return apply_and_prune(ctx, instance, decision, valid, waves, now).await;
            }
            // Carried out with the apply it follows, once that succeeded.
            Effect::Prune { .. } => {}
            // The report's, after the probe; a gateway's effects are not an instance's.
            Effect::WriteStatus | Effect::Release { .. } | Effect::Collect => {}
        }
    }
    Ok(wrote_nothing(ctx, instance, decision, now))
}

/// `Effect::ReserveSlot`: the admission, recorded first and applied on the
/// pass that follows at once; or the slot was taken meanwhile.
async fn reserve_slot(ctx: &Context, ask: &Ask<'_>) -> Result<(Outcome, Duration), Error> {
    let admission = reservations::of(ctx)
        .take_slot(ask)
        .await
        .map_err(Error::Ledger)?;
    Ok(match admission {
        Admission::Admit { .. } => (Outcome::Admitted, ADMITTED_RECHECK),
        // Another pass took the slot since the decision (sharded: or the
        // ledger still counts one that left: see `reservations`).
        waiting => {
            tracing::info!("{SLOT_TAKEN}: waiting");
            (Outcome::Held(waiting), JOIN_RECHECK)
        }
    })
}

/// `Effect::Apply`, then the `Effect::Prune` that follows it.
async fn apply_and_prune(
    ctx: &Context,
    instance: &KuraInstance,
    decision: &Decision,
    valid: &Valid,
    waves: &[kura_core::judge::Wave],
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let Plan::Apply { reasons, held, .. } = &valid.plan else {
        unreachable!("an apply is the effect of Plan::Apply");
    };
    let prune = decision
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Prune { objects } => Some(objects.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let steps = carry_out::Steps {
        reasons: reasons.clone(),
        apply: kura_core::judge::ops(waves),
        prune,
        key: &valid.key,
        held: held.clone(),
    };
    carry_out::carry_out(
        ctx,
        instance,
        &decision.observed,
        &valid.desired,
        steps,
        now,
    )
    .await
}

/// The outcome of a decision that writes nothing before its report, and
/// when to look again.
fn wrote_nothing(
    ctx: &Context,
    instance: &KuraInstance,
    decision: &Decision,
    now: Timestamp,
) -> (Outcome, Duration) {
    let valid = match &decision.verdict {
        Verdict::Invalid(errors) => return (Outcome::Invalid(errors.clone()), ctx.settings.resync),
        Verdict::Valid(valid) => valid,
    };
    if let Some(conflict) = &valid.host_conflict {
        return host_conflict(ctx, conflict.clone(), now);
    }
    match &valid.plan {
        Plan::Invalid(errors) => (Outcome::Invalid(errors.clone()), ctx.settings.resync),
        // A pause with an end looks again when it ends.
        Plan::Paused => (Outcome::Paused, pause_recheck(ctx, instance, now)),
        Plan::NameConflict(conflicts) => (
            Outcome::NameConflict(conflicts.clone()),
            ctx.settings.resync,
        ),
        // The deletion of the child wakes this instance (an owned watch); this
        // is the fallback.
        Plan::ChildTerminating(objects) => (
            Outcome::ChildTerminating(objects.clone()),
            ctx.settings.resync.min(TERMINATING_RECHECK),
        ),
        Plan::Backoff { at } => (Outcome::Waiting { stalled: false }, until(*at, now)),
        Plan::Stalled { at } => (
            Outcome::Waiting { stalled: true },
            stalled_recheck(ctx, decision, *at, now),
        ),
        Plan::ConflictHold { at, managers } => (
            Outcome::ConflictHold {
                managers: managers.clone(),
            },
            until(*at, now),
        ),
        Plan::Converged => (Outcome::Converged, ctx.settings.resync),
        Plan::Settling => (Outcome::Converged, kura_core::plan::SETTLE),
        Plan::Held(admission) => (
            Outcome::Held(admission.clone()),
            held_recheck(decision, admission, now),
        ),
        Plan::Admit | Plan::Apply { .. } => {
            unreachable!("an admission or an apply is carried out by its effects")
        }
    }
}

/// A stall ends when its window does; a name conflict's also when its names
/// are free again, which a pass at each resync finds (`name_wait`).
fn stalled_recheck(ctx: &Context, decision: &Decision, at: Timestamp, now: Timestamp) -> Duration {
    let wait = until(at, now);
    if super::name_wait::stalled_by_a_name(&decision.observed.status.conditions) {
        wait.min(ctx.settings.resync)
    } else {
        wait
    }
}

fn host_conflict(ctx: &Context, conflict: Conflict, now: Timestamp) -> (Outcome, Duration) {
    // A reservation ends with no event to wake those waiting for it.
    let requeue = match conflict.ask_again_at() {
        Some(at) => until(at, now).min(ctx.settings.resync),
        None => ctx.settings.resync,
    };
    (Outcome::HostConflict(conflict), requeue)
}

/// Waiting for a window: look again when it opens (or the deadline comes).
/// Joining the queue now: look again soon, the first in line may go.
fn held_recheck(decision: &Decision, admission: &Admission, now: Timestamp) -> Duration {
    if let Admission::Window(wait) = admission {
        return until(wait.goes_at(), now);
    }
    let joined = decision
        .observed
        .status
        .rollout
        .as_ref()
        .is_some_and(|r| r.state == RolloutState::Waiting);
    if joined {
        WAITING_RECHECK
    } else {
        JOIN_RECHECK
    }
}

fn pause_recheck(ctx: &Context, instance: &KuraInstance, now: Timestamp) -> Duration {
    match kura_core::window::pause(&instance.spec, now) {
        kura_core::window::Pause::Paused { until: Some(at) } => {
            until(at, now).min(ctx.settings.resync)
        }
        _ => ctx.settings.resync,
    }
}
