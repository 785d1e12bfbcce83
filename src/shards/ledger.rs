//! The ledgers of a sharded fleet (`shard::ledger` has the rules): a
//! ConfigMap each, in the Leases' namespace, written only with the
//! resourceVersion that was read. Unsharded, there is none: one process
//! serializes its own reservations in memory.
//!
//! This process's reservations on one ledger are taken one at a time, on the
//! copy it last read or wrote: its concurrent reconciles would otherwise race
//! each other for the one object, and all but one of each round would be
//! refused (409) and read again. At N=10,000 that race, not the apiserver,
//! set the pace of a create. A copy another replica has since changed is
//! refused on write like any stale read, and read again; a decision to write
//! nothing made on the copy is made again on a fresh read, so a stale copy
//! never holds back an admission or a host.
//!
//! Host reservations go further: every one that waited while a write was in
//! flight is decided, in the order they came, and written by the next write
//! together (a group commit). One at a time, each new host cost a write of
//! the whole ledger, and those writes, not the apiserver, set the pace of a
//! sharded fleet change.

// A writer module (docs/architecture.md, "Who writes"):
// it writes the sharded fleet's ledger ConfigMaps.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::metrics::counter::Counter;

use crate::metrics::Metrics;
use kura_core::api::KuraInstance;
use kura_core::claims::Conflict;
use kura_core::keys::LABEL_SHARDS_OF;
use kura_core::shard::ledger::{self, DATA_KEY, Entry, HostReservation, Seen};

/// How often a reservation refused by a concurrent write is decided again
/// before the reconcile gives up and is retried.
const ATTEMPTS: usize = 5;

/// The bound of one request to a ledger. The reservations of this process
/// wait on each other, so one hung request must not hold them all for the
/// client's read timeout (minutes): it fails, and its reconcile is retried.
const REQUEST: Duration = Duration::from_secs(10);

/// The two ledgers: admissions to the fleet budget, and host grants.
pub struct Ledgers {
    pub budget: Ledger,
    pub hosts: Ledger,
}

impl Ledgers {
    pub fn new(client: kube::Client, namespace: &str, base: &str) -> Ledgers {
        let ledger = |what: &str| Ledger {
            api: Api::namespaced(client.clone(), namespace),
            name: format!("{base}-{what}"),
            base: base.to_string(),
            copy: Default::default(),
            waiting: Default::default(),
            refused: Counter::default(),
            writes: Counter::default(),
        };
        Ledgers {
            budget: ledger("budget"),
            hosts: ledger("hosts"),
        }
    }

    /// These ledgers with their refusals counted in `metrics`.
    pub fn counted(mut self, metrics: &Metrics) -> Ledgers {
        for (ledger, name) in [(&mut self.budget, "budget"), (&mut self.hosts, "hosts")] {
            ledger.refused = metrics.ledgers.refused(name);
            ledger.writes = metrics.ledgers.writes(name);
        }
        self
    }
}

pub struct Ledger {
    api: Api<ConfigMap>,
    name: String,
    base: String,
    /// The ledger as this process last read or wrote it (`None`: read it);
    /// its lock is the one-at-a-time of this process's writes.
    copy: tokio::sync::Mutex<Option<ConfigMap>>,
    /// Host reservations waiting for the next write.
    waiting: std::sync::Mutex<Vec<Waiting>>,
    /// Writes refused because someone else wrote first (409).
    refused: Counter,
    /// Writes that succeeded.
    writes: Counter,
}

/// A host reservation waiting for the next write, and where its answer goes.
struct Waiting {
    reservation: HostReservation,
    answer: tokio::sync::oneshot::Sender<Result<Option<Conflict>, kube::Error>>,
}

/// Where a reservation's entries came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    Copy,
    Fresh,
}

