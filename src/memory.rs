//! What this process remembers about each instance (and, in a memory of its
//! own, each gateway) between reconciles, in one
//! record per uid with one lifetime: it is created by the first reconcile that
//! has something to remember, and dropped when the instance leaves the cache
//! ([`Memory::retain`], run on every resync tick) or is seen deleted.
//!
//! Nothing here overrides what the cluster says once the cluster has caught up:
//! the status this process wrote is used only while the cache still holds an
//! *older* version of the instance ([`Memory::recall`]); a status written by
//! anyone else later (an administrator clearing `retry`) wins at once.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use kube::Resource;

use kura_core::api::{KuraGateway, KuraGatewayStatus, KuraInstance, KuraInstanceStatus};
use kura_core::endpoint::Answer;
use kura_core::endpoint::Target;

mod endpoint;
pub use endpoint::{EndpointMemo, EndpointRecall, Refresh};

/// An object remembered: a resource with a status.
pub trait Remembered: Resource {
    type Status: Clone + std::fmt::Debug + Default;
    fn status(&self) -> Option<&Self::Status>;
}

impl Remembered for KuraInstance {
    type Status = KuraInstanceStatus;
    fn status(&self) -> Option<&KuraInstanceStatus> {
        self.status.as_ref()
    }
}

impl Remembered for KuraGateway {
    type Status = KuraGatewayStatus;
    fn status(&self) -> Option<&KuraGatewayStatus> {
        self.status.as_ref()
    }
}

pub struct Memory<K: Remembered = KuraInstance> {
    records: Mutex<HashMap<String, Record<K::Status>>>,
}

impl<K: Remembered> Default for Memory<K> {
    fn default() -> Self {
        Memory {
            records: Mutex::default(),
        }
    }
}

/// One object's memory.
#[derive(Clone, Debug)]
pub struct Record<S> {
    /// The status this process last wrote, until the cache catches up with
    /// `own_rv`. Boxed: a record per instance is kept for the process's
    /// life, a status only for moments.
    own_status: Option<Box<S>>,
    /// The resourceVersion this process's last status write produced (none
    /// when it is not a number: then nothing is known and the cluster wins).
    /// Kept after the copy goes: a reconcile handed an older instance than
    /// the cache has since shown is told so ([`Recall::behind`]).
    own_rv: Option<NonZeroU64>,
    /// When this process last wrote the status (`status::worth`).
    status_written_at: Option<Instant>,
    /// This process's last successful apply: the inputs it applied, and when.
    last_apply: Option<(String, Instant)>,
    /// Consecutive transient failures of one set of inputs.
    transient: Option<TransientStreak>,
    /// This process admitted the instance to a rollout of the fleet budget,
    /// and when; the cache may not show that status write yet
    /// ([`Memory::take_slot`]).
    admitted: Option<(kura_core::rollout::OrderKey, Instant)>,
    /// Its endpoint's last answer and the check running (`memory::endpoint`).
    endpoint: Option<Box<EndpointMemo>>,
}

impl<S> Default for Record<S> {
    fn default() -> Self {
        Record {
            own_status: None,
            own_rv: None,
            status_written_at: None,
            last_apply: None,
            transient: None,
            admitted: None,
            endpoint: None,
        }
    }
}

impl<S> Record<S> {
    /// The status copy goes once the cache's version `cached_rv` is at least
    /// the one our write produced (`recall` and `observed` both ask).
    fn drop_status_if_caught_up(&mut self, cached_rv: Option<&str>) {
        if caught_up(cached_rv, self.own_rv) {
            self.own_status = None;
        }
    }
}

use kura_core::outcome::TransientStreak;

/// What a reconcile reads from memory, once, at its start.
#[derive(Clone, Debug, Default)]
pub struct Recall<S = KuraInstanceStatus> {
    /// The status to decide from: the cache's, or the one this process wrote
    /// if the cache has not caught up with that write yet.
    pub status: Option<S>,
    pub since_status_written: Option<Duration>,
    /// The inputs key of this process's last apply if it was within `window`.
    pub recently_applied: Option<String>,
    pub transient: Option<TransientStreak>,
    /// The instance given is older than a status write of this process that
    /// the cache has already shown (and the copy of it is gone): the pass was
    /// handed the instance before the watch delivered that write. Read the
    /// cache again; deciding from the older status would undo what the write
    /// recorded (a whole revision sent again, as if never applied).
    pub behind: bool,
}

/// Whether the cache's resourceVersion `cached` is at least as new as `ours`.
/// resourceVersions are opaque by contract, but every apiserver backed by etcd
/// issues increasing integers; where either does not parse, nothing is known
/// and the cluster wins.
fn caught_up(cached: Option<&str>, ours: Option<NonZeroU64>) -> bool {
    match (cached.and_then(|c| c.parse::<u64>().ok()), ours) {
        (Some(c), Some(o)) => c >= o.get(),
        _ => true,
    }
}

