//! Events on transitions, not on every pass: an apply (with its reasons), a
//! force token acknowledged, a prune, the first failure, Stalled, Invalid, Ready.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use super::status::Outcome;
use crate::api::conditions::{READY, STALLED, VALID, find};
use crate::api::{ConditionStatus, KuraInstance, KuraInstanceStatus};
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
    match outcome {
        Outcome::Applied {
            reasons, pruned, ..
        } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            let rev = short(new.applied_revision.as_deref().unwrap_or_default());
            out.push(ev(
                EventType::Normal,
                "Applied",
                format!("applied revision {rev}: {}", why.join(", ")),
            ));
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
            let taken: Vec<String> = reasons
                .iter()
                .filter(|r| matches!(r, crate::reconcile::plan::ApplyReason::FieldDrift(..)))
                .map(ToString::to_string)
                .collect();
            if !taken.is_empty() {
                out.push(ev(
                    EventType::Warning,
                    "FieldConflict",
                    format!("took back {}", taken.join("; ")),
                ));
            }
            if !pruned.kept.is_empty() {
                out.push(ev(
                    EventType::Normal,
                    "PruneSkipped",
                    pruned.kept.join("; "),
                ));
            }
        }
        Outcome::ApplyFailed { error, .. } => {
            let failures = new.retry.as_ref().map_or(0, |r| r.failures);
            if new.last_handled_reapply_at != prev.last_handled_reapply_at
                && let Some(token) = &new.last_handled_reapply_at
            {
                out.push(ev(
                    EventType::Normal,
                    "ForcedReapply",
                    format!("re-apply attempted for kura.dev/reapply-at={token}"),
                ));
            }
            if failures == 1 {
                out.push(ev(EventType::Warning, "ApplyFailed", error.clone()));
            }
            if turned(STALLED, ConditionStatus::True) {
                let msg = find(&new.conditions, STALLED)
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                out.push(ev(EventType::Warning, "Stalled", msg));
            }
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
pub fn publish(ctx: &Context, instance: &KuraInstance, events: Vec<Event>) {
    if events.is_empty() {
        return;
    }
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = instance.object_ref(&());
    tokio::spawn(async move {
        for event in events {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(namespace = ?reference.namespace, instance = ?reference.name, error = %e, reason = %event.reason, "could not publish event");
            }
        }
    });
}
