//! One reconcile of a `KuraGateway`, in the instance controller's shape:
//!
//! migrate → recall → snapshot (render → observe → users) → judge (plan,
//!   effects) → execute the effects: apply (and release) | collect → status →
//!   write (and events)
//!
//! Only `migrate`, `collect` (live reads before a deletion, the deletion, the
//! sweep of leftover classes), `apply` and the status write talk to the
//! apiserver; validate, render, observe (caches), plan and status::compute
//! are pure, and the clock is read once, here.
//!
//! A gateway carries no finalizer, so deleting its namespace never waits for
//! the operator: its Deployment and Service go with it (owner references), and
//! its cluster-scoped IngressClass, which nothing can own, is collected by the
//! sweep (`collect::sweep`) once no gateway has the uid the class carries.

pub mod collect;
mod migrate;
pub mod observe;
pub mod snapshot;
use kura_core::gateway::{plan, status};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::Event;
use tracing::Instrument;

use self::plan::Plan;
use self::status::{Outcome, StatusInputs};
use crate::context::Context;
use crate::memory::Recall;
use crate::pass::Error;
use crate::reconcile::apply::{self};
use crate::reconcile::{events, name_wait, status as shared_status};
use kura_core::api::{KuraGateway, KuraGatewayStatus};
use kura_core::judge::Effect;
use kura_core::judge::gateway::GatewayDecision;
use kura_core::keys::GATEWAY_FIELD_MANAGER;
use kura_core::outcome::Failure;
use kura_core::outcome::FailureClass;
use kura_core::plan::{ApplyOp, ApplyReason, SETTLE, drift, until};
use kura_core::render::hash::short;
use kura_core::render::{Desired, ObjectId};

/// The span of one reconcile of `gw`, as the instance's (`reconcile::span`):
/// a trace of its own, the revision recorded once decided.
pub fn span(gw: &KuraGateway) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "reconcile_gateway",
        namespace = gw.metadata.namespace.as_deref().unwrap_or_default(),
        gateway = gw.metadata.name.as_deref().unwrap_or_default(),
        revision = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    crate::traces::record_trace_id(&span);
    crate::traces::name_object(
        &span,
        "kura.gateway.name",
        gw.metadata.namespace.as_deref().unwrap_or_default(),
        gw.metadata.name.as_deref().unwrap_or_default(),
    );
    span
}

/// One pass for one gateway: migrate → read and judge → execute → status → write,
/// inside `span` ([`span`]).
pub async fn reconcile(
    gw: Arc<KuraGateway>,
    ctx: Arc<Context>,
    span: &tracing::Span,
) -> Result<Action, Error> {
    if gw.metadata.name.is_none() || gw.metadata.namespace.is_none() {
        return Err(Error::Unnamed);
    }
    let now = Timestamp::now();
    migrate(&ctx, &gw, now).instrument(span.clone()).await?;
    if gw.metadata.deletion_timestamp.is_some() {
        ctx.report.metrics.count_gateway("deleting");
        return Ok(Action::await_change());
    }
    let recall = ctx.memory.gateways.recall(&gw, SETTLE);
    let decision = read_and_judge(&ctx, &gw, &recall, now)
        .instrument(tracing::info_span!(parent: span, "decide"))
        .await?;
    let revision = decision.desired().map(|d| short(&d.revision));
    span.record("revision", revision.unwrap_or_default().as_str());
    async {
        let Some((outcome, requeue)) = execute(&ctx, &gw, &decision, now).await? else {
            ctx.report.metrics.count_gateway("collected");
            return Ok(Action::await_change());
        };
        let new_status = status::compute(&StatusInputs {
            observed: &decision.observed,
            desired: decision.desired(),
            outcome: &outcome,
            user: decision.user.as_deref(),
            policy: &ctx.settings.policy,
            now,
        });
        log_outcome(&outcome);
        ctx.report.metrics.count_gateway(outcome.label());
        if let Some(failure) = outcome.failure() {
            ctx.report.metrics.record_failure(failure);
        }
        write(
            &ctx,
            &gw,
            &decision.observed,
            &new_status,
            &outcome,
            &recall,
            now,
        )
        .await?;
        Ok(Action::requeue(requeue))
    }
    .instrument(span.clone())
    .await
}

/// Removes an earlier release's finalizer, once.
async fn migrate(ctx: &Context, gw: &Arc<KuraGateway>, now: Timestamp) -> Result<(), Error> {
    match migrate::drop_legacy_finalizer(&ctx.client, gw).await {
        Ok(true) => events::publish(ctx, gw, vec![events::event(status::finalizer_removed())]),
        Ok(false) => {}
        Err(failure) => {
            let failures = ctx
                .memory
                .gateways
                .transient_failure(gw, "migrate", now)
                .failures;
            return Err(Error::Migrate { failure, failures });
        }
    }
    Ok(())
}

