//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas only one reconciles.
//!
//! The protocol is client-go's: the holder renews `renewTime` every retry
//! period; every write is a replace carrying the resourceVersion that was read,
//! so two candidates can never both win the same transition (one gets 409). A
//! candidate judges expiry by its own clock — the holder's record has not
//! changed for `leaseDurationSeconds` since *this* process saw it change — so
//! clock skew between nodes does not matter. A standby watches the Lease, so a
//! released Lease (graceful shutdown) is taken over at once instead of after
//! the duration.
//!
//! Leading ends by the clock, not by an answer. A leader leads until the renew
//! deadline (two thirds of the duration) has passed since its last successful
//! renewal, measured on the monotonic clock from the moment that renewal was
//! *sent* (the apiserver stored it later, and a standby starts its count later
//! still, so the two can never overlap, however long the answer took). Every
//! Lease request is bounded by the time left before that deadline (a standby's
//! by the retry period), and the loop wakes at the deadline, so a hung request
//! cannot keep a leader leading: the role is withdrawn on time whatever is in
//! flight. Reconciles in flight at that moment are cancelled by
//! [`while_leading`], so the leader that let go writes nothing more.

// A writer module (docs/architecture.md, "Who writes"):
// it creates, renews and releases the leader Lease.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Unique per process: a restarted process must not mistake its
    /// predecessor's Lease for its own.
    pub identity: String,
    pub duration: Duration,
    /// Labels of a Lease this process creates (a shard's, a member's: the
    /// others find them by these); none on the single Lease of one shard.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The write fence this Lease holds open, and for which shard; `None`
    /// for a Lease that decides no writes (a replica's membership).
    pub fence: Option<(std::sync::Arc<crate::fence::Fence>, u32)>,
}

impl LeaseSettings {
    /// How often the holder renews and a standby re-reads.
    pub fn retry_period(&self) -> Duration {
        self.duration / 6
    }

    /// The holder stops leading when it could not renew for this long; a standby
    /// waits the whole duration, so the two never overlap.
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }
}

/// What this process knows about its role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderState {
    pub leading: bool,
    /// The Lease was read or written successfully within the lease duration:
    /// a standby in this state can take over when needed.
    pub healthy: bool,
}

/// `<pod name or host name>-<random>`.
pub fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kura-operator".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{host}-{:08x}", h.finish() as u32)
}

/// Campaigns for the Lease until `release` resolves, publishing the role on
/// `state`; then gives the Lease up if it holds it, so a standby takes over at
/// once. Call `release` only after the controllers have stopped.
pub async fn campaign(
    client: kube::Client,
    settings: LeaseSettings,
    state: watch::Sender<LeaderState>,
    release: impl std::future::Future<Output = ()>,
) {
    let (_always, want) = watch::channel(true);
    campaign_while_wanted(client, settings, state, want, release).await
}

