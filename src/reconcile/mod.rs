//! One reconcile of a `KuraInstance`, as a pipeline:
//!
//! recall → validate → pin storage → claims → render → observe → plan → rollout (apply, prune) → probe → status
//!
//! Only `rollout` (through `apply` and `prune`) and `status::write` talk to the
//! apiserver; `observe` reads reflector caches, `recall` this process's memory,
//! `claims` its index of who holds which host; validate, render, plan, probe
//! and status::compute are pure.

pub mod apply;
pub mod budget;
pub mod endpoint_check;
pub mod events;
pub mod observe;
pub mod plan;
pub mod probe;
pub mod prune;
mod rollout;
pub mod status;
pub mod storage;

pub use crate::stores::{self, labelled};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::Api;
use kube::runtime::controller::Action;

use self::apply::Failure;
use self::plan::{Plan, SETTLE, inputs_key, until};
use self::status::{Outcome, StatusInputs};
use crate::api::KuraInstance;
use crate::context::Context;
use crate::render::render;
use crate::validate::validate;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A transient failure not reported in status yet (see
    /// `RetryPolicy::transient_report_after`); retried after the transient backoff.
    #[error("transient: {failure}")]
    Transient { failure: Failure, failures: u32 },
    #[error("writing status: {source}")]
    Status {
        #[source]
        source: kube::Error,
        failures: u32,
    },
    #[error("the instance has no namespace or name")]
    Unnamed,
}

impl Error {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Transient { failure, .. } => match failure.stage {
                apply::Stage::Apply => "transient",
                apply::Stage::Prune => "prune",
            },
            Error::Status { .. } => "status",
            Error::Unnamed => "unnamed",
        }
    }

    /// Consecutive transient failures, for the error policy's backoff: the
    /// same count memory keeps (one count, not one per caller).
    pub fn failures(&self) -> u32 {
        match self {
            Error::Transient { failures, .. } | Error::Status { failures, .. } => *failures,
            Error::Unnamed => 1,
        }
    }
}

/// While waiting for activation, look again this often (watch events on the
/// workload and ingresses usually come sooner).
const ACTIVATION_RECHECK: Duration = Duration::from_secs(15);
/// While a child is being deleted, look again this often.
const TERMINATING_RECHECK: Duration = Duration::from_secs(5);
/// A waiting instance is woken when a slot frees (`budget::wake_next`); this
/// is the fallback.
const WAITING_RECHECK: Duration = Duration::from_secs(30);
/// After its admission is recorded, an instance applies on the next pass.
const ADMITTED_RECHECK: Duration = Duration::from_millis(100);
/// After joining the rollout queue, look again this soon: the queue of those
/// reconciled at the same moment has formed by then.
const JOIN_RECHECK: Duration = Duration::from_secs(2);

/// An instance admitted to a rollout left it (Ready again, or a newer change
/// superseded it): a slot of the budget is free.
fn left_the_budget(
    prev: &crate::api::KuraInstanceStatus,
    new: &crate::api::KuraInstanceStatus,
) -> bool {
    let admitted = |s: &crate::api::KuraInstanceStatus| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.state == crate::api::RolloutState::Admitted)
    };
    admitted(prev) && !admitted(new)
}

