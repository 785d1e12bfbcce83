//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! observe → validate → render → plan → apply → prune → probe → status
//!
//! Only `apply`, `prune` and `status::write` talk to the apiserver; `observe`
//! reads reflector caches; validate, render, plan, probe and status::compute are
//! pure.

pub mod apply;
pub mod events;
pub mod observe;
pub mod plan;
pub mod probe;
pub mod prune;
pub mod status;
pub mod stores;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::Api;
use kube::runtime::controller::Action;

use self::plan::Plan;
use self::status::{Outcome, StatusInputs};
use crate::api::KuraInstance;
use crate::context::Context;
use crate::render::render;
use crate::validate::validate;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("pruning: {0}")]
    Prune(#[source] kube::Error),
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    #[error("the instance has no namespace or name")]
    Unnamed,
    #[error("transient: {0}")]
    Transient(#[source] apply::ApplyError),
}

impl Error {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Prune(_) => "prune",
            Error::Status(_) => "status",
            Error::Unnamed => "unnamed",
            Error::Transient(_) => "transient",
        }
    }
}

/// While waiting for activation, look again this often (watch events on the
/// workload and ingresses usually come sooner).
const ACTIVATION_RECHECK: Duration = Duration::from_secs(15);

pub async fn reconcile(instance: Arc<KuraInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(name), Some(namespace)) = (
        instance.metadata.name.clone(),
        instance.metadata.namespace.clone(),
    ) else {
        return Err(Error::Unnamed);
    };
    let cached_rv = instance.metadata.resource_version.clone();
    let instance = ctx.with_own_status(instance);
    tracing::trace!(%namespace, instance = %name, ?cached_rv, has_status = instance.status.is_some(), "reconcile start");
    let config = ctx.config();
    let now = Timestamp::now();

    let validated = validate(&instance, &config);
    let desired = validated.as_ref().ok().map(|v| render(v, &config));
    let mut observed = observe::observe(&instance, desired.as_ref(), &ctx.stores);
    observed.just_applied = desired
        .as_ref()
        .is_some_and(|d| ctx.just_applied(&instance, &d.revision, observed.force_token.as_deref()));
    let decision = plan::plan(
        &observed,
        desired
            .as_ref()
            .ok_or_else(|| validated.as_ref().unwrap_err()),
        &ctx.policy,
        now,
    );

    let (outcome, requeue) = match decision {
        Plan::Invalid(errors) => (Outcome::Invalid(errors), ctx.resync),
        Plan::Paused => (Outcome::Paused, ctx.resync),
        Plan::Backoff { at } => (Outcome::Waiting { stalled: false }, until(at, now)),
        Plan::Stalled { at } => (Outcome::Waiting { stalled: true }, until(at, now)),
        Plan::ConflictHold { at, managers } => (Outcome::ConflictHold { managers }, until(at, now)),
        Plan::Converged => (Outcome::Converged, ctx.resync),
        Plan::Settling => (Outcome::Converged, plan::SETTLE),
        Plan::Apply { reasons, prune, .. } => {
            let desired = desired
                .as_ref()
                .expect("Apply is planned only for a valid instance");
            match apply::apply(&ctx.client, desired).await {
                Ok(inventory) => {
                    ctx.remember_apply(&instance, &desired.revision, observed.force_token.clone());
                    let pruned = prune::prune(&ctx.client, &ctx.stores, &name, &prune, &config)
                        .await
                        .map_err(Error::Prune)?;
                    ctx.faults.after_apply();
                    (
                        Outcome::Applied {
                            reasons,
                            inventory,
                            pruned,
                        },
                        ACTIVATION_RECHECK,
                    )
                }
                Err(e) if e.is_transient() => return Err(Error::Transient(e)),
                Err(e) => {
                    let failures = observed.status.retry.as_ref().map_or(0, |r| r.failures) + 1;
                    (
                        Outcome::ApplyFailed {
                            reasons,
                            error: e.to_string(),
                        },
                        ctx.policy.backoff(failures),
                    )
                }
            }
        }
    };

    let activation = match (&outcome, &desired) {
        (Outcome::Applied { .. } | Outcome::Converged, Some(d)) => {
            let (sts, ingresses) = probe::gather(d, &ctx.stores);
            let rolling_out = matches!(outcome, Outcome::Applied { .. })
                || observed.status.phase != Some(crate::api::Phase::Ready);
            Some(probe::activation(
                d,
                sts.as_deref(),
                &ingresses,
                rolling_out,
            ))
        }
        _ => None,
    };
    let new_status = status::compute(&StatusInputs {
        observed: &observed,
        desired: desired.as_ref(),
        gateway: validated.as_ref().ok().map(|v| &v.gateway),
        outcome: &outcome,
        activation: activation.as_ref(),
        policy: &ctx.policy,
        now,
    });
    match &outcome {
        Outcome::Applied { reasons, .. } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            tracing::info!(%namespace, instance = %name, revision = ?new_status.applied_revision_short, reasons = %why.join(", "), "applied");
        }
        Outcome::ApplyFailed { error, .. } => {
            tracing::warn!(%namespace, instance = %name, %error, "apply failed")
        }
        _ => {}
    }
    tracing::debug!(%namespace, instance = %name, outcome = outcome.label(), "reconciled");
    ctx.metrics.record(&outcome, new_status.phase);
    let events = events::events_for(&observed.status, &new_status, &outcome);
    if status::worth_writing(
        &observed.status,
        &new_status,
        ctx.since_status_written(&instance),
    ) {
        let api: Api<KuraInstance> = Api::namespaced(ctx.client.clone(), &namespace);
        let rv = status::write(&api, &name, &new_status)
            .await
            .map_err(Error::Status)?;
        ctx.remember_status(&instance, rv, &new_status);
        tracing::debug!(%namespace, instance = %name, changed = ?status::changes(&observed.status, &new_status), "status written");
    }
    events::publish(&ctx, &instance, events);
    ctx.transient_success(&instance);
    let requeue = match activation {
        Some(probe::Activation::Waiting { .. }) => requeue.min(ACTIVATION_RECHECK),
        _ => requeue,
    };
    Ok(Action::requeue(requeue))
}

fn until(at: Timestamp, now: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d)
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}