/// The decision; a gateway about to be collected is asked about live first.
async fn read_and_judge(
    ctx: &Context,
    gw: &KuraGateway,
    recall: &Recall<KuraGatewayStatus>,
    now: Timestamp,
) -> Result<GatewayDecision, Error> {
    let config = ctx.config();
    let mut inputs = snapshot::Inputs {
        gw,
        config: &config,
        roles: &ctx.settings.gateway_roles,
        stores: &ctx.stores,
        status: recall.status.clone(),
        recently_applied: recall.recently_applied.as_deref(),
        live_user: None,
        policy: &ctx.settings.policy,
        now,
    };
    let decision = snapshot::decide_from(&inputs);
    if !decision.asks_live_user() {
        return Ok(decision);
    }
    let user = collect::live_user(&ctx.client, gw, &config)
        .await
        .map_err(|failure| collect_failed(ctx, gw, failure, now))?;
    inputs.live_user = Some(user);
    Ok(snapshot::decide_from(&inputs))
}

fn collect_failed(ctx: &Context, gw: &KuraGateway, failure: Failure, now: Timestamp) -> Error {
    let failures = ctx
        .memory
        .gateways
        .transient_failure(gw, "collect", now)
        .failures;
    Error::Collect { failure, failures }
}

/// Carries out the plan: what happened and when to look again, or `None`
/// when the gateway was collected (deleted).
async fn execute(
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

/// Writes the status when it is worth a write, then publishes the Events.
async fn write(
    ctx: &Context,
    gw: &Arc<KuraGateway>,
    observed: &kura_core::gateway::observed::Observed,
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

struct Steps<'a> {
    reasons: Vec<ApplyReason>,
    apply: Vec<ApplyOp>,
    release: Vec<ObjectId>,
    /// The inputs key (the revision) failures belong to.
    key: &'a str,
}

/// Applies what plan chose under the gateway's field manager, then releases
/// what the instances' manager still holds of children of an earlier release.
async fn carry_out(
    ctx: &Context,
    gw: &KuraGateway,
    observed: &kura_core::gateway::observed::Observed,
    desired: &Desired,
    steps: Steps<'_>,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let Steps {
        reasons,
        apply: ops,
        release,
        key,
    } = steps;
    let target = apply::For {
        uid: gw.metadata.uid.as_deref().unwrap_or_default(),
        name: gw.metadata.name.as_deref().unwrap_or_default(),
    };
    let applied = match apply::apply_as(
        &ctx.client,
        &ctx.stores,
        desired,
        &ops,
        &target,
        GATEWAY_FIELD_MANAGER,
    )
    .await
    {
        Ok(fingerprints) => migrate::release_old_manager(&ctx.client, &release)
            .await
            .map(|released| (fingerprints, released)),
        Err(failure) => Err(failure),
    };
    match applied {
        Ok((fingerprints, released)) => {
            ctx.memory.gateways.applied(gw, key);
            let inventory = drift::inventory_after(
                &desired.objects,
                &observed.children,
                &observed.status.inventory,
                &fingerprints,
            );
            let sent = ops.iter().map(|op| op.id.to_string()).collect();
            let outcome = Outcome::Applied {
                reasons,
                sent,
                released,
                inventory,
            };
            Ok((outcome, ctx.settings.resync))
        }
        Err(failure) => failed(ctx, gw, (observed, desired), key, reasons, failure, now),
    }
}

/// A failed apply or release: a transient one quietly retried until it is
/// old enough to report, a name conflict stalled at once until its names are
/// free (`reconcile::name_wait`, as an instance is), any other under the
/// retry budget.
fn failed(
    ctx: &Context,
    gw: &KuraGateway,
    (observed, desired): (&kura_core::gateway::observed::Observed, &Desired),
    key: &str,
    reasons: Vec<ApplyReason>,
    failure: Failure,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let delay = if failure.is_transient() {
        let streak = ctx.memory.gateways.transient_failure(gw, key, now);
        if streak.age() < ctx.settings.policy.transient_report_after {
            return Err(Error::Transient {
                failure,
                failures: streak.failures,
            });
        }
        let jitter = kura_core::time::jitter(gw, streak.failures);
        ctx.settings
            .policy
            .transient_backoff(streak.failures, jitter)
    } else if failure.class == FailureClass::NameConflict {
        let waiter = name_wait::gateway_waiter(gw);
        name_wait::stall_on_names(ctx, desired, &observed.children, &waiter)
    } else {
        let failures = plan::failures_for(&observed.status, key).saturating_add(1);
        ctx.settings.policy.wait_after(failures).0
    };
    Ok((Outcome::ApplyFailed { reasons, failure }, delay))
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