/// [`campaign`], acquiring the Lease only while `want` says so. When `want`
/// turns false the Lease is given up at once (a shard handed to another
/// replica): the caller must have stopped acting for it first.
pub async fn campaign_while_wanted(
    client: kube::Client,
    settings: LeaseSettings,
    state: watch::Sender<LeaderState>,
    mut want: watch::Receiver<bool>,
    release: impl std::future::Future<Output = ()>,
) {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let changes = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", settings.name)),
    )
    .default_backoff()
    .boxed();
    let mut changes = changes.fuse();
    let mut candidate = Candidate::new(api, settings.clone());
    tokio::pin!(release);
    let mut first = true;
    let mut announce = |now: LeaderState| {
        if std::mem::take(&mut first) | (state.send_replace(now) != now) {
            tracing::info!(identity = %settings.identity, lease = %settings.name, leading = now.leading, healthy = now.healthy, "leader election state");
        }
    };
    loop {
        candidate.want = *want.borrow_and_update();
        if !candidate.want && candidate.role().leading {
            state.send_replace(LeaderState {
                leading: false,
                healthy: true,
            });
            give_up(&mut candidate).await;
            candidate.renewed_at = None;
            candidate.fence_renewed();
        }
        let budget = candidate.step_budget();
        tokio::select! {
            _ = &mut release => break,
            stepped = tokio::time::timeout(budget, candidate.step()) => {
                if stepped.is_err() {
                    tracing::warn!(lease = %settings.name, budget = ?budget, "the lease did not answer in time");
                }
            }
        }
        let now = candidate.role();
        announce(now);
        // The deadline of a leader that did not renew: wake then to let go.
        let withdraw = candidate.time_left();
        tokio::select! {
            _ = &mut release => break,
            _ = tokio::time::sleep(settings.retry_period()) => {}
            _ = tokio::time::sleep(withdraw.unwrap_or_default()), if withdraw.is_some() => {
                announce(candidate.role());
            }
            // The sender lives as long as the campaign's owner.
            changed = want.changed() => if changed.is_err() { break },
            // A standby wakes on every change of the Lease: a release is taken at once.
            Some(event) = changes.next(), if !now.leading => {
                if let Err(e) = event {
                    tracing::warn!(error = %e, lease = %settings.name, "watching the lease; polling meanwhile");
                }
            }
        }
    }
    let was_leading = state.borrow().leading;
    state.send_replace(LeaderState::default());
    candidate.fence_closed();
    if was_leading {
        give_up(&mut candidate).await;
    }
}

/// Releases the Lease, bounded: an unreachable apiserver must not hold up
/// an exit or a handover (a standby then takes it when it expires). The
/// fence is closed first: no write of ours follows the release.
async fn give_up(candidate: &mut Candidate) {
    candidate.fence_closed();
    let name = candidate.settings.name.clone();
    let identity = candidate.settings.identity.clone();
    let release = tokio::time::timeout(Duration::from_secs(5), candidate.release());
    match release
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
    {
        Ok(()) => tracing::info!(identity = %identity, lease = %name, "released the lease"),
        Err(e) => {
            tracing::warn!(error = %e, lease = %name, "could not release the lease; a standby takes over when it expires")
        }
    }
}

struct Candidate {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// resourceVersion of the Lease as last read, and when this process first saw it.
    observed: Option<(String, Instant)>,
    /// When the last successful write as holder was sent.
    renewed_at: Option<Instant>,
    last_ok: Option<Instant>,
    /// Since when this process's reads have found the Lease missing, without
    /// a gap between two of them (see [`may_create`]).
    absent_since: Option<Instant>,
    /// Whether to acquire the Lease when it is free (a holder always renews).
    want: bool,
}

impl Candidate {
    fn new(api: Api<Lease>, settings: LeaseSettings) -> Self {
        Candidate {
            api,
            settings,
            observed: None,
            renewed_at: None,
            last_ok: None,
            absent_since: None,
            want: true,
        }
    }

    /// Moves the write fence with the renewal (closes it when not held).
    fn fence_renewed(&self) {
        if let Some((fence, shard)) = &self.settings.fence {
            fence.renewed(*shard, self.renewed_at, self.settings.renew_deadline());
        }
    }

    /// Nothing more is written for this Lease: before it is released.
    fn fence_closed(&self) {
        if let Some((fence, shard)) = &self.settings.fence {
            fence.close(*shard);
        }
    }

    fn since_renew(&self) -> Option<Duration> {
        self.renewed_at.map(|t| t.elapsed())
    }

    fn role(&self) -> LeaderState {
        role(
            self.since_renew(),
            self.last_ok.map(|t| t.elapsed()),
            &self.settings,
        )
    }

    fn time_left(&self) -> Option<Duration> {
        time_left(self.since_renew(), &self.settings)
    }

    fn step_budget(&self) -> Duration {
        step_budget(self.since_renew(), &self.settings)
    }

