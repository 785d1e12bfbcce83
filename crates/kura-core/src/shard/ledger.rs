//! A ledger shared by the replicas of a sharded fleet: what one replica has
//! just reserved (a slot of the fleet budget, a host) that the others' caches
//! may not show yet. In one process the memory record covers that moment;
//! across replicas it is an object in the cluster, written only with the
//! resourceVersion that was read, so of two replicas reserving at the same
//! moment one is refused (409), reads again and decides again. An entry lasts
//! `ttl`, long enough for every cache to show what it reserved (the admission
//! record, the Ingress); after that the cluster is the record.
//!
//! Anyone who may write the ConfigMap can write an entry, and a replica's
//! clock may run ahead of another's, so an entry's date is not trusted
//! either ([`age`]): one dated more than [`SKEW`] ahead of the reader's clock
//! is re-dated to that clock when the reader writes the ledger, which it does
//! at once ([`redated`]); one dated less counts from its date. So no entry
//! counts for longer than `ttl + SKEW` after a replica first reads it, and
//! none is lost because its writer's clock runs fast. An entry whose
//! instance is gone, paused or being deleted holds no slot of the budget
//! ([`stands`]).

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The data key of the ledger's ConfigMap.
pub const DATA_KEY: &str = "entries";

/// How long an entry counts: the memory record's bound for an admission the
/// cache does not show yet.
pub const TTL: Duration = Duration::from_secs(60);

/// One reservation: `key` (an instance's `namespace/name`, or a host) for the
/// instance of `uid`, made at `at`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub key: String,
    pub uid: String,
    /// The instance's `namespace/name`, for a host's entry (the budget's
    /// key is the instance already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// RFC 3339, as the status records keep time.
    pub at: String,
    /// For an admission: a canary goes first in the budget's order.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canary: bool,
}

/// The entries of a ledger's text. Text nobody can read (written by hand)
/// holds nothing: the ledger only ever narrows what a replica would do alone,
/// and the next write replaces it.
pub fn parse(text: Option<&str>) -> Vec<Entry> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

pub fn render(entries: &[Entry]) -> String {
    serde_json::to_string(entries).unwrap_or_else(|_| "[]".into())
}

/// How far ahead of the reader's clock an entry may be dated and keep its
/// date: the writer's clock may run ahead of the reader's by that much.
/// Nodes' clocks are kept within milliseconds of each other (NTP); 5 s
/// leaves room for one that is off by far more, and is small beside the
/// TTL (a forged entry gains at most that) and beside [`UNSEEN`].
pub const SKEW: Duration = Duration::from_secs(5);

/// How old an entry dated `at` is at `now`, or `None` when it cannot count
/// (unreadable). One dated ahead is as old as one written now: it counts,
/// and is [`redated`] when the ledger is next written.
pub fn age(at: &str, now: Timestamp) -> Option<Duration> {
    let at = at.parse::<Timestamp>().ok()?;
    Some(Duration::try_from(now.duration_since(at)).unwrap_or_default())
}

/// Whether an entry dated `at` is dated more than [`SKEW`] ahead of `now`:
/// a hand wrote that, or a clock that runs fast. Left as it is, it would
/// count for a TTL from its date (one dated 59 s ahead: 119 s in all); so a
/// replica that reads one writes the ledger at once with it [`redated`].
pub fn dated_ahead(at: &str, now: Timestamp) -> bool {
    at.parse::<Timestamp>()
        .is_ok_and(|at| Duration::try_from(at.duration_since(now)).is_ok_and(|ahead| ahead > SKEW))
}

/// `entries` with those [`dated_ahead`] of `now` dated `now`: each counts
/// for a TTL from when a replica first read it, and an entry of a replica
/// whose clock runs fast is kept (dropping it would free what it reserves).
pub fn redated(entries: Vec<Entry>, now: Timestamp) -> Vec<Entry> {
    entries
        .into_iter()
        .map(|mut e| {
            if dated_ahead(&e.at, now) {
                e.at = now.to_string();
            }
            e
        })
        .collect()
}

/// Whether an entry dated `at` still counts at `now`: younger than `ttl`
/// by [`age`].
pub fn counts(at: &str, now: Timestamp, ttl: Duration) -> bool {
    age(at, now).is_some_and(|age| age < ttl)
}

/// The entries that still count at `now` ([`counts`]).
pub fn live(entries: Vec<Entry>, now: Timestamp, ttl: Duration) -> Vec<Entry> {
    entries
        .into_iter()
        .filter(|e| counts(&e.at, now, ttl))
        .collect()
}

/// How long an entry for an instance the instance cache does not show at
/// all still counts: a healthy watch lags by far less, and an instance is
/// in the cluster for longer than that before it holds anything (it was
/// Ready and queued before its admission; it was created before its grant).
pub const UNSEEN: Duration = Duration::from_secs(10);

