//! The write fence: no request that writes leaves a process whose Lease time
//! has run out, whatever its tasks are doing.
//!
//! Leading is decided by the campaign tasks of `leader.rs`, and reconciles are
//! dropped when the role goes (`leader::while_leading`, `shards::Gate::run`).
//! Both are tasks: a process stopped past its Lease (SIGSTOP, a frozen VM, a
//! starved node) wakes with every timer due at once, and a reconcile woken on
//! resume can send its writes before the campaign notices that the role is
//! gone. The fence does not depend on which task runs first. It is a tower
//! layer of the client itself, so every request passes it, and it compares the
//! monotonic clock, read when the request is about to be sent, with a
//! deadline per shard that only a successful renewal moves forward:
//! the renewal's send time plus the renew deadline (two thirds of the lease
//! duration), less a margin for the clocks of two processes running at
//! different rates ([`CLOCK_RATE_MARGIN`]). A standby takes over only after
//! the whole duration by its own clock, so a write that passes the fence
//! reaches the apiserver before anybody else may act, unless it spends more
//! than a third of the lease duration on the way.
//!
//! Which shard a request acts for is read from its path: an object in
//! namespace `ns` belongs to the shard of `ns`. Writes to cluster-scoped
//! objects and to the operator's own namespace (the shared ledgers of a
//! sharded fleet, this pod's Events) need any shard held. Lease requests
//! pass: a campaign's writes carry the resourceVersion they read, so a stale
//! one fails by itself (409), and a holder must be able to renew.
//!
//! Without leader election the fence is open: one process is the whole
//! fleet's by declaration.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use kura_core::shard::Shards;

mod layer;
mod pools;
mod socket;
#[cfg(test)]
mod socket_tests;
#[cfg(test)]
mod tests;

pub use layer::FenceLayer;
pub use pools::{client_bottom, fenced_service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The part of the renew deadline given up so that a process whose clock
/// runs slower than its successor's still stops first. Real clocks differ by
/// parts per million; 2% is far beyond that and costs 0.2 s of a 10 s deadline.
pub const CLOCK_RATE_MARGIN: u32 = 50;

/// Until when this process may write, per shard.
pub struct Fence {
    shards: Shards,
    /// The namespace of the Leases (and of the shared ledgers).
    own_namespace: String,
    /// `None`: no election, always open.
    until: Option<Mutex<Vec<Option<Instant>>>>,
    refused: Counter,
    /// A refusal was logged since the fence last opened (one line per loss).
    logged: AtomicBool,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("shards", &self.shards)
            .field("elected", &self.until.is_some())
            .finish()
    }
}

/// Whose Lease time a write needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Reads, the Lease API, and every request without election.
    Free,
    /// An object in a namespace of this shard.
    Shard(u32),
    /// A cluster-scoped object, or one in the operator's own namespace.
    AnyShard,
}

/// What a request is about, for the fence.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    /// Reads, and the Lease API: never fenced.
    Free,
    /// An object in this namespace.
    Namespaced(&'a str),
    /// A cluster-scoped object.
    Cluster,
}

/// The error of a write the fence refused: not a failure of the request,
/// which was never sent (or, in flight, abandoned when the time ran out).
#[derive(Debug, thiserror::Error)]
pub enum Fenced {
    #[error(
        "not sent: this process holds no Lease time for shard {0} (it ran out, or it was never held); a write now could undo a leader's"
    )]
    NotSent(u32),
    #[error(
        "abandoned: this process's Lease time ran out while the request was in flight (the client's own retries included)"
    )]
    InFlight,
}

impl Fence {
    /// No election: every write passes.
    pub fn open() -> Fence {
        Fence {
            shards: Shards::ONE,
            own_namespace: String::new(),
            until: None,
            refused: Counter::default(),
            logged: AtomicBool::new(false),
        }
    }

    /// Elected: nothing passes until a Lease is held.
    pub fn elected(shards: Shards, own_namespace: &str) -> Fence {
        Fence {
            shards,
            own_namespace: own_namespace.to_string(),
            until: Some(Mutex::new(vec![None; shards.count() as usize])),
            refused: Counter::default(),
            logged: AtomicBool::new(false),
        }
    }