    /// One read of the Lease and, when due, one write. Never fails: an error
    /// only ages the last success. Dropped when its budget runs out.
    async fn step(&mut self) {
        match self.try_step().await {
            Ok(renewal) => {
                self.last_ok = Some(Instant::now());
                match renewal {
                    Renewal::Sent(at) => self.renewed_at = Some(at),
                    Renewal::NotHeld => self.renewed_at = None,
                    // The previous renewal counts until its deadline.
                    Renewal::Unknown => {}
                }
                self.fence_renewed();
            }
            Err(e) => tracing::warn!(error = %e, lease = %self.settings.name, "leader election"),
        }
    }

    /// What this step did to the role: a write that makes this process the
    /// holder was sent at some instant, or it does not hold the Lease, or
    /// nobody can tell yet.
    async fn try_step(&mut self) -> Result<Renewal, kube::Error> {
        match self.api.get_opt(&self.settings.name).await? {
            None => self.lease_missing().await,
            Some(lease) => self.lease_read(lease).await,
        }
    }

    /// The Lease is not there: create it, if this process may (`may_create`).
    async fn lease_missing(&mut self) -> Result<Renewal, kube::Error> {
        let holding = self.role().leading;
        // A gap since the last read (a stall, failed reads): whatever
        // happened in it was not seen, so the count starts again.
        let gap = self
            .last_ok
            .is_none_or(|at| at.elapsed() > self.settings.duration / 3);
        if gap || self.absent_since.is_none() {
            self.absent_since = Some(Instant::now());
        }
        let absent_for = self.absent_since.map_or(Duration::ZERO, |at| at.elapsed());
        tracing::debug!(lease = %self.settings.name, holding, gap, absent_for = ?absent_for, "the lease is missing");
        if !self.want || !may_create(holding, absent_for, &self.settings) {
            return Ok(Renewal::NotHeld);
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                labels: (!self.settings.labels.is_empty()).then(|| self.settings.labels.clone()),
                ..Default::default()
            },
            spec: Some(self.held(None)),
        };
        let sent = Instant::now();
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Renewal::Sent(sent)),
            // Created by someone else meanwhile: read it next step.
            Err(kube::Error::Api(s)) if s.code == 409 && holding => Ok(Renewal::Unknown),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Renewal::NotHeld),
            Err(e) => Err(e),
        }
    }

    /// The Lease as read: renew it, acquire it, or stand by.
    async fn lease_read(&mut self, lease: Lease) -> Result<Renewal, kube::Error> {
        let me = self.settings.identity.clone();
        self.absent_since = None;
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != rv) {
            self.observed = Some((rv, Instant::now()));
        }
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .map_or(self.settings.duration, |s| {
                Duration::from_secs(s.max(1) as u64)
            });
        let unchanged_for = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, |(_, at)| at.elapsed());
        let decided = next_move(
            spec.holder_identity.as_deref(),
            &me,
            unchanged_for,
            duration,
        );
        tracing::debug!(lease = %self.settings.name, holder = ?spec.holder_identity, unchanged_for = ?unchanged_for, ?decided, "read the lease");
        let spec = match decided {
            // Handed over, but the release did not get through: let it expire.
            Move::Renew if !self.want => return Ok(Renewal::NotHeld),
            Move::Renew => LeaseSpec {
                renew_time: Some(now()),
                lease_duration_seconds: Some(self.seconds()),
                ..spec
            },
            // Someone else leads; if it was us until now, we lost it.
            Move::Stand => return Ok(Renewal::NotHeld),
            Move::Acquire if !self.want => return Ok(Renewal::NotHeld),
            Move::Acquire => self.held(Some(&spec)),
        };
        let renewing = self.role().leading;
        // A Lease made by an earlier release lacks this one's labels (the
        // shard count the planners read): every write of ours carries them.
        let mut metadata = lease.metadata;
        if !self.settings.labels.is_empty() {
            let labels = metadata.labels.get_or_insert_with(Default::default);
            labels.extend(self.settings.labels.clone());
        }
        let lease = Lease {
            metadata,
            spec: Some(spec),
        };
        let sent = Instant::now();
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Renewal::Sent(sent)),
            // A holder's renewal refused: someone else wrote first, or the
            // Lease was deleted since it was read (the old uid no longer
            // matches). Which, the next read tells; until then the previous
            // renewal counts, so that a holder whose Lease was deleted by
            // hand re-creates it instead of leaving nobody leading.
            Err(kube::Error::Api(s)) if s.code == 409 && renewing => Ok(Renewal::Unknown),
            // Another candidate acquired it first: read again next step.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Renewal::NotHeld),
            // Not known to be renewed: the previous renewal still counts, until its deadline.
            Err(e) => Err(e),
        }
    }

    /// The spec of a Lease this process has just acquired.
    fn held(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(
                previous
                    .and_then(|p| p.lease_transitions)
                    .map_or(0, |t| t + 1),
            ),
            ..Default::default()
        }
    }

    fn seconds(&self) -> i32 {
        self.settings.duration.as_secs().max(1) as i32
    }

    /// Empty the holder (client-go's release): candidates see a free Lease.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}

