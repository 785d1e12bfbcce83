//! The snapshot a pass decides from, read first: what the instance renders
//! to (validate → pin storage → render, pure, in `kura_core`), what the
//! caches show of it, the host claims' answer and the fleet budget's, with
//! what this process remembers. The decision itself is
//! `kura_core::judge::instance::judge_instance`, a pure function of this
//! value, shared by the reconcile and by `kura-operator diff`. Reading
//! writes nothing: no request, no grant, no admission.

use jiff::Timestamp;

use crate::memory::Memory;
use crate::reconcile::{budget, name_wait, observe};
use crate::stores::Stores;
use kura_core::accepted::Accepted;
use kura_core::api::{KuraInstance, KuraInstanceStatus};
use kura_core::judge::Mode;
use kura_core::judge::instance::{InstanceDecision, InstanceSnapshot, judge_instance, prepare};
use kura_core::plan::{BudgetView, RetryPolicy};

/// Where the snapshot is read from.
pub struct Inputs<'a> {
    pub instance: &'a KuraInstance,
    pub config: &'a Accepted,
    /// The caches (the operator's reflectors, or the preview's lists).
    pub stores: &'a Stores,
    /// The status to decide from: the cache's, or the one this process wrote
    /// if the cache has not caught up with it (`Memory::recall`).
    pub status: Option<KuraInstanceStatus>,
    /// The inputs key this process applied within `plan::SETTLE`, if any.
    pub recently_applied: Option<&'a str>,
    /// This process's memory: the budget's admissions not in the cache yet.
    pub memory: &'a Memory,
    pub now: Timestamp,
}

/// Reads the snapshot of `i.instance`.
pub fn read(i: &Inputs) -> InstanceSnapshot {
    let (namespace, name) = (
        i.instance.metadata.namespace.as_deref().unwrap_or_default(),
        i.instance.metadata.name.as_deref().unwrap_or_default(),
    );
    let live_claim = i.stores.live_claim(namespace, name);
    let rendered = prepare(i.instance, i.config, live_claim.as_ref());
    let desired = rendered.as_ref().ok().map(|r| &r.desired);
    let mut observed = observe::observe(i.instance, i.status.clone(), desired, i.stores);
    let asker = name_wait::Asker {
        uid: i.instance.metadata.uid.as_deref().unwrap_or_default(),
        name,
    };
    if let Some(desired) = desired
        && name_wait::stall_over(
            &observed.status.conditions,
            desired,
            &observed.children,
            &i.stores.foreign,
            &asker,
        )
    {
        // The names a name conflict stalled on are free again: try again.
        observed.status.retry = None;
    }
    let paused = kura_core::window::paused(&i.instance.spec, i.now);
    let (hosts, budget) = match desired {
        // Invalid input asks for no host and takes no slot.
        None => (Ok(()), BudgetView::default()),
        // A paused instance asks for no host (and applies nothing anyway).
        Some(_) if paused => (Ok(()), view(i, &observed, desired)),
        Some(_) => match i.stores.claims.check(i.instance, i.config, i.now) {
            // An instance that may apply nothing takes no slot of the budget:
            // the fleet is not even scanned.
            Err(conflict) => (Err(conflict), BudgetView::default()),
            Ok(()) => (Ok(()), view(i, &observed, desired)),
        },
    };
    InstanceSnapshot {
        rendered,
        observed,
        recently_applied: i.recently_applied.map(str::to_string),
        paused,
        hosts,
        budget,
    }
}

fn view(
    i: &Inputs,
    observed: &kura_core::plan::Observed,
    desired: Option<&kura_core::render::Desired>,
) -> BudgetView {
    let Some(desired) = desired else {
        return BudgetView::default();
    };
    budget::view(
        i.instance, observed, desired, i.stores, i.memory, i.config, i.now,
    )
}

/// Reads the snapshot and decides: the pass's decision.
pub fn decide_from(i: &Inputs, policy: &RetryPolicy, mode: Mode) -> InstanceDecision {
    judge_instance(read(i), policy, i.now, mode)
}
