//! `plan`: the whole decision of a reconcile, as a pure function of what was
//! observed, what is desired and the time. Nothing here touches the client.
//!
//! Re-apply happens on a missing applied revision, a revision change, image drift,
//! a missing child, a child carrying another revision, a field taken by another
//! manager, or a new force token — in every phase. Activation progress, retry
//! state or an in-flight wait never suppress it (INCIDENTS.md #1, #3); they only
//! decide *when* a failing apply is retried (#2).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{InventoryEntry, KuraInstanceStatus};
use crate::render::{Desired, ObjectId};
use crate::validate::ValidationErrors;

/// What the cluster says about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveChild {
    /// `kura.dev/revision` as found on the object.
    pub revision: Option<String>,
    /// Fingerprint of the fields this operator's field manager owns.
    pub owned_fields: Option<String>,
    /// Other field managers of the object's spec and metadata (not status).
    pub other_managers: Vec<String>,
}

/// Everything `plan` needs from the cluster, already read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub generation: Option<i64>,
    pub status: KuraInstanceStatus,
    /// The `kura.dev/reapply-at` annotation.
    pub force_token: Option<String>,
    pub paused: bool,
    /// Live state of every desired and every inventoried object; absent = missing.
    pub children: BTreeMap<ObjectId, LiveChild>,
    /// The image the workload runs (its pod template's), if the workload exists.
    pub running_image: Option<String>,
    /// This process applied the desired revision (with this force token) within
    /// the last [`SETTLE`]: the caches may not show that write yet.
    pub just_applied: bool,
}

/// How long after an apply the caches are given to show it. A reconcile
/// triggered meanwhile (by the events of the other children of the same apply)
/// would otherwise see a child missing or stale and apply again.
pub const SETTLE: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Failed attempts of the same inputs before the instance is Stalled.
    pub budget: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// Wait before a Stalled instance is retried; never below [`MIN_STALL_WINDOW`].
    pub stall_window: Duration,
}

/// A small configured window must not make a stalled instance hot (INCIDENTS.md #2).
pub const MIN_STALL_WINDOW: Duration = Duration::from_secs(60);

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: 5,
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            stall_window: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    pub fn stall_window(&self) -> Duration {
        self.stall_window.max(MIN_STALL_WINDOW)
    }

    /// Backoff after `failures` consecutive failures (1 → base).
    pub fn backoff(&self, failures: i64) -> Duration {
        let exp = failures.clamp(1, 20) as u32 - 1;
        self.base_backoff
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.max_backoff)
    }

    /// Backoff after `failures` consecutive transient failures (throttling, a
    /// server error, the apiserver out of reach): these say nothing about the
    /// input, so they retry sooner than an apply failure, and are spread by
    /// `jitter` (a number in 0..1) so that a fleet throttled at once does not
    /// come back at once.
    pub fn transient_backoff(&self, failures: u32, jitter: f64) -> Duration {
        let exp = failures.clamp(1, 20) - 1;
        let full = TRANSIENT_BASE
            .saturating_mul(2u32.saturating_pow(exp))
            .min(TRANSIENT_MAX);
        // Between half and all of it.
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// First retry of a transient failure; doubling up to [`TRANSIENT_MAX`].
pub const TRANSIENT_BASE: Duration = Duration::from_millis(500);
pub const TRANSIENT_MAX: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApplyReason {
    /// Nothing was applied yet.
    Initial,
    /// The desired revision differs from the applied one.
    ManifestDrift,
    /// The workload runs another image than desired.
    ImageDrift,
    /// The force token changed.
    Forced,
    /// An object of the revision is missing.
    ChildMissing(String),
    /// An object carries another revision than it should.
    ChildRevision(String),
    /// Another field manager (named) took fields this operator renders.
    FieldDrift(String, Vec<String>),
}

impl ApplyReason {
    /// The metric label and the word used in Events.
    pub fn label(&self) -> &'static str {
        match self {
            ApplyReason::Initial => "initial",
            ApplyReason::ManifestDrift => "manifest",
            ApplyReason::ImageDrift => "image",
            ApplyReason::Forced => "forced",
            ApplyReason::ChildMissing(_) => "missing",
            ApplyReason::ChildRevision(_) => "child-revision",
            ApplyReason::FieldDrift(..) => "field-drift",
        }
    }
}

impl std::fmt::Display for ApplyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyReason::ChildMissing(o) => write!(f, "missing {o}"),
            ApplyReason::ChildRevision(o) => write!(f, "{o} carries another revision"),
            ApplyReason::FieldDrift(o, m) => write!(f, "fields of {o} taken by {}", m.join(", ")),
            other => f.write_str(other.label()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Invalid spec or configuration: apply nothing, delete nothing, report.
    Invalid(ValidationErrors),
    /// `spec.paused`: observe and report only.
    Paused,
    /// Apply the desired set, then delete `prune` (what the previous inventory had
    /// and the new one lacks).
    Apply {
        reasons: Vec<ApplyReason>,
        prune: Vec<ObjectId>,
        force_token: Option<String>,
    },
    /// The same inputs failed recently: retry at `at`, not before.
    Backoff { at: Timestamp },
    /// The retry budget of these inputs is spent: retry at `at` (after the stall window).
    Stalled { at: Timestamp },
    /// Another manager keeps taking our fields: the take-backs of this window are
    /// spent; hold until `at` and report (no ping-pong).
    ConflictHold {
        at: Timestamp,
        managers: Vec<String>,
    },
    /// Everything matches: only probe activation.
    Converged,
    /// What differs is what the caches have not shown yet of this process's own
    /// apply of this very revision: look again after [`SETTLE`].
    Settling,
}