/// What the instance cache (unfiltered: every replica caches the whole
/// fleet) shows of an entry's instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The instance of the entry's uid.
    Instance,
    /// The instance of the entry's uid, which can hold nothing of what the
    /// entry reserves (of the budget: it is paused or being deleted, and the
    /// fleet counts no slot for it either).
    Out,
    /// Another instance of the entry's `namespace/name`: the entry's was
    /// deleted (and the name taken again).
    Replaced,
    /// Neither.
    Nothing,
}

/// The instance an entry is for, `namespace/name`: a host's entry names its
/// owner, an admission's key is the instance.
pub fn instance_of(entry: &Entry) -> &str {
    entry.owner.as_deref().unwrap_or(&entry.key)
}

/// Whether an entry still stands against the caches. The ledger is not a
/// trusted store (anyone who may write the ConfigMap can add to it), and a
/// replica may die between its reservation and what would have ended it; so
/// an entry whose instance is gone holds nothing: at once when another
/// instance has its name, after [`UNSEEN`] when the cache shows no instance
/// of it at all. Nor does one whose instance is out ([`Seen::Out`]). Any
/// other entry stands for its TTL ([`live`]).
pub fn stands(entry: &Entry, seen: Seen, now: Timestamp) -> bool {
    match seen {
        Seen::Instance => true,
        Seen::Replaced | Seen::Out => false,
        Seen::Nothing => counts(&entry.at, now, UNSEEN),
    }
}

/// `entries` with `entry` in place of any other of its key.
pub fn with(mut entries: Vec<Entry>, entry: Entry) -> Vec<Entry> {
    entries.retain(|e| e.key != entry.key);
    entries.push(entry);
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    entries
}

/// Who else holds `key` in the ledger: an entry for another instance.
pub fn held_by_another<'a>(entries: &'a [Entry], key: &str, uid: &str) -> Option<&'a Entry> {
    entries.iter().find(|e| e.key == key && e.uid != uid)
}

/// The hosts of `wanted` that other instances' entries hold, as the claims'
/// conflict: each asked again for when its entry ends (by then the holder's
/// Ingress is in every cache, or it never came and the host is free).
pub fn host_conflict(
    wanted: &[crate::claims::HostClaim],
    entries: &[Entry],
    uid: &str,
    ttl: Duration,
) -> Option<crate::claims::Conflict> {
    let lost: Vec<crate::claims::Lost> = wanted
        .iter()
        .filter_map(|claim| {
            let held = held_by_another(entries, &claim.host, uid)?;
            let owner = held.owner.as_deref().unwrap_or_default();
            let (namespace, name) = owner.split_once('/').unwrap_or(("", owner));
            let at = held.at.parse::<Timestamp>().ok()?;
            Some(crate::claims::Lost {
                field: claim.field.clone(),
                host: claim.host.clone(),
                holder: crate::claims::Claimant {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid: held.uid.clone(),
                    created: None,
                },
                holder_serves: false,
                also_served_here: false,
                reserved_until: Some(crate::time::later(at, ttl)),
            })
        })
        .collect();
    (!lost.is_empty()).then_some(crate::claims::Conflict(lost))
}

/// A reservation of the hosts `wanted` (those it serves by no Ingress yet)
/// for the instance `uid`, `owner` (`namespace/name`), made at `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostReservation {
    pub uid: String,
    pub owner: String,
    pub wanted: Vec<crate::claims::HostClaim>,
    pub at: Timestamp,
}

/// Decides `reservation` on `entries`: a conflict when another instance's
/// entry holds one of its hosts (nothing written), else its entries.
pub fn reserve_hosts(
    reservation: &HostReservation,
    entries: &[Entry],
) -> (Option<crate::claims::Conflict>, Vec<Entry>) {
    if let Some(conflict) = host_conflict(&reservation.wanted, entries, &reservation.uid, TTL) {
        return (Some(conflict), Vec::new());
    }
    let mine = reservation.wanted.iter().map(|claim| Entry {
        key: claim.host.clone(),
        uid: reservation.uid.clone(),
        owner: Some(reservation.owner.clone()),
        at: reservation.at.to_string(),
        canary: false,
    });
    (None, mine.collect())
}

/// Decides `reservations` one after another on `entries`, each on what the
/// ones before it added, as if each had been written alone: the answer of
/// each, and every entry to write. Of two reservations of one host in one
/// batch the first is granted and the second is its conflict.
pub fn reserve_hosts_in_order(
    reservations: &[HostReservation],
    entries: &[Entry],
) -> (Vec<Option<crate::claims::Conflict>>, Vec<Entry>) {
    let mut all = entries.to_vec();
    let mut new = Vec::new();
    let answers = reservations
        .iter()
        .map(|reservation| {
            let (conflict, mine) = reserve_hosts(reservation, &all);
            for entry in mine {
                all = with(std::mem::take(&mut all), entry.clone());
                new.push(entry);
            }
            conflict
        })
        .collect();
    (answers, new)
}

/// The budget's order key of an admission entry (`namespace/name`).
pub fn order_key(entry: &Entry) -> Option<crate::rollout::OrderKey> {
    let (namespace, name) = entry.key.split_once('/')?;
    Some(crate::rollout::OrderKey {
        not_canary: !entry.canary,
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}