/// What a candidate does with the Lease it has just read.
#[derive(Debug, PartialEq, Eq)]
enum Move {
    Renew,
    Acquire,
    Stand,
}

/// What one step did to this process's hold on the Lease.
#[derive(Debug, PartialEq, Eq)]
enum Renewal {
    /// It holds the Lease by a write sent at this instant.
    Sent(Instant),
    /// It does not hold the Lease.
    NotHeld,
    /// Nobody can tell yet: the previous renewal, if any, still counts.
    Unknown,
}

/// Whether a candidate may create the Lease it found missing. Its holder
/// (still leading) re-creates it at once. Anyone else, whether it has seen
/// the Lease before or not (a replica just started), waits until its own
/// reads, with no gap between them, have found it missing for the renew
/// deadline: any holder's last renewal came before the deletion, so by then
/// the holder has either re-created it or stopped leading, and its write
/// fence (`fence.rs`) is closed. Counted from the last change it saw
/// instead, a standby that could not read for a while (stopped, starved)
/// would create it on its first read while the holder still leads; created
/// at once by a replica that never saw it, the same. The price: a fleet's
/// very first leader leads after the renew deadline, not at once.
fn may_create(holding: bool, absent_for: Duration, s: &LeaseSettings) -> bool {
    holding || absent_for >= s.renew_deadline()
}

/// `unchanged_for`: how long this process has seen the record unchanged (its
/// own clock, never the holder's timestamps).
fn next_move(holder: Option<&str>, me: &str, unchanged_for: Duration, lease: Duration) -> Move {
    match holder.filter(|h| !h.is_empty()) {
        Some(h) if h == me => Move::Renew,
        Some(_) if unchanged_for < lease => Move::Stand,
        _ => Move::Acquire,
    }
}

/// How long a leader may still lead: the renew deadline less the age of its
/// last successful renewal (as sent); `None` when it must not lead.
fn time_left(since_renew: Option<Duration>, s: &LeaseSettings) -> Option<Duration> {
    let left = s.renew_deadline().saturating_sub(since_renew?);
    (!left.is_zero()).then_some(left)
}

/// How long one step's Lease requests may take: a leader, no longer than it
/// may still lead; a standby, one retry period.
fn step_budget(since_renew: Option<Duration>, s: &LeaseSettings) -> Duration {
    time_left(since_renew, s).unwrap_or_else(|| s.retry_period())
}

/// The role, from the ages of the last successful renewal and Lease access.
fn role(
    since_renew: Option<Duration>,
    since_ok: Option<Duration>,
    s: &LeaseSettings,
) -> LeaderState {
    LeaderState {
        leading: time_left(since_renew, s).is_some(),
        healthy: since_ok.is_some_and(|d| d < s.duration),
    }
}

