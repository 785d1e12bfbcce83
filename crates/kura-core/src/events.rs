//! Events on transitions, not on every pass: an apply (with its reasons), a
//! force token acknowledged, a prune, the first failure, Stalled, Invalid, a
//! name or host conflict, a child being deleted, Ready. What each says is
//! decided here (pure); the operator publishes them as Kubernetes Events.

use crate::api::conditions::{READY, ROLLOUT_FAILED, STALLED, STORAGE_CHANGE_PENDING, VALID, find};
use crate::api::{ConditionStatus, KuraInstanceStatus};
use crate::outcome::{Outcome, PruneOutcome};
use crate::plan::ApplyReason;
use crate::render::hash::short;
use crate::status::failure_reason;

/// An Event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteType {
    Normal,
    Warning,
}

/// What one Event says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub type_: NoteType,
    pub reason: String,
    /// At most 1000 characters (the Events API's bound is 1 kB).
    pub note: String,
}

impl Note {
    pub fn new(type_: NoteType, reason: &str, note: String) -> Note {
        Note {
            type_,
            reason: reason.to_string(),
            note: note.chars().take(1000).collect(),
        }
    }
}

pub fn notes_for(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    outcome: &Outcome,
) -> Vec<Note> {
    let mut out = Vec::new();
    if let Some(failure) = outcome.failure()
        && ready_news(prev, new)
    {
        out.push(Note::new(
            NoteType::Warning,
            failure_reason(failure),
            failure.to_string(),
        ));
    }
    match outcome {
        Outcome::Applied {
            reasons,
            sent,
            pruned,
            held,
            ..
        } => applied(prev, new, reasons, sent, pruned, held.is_some(), &mut out),
        Outcome::NameConflict(_) if ready_news(prev, new) => {
            out.push(Note::new(
                NoteType::Warning,
                "NameConflict",
                ready_message(new),
            ));
        }
        Outcome::ChildTerminating(_) if ready_news(prev, new) => {
            out.push(Note::new(
                NoteType::Warning,
                "ChildTerminating",
                ready_message(new),
            ));
        }
        Outcome::HostConflict(conflict) if ready_news(prev, new) => {
            out.push(Note::new(
                NoteType::Warning,
                "HostConflict",
                conflict.to_string(),
            ));
        }
        Outcome::Invalid(errors) => {
            let changed = find(&prev.conditions, VALID).is_none_or(|c| {
                c.status != ConditionStatus::False || c.message != errors.to_string()
            });
            if changed {
                out.push(Note::new(
                    NoteType::Warning,
                    "InvalidSpec",
                    errors.to_string(),
                ));
            }
        }
        _ => {}
    }
    conditions_turned(prev, new, outcome, &mut out);
    out
}

/// A failure is news when Ready starts to say it (another reason or
/// message), not on every retry of the same error.
fn ready_news(prev: &KuraInstanceStatus, new: &KuraInstanceStatus) -> bool {
    let reason_and_message = |s: &KuraInstanceStatus| {
        find(&s.conditions, READY).map(|c| (c.reason.clone(), c.message.clone()))
    };
    reason_and_message(prev) != reason_and_message(new)
}

