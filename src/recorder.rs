//! The Event recorder: every Event the operator publishes (an instance's, a
//! gateway's, those on its own Pod) leaves through [`publish`], without
//! holding up the caller.

// The Event recorder (docs/architecture.md, "Who writes").
#![allow(clippy::disallowed_methods)]

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Publishes `events` on `reference`, in order, without waiting: an Event is
/// a write of its own, and awaiting it put a round trip (or a throttled
/// retry) between a write and the next step. One that cannot be written is
/// logged and fails nothing.
///
/// A `Recorder` made for the batch, not one for the process: kube's recorder
/// keeps every Event it published for six minutes to fold repeats into a
/// series, keyed without the note, so a second Applied within that time would
/// have shown the first one's revision with a count of 2; and at a thousand
/// instances that cache was megabytes of the operator's memory. Our Events
/// mark transitions, each with its own note: there is nothing to fold.
pub fn publish(
    client: kube::Client,
    reporter: Reporter,
    reference: ObjectReference,
    events: Vec<Event>,
) {
    if events.is_empty() {
        return;
    }
    let recorder = Recorder::new(client, reporter);
    tokio::spawn(async move {
        for event in events {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(namespace = ?reference.namespace, kind = ?reference.kind, name = ?reference.name, error = %e, reason = %event.reason, "could not publish event");
            }
        }
    });
}