/// At most this many take-backs of contested fields per [`CONFLICT_WINDOW`].
pub const MAX_TAKE_BACKS: i64 = 3;
pub const CONFLICT_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// The conflict record, if its window is still open at `now`.
pub fn open_conflict(
    status: &KuraInstanceStatus,
    now: Timestamp,
) -> Option<&crate::api::ConflictStatus> {
    status.conflict.as_ref().filter(|c| {
        c.window_start.parse::<Timestamp>().is_ok_and(|start| {
            now < start + jiff::SignedDuration::try_from(CONFLICT_WINDOW).unwrap()
        })
    })
}

/// The key a retry budget belongs to: a change of revision (spec, config,
/// renderer) or force token starts a fresh budget.
pub fn inputs_key(desired_revision: &str, force_token: Option<&str>) -> String {
    format!("{desired_revision}/{}", force_token.unwrap_or(""))
}

pub fn plan(
    observed: &Observed,
    desired: Result<&Desired, &ValidationErrors>,
    policy: &RetryPolicy,
    now: Timestamp,
) -> Plan {
    let desired = match desired {
        Ok(d) => d,
        Err(errors) => return Plan::Invalid(errors.clone()),
    };
    if observed.paused {
        return Plan::Paused;
    }
    let reasons = apply_reasons(observed, desired);
    if reasons.is_empty() {
        return Plan::Converged;
    }
    let cache_lag = |r: &ApplyReason| {
        matches!(
            r,
            ApplyReason::ChildMissing(_)
                | ApplyReason::ChildRevision(_)
                | ApplyReason::FieldDrift(..)
                | ApplyReason::ImageDrift
        )
    };
    if observed.just_applied && reasons.iter().all(cache_lag) {
        return Plan::Settling;
    }
    let force_token = observed.force_token.clone();
    // Only contested fields to take back, and this window's take-backs are spent.
    if reasons
        .iter()
        .all(|r| matches!(r, ApplyReason::FieldDrift(..)))
        && let Some(c) =
            open_conflict(&observed.status, now).filter(|c| c.take_backs >= MAX_TAKE_BACKS)
    {
        let start: Timestamp = c.window_start.parse().expect("checked by open_conflict");
        let at = start + jiff::SignedDuration::try_from(CONFLICT_WINDOW).unwrap();
        return Plan::ConflictHold {
            at,
            managers: c.managers.clone(),
        };
    }
    // A failure recorded for these same inputs decides when to try again; new
    // inputs (a new revision or force token) always try at once.
    if let Some(retry) = &observed.status.retry
        && retry.failures > 0
        && retry.inputs_key == inputs_key(&desired.revision, force_token.as_deref())
        && let Ok(last) = retry.last_failure_time.parse::<Timestamp>()
    {
        let (wait, stalled) = if retry.failures >= policy.budget as i64 {
            (policy.stall_window(), true)
        } else {
            (policy.backoff(retry.failures), false)
        };
        let at = last + jiff::SignedDuration::try_from(wait).unwrap_or(jiff::SignedDuration::MAX);
        if now < at {
            return if stalled {
                Plan::Stalled { at }
            } else {
                Plan::Backoff { at }
            };
        }
    }
    Plan::Apply {
        reasons,
        prune: stale_objects(&observed.status.inventory, desired),
        force_token,
    }
}

fn apply_reasons(observed: &Observed, desired: &Desired) -> Vec<ApplyReason> {
    let status = &observed.status;
    let mut reasons = Vec::new();
    match &status.applied_revision {
        None => reasons.push(ApplyReason::Initial),
        Some(applied) if *applied != desired.revision => reasons.push(ApplyReason::ManifestDrift),
        Some(_) => {}
    }
    if observed
        .running_image
        .as_ref()
        .is_some_and(|running| *running != desired.image)
    {
        reasons.push(ApplyReason::ImageDrift);
    }
    if observed.force_token.is_some() && observed.force_token != status.last_handled_reapply_at {
        reasons.push(ApplyReason::Forced);
    }
    let recorded: BTreeMap<ObjectId, &InventoryEntry> = status
        .inventory
        .iter()
        .map(|e| (ObjectId::from_inventory(e), e))
        .collect();
    for object in &desired.objects {
        let expected = object.stamp();
        match observed.children.get(&object.id) {
            None => reasons.push(ApplyReason::ChildMissing(object.id.to_string())),
            Some(live) if live.revision.as_deref() != expected => {
                reasons.push(ApplyReason::ChildRevision(object.id.to_string()))
            }
            Some(live) => {
                let recorded_fields = recorded
                    .get(&object.id)
                    .and_then(|e| e.owned_fields.as_deref());
                if recorded_fields.is_some() && live.owned_fields.as_deref() != recorded_fields {
                    reasons.push(ApplyReason::FieldDrift(
                        object.id.to_string(),
                        live.other_managers.clone(),
                    ));
                }
            }
        }
    }
    // Before the first apply every child is "missing": Initial says it all.
    if reasons.first() == Some(&ApplyReason::Initial) {
        reasons.retain(|r| !matches!(r, ApplyReason::ChildMissing(_)));
    }
    reasons
}

/// Objects of the previous inventory that the desired set no longer has.
pub fn stale_objects(inventory: &[InventoryEntry], desired: &Desired) -> Vec<ObjectId> {
    inventory
        .iter()
        .map(ObjectId::from_inventory)
        .filter(|id| !desired.objects.iter().any(|o| o.id == *id))
        .collect()
}

#[cfg(test)]
mod tests;
