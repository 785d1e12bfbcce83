//! Take-backs of contested fields, counted per window, so that two writers
//! never ping-pong over one field (docs/incidents.md #4): at most
//! [`MAX_TAKE_BACKS`] per [`CONFLICT_WINDOW`], then the other values stand
//! until the window ends, and the conflict is reported. The part of `plan`
//! and of status that the instance and the gateway controllers share: both
//! keep the same record (`ConflictStatus`) in their status.

use std::time::Duration;

use jiff::Timestamp;

use super::ApplyReason;
use crate::api::ConflictStatus;
use crate::time::{later, recorded_time};

/// At most this many take-backs of contested fields per [`CONFLICT_WINDOW`].
pub const MAX_TAKE_BACKS: i64 = 3;
pub const CONFLICT_WINDOW: Duration = Duration::from_secs(60);

/// The record, if its window is still open at `now`, with the window's end.
pub fn open(
    record: Option<&ConflictStatus>,
    now: Timestamp,
) -> Option<(&ConflictStatus, Timestamp)> {
    let c = record?;
    let end = later(recorded_time(&c.window_start, now)?, CONFLICT_WINDOW);
    (now < end).then_some((c, end))
}

/// Whether to hold instead of applying: everything to send is a contested
/// value to take back, and this window's take-backs are spent. Returns the
/// window's end (when to look again) and the managers to name.
pub fn hold(
    reasons: &[ApplyReason],
    record: Option<&ConflictStatus>,
    now: Timestamp,
) -> Option<(Timestamp, Vec<String>)> {
    if reasons.is_empty() || !reasons.iter().all(ApplyReason::is_contested) {
        return None;
    }
    let (c, end) = open(record, now).filter(|(c, _)| c.take_backs >= MAX_TAKE_BACKS)?;
    Some((end, c.managers.clone()))
}

/// The record after an apply for `reasons`: a take-back of contested values
/// counts against the open window (or opens one), naming every manager seen
/// in it; an apply that took nothing back keeps the open window as it is.
pub fn after_apply(
    record: Option<&ConflictStatus>,
    reasons: &[ApplyReason],
    now: Timestamp,
) -> Option<ConflictStatus> {
    let open = open(record, now);
    if !reasons.iter().any(ApplyReason::is_contested) {
        return open.map(|(c, _)| c.clone());
    }
    let mut managers: Vec<String> = reasons
        .iter()
        .flat_map(|r| r.managers().iter().cloned())
        .chain(open.iter().flat_map(|(c, _)| c.managers.iter().cloned()))
        .collect();
    managers.sort();
    managers.dedup();
    Some(match open {
        Some((c, _)) => ConflictStatus {
            take_backs: c.take_backs.saturating_add(1),
            window_start: c.window_start.clone(),
            managers,
        },
        None => ConflictStatus {
            take_backs: 1,
            window_start: now.to_string(),
            managers,
        },
    })
}

/// The record to keep when nothing was applied or taken back: the open one.
pub fn still_open(record: Option<&ConflictStatus>, now: Timestamp) -> Option<ConflictStatus> {
    open(record, now).map(|(c, _)| c.clone())
}

/// The FieldConflict condition's message, while the record calls for one
/// (a second take-back or more in an open window).
pub fn condition_message(record: Option<&ConflictStatus>, now: Timestamp) -> Option<String> {
    let (c, end) = open(record, now).filter(|(c, _)| c.take_backs >= 2)?;
    let who = names_or_unknown(&c.managers);
    let (n, since) = (c.take_backs, &c.window_start);
    Some(if n >= MAX_TAKE_BACKS {
        format!(
            "{who} keep undoing what this operator renders: {n} take-backs since {since}, the most a minute allows: their values stand until {end}, then the operator's are applied again"
        )
    } else {
        format!(
            "{who} keep undoing what this operator renders: {n} take-backs since {since} (at most {MAX_TAKE_BACKS} a minute; the operator's values win)"
        )
    })
}

