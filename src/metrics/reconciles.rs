//! The reconciles of both kinds by result, their duration, and what the
//! instance reconciles did (applies by reason, objects pruned, failures).

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{ResultLabel, registered};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    stage: &'static str,
    class: &'static str,
}

/// `kura_reconciles`, `kura_gateway_reconciles`, `kura_reconcile_duration_seconds`.
pub(crate) struct Reconciles {
    instances: Family<ResultLabel, Counter>,
    gateways: Family<ResultLabel, Counter>,
    duration: Histogram,
}

impl Reconciles {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Reconciles {
            instances: registered(
                r,
                "reconciles",
                "Instance reconciles by result: an outcome (applied, converged, waiting, conflict-hold, name-conflict, host-conflict, invalid, paused, apply-failed, admitted, held) or an error (transient, prune, status, unnamed)",
                Family::default(),
            ),
            gateways: registered(
                r,
                "gateway_reconciles",
                "KuraGateway reconciles by result: an outcome (applied, converged, settling, waiting, invalid, name-conflict, apply-failed, collected, deleting) or an error (transient, collect, status, unnamed)",
                Family::default(),
            ),
            // 1 ms to about 16 s: a converged pass reads only caches; an apply
            // does a dozen server-side applies.
            duration: registered(
                r,
                "reconcile_duration_seconds",
                "Duration of one instance reconcile",
                Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            ),
        }
    }

    /// An instance reconcile's outcome or error label.
    pub(crate) fn count(&self, result: &'static str) {
        self.instances.get_or_create(&ResultLabel { result }).inc();
    }

    /// A KuraGateway reconcile's outcome or error label.
    pub(crate) fn count_gateway(&self, result: &'static str) {
        self.gateways.get_or_create(&ResultLabel { result }).inc();
    }

    /// Observes the reconcile duration when dropped.
    pub(crate) fn timer(&self) -> ReconcileTimer {
        ReconcileTimer {
            duration: self.duration.clone(),
            start: Instant::now(),
        }
    }
}

pub struct ReconcileTimer {
    duration: Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.duration.observe(self.start.elapsed().as_secs_f64());
    }
}

/// `kura_applies`, `kura_objects_pruned`, `kura_failures`.
pub(crate) struct Outcomes {
    applies: Family<ReasonLabel, Counter>,
    pruned: Counter,
    failures: Family<FailureLabels, Counter>,
}

impl Outcomes {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Outcomes {
            applies: registered(
                r,
                "applies",
                "Reasons of the applies done (one apply can have several)",
                Family::default(),
            ),
            pruned: registered(
                r,
                "objects_pruned",
                "Objects deleted because a new revision no longer contains them",
                Counter::default(),
            ),
            failures: registered(
                r,
                "failures",
                "Failed requests of reconciles, by stage (apply, prune) and class (transient: retried quickly, reported after a while; rejected: by the apiserver, a webhook or a policy; name-conflict: an object of the name is not the instance's)",
                Family::default(),
            ),
        }
    }

    /// The applies and prunes of an outcome, and its failure.
    pub(crate) fn record(&self, outcome: &kura_core::outcome::Outcome) {
        if let kura_core::outcome::Outcome::Applied {
            reasons, pruned, ..
        } = outcome
        {
            for r in reasons {
                self.applies
                    .get_or_create(&ReasonLabel { reason: r.label() })
                    .inc();
            }
            self.pruned.inc_by(pruned.deleted.len() as u64);
        }
        if let Some(failure) = outcome.failure() {
            self.record_failure(failure);
        }
    }

    pub(crate) fn record_failure(&self, failure: &kura_core::outcome::Failure) {
        let class = match failure.class {
            kura_core::outcome::FailureClass::Transient => "transient",
            kura_core::outcome::FailureClass::Rejected => "rejected",
            kura_core::outcome::FailureClass::NameConflict => "name-conflict",
        };
        let stage = match failure.stage {
            kura_core::outcome::Stage::Apply => "apply",
            kura_core::outcome::Stage::Prune => "prune",
        };
        self.failures
            .get_or_create(&FailureLabels { stage, class })
            .inc();
    }
}
