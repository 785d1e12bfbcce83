//! The whole decision of a gateway reconcile, as a pure function of what was
//! observed, who uses the gateway, what is desired and the time.
//!
//! A gateway the operator created is collected once nothing of its namespace
//! uses it (the caller confirms that with live reads); anyone else's is served
//! and never collected. Otherwise the children are repaired exactly as an
//! instance's are (`plan::drift`): a missing child, one carrying
//! another revision, or one whose fields another manager took is sent again,
//! and only those. A child of the desired name that is not the gateway's is
//! never written: the gateway reports the name conflict.
//!
//! Another writer that keeps taking a field back (an autoscaler, `kubectl
//! scale`) is handled as for an instance (`plan::conflict`): at
//! most `MAX_TAKE_BACKS` take-backs per `CONFLICT_WINDOW`, then its values
//! stand until the window ends, and the gateway reports it.

use jiff::Timestamp;

use super::observed::Observed;
use crate::api::KuraGatewayStatus;
use crate::plan::{ApplyOp, ApplyReason, RetryPolicy, Wait, conflict, drift, inputs_key};
use crate::render::{Desired, ObjectId};
use crate::validate::ValidationErrors;

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Invalid spec: apply nothing, delete nothing, report.
    Invalid(ValidationErrors),
    /// Created by the operator and used by nothing of its namespace: delete it.
    Collect,
    /// Objects of the desired names exist and are not the gateway's.
    NameConflict(Vec<String>),
    /// Send `apply`; then release what the instances' field manager still
    /// holds of `release` (applied by an earlier release).
    Apply {
        reasons: Vec<ApplyReason>,
        apply: Vec<ApplyOp>,
        release: Vec<ObjectId>,
    },
    /// The same inputs failed recently: retry at `at`.
    Backoff {
        at: Timestamp,
    },
    /// The retry budget of these inputs is spent: retry at `at`.
    Stalled {
        at: Timestamp,
    },
    /// Another writer keeps undoing ours: the take-backs of this window are
    /// spent; hold until `at` and report (no ping-pong).
    ConflictHold {
        at: Timestamp,
        managers: Vec<String>,
    },
    Converged,
    /// What differs is what the caches have not shown yet of this process's
    /// own apply: look again after `plan::SETTLE`.
    Settling,
}

/// `user`: who uses the gateway (None: nothing; for a gateway the operator
/// created, confirmed by live reads).
pub fn plan(
    observed: &Observed,
    desired: Result<&Desired, &ValidationErrors>,
    user: Option<&str>,
    policy: &RetryPolicy,
    now: Timestamp,
) -> Plan {
    if observed.managed && user.is_none() {
        return Plan::Collect;
    }
    let desired = match desired {
        Ok(d) => d,
        Err(errors) => return Plan::Invalid(errors.clone()),
    };
    let conflicts = drift::name_conflicts(&desired.objects, &observed.children);
    if !conflicts.is_empty() {
        return Plan::NameConflict(conflicts);
    }
    let status = &observed.status;
    let mut reasons = match &status.applied_revision {
        None => vec![ApplyReason::Initial],
        Some(applied) if *applied != desired.revision => vec![ApplyReason::ManifestDrift],
        Some(_) => Vec::new(),
    };
    let initial = !reasons.is_empty() && reasons[0] == ApplyReason::Initial;
    reasons.extend(
        drift::child_reasons(&desired.objects, &observed.children, &status.inventory)
            .into_iter()
            // Before the first apply every child is "missing": Initial says it all.
            .filter(|r| !(initial && matches!(r, ApplyReason::ChildMissing(_)))),
    );
    let release: Vec<ObjectId> = desired
        .objects
        .iter()
        .filter(|o| observed.old_manager.contains(&o.id))
        .map(|o| o.id.clone())
        .collect();
    if reasons.is_empty() && release.is_empty() {
        return Plan::Converged;
    }
    // Right after an apply, a release still shows until the caches catch up.
    if observed.just_applied && reasons.iter().all(ApplyReason::may_be_cache_lag) {
        return Plan::Settling;
    }
    // Only contested values to take back, and this window's take-backs are spent.
    if let Some((at, managers)) = conflict::hold(&reasons, status.conflict.as_ref(), now) {
        return Plan::ConflictHold { at, managers };
    }
    let key = inputs_key(&desired.revision, None);
    if let Some(wait) = policy.wait_for(status.retry.as_ref(), &key, now) {
        return match wait {
            Wait::Backoff { at } => Plan::Backoff { at },
            Wait::Stalled { at } => Plan::Stalled { at },
        };
    }
    let apply = desired
        .objects
        .iter()
        .filter(|o| {
            initial
                || release.contains(&o.id)
                || drift::differs(o, observed.children.get(&o.id), &status.inventory)
        })
        .map(|o| drift::op(o, observed.children.get(&o.id)))
        .collect();
    Plan::Apply {
        reasons,
        apply,
        release,
    }
}

/// Failures recorded for these inputs (a failure of other inputs counts for nothing).
pub fn failures_for(status: &KuraGatewayStatus, key: &str) -> i64 {
    crate::retry::failures_in(status.retry.as_ref(), key)
}

#[cfg(test)]
pub(crate) mod tests;
