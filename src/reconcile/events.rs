//! Events on transitions, not on every pass: an apply (with its reasons), a
//! force token acknowledged, a prune, the first failure, Stalled, Invalid, a
//! name or host conflict, a child being deleted, Ready.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use super::status::{Outcome, failure_reason};
use crate::api::conditions::{READY, ROLLOUT_FAILED, STALLED, STORAGE_CHANGE_PENDING, VALID, find};
use std::sync::Arc;

use crate::api::{ConditionStatus, KuraInstanceStatus};
use crate::context::Context;
use crate::render::hash::short;

pub fn events_for(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    outcome: &Outcome,
) -> Vec<Event> {
    let mut out = Vec::new();
    let ev = |type_, reason: &str, note: String| Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    let turned = |t: &str, to: ConditionStatus| {
        find(&new.conditions, t).is_some_and(|c| c.status == to)
            && find(&prev.conditions, t).is_none_or(|c| c.status != to)
    };
    // A failure is news when Ready starts to say it (another reason or
    // message), not on every retry of the same error.
    let ready_news = || {
        let reason_and_message = |s: &KuraInstanceStatus| {
            find(&s.conditions, READY).map(|c| (c.reason.clone(), c.message.clone()))
        };
        reason_and_message(prev) != reason_and_message(new)
    };
    if let Some(failure) = outcome.failure()
        && ready_news()
    {
        out.push(ev(
            EventType::Warning,
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
        } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            let rev = short(new.applied_revision.as_deref().unwrap_or_default());
            let origin = match new.applied_origin {
                Some(crate::rollout::Origin::Operator) => "operator configuration or release",
                _ => "spec or force",
            };
            let note = if held.is_some() {
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
            out.push(ev(EventType::Normal, "Applied", note));
            if new.last_handled_reapply_at != prev.last_handled_reapply_at
                && let Some(token) = &new.last_handled_reapply_at
            {
                out.push(ev(
                    EventType::Normal,
                    "ForcedReapply",
                    format!("re-applied for kura.dev/reapply-at={token}"),
                ));
            }
            if !pruned.deleted.is_empty() {
                out.push(ev(
                    EventType::Normal,
                    "Pruned",
                    format!(
                        "deleted objects the new revision no longer has: {}",
                        pruned.deleted.join(", ")
                    ),
                ));
            }
            if let Some(note) = super::plan::conflict::took_back(reasons) {
                out.push(ev(EventType::Warning, "FieldConflict", note));
            }
            if !pruned.kept.is_empty() {
                out.push(ev(
                    EventType::Normal,
                    "PruneSkipped",
                    pruned.kept.join("; "),
                ));
            }
        }
        Outcome::NameConflict(_) if ready_news() => {
            let msg = find(&new.conditions, READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            out.push(ev(EventType::Warning, "NameConflict", msg));
        }
        Outcome::ChildTerminating(_) if ready_news() => {
            let msg = find(&new.conditions, READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            out.push(ev(EventType::Warning, "ChildTerminating", msg));
        }
        Outcome::HostConflict(conflict) if ready_news() => {
            out.push(ev(EventType::Warning, "HostConflict", conflict.to_string()));
        }
        Outcome::Invalid(errors) => {
            let changed = find(&prev.conditions, VALID).is_none_or(|c| {
                c.status != ConditionStatus::False || c.message != errors.to_string()
            });
            if changed {
                out.push(ev(EventType::Warning, "InvalidSpec", errors.to_string()));
            }
        }
        _ => {}
    }
    if turned(STALLED, ConditionStatus::True) && outcome.failure().is_some() {
        let msg = find(&new.conditions, STALLED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        out.push(ev(EventType::Warning, "Stalled", msg));
    }
    let storage = |s: &KuraInstanceStatus| {
        find(&s.conditions, STORAGE_CHANGE_PENDING).map(|c| c.message.clone())
    };
    if let Some(pending) = storage(new)
        && storage(prev) != Some(pending.clone())
    {
        out.push(ev(EventType::Warning, "StorageChangePending", pending));
    }
    if turned(ROLLOUT_FAILED, ConditionStatus::True) {
        let msg = find(&new.conditions, ROLLOUT_FAILED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        out.push(ev(EventType::Warning, "RolloutFailed", msg));
    }
    if turned(READY, ConditionStatus::True) {
        out.push(ev(
            EventType::Normal,
            "Ready",
            new.endpoint.clone().unwrap_or_default(),
        ));
    }
    out
}

/// Publish `events` without holding up the reconcile: an Event is a write of
/// its own, and awaiting it put a round trip (or a throttled retry) between an
/// apply and the status that records it. One that cannot be written is logged
/// and never fails the reconcile.
///
/// A `Recorder` made for the batch, not one for the process: kube's recorder
/// keeps every Event it published for six minutes to fold repeats into a series,
/// keyed without the note, so a second Applied within that time would have
/// shown the first one's revision with a count of 2; and at a thousand
/// instances that cache was megabytes of the operator's memory. Our Events
/// mark transitions, each with its own note: there is nothing to fold.
/// A status write that failed: the object says so itself, since its status
/// cannot (the API's message names the field and the reason; no secret is
/// in a status).
pub fn status_write_failed(error: &kube::Error) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "StatusWriteFailed".into(),
        note: Some(
            format!("writing status failed (retried with backoff): {error}")
                .chars()
                .take(1000)
                .collect(),
        ),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// Inventory entries of status naming objects of another namespace: never
/// read, never pruned, and dropped from status by this write.
pub fn inventory_ignored(entries: &[String]) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "InventoryIgnored".into(),
        note: Some(
            format!(
                "status.inventory named objects outside the instance's namespace, which it never creates; ignored (not read, not pruned) and removed: {}",
                entries.join("; ")
            )
            .chars()
            .take(1000)
            .collect(),
        ),
        action: "Reconcile".into(),
        secondary: None,
    }
}

pub fn publish<K: Resource<DynamicType = ()>>(ctx: &Context, object: &Arc<K>, events: Vec<Event>) {
    if events.is_empty() {
        return;
    }
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = object.object_ref(&());
    tokio::spawn(async move {
        for event in events {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(namespace = ?reference.namespace, kind = ?reference.kind, name = ?reference.name, error = %e, reason = %event.reason, "could not publish event");
            }
        }
    });
}

/// A pause whose end has passed resumes the instance by itself: said once,
/// on the pass that leaves the Paused phase.
pub fn pause_expired(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    spec: &crate::api::KuraInstanceSpec,
    now: jiff::Timestamp,
) -> Option<Event> {
    use crate::api::Phase;
    let crate::window::Pause::Expired { at } = crate::window::pause(spec, now) else {
        return None;
    };
    if prev.phase != Some(Phase::Paused) || new.phase == Some(Phase::Paused) {
        return None;
    }
    let p = spec.pause.clone().unwrap_or_default();
    let by = p.by.map(|b| format!(" by {b}")).unwrap_or_default();
    let reason = p.reason.map(|r| format!(" ({r})")).unwrap_or_default();
    Some(Event {
        type_: EventType::Normal,
        reason: "PauseExpired".into(),
        note: Some(format!(
            "the pause{by}{reason} ended at {at} (spec.pause.until): the instance resumes; spec.paused is still true and counts for nothing until spec.pause.until is moved"
        )),
        action: "Reconcile".into(),
        secondary: None,
    })
}

/// A change whose window deadline passed goes though its window is closed:
/// said once, when it is admitted (or, with no budget to wait for, applied).
pub fn deadline_overrode_window(
    observed: &crate::reconcile::plan::Observed,
    outcome: &Outcome,
) -> Option<Event> {
    let crate::window::Gate::PastDeadline(at) = observed.budget.gate else {
        return None;
    };
    let goes = match outcome {
        Outcome::Admitted => true,
        Outcome::Applied { held: None, .. } => !observed.budget.budgeted,
        _ => false,
    };
    goes.then(|| Event {
        type_: EventType::Normal,
        reason: "WindowDeadlinePassed".into(),
        note: Some(format!(
            "its maintenance window is closed, but the deadline {at} (rollout.windowDeadline) has passed: the configuration or release change restarts its pods now"
        )),
        action: "Reconcile".into(),
        secondary: None,
    })
}