impl<K: Remembered> Memory<K> {
    pub fn recall(&self, instance: &K, settle: Duration) -> Recall<K::Status> {
        let cached = instance.status().cloned();
        let Some(uid) = instance.meta().uid.as_deref() else {
            return Recall {
                status: cached,
                ..Recall::default()
            };
        };
        let mut records = self.records.lock().unwrap();
        let Some(record) = records.get_mut(uid) else {
            return Recall {
                status: cached,
                ..Recall::default()
            };
        };
        let cached_rv = instance.meta().resource_version.as_deref();
        record.drop_status_if_caught_up(cached_rv);
        let behind = record.own_status.is_none() && !caught_up(cached_rv, record.own_rv);
        let status = match record.own_status.as_deref() {
            Some(own) => Some(own.clone()),
            None => cached,
        };
        Recall {
            behind,
            status,
            since_status_written: record.status_written_at.map(|t| t.elapsed()),
            recently_applied: record
                .last_apply
                .as_ref()
                .filter(|(_, at)| at.elapsed() < settle)
                .map(|(key, _)| key.clone()),
            transient: record.transient.clone(),
        }
    }

    fn with(&self, instance: &K, f: impl FnOnce(&mut Record<K::Status>)) {
        if let Some(uid) = &instance.meta().uid {
            f(self.records.lock().unwrap().entry(uid.clone()).or_default());
        }
    }

    pub fn applied(&self, instance: &K, inputs_key: &str) {
        self.with(instance, |r| {
            r.last_apply = Some((inputs_key.to_string(), Instant::now()))
        });
    }

    /// The cache now holds `instance`: a status copy this process kept for
    /// it is dropped once the cache shows that write (or a later one). Run
    /// on every instance the watch delivers, so that a copy lives for the
    /// moments until the cache catches up, not until the instance's next
    /// reconcile: a fleet-wide change writes every instance's status, and
    /// without this the copies stayed until each one's next resync (2.5 MB
    /// of the peak heap at N=1000; docs/benchmarks.md, "Where the heap goes").
    pub fn observed(&self, instance: &K) {
        let Some(uid) = instance.meta().uid.as_deref() else {
            return;
        };
        if let Some(record) = self.records.lock().unwrap().get_mut(uid) {
            record.drop_status_if_caught_up(instance.meta().resource_version.as_deref());
        }
    }

    pub fn status_written(&self, instance: &K, rv_after: Option<String>, status: &K::Status) {
        self.with(instance, |r| {
            r.status_written_at = Some(Instant::now());
            r.own_rv = rv_after.and_then(|rv| rv.parse().ok());
            r.own_status = r.own_rv.map(|_| Box::new(status.clone()));
        });
    }

    /// Counts a transient failure of `inputs_key`; a failure of other inputs
    /// starts a new streak. Returns the streak.
    pub fn transient_failure(
        &self,
        instance: &K,
        inputs_key: &str,
        now: Timestamp,
    ) -> TransientStreak {
        let mut out = None;
        self.with(instance, |r| {
            let streak = match r.transient.take() {
                Some(mut s) if s.inputs_key == inputs_key => {
                    s.failures = s.failures.saturating_add(1);
                    s
                }
                _ => TransientStreak::start(inputs_key, now),
            };
            out = Some(streak.clone());
            r.transient = Some(streak);
        });
        out.unwrap_or_else(|| TransientStreak::start(inputs_key, now))
    }

    /// A reconcile got through: the transient streak is over.
    pub fn transient_over(&self, instance: &K) {
        if let Some(uid) = &instance.meta().uid
            && let Some(r) = self.records.lock().unwrap().get_mut(uid)
        {
            r.transient = None;
        }
    }

    pub fn forget(&self, uid: &str) {
        self.records.lock().unwrap().remove(uid);
    }

    /// Drops the records of instances no longer in `live` (deleted, or moved
    /// out of scope).
    pub fn retain(&self, live: &HashSet<String>) {
        self.records
            .lock()
            .unwrap()
            .retain(|uid, _| live.contains(uid));
    }

