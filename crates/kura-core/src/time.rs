//! Time arithmetic shared by the decisions: saturating sums, waits, times read
//! from status, spec and configuration, durations read from flags and
//! configuration, and the jitter that spreads retries. Depends on nothing else
//! in the crate but the API's RFC 3339 pattern (`rules::matches` of it).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::Resource;

use crate::api::instance::RFC3339;

/// `t + d`, saturating at the end of time instead of panicking.
pub fn later(t: Timestamp, d: Duration) -> Timestamp {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// How long from `now` until `at`, at least a second (a requeue).
pub fn until(at: Timestamp, now: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::try_from(d)
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}

/// A time read from status (anyone with access can write it): unparseable
/// (or out of range) is absent, and a time in the future is taken as now, so
/// that no status content can hold an instance back longer than the policy's
/// own waits. (Absent means "try now": the next status write replaces it.)
pub fn recorded_time(value: &str, now: Timestamp) -> Option<Timestamp> {
    value.parse::<Timestamp>().ok().map(|t| t.min(now))
}

/// A duration as jiff reads one: its friendly format (`90s`, `10m`, `1h30m`,
/// `500ms`, `1 hour`) or ISO 8601 (`PT1H30M`); or plain seconds (`90`), as
/// the flags always took. Never negative. Surrounding blanks are ignored.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let not_one = || {
        format!(
            "{s:?} is not a duration such as 90s, 10m or 1h30m (units ms, s, m, h; or ISO 8601 such as PT1H30M)"
        )
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(Duration::from_secs).map_err(|_| not_one());
    }
    let d: SignedDuration = s.parse().map_err(|_| not_one())?;
    if d.is_negative() {
        return Err(format!("{s:?} is negative: a duration here is 0 or more"));
    }
    Duration::try_from(d).map_err(|_| not_one())
}

/// The longest time the CRDs admit (`maxLength` of their time fields).
pub const MAX_RFC3339: usize = 40;

/// A time as the apiserver admits one into a CRD field with the pattern
/// [`RFC3339`] and a CEL `timestamp()` rule (Go's RFC 3339): a date that
/// exists, no leap second (`:60`), a fraction of any length (cut to
/// nanoseconds), an offset up to 24:60 either way (Go reads 24 hours and 60
/// minutes), and in UTC within the years 1 to 9999 (CEL's range). A time
/// past the end of jiff's range (9999-12-30T22:00Z) is that end, which never
/// comes: a pause "for ever" is honoured, not refused.
pub fn rfc3339(s: &str) -> Result<Timestamp, String> {
    let refused =
        |why: &str| format!("{s:?} is not an RFC 3339 time such as 2026-12-24T18:00:00Z{why}");
    if s.len() > MAX_RFC3339 || !crate::rules::matches(RFC3339, s) {
        return Err(refused(""));
    }
    // The pattern holds: ASCII digits where these are read.
    let n = |from: usize, to: usize| s[from..to].parse::<i32>().unwrap_or(-1);
    let (year, month, day) = (n(0, 4), n(5, 7), n(8, 10));
    let (hour, minute, second) = (n(11, 13), n(14, 16), n(17, 19));
    let zone_at = s[19..].find(['Z', '+', '-']).map_or(s.len(), |i| 19 + i);
    let digits = s[19..zone_at].trim_start_matches('.');
    let nanos = format!("{:0<9}", &digits[..digits.len().min(9)])
        .parse::<i32>()
        .unwrap_or(0);
    let offset = match &s[zone_at..] {
        "Z" => 0,
        zone => {
            let (h, m) = (n(zone_at + 1, zone_at + 3), n(zone_at + 4, zone_at + 6));
            if h > 24 || m > 60 {
                return Err(refused(": the offset is out of range"));
            }
            let secs = i64::from(h * 3600 + m * 60);
            if zone.starts_with('-') { -secs } else { secs }
        }
    };
    if hour > 23 || minute > 59 || second > 59 {
        return Err(refused(
            ": the time of day is out of range (no leap second)",
        ));
    }
    let local = jiff::civil::Date::new(year as i16, month as i8, day as i8)
        .map_err(|_| refused(": no such date"))?
        .at(hour as i8, minute as i8, second as i8, nanos);
    // In UTC: past 9999-12-31 (a civil date's end, and CEL's) or before the
    // year 1 is out of CEL's range.
    let utc = local
        .checked_sub(SignedDuration::from_secs(offset))
        .ok()
        .filter(|t| t.year() >= 1)
        .ok_or_else(|| refused(": in UTC it is not within the years 1 to 9999"))?;
    Ok(jiff::tz::Offset::UTC
        .to_timestamp(utc)
        .unwrap_or(Timestamp::MAX))
}

/// A number in 0..1, different per object and attempt (and per process: the
/// hasher's keys are random), to spread retries.
pub fn jitter<K: Resource>(object: &K, failures: u32) -> f64 {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let h = KEYS
        .get_or_init(Default::default)
        .hash_one((&object.meta().uid, failures));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;