    /// Refused writes are counted here too.
    pub fn counted(mut self, refused: Counter) -> Fence {
        self.refused = refused;
        self
    }

    /// Shard `shard`'s Lease was renewed by a request sent at `sent`
    /// (`None`: it is not held): the deadline is that renewal's, whatever
    /// it was before (the campaign reports its renewals in order).
    pub fn renewed(&self, shard: u32, sent: Option<Instant>, renew_deadline: Duration) {
        let Some(until) = &self.until else { return };
        let mut until = until.lock().unwrap();
        let Some(slot) = until.get_mut(shard as usize) else {
            return;
        };
        *slot = sent.map(|s| s + fence_window(renew_deadline));
        if slot.is_some() {
            self.logged.store(false, Ordering::Relaxed);
        }
    }

    /// Shard `shard` is being given up: nothing more is written for it.
    /// Called before the Lease is released, so that no write of ours can
    /// follow the release.
    pub fn close(&self, shard: u32) {
        self.renewed(shard, None, Duration::ZERO);
    }

    /// Whether a write to an object in `namespace` may be sent now.
    pub fn allows_write_in(&self, namespace: &str) -> bool {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/x");
        self.check(&http::Method::PATCH, &path, Instant::now())
            .is_ok()
    }

    /// Whether a request of `method` to `path` may be sent at `now`: until
    /// when (`None`: no bound), or the shard it would act for.
    fn check(
        &self,
        method: &http::Method,
        path: &str,
        now: Instant,
    ) -> Result<Option<Instant>, Fenced> {
        self.live_until(self.scope(method, path), now)
    }

    /// Whose Lease time a request of `method` to `path` needs.
    fn scope(&self, method: &http::Method, path: &str) -> Scope {
        if self.until.is_none() {
            return Scope::Free;
        }
        match target(method, path) {
            Target::Free => Scope::Free,
            Target::Namespaced(ns) if ns != self.own_namespace => {
                Scope::Shard(self.shards.of_namespace(ns))
            }
            _ => Scope::AnyShard,
        }
    }

    /// Until when (`None`: no bound) a write needing `scope` may be sent at
    /// `now`, or the shard whose time it lacks.
    fn live_until(&self, scope: Scope, now: Instant) -> Result<Option<Instant>, Fenced> {
        let Some(until) = &self.until else {
            return Ok(None);
        };
        let until = until.lock().unwrap();
        let live = |s: usize| until.get(s).copied().flatten().filter(|t| now < *t);
        match scope {
            Scope::Free => Ok(None),
            Scope::Shard(shard) => live(shard as usize).map(Some).ok_or(Fenced::NotSent(shard)),
            Scope::AnyShard => (0..until.len())
                .filter_map(live)
                .max()
                .map(Some)
                .ok_or(Fenced::NotSent(0)),
        }
    }

    fn refuse(&self, fenced: &Fenced, method: &http::Method, path: &str) {
        self.refused.inc();
        if !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(%method, path, "{fenced}; further refusals are counted in kura_writes_fenced_total");
        }
    }
}

/// How long after a renewal was sent its holder may still write.
fn fence_window(renew_deadline: Duration) -> Duration {
    renew_deadline - renew_deadline / CLOCK_RATE_MARGIN
}

/// What the request at `path` acts on. Paths are the API's own:
/// `/api/v1/namespaces/{ns}/…` or `/apis/{group}/{version}/namespaces/{ns}/…`;
/// a Namespace object itself (`…/namespaces/{ns}` with nothing after) is
/// cluster-scoped.
fn target<'a>(method: &http::Method, path: &'a str) -> Target<'a> {
    use http::Method;
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Target::Free;
    }
    if path.starts_with("/apis/coordination.k8s.io/") {
        return Target::Free;
    }
    let mut parts = path.trim_start_matches('/').split('/');
    let rest: Vec<&str> = match parts.next() {
        Some("api") => parts.skip(1).collect(),
        Some("apis") => parts.skip(2).collect(),
        _ => return Target::Cluster,
    };
    match rest.as_slice() {
        ["namespaces", ns, _, ..] if !ns.is_empty() => Target::Namespaced(ns),
        _ => Target::Cluster,
    }
}