    pub fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An admission to the fleet budget counts from this process's memory until
/// the cache shows the instance no longer waiting (admitted, counted from
/// there, or already Ready again and cleared), or for a minute at most (its
/// status write failed: the slot is given back).
pub const ADMISSION_PENDING_AT_MOST: Duration = Duration::from_secs(60);

impl Memory<KuraInstance> {
    /// The admissions this process made that the cache does not show yet
    /// (`still_waiting(uid)`: the cache shows that instance waiting); the
    /// others are forgotten. Reconciles run concurrently: without these,
    /// several could see the same free slot in the cache and all take it.
    pub fn pending_admissions(
        &self,
        still_waiting: impl Fn(&str) -> bool,
    ) -> Vec<kura_core::rollout::OrderKey> {
        let mut records = self.records.lock().unwrap();
        pending_in(&mut records, &still_waiting)
    }

    /// Takes a slot of the budget for `instance` if `decide`, given the
    /// pending admissions, admits it (counted): one decision at a time, under
    /// the memory's lock, so that two reconciles never take one slot.
    pub fn take_slot(
        &self,
        instance: &KuraInstance,
        key: kura_core::rollout::OrderKey,
        still_waiting: impl Fn(&str) -> bool,
        decide: impl FnOnce(&[kura_core::rollout::OrderKey]) -> kura_core::rollout::Admission,
    ) -> kura_core::rollout::Admission {
        let mut records = self.records.lock().unwrap();
        let pending = pending_in(&mut records, &still_waiting);
        let admission = decide(&pending);
        if admission == (kura_core::rollout::Admission::Admit { counted: true })
            && let Some(uid) = &instance.metadata.uid
        {
            records.entry(uid.clone()).or_default().admitted = Some((key, Instant::now()));
        }
        admission
    }
}

impl Memory<KuraInstance> {
    /// A reconcile's look at the instance's endpoint at `target`
    /// ([`EndpointMemo::look`]): the last answer, and whether to ask now (then
    /// a check is counted as running until [`Memory::endpoint_answered`]).
    pub fn endpoint_look(
        &self,
        instance: &KuraInstance,
        target: &Target,
        refresh: Refresh,
    ) -> EndpointRecall {
        let mut recall = EndpointRecall {
            last: None,
            ask: true,
        };
        self.with(instance, |r| {
            recall = r
                .endpoint
                .get_or_insert_with(|| Box::new(EndpointMemo::new(target)))
                .look(target, Instant::now(), refresh);
        });
        recall
    }

    /// Whether the instance `uid` is remembered with an endpoint check (not
    /// deleted since: `retain` drops the records of those gone).
    pub fn has_endpoint(&self, uid: &str) -> bool {
        self.records
            .lock()
            .unwrap()
            .get(uid)
            .is_some_and(|r| r.endpoint.is_some())
    }

