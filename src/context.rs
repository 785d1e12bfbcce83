//! What every reconcile shares: the client, the caches, the current operator
//! configuration, the retry policy, the Event reporter, metrics.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Reporter;
use tokio::sync::watch;

use crate::api::{KuraInstance, KuraInstanceStatus};
use crate::config::OperatorConfig;
use crate::leader::LeaderState;
use crate::metrics::Metrics;
use crate::reconcile::plan::{RetryPolicy, SETTLE};
use crate::reconcile::status::MESSAGE_REFRESH;
use crate::reconcile::stores::Stores;

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub config: watch::Receiver<Arc<OperatorConfig>>,
    /// Who publishes Events (see `reconcile::events::publish` for why there is
    /// no long-lived `Recorder`).
    pub reporter: Reporter,
    pub policy: RetryPolicy,
    pub resync: Duration,
    pub metrics: Arc<Metrics>,
    /// Always leading without `--leader-elect`.
    pub leader: watch::Receiver<LeaderState>,
    pub faults: Faults,
    /// Status this operator last wrote, keyed by instance uid, with the
    /// resourceVersion the write produced. See [`Context::with_own_status`].
    pub written: std::sync::Mutex<std::collections::HashMap<String, (String, KuraInstanceStatus)>>,
    /// Consecutive transient failures per instance uid, for the error policy's backoff.
    pub transient: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// When this process last wrote each instance's status (by uid), so that a
    /// progress message alone is not written on every pass (`status::worth_writing`).
    pub status_written_at: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// This process's last successful apply per instance uid: the revision and
    /// force token applied, and when (`plan::Observed::just_applied`).
    pub applied: std::sync::Mutex<std::collections::HashMap<String, AppliedRecord>>,
}

pub type AppliedRecord = (String, Option<String>, std::time::Instant);

impl Context {
    pub fn config(&self) -> Arc<OperatorConfig> {
        self.config.borrow().clone()
    }

    /// Only the leader reconciles: a standby keeps its caches warm and waits.
    pub fn leading(&self) -> bool {
        self.leader.borrow().leading
    }

    /// The reflector cache can lag our own status write; a reconcile triggered by
    /// a child event in between would see an older status (and, say, apply again
    /// or lose a take-back count). The operator is the only writer of status, so
    /// until the cache has caught up with our last write (its resourceVersion
    /// seen), the status we wrote is the fresher observation.
    pub fn with_own_status(&self, instance: Arc<KuraInstance>) -> Arc<KuraInstance> {
        let uid = instance.metadata.uid.clone().unwrap_or_default();
        let mut written = self.written.lock().unwrap();
        match written.get(&uid) {
            Some((rv_after, _))
                if instance.metadata.resource_version.as_ref() == Some(rv_after) =>
            {
                written.remove(&uid);
                instance
            }
            Some((_, status)) => {
                let mut fresher = (*instance).clone();
                fresher.status = Some(status.clone());
                Arc::new(fresher)
            }
            None => instance,
        }
    }

    /// Count a transient failure; returns the consecutive count.
    pub fn transient_failure(&self, instance: &KuraInstance) -> u32 {
        let uid = instance.metadata.uid.clone().unwrap_or_default();
        let mut map = self.transient.lock().unwrap();
        let n = map.entry(uid).or_default();
        *n += 1;
        *n
    }

    pub fn transient_success(&self, instance: &KuraInstance) {
        if let Some(uid) = &instance.metadata.uid {
            self.transient.lock().unwrap().remove(uid);
        }
    }

    pub fn remember_apply(&self, instance: &KuraInstance, revision: &str, force: Option<String>) {
        let Some(uid) = &instance.metadata.uid else {
            return;
        };
        let mut applied = self.applied.lock().unwrap();
        // Records older than the settle window mean nothing; deleted instances' go too.
        applied.retain(|_, (_, _, at)| at.elapsed() < SETTLE);
        applied.insert(
            uid.clone(),
            (revision.to_string(), force, std::time::Instant::now()),
        );
    }

    /// Whether this process applied `revision` with `force` to the instance
    /// within the last [`SETTLE`].
    pub fn just_applied(
        &self,
        instance: &KuraInstance,
        revision: &str,
        force: Option<&str>,
    ) -> bool {
        let Some(uid) = &instance.metadata.uid else {
            return false;
        };
        self.applied
            .lock()
            .unwrap()
            .get(uid)
            .is_some_and(|(r, f, at)| {
                r == revision && f.as_deref() == force && at.elapsed() < SETTLE
            })
    }

    pub fn since_status_written(&self, instance: &KuraInstance) -> Option<Duration> {
        let uid = instance.metadata.uid.as_deref()?;
        let at = *self.status_written_at.lock().unwrap().get(uid)?;
        Some(at.elapsed())
    }

    pub fn remember_status(
        &self,
        instance: &KuraInstance,
        rv_after: Option<String>,
        status: &KuraInstanceStatus,
    ) {
        let Some(uid) = &instance.metadata.uid else {
            return;
        };
        {
            // Only writes younger than the refresh interval matter; older ones
            // (and deleted instances') are dropped here.
            let mut at = self.status_written_at.lock().unwrap();
            at.retain(|_, t| t.elapsed() < MESSAGE_REFRESH);
            at.insert(uid.clone(), std::time::Instant::now());
        }
        if let Some(rv) = rv_after {
            self.written
                .lock()
                .unwrap()
                .insert(uid.clone(), (rv, status.clone()));
        }
    }
}

/// Fault injection for the crash-recovery tests: with
/// `KURA_FAULT_EXIT_AFTER_APPLY=1` the process exits right after applying and
/// pruning, before the status write, as a kill at that point would.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub exit_after_apply: bool,
}

impl Faults {
    pub fn from_env() -> Faults {
        Faults {
            exit_after_apply: std::env::var("KURA_FAULT_EXIT_AFTER_APPLY").is_ok_and(|v| v == "1"),
        }
    }

    pub fn after_apply(&self) {
        if self.exit_after_apply {
            eprintln!(
                "kura-operator: fault injection: exiting after apply, before the status write"
            );
            std::process::exit(137);
        }
    }
}
