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
    out.push(Note::new(NoteType::Normal, "Applied", note));
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
    if turned(READY, ConditionStatus::True) {
        out.push(Note::new(
            NoteType::Normal,
            "Ready",
            new.endpoint.clone().unwrap_or_default(),
        ));
    }
}

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
