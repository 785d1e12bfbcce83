//! Events: what they say is `kura_core::events` (pure); here they are
//! published as Kubernetes Events (through the Event recorder, `recorder`),
//! without holding up the reconcile.

use kube::Resource;
use kube::runtime::events::{Event, EventType};
use std::sync::Arc;

use crate::context::Context;
use kura_core::api::KuraInstanceStatus;
use kura_core::events::{Note, NoteType};
use kura_core::outcome::Outcome;

/// The Events of a transition (`kura_core::events::notes_for`).
pub fn events_for(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    outcome: &Outcome,
) -> Vec<Event> {
    kura_core::events::notes_for(prev, new, outcome)
        .into_iter()
        .map(event)
        .collect()
}

/// Inventory entries of status naming objects of another namespace.
pub fn inventory_ignored(entries: &[String]) -> Event {
    event(kura_core::events::inventory_ignored(entries))
}

/// A note as the Event the operator publishes.
pub fn event(note: Note) -> Event {
    Event {
        type_: match note.type_ {
            NoteType::Normal => EventType::Normal,
            NoteType::Warning => EventType::Warning,
        },
        reason: note.reason,
        note: Some(note.note),
        action: "Reconcile".into(),
        secondary: None,
    }
}

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

/// Publishes `events` on `object` without holding up the reconcile
/// (`recorder::publish`).
pub fn publish<K: Resource<DynamicType = ()>>(ctx: &Context, object: &Arc<K>, events: Vec<Event>) {
    let reference = object.object_ref(&());
    crate::recorder::publish(
        ctx.client.clone(),
        ctx.report.reporter.clone(),
        reference,
        events,
    );
}

/// A pause whose end has passed resumes the instance by itself: said once,
/// on the pass that leaves the Paused phase.
pub fn pause_expired(
    prev: &KuraInstanceStatus,
    new: &KuraInstanceStatus,
    spec: &kura_core::api::KuraInstanceSpec,
    now: jiff::Timestamp,
) -> Option<Event> {
    use kura_core::api::Phase;
    let kura_core::window::Pause::Expired { at } = kura_core::window::pause(spec, now) else {
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
    observed: &kura_core::plan::Observed,
    outcome: &Outcome,
) -> Option<Event> {
    let kura_core::window::Gate::PastDeadline(at) = observed.budget.gate else {
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