    /// A check of the instance `uid`'s endpoint at `target` ended: whether
    /// its answer changes what was known. Nothing is recorded for an instance
    /// already forgotten (deleted while its check ran).
    pub fn endpoint_answered(&self, uid: &str, target: &Target, answer: Answer) -> bool {
        let mut records = self.records.lock().unwrap();
        let Some(memo) = records.get_mut(uid).and_then(|r| r.endpoint.as_mut()) else {
            return false;
        };
        memo.answered(target, answer, Instant::now())
    }
}

fn pending_in<S>(
    records: &mut HashMap<String, Record<S>>,
    still_waiting: &impl Fn(&str) -> bool,
) -> Vec<kura_core::rollout::OrderKey> {
    let mut pending = Vec::new();
    for (uid, record) in records.iter_mut() {
        let Some((key, at)) = &record.admitted else {
            continue;
        };
        if at.elapsed() < ADMISSION_PENDING_AT_MOST && still_waiting(uid) {
            pending.push(key.clone());
        } else {
            record.admitted = None;
        }
    }
    pending
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use std::num::NonZeroU64;

    use super::{Memory, caught_up};
    use kura_core::api::{KuraInstance, KuraInstanceStatus, Phase, RetryStatus};

    fn instance(uid: &str, rv: &str, status: Option<KuraInstanceStatus>) -> KuraInstance {
        let mut i: KuraInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": {"account": "a", "region": "r", "image": "k:1", "storage": {"size": "1Gi"}},
        }))
        .unwrap();
        i.status = status;
        i
    }

    fn phase(p: Phase) -> KuraInstanceStatus {
        KuraInstanceStatus {
            phase: Some(p),
            ..Default::default()
        }
    }

    const SETTLE: Duration = Duration::from_secs(3);

    #[test]
    fn resource_versions_compare_as_numbers_and_unknown_forms_let_the_cluster_win() {
        let ten = NonZeroU64::new(10);
        assert!(!caught_up(Some("9"), ten));
        assert!(caught_up(Some("10"), ten));
        assert!(caught_up(Some("11"), ten));
        assert!(caught_up(None, ten));
        assert!(caught_up(Some("abc"), ten));
        // Our write's version did not parse (`status_written` keeps none).
        assert!(caught_up(Some("x"), None));
    }

    #[test]
    fn own_status_is_used_only_until_the_cache_catches_up() {
        let m = Memory::default();
        let old = instance("u", "10", Some(phase(Phase::Activating)));
        m.status_written(&old, Some("12".into()), &phase(Phase::Ready));
        // The cache still holds version 10 (or an intermediate 11): ours is fresher.
        assert_eq!(m.recall(&old, SETTLE).status, Some(phase(Phase::Ready)));
        let mid = instance("u", "11", Some(phase(Phase::Activating)));
        assert_eq!(m.recall(&mid, SETTLE).status, Some(phase(Phase::Ready)));
        // Caught up: the cache is used, and the remembered copy is dropped.
        let caught = instance("u", "12", Some(phase(Phase::Ready)));
        assert_eq!(m.recall(&caught, SETTLE).status, Some(phase(Phase::Ready)));
        assert_eq!(m.recall(&old, SETTLE).status, old.status);
    }

    #[test]
    fn the_status_copy_is_dropped_when_the_watch_delivers_the_write_not_at_the_next_reconcile() {
        let m = Memory::default();
        let old = instance("u", "10", Some(phase(Phase::Activating)));
        m.status_written(&old, Some("12".into()), &phase(Phase::Ready));
        // An event of an older version (another writer's, before ours) keeps it.
        m.observed(&instance("u", "11", Some(phase(Phase::Activating))));
        assert_eq!(m.recall(&old, SETTLE).status, Some(phase(Phase::Ready)));
        // The watch delivers our write: the copy goes, with no reconcile
        // (`recall`) in between; a reconcile handed the older instance
        // before that is told it is behind (`reconcile` reads the cache
        // again), and one handed the cache's version is not.
        m.observed(&instance("u", "12", Some(phase(Phase::Ready))));
        assert!(m.records.lock().unwrap()["u"].own_status.is_none());
        let stale = m.recall(&old, SETTLE);
        assert!(stale.behind, "a pass handed version 10 after 12 was seen");
        let current = m.recall(&instance("u", "12", Some(phase(Phase::Ready))), SETTLE);
        assert!(!current.behind);
        assert_eq!(current.status, Some(phase(Phase::Ready)));
        // A later write by someone else is no reason to read again.
        assert!(!m.recall(&instance("u", "13", None), SETTLE).behind);
        // An instance with no record leaves none behind.
        m.observed(&instance("v", "3", None));
        assert!(!m.records.lock().unwrap().contains_key("v"));
    }

    #[test]
    fn a_newer_status_written_by_someone_else_wins_at_once() {
        let m = Memory::default();
        let failing = KuraInstanceStatus {
            retry: Some(RetryStatus {
                failures: 4,
                ..Default::default()
            }),
            ..Default::default()
        };
        m.status_written(&instance("u", "10", None), Some("20".into()), &failing);
        // An administrator cleared `retry` after our write: version 21.
        let cleared = instance("u", "21", Some(KuraInstanceStatus::default()));
        assert_eq!(
            m.recall(&cleared, SETTLE).status,
            Some(KuraInstanceStatus::default())
        );
    }

    #[test]
    fn a_transient_streak_belongs_to_one_set_of_inputs() {
        let m = Memory::default();
        let i = instance("u", "1", None);
        let now = jiff::Timestamp::now();
        assert_eq!(m.transient_failure(&i, "r1/", now).failures, 1);
        assert_eq!(m.transient_failure(&i, "r1/", now).failures, 2);
        // New inputs: a fresh streak, not the old count.
        assert_eq!(m.transient_failure(&i, "r2/", now).failures, 1);
        assert_eq!(m.recall(&i, SETTLE).transient.unwrap().failures, 1);
        m.transient_over(&i);
        assert!(m.recall(&i, SETTLE).transient.is_none());
    }

    #[test]
    fn records_of_instances_gone_from_the_cache_are_dropped() {
        let m = Memory::default();
        for uid in ["a", "b", "c"] {
            m.applied(&instance(uid, "1", None), "r/");
        }
        assert_eq!(m.len(), 3);
        m.retain(&HashSet::from(["b".to_string()]));
        assert_eq!(m.len(), 1);
        m.forget("b");
        assert!(m.is_empty());
    }

    #[test]
    fn a_recent_apply_is_remembered_for_the_settle_window_only() {
        let m = Memory::default();
        let i = instance("u", "1", None);
        m.applied(&i, "r/t");
        assert_eq!(
            m.recall(&i, SETTLE).recently_applied.as_deref(),
            Some("r/t")
        );
        assert_eq!(m.recall(&i, Duration::ZERO).recently_applied, None);
    }
}
