//! Window arithmetic, by table: time zones, daylight-saving changes, windows
//! across midnight and the week's end, overlapping openings, deadlines, and
//! pauses that end.

use jiff::Timestamp;

use super::*;
use crate::api::{MaintenanceWindow, PauseSpec, Weekday};

fn window(days: &[Weekday], start: &str, duration: &str, tz: Option<&str>) -> Window {
    Window::parse(&MaintenanceWindow {
        days: days.to_vec(),
        start: start.into(),
        duration: duration.into(),
        time_zone: tz.map(str::to_string),
    })
    .unwrap()
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn open(closes: &str) -> Opening {
    Opening::Open { closes: t(closes) }
}

fn closed(opens: &str) -> Opening {
    Opening::Closed { opens: t(opens) }
}

use Weekday::*;

/// 2026-12-07 is a Monday.
#[test]
fn weekly_window_in_utc_opens_and_closes_on_the_minute() {
    let w = window(&[Monday], "02:00", "2h", None);
    for (now, want) in [
        ("2026-12-07T01:59:59Z", closed("2026-12-07T02:00:00Z")),
        ("2026-12-07T02:00:00Z", open("2026-12-07T04:00:00Z")),
        ("2026-12-07T03:59:59Z", open("2026-12-07T04:00:00Z")),
        // Closing is exclusive: at 04:00 the next opening is a week away.
        ("2026-12-07T04:00:00Z", closed("2026-12-14T02:00:00Z")),
        ("2026-12-10T12:00:00Z", closed("2026-12-14T02:00:00Z")),
        ("2026-12-13T23:00:00Z", closed("2026-12-14T02:00:00Z")),
    ] {
        assert_eq!(w.at(t(now)), want, "at {now}");
    }
}

#[test]
fn a_window_crossing_midnight_is_open_after_midnight() {
    let w = window(&[], "23:00", "3h", None);
    for (now, want) in [
        ("2026-12-08T01:00:00Z", open("2026-12-08T02:00:00Z")),
        ("2026-12-08T02:00:00Z", closed("2026-12-08T23:00:00Z")),
        ("2026-12-08T22:59:00Z", closed("2026-12-08T23:00:00Z")),
        ("2026-12-08T23:30:00Z", open("2026-12-09T02:00:00Z")),
    ] {
        assert_eq!(w.at(t(now)), want, "at {now}");
    }
}

/// Sunday 23:00 for 3h closes on Monday, in the next week.
#[test]
fn a_window_crossing_the_weeks_end_is_open_on_monday() {
    let w = window(&[Sunday], "23:00", "3h", Some("UTC"));
    for (now, want) in [
        ("2026-12-13T22:00:00Z", closed("2026-12-13T23:00:00Z")),
        ("2026-12-14T00:30:00Z", open("2026-12-14T02:00:00Z")),
        ("2026-12-14T02:00:00Z", closed("2026-12-20T23:00:00Z")),
    ] {
        assert_eq!(w.at(t(now)), want, "at {now}");
    }
}

/// Local time: Monday 01:00 in Tokyo (+09:00) is Sunday 16:00 UTC; Friday
/// 20:00 in New York (-05:00 in December) is Saturday 01:00 UTC.
#[test]
fn time_zones_move_the_day_as_well_as_the_hour() {
    let tokyo = window(&[Monday], "01:00", "1h", Some("Asia/Tokyo"));
    assert_eq!(
        tokyo.at(t("2026-12-13T15:00:00Z")),
        closed("2026-12-13T16:00:00Z")
    );
    assert_eq!(
        tokyo.at(t("2026-12-13T16:30:00Z")),
        open("2026-12-13T17:00:00Z")
    );
    let ny = window(&[Friday], "20:00", "90m", Some("America/New_York"));
    assert_eq!(
        ny.at(t("2026-12-11T12:00:00Z")),
        closed("2026-12-12T01:00:00Z")
    );
    assert_eq!(
        ny.at(t("2026-12-12T02:00:00Z")),
        open("2026-12-12T02:30:00Z")
    );
}

/// Berlin springs forward on Sunday 2026-03-29 at 02:00 (+01:00 → +02:00):
/// 02:30 does not exist that night, and the window opens at 03:30 local
/// (01:30 UTC), as long as ever; the week before and after it opens at
/// 02:30 local (01:30 UTC before, 00:30 UTC after).
#[test]
fn a_start_the_spring_forward_skips_opens_after_the_gap() {
    let w = window(&[Sunday], "02:30", "1h", Some("Europe/Berlin"));
    for (now, want) in [
        ("2026-03-22T00:00:00Z", closed("2026-03-22T01:30:00Z")),
        ("2026-03-28T12:00:00Z", closed("2026-03-29T01:30:00Z")),
        ("2026-03-29T01:45:00Z", open("2026-03-29T02:30:00Z")),
        ("2026-03-29T03:00:00Z", closed("2026-04-05T00:30:00Z")),
    ] {
        assert_eq!(w.at(t(now)), want, "at {now}");
    }
}

/// Berlin falls back on Sunday 2026-10-25 at 03:00 (+02:00 → +01:00): 02:30
/// happens twice, and the window opens the first time (00:30 UTC).
#[test]
fn a_start_the_fall_back_repeats_opens_the_first_time() {
    let w = window(&[Sunday], "02:30", "1h", Some("Europe/Berlin"));
    assert_eq!(
        w.at(t("2026-10-25T00:00:00Z")),
        closed("2026-10-25T00:30:00Z")
    );
    assert_eq!(
        w.at(t("2026-10-25T01:00:00Z")),
        open("2026-10-25T01:30:00Z")
    );
    // The second 02:30 (01:30 UTC) is after the window.
    assert_eq!(
        w.at(t("2026-10-25T01:30:00Z")),
        closed("2026-11-01T01:30:00Z")
    );
}

/// The duration is elapsed time: 8h from Saturday 22:00 across the spring
/// forward closes at 07:00 local, not 06:00.
#[test]
fn a_window_across_a_clock_change_lasts_its_duration() {
    let w = window(&[Saturday], "22:00", "8h", Some("Europe/Berlin"));
    assert_eq!(
        w.at(t("2026-03-28T21:00:00Z")),
        open("2026-03-29T05:00:00Z")
    );
}

#[test]
fn overlapping_and_touching_openings_are_one() {
    // Every day for 24h: always open, closing only past the days computed.
    let always = window(&[], "00:00", "24h", None);
    let Opening::Open { closes } = always.at(t("2026-12-08T12:00:00Z")) else {
        panic!("always open");
    };
    assert!(closes >= t("2026-12-15T00:00:00Z"), "{closes}");
    // Saturday 20:00 for 30h and Sunday 12:00 for 20h: open until Monday 08:00.
    let weekend = window(&[Saturday, Sunday], "20:00", "30h", None);
    assert_eq!(
        weekend.at(t("2026-12-13T10:00:00Z")),
        open("2026-12-15T02:00:00Z")
    );
}

#[test]
fn a_week_long_window_on_one_day_is_open_but_at_its_turn() {
    // Each opening lasts until the next: open on every day of the week.
    let w = window(&[Wednesday], "00:00", "168h", None);
    for now in [
        "2026-12-08T23:59:00Z",
        "2026-12-09T00:00:00Z",
        "2026-12-12T12:00:00Z",
    ] {
        assert!(matches!(w.at(t(now)), Opening::Open { .. }), "at {now}");
    }
}

#[test]
fn bad_windows_name_their_field() {
    let bad = |start: &str, duration: &str, tz: Option<&str>| {
        Window::parse(&MaintenanceWindow {
            days: vec![],
            start: start.into(),
            duration: duration.into(),
            time_zone: tz.map(str::to_string),
        })
        .unwrap_err()
        .0
    };
    assert_eq!(bad("24:00", "1h", None), "start");
    assert_eq!(bad("2:00", "1h", None), "start");
    assert_eq!(bad("02:00", "0m", None), "duration");
    assert_eq!(bad("02:00", "169h", None), "duration");
    assert_eq!(bad("02:00", "90s", None), "duration");
    assert_eq!(bad("02:00", "1h", Some("Europe/Atlantis")), "timeZone");
    assert_eq!(
        window(&[Saturday, Sunday], "02:00", "2h", Some("Europe/Berlin")).to_string(),
        "Saturday,Sunday 02:00 for 2h (Europe/Berlin)"
    );
}

#[test]
fn the_deadline_is_the_earlier_of_its_time_and_its_wait() {
    let now = t("2026-12-08T12:00:00Z");
    let since = Some(t("2026-12-08T00:00:00Z"));
    let d = |at: Option<&str>, after: Option<&str>| WindowDeadline {
        at: at.map(str::to_string),
        after: after.map(str::to_string),
    };
    assert_eq!(d(None, None).for_change(since, now), None);
    assert_eq!(
        d(Some("2026-12-20T00:00:00Z"), None).for_change(since, now),
        Some(t("2026-12-20T00:00:00Z"))
    );
    assert_eq!(
        d(None, Some("24h")).for_change(since, now),
        Some(t("2026-12-09T00:00:00Z"))
    );
    // Not waiting yet: the wait starts now.
    assert_eq!(
        d(None, Some("24h")).for_change(None, now),
        Some(t("2026-12-09T12:00:00Z"))
    );
    assert_eq!(
        d(Some("2026-12-08T06:00:00Z"), Some("24h")).for_change(since, now),
        Some(t("2026-12-08T06:00:00Z"))
    );
}

#[test]
fn the_gate_opens_with_the_window_or_the_deadline() {
    let w = window(&[Monday], "02:00", "2h", None);
    let src = "spec.maintenanceWindow";
    let closed_now = t("2026-12-08T12:00:00Z");
    assert_eq!(gate(None, None, closed_now), Gate::Open);
    assert_eq!(
        gate(Some((&w, src)), None, t("2026-12-07T03:00:00Z")),
        Gate::Open
    );
    let Gate::Closed(wait) = gate(Some((&w, src)), None, closed_now) else {
        panic!("closed");
    };
    assert_eq!(wait.opens, t("2026-12-14T02:00:00Z"));
    assert_eq!(wait.goes_at(), wait.opens);
    assert!(
        wait.to_string().contains("Monday 02:00 for 2h (UTC)"),
        "{wait}"
    );
    // A deadline before the opening: it goes at the deadline.
    let deadline = t("2026-12-10T00:00:00Z");
    let Gate::Closed(wait) = gate(Some((&w, src)), Some(deadline), closed_now) else {
        panic!("closed");
    };
    assert_eq!(wait.goes_at(), deadline);
    assert!(wait.to_string().contains("comes first"), "{wait}");
    // Past it while the window is open: simply open (nothing to override).
    assert_eq!(
        gate(
            Some((&w, src)),
            Some(t("2026-12-01T00:00:00Z")),
            t("2026-12-07T03:00:00Z")
        ),
        Gate::Open
    );
    // Past it while closed: the window no longer counts.
    assert_eq!(
        gate(Some((&w, src)), Some(t("2026-12-08T11:00:00Z")), closed_now),
        Gate::PastDeadline(t("2026-12-08T11:00:00Z"))
    );
}

#[test]
fn a_pause_ends_at_its_until() {
    let mut spec: crate::api::KuraInstanceSpec = serde_json::from_value(serde_json::json!({
        "account": "acme", "region": "eu-west-1", "image": "kura:1",
        "storage": {"size": "1Gi"}
    }))
    .unwrap();
    let now = t("2026-12-08T12:00:00Z");
    assert_eq!(pause(&spec, now), Pause::No);
    spec.paused = true;
    assert_eq!(pause(&spec, now), Pause::Paused { until: None });
    spec.pause = Some(PauseSpec {
        reason: Some("migration".into()),
        by: Some("alice".into()),
        until: Some("2026-12-08T13:00:00Z".into()),
    });
    assert!(paused(&spec, now));
    assert!(pause_ends(&spec));
    assert_eq!(
        pause(&spec, t("2026-12-08T13:00:00Z")),
        Pause::Expired {
            at: t("2026-12-08T13:00:00Z")
        }
    );
    assert!(!paused(&spec, t("2026-12-08T13:00:01Z")));
    // The details alone pause nothing.
    spec.paused = false;
    assert_eq!(pause(&spec, now), Pause::No);
}

/// A pause until the end of the year 9999 (past jiff's last instant) is a
/// pause for ever, not an `until` that ends nothing.
#[test]
fn a_pause_until_the_year_9999_never_ends() {
    let mut spec: crate::api::KuraInstanceSpec = serde_json::from_value(serde_json::json!({
        "account": "acme", "region": "eu-west-1", "image": "kura:1",
        "storage": {"size": "1Gi"}, "paused": true,
        "pause": {"until": "9999-12-31T23:59:59Z"}
    }))
    .unwrap();
    for now in [t("2026-12-08T12:00:00Z"), t("9999-12-30T21:59:59Z")] {
        assert_eq!(
            pause(&spec, now),
            Pause::Paused {
                until: Some(Timestamp::MAX)
            }
        );
    }
    assert!(pause_ends(&spec));
    spec.pause = Some(PauseSpec {
        until: Some("2026-12-08T13:00:00.1234567891Z".into()),
        ..Default::default()
    });
    assert_eq!(
        pause(&spec, t("2026-12-08T12:00:00Z")),
        Pause::Paused {
            until: Some(t("2026-12-08T13:00:00.123456789Z"))
        }
    );
}

/// A configuration's window reads any duration `parse_duration` reads (it is
/// never admitted by the apiserver); one of a `KuraInstance` only what the
/// CRD's pattern admits.
#[test]
fn a_configured_window_reads_any_duration_an_admitted_one_the_crds() {
    let w = |start: &str, duration: &str| MaintenanceWindow {
        days: vec![],
        start: start.into(),
        duration: duration.into(),
        time_zone: None,
    };
    for duration in [
        "1h30m",
        "PT1H30M",
        "5400s",
        "5400",
        "90m",
        "1.5h",
        "90 minutes",
    ] {
        let parsed = Window::parse(&w("02:00", duration)).unwrap();
        assert_eq!(parsed.length, SignedDuration::from_mins(90), "{duration}");
    }
    assert!(Window::admitted(&w("02:00", "1h30m")).is_ok());
    assert_eq!(
        Window::admitted(&w("02:00", "5400s")).unwrap_err().0,
        "duration"
    );
    // The configuration's start as before: `parse_start`, no pattern.
    assert!(Window::parse(&w("+1:05", "1h")).is_ok());
    assert_eq!(Window::admitted(&w("+1:05", "1h")).unwrap_err().0, "start");
    assert_eq!(
        Window::admitted(&MaintenanceWindow {
            time_zone: Some("Europe//Berlin".into()),
            ..w("02:00", "1h")
        })
        .unwrap_err()
        .0,
        "timeZone"
    );
}

/// `rollout.windowDeadline.at`: the apiserver's RFC 3339 up to the year 9999
/// (past jiff's range, a deadline that never comes), and what jiff read before.
#[test]
fn a_deadline_reads_any_rfc3339_time_and_what_it_read_before() {
    assert_eq!(deadline_at("9999-12-31T23:59:59Z"), Ok(Timestamp::MAX));
    for (at, expected) in [
        ("2026-12-20T00:00:00Z", "2026-12-20T00:00:00Z"),
        ("2026-12-20t00:00:00z", "2026-12-20T00:00:00Z"),
        ("2026-12-20 00:00Z", "2026-12-20T00:00:00Z"),
        ("2026-12-20T01:00:00+24:00", "2026-12-19T01:00:00Z"),
    ] {
        assert_eq!(deadline_at(at), Ok(t(expected)), "{at}");
    }
    let err = deadline_at("2016-12-31T23:59:60Z");
    assert!(err.is_ok(), "jiff read a leap second before: {err:?}");
    let err = deadline_at("next week").unwrap_err();
    assert!(err.contains("is not an RFC 3339 time"), "{err}");
    let far = WindowDeadline {
        at: Some("9999-12-31T23:59:59Z".into()),
        after: Some("1h30m".into()),
    };
    let now = t("2026-12-08T12:00:00Z");
    assert_eq!(far.for_change(None, now), Some(t("2026-12-08T13:30:00Z")));
}
