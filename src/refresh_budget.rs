//! How many count-only status refreshes this process may send, across every
//! object it reports on (instances and gateways: `Context::refreshes`).

use std::sync::Mutex;
use std::time::Instant;

use kura_core::status::Worth;

use crate::metrics::Metrics;

/// Seconds' worth of refreshes sent at once after a quiet spell.
const BURST_SECONDS: f64 = 4.0;

/// Count-only refreshes ("1/3 replicas available" becoming "2/3 …", see
/// [`Worth::Refresh`]) within a token bucket shared by every instance and
/// gateway of the process: at most `--status-refresh-rate` a second (5 by
/// default), four seconds' worth at once.
///
/// Each object's counts already wait `MESSAGE_REFRESH` (30 s), but that is a
/// rate per object: while a fleet of N rolls out it is N/30 writes a second
/// (333 a second at N=10,000, about what an apiserver on two cores writes in
/// all), spent on the least needed of the operator's reports, competing with
/// the fleet change they report on. A fleet of up to 150 rolling at once
/// (N/30 ≤ 5 a second at the default rate) is not held back. A refresh held
/// back is not lost: the object's next pass (within `ACTIVATION_RECHECK`
/// while it waits) asks again, so a stuck rollout's counts still reach its
/// status. Anything else a status says (a new step, phase, reason,
/// revision) is written at once, whatever the rate.
pub struct RefreshBudget {
    bucket: Mutex<Bucket>,
}

struct Bucket {
    /// Tokens a second.
    rate: f64,
    /// Tokens held at most.
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl RefreshBudget {
    /// `rate` refreshes a second (positive: `run::parse_rate`).
    pub fn new(rate: f64) -> Self {
        let burst = (rate * BURST_SECONDS).max(1.0);
        RefreshBudget {
            bucket: Mutex::new(Bucket {
                rate,
                burst,
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Whether a status `worth` this is written now. A refresh held back is
    /// counted in `kura_status_writes_total{result="held"}`.
    pub fn allows(&self, worth: Worth, metrics: &Metrics) -> bool {
        match worth {
            Worth::Nothing => false,
            Worth::Write => true,
            Worth::Refresh => {
                let allowed = self.take(Instant::now());
                if !allowed {
                    metrics.status_refresh_held();
                }
                allowed
            }
        }
    }

    fn take(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        bucket.take(now)
    }
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at);
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const RATE: f64 = 5.0;
    const BURST: f64 = RATE * BURST_SECONDS;
    /// The time one token takes to come back.
    const REFILL_ONE: Duration = Duration::from_millis((1000.0 / RATE) as u64);

    fn full(at: Instant) -> Bucket {
        Bucket {
            rate: RATE,
            burst: BURST,
            tokens: BURST,
            at,
        }
    }

    #[test]
    fn a_burst_then_the_rate_and_no_more() {
        let start = Instant::now();
        let mut b = full(start);
        let sent = (0..100).filter(|_| b.take(start)).count();
        assert_eq!(
            sent, BURST as usize,
            "a burst, then nothing at the same instant"
        );
        // Ten seconds later: RATE a second came back, never more than BURST.
        let later = start + Duration::from_secs(10);
        let sent = (0..1000).filter(|_| b.take(later)).count();
        assert_eq!(sent, BURST as usize);
        let next = later + REFILL_ONE;
        assert!(b.take(next), "one token a 1/RATE s");
        assert!(!b.take(next));
    }

    #[test]
    fn a_slow_rate_still_sends_one_at_a_time() {
        let budget = RefreshBudget::new(0.1);
        let metrics = Metrics::default();
        assert!(budget.allows(Worth::Refresh, &metrics));
        assert!(!budget.allows(Worth::Refresh, &metrics));
    }

    #[test]
    fn an_instant_from_the_past_neither_refills_nor_breaks_the_bucket() {
        let start = Instant::now() + Duration::from_secs(5);
        let mut b = Bucket {
            tokens: 0.0,
            ..full(start)
        };
        assert!(!b.take(start - Duration::from_secs(1)));
        assert_eq!(b.at, start);
    }

    #[test]
    fn only_refreshes_are_rationed() {
        let budget = RefreshBudget::new(RATE);
        let metrics = Metrics::default();
        let refreshes = (0..1000)
            .filter(|_| budget.allows(Worth::Refresh, &metrics))
            .count();
        // A test that runs longer than a second may see a few more tokens.
        assert!(
            (BURST as usize..BURST as usize + 50).contains(&refreshes),
            "{refreshes}"
        );
        // The bucket is empty: everything but a refresh still goes through.
        assert!(budget.allows(Worth::Write, &metrics));
        assert!(!budget.allows(Worth::Nothing, &metrics));
        let text = metrics.encode(&[]);
        let held = crate::metrics::tests::value(&text, "kura_status_writes_total{result=\"held\"}");
        assert_eq!(held, Some((1000 - refreshes) as f64));
    }
}
