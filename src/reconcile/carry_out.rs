//! Carrying out a `Plan::Apply`: apply what plan chose, prune what is stale,
//! and turn what happened into an `Outcome` and the time to look again.
//!
//! Transient failures (throttling, a 5xx from a webhook whose service is down,
//! the apiserver out of reach) are retried quickly and quietly at first; once
//! the same inputs have failed transiently for `RetryPolicy::transient_report_after`
//! they are reported (Ready False naming the object, verb and message; an
//! Event; a metric) while the quick retries go on. Other failures are reported
//! at once and retried under the budget. Each retry sends only what still
//! differs (plan's choice), never the whole set again.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use tracing::Instrument;

use super::apply::{self, For};
use super::prune::{self, PruneFor};
use super::{ACTIVATION_RECHECK, name_wait};
use crate::context::Context;
use crate::pass::Error;
use kura_core::api::{InventoryEntry, KuraInstance};
use kura_core::outcome::Outcome;
use kura_core::outcome::TransientStreak;
use kura_core::plan::{ApplyOp, ApplyReason, Observed, failures_for};
use kura_core::render::{Desired, ObjectId};

pub struct Steps<'a> {
    pub reasons: Vec<ApplyReason>,
    pub apply: Vec<ApplyOp>,
    pub prune: Vec<ObjectId>,
    /// The inputs key (revision and force token) the failures belong to.
    pub key: &'a str,
    /// The revision waits for the rollout budget (only what restarts no pod
    /// is among `apply`).
    pub held: Option<kura_core::rollout::Admission>,
}

pub async fn carry_out(
    ctx: &Context,
    instance: &KuraInstance,
    observed: &Observed,
    desired: &Desired,
    steps: Steps<'_>,
    now: Timestamp,
) -> Result<(Outcome, Duration), Error> {
    let uid = instance.metadata.uid.as_deref().unwrap_or_default();
    let name = instance.metadata.name.as_deref().unwrap_or_default();
    let namespace = instance.metadata.namespace.as_deref().unwrap_or_default();
    let Steps {
        reasons,
        apply: ops,
        prune: stale,
        key,
        held,
    } = steps;
    let fingerprints =
        match apply::apply(&ctx.client, &ctx.stores, desired, &ops, &For { uid, name }).await {
            Ok(fingerprints) => fingerprints,
            Err(failure) if failure.is_transient() => {
                let streak = quiet_or_report(ctx, instance, key, &failure, now)?;
                let delay = transient_delay(ctx, instance, &streak);
                let outcome = Outcome::ApplyFailed {
                    reasons,
                    failure,
                    streak: Some(streak),
                };
                return Ok((outcome, delay));
            }
            Err(failure) => {
                return Ok(rejected(
                    ctx,
                    instance,
                    (observed, desired),
                    key,
                    reasons,
                    failure,
                ));
            }
        };
    ctx.memory.instances.applied(instance, key);
    let config = ctx.config();
    let target = PruneFor {
        uid,
        name,
        namespace,
    };
    let pruned = prune::prune(&ctx.client, &ctx.stores, &target, &stale, &config)
        .instrument(tracing::info_span!("prune", objects = stale.len()))
        .await;
    ctx.settings.faults.after_apply();
    let inventory = inventory_after(observed, desired, &fingerprints, &pruned.remaining);
    let sent = ops.iter().map(|op| op.id.to_string()).collect();
    let (streak, delay) = match &pruned.failure {
        None => (None, ACTIVATION_RECHECK),
        Some(f) if f.is_transient() => {
            let streak = quiet_or_report(ctx, instance, key, f, now)?;
            let delay = transient_delay(ctx, instance, &streak);
            (Some(streak), delay)
        }
        Some(_) => (None, budgeted_delay(ctx, observed, key)),
    };
    let outcome = Outcome::Applied {
        reasons,
        sent,
        inventory,
        pruned,
        streak,
        held,
    };
    Ok((outcome, delay))
}

/// An apply refused for good (not transient): the wait before the next
/// attempt, by the retry budget, or (a name conflict) stalled until the names
/// are free (`name_wait`).
fn rejected(
    ctx: &Context,
    instance: &KuraInstance,
    (observed, desired): (&Observed, &Desired),
    key: &str,
    reasons: Vec<ApplyReason>,
    failure: kura_core::outcome::Failure,
) -> (Outcome, Duration) {
    let delay = match failure.class {
        kura_core::outcome::FailureClass::NameConflict => {
            let waiter = name_wait::instance_waiter(instance);
            name_wait::stall_on_names(ctx, desired, &observed.children, &waiter)
        }
        _ => budgeted_delay(ctx, observed, key),
    };
    let outcome = Outcome::ApplyFailed {
        reasons,
        failure,
        streak: None,
    };
    (outcome, delay)
}

/// Counts a transient failure; until the streak is old enough to report, the
/// reconcile ends here with an error (no status write) and is retried quickly.
fn quiet_or_report(
    ctx: &Context,
    instance: &KuraInstance,
    key: &str,
    failure: &kura_core::outcome::Failure,
    now: Timestamp,
) -> Result<TransientStreak, Error> {
    let streak = ctx.memory.instances.transient_failure(instance, key, now);
    if streak.age() < ctx.settings.policy.transient_report_after {
        return Err(Error::Transient {
            failure: failure.clone(),
            failures: streak.failures,
        });
    }
    Ok(streak)
}

fn transient_delay(ctx: &Context, instance: &KuraInstance, streak: &TransientStreak) -> Duration {
    ctx.settings.policy.transient_backoff(
        streak.failures,
        kura_core::time::jitter(instance, streak.failures),
    )
}

/// The wait after one more failure of these inputs: the same count status records.
fn budgeted_delay(ctx: &Context, observed: &Observed, key: &str) -> Duration {
    let failures = failures_for(&observed.status, key).saturating_add(1);
    ctx.settings.policy.wait_after(failures).0
}

/// The inventory after an apply: every desired object with the fingerprint of
/// the fields we own (from the apply's answer for what was sent; otherwise
/// what the cache shows now, which matched the record or it would have been
/// sent), plus every stale object still there because its deletion failed.
fn inventory_after(
    observed: &Observed,
    desired: &Desired,
    fingerprints: &BTreeMap<ObjectId, Option<String>>,
    remaining: &[ObjectId],
) -> Vec<InventoryEntry> {
    let previous = |id: &ObjectId| {
        observed
            .status
            .inventory
            .iter()
            .find(|e| ObjectId::from_inventory(e).as_ref() == Some(id))
    };
    let mut inventory = kura_core::plan::drift::inventory_after(
        &desired.objects,
        &observed.children,
        &observed.status.inventory,
        fingerprints,
    );
    inventory.extend(remaining.iter().map(|id| {
        previous(id)
            .cloned()
            .unwrap_or_else(|| id.inventory_entry(String::new(), None))
    }));
    inventory
}
