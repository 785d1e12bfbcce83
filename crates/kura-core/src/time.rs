//! Time arithmetic shared by the decisions: saturating sums, waits, times read
//! from status, durations read from flags and configuration, and the jitter that
//! spreads retries. Depends on nothing else in the crate.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::Resource;

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

/// `90s`, `10m`, `1h`, `500ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 30s, 10m or 1h"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    }
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
