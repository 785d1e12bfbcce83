//! What a reconcile reports: the new status (computed, pure), the log line,
//! the status write and its Events, and what the pass leaves behind for others
//! (a freed slot of the fleet budget wakes the next in line).

use jiff::Timestamp;
use kube::Api;

use super::apply::{Failure, Stage};
use super::probe::{self, Activation};
use super::status::{self, Outcome, StatusInputs};
use super::{Error, budget, events};
use crate::api::{KuraInstance, KuraInstanceStatus, RolloutState};
use crate::config::OperatorConfig;
use crate::context::Context;
use crate::memory::Recall;
use crate::reconcile::decide::Decision;
use crate::reconcile::plan::Observed;
use crate::rollout::Admission;

/// What the caches say of the instance's activation after this pass did
/// `outcome`: nothing when nothing was rendered or nothing is expected to run
/// (invalid, paused, conflicts, a failed apply or prune, waits).
pub fn activation(
    outcome: &Outcome,
    decision: &crate::reconcile::decide::Decision,
    stores: &crate::stores::Stores,
) -> Option<Activation> {
    let desired = decision.desired()?;
    match outcome {
        Outcome::Held(_) | Outcome::Applied { held: Some(_), .. } => probe::held(desired, stores),
        Outcome::Applied { pruned, .. } if pruned.failure.is_none() => {
            Some(probe::probe(desired, stores, true))
        }
        Outcome::Converged => Some(probe::probe(
            desired,
            stores,
            decision.observed.status.phase != Some(crate::api::Phase::Ready),
        )),
        _ => None,
    }
}

/// The status this pass leaves: pure, from the decision and what happened.
pub fn status(
    instance: &KuraInstance,
    decision: &Decision,
    outcome: &Outcome,
    activation: Option<&Activation>,
    ctx: &Context,
    config: &OperatorConfig,
    now: Timestamp,
) -> KuraInstanceStatus {
    let observed = &decision.observed;
    status::compute(&StatusInputs {
        observed,
        desired: decision.desired(),
        gateway: decision.gateway(),
        outcome,
        activation,
        pending_storage: decision.pending_storage.as_ref(),
        rollout: status::RolloutInputs {
            origin: budget::origin(observed),
            fleet_revision: &config.fleet_revision(),
            deadline: config.rollout.deadline(),
            uncounted: observed.budget.budgeted
                && matches!(
                    observed.budget.admission,
                    Some(Admission::Admit { counted: false })
                ),
            gate: &observed.budget.gate,
        },
        pause: instance.spec.pause.as_ref(),
        policy: &ctx.policy,
        now,
    })
}

/// Writes the status when it is worth a write, then publishes the Events of
/// the transition (after the write, not awaited). A failed write is an Event
/// of its own and a transient failure of this instance.
pub async fn write(
    ctx: &Context,
    instance: &std::sync::Arc<KuraInstance>,
    observed: &Observed,
    new_status: &KuraInstanceStatus,
    outcome: &Outcome,
    recall: &Recall,
    now: Timestamp,
) -> Result<(), Error> {
    let mut events = events::events_for(&observed.status, new_status, outcome);
    events.extend(events::pause_expired(
        &observed.status,
        new_status,
        &instance.spec,
        now,
    ));
    if !observed.ignored_inventory.is_empty() {
        events.push(events::inventory_ignored(&observed.ignored_inventory));
    }
    events.extend(events::deadline_overrode_window(observed, outcome));
    // Ignored entries are still in the live status: the write removes them.
    if !observed.ignored_inventory.is_empty()
        || status::worth_writing(&observed.status, new_status, recall.since_status_written)
    {
        let namespace = instance.metadata.namespace.as_deref().unwrap_or_default();
        let name = instance.metadata.name.as_deref().unwrap_or_default();
        let api: Api<KuraInstance> = Api::namespaced(ctx.client.clone(), namespace);
        let written = status::write(&api, name, new_status).await;
        ctx.metrics.status_write(written.as_ref().err());
        match written {
            Ok(rv) => ctx.memory.status_written(instance, rv, new_status),
            Err(source) => {
                events::publish(ctx, instance, vec![events::status_write_failed(&source)]);
                let streak = ctx.memory.transient_failure(instance, "status", now);
                return Err(Error::Status {
                    source,
                    failures: streak.failures,
                });
            }
        }
        tracing::debug!(changed = ?status::changes(&observed.status, new_status), "status written");
    }
    events::publish(ctx, instance, events);
    Ok(())
}

/// What the pass leaves for others: a slot of the budget it freed wakes the
/// next in line; a pass that got through ends the transient streak.
pub fn after(
    ctx: &Context,
    instance: &KuraInstance,
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    outcome: &Outcome,
    config: &OperatorConfig,
    now: Timestamp,
) {
    if left_the_budget(prev, new) {
        budget::wake_next(ctx, config, now);
    }
    if !outcome.failure().is_some_and(Failure::is_transient) {
        ctx.memory.transient_over(instance);
    }
}

/// An instance admitted to a rollout left it (Ready again, or a newer change
/// superseded it): a slot of the budget is free.
pub(crate) fn left_the_budget(prev: &KuraInstanceStatus, new: &KuraInstanceStatus) -> bool {
    let admitted = |s: &KuraInstanceStatus| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.state == RolloutState::Admitted)
    };
    admitted(prev) && !admitted(new)
}

/// The log line of a pass; the span names the instance.
pub fn log_outcome(outcome: &Outcome, status: &KuraInstanceStatus) {
    match outcome {
        Outcome::Applied { reasons, sent, .. } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            tracing::info!(revision = ?status.applied_revision_short, reasons = %why.join(", "), sent = %sent.join(", "), "applied");
        }
        Outcome::ApplyFailed { failure, .. } => {
            tracing::warn!(error = %failure, "apply failed")
        }
        Outcome::NameConflict(conflicts) => {
            tracing::warn!(conflicts = %conflicts.join("; "), "name conflict: nothing applied")
        }
        Outcome::ChildTerminating(objects) => {
            tracing::info!(objects = %objects.join("; "), "waiting for children being deleted: nothing applied")
        }
        Outcome::HostConflict(conflict) => {
            tracing::warn!(%conflict, "host conflict: nothing applied")
        }
        _ => {}
    }
    if let Some(failure) = outcome.failure().filter(|f| f.stage == Stage::Prune) {
        tracing::warn!(error = %failure, "prune failed");
    }
    tracing::debug!(outcome = outcome.label(), "reconciled");
}
