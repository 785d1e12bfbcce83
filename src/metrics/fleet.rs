//! What the fleet looks like: instances by phase, stalled, by rollout state
//! (computed from the instance cache at scrape time), and the endpoint
//! check's answers.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{ResultLabel, registered};
use kura_core::api::KuraInstance;
use kura_core::api::conditions::{self, STALLED};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

/// `kura_instances`, `kura_instances_stalled`, `kura_rollout_instances`.
pub(crate) struct Fleet {
    instances: Family<PhaseLabel, Gauge>,
    stalled: Gauge,
    rollout: Family<StateLabel, Gauge>,
}

impl Fleet {
    pub(crate) fn register(r: &mut Registry) -> Self {
        Fleet {
            instances: registered(
                r,
                "instances",
                "KuraInstances in the watched namespaces by status phase (None: not reconciled yet)",
                Family::default(),
            ),
            stalled: registered(
                r,
                "instances_stalled",
                "KuraInstances whose Stalled condition is True",
                Gauge::default(),
            ),
            rollout: registered(
                r,
                "rollout_instances",
                "KuraInstances in an operator-originated rollout by state (waiting: for the budget; window: for its maintenance window; held: its rollout halted; admitted: rolling out; failed: admitted and not Ready within rollout.progressDeadline), from the cache at scrape time",
                Family::default(),
            ),
        }
    }

    /// Sets the gauges from `instances`, the cache at the scrape.
    pub(crate) fn refresh(&self, instances: &[Arc<KuraInstance>]) {
        self.instances.clear();
        let mut stalled = 0;
        for i in instances {
            let status = i.status.as_ref();
            let phase = status
                .and_then(|s| s.phase)
                .map_or_else(|| "None".to_string(), |p| format!("{p:?}"));
            self.instances.get_or_create(&PhaseLabel { phase }).inc();
            let is_stalled = status.is_some_and(|s| conditions::is_true(&s.conditions, STALLED));
            stalled += i64::from(is_stalled);
        }
        self.stalled.set(stalled);
        let mut by_state = [
            ("waiting", 0),
            ("window", 0),
            ("held", 0),
            ("admitted", 0),
            ("failed", 0),
        ];
        for i in instances {
            if let Some(state) = i.status.as_ref().and_then(rollout_state) {
                for (name, n) in &mut by_state {
                    if *name == state {
                        *n += 1;
                    }
                }
            }
        }
        for (state, n) in by_state {
            self.rollout.get_or_create(&StateLabel { state }).set(n);
        }
    }
}

/// Where an instance stands in an operator-originated rollout, from its status.
fn rollout_state(status: &kura_core::api::KuraInstanceStatus) -> Option<&'static str> {
    use kura_core::api::RolloutState;
    use kura_core::api::conditions::{ROLLOUT_FAILED, ROLLOUT_HELD};
    let record = status.rollout.as_ref()?;
    Some(match record.state {
        RolloutState::Admitted if conditions::is_true(&status.conditions, ROLLOUT_FAILED) => {
            "failed"
        }
        RolloutState::Admitted => "admitted",
        RolloutState::Waiting => match conditions::find(&status.conditions, ROLLOUT_HELD) {
            Some(c) if c.reason == "RolloutHalted" => "held",
            Some(c) if c.reason == "WaitingForWindow" => "window",
            _ => "waiting",
        },
    })
}

/// `kura_endpoint_checks`.
pub(crate) struct EndpointChecks(Family<ResultLabel, Counter>);

impl EndpointChecks {
    pub(crate) fn register(r: &mut Registry) -> Self {
        EndpointChecks(registered(
            r,
            "endpoint_checks",
            "Requests of the endpoint check by result: answered, no-address, refused, timed-out, failed, status (an HTTP status other than 2xx), wrong-instance",
            Family::default(),
        ))
    }

    /// One request of the endpoint check ended with `answer`.
    pub(crate) fn checked(&self, answer: &kura_core::endpoint::Answer) {
        use kura_core::endpoint::Answer;
        let result = match answer {
            Answer::Answered => "answered",
            Answer::NoAddress { .. } => "no-address",
            Answer::Refused { .. } => "refused",
            Answer::TimedOut { .. } => "timed-out",
            Answer::Failed { .. } => "failed",
            Answer::Status { .. } => "status",
            Answer::WrongInstance { .. } => "wrong-instance",
        };
        self.0.get_or_create(&ResultLabel { result }).inc();
    }
}