impl Ledger {
    /// Reads the entries that still count (live, and standing against the
    /// instance cache: `seen` says what it shows of an entry's instance),
    /// asks `decide`, and writes the entries it returns (if any) with the
    /// resourceVersion read, leaving out those that no longer count. Of two
    /// replicas deciding at the same moment one is refused, reads the other's
    /// entry and decides again.
    pub async fn reserve<T>(
        &self,
        now: Timestamp,
        seen: impl Fn(&Entry) -> Seen,
        mut decide: impl FnMut(&[Entry]) -> (T, Vec<Entry>),
    ) -> Result<T, kube::Error> {
        let mut copy = self.copy.lock().await;
        let mut answer = None;
        let write = |entries: &[Entry]| {
            let (a, new) = decide(entries);
            answer = Some(a);
            new
        };
        self.commit(&mut copy, now, seen, write).await?;
        Ok(answer.expect("commit decides at least once"))
    }

    /// Reserves the hosts of `reservation` (a conflict when another
    /// instance's entry holds one: nothing written), written together with
    /// every other reservation of this process waiting for the same write,
    /// each decided on what those before it took
    /// (`shard::ledger::reserve_hosts_in_order`).
    ///
    /// A reservation whose reconcile is dropped while it waits may still be
    /// written by the next write: its entry then holds its hosts for the
    /// instance that asked for them, until its TTL or its Ingress.
    pub async fn reserve_hosts(
        &self,
        now: Timestamp,
        seen: impl Fn(&Entry) -> Seen,
        reservation: HostReservation,
    ) -> Result<Option<Conflict>, kube::Error> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.waiting.lock().unwrap().push(Waiting {
            reservation,
            answer,
        });
        {
            let mut copy = self.copy.lock().await;
            // Whoever holds the copy next writes every reservation waiting
            // then: this one's, or it was written by a write before.
            let batch = std::mem::take(&mut *self.waiting.lock().unwrap());
            if !batch.is_empty() {
                self.write_batch(&mut copy, now, seen, batch).await;
            }
        }
        answered.await.unwrap_or_else(|_| {
            // The reconcile that was writing it was dropped mid-write.
            Err(ledger_failure(
                503,
                "the write of this reservation was cut off",
            ))
        })
    }

    async fn write_batch(
        &self,
        copy: &mut Option<ConfigMap>,
        now: Timestamp,
        seen: impl Fn(&Entry) -> Seen,
        batch: Vec<Waiting>,
    ) {
        let (reservations, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.reservation, w.answer)).unzip();
        let mut decided = Vec::new();
        let write = |entries: &[Entry]| {
            let (conflicts, new) = ledger::reserve_hosts_in_order(&reservations, entries);
            decided = conflicts;
            new
        };
        let written = self.commit(copy, now, seen, write).await;
        for (i, answer) in answers.into_iter().enumerate() {
            let result = match &written {
                Ok(()) => Ok(decided.get(i).cloned().flatten()),
                Err(e) => Err(shared_error(e)),
            };
            // A reconcile that stopped waiting has no one to tell.
            let _ = answer.send(result);
        }
    }

    /// The one write of a reservation (or a batch of them): read (the copy
    /// when there is one), decide, write with the resourceVersion read; a
    /// write refused because another came first reads again and decides
    /// again. `decide` is asked at least once. A ledger with an entry dated
    /// ahead (`ledger::dated_ahead`) is written with it re-dated to this
    /// process's clock even when nothing is reserved.
    async fn commit(
        &self,
        copy: &mut Option<ConfigMap>,
        now: Timestamp,
        seen: impl Fn(&Entry) -> Seen,
        mut decide: impl FnMut(&[Entry]) -> Vec<Entry>,
    ) -> Result<(), kube::Error> {
        let mut read = Read::Copy;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if copy.is_none() || read == Read::Fresh {
                *copy = self.get().await?;
                read = Read::Fresh;
            }
            let text = copy
                .as_ref()
                .and_then(|cm| cm.data.as_ref()?.get(DATA_KEY).cloned());
            let parsed = ledger::parse(text.as_deref());
            // Written though nothing is reserved: kept as it is, it would
            // count for a TTL from its own date.
            let dated_ahead = parsed.iter().any(|e| ledger::dated_ahead(&e.at, now));
            let parsed = ledger::redated(parsed, now);
            let entries: Vec<Entry> = ledger::live(parsed, now, ledger::TTL)
                .into_iter()
                .filter(|e| ledger::stands(e, seen(e), now))
                .collect();
            let new = decide(&entries);
            if new.is_empty() && !dated_ahead {
                if read == Read::Copy {
                    // Another replica may have ended what held this back.
                    read = Read::Fresh;
                    attempt -= 1;
                    continue;
                }
                return Ok(());
            }
            let entries = new.into_iter().fold(entries, ledger::with);
            let written = match copy.take() {
                Some(cm) => self.replace(cm, &entries).await,
                None => self.create(&entries).await,
            };
            match written {
                Ok(cm) => {
                    self.writes.inc();
                    *copy = Some(cm);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < ATTEMPTS => {
                    self.refused.inc();
                    read = Read::Fresh;
                }
                Err(kube::Error::Api(s)) if s.code == 422 && attempt < ATTEMPTS => {
                    tracing::warn!(ledger = %self.name, error = %s.message, "the shared ledger refuses writes; replacing it");
                    self.delete().await?;
                    read = Read::Fresh;
                }
                Err(e) => {
                    if matches!(&e, kube::Error::Api(s) if s.code == 409) {
                        self.refused.inc();
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Writes to this ledger that succeeded (one per batch of host
    /// reservations).
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    /// Writes this process's reservations on this ledger have had refused
    /// because another write came first.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }

    async fn get(&self) -> Result<Option<ConfigMap>, kube::Error> {
        bounded(self.api.get_opt(&self.name)).await
    }

    /// Deletes a ledger that refuses every write (someone made it immutable,
    /// or grew it past what the apiserver accepts): the next attempt creates
    /// it again with the entries that still count, which it was read for.
    async fn delete(&self) -> Result<(), kube::Error> {
        match bounded(self.api.delete(&self.name, &DeleteParams::default())).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Ends the entry of `key` for `uid`, if it is there.
    pub async fn remove(&self, key: &str, uid: &str) -> Result<(), kube::Error> {
        let mut copy = self.copy.lock().await;
        for attempt in 1..=ATTEMPTS {
            // Always a fresh read: an entry this copy does not show may have
            // been written since by a replica this one took over from.
            *copy = self.get().await?;
            let Some(cm) = copy.take() else {
                return Ok(());
            };
            let text = cm.data.as_ref().and_then(|d| d.get(DATA_KEY).cloned());
            let mut entries = ledger::parse(text.as_deref());
            let before = entries.len();
            entries.retain(|e| !(e.key == key && e.uid == uid));
            if entries.len() == before {
                *copy = Some(cm);
                return Ok(());
            }
            match self.replace(cm, &entries).await {
                Ok(cm) => {
                    *copy = Some(cm);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < ATTEMPTS => {
                    self.refused.inc();
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn replace(
        &self,
        mut cm: ConfigMap,
        entries: &[Entry],
    ) -> Result<ConfigMap, kube::Error> {
        cm.data = Some(BTreeMap::from([(
            DATA_KEY.to_string(),
            ledger::render(entries),
        )]));
        // The ledger's content is its one key; anything else is someone's.
        cm.binary_data = None;
        cm.metadata.managed_fields = None;
        bounded(self.api.replace(&self.name, &PostParams::default(), &cm)).await
    }

    async fn create(&self, entries: &[Entry]) -> Result<ConfigMap, kube::Error> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([(LABEL_SHARDS_OF.to_string(), self.base.clone())].into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                ledger::render(entries),
            )])),
            ..Default::default()
        };
        bounded(self.api.create(&PostParams::default(), &cm)).await
    }
}

/// A ledger request that does not answer within [`REQUEST`] fails as a
/// gateway timeout would (transient: its reconcile is retried).
async fn bounded<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(REQUEST, request).await {
        Ok(answered) => answered,
        Err(_) => Err(ledger_failure(
            504,
            &format!("the shared ledger did not answer within {REQUEST:?}"),
        )),
    }
}

/// A ledger failure as the apiserver would answer it (transient: the
/// reconcile is retried).
fn ledger_failure(code: u16, message: &str) -> kube::Error {
    let reason = if code == 504 {
        "Timeout"
    } else {
        "ServiceUnavailable"
    };
    kube::Error::Api(
        kube::core::Status::failure(message, reason)
            .with_code(code)
            .boxed(),
    )
}

/// The failure of a batch's write, for each reservation in it (the error
/// itself can be given only once).
fn shared_error(e: &kube::Error) -> kube::Error {
    match e {
        kube::Error::Api(s) => kube::Error::Api(s.clone()),
        other => ledger_failure(503, &format!("writing the shared ledger: {other}")),
    }
}

/// What the instance cache shows of an entry's instance (`ledger::stands`):
/// a lookup of the instance the entry names, not a scan of the fleet (each
/// reservation asks this of every live entry).
pub fn seen(instances: &Store<KuraInstance>, entry: &Entry) -> Seen {
    seen_unless(instances, entry, |_| false)
}

/// [`seen`], where the entry's instance is [`Seen::Out`] when `out` says it
/// can hold nothing of what the entry reserves (of the budget: paused or
/// being deleted).
pub fn seen_unless(
    instances: &Store<KuraInstance>,
    entry: &Entry,
    out: impl Fn(&KuraInstance) -> bool,
) -> Seen {
    let Some((namespace, name)) = ledger::instance_of(entry).split_once('/') else {
        return Seen::Nothing;
    };
    match instances.get(&ObjectRef::new(name).within(namespace)) {
        None => Seen::Nothing,
        Some(i) if i.metadata.uid.as_deref() != Some(entry.uid.as_str()) => Seen::Replaced,
        Some(i) if out(&i) => Seen::Out,
        Some(_) => Seen::Instance,
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    use super::*;

    fn instance(namespace: &str, name: &str, uid: &str) -> KuraInstance {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"account": "a", "region": "r", "image": "k:1", "storage": {"size": "1Gi"}},
        }))
        .unwrap()
    }

    fn entry(key: &str, uid: &str, owner: Option<&str>) -> Entry {
        Entry {
            key: key.into(),
            uid: uid.into(),
            owner: owner.map(Into::into),
            at: Timestamp::now().to_string(),
            canary: false,
        }
    }

    #[test]
    fn an_entry_is_seen_by_the_instance_it_names_and_its_uid() {
        let mut writer = Writer::<KuraInstance>::default();
        writer.apply_watcher_event(&Event::Apply(instance("a", "one", "u1")));
        let store = writer.as_reader();
        // An admission's key is its instance; a host's entry names its owner.
        assert_eq!(seen(&store, &entry("a/one", "u1", None)), Seen::Instance);
        let host = entry("h.example.com", "u1", Some("a/one"));
        assert_eq!(seen(&store, &host), Seen::Instance);
        // An earlier instance of the name, or a forged uid: the name is taken.
        assert_eq!(seen(&store, &entry("a/one", "u0", None)), Seen::Replaced);
        assert_eq!(seen(&store, &entry("b/one", "u1", None)), Seen::Nothing);
        assert_eq!(seen(&store, &entry("not-a-key", "u1", None)), Seen::Nothing);
        // Out (for the budget: paused or being deleted) only as the instance
        // of the entry's uid.
        let out = |i: &KuraInstance| i.metadata.name.as_deref() == Some("one");
        let mine = entry("a/one", "u1", None);
        assert_eq!(seen_unless(&store, &mine, out), Seen::Out);
        let earlier = entry("a/one", "u0", None);
        assert_eq!(seen_unless(&store, &earlier, out), Seen::Replaced);
    }
}
