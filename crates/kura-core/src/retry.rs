//! The retry policy: how long a failing instance or gateway waits before the
//! next attempt, and when it is Stalled.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::RetryStatus;
use crate::time::{later, recorded_time};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Failed attempts of the same inputs before the instance is Stalled.
    pub budget: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// Wait before a Stalled instance is retried; never below [`MIN_STALL_WINDOW`].
    pub stall_window: Duration,
    /// How long transient failures of the same inputs are retried quietly
    /// before they are reported in status, as an Event and a metric.
    pub transient_report_after: Duration,
}

/// A small configured window must not make a stalled instance hot (docs/incidents.md #2).
pub const MIN_STALL_WINDOW: Duration = Duration::from_secs(60);

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            budget: 5,
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            stall_window: Duration::from_secs(600),
            transient_report_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    pub fn stall_window(&self) -> Duration {
        self.stall_window.max(MIN_STALL_WINDOW)
    }

    /// Backoff after `failures` consecutive failures (1 → base).
    pub fn backoff(&self, failures: i64) -> Duration {
        let exp = failures.clamp(1, 20) as u32 - 1;
        self.base_backoff
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.max_backoff)
    }

    /// The wait after `failures` recorded failures: the backoff, or the stall
    /// window once the budget is spent.
    pub fn wait_after(&self, failures: i64) -> (Duration, bool) {
        if failures >= i64::from(self.budget) {
            (self.stall_window(), true)
        } else {
            (self.backoff(failures), false)
        }
    }

    /// Backoff after `failures` consecutive transient failures (throttling, a
    /// server error, the apiserver out of reach): these say nothing about the
    /// input, so they retry sooner than an apply failure, and are spread by
    /// `jitter` (a number in 0..1) so that a fleet throttled at once does not
    /// come back at once.
    pub fn transient_backoff(&self, failures: u32, jitter: f64) -> Duration {
        let exp = failures.clamp(1, 20) - 1;
        let full = TRANSIENT_BASE
            .saturating_mul(2u32.saturating_pow(exp))
            .min(TRANSIENT_MAX);
        // Between half and all of it.
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// What failures recorded for the same inputs say about trying now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Failed recently: try again at `at`.
    Backoff { at: Timestamp },
    /// The budget of these inputs is spent: try again at `at`, after the stall window.
    Stalled { at: Timestamp },
}

impl RetryPolicy {
    /// The wait a failure recorded for these same inputs (`key`) imposes at
    /// `now`, if any. A failure of other inputs (a new revision or force
    /// token) imposes none: new inputs always try at once. Instances and
    /// gateways share this one rule.
    pub fn wait_for(
        &self,
        record: Option<&RetryStatus>,
        key: &str,
        now: Timestamp,
    ) -> Option<Wait> {
        let failures = failures_in(record, key);
        if failures == 0 {
            return None;
        }
        let last = recorded_time(&record?.last_failure_time, now)?;
        let (wait, stalled) = self.wait_after(failures);
        let at = later(last, wait);
        match (now < at, stalled) {
            (false, _) => None,
            (true, true) => Some(Wait::Stalled { at }),
            (true, false) => Some(Wait::Backoff { at }),
        }
    }
}

/// Failures recorded for these inputs: the one count that plan, status and
/// the requeue all use (a failure of other inputs counts for nothing here).
pub fn failures_in(record: Option<&RetryStatus>, key: &str) -> i64 {
    record
        .filter(|r| r.inputs_key == key)
        .map_or(0, |r| r.failures.max(0))
}

/// First retry of a transient failure; doubling up to [`TRANSIENT_MAX`].
pub const TRANSIENT_BASE: Duration = Duration::from_millis(500);
pub const TRANSIENT_MAX: Duration = Duration::from_secs(60);
