//! The end of a name conflict's stall. A name conflict found at apply time
//! (an object someone else made holds a name the operator creates, and the
//! caches, which hold only labelled objects, did not show it) stalls an
//! instance or a gateway at once: retrying cannot help until someone acts on
//! that object. Waiting out the stall window (ten minutes by default) after
//! they did is no help either, so a pass (at the resync, or woken by any
//! event) whose view of the names says every one it would create is free
//! again (the objects deleted, relabelled, or handed over with
//! `kura.dev/adopt`) takes the stall as over and tries again, once: if a
//! name is taken again, the apply finds it and stalls anew. The same for
//! both kinds.
//!
//! The names' watch wakes the waiter as soon as one of the names it found
//! held changes (`stores::foreign`); every resync looks too.
//!
//! Status is anyone's to write: a forged Stalled condition gains its writer
//! one attempt at most, which a change of spec would have given too.

use std::collections::BTreeMap;

use kube::runtime::reflector::ObjectRef;

use super::observe::owner;
use crate::stores::Stores;
use crate::stores::foreign::{ForeignNames, Lookup, Waiter};
use kura_core::api::conditions::{STALLED, find};
use kura_core::api::{Condition, ConditionStatus, KuraGateway, KuraInstance};
use kura_core::plan::{LiveChild, Owner};
use kura_core::render::{Desired, ObjectId};

/// The reason of the Stalled condition of a name conflict found at apply.
const NAME_CONFLICT: &str = "NameConflict";

/// Whose names are asked about: the instance's or gateway's uid and name.
pub struct Asker<'a> {
    pub uid: &'a str,
    pub name: &'a str,
}

/// Whether a name conflict's stall (`conditions`) is over: every object of
/// `desired` the caches do not show (those an apply would create) has a
/// name no one else's object holds now, as far as `names` knows. A kind
/// whose names have not listed yet is not known to be free.
pub fn stall_over(
    conditions: &[Condition],
    desired: &Desired,
    children: &BTreeMap<ObjectId, LiveChild>,
    names: &ForeignNames,
    asker: &Asker,
) -> bool {
    if !stalled_by_a_name(conditions) {
        return false;
    }
    let mut to_create = desired
        .objects
        .iter()
        .map(|o| &o.id)
        .filter(|id| !children.contains_key(id))
        .peekable();
    // Nothing to create: the conflict is not one of names (or not seen yet).
    to_create.peek().is_some() && to_create.all(|id| free_for(id, names, asker))
}

/// `waiter` waits for the names of `desired` the caches do not show (those
/// its apply creates, one of which it found held): woken when one of them
/// changes (`stores::foreign`).
pub fn wait_for_names(
    stores: &Stores,
    desired: &Desired,
    children: &BTreeMap<ObjectId, LiveChild>,
    waiter: &Waiter,
) {
    let to_create = desired
        .objects
        .iter()
        .map(|o| o.id.clone())
        .filter(|id| !children.contains_key(id) && id.kind.cached_by_label());
    stores.foreign.wait_for(to_create, waiter);
}

/// An apply found a name held: `waiter` waits for its names
/// ([`wait_for_names`]), stalled at once; the pass looks again after the
/// returned wait (the resync, within the stall window) if nothing wakes it.
pub fn stall_on_names(
    ctx: &crate::context::Context,
    desired: &Desired,
    children: &BTreeMap<ObjectId, LiveChild>,
    waiter: &Waiter,
) -> std::time::Duration {
    wait_for_names(&ctx.stores, desired, children, waiter);
    ctx.settings.resync.min(ctx.settings.policy.stall_window())
}

/// The instance as a waiter for names.
pub fn instance_waiter(instance: &KuraInstance) -> Waiter {
    Waiter::Instance(ObjectRef::from_obj(instance))
}

/// The gateway as a waiter for names.
pub fn gateway_waiter(gateway: &KuraGateway) -> Waiter {
    Waiter::Gateway(ObjectRef::from_obj(gateway))
}

/// Whether the Stalled condition is a name conflict's: then the stall is
/// looked at again every resync (its end is in the caches, `stall_over`),
/// not only when the stall window ends.
pub fn stalled_by_a_name(conditions: &[Condition]) -> bool {
    find(conditions, STALLED)
        .is_some_and(|c| c.status == ConditionStatus::True && c.reason == NAME_CONFLICT)
}

fn free_for(id: &ObjectId, names: &ForeignNames, asker: &Asker) -> bool {
    // The caches hold every object of such a kind, labelled or not: one they
    // do not show is not there.
    if !id.kind.cached_by_label() {
        return true;
    }
    match names.lookup(id) {
        Lookup::Free => true,
        Lookup::Unknown => false,
        // Handed over (`kura.dev/adopt`), or its own after all.
        Lookup::Held(meta) => matches!(
            owner(&meta, id.kind, asker.uid, asker.name),
            Owner::Ours | Owner::Adopt
        ),
    }
}

#[cfg(test)]
mod tests;
