//! The fleet budget as it reads instances: who originated the desired
//! revision, whether it restarts pods the budget spares, an instance's place
//! in the queue, its window, and the fleet of the instances given, for the
//! configuration accepted. `rollout` has the budget's rules over members;
//! the operator reads the caches and memory into these
//! (`reconcile::budget`), and so does the preview.

use std::sync::Arc;

use jiff::Timestamp;

use crate::accepted::Accepted;
use crate::api::KuraInstance;
use crate::api::conditions::{READY, is_true};
use crate::config::OperatorConfig;
use crate::plan::Observed;
use crate::render::Desired;
use crate::rollout::{self, Admission, Fleet, Gate, Member, OrderKey, Origin};

/// Who originated the desired revision: the user when what the spec asks to
/// be rendered changed since the last apply (`render::hash::spec_hash`: an edit of
/// a window or a pause is no such change), or a force token is new; the
/// operator otherwise. An instance applied before the hash was recorded
/// compares the spec's generation since the last apply (or status write).
pub fn origin(observed: &Observed) -> Origin {
    let status = &observed.status;
    let forced =
        observed.force_token.is_some() && observed.force_token != status.last_handled_reapply_at;
    if let (false, Some(applied), Some(now)) =
        (forced, &status.applied_spec_hash, &observed.spec_hash)
    {
        return if applied == now {
            Origin::Operator
        } else {
            Origin::User
        };
    }
    let since = status.applied_generation.or(status.observed_generation);
    if forced || since.is_none() || since != observed.generation {
        Origin::User
    } else {
        Origin::Operator
    }
}

/// Whether the budget applies: an operator-originated revision that changes
/// the pod template of a running StatefulSet. Anything else restarts no pod
/// the budget could spare, or is the user's and never waits.
pub fn budgeted(observed: &Observed, desired: &Desired) -> bool {
    origin(observed) == Origin::Operator
        && observed
            .running_pod_template_hash
            .as_deref()
            .is_some_and(|running| running != desired.pod_template_hash)
}

pub fn order_key(instance: &KuraInstance, config: &OperatorConfig) -> OrderKey {
    let canary = config.rollout.canary_label.as_ref().is_some_and(|label| {
        instance
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .is_some_and(|v| v == "true")
    });
    OrderKey {
        not_canary: !canary,
        namespace: instance.metadata.namespace.clone().unwrap_or_default(),
        name: instance.metadata.name.clone().unwrap_or_default(),
    }
}

/// Whether an instance's pods all serve now, from the caches.
pub type Serving<'a> = &'a dyn Fn(&KuraInstance) -> bool;

pub fn member(
    instance: &KuraInstance,
    config: &OperatorConfig,
    serving: Serving,
    now: Timestamp,
) -> Member {
    let status = instance.status.as_ref();
    let rollout = status
        .and_then(|s| s.rollout.clone())
        .filter(|_| crate::status_trust::written_by_operator(&instance.metadata, "rollout"));
    Member {
        key: order_key(instance, config),
        ready: status.is_some_and(|s| is_true(&s.conditions, READY)),
        serving: serving(instance),
        out: out_of_rollouts(instance, now),
        gate: gate(instance, config, rollout.as_ref(), now),
        rollout,
    }
}

/// Paused (and its end not passed) or being deleted: holds no slot of the budget.
pub fn out_of_rollouts(instance: &KuraInstance, now: Timestamp) -> bool {
    crate::window::paused(&instance.spec, now) || instance.metadata.deletion_timestamp.is_some()
}

/// The instance's maintenance window (its own, or its region's) and the
/// configuration's deadline for a change waiting since its record says.
pub fn gate(
    instance: &KuraInstance,
    config: &OperatorConfig,
    record: Option<&crate::api::RolloutStatus>,
    now: Timestamp,
) -> Gate {
    let region = config.regions.get(&instance.spec.region);
    let Some((window, source)) = crate::window::of_instance(
        &instance.spec,
        region.and_then(|r| r.maintenance_window.as_ref()),
    ) else {
        return Gate::Open;
    };
    let since = record
        .filter(|r| r.state == crate::api::RolloutState::Waiting)
        .and_then(|r| crate::time::recorded_time(&r.since, now));
    let deadline = config
        .rollout
        .window_deadline
        .as_ref()
        .and_then(|d| d.for_change(since, now));
    crate::window::gate(Some((&window, &source)), deadline, now)
}

/// The fleet of the instances in the cache, for the configuration in force.
pub fn fleet(
    instances: &[Arc<KuraInstance>],
    config: &Accepted,
    serving: Serving,
    now: Timestamp,
) -> Fleet {
    rollout::fleet(
        instances.iter().map(|i| member(i, config, serving, now)),
        config.fleet_revision(),
        config.rollout.deadline(),
        now,
    )
}

/// A budget of the whole fleet (`100%`, or a count of at least every
/// instance in scope) can hold nobody back: the change is not budgeted at
/// all, so it costs no records (no status writes to join the queue and to be
/// admitted) and applies at once, as before the budget existed.
pub fn never_binds(max_unavailable: &crate::rollout::MaxUnavailable, total: usize) -> bool {
    max_unavailable.resolve(total) >= total
}

/// The cache still shows the instance of `uid` waiting in the queue: an
/// admission this process made is not in the cache yet. Only a waiting
/// instance is admitted, so any other state (admitted, or already done and
/// cleared) is the cache's to count.
pub fn still_waiting(all: &[Arc<KuraInstance>], uid: &str) -> bool {
    all.iter().any(|i| {
        i.metadata.uid.as_deref() == Some(uid)
            && i.status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .is_some_and(|r| r.state == crate::api::RolloutState::Waiting)
    })
}

/// The decision for `instance` (with the status this reconcile decides from).
pub fn admission(
    instance: &KuraInstance,
    observed: &Observed,
    fleet: &Fleet,
    config: &OperatorConfig,
    serving: Serving,
    now: Timestamp,
) -> Admission {
    let me = Member {
        key: order_key(instance, config),
        ready: is_true(&observed.status.conditions, READY),
        serving: serving(instance),
        out: out_of_rollouts(instance, now),
        gate: gate(instance, config, observed.status.rollout.as_ref(), now),
        rollout: observed.status.rollout.clone(),
    };
    rollout::admit(&me, fleet, &config.rollout.max_unavailable)
}

#[cfg(test)]
mod tests;
