//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas only one reconciles.
//!
//! The protocol is client-go's: the holder renews `renewTime` every retry
//! period; every write is a replace carrying the resourceVersion that was read,
//! so two candidates can never both win the same transition (one gets 409). A
//! candidate judges expiry by its own clock — the holder's record has not
//! changed for `leaseDurationSeconds` since *this* process saw it change — so
//! clock skew between nodes does not matter. A leader that cannot renew for the
//! renew deadline (two thirds of the duration) stops leading before anyone else
//! may take over. A standby watches the Lease, so a released Lease (graceful
//! shutdown) is taken over at once instead of after the duration.

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
    loop {
        let now = candidate.step().await;
        if std::mem::take(&mut first) | (state.send_replace(now) != now) {
            tracing::info!(identity = %settings.identity, lease = %settings.name, leading = now.leading, healthy = now.healthy, "leader election state");
        }
        let pause = tokio::time::sleep(settings.retry_period());
        tokio::select! {
            _ = &mut release => break,
            _ = pause => {}
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
    if was_leading {
        // Bounded: an unreachable apiserver must not hold up the exit.
        let release = tokio::time::timeout(Duration::from_secs(5), candidate.release());
        match release
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
        {
            Ok(()) => {
                tracing::info!(identity = %settings.identity, lease = %settings.name, "released the lease")
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %settings.name, "could not release the lease; a standby takes over when it expires")
            }
        }
    }
}

struct Candidate {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// resourceVersion of the Lease as last read, and when this process first saw it.
    observed: Option<(String, Instant)>,
    last_renew: Option<Instant>,
    last_ok: Option<Instant>,
}

impl Candidate {
    fn new(api: Api<Lease>, settings: LeaseSettings) -> Self {
        Candidate {
            api,
            settings,
            observed: None,
            last_renew: None,
            last_ok: None,
        }
    }

    /// One read of the Lease and, when due, one write. Never fails: an error
    /// only ages the last success.
    async fn step(&mut self) -> LeaderState {
        match self.try_step().await {
            Ok(leading) => {
                self.last_ok = Some(Instant::now());
                if leading {
                    self.last_renew = Some(Instant::now());
                }
            }
            Err(e) => tracing::warn!(error = %e, lease = %self.settings.name, "leader election"),
        }
        role(
            self.last_renew.map(|t| t.elapsed()),
            self.last_ok.map(|t| t.elapsed()),
            &self.settings,
        )
    }

    /// Whether this process holds the Lease after this step.
    async fn try_step(&mut self) -> Result<bool, kube::Error> {
        let me = self.settings.identity.clone();
        let Some(lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.held(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
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
        let spec = match decide(
            spec.holder_identity.as_deref(),
            &me,
            unchanged_for,
            duration,
        ) {
            Move::Renew => LeaseSpec {
                renew_time: Some(now()),
                lease_duration_seconds: Some(self.seconds()),
                ..spec
            },
            Move::Stand => {
                // Someone else leads; if it was us until now, we lost it.
                self.last_renew = None;
                return Ok(false);
            }
            Move::Acquire => self.held(Some(&spec)),
        };
        let lease = Lease {
            metadata: lease.metadata,
            spec: Some(spec),
        };
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Another candidate wrote first: read again next step.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.last_renew = None;
                Ok(false)
            }
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

/// `unchanged_for`: how long this process has seen the record unchanged (its
/// own clock, never the holder's timestamps).
fn decide(holder: Option<&str>, me: &str, unchanged_for: Duration, lease: Duration) -> Move {
    match holder.filter(|h| !h.is_empty()) {
        Some(h) if h == me => Move::Renew,
        Some(_) if unchanged_for < lease => Move::Stand,
        _ => Move::Acquire,
    }
}

/// The role, from the ages of the last successful renewal and Lease access.
fn role(
    since_renew: Option<Duration>,
    since_ok: Option<Duration>,
    s: &LeaseSettings,
) -> LeaderState {
    LeaderState {
        leading: since_renew.is_some_and(|d| d < s.renew_deadline()),
        healthy: since_ok.is_some_and(|d| d < s.duration),
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
    fn decide_renews_its_own_lease_whatever_its_age() {
        assert_eq!(decide(Some("me"), "me", S(0), LEASE), Move::Renew);
        assert_eq!(decide(Some("me"), "me", S(60), LEASE), Move::Renew);
    }

    #[test]
    fn decide_stands_by_while_another_holder_is_fresh() {
        assert_eq!(decide(Some("other"), "me", S(0), LEASE), Move::Stand);
        assert_eq!(decide(Some("other"), "me", S(14), LEASE), Move::Stand);
    }

    #[test]
    fn decide_takes_an_expired_released_or_empty_lease() {
        assert_eq!(decide(Some("other"), "me", S(15), LEASE), Move::Acquire);
        assert_eq!(decide(Some(""), "me", S(0), LEASE), Move::Acquire);
        assert_eq!(decide(None, "me", S(0), LEASE), Move::Acquire);
    }

    fn settings() -> LeaseSettings {
        LeaseSettings {
            namespace: "ns".into(),
            name: "kura-operator".into(),
            identity: "me".into(),
            duration: LEASE,
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
    }

    #[test]
    fn a_standby_is_healthy_while_it_could_read_the_lease_within_the_duration() {
        let s = settings();
        assert!(role(None, Some(S(14)), &s).healthy);
        assert!(!role(None, Some(S(15)), &s).healthy);
        assert!(!role(None, None, &s).healthy);
    }
}