/// The note of the FieldConflict Event of an apply that took contested
/// values back (naming who held them), if it did.
pub fn took_back(reasons: &[ApplyReason]) -> Option<String> {
    let taken: Vec<String> = reasons
        .iter()
        .filter(|r| r.is_contested())
        .map(ToString::to_string)
        .collect();
    (!taken.is_empty()).then(|| format!("took back {}", taken.join("; ")))
}

fn names_or_unknown(managers: &[String]) -> String {
    if managers.is_empty() {
        "an admission webhook or policy (no other field manager)".into()
    } else {
        managers.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn record(take_backs: i64, since: &str) -> ConflictStatus {
        ConflictStatus {
            take_backs,
            window_start: since.into(),
            managers: vec!["kubectl (scale subresource)".into()],
        }
    }

    fn scaled() -> Vec<ApplyReason> {
        vec![ApplyReason::FieldDrift(
            "Deployment ns/gw".into(),
            vec!["kubectl (scale subresource)".into()],
        )]
    }

    #[test]
    fn take_backs_are_counted_in_one_window_then_held_until_it_ends() {
        let t0 = at("2026-01-01T00:00:00Z");
        let mut r = None;
        for n in 1..=MAX_TAKE_BACKS {
            assert_eq!(hold(&scaled(), r.as_ref(), t0), None, "take-back {n} goes");
            r = after_apply(r.as_ref(), &scaled(), t0);
            assert_eq!(r.as_ref().unwrap().take_backs, n);
        }
        let (end, managers) = hold(&scaled(), r.as_ref(), at("2026-01-01T00:00:30Z")).unwrap();
        assert_eq!(end, at("2026-01-01T00:01:00Z"));
        assert_eq!(managers, ["kubectl (scale subresource)"]);
        // The window ends: the next take-back goes and opens a new one.
        let later = at("2026-01-01T00:01:00Z");
        assert_eq!(hold(&scaled(), r.as_ref(), later), None);
        let next = after_apply(r.as_ref(), &scaled(), later).unwrap();
        assert_eq!((next.take_backs, next.window_start), (1, later.to_string()));
    }

    #[test]
    fn anything_but_a_take_back_is_never_held() {
        let r = record(MAX_TAKE_BACKS, "2026-01-01T00:00:00Z");
        let now = at("2026-01-01T00:00:10Z");
        let mut mixed = scaled();
        mixed.push(ApplyReason::ChildMissing("Service ns/gw".into()));
        assert_eq!(hold(&mixed, Some(&r), now), None);
        // Nothing to apply but a release of an old field manager.
        assert_eq!(hold(&[], Some(&r), now), None);
        // An apply that took nothing back counts nothing.
        let kept = after_apply(Some(&r), &[ApplyReason::ManifestDrift], now);
        assert_eq!(kept, Some(r));
    }

    #[test]
    fn the_condition_names_the_managers_and_says_when_theirs_stand() {
        let now = at("2026-01-01T00:00:10Z");
        assert_eq!(
            condition_message(Some(&record(1, "2026-01-01T00:00:00Z")), now),
            None
        );
        let two = condition_message(Some(&record(2, "2026-01-01T00:00:00Z")), now).unwrap();
        assert!(
            two.contains("kubectl (scale subresource)") && two.contains("values win"),
            "{two}"
        );
        let spent = condition_message(Some(&record(3, "2026-01-01T00:00:00Z")), now).unwrap();
        assert!(
            spent.contains("stand until 2026-01-01T00:01:00Z"),
            "{spent}"
        );
        // A closed window says nothing; a time in the future counts as now.
        assert_eq!(
            condition_message(
                Some(&record(3, "2026-01-01T00:00:00Z")),
                at("2026-01-01T00:01:00Z")
            ),
            None
        );
        let future = record(9, "2999-01-01T00:00:00Z");
        assert_eq!(
            open(Some(&future), now).unwrap().1,
            at("2026-01-01T00:01:10Z")
        );
        assert_eq!(took_back(&[ApplyReason::ManifestDrift]), None);
        assert_eq!(
            took_back(&scaled()).unwrap(),
            "took back fields of Deployment ns/gw taken by kubectl (scale subresource)"
        );
    }
}
