//! One reconcile of a `KuraGateway`, in the instance controller's shape:
//!
//! migrate → recall → validate → render → observe → users → plan
//!   → apply (and release) | collect → status → events
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
pub mod plan;
pub mod status;
mod validate;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use self::plan::Plan;
use self::status::{Outcome, StatusInputs};
use crate::api::KuraGateway;
use crate::context::Context;
use crate::keys::{GATEWAY_FIELD_MANAGER, LEGACY_GATEWAY_FINALIZER};
use crate::reconcile::apply::{self, Failure, FailureClass};
use crate::reconcile::plan::{ApplyOp, ApplyReason, SETTLE, drift, inputs_key, until};
use crate::reconcile::{events, status as shared_status};
use crate::render::gateway::render_gateway;
use crate::render::{Desired, ObjectId};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transient apply failure not reported in status yet (see
    /// `RetryPolicy::transient_report_after`).
    #[error("transient: {failure}")]
    Transient { failure: Failure, failures: u32 },
    /// Reading who uses the gateway, or deleting it, failed.
    #[error("collecting: {failure}")]
    Collect { failure: Failure, failures: u32 },
    /// Removing an earlier release's finalizer failed.
    #[error("migrating: {failure}")]
    Migrate { failure: Failure, failures: u32 },
    #[error("writing status: {source}")]
    Status {
        #[source]
        source: kube::Error,
        failures: u32,
    },
    #[error("the gateway has no namespace or name")]
    Unnamed,
}