fn ready_message(new: &KuraInstanceStatus) -> String {
    find(&new.conditions, READY)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// An apply: what went and why, a force handled, what was pruned or kept, a
/// take-back of fields another writer held.
fn applied(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    reasons: &[ApplyReason],
    sent: &[String],
    pruned: &PruneOutcome,
    held: bool,
    out: &mut Vec<Note>,
) {
    let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    let rev = short(new.applied_revision.as_deref().unwrap_or_default());
    let origin = match new.applied_origin {
        Some(crate::rollout::Origin::Operator) => "operator configuration or release",
        _ => "spec or force",
    };
    let note = if held {
        format!(
            "applied what restarts no pod of revision {} ({}), the rest waits for the rollout budget: {}",
            short(new.desired_revision.as_deref().unwrap_or_default()),
            sent.join(", "),
            why.join(", ")
        )
    } else if sent.is_empty() {
        format!(
            "revision {rev} recorded, every object already carried it ({origin}): {}",
            why.join(", ")
        )
    } else {
        format!(
            "applied revision {rev} from the {origin} ({}): {}",
            sent.join(", "),
            why.join(", ")
        )
    };
    if !of_a_fleet_rollout(prev, new, reasons, held) {
        out.push(Note::new(NoteType::Normal, "Applied", note));
    }
    if new.last_handled_reapply_at != prev.last_handled_reapply_at
        && let Some(token) = &new.last_handled_reapply_at
    {
        out.push(Note::new(
            NoteType::Normal,
            "ForcedReapply",
            format!("re-applied for kura.dev/reapply-at={token}"),
        ));
    }
    if !pruned.deleted.is_empty() {
        out.push(Note::new(
            NoteType::Normal,
            "Pruned",
            format!(
                "deleted objects the new revision no longer has: {}",
                pruned.deleted.join(", ")
            ),
        ));
    }
    if let Some(note) = crate::plan::conflict::took_back(reasons) {
        out.push(Note::new(NoteType::Warning, "FieldConflict", note));
    }
    if !pruned.kept.is_empty() {
        out.push(Note::new(
            NoteType::Normal,
            "PruneSkipped",
            pruned.kept.join("; "),
        ));
    }
}

/// An apply that carries a revision the operator originated (its
/// configuration or release, rolled out across the fleet): no Normal Event
/// per instance, since the fleet's one Event on the operator's Pod
/// (`FleetRollout`) says what changed and why. A drift repair of such a
/// revision (the same revision applied again) and a forced re-apply still
/// say `Applied`; Warnings are never folded.
fn of_a_fleet_rollout(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    reasons: &[ApplyReason],
    held: bool,
) -> bool {
    new.applied_origin == Some(crate::rollout::Origin::Operator)
        && !reasons.contains(&ApplyReason::Forced)
        && (held || prev.applied_revision != new.applied_revision)
}

/// Conditions that turned: Stalled (on a failure), a storage change kept
/// back, a failed rollout, Ready.
fn conditions_turned(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    outcome: &Outcome,
    out: &mut Vec<Note>,
) {
    let turned = |t: &str, to: ConditionStatus| {
        find(&new.conditions, t).is_some_and(|c| c.status == to)
            && find(&prev.conditions, t).is_none_or(|c| c.status != to)
    };
    let message = |t: &str| {
        find(&new.conditions, t)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    if turned(STALLED, ConditionStatus::True) && outcome.failure().is_some() {
        out.push(Note::new(NoteType::Warning, "Stalled", message(STALLED)));
    }
    let storage = |s: &KuraInstanceStatus| {
        find(&s.conditions, STORAGE_CHANGE_PENDING).map(|c| c.message.clone())
    };
    if let Some(pending) = storage(new)
        && storage(prev) != Some(pending.clone())
    {
        out.push(Note::new(
            NoteType::Warning,
            "StorageChangePending",
            pending,
        ));
    }
    if turned(ROLLOUT_FAILED, ConditionStatus::True) {
        out.push(Note::new(
            NoteType::Warning,
            "RolloutFailed",
            message(ROLLOUT_FAILED),
        ));
    }
    if turned(READY, ConditionStatus::True) && !ends_a_fleet_rollout(prev, new) {
        out.push(Note::new(
            NoteType::Normal,
            "Ready",
            new.endpoint.clone().unwrap_or_default(),
        ));
    }
}

/// Ready again at the end of a rollout the operator originated (a
/// configuration or release change, rolled out across the fleet): the
/// fleet's `FleetRollout` Event said what changed, and status says it is
/// Ready, so a fleet-wide change costs no Event per instance. A user's change,
/// a first Ready, and a recovery from anything but the rollout's own progress
/// still say `Ready`; Warning Events are never folded.
fn ends_a_fleet_rollout(prev: &KuraInstanceStatus, new: &KuraInstanceStatus) -> bool {
    let rolling_out = find(&prev.conditions, READY)
        .is_some_and(|c| ROLLOUT_PROGRESS.contains(&c.reason.as_str()));
    new.applied_origin == Some(crate::rollout::Origin::Operator)
        && rolling_out
        && prev.applied_revision == new.applied_revision
        && prev.applied_origin == new.applied_origin
}

/// The reasons Ready is False for while an applied revision rolls out.
const ROLLOUT_PROGRESS: [&str; 2] = ["WorkloadProgressing", "Activating"];

/// Inventory entries of status naming objects of another namespace: never
/// read, never pruned, and dropped from status by this write.
pub fn inventory_ignored(entries: &[String]) -> Note {
    Note::new(
        NoteType::Warning,
        "InventoryIgnored",
        format!(
            "status.inventory named objects outside the instance's namespace, which it never creates; ignored (not read, not pruned) and removed: {}",
            entries.join("; ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Condition, Phase};
    use crate::rollout::Origin;

    fn status(ready: (ConditionStatus, &str), origin: Origin) -> KuraInstanceStatus {
        KuraInstanceStatus {
            phase: Some(Phase::Ready),
            applied_revision: Some("r2".into()),
            applied_origin: Some(origin),
            conditions: vec![Condition::new(READY, ready.0, ready.1, "")],
            ..Default::default()
        }
    }

    fn reasons(prev: &KuraInstanceStatus, new: &KuraInstanceStatus) -> Vec<String> {
        notes_for(prev, new, &Outcome::Converged)
            .into_iter()
            .map(|n| n.reason)
            .collect()
    }

    /// A fleet-wide change: its `Applied` Event is the instance's one Event;
    /// Ready at the end of the rollout is in status only.
    #[test]
    fn the_end_of_a_rollout_the_operator_originated_is_no_second_event() {
        let rolling = status(
            (ConditionStatus::False, "WorkloadProgressing"),
            Origin::Operator,
        );
        let ready = status((ConditionStatus::True, "Active"), Origin::Operator);
        assert!(reasons(&rolling, &ready).is_empty());
        // Negative control: the same rollout, the user's change: Ready is said.
        let rolling = status(
            (ConditionStatus::False, "WorkloadProgressing"),
            Origin::User,
        );
        let ready = status((ConditionStatus::True, "Active"), Origin::User);
        assert_eq!(reasons(&rolling, &ready), ["Ready"]);
    }

    fn applied(
        prev: &KuraInstanceStatus,
        new: &KuraInstanceStatus,
        reasons: Vec<ApplyReason>,
    ) -> Vec<String> {
        let outcome = Outcome::Applied {
            reasons,
            sent: vec!["StatefulSet/acme".into()],
            inventory: Vec::new(),
            pruned: PruneOutcome::default(),
            streak: None,
            held: None,
        };
        notes_for(prev, new, &outcome)
            .into_iter()
            .map(|n| n.reason)
            .collect()
    }

    /// A new revision the operator originated is said once for the fleet (on
    /// the operator's Pod), not per instance; the user's, a force and a
    /// repair of drift still are.
    #[test]
    fn a_fleet_rollouts_apply_is_no_event_of_the_instance() {
        let before = KuraInstanceStatus {
            applied_revision: Some("r1".into()),
            ..status((ConditionStatus::True, "Active"), Origin::Operator)
        };
        let rolled = status(
            (ConditionStatus::False, "WorkloadProgressing"),
            Origin::Operator,
        );
        assert!(applied(&before, &rolled, vec![ApplyReason::ManifestDrift]).is_empty());
        let by_user = status(
            (ConditionStatus::False, "WorkloadProgressing"),
            Origin::User,
        );
        assert_eq!(
            applied(&before, &by_user, vec![ApplyReason::ManifestDrift]),
            ["Applied"]
        );
        assert_eq!(
            applied(&before, &rolled, vec![ApplyReason::Forced]),
            ["Applied"]
        );
        let repaired = applied(
            &rolled,
            &rolled,
            vec![ApplyReason::ChildMissing("Service/acme".into())],
        );
        assert_eq!(repaired, ["Applied"]);
    }

    /// Ready after anything but the rollout's own progress is news: a
    /// recovery (here, from pods that stopped serving) is said.
    #[test]
    fn a_recovery_is_ready_news_whoever_originated_the_revision() {
        let down = status(
            (ConditionStatus::False, "WorkloadUnavailable"),
            Origin::Operator,
        );
        let ready = status((ConditionStatus::True, "Active"), Origin::Operator);
        assert_eq!(reasons(&down, &ready), ["Ready"]);
    }
}
