//! Maintenance windows, deadlines and pauses: when the operator may start a
//! change of its own that restarts an instance's pods.
//!
//! - **Window.** Weekly: it opens on each of its days at its start time in
//!   its time zone and stays open for its duration, measured in elapsed time.
//!   A start the clocks skip (a daylight-saving gap) opens when they have
//!   moved on (02:30 on a spring-forward night opens at 03:30 local time); a
//!   start the clocks repeat opens the first time. A window may cross
//!   midnight and the week's end (Sunday 23:00 for 3h closes Monday 02:00),
//!   and windows that overlap or touch are one opening.
//! - **What waits.** Only what the fleet budget paces (`crate::rollout`): an
//!   operator-originated change of a running pod template. The window is
//!   asked before the budget: closed, the change waits for its opening; open,
//!   the budget decides as ever. Only the *admission* waits: a change
//!   admitted before the window closes goes on (its apply, the StatefulSet's
//!   rolling update), and nothing is admitted after the window closed.
//! - **Deadline.** The configuration may say a change waits for no window
//!   past a time, or longer than a duration since it began waiting
//!   (`rollout.windowDeadline`): past it, the change takes the next slot of
//!   the budget whatever the window.
//! - **Pause.** `spec.paused` with an optional `spec.pause.until`: a pause
//!   whose end has passed is over.
//!
//! Everything here is pure: the time is an argument.

use std::time::Duration;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

use crate::api::instance::{MAX_WINDOW_DURATION, TIME_ZONE, WINDOW_DURATION, WINDOW_START};
use crate::api::{KuraInstanceSpec, MaintenanceWindow, Weekday};
use crate::rules::matches;
use crate::time::later;

/// The longest window: a week (every day's opening then touches the next).
pub const MAX_WINDOW: Duration = Duration::from_secs(168 * 3600);

/// A maintenance window, checked: its time zone exists, its start and
/// duration parse.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The days it opens on; never empty (no days given is every day).
    days: Vec<jiff::civil::Weekday>,
    start: Time,
    length: SignedDuration,
    tz: TimeZone,
    /// How it reads in messages: `Saturday,Sunday 02:00 for 2h (Europe/Berlin)`.
    shown: String,
}

/// Where a window stands at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Open now, until `closes`.
    Open { closes: Timestamp },
    /// Closed now; opens next at `opens`.
    Closed { opens: Timestamp },
}

/// What a window's duration must be.
const LENGTH_WANTED: &str =
    "is not a length of whole minutes or hours from 1m to 168h, such as 90m, 4h or 1h30m";

impl Window {
    /// Checks a window of a `KuraInstance`: the CRD's patterns first (an
    /// object can predate them), so that the operator refuses exactly what
    /// admission refuses; then [`Window::parse`]. A window of the
    /// configuration, never admitted, is read by `parse` alone (any duration
    /// `time::parse_duration` reads, as before).
    pub fn admitted(w: &MaintenanceWindow) -> Result<Window, (&'static str, String)> {
        if w.start.len() != 5 || !matches(WINDOW_START, &w.start) {
            return Err(("start", start_wanted(&w.start)));
        }
        if !(2..=MAX_WINDOW_DURATION).contains(&w.duration.len())
            || !matches(WINDOW_DURATION, &w.duration)
        {
            return Err(("duration", format!("{:?} {LENGTH_WANTED}", w.duration)));
        }
        if let Some(zone) = &w.time_zone
            && (!(1..=64).contains(&zone.len()) || !matches(TIME_ZONE, zone))
        {
            return Err(("timeZone", zone_wanted(zone)));
        }
        Window::parse(w)
    }