impl Error {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Transient { .. } => "transient",
            Error::Collect { .. } => "collect",
            Error::Migrate { .. } => "migrate",
            Error::Status { .. } => "status",
            Error::Unnamed => "unnamed",
        }
    }

    /// Consecutive failures, for the error policy's backoff.
    pub fn failures(&self) -> u32 {
        match self {
            Error::Transient { failures, .. }
            | Error::Collect { failures, .. }
            | Error::Migrate { failures, .. }
            | Error::Status { failures, .. } => *failures,
            Error::Unnamed => 1,
        }
    }

    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Error::Transient { failure, .. }
            | Error::Collect { failure, .. }
            | Error::Migrate { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

pub async fn reconcile(gw: Arc<KuraGateway>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(name), Some(namespace)) = (gw.metadata.name.clone(), gw.metadata.namespace.clone())
    else {
        return Err(Error::Unnamed);
    };
    let now = Timestamp::now();
    let streak = |step: &str| {
        ctx.gateway_memory
            .transient_failure(&gw, step, now)
            .failures
    };
    match migrate::drop_legacy_finalizer(&ctx.client, &gw).await {
        Ok(true) => events::publish(
            &ctx,
            &gw,
            vec![event(
                EventType::Normal,
                "FinalizerRemoved",
                format!(
                    "removed {LEGACY_GATEWAY_FINALIZER} (of an earlier release): deleting a namespace no longer waits for the operator"
                ),
            )],
        ),
        Ok(false) => {}
        Err(failure) => {
            let failures = streak("migrate");
            return Err(Error::Migrate { failure, failures });
        }
    }
    if gw.metadata.deletion_timestamp.is_some() {
        ctx.metrics.count_gateway("deleting");
        return Ok(Action::await_change());
    }
    let config = ctx.config();
    let recall = ctx.gateway_memory.recall(&gw, SETTLE);
    let validated = validate::validate(&gw);
    let desired = validated.is_ok().then(|| render_gateway(&gw));
    let mut observed = observe::observe(&gw, recall.status.clone(), desired.as_ref(), &ctx.stores);
    let key = desired.as_ref().map(|d| inputs_key(&d.revision, None));
    observed.just_applied = key.is_some() && recall.recently_applied == key;
    // The caches first; a gateway about to be collected is asked about live.
    let user = match collect::cached_user(&gw, &ctx.stores, &config) {
        Some(user) => Some(user),
        None if observed.managed => collect::live_user(&ctx.client, &gw, &config)
            .await
            .map_err(|failure| Error::Collect {
                failure,
                failures: streak("collect"),
            })?,
        None => None,
    };
    let decision = plan::plan(
        &observed,
        desired
            .as_ref()
            .ok_or_else(|| validated.as_ref().unwrap_err()),
        user.as_deref(),
        &ctx.policy,
        now,
    );
    let (outcome, requeue) = match decision {
        Plan::Collect => {
            collect::collect(&ctx, &gw)
                .await
                .map_err(|failure| Error::Collect {
                    failure,
                    failures: streak("collect"),
                })?;
            ctx.metrics.count_gateway("collected");
            return Ok(Action::await_change());
        }
        Plan::Invalid(errors) => (Outcome::Invalid(errors), ctx.resync),
        // Retried when the other object changes or goes (the watches map it here).
        Plan::NameConflict(conflicts) => (Outcome::NameConflict(conflicts), ctx.resync),
        Plan::Backoff { at } | Plan::Stalled { at } => (Outcome::Waiting, until(at, now)),
        Plan::ConflictHold { at, managers } => (Outcome::ConflictHold { managers }, until(at, now)),
        Plan::Converged => (Outcome::Converged, ctx.resync),
        Plan::Settling => (Outcome::Converged, SETTLE),
        Plan::Apply {
            reasons,
            apply,
            release,
        } => {
            let desired = desired
                .as_ref()
                .expect("Apply is planned only for a valid gateway");
            let key = key.as_deref().unwrap_or_default();
            let steps = Steps {
                reasons,
                apply,
                release,
                key,
            };
            rollout(&ctx, &gw, &observed, desired, steps, now).await?
        }
    };
    let new_status = status::compute(&StatusInputs {
        observed: &observed,
        desired: desired.as_ref(),
        outcome: &outcome,
        user: user.as_deref(),
        policy: &ctx.policy,
        now,
    });
    log_outcome(&namespace, &name, &outcome);
    ctx.metrics.count_gateway(outcome.label());
    if let Some(failure) = outcome.failure() {
        ctx.metrics.record_failure(failure);
    }
    let news = status::events_for(&observed.status, &new_status, &outcome);
    if shared_status::worth_writing(&observed.status, &new_status, recall.since_status_written) {
        let api: Api<KuraGateway> = Api::namespaced(ctx.client.clone(), &namespace);
        let written =
            shared_status::write_status(&api, &name, &new_status, GATEWAY_FIELD_MANAGER).await;
        ctx.metrics.status_write(written.as_ref().err());
        match written {
            Ok(rv) => ctx.gateway_memory.status_written(&gw, rv, &new_status),
            Err(source) => {
                events::publish(
                    &ctx,
                    &gw,
                    vec![crate::reconcile::events::status_write_failed(&source)],
                );
                let failures = streak("status");
                return Err(Error::Status { source, failures });
            }
        }
    }
    events::publish(&ctx, &gw, news);
    if !outcome.failure().is_some_and(Failure::is_transient) {
        ctx.gateway_memory.transient_over(&gw);
    }
    Ok(Action::requeue(requeue))
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
async fn rollout(
    ctx: &Context,
    gw: &KuraGateway,
    observed: &observe::Observed,
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
    let applied =
        match apply::apply_as(&ctx.client, desired, &ops, &target, GATEWAY_FIELD_MANAGER).await {
            Ok(fingerprints) => migrate::release_old_manager(&ctx.client, &release)
                .await
                .map(|released| (fingerprints, released)),
            Err(failure) => Err(failure),
        };
    match applied {
        Ok((fingerprints, released)) => {
            ctx.gateway_memory.applied(gw, key);
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
            Ok((outcome, ctx.resync))
        }
        Err(failure) if failure.is_transient() => {
            let streak = ctx.gateway_memory.transient_failure(gw, key, now);
            if streak.age() < ctx.policy.transient_report_after {
                return Err(Error::Transient {
                    failure,
                    failures: streak.failures,
                });
            }
            let jitter = crate::time::jitter(gw, streak.failures);
            let delay = ctx.policy.transient_backoff(streak.failures, jitter);
            Ok((Outcome::ApplyFailed { reasons, failure }, delay))
        }
        Err(failure) => {
            let delay = match failure.class {
                // Retried when the other object changes or goes.
                FailureClass::NameConflict => ctx.resync,
                _ => {
                    let failures = plan::failures_for(&observed.status, key).saturating_add(1);
                    ctx.policy.wait_after(failures).0
                }
            };
            Ok((Outcome::ApplyFailed { reasons, failure }, delay))
        }
    }
}

fn event(type_: EventType, reason: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    }
}

fn log_outcome(namespace: &str, name: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Applied { reasons, sent, .. } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            tracing::info!(%namespace, gateway = %name, reasons = %why.join(", "), sent = %sent.join(", "), "gateway applied");
        }
        Outcome::ApplyFailed { failure, .. } => {
            tracing::warn!(%namespace, gateway = %name, error = %failure, "gateway apply failed")
        }
        Outcome::NameConflict(conflicts) => {
            tracing::warn!(%namespace, gateway = %name, conflicts = %conflicts.join("; "), "gateway name conflict: nothing applied")
        }
        Outcome::ConflictHold { managers } => {
            tracing::debug!(%namespace, gateway = %name, managers = %managers.join(", "), "gateway field conflict: take-backs spent, held until the window ends")
        }
        Outcome::Invalid(errors) => {
            tracing::debug!(%namespace, gateway = %name, %errors, "invalid gateway: nothing applied")
        }
        _ => {}
    }
    tracing::debug!(%namespace, gateway = %name, outcome = outcome.label(), "gateway reconciled");
}
