//! Shards across replicas (issue 24.4): which shards this process acts for,
//! and the Leases that decide it.
//!
//! With one shard (the default) nothing here campaigns: the single Lease of
//! `leader.rs` decides, and this process acts for shard 0 exactly while it
//! leads ([`Gate::follow`]), as before shards existed.
//!
//! With `N` shards every replica runs, beside its caches:
//! - a **membership Lease** of its own (`<lease>-member-<identity>`), renewed
//!   like any Lease: how the others learn it is live;
//! - one **campaign per shard** on `<lease>-shard-<i>` (`leader.rs`'s, so the
//!   same fencing: deadline-bounded renewals, a holder stops acting at two
//!   thirds of the duration, a standby takes over only after the whole
//!   duration by its own clock);
//! - a **planner** that watches these Leases (by `kura.dev/shards-of`) and
//!   wants the shards `shard::plan` gives it: its fair share, so a joining
//!   replica gets shards from the others and a dead one's shards go to the
//!   survivors once its Leases expire.
//!
//! A shard is handed over gracefully: the holder stops starting reconciles
//! for it, waits for those in flight (at most the lease duration, then drops
//! them), and only then releases its Lease. Two replicas therefore never act
//! for one shard at the same time.

mod follow;
pub mod ledger;
pub mod select;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use futures::Stream;
use tokio::sync::{Notify, watch};

use crate::leader::LeaderState;
use kura_core::shard::Shards;

pub use follow::coordinate;

/// Which shards this process acts for, and the work in flight per shard.
pub struct Gate {
    shards: Shards,
    /// Shards a reconcile may start in: leased, and listed by every cache
    /// the apiserver filters to this process's shards.
    acting: watch::Sender<BTreeSet<u32>>,
    /// Shards whose Lease this process holds and is not handing over.
    leased: watch::Sender<BTreeSet<u32>>,
    /// Per cache filtered by the apiserver (`select`), the shards it holds
    /// a complete list of. None registered: the caches hold the whole
    /// fleet, and every leased shard is acted for at once.
    listed: Mutex<Vec<BTreeSet<u32>>>,
    /// Shards whose Lease this process holds: work in flight for a shard is
    /// dropped the moment the shard leaves this set.
    holding: watch::Sender<BTreeSet<u32>>,
    /// True while this process must act for no shard at all, leased or not
    /// (an installed CRD that is not compatible: `crd_check`).
    held: watch::Sender<bool>,
    /// Counts the releases of a hold: each is an acquisition of every shard
    /// acted for (`acquired`), however quickly the hold came and went.
    releases: watch::Sender<u64>,
    busy: Mutex<BTreeMap<u32, usize>>,
    idle: Notify,
}

impl Gate {
    pub fn new(shards: Shards) -> Gate {
        Gate {
            shards,
            acting: watch::channel(BTreeSet::new()).0,
            leased: watch::channel(BTreeSet::new()).0,
            listed: Mutex::default(),
            holding: watch::channel(BTreeSet::new()).0,
            held: watch::channel(false).0,
            releases: watch::channel(0).0,
            busy: Mutex::default(),
            idle: Notify::new(),
        }
    }

    pub fn shards(&self) -> Shards {
        self.shards
    }

    pub fn shard_of(&self, namespace: &str) -> u32 {
        self.shards.of_namespace(namespace)
    }

    /// What `status.shard` says of an object in `namespace`: `i/N`; nothing
    /// with one shard, so that an unsharded fleet writes what it wrote before.
    pub fn label(&self, namespace: &str) -> Option<String> {
        (self.shards.count() > 1)
            .then(|| format!("{}/{}", self.shard_of(namespace), self.shards.count()))
    }

    /// Whether this process acts for the shard of `namespace` now.
    pub fn acts_for(&self, namespace: &str) -> bool {
        self.acting.borrow().contains(&self.shard_of(namespace))
    }

    /// The shards this process acts for now.
    pub fn acting(&self) -> BTreeSet<u32> {
        self.acting.borrow().clone()
    }

    /// Whether this process acts for any shard now: the one answer to "may
    /// I act?" for work that spans shards (the sweep of leftover classes),
    /// as [`Gate::acts_for`] is for one object. With one shard it is whether
    /// this process leads (and is not held).
    pub fn acts_for_any(&self) -> bool {
        !self.acting.borrow().is_empty()
    }

    /// The shards acted for, as they change.
    pub fn acting_changes(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.acting.subscribe()
    }