    /// Checks a window, naming the field at fault (relative to the window).
    pub fn parse(w: &MaintenanceWindow) -> Result<Window, (&'static str, String)> {
        let start = parse_start(&w.start).ok_or(("start", start_wanted(&w.start)))?;
        let length = crate::time::parse_duration(&w.duration)
            .ok()
            .filter(|d| (Duration::from_secs(60)..=MAX_WINDOW).contains(d) && d.as_secs() % 60 == 0)
            .ok_or(("duration", format!("{:?} {LENGTH_WANTED}", w.duration)))?;
        let zone = w.time_zone.as_deref().unwrap_or("UTC");
        let tz = TimeZone::get(zone).map_err(|_| ("timeZone", zone_wanted(zone)))?;
        let mut days: Vec<jiff::civil::Weekday> = w.days.iter().map(|d| weekday(*d)).collect();
        days.sort_by_key(|d| d.to_monday_one_offset());
        days.dedup();
        let named = if days.is_empty() {
            "every day".to_string()
        } else {
            w.days
                .iter()
                .map(|d| format!("{d:?}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        if days.is_empty() {
            days = (1..=7)
                .filter_map(|n| jiff::civil::Weekday::from_monday_one_offset(n).ok())
                .collect();
        }
        let shown = format!("{named} {} for {} ({zone})", w.start, w.duration);
        Ok(Window {
            days,
            start,
            length: SignedDuration::try_from(length).unwrap_or(SignedDuration::MAX),
            tz,
            shown,
        })
    }

    /// Whether the window is open at `now`, until when, or when it opens next.
    pub fn at(&self, now: Timestamp) -> Opening {
        let spans = self.openings_around(now);
        // The opening that holds `now`, extended by those it overlaps or touches.
        if let Some(first) = spans.iter().position(|(s, e)| *s <= now && now < *e) {
            let mut closes = spans[first].1;
            for (s, e) in &spans[first + 1..] {
                if *s <= closes {
                    closes = closes.max(*e);
                }
            }
            return Opening::Open { closes };
        }
        let opens = spans
            .iter()
            .map(|(s, _)| *s)
            .find(|s| *s > now)
            .unwrap_or(Timestamp::MAX);
        Opening::Closed { opens }
    }

    /// Every opening that starts from 8 days before `now` (a window is at
    /// most a week long) to 8 days after it (a weekly window opens within
    /// a week), as (opens, closes), in order.
    fn openings_around(&self, now: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        let today = now.to_zoned(self.tz.clone()).date();
        (-8..=8)
            .filter_map(|offset: i32| today.checked_add(offset.days()).ok())
            .filter(|date| self.days.contains(&date.weekday()))
            .filter_map(|date| self.opening_on(date))
            .collect()
    }

    /// The opening on `date` (local), as elapsed time from its local start.
    fn opening_on(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        // `compatible`: a skipped start moves past the gap, a repeated one is
        // the first of the two.
        let opens = self
            .tz
            .to_ambiguous_zoned(date.to_datetime(self.start))
            .compatible()
            .ok()?
            .timestamp();
        Some((opens, opens.checked_add(self.length).ok()?))
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

fn start_wanted(start: &str) -> String {
    format!("{start:?} is not a time of day such as 02:00 (HH:MM)")
}

fn zone_wanted(zone: &str) -> String {
    format!("{zone:?} is not a time zone of the IANA database, such as Europe/Berlin")
}

fn parse_start(s: &str) -> Option<Time> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    (s.len() == 5).then_some(())?;
    Time::new(h, m, 0, 0).ok()
}

fn weekday(d: Weekday) -> jiff::civil::Weekday {
    use jiff::civil::Weekday as J;
    match d {
        Weekday::Monday => J::Monday,
        Weekday::Tuesday => J::Tuesday,
        Weekday::Wednesday => J::Wednesday,
        Weekday::Thursday => J::Thursday,
        Weekday::Friday => J::Friday,
        Weekday::Saturday => J::Saturday,
        Weekday::Sunday => J::Sunday,
    }
}

/// `rollout.windowDeadline`: a change the operator originates waits for no
/// maintenance window past `at`, nor longer than `after` since it began
/// waiting. Either, both (the earlier counts) or neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowDeadline {
    /// RFC 3339, e.g. `2026-12-20T00:00:00Z`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// A duration such as `72h`, from when the change began waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl WindowDeadline {
    /// The deadline of a change waiting since `since` (now, when it is not
    /// waiting yet). Fields that do not parse count for nothing: the
    /// configuration's validation refuses them.
    pub fn for_change(&self, since: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
        let at = self.at.as_deref().and_then(|a| deadline_at(a).ok());
        let after = self
            .after
            .as_deref()
            .and_then(|a| crate::time::parse_duration(a).ok())
            .map(|d| later(since.unwrap_or(now), d));
        match (at, after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `rollout.windowDeadline.at`: an RFC 3339 time as the apiserver reads one
/// (`time::rfc3339`: up to 9999-12-31, past jiff's range the end of time), or
/// what jiff reads (a lowercase `t`, a space for it: the configuration is
/// never admitted by the apiserver, and these were read before).
pub fn deadline_at(at: &str) -> Result<Timestamp, String> {
    crate::time::rfc3339(at).or_else(|why| at.parse::<Timestamp>().map_err(|_| why))
}

/// Whether an operator-originated pod restart may start now, as far as the
/// window and the deadline go (the budget decides next).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Gate {
    /// No window, or it is open.
    #[default]
    Open,
    /// The window is closed, but the change's deadline passed at this time:
    /// it waits for no window.
    PastDeadline(Timestamp),
    /// It waits for the window.
    Closed(WindowWait),
}

/// A change waiting for its maintenance window: the status and `diff` say this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowWait {
    /// The window, as it reads (`Saturday 02:00 for 2h (Europe/Berlin)`).
    pub window: String,
    /// Where it comes from: `spec.maintenanceWindow` or the region's default.
    pub source: String,
    pub opens: Timestamp,
    /// The deadline, if the configuration gives one.
    pub deadline: Option<Timestamp>,
}

impl WindowWait {
    /// When the change will go at the earliest: the opening, or the deadline
    /// if that comes first.
    pub fn goes_at(&self) -> Timestamp {
        self.deadline.map_or(self.opens, |d| d.min(self.opens))
    }
}

impl std::fmt::Display for WindowWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "waiting for the maintenance window {} ({}), which opens at {}",
            self.window, self.source, self.opens
        )?;
        match self.deadline {
            Some(d) if d < self.opens => write!(
                f,
                "; its deadline {d} (rollout.windowDeadline) comes first: it goes then"
            ),
            Some(d) => write!(f, "; deadline {d} (rollout.windowDeadline)"),
            None => Ok(()),
        }
    }
}