pub async fn reconcile(instance: Arc<KuraInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(name), Some(namespace)) = (
        instance.metadata.name.clone(),
        instance.metadata.namespace.clone(),
    ) else {
        return Err(Error::Unnamed);
    };
    let config = ctx.config();
    let now = Timestamp::now();
    let recall = ctx.memory.recall(&instance, SETTLE);

    let mut validated = validate(&instance, &config);
    let pending_storage = validated.as_mut().ok().and_then(|v| {
        let live = ctx.stores.live_claim(&v.namespace, &v.name);
        storage::pin(v, live.as_ref())
    });
    // A host another instance holds: like invalid input, nothing is applied
    // and nothing deleted (claims.rs). A paused instance does neither anyway,
    // and neither it nor an invalid one asks for a host (claims.rs).
    let mut host_conflict = match &validated {
        Ok(_) if !instance.spec.paused => ctx.stores.claims.decide(&instance, &config, now).err(),
        Ok(_) => None,
        Err(_) => {
            ctx.stores.claims.stand_down(&instance);
            None
        }
    };
    let desired = validated.as_ref().ok().map(|v| render(v, &config));
    let mut observed = observe::observe(
        &instance,
        recall.status.clone(),
        desired.as_ref(),
        &ctx.stores,
    );
    let key = desired
        .as_ref()
        .map(|d| inputs_key(&d.revision, observed.force_token.as_deref()));
    observed.just_applied = key.is_some() && recall.recently_applied == key;
    observed.budget = budget::view(
        &instance,
        &observed,
        // An instance that may apply nothing takes no slot of the budget.
        desired.as_ref().filter(|_| host_conflict.is_none()),
        &ctx.stores,
        &ctx.admissions,
        &config,
        now,
    );
    let decision = plan::plan(
        &observed,
        desired
            .as_ref()
            .ok_or_else(|| validated.as_ref().unwrap_err()),
        &ctx.policy,
        now,
    );

    let (outcome, requeue) = match decision {
        _ if host_conflict.is_some() => {
            let conflict = host_conflict.take().expect("just checked");
            // A reservation ends with no event to wake those waiting for it.
            let requeue = match conflict.ask_again_at() {
                Some(at) => until(at, now).min(ctx.resync),
                None => ctx.resync,
            };
            (Outcome::HostConflict(conflict), requeue)
        }
        Plan::Invalid(errors) => (Outcome::Invalid(errors), ctx.resync),
        Plan::Paused => (Outcome::Paused, ctx.resync),
        Plan::NameConflict(conflicts) => (Outcome::NameConflict(conflicts), ctx.resync),
        // The deletion of the child wakes this instance (an owned watch); this
        // is the fallback.
        Plan::ChildTerminating(objects) => (
            Outcome::ChildTerminating(objects),
            ctx.resync.min(TERMINATING_RECHECK),
        ),
        Plan::Backoff { at } => (Outcome::Waiting { stalled: false }, until(at, now)),
        Plan::Stalled { at } => (Outcome::Waiting { stalled: true }, until(at, now)),
        Plan::ConflictHold { at, managers } => (Outcome::ConflictHold { managers }, until(at, now)),
        Plan::Converged => (Outcome::Converged, ctx.resync),
        Plan::Settling => (Outcome::Converged, SETTLE),
        // Recorded first, applied on the pass that follows at once.
        Plan::Admit => (Outcome::Admitted, ADMITTED_RECHECK),
        Plan::Held(admission) => {
            // Joining the queue now: look again soon, the first in line may go.
            let joined = observed
                .status
                .rollout
                .as_ref()
                .is_some_and(|r| r.state == crate::api::RolloutState::Waiting);
            let again = if joined {
                WAITING_RECHECK
            } else {
                JOIN_RECHECK
            };
            (Outcome::Held(admission), again)
        }
        Plan::Apply {
            reasons,
            apply,
            prune,
            held,
            ..
        } => {
            let desired = desired
                .as_ref()
                .expect("Apply is planned only for a valid instance");
            let key = key.as_deref().unwrap_or_default();
            rollout::rollout(
                &ctx,
                &instance,
                &observed,
                desired,
                rollout::Steps {
                    reasons,
                    apply,
                    prune,
                    key,
                    held,
                },
                now,
            )
            .await?
        }
    };

    let activation = match (&outcome, &desired) {
        (Outcome::Held(_) | Outcome::Applied { held: Some(_), .. }, Some(d)) => {
            probe::held(d, &ctx.stores)
        }
        (Outcome::Applied { pruned, .. }, Some(d)) if pruned.failure.is_none() => {
            Some(probe::probe(d, &ctx.stores, true))
        }
        (Outcome::Converged, Some(d)) => Some(probe::probe(
            d,
            &ctx.stores,
            observed.status.phase != Some(crate::api::Phase::Ready),
        )),
        _ => None,
    };
    // Issue 23: active only once the endpoint answers, where the region says so.
    let activation = match (activation, &desired) {
        (Some(a), Some(d)) => Some(
            endpoint_check::confirm(
                a,
                d,
                &ctx.stores,
                config.regions.get(&instance.spec.region),
                &instance.spec.account,
                &ctx.endpoint,
            )
            .await,
        ),
        (a, _) => a,
    };
    let new_status = status::compute(&StatusInputs {
        observed: &observed,
        desired: desired.as_ref(),
        gateway: validated.as_ref().ok().map(|v| &v.gateway),
        outcome: &outcome,
        activation: activation.as_ref(),
        pending_storage: pending_storage.as_ref(),
        rollout: status::RolloutInputs {
            origin: budget::origin(&observed),
            fleet_revision: &config.fleet_revision(),
            deadline: config.rollout.deadline(),
            uncounted: observed.budget.budgeted
                && matches!(
                    observed.budget.admission,
                    Some(crate::rollout::Admission::Admit { counted: false })
                ),
        },
        policy: &ctx.policy,
        now,
    });
    log_outcome(&namespace, &name, &outcome, &new_status);
    ctx.metrics.record(&outcome, new_status.phase);
    let mut events = events::events_for(&observed.status, &new_status, &outcome);
    if !observed.ignored_inventory.is_empty() {
        events.push(events::inventory_ignored(&observed.ignored_inventory));
    }
    // Ignored entries are still in the live status: the write removes them.
    if !observed.ignored_inventory.is_empty()
        || status::worth_writing(&observed.status, &new_status, recall.since_status_written)
    {
        let api: Api<KuraInstance> = Api::namespaced(ctx.client.clone(), &namespace);
        let written = status::write(&api, &name, &new_status).await;
        ctx.metrics.status_write(written.as_ref().err());
        match written {
            Ok(rv) => ctx.memory.status_written(&instance, rv, &new_status),
            Err(source) => {
                events::publish(&ctx, &instance, vec![events::status_write_failed(&source)]);
                let streak = ctx.memory.transient_failure(&instance, "status", now);
                return Err(Error::Status {
                    source,
                    failures: streak.failures,
                });
            }
        }
        tracing::debug!(%namespace, instance = %name, changed = ?status::changes(&observed.status, &new_status), "status written");
    }
    events::publish(&ctx, &instance, events);
    if left_the_budget(&observed.status, &new_status) {
        budget::wake_next(&ctx, &config, now);
    }
    if !outcome.failure().is_some_and(Failure::is_transient) {
        ctx.memory.transient_over(&instance);
    }
    let requeue = match activation {
        Some(probe::Activation::Waiting { .. }) => requeue.min(ACTIVATION_RECHECK),
        _ => requeue,
    };
    Ok(Action::requeue(requeue))
}

