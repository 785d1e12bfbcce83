//! The fleet budget's part of an instance's status: its record
//! (`status.rollout`: waiting since, admitted at, whether it was Ready) and
//! the conditions `RolloutHeld` (on a waiting instance: why) and
//! `RolloutFailed` (on an admitted one not Ready within the deadline).
//! Messages carry nothing that moves while an instance waits (no position,
//! no count in flight), so a waiting fleet writes no status until its turn.

use std::time::Duration;

use super::{Outcome, StatusInputs, condition};
use crate::api::conditions::{ROLLOUT_FAILED, ROLLOUT_HELD};
use crate::api::{Condition, ConditionStatus, KuraInstanceStatus, RolloutState, RolloutStatus};
use crate::outcome::Activation;
use crate::render::hash::short;
use crate::rollout::{self, Admission, Origin};

/// What status needs of the budget besides the outcome.
#[derive(Clone, Copy, Debug)]
pub struct RolloutInputs<'a> {
    /// Who originated the desired revision.
    pub origin: Origin,
    /// The operator revision (configuration and release) in force.
    pub fleet_revision: &'a str,
    pub deadline: Duration,
    /// The desired revision is an operator-originated change of a running pod
    /// template, and the budget said this instance takes it uncounted.
    pub uncounted: bool,
    /// The instance's maintenance window and deadline (`crate::window`).
    pub gate: &'a crate::window::Gate,
}

pub fn update(s: &mut KuraInstanceStatus, fresh: &mut Vec<Condition>, i: &StatusInputs) {
    // Out of the rollout (invalid, paused, nothing it may apply): it holds no
    // slot and waits in no queue, so its record is dropped.
    let out = matches!(
        i.outcome,
        Outcome::Invalid(_) | Outcome::Paused | Outcome::NameConflict(_) | Outcome::HostConflict(_)
    );
    let Some(d) = i.desired.filter(|_| !out) else {
        s.rollout = None;
        fresh.retain(|c| c.type_ != ROLLOUT_HELD && c.type_ != ROLLOUT_FAILED);
        return;
    };
    let r = &i.rollout;
    // Its pods serve on the revision: the rollout is done, whatever its
    // Ingresses say (a rollout restarts pods, not addresses).
    let active = i.activation.is_some_and(Activation::workload_available);
    let held = match i.outcome {
        Outcome::Held(admission)
        | Outcome::Applied {
            held: Some(admission),
            ..
        } => Some(admission),
        _ => None,
    };
    s.rollout = next_record(i, &d.revision, held.is_some(), active);
    fresh.retain(|c| c.type_ != ROLLOUT_HELD && c.type_ != ROLLOUT_FAILED);
    if let Some(admission) = held {
        fresh.push(condition(
            ROLLOUT_HELD,
            ConditionStatus::True,
            held_reason(admission),
            held_message(admission, &d.revision, r),
            i,
        ));
    }
    if let Some(record) = &s.rollout
        && record.state == RolloutState::Admitted
        && record.was_ready
        && !active
        && rollout::past_deadline(record, r.deadline, i.now)
    {
        fresh.push(condition(
            ROLLOUT_FAILED,
            ConditionStatus::True,
            "ProgressDeadlineExceeded",
            failed_message(record, r.deadline),
            i,
        ));
    }
}

/// The rollout record after this pass: admitted, waiting (since the first
/// pass that found it waiting), taken uncounted, done, or as it was.
fn next_record(
    i: &StatusInputs,
    revision: &str,
    held: bool,
    active: bool,
) -> Option<RolloutStatus> {
    let r = &i.rollout;
    let prev = i.observed.status.rollout.as_ref();
    let admitted_here =
        prev.is_some_and(|p| p.state == RolloutState::Admitted && p.revision == revision);
    match i.outcome {
        Outcome::Admitted => Some(rollout::record(
            RolloutState::Admitted,
            r.fleet_revision,
            revision,
            true,
            i.now,
        )),
        _ if held => Some(match prev {
            Some(p)
                if p.state == RolloutState::Waiting
                    && p.revision == revision
                    && p.fleet_revision == r.fleet_revision =>
            {
                p.clone()
            }
            _ => rollout::record(
                RolloutState::Waiting,
                r.fleet_revision,
                revision,
                true,
                i.now,
            ),
        }),
        Outcome::Applied { .. } if admitted_here => prev.cloned(),
        Outcome::Applied { .. } if r.uncounted => Some(rollout::record(
            RolloutState::Admitted,
            r.fleet_revision,
            revision,
            false,
            i.now,
        )),
        Outcome::Applied { .. } => None,
        // Serving again on the admitted revision: the rollout is done. A waiting
        // record with nothing left to change is over too.
        Outcome::Converged if active || prev.is_some_and(|p| p.state == RolloutState::Waiting) => {
            None
        }
        _ => prev.cloned(),
    }
}

fn held_reason(admission: &Admission) -> &'static str {
    match admission {
        Admission::Halted { .. } => "RolloutHalted",
        Admission::Window(_) => "WaitingForWindow",
        _ => "WaitingForBudget",
    }
}

fn held_message(admission: &Admission, revision: &str, r: &RolloutInputs) -> String {
    let change = format!(
        "revision {} (operator revision {}: configuration or release) restarts pods",
        short(revision),
        r.fleet_revision
    );
    match admission {
        Admission::Halted { failed } => {
            let names: Vec<String> = failed.iter().take(5).map(ToString::to_string).collect();
            let more = failed.len().saturating_sub(5);
            format!(
                "{change}; held: its rollout failed on {}{} (not Ready within {}s of admission). A corrected configuration or release continues the rollout; user changes and repairs go on meanwhile",
                names.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
                r.deadline.as_secs()
            )
        }
        Admission::Window(wait) => format!(
            "{change}; {wait}. What restarts no pod was applied; user changes and repairs go on meanwhile"
        ),
        _ => format!(
            "{change}; waiting for the rollout budget (rollout.maxUnavailable){}. What restarts no pod was applied; user changes and repairs go on meanwhile",
            match r.gate {
                crate::window::Gate::PastDeadline(d) => format!(
                    "; its deadline {d} (rollout.windowDeadline) has passed: it waits for no maintenance window"
                ),
                _ => String::new(),
            }
        ),
    }
}

fn failed_message(record: &RolloutStatus, deadline: Duration) -> String {
    format!(
        "not Ready {}s after admission (at {}) to operator revision {}: further admissions of it are halted",
        deadline.as_secs(),
        record.since,
        record.fleet_revision
    )
}