/// The gate for `window` (and where it comes from) with `deadline`, at `now`.
pub fn gate(window: Option<(&Window, &str)>, deadline: Option<Timestamp>, now: Timestamp) -> Gate {
    let Some((window, source)) = window else {
        return Gate::Open;
    };
    match window.at(now) {
        Opening::Open { .. } => Gate::Open,
        // The deadline counts only when it overrides a closed window.
        Opening::Closed { .. } if deadline.is_some_and(|d| d <= now) => {
            Gate::PastDeadline(deadline.unwrap_or(now))
        }
        Opening::Closed { opens } => Gate::Closed(WindowWait {
            window: window.to_string(),
            source: source.to_string(),
            opens,
            deadline,
        }),
    }
}

/// The window an instance keeps: its own, or its region's default, with
/// where it comes from. An invalid one is `validate`'s to report (the
/// instance is then Invalid and waits for nothing); here it is none.
pub fn of_instance<'a>(
    spec: &'a KuraInstanceSpec,
    region_default: Option<&'a MaintenanceWindow>,
) -> Option<(Window, String)> {
    match (&spec.maintenance_window, region_default) {
        (Some(own), _) => Some((Window::parse(own).ok()?, "spec.maintenanceWindow".into())),
        (None, Some(default)) => Some((
            Window::parse(default).ok()?,
            format!("the default of region {}", spec.region),
        )),
        (None, None) => None,
    }
}

/// Where a pause stands at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Not paused.
    No,
    /// Paused, until `until` if set.
    Paused { until: Option<Timestamp> },
    /// `spec.paused` is true, but its `pause.until` has passed: resumed.
    Expired { at: Timestamp },
}

/// `spec.paused` with its end. An `until` that does not parse ends nothing
/// (the CRD and `validate` refuse it); one past jiff's range never comes.
pub fn pause(spec: &KuraInstanceSpec, now: Timestamp) -> Pause {
    if !spec.paused {
        return Pause::No;
    }
    let until = spec
        .pause
        .as_ref()
        .and_then(|p| p.until.as_deref())
        .and_then(|u| crate::time::rfc3339(u).ok());
    match until {
        Some(at) if at <= now => Pause::Expired { at },
        until => Pause::Paused { until },
    }
}

/// Paused now (`spec.paused`, and its end not passed).
pub fn paused(spec: &KuraInstanceSpec, now: Timestamp) -> bool {
    matches!(pause(spec, now), Pause::Paused { .. })
}

/// A pause that ends by itself: `spec.paused` with a `pause.until`.
pub fn pause_ends(spec: &KuraInstanceSpec) -> bool {
    spec.paused && spec.pause.as_ref().is_some_and(|p| p.until.is_some())
}

#[cfg(test)]
mod tests;
