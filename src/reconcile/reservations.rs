//! What a pass reserves before it acts: a slot of the fleet budget (for an
//! admission) and the hosts it asks for (before its apply). Each is decided
//! again under the reservation's lock, since another pass may have taken it
//! since the decision. Two homes, one interface: this process (memory's
//! admissions, the claims index's grants) with one shard, and the ledgers the
//! replicas share (`shards::ledger`) with several.

use futures::future::BoxFuture;
use jiff::Timestamp;

use crate::context::Context;
use crate::memory::Memory;
use crate::reconcile::budget;
use crate::shards::ledger::Ledgers;
use crate::stores::Stores;
use kura_core::accepted::Accepted;
use kura_core::api::KuraInstance;
use kura_core::claims::Conflict;
use kura_core::plan::Observed;
use kura_core::rollout::Admission;

/// What a reservation is asked for.
pub struct Ask<'a> {
    pub instance: &'a KuraInstance,
    /// What the pass decided from.
    pub observed: &'a Observed,
    pub stores: &'a Stores,
    pub memory: &'a Memory,
    pub config: &'a Accepted,
    pub now: Timestamp,
}

/// A failure of the shared ledger (a read or a write): nothing was reserved.
pub type LedgerError = kube::Error;

pub trait Reservations: Send + Sync {
    /// Carries out an admission: decides it again under the lock and, if the
    /// instance is still admitted (counted), records the slot as taken until
    /// the cache shows it. Another pass may have taken the last slot since
    /// the decision: then the answer is to wait.
    fn take_slot<'a>(&'a self, ask: &'a Ask<'a>) -> BoxFuture<'a, Result<Admission, LedgerError>>;

    /// Takes the hosts the instance asks for, right before its apply, or
    /// answers who holds them.
    fn take_hosts<'a>(
        &'a self,
        ask: &'a Ask<'a>,
    ) -> BoxFuture<'a, Result<Result<(), Conflict>, LedgerError>>;

    /// The instance left the budget: its admission ends before the status
    /// write that frees its slot.
    fn end_admission<'a>(
        &'a self,
        instance: &'a KuraInstance,
        config: &'a Accepted,
    ) -> BoxFuture<'a, ()>;
}

/// The reservations of this process's passes: with one shard, this
/// process's memory and claims index; with several, the shared ledgers.
pub fn of(ctx: &Context) -> &dyn Reservations {
    match &ctx.acting.ledgers {
        Some(ledgers) => ledgers,
        None => &ThisProcess,
    }
}

/// One shard: memory serializes the admissions, the claims index the hosts.
pub struct ThisProcess;

impl Reservations for ThisProcess {
    fn take_slot<'a>(&'a self, a: &'a Ask<'a>) -> BoxFuture<'a, Result<Admission, LedgerError>> {
        let admission =
            budget::take_slot(a.instance, a.observed, a.stores, a.memory, a.config, a.now);
        Box::pin(std::future::ready(Ok(admission)))
    }

    fn take_hosts<'a>(
        &'a self,
        a: &'a Ask<'a>,
    ) -> BoxFuture<'a, Result<Result<(), Conflict>, LedgerError>> {
        let taken = a.stores.claims.claim(a.instance, a.config, a.now);
        Box::pin(std::future::ready(Ok(taken)))
    }

    /// Memory lets an admission go once the cache shows it.
    fn end_admission<'a>(&'a self, _: &'a KuraInstance, _: &'a Accepted) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Several shards: the ledgers the replicas share.
impl Reservations for Ledgers {
    fn take_slot<'a>(&'a self, a: &'a Ask<'a>) -> BoxFuture<'a, Result<Admission, LedgerError>> {
        Box::pin(budget::take_shared_slot(
            a.instance,
            a.observed,
            a.stores,
            &self.budget,
            a.config,
            a.now,
        ))
    }

    /// Taken in this process first, then the hosts it serves by no Ingress
    /// yet are reserved in the shared ledger, since the replica of another
    /// shard cannot see this process's grant; one another instance reserved
    /// first is a host conflict until that entry ends.
    fn take_hosts<'a>(
        &'a self,
        a: &'a Ask<'a>,
    ) -> BoxFuture<'a, Result<Result<(), Conflict>, LedgerError>> {
        Box::pin(async move {
            if let Err(conflict) = a.stores.claims.claim(a.instance, a.config, a.now) {
                return Ok(Err(conflict));
            }
            match reserve_hosts(self, a).await? {
                Some(conflict) => Ok(Err(conflict)),
                None => Ok(Ok(())),
            }
        })
    }

    /// The admission's entry ends before the status write that frees its
    /// slot. That write is what wakes the next in line on every replica
    /// (`controller::instance::freed_elsewhere`); were the entry still there, the woken
    /// instance would find its slot taken and wait for a recheck. Before the
    /// write, the cache still shows this instance admitted, so the fleet
    /// counts it from there; if the write then fails, it still does.
    fn end_admission<'a>(
        &'a self,
        instance: &'a KuraInstance,
        config: &'a Accepted,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(uid) = &instance.metadata.uid else {
                return;
            };
            let key = kura_core::budget::order_key(instance, config);
            let key = format!("{}/{}", key.namespace, key.name);
            if let Err(e) = self.budget.remove(&key, uid).await {
                tracing::warn!(error = %e, "could not end the admission in the shared ledger; it ends by itself within a minute");
            }
        })
    }
}

/// The hosts of `a.instance` not served yet, reserved in the hosts ledger.
async fn reserve_hosts(ledgers: &Ledgers, a: &Ask<'_>) -> Result<Option<Conflict>, LedgerError> {
    let fresh = a.stores.claims.not_served(a.instance, a.config);
    let uid = a.instance.metadata.uid.clone().unwrap_or_default();
    if fresh.is_empty() || uid.is_empty() {
        return Ok(None);
    }
    let reservation = kura_core::shard::ledger::HostReservation {
        uid,
        owner: format!(
            "{}/{}",
            a.instance.metadata.namespace.as_deref().unwrap_or_default(),
            a.instance.metadata.name.as_deref().unwrap_or_default()
        ),
        wanted: fresh,
        at: a.now,
    };
    let seen =
        |e: &kura_core::shard::ledger::Entry| crate::shards::ledger::seen(&a.stores.instances, e);
    ledgers.hosts.reserve_hosts(a.now, seen, reservation).await
}
