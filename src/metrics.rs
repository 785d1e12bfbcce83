//! Operator metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::api::Phase;
use crate::reconcile::status::Outcome;

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Counters>,
}

#[derive(Default, Clone, Debug)]
pub struct Counters {
    pub reconciles: BTreeMap<&'static str, u64>,
    pub applies: BTreeMap<&'static str, u64>,
    pub pruned: u64,
}

impl Metrics {
    pub fn record(&self, outcome: &Outcome, _phase: Option<Phase>) {
        let mut c = self.inner.lock().unwrap();
        let result = match outcome {
            Outcome::Invalid(_) => "invalid",
            Outcome::Paused => "paused",
            Outcome::Applied {
                reasons, pruned, ..
            } => {
                for r in reasons {
                    *c.applies.entry(r.label()).or_default() += 1;
                }
                c.pruned += pruned.deleted.len() as u64;
                "applied"
            }
            Outcome::ApplyFailed { .. } => "apply-failed",
            Outcome::Waiting { .. } => "waiting",
            Outcome::ConflictHold { .. } => "conflict-hold",
            Outcome::Converged => "converged",
        };
        *c.reconciles.entry(result).or_default() += 1;
    }

    pub fn snapshot(&self) -> Counters {
        self.inner.lock().unwrap().clone()
    }
}

impl Metrics {
    pub fn record_error(&self, label: &'static str) {
        *self
            .inner
            .lock()
            .unwrap()
            .reconciles
            .entry(label)
            .or_default() += 1;
    }
}