    /// Runs `work` that spans shards only while this process acts for at
    /// least one: `None`, without polling it, when it acts for none, and
    /// `None` as soon as it stops, dropping `work` at its current await
    /// point (as [`Gate::run`] does for one shard). What `work` touches of
    /// one namespace it still checks with [`Gate::acts_for`].
    pub async fn run_while_acting<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        if !self.acts_for_any() {
            return None;
        }
        let mut acting = self.acting.subscribe();
        // The sender lives in `self`, borrowed for as long as this runs.
        let stopped = async move {
            let _ = acting.wait_for(BTreeSet::is_empty).await;
        };
        tokio::select! {
            biased;
            () = stopped => None,
            out = work => Some(out),
        }
    }

    /// Runs `work` for an object of `namespace` only if this process acts
    /// for its shard: `None`, without polling it, when it does not, and
    /// `None` as soon as the shard's Lease is lost, dropping `work` at its
    /// current await point (`leader::while_leading`, per shard). A handover
    /// waits for it to finish.
    pub async fn run<T>(
        &self,
        namespace: &str,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let shard = self.shard_of(namespace);
        // Counted before the check: a handover stops acting first and then
        // waits until nothing is counted, so work that saw the shard acted
        // for is always waited for (checked first, it could slip in between).
        let _busy = self.enter(shard);
        if !self.acting.borrow().contains(&shard) {
            return None;
        }
        let mut holding = self.holding.subscribe();
        let mut held = self.held.subscribe();
        // The senders live in `self`, borrowed for as long as this runs: the
        // waits end only by their condition.
        let lost = async move {
            tokio::select! {
                _ = holding.wait_for(|h| !h.contains(&shard)) => {}
                _ = held.wait_for(|held| *held) => {}
            }
        };
        tokio::select! {
            biased;
            _ = lost => None,
            out = work => Some(out),
        }
    }

    /// One shard: acts for it exactly while leading on the single Lease.
    pub fn follow(&self, state: LeaderState) {
        let set: BTreeSet<u32> = if state.leading {
            [0].into()
        } else {
            BTreeSet::new()
        };
        // Holding first: work is dropped before anything else can start.
        self.holding.send_replace(set.clone());
        self.leased.send_replace(set);
        self.refresh();
    }

    /// Leased or not, shard `shard` (its follower in `follow`).
    fn set_leased(&self, shard: u32, on: bool) {
        self.set(&self.leased, shard, on);
        self.refresh();
    }

    /// Nothing leased, nothing held (the campaigns have ended).
    fn release_all(&self) {
        self.holding.send_replace(BTreeSet::new());
        self.leased.send_replace(BTreeSet::new());
        self.refresh();
    }

    /// The shards whose Lease this process holds, as they change: what a
    /// filtered cache lists (`select`).
    pub fn holding(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.holding.subscribe()
    }

    /// A new cache the apiserver filters to this process's shards: until it
    /// reports a complete list ([`Gate::set_listed`]), no shard is acted
    /// for, so that nothing is decided from a cache that lacks the shard's
    /// objects (an absent child would be created again, an orphan missed).
    pub fn filtered_cache(&self) -> usize {
        let mut listed = self.listed.lock().unwrap();
        listed.push(BTreeSet::new());
        let slot = listed.len() - 1;
        drop(listed);
        self.refresh();
        slot
    }

    /// Cache `slot` holds a complete list of `shards` (and of no others).
    pub fn set_listed(&self, slot: usize, shards: BTreeSet<u32>) {
        if let Some(s) = self.listed.lock().unwrap().get_mut(slot) {
            *s = shards;
        }
        self.refresh();
    }

    /// Held: no shard is acted for, leased or not, and work in flight is
    /// dropped (as when a Lease is lost); released: the leased shards are
    /// acted for again, and `acquired` ticks so that everything let pass
    /// meanwhile is reconciled.
    pub fn hold(&self, held: bool) {
        // Held first: work in flight is dropped before anything can start.
        let changed = self
            .held
            .send_if_modified(|h| std::mem::replace(h, held) != held);
        self.refresh();
        if changed && !held {
            self.releases.send_modify(|n| *n += 1);
        }
    }

    /// `acting` = leased, and listed by every filtered cache; nothing while held.
    fn refresh(&self) {
        let leased = if *self.held.borrow() {
            BTreeSet::new()
        } else {
            self.leased.borrow().clone()
        };
        let listed = self.listed.lock().unwrap();
        let acting: BTreeSet<u32> = leased
            .into_iter()
            .filter(|s| listed.iter().all(|l| l.contains(s)))
            .collect();
        drop(listed);
        self.acting.send_if_modified(|a| {
            if *a == acting {
                return false;
            }
            *a = acting;
            true
        });
    }

    fn set(&self, which: &watch::Sender<BTreeSet<u32>>, shard: u32, on: bool) {
        which.send_if_modified(|s| {
            if on {
                s.insert(shard)
            } else {
                s.remove(&shard)
            }
        });
    }

    /// One tick each time this process starts acting for a shard it did not
    /// act for (at once if it acts for one already), and when a hold is
    /// released while it acts for any: what its predecessor, or the hold,
    /// let pass is reconciled.
    pub fn acquired(&self) -> impl Stream<Item = ()> + Send + 'static + use<> {
        let rx = self.acting.subscribe();
        let releases = self.releases.subscribe();
        let start = (rx, releases, BTreeSet::new(), 0);
        futures::stream::unfold(start, |state| async move {
            let (mut rx, mut releases, mut was, mut seen) = state;
            loop {
                let now = rx.borrow_and_update().clone();
                let released = *releases.borrow_and_update();
                let gained =
                    now.difference(&was).next().is_some() || (released != seen && !now.is_empty());
                was = now;
                seen = released;
                if gained {
                    return Some(((), (rx, releases, was, seen)));
                }
                tokio::select! {
                    changed = rx.changed() => changed.ok()?,
                    changed = releases.changed() => changed.ok()?,
                }
            }
        })
    }

    fn enter(&self, shard: u32) -> Busy<'_> {
        *self.busy.lock().unwrap().entry(shard).or_default() += 1;
        Busy { gate: self, shard }
    }

    /// Returns once no work for `shard` is in flight.
    async fn drained(&self, shard: u32) {
        loop {
            let idle = self.idle.notified();
            if self.busy.lock().unwrap().get(&shard).copied().unwrap_or(0) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Work in flight for a shard, counted until dropped.
struct Busy<'a> {
    gate: &'a Gate,
    shard: u32,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut busy = self.gate.busy.lock().unwrap();
        if let Some(n) = busy.get_mut(&self.shard) {
            *n = n.saturating_sub(1);
        }
        drop(busy);
        self.gate.idle.notify_waiters();
    }
}

#[cfg(test)]
mod tests;
