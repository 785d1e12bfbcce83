//! What a reconcile reports: the new status (computed, pure), the log line,
//! the status write and its Events, and what the pass leaves behind for others
//! (a freed slot of the fleet budget wakes the next in line).

use std::sync::Arc;

use jiff::Timestamp;

use super::probe::{self};
use super::status;
use super::{budget, endpoint_check, events};
use crate::context::Context;
use crate::memory::Recall;
use crate::pass::Error;
use kura_core::accepted::Accepted;
use kura_core::api::{KuraInstance, KuraInstanceStatus, RolloutState};
use kura_core::judge::instance::InstanceDecision as Decision;
use kura_core::keys::FIELD_MANAGER;
use kura_core::outcome::Activation;
use kura_core::outcome::Failure;
use kura_core::outcome::Outcome;
use kura_core::outcome::Stage;
use kura_core::rollout::Admission;
use kura_core::status::StatusInputs;

/// One pass for one instance, as the report steps read it.
pub struct Pass<'a> {
    pub ctx: &'a Arc<Context>,
    pub instance: &'a Arc<KuraInstance>,
    pub config: &'a Accepted,
    pub decision: &'a Decision,
    pub recall: &'a Recall,
    pub now: Timestamp,
}

impl Pass<'_> {
    /// The instance's activation after this pass did `outcome`: what the
    /// caches say, then, unless the region turns the check off and where the
    /// caches call it active, whether its endpoint answers (`endpoint_check`,
    /// issue 23).
    /// Nothing when nothing was rendered or nothing is expected to run
    /// (invalid, paused, conflicts, a failed apply or prune, waits).
    pub async fn activation(&self, outcome: &Outcome) -> Option<Activation> {
        let cached = self.cached_activation(outcome)?;
        let desired = self.decision.desired()?;
        let asker = endpoint_check::Asker {
            ctx: self.ctx,
            instance: self.instance,
            was_ready: self.decision.observed.status.phase == Some(kura_core::api::Phase::Ready),
            refresh: crate::memory::Refresh {
                answered: self.ctx.settings.resync,
                not_answered: super::ACTIVATION_RECHECK.min(self.ctx.settings.resync),
            },
        };
        let region = self.config.regions.get(&self.instance.spec.region);
        Some(endpoint_check::confirm(cached, desired, region, &asker).await)
    }

    /// What the caches say of the instance's activation after `outcome`.
    fn cached_activation(&self, outcome: &Outcome) -> Option<Activation> {
        let desired = self.decision.desired()?;
        let stores = &self.ctx.stores;
        match outcome {
            Outcome::Held(_) | Outcome::Applied { held: Some(_), .. } => {
                probe::held(desired, stores)
            }
            Outcome::Applied { pruned, .. } if pruned.failure.is_none() => {
                Some(probe::probe(desired, stores, true))
            }
            Outcome::Converged => Some(probe::probe(
                desired,
                stores,
                self.decision.observed.status.phase != Some(kura_core::api::Phase::Ready),
            )),
            _ => None,
        }
    }

    /// The status this pass leaves: pure, from the decision and what happened.
    pub fn status(&self, outcome: &Outcome, activation: Option<&Activation>) -> KuraInstanceStatus {
        let decision = self.decision;
        let observed = &decision.observed;
        let mut status = kura_core::status::compute(&StatusInputs {
            observed,
            desired: decision.desired(),
            gateway: decision.gateway(),
            outcome,
            activation,
            pending_storage: decision.pending_storage.as_ref(),
            rollout: kura_core::status::RolloutInputs {
                origin: kura_core::budget::origin(observed),
                fleet_revision: self.config.fleet_revision(),
                deadline: self.config.rollout.deadline(),
                uncounted: observed.budget.budgeted
                    && matches!(
                        observed.budget.admission,
                        Some(Admission::Admit { counted: false })
                    ),
                gate: &observed.budget.gate,
            },
            pause: self.instance.spec.pause.as_ref(),
            policy: &self.ctx.settings.policy,
            now: self.now,
        });
        let namespace = self
            .instance
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default();
        status.shard = self.ctx.acting.shards.label(namespace);
        status
    }

    /// Writes the status when it is worth a write, then publishes the Events
    /// of the transition (after the write, not awaited). A failed write is an
    /// Event of its own and a transient failure of this instance.
    pub async fn write(
        &self,
        new_status: &KuraInstanceStatus,
        outcome: &Outcome,
    ) -> Result<(), Error> {
        let (ctx, instance, now) = (self.ctx, self.instance, self.now);
        let observed = &self.decision.observed;
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
            || ctx.report.refreshes.allows(
                kura_core::status::worth(
                    &observed.status,
                    new_status,
                    self.recall.since_status_written,
                ),
                &ctx.report.metrics,
            )
        {
            if left_the_budget(&observed.status, new_status) {
                // Before the write that frees the slot (`reservations`).
                super::reservations::of(ctx)
                    .end_admission(instance, self.config)
                    .await;
            }
            status::write_and_remember(
                ctx,
                &ctx.memory.instances,
                instance,
                new_status,
                FIELD_MANAGER,
                now,
            )
            .await?;
            tracing::debug!(changed = ?kura_core::status::changes(&observed.status, new_status), "status written");
        }
        events::publish(ctx, instance, events);
        Ok(())
    }

    /// What the pass leaves for others: a slot of the budget it freed wakes
    /// the next in line (its reservation ended before the status write); a pass that got through ends the transient streak.
    pub fn after(&self, new: &KuraInstanceStatus, outcome: &Outcome) {
        if left_the_budget(&self.decision.observed.status, new) {
            budget::wake_next(self.ctx, self.config, self.now);
        }
        if !outcome.failure().is_some_and(Failure::is_transient) {
            self.ctx.memory.instances.transient_over(self.instance);
        }
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