fn log_outcome(
    namespace: &str,
    name: &str,
    outcome: &Outcome,
    status: &crate::api::KuraInstanceStatus,
) {
    match outcome {
        Outcome::Applied { reasons, sent, .. } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            tracing::info!(%namespace, instance = %name, revision = ?status.applied_revision_short, reasons = %why.join(", "), sent = %sent.join(", "), "applied");
        }
        Outcome::ApplyFailed { failure, .. } => {
            tracing::warn!(%namespace, instance = %name, error = %failure, "apply failed")
        }
        Outcome::NameConflict(conflicts) => {
            tracing::warn!(%namespace, instance = %name, conflicts = %conflicts.join("; "), "name conflict: nothing applied")
        }
        Outcome::ChildTerminating(objects) => {
            tracing::info!(%namespace, instance = %name, objects = %objects.join("; "), "waiting for children being deleted: nothing applied")
        }
        Outcome::HostConflict(conflict) => {
            tracing::warn!(%namespace, instance = %name, %conflict, "host conflict: nothing applied")
        }
        _ => {}
    }
    if let Some(failure) = outcome.failure().filter(|f| f.stage == apply::Stage::Prune) {
        tracing::warn!(%namespace, instance = %name, error = %failure, "prune failed");
    }
    tracing::debug!(%namespace, instance = %name, outcome = outcome.label(), "reconciled");
}