/// Runs `work` only while this process leads: `None`, without polling it, when
/// it does not lead, and `None` as soon as it stops leading, dropping `work` at
/// its current await point. That is a crash between two API calls, which every
/// reconcile recovers from; a leader that let go writes nothing more. Without
/// leader election the role never changes and `work` always completes.
pub async fn while_leading<T>(
    leader: &watch::Receiver<LeaderState>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    let mut leader = leader.clone();
    let lost = async move {
        // Closed: the role can no longer change.
        if leader.wait_for(|s| !s.leading).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = lost => None,
        out = work => Some(out),
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);
    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_lease_deleted_by_hand_is_recreated_by_its_holder_and_waited_for_by_the_others() {
        let s = settings();
        assert!(super::may_create(true, S(0), &s), "the holder at once");
        assert!(!super::may_create(false, S(0), &s));
        assert!(!super::may_create(false, S(9), &s));
        assert!(
            super::may_create(false, S(10), &s),
            "missing for the renew deadline: any holder stopped leading"
        );
    }

    #[test]
    fn decide_renews_its_own_lease_whatever_its_age() {
        assert_eq!(next_move(Some("me"), "me", S(0), LEASE), Move::Renew);
        assert_eq!(next_move(Some("me"), "me", S(60), LEASE), Move::Renew);
    }

    #[test]
    fn decide_stands_by_while_another_holder_is_fresh() {
        assert_eq!(next_move(Some("other"), "me", S(0), LEASE), Move::Stand);
        assert_eq!(next_move(Some("other"), "me", S(14), LEASE), Move::Stand);
    }

    #[test]
    fn decide_takes_an_expired_released_or_empty_lease() {
        assert_eq!(next_move(Some("other"), "me", S(15), LEASE), Move::Acquire);
        assert_eq!(next_move(Some(""), "me", S(0), LEASE), Move::Acquire);
        assert_eq!(next_move(None, "me", S(0), LEASE), Move::Acquire);
    }

    fn settings() -> LeaseSettings {
        LeaseSettings {
            namespace: "ns".into(),
            name: "kura-operator".into(),
            identity: "me".into(),
            duration: LEASE,
            labels: Default::default(),
            fence: None,
        }
    }

    #[test]
    fn a_leader_stops_leading_at_the_renew_deadline_before_the_lease_expires() {
        let s = settings();
        assert_eq!(s.renew_deadline(), S(10));
        assert!(s.renew_deadline() < s.duration);
        assert!(role(Some(S(9)), Some(S(0)), &s).leading);
        assert!(!role(Some(S(10)), Some(S(0)), &s).leading);
        assert!(!role(None, Some(S(0)), &s).leading);
        // Whatever else is known: a fresh Lease read does not extend leading.
        assert!(!role(Some(S(11)), Some(S(0)), &s).leading);
    }

    #[test]
    fn time_left_counts_down_to_the_renew_deadline_and_saturates() {
        let s = settings();
        assert_eq!(time_left(Some(S(0)), &s), Some(S(10)));
        assert_eq!(time_left(Some(S(7)), &s), Some(S(3)));
        assert_eq!(
            time_left(Some(S(10) - Duration::from_millis(1)), &s),
            Some(Duration::from_millis(1))
        );
        assert_eq!(time_left(Some(S(10)), &s), None);
        assert_eq!(time_left(Some(Duration::MAX), &s), None);
        assert_eq!(time_left(None, &s), None);
    }

    #[test]
    fn a_leaders_requests_end_by_its_deadline_a_standbys_within_a_retry_period() {
        let s = settings();
        assert_eq!(s.retry_period(), Duration::from_millis(2500));
        // Leading: only the time left, however short.
        assert_eq!(step_budget(Some(S(0)), &s), S(10));
        assert_eq!(step_budget(Some(S(9)), &s), S(1));
        // Not leading (never, lost, or past the deadline): one retry period.
        assert_eq!(step_budget(None, &s), s.retry_period());
        assert_eq!(step_budget(Some(S(10)), &s), s.retry_period());
        assert_eq!(step_budget(Some(Duration::MAX), &s), s.retry_period());
    }

    fn leading(leading: bool) -> LeaderState {
        LeaderState {
            leading,
            healthy: true,
        }
    }

    #[tokio::test]
    async fn while_leading_runs_work_to_completion_while_the_role_holds() {
        let (_tx, rx) = watch::channel(leading(true));
        assert_eq!(while_leading(&rx, async { 7 }).await, Some(7));
    }

    #[tokio::test]
    async fn while_leading_never_starts_work_on_a_standby() {
        let (_tx, rx) = watch::channel(leading(false));
        let started = std::sync::atomic::AtomicBool::new(false);
        let work = async { started.store(true, std::sync::atomic::Ordering::SeqCst) };
        assert_eq!(while_leading(&rx, work).await, None);
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn while_leading_drops_work_in_flight_when_the_role_is_lost() {
        let (tx, rx) = watch::channel(leading(true));
        let (step_tx, step_rx) = tokio::sync::oneshot::channel::<()>();
        let wrote = std::sync::atomic::AtomicBool::new(false);
        // Work that waits (a request in flight), then writes.
        let work = async {
            let _ = step_rx.await;
            wrote.store(true, std::sync::atomic::Ordering::SeqCst);
        };
        let lose = async {
            tokio::task::yield_now().await;
            tx.send_replace(leading(false));
            // Too late: the work was dropped when the role went.
            let _ = step_tx.send(());
        };
        let (out, ()) = tokio::join!(while_leading(&rx, work), lose);
        assert_eq!(out, None);
        assert!(!wrote.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn while_leading_completes_when_the_role_can_no_longer_change() {
        // No election: the sender is gone with the role "leading" for good.
        let (tx, rx) = watch::channel(leading(true));
        drop(tx);
        assert_eq!(while_leading(&rx, async { 1 }).await, Some(1));
    }

    #[test]
    fn a_standby_is_healthy_while_it_could_read_the_lease_within_the_duration() {
        let s = settings();
        assert!(role(None, Some(S(14)), &s).healthy);
        assert!(!role(None, Some(S(15)), &s).healthy);
        assert!(!role(None, None, &s).healthy);
    }

    /// A handover (or a shutdown) gives the Lease up only once nothing of
    /// this process can write any more: whatever reconcile slipped past the
    /// shard's gate just before, its writes after the release are refused.
    /// The API here is a stand-in that records, when the release arrives,
    /// whether the fence was still open (call order only).
    #[tokio::test]
    async fn the_fence_is_closed_before_the_lease_is_released() {
        use std::sync::{Arc, Mutex};

        use kura_core::shard::Shards;

        let fence = Arc::new(crate::fence::Fence::elected(Shards::ONE, "kura"));
        fence.renewed(0, Some(Instant::now()), S(10));
        assert!(fence.allows_write_in("tenant"));
        let open_at_release = Arc::new(Mutex::new(Vec::new()));
        let service = {
            let (fence, seen) = (fence.clone(), open_at_release.clone());
            tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let (fence, seen) = (fence.clone(), seen.clone());
                async move {
                    if req.method() == http::Method::PUT {
                        seen.lock().unwrap().push(fence.allows_write_in("tenant"));
                    }
                    let lease = serde_json::json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "kura-operator", "namespace": "kura", "resourceVersion": "1"},
                        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
                    });
                    let body = kube::client::Body::from(serde_json::to_vec(&lease).unwrap());
                    Ok::<_, std::convert::Infallible>(http::Response::new(body))
                }
            })
        };
        let client = kube::Client::new(service, "kura");
        let settings = LeaseSettings {
            fence: Some((fence.clone(), 0)),
            namespace: "kura".into(),
            ..settings()
        };
        let mut candidate = Candidate::new(Api::namespaced(client, "kura"), settings);
        give_up(&mut candidate).await;
        assert_eq!(
            *open_at_release.lock().unwrap(),
            [false],
            "one release, sent with the fence closed"
        );
        assert!(!fence.allows_write_in("tenant"));
    }
}
