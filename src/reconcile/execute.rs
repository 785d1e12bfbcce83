//! Carrying out a decision: what happened (`Outcome`) and when to look again.
//! Only the apply writes (`rollout`); the rest takes what the decision
//! reserves in this process (a host before an apply, a slot of the fleet
//! budget for an admission), checking again under the same lock, since
//! another reconcile may have taken it since the decision.

use std::time::Duration;

use jiff::Timestamp;

use super::{Error, budget, rollout};
use crate::context::Context;
use crate::reconcile::decide::{Decision, Valid, Verdict};
use kura_core::api::{KuraInstance, RolloutState};
use kura_core::claims::Conflict;
use kura_core::config::OperatorConfig;
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

pub async fn execute(
    ctx: &Context,
    instance: &KuraInstance,
    decision: &Decision,
    config: &OperatorConfig,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let valid = match &decision.verdict {
        Verdict::Invalid(errors) => {
            // Input nobody can apply asks for no host: it keeps nobody waiting.
            ctx.stores.claims.stand_down(instance);
            return Ok((Outcome::Invalid(errors.clone()), ctx.resync));
        }
        Verdict::Valid(valid) => valid,
    };
    if let Some(conflict) = &valid.host_conflict {
        return Ok(host_conflict(ctx, conflict.clone(), now));
    }
    let observed = &decision.observed;
    Ok(match &valid.plan {
        Plan::Invalid(errors) => (Outcome::Invalid(errors.clone()), ctx.resync),
        // A pause with an end looks again when it ends.
        Plan::Paused => (Outcome::Paused, pause_recheck(ctx, instance, now)),
        Plan::NameConflict(conflicts) => (Outcome::NameConflict(conflicts.clone()), ctx.resync),
        // The deletion of the child wakes this instance (an owned watch); this
        // is the fallback.
        Plan::ChildTerminating(objects) => (
            Outcome::ChildTerminating(objects.clone()),
            ctx.resync.min(TERMINATING_RECHECK),
        ),
        Plan::Backoff { at } => (Outcome::Waiting { stalled: false }, until(*at, now)),
        Plan::Stalled { at } => (Outcome::Waiting { stalled: true }, until(*at, now)),
        Plan::ConflictHold { at, managers } => (
            Outcome::ConflictHold {
                managers: managers.clone(),
            },
            until(*at, now),
        ),
        Plan::Converged => (Outcome::Converged, ctx.resync),
        Plan::Settling => (Outcome::Converged, kura_core::plan::SETTLE),
        Plan::Admit => {
            let admission = match &ctx.ledgers {
                None => {
                    budget::take_slot(instance, observed, &ctx.stores, &ctx.memory, config, now)
                }
                Some(ledgers) => {
                    let slot = budget::take_shared_slot(
                        instance,
                        observed,
                        &ctx.stores,
                        &ledgers.budget,
                        config,
                        now,
                    );
                    slot.await.map_err(Error::Ledger)?
                }
            };
            match admission {
                // Recorded first, applied on the pass that follows at once.
                Admission::Admit { .. } => (Outcome::Admitted, ADMITTED_RECHECK),
                // Another reconcile took the slot since the decision (sharded:
                // or the ledger still counts one that left: see `report`).
                waiting => {
                    tracing::info!("{SLOT_TAKEN}: waiting");
                    (Outcome::Held(waiting), JOIN_RECHECK)
                }
            }
        }
        Plan::Held(admission) => (
            Outcome::Held(admission.clone()),
            held_recheck(decision, admission, now),
        ),
        Plan::Apply {
            reasons,
            apply,
            prune,
            held,
        } => {
            let steps = rollout::Steps {
                reasons: reasons.clone(),
                apply: apply.clone(),
                prune: prune.clone(),
                key: &valid.key,
                held: held.clone(),
            };
            return take_hosts_and_apply(ctx, instance, decision, valid, steps, config, now).await;
        }
    })
}

/// Takes the hosts, then applies and prunes.
async fn take_hosts_and_apply(
    ctx: &Context,
    instance: &KuraInstance,
    decision: &Decision,
    valid: &Valid,
    steps: rollout::Steps<'_>,
    config: &OperatorConfig,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    if let Err(conflict) = ctx.stores.claims.claim(instance, config, now) {
        return Ok(host_conflict(ctx, conflict, now));
    }
    if let Some(ledgers) = &ctx.ledgers
        && let Some(conflict) = reserve_hosts(ctx, &ledgers.hosts, instance, config, now).await?
    {
        return Ok(host_conflict(ctx, conflict, now));
    }
    rollout::rollout(
        ctx,
        instance,
        &decision.observed,
        &valid.desired,
        steps,
        now,
    )
    .await
}

/// Sharded: the hosts this instance serves by no Ingress yet are reserved
/// in the shared ledger before its apply, since the replica of another shard
/// cannot see this process's grant; one another instance reserved first is a
/// host conflict until that entry ends.
async fn reserve_hosts(
    ctx: &Context,
    ledger: &crate::shards::ledger::Ledger,
    instance: &KuraInstance,
    config: &OperatorConfig,
    now: Timestamp,
) -> Result<Option<Conflict>, Error> {
    let fresh = ctx.stores.claims.not_served(instance, config);
    let uid = instance.metadata.uid.clone().unwrap_or_default();
    if fresh.is_empty() || uid.is_empty() {
        return Ok(None);
    }
    let reservation = kura_core::shard::ledger::HostReservation {
        uid,
        owner: format!(
            "{}/{}",
            instance.metadata.namespace.as_deref().unwrap_or_default(),
            instance.metadata.name.as_deref().unwrap_or_default()
        ),
        wanted: fresh,
        at: now,
    };
    let seen =
        |e: &kura_core::shard::ledger::Entry| crate::shards::ledger::seen(&ctx.stores.instances, e);
    let reserve = ledger.reserve_hosts(now, seen, reservation);
    reserve.await.map_err(Error::Ledger)
}

fn host_conflict(ctx: &Context, conflict: Conflict, now: Timestamp) -> (Outcome, Duration) {
    // A reservation ends with no event to wake those waiting for it.
    let requeue = match conflict.ask_again_at() {
        Some(at) => until(at, now).min(ctx.resync),
        None => ctx.resync,
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
        kura_core::window::Pause::Paused { until: Some(at) } => until(at, now).min(ctx.resync),
        _ => ctx.resync,
    }
}
