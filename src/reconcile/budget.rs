//! The fleet budget as a reconcile sees it: the fleet read from the
//! instance cache, the admissions this process (or, sharded, the shared
//! ledger) made that the cache does not show yet, and the slot taken when an
//! admission is carried out. The rules are pure, in the core:
//! `kura_core::budget` (an instance as a member of the fleet, its origin and
//! window) and `kura_core::rollout` (the budget over members).

use std::sync::Arc;

use jiff::Timestamp;

use crate::memory::Memory;
use kura_core::accepted::Accepted;
use kura_core::api::KuraInstance;
use kura_core::budget::{
    admission, budgeted, fleet, gate, never_binds, order_key, out_of_rollouts, still_waiting,
};
use kura_core::plan::{BudgetView, Observed};
use kura_core::render::Desired;
use kura_core::rollout::{self, Admission, Gate, OrderKey};

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
    config: &Accepted,
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
        admission: Some(admission_now(
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
    config: &Accepted,
    now: Timestamp,
) -> Admission {
    let all = stores.instances.state();
    memory.take_slot(
        instance,
        order_key(instance, config),
        |uid| still_waiting(&all, uid),
        |pending| admission_now(instance, observed, stores, &all, pending, config, now),
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
    config: &Accepted,
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
            let admission = admission_now(instance, observed, stores, &all, &pending, config, now);
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

fn admission_now(
    instance: &KuraInstance,
    observed: &Observed,
    stores: &crate::stores::Stores,
    all: &[Arc<KuraInstance>],
    pending: &[OrderKey],
    config: &Accepted,
    now: Timestamp,
) -> Admission {
    let serving = &|i: &KuraInstance| stores.serving(i);
    let mut fleet = fleet(all, config, serving, now);
    for key in pending {
        fleet.count_admitted(key);
    }
    admission(instance, observed, &fleet, config, serving, now)
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

/// Wakes the waiting instances that may go now: called when an instance left
/// the budget (a slot is free). The fallback is each waiting instance's own
/// requeue.
pub fn wake_next(ctx: &crate::context::Context, config: &Accepted, now: Timestamp) {
    for target in next_in_line(ctx, config, now) {
        let _ = ctx.wake.send(target);
    }
}

/// The waiting instances that may go now, from the caches.
pub fn next_in_line(
    ctx: &crate::context::Context,
    config: &Accepted,
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
