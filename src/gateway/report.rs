//! What a gateway's pass reports, as `reconcile::report` does an instance's:
//! the new status (computed, pure, in the core), the log line and metrics,
//! the status write when it is worth one, and its Events.

use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::events::Event;

use crate::context::Context;
use crate::memory::Recall;
use crate::pass::Error;
use crate::reconcile::{events, status as shared_status};
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::gateway::observed::Observed;
use kura_core::gateway::status::{self, Outcome, StatusInputs};
use kura_core::judge::gateway::GatewayDecision;
use kura_core::keys::GATEWAY_FIELD_MANAGER;
use kura_core::outcome::Failure;

/// Computes, logs, counts and writes what the pass did.
pub async fn report(
    ctx: &Context,
    gw: &Arc<KuraGateway>,
    decision: &GatewayDecision,
    outcome: &Outcome,
    recall: &Recall<KuraGatewayStatus>,
    now: Timestamp,
) -> Result<(), Error> {
    let new_status = status::compute(&StatusInputs {
        observed: &decision.observed,
        desired: decision.desired(),
        outcome,
        user: decision.user.as_deref(),
        policy: &ctx.settings.policy,
        now,
    });
    log_outcome(outcome);
    ctx.report.metrics.count_gateway(outcome.label());
    if let Some(failure) = outcome.failure() {
        ctx.report.metrics.record_failure(failure);
    }
    write(
        ctx,
        gw,
        &decision.observed,
        &new_status,
        outcome,
        recall,
        now,
    )
    .await
}

/// Writes the status when it is worth a write, then publishes the Events.
async fn write(
    ctx: &Context,
    gw: &Arc<KuraGateway>,
    observed: &Observed,
    new_status: &KuraGatewayStatus,
    outcome: &Outcome,
    recall: &Recall<KuraGatewayStatus>,
    now: Timestamp,
) -> Result<(), Error> {
    let news: Vec<Event> = status::notes_for(&observed.status, new_status, outcome)
        .into_iter()
        .map(crate::reconcile::events::event)
        .collect();
    let worth = kura_core::status::worth(&observed.status, new_status, recall.since_status_written);
    if ctx.report.refreshes.allows(worth, &ctx.report.metrics) {
        shared_status::write_and_remember(
            ctx,
            &ctx.memory.gateways,
            gw,
            new_status,
            GATEWAY_FIELD_MANAGER,
            now,
        )
        .await?;
    }
    events::publish(ctx, gw, news);
    if !outcome.failure().is_some_and(Failure::is_transient) {
        ctx.memory.gateways.transient_over(gw);
    }
    Ok(())
}

fn log_outcome(outcome: &Outcome) {
    match outcome {
        Outcome::Applied { reasons, sent, .. } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            tracing::info!(reasons = %why.join(", "), sent = %sent.join(", "), "gateway applied");
        }
        Outcome::ApplyFailed { failure, .. } => {
            tracing::warn!(error = %failure, "gateway apply failed")
        }
        Outcome::NameConflict(conflicts) => {
            tracing::warn!(conflicts = %conflicts.join("; "), "gateway name conflict: nothing applied")
        }
        Outcome::ConflictHold { managers } => {
            tracing::debug!(managers = %managers.join(", "), "gateway field conflict: take-backs spent, held until the window ends")
        }
        Outcome::Invalid(errors) => {
            tracing::debug!(%errors, "invalid gateway: nothing applied")
        }
        _ => {}
    }
    tracing::debug!(outcome = outcome.label(), "gateway reconciled");
}
