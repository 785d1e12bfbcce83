//! The fleet budget as a reconcile sees it: who originated the desired
//! revision, whether it restarts pods, and the fleet's records from the
//! instance cache (`kura_core::rollout` has the rules and the decisions).

use std::sync::Arc;

use jiff::Timestamp;

use crate::memory::Memory;
use kura_core::api::KuraInstance;
use kura_core::api::conditions::{READY, is_true};
use kura_core::config::OperatorConfig;
use kura_core::plan::{BudgetView, Observed};
use kura_core::render::Desired;
use kura_core::rollout::{self, Admission, Fleet, Gate, Member, OrderKey, Origin};

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
        .filter(|_| kura_core::status_trust::written_by_operator(&instance.metadata, "rollout"));
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
    kura_core::window::paused(&instance.spec, now) || instance.metadata.deletion_timestamp.is_some()
}

/// The instance's maintenance window (its own, or its region's) and the
/// configuration's deadline for a change waiting since its record says.
pub fn gate(
    instance: &KuraInstance,
    config: &OperatorConfig,
    record: Option<&kura_core::api::RolloutStatus>,
    now: Timestamp,
) -> Gate {
    let region = config.regions.get(&instance.spec.region);
    let Some((window, source)) = kura_core::window::of_instance(
        &instance.spec,
        region.and_then(|r| r.maintenance_window.as_ref()),
    ) else {
        return Gate::Open;
    };
    let since = record
        .filter(|r| r.state == kura_core::api::RolloutState::Waiting)
        .and_then(|r| kura_core::time::recorded_time(&r.since, now));
    let deadline = config
        .rollout
        .window_deadline
        .as_ref()
        .and_then(|d| d.for_change(since, now));
    kura_core::window::gate(Some((&window, &source)), deadline, now)
}

/// The fleet of the instances in the cache, for the configuration in force.
pub fn fleet(
    instances: &[Arc<KuraInstance>],
    config: &OperatorConfig,
    serving: Serving,
    now: Timestamp,
) -> Fleet {
    rollout::fleet(
        instances.iter().map(|i| member(i, config, serving, now)),
        &config.fleet_revision(),
        config.rollout.deadline(),
        now,
    )
}

/// The budget as it concerns this decision: whether the desired revision is
/// budgeted, and if so (and not admitted to it yet) the fleet's answer,
/// counting the admissions this process made that the cache does not show
/// yet. Read-only: the slot is taken by [`take_slot`] when the admission is
/// carried out. The fleet is scanned only when budgeted: a converged pass
/// costs nothing.
pub fn view(
    instance: &KuraInstance,
    observed: &Observed,
    desired: &Desired,
    stores: &crate::stores::Stores,
    memory: &Memory,
    config: &OperatorConfig,
    now: Timestamp,
) -> BudgetView {
    if !budgeted(observed, desired) {
        return BudgetView::default();
    }
    let gate = gate(instance, config, observed.status.rollout.as_ref(), now);
    let admitted = observed.status.rollout.as_ref().is_some_and(|r| {
        r.state == kura_core::api::RolloutState::Admitted && r.revision == desired.revision
    });
    if admitted {
        // Admitted before its window closed: it finishes.
        return BudgetView {
            budgeted: true,
            admission: None,
            gate,
        };
    }
    let all = stores.instances.state();
    if never_binds(&config.rollout.max_unavailable, all.len()) {
        // No budget to wait for, but maybe a window.
        return match gate {
            Gate::Closed(wait) if stores.serving(instance) => BudgetView {
                budgeted: true,
                admission: Some(Admission::Window(Box::new(wait.clone()))),
                gate: Gate::Closed(wait),
            },
            // Past its deadline: said in an Event when it goes.
            gate => BudgetView {
                gate,
                ..BudgetView::default()
            },
        };
    }
    let pending = memory.pending_admissions(|uid| still_waiting(&all, uid));
    BudgetView {
        budgeted: true,
        admission: Some(decide(
            instance, observed, stores, &all, &pending, config, now,
        )),
        gate,
    }
}

/// Carries out `Plan::Admit`: decides again under the memory's lock and, if
/// the instance is still admitted (counted), records the admission in memory
/// until the cache shows it. Another reconcile may have taken the last slot
/// since this one decided: then the answer is to wait.
pub fn take_slot(
    instance: &KuraInstance,
    observed: &Observed,
    stores: &crate::stores::Stores,
    memory: &Memory,
    config: &OperatorConfig,
    now: Timestamp,
) -> Admission {
    let all = stores.instances.state();
    memory.take_slot(
        instance,
        order_key(instance, config),
        |uid| still_waiting(&all, uid),
        |pending| decide(instance, observed, stores, &all, pending, config, now),
    )
}

