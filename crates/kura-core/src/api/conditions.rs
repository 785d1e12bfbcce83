//! kstatus-compatible conditions (`Ready`, `Reconciling`, `Stalled`, plus specific ones).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339; kept when only the message changes, moved when the status changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
/// Specific: the workload is available and every ingress has an address.
pub const ACTIVE: &str = "Active";
/// Specific: the spec or the operator configuration is invalid for this instance.
pub const VALID: &str = "Valid";
/// Specific: another field manager took a field this operator renders.
pub const FIELD_CONFLICT: &str = "FieldConflict";
/// Specific: an operator-originated change that restarts pods waits for the
/// fleet's rollout budget, or its rollout was halted (`crate::rollout`).
pub const ROLLOUT_HELD: &str = "RolloutHeld";
/// Specific: admitted to an operator-originated rollout and not Ready within
/// `rollout.progressDeadline`.
pub const ROLLOUT_FAILED: &str = "RolloutFailed";
/// Specific: the storage asked for differs from what the live StatefulSet was
/// created with, which it keeps (`reconcile::storage`).
pub const STORAGE_CHANGE_PENDING: &str = "StorageChangePending";

impl Condition {
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.into(),
            observed_generation: None,
            last_transition_time: None,
        }
    }
}

/// Merge freshly computed conditions into the previous ones: a condition whose
/// status did not change keeps its transition time, so an unchanged state writes
/// an identical status (and so no status write at all).
pub fn merge(previous: &[Condition], fresh: Vec<Condition>, now: &str) -> Vec<Condition> {
    let mut merged: Vec<Condition> = fresh
        .into_iter()
        .map(|mut c| {
            let old = previous.iter().find(|p| p.type_ == c.type_);
            c.last_transition_time = match old {
                Some(o) if o.status == c.status => o.last_transition_time.clone(),
                _ => Some(now.to_string()),
            };
            c
        })
        .collect();
    merged.sort_by(|a, b| a.type_.cmp(&b.type_));
    merged
}

pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_status_keeps_transition_time() {
        let old = merge(
            &[],
            vec![Condition::new(
                READY,
                ConditionStatus::False,
                "Waiting",
                "a",
            )],
            "t1",
        );
        let new = merge(
            &old,
            vec![Condition::new(
                READY,
                ConditionStatus::False,
                "Waiting",
                "b",
            )],
            "t2",
        );
        assert_eq!(new[0].last_transition_time.as_deref(), Some("t1"));
        let flipped = merge(
            &new,
            vec![Condition::new(READY, ConditionStatus::True, "Active", "")],
            "t3",
        );
        assert_eq!(flipped[0].last_transition_time.as_deref(), Some("t3"));
    }
}