/// [`take_slot`] across replicas (sharded): the pending admissions are the
/// shared ledger's, and the admission is an entry written there with the
/// resourceVersion read, so two replicas never take one slot (see
/// `shard::ledger`). Memory is not needed: the ledger serializes this
/// process's reconciles too.
pub async fn take_shared_slot(
    instance: &KuraInstance,
    observed: &Observed,
    stores: &crate::stores::Stores,
    ledger: &crate::shards::ledger::Ledger,
    config: &OperatorConfig,
    now: Timestamp,
) -> Result<Admission, kube::Error> {
    let all = stores.instances.state();
    let uid = instance.metadata.uid.clone().unwrap_or_default();
    let key = order_key(instance, config);
    // An entry of a paused or deleting instance holds no slot, as the fleet
    // counts none for it.
    let seen = |e: &kura_core::shard::ledger::Entry| {
        crate::shards::ledger::seen_unless(&stores.instances, e, |i| out_of_rollouts(i, now))
    };
    ledger
        .reserve(now, seen, |entries| {
            let pending: Vec<OrderKey> = entries
                .iter()
                .filter(|e| e.uid != uid && !shown_admitted(&stores.instances, e))
                .filter_map(kura_core::shard::ledger::order_key)
                .collect();
            let admission = decide(instance, observed, stores, &all, &pending, config, now);
            let entry = kura_core::shard::ledger::Entry {
                key: format!("{}/{}", key.namespace, key.name),
                uid: uid.clone(),
                owner: None,
                at: now.to_string(),
                canary: !key.not_canary,
            };
            let counted = admission == (Admission::Admit { counted: true });
            (admission, if counted { vec![entry] } else { Vec::new() })
        })
        .await
}

fn decide(
    instance: &KuraInstance,
    observed: &Observed,
    stores: &crate::stores::Stores,
    all: &[Arc<KuraInstance>],
    pending: &[OrderKey],
    config: &OperatorConfig,
    now: Timestamp,
) -> Admission {
    let serving = &|i: &KuraInstance| stores.serving(i);
    let mut fleet = fleet(all, config, serving, now);
    for key in pending {
        fleet.count_admitted(key);
    }
    admission(instance, observed, &fleet, config, serving, now)
}

/// A budget of the whole fleet (`100%`, or a count of at least every
/// instance in scope) can hold nobody back: the change is not budgeted at
/// all, so it costs no records (no status writes to join the queue and to be
/// admitted) and applies at once, as before the budget existed.
pub fn never_binds(max_unavailable: &kura_core::rollout::MaxUnavailable, total: usize) -> bool {
    max_unavailable.resolve(total) >= total
}

/// The cache still shows the instance of `uid` waiting in the queue: an
/// admission this process made is not in the cache yet. Only a waiting
/// instance is admitted, so any other state (admitted, or already done and
/// cleared) is the cache's to count.
fn still_waiting(all: &[Arc<KuraInstance>], uid: &str) -> bool {
    all.iter().any(|i| {
        i.metadata.uid.as_deref() == Some(uid)
            && i.status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .is_some_and(|r| r.state == kura_core::api::RolloutState::Waiting)
    })
}

/// The cache shows the instance of `uid` admitted: the fleet counts it from
/// there. Anything else (waiting, not even queued yet in this replica's
/// cache, or done and cleared) leaves a ledger entry counting, so a replica
/// whose cache lags behind another's admission still counts it; one that
/// finished early holds its slot until its entry ends (`ledger::TTL`).
fn shown_admitted(
    instances: &kube::runtime::reflector::Store<KuraInstance>,
    entry: &kura_core::shard::ledger::Entry,
) -> bool {
    // A lookup of the entry's instance, not a scan of the fleet: each
    // reservation asks this of every entry, under the ledger's lock.
    let Some((namespace, name)) = entry.key.split_once('/') else {
        return false;
    };
    let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
    instances.get(&key).is_some_and(|i| {
        i.metadata.uid.as_deref() == Some(entry.uid.as_str())
            && i.status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .is_some_and(|r| r.state == kura_core::api::RolloutState::Admitted)
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

/// Wakes the waiting instances that may go now: called when an instance left
/// the budget (a slot is free). The fallback is each waiting instance's own
/// requeue.
pub fn wake_next(ctx: &crate::context::Context, config: &OperatorConfig, now: Timestamp) {
    for target in next_in_line(ctx, config, now) {
        let _ = ctx.wake.send(target);
    }
}

/// The waiting instances that may go now, from the caches.
pub fn next_in_line(
    ctx: &crate::context::Context,
    config: &OperatorConfig,
    now: Timestamp,
) -> Vec<kube::runtime::reflector::ObjectRef<KuraInstance>> {
    let instances = ctx.stores.instances.state();
    let serving = |i: &KuraInstance| ctx.stores.serving(i);
    let fleet = fleet(&instances, config, &serving, now);
    rollout::next_in_line(&fleet, &config.rollout.max_unavailable)
        .into_iter()
        .map(|key| kube::runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_core::api::KuraInstanceStatus;

    fn observed(applied_spec: Option<&str>, spec: &str, generation: i64) -> Observed {
        Observed {
            generation: Some(generation),
            spec_hash: Some(spec.into()),
            status: KuraInstanceStatus {
                applied_generation: Some(1),
                applied_spec_hash: applied_spec.map(str::to_string),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Issue 25: an edit of a window or a pause moves the generation but not
    /// what the spec renders, so a change of the operator's waiting for its
    /// window stays the operator's; a spec the hash says changed is the user's.
    #[test]
    fn origin_follows_what_the_spec_renders_not_its_generation() {
        assert_eq!(origin(&observed(Some("h1"), "h1", 2)), Origin::Operator);
        assert_eq!(origin(&observed(Some("h1"), "h2", 2)), Origin::User);
        assert_eq!(origin(&observed(Some("h1"), "h2", 1)), Origin::User);
        // Applied before the hash was recorded: the generation decides.
        assert_eq!(origin(&observed(None, "h1", 2)), Origin::User);
        assert_eq!(origin(&observed(None, "h1", 1)), Origin::Operator);
        // A new force token is the user's whatever the hash says.
        let mut forced = observed(Some("h1"), "h1", 1);
        forced.force_token = Some("now".into());
        assert_eq!(origin(&forced), Origin::User);
    }
}
