//! Operator metrics, in the Prometheus text format (prometheus-client).
//!
//! Counters move when a reconcile records its outcome; the per-phase and
//! stalled gauges are computed from the instance cache at scrape time, so a
//! deleted instance leaves them without anyone having to notice the deletion.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::runtime_metrics::RuntimeMetrics;
use kura_core::api::KuraInstance;
use kura_core::api::conditions::{self, STALLED};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    pub(crate) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FailureLabels {
    pub(crate) stage: &'static str,
    pub(crate) class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrdLabel {
    crd: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LedgerLabel {
    pub(crate) ledger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

pub struct Metrics {
    registry: Registry,
    /// The conventional families (controller-runtime's names), beside these.
    pub runtime: Arc<RuntimeMetrics>,
    reconciles: Family<ResultLabel, Counter>,
    gateway_reconciles: Family<ResultLabel, Counter>,
    duration: Histogram,
    pub(crate) applies: Family<ReasonLabel, Counter>,
    pub(crate) pruned: Counter,
    pub(crate) failures: Family<FailureLabels, Counter>,
    instances: Family<PhaseLabel, Gauge>,
    stalled: Gauge,
    rollout: Family<StateLabel, Gauge>,
    leader: Gauge,
    config_valid: Gauge,
    crd_compatible: Family<CrdLabel, Gauge>,
    shards_filtered_by_server: Gauge,
    config_reloads: Family<ResultLabel, Counter>,
    status_writes: Family<ResultLabel, Counter>,
    endpoint_checks: Family<ResultLabel, Counter>,
    pub(crate) ledger_refused: Family<LedgerLabel, Counter>,
    pub(crate) ledger_writes: Family<LedgerLabel, Counter>,
    /// Writes the fence refused to send (`fence`).
    pub(crate) writes_fenced: Counter,
    /// Since when every status write has failed (none succeeded since), and
    /// the last error: what `/readyz` reports once it lasts.
    status_failing: Mutex<Option<(Instant, String)>>,
    /// Scrapes recompute the gauges: one at a time.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let reconciles = Family::<ResultLabel, Counter>::default();
        let gateway_reconciles = Family::<ResultLabel, Counter>::default();
        // 1 ms to about 16 s: a converged pass reads only caches; an apply does a
        // dozen server-side applies.
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let applies = Family::<ReasonLabel, Counter>::default();
        let pruned = Counter::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let instances = Family::<PhaseLabel, Gauge>::default();
        let stalled = Gauge::default();
        let rollout = Family::<StateLabel, Gauge>::default();
        let leader = Gauge::default();
        let config_valid = Gauge::default();
        let crd_compatible = Family::<CrdLabel, Gauge>::default();
        let shards_filtered_by_server = Gauge::default();
        let config_reloads = Family::<ResultLabel, Counter>::default();
        let status_writes = Family::<ResultLabel, Counter>::default();
        let endpoint_checks = Family::<ResultLabel, Counter>::default();
        let ledger_refused = Family::<LedgerLabel, Counter>::default();
        let ledger_writes = Family::<LedgerLabel, Counter>::default();
        let writes_fenced = Counter::default();
        let mut registry = Registry::with_prefix("kura");
        registry.register(
            "reconciles",
            "Instance reconciles by result: an outcome (applied, converged, waiting, conflict-hold, name-conflict, host-conflict, invalid, paused, apply-failed, admitted, held) or an error (transient, prune, status, unnamed)",
            reconciles.clone(),
        );
        registry.register(
            "gateway_reconciles",
            "KuraGateway reconciles by result: an outcome (applied, converged, settling, waiting, invalid, name-conflict, apply-failed, collected, deleting) or an error (transient, collect, status, unnamed)",
            gateway_reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one instance reconcile",
            duration.clone(),
        );
        registry.register(
            "applies",
            "Reasons of the applies done (one apply can have several)",
            applies.clone(),
        );
        registry.register(
            "objects_pruned",
            "Objects deleted because a new revision no longer contains them",
            pruned.clone(),
        );
        registry.register(
            "failures",
            "Failed requests of reconciles, by stage (apply, prune) and class (transient: retried quickly, reported after a while; rejected: by the apiserver, a webhook or a policy; name-conflict: an object of the name is not the instance's)",
            failures.clone(),
        );
        registry.register(
            "instances",
            "KuraInstances in the watched namespaces by status phase (None: not reconciled yet)",
            instances.clone(),
        );
        registry.register(
            "instances_stalled",
            "KuraInstances whose Stalled condition is True",
            stalled.clone(),
        );
        registry.register(
            "rollout_instances",
            "KuraInstances in an operator-originated rollout by state (waiting: for the budget; window: for its maintenance window; held: its rollout halted; admitted: rolling out; failed: admitted and not Ready within rollout.progressDeadline), from the cache at scrape time",
            rollout.clone(),
        );
        registry.register(
            "leader",
            "1 while this process leads (or runs without leader election), 0 on standby",
            leader.clone(),
        );
        registry.register(
            "config_valid",
            "1 while the operator configuration file is valid and in force, 0 while it is invalid (the last valid configuration stays in force)",
            config_valid.clone(),
        );
        registry.register(
            "crd_compatible",
            "Per CRD: 1 while the installed CRD serves every field this operator reads and writes, 0 while it does not (missing, or an older schema): nothing is reconciled then",
            crd_compatible.clone(),
        );
        registry.register(
            "shards_filtered_by_server",
            "1 while the apiserver filters the shard-local caches to the shards this process holds (server-side sharded list and watch), 0 while they hold the whole fleet",
            shards_filtered_by_server.clone(),
        );
        registry.register(
            "config_reloads",
            "Changes of the operator configuration file read at runtime, by result: valid (in force) or invalid (ignored)",
            config_reloads.clone(),
        );
        registry.register(
            "status_writes",
            "Status writes of both kinds by result (ok, failed, held: a refresh of counts alone held back by the process's refresh rate, asked again by the object's next pass); a failed one is also an Event on the object, and /readyz fails while none has succeeded for a while",
            status_writes.clone(),
        );
        registry.register(
            "endpoint_checks",
            "Requests of the endpoint check by result: answered, no-address, refused, timed-out, failed, status (an HTTP status other than 2xx), wrong-instance",
            endpoint_checks.clone(),
        );
        registry.register(
            "shard_ledger_refused",
            "Writes to a shared ledger of a sharded fleet (budget: admissions; hosts: host grants) refused because another replica wrote first (409); each is read and decided again. A steady rate means replicas contend for one ledger",
            ledger_refused.clone(),
        );
        registry.register(
            "shard_ledger_writes",
            "Writes to a shared ledger of a sharded fleet that succeeded; one write carries every reservation of this replica that waited for the one before it",
            ledger_writes.clone(),
        );
        registry.register(
            "writes_fenced",
            "Writes not sent because this process's lease time had run out (stopped or starved past its Lease): each would have risked undoing what its successor wrote",
            writes_fenced.clone(),
        );
        Metrics {
            registry,
            writes_fenced,
            ledger_refused,
            ledger_writes,
            runtime: Arc::default(),
            status_writes,
            endpoint_checks,
            status_failing: Mutex::new(None),
            reconciles,
            gateway_reconciles,
            duration,
            applies,
            pruned,
            failures,
            instances,
            stalled,
            rollout,
            leader,
            config_valid,
            crd_compatible,
            shards_filtered_by_server,
            config_reloads,
            scrape: Mutex::new(()),
        }
    }
}

impl Metrics {
    /// A status write succeeded, or failed with `error`.
    pub fn status_write(&self, error: Option<&kube::Error>) {
        let mut failing = self
            .status_failing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let result = match error {
            None => {
                *failing = None;
                "ok"
            }
            Some(e) => {
                let since = failing.as_ref().map_or_else(Instant::now, |(at, _)| *at);
                *failing = Some((since, e.to_string()));
                "failed"
            }
        };
        self.status_writes
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// A refresh of counts alone was held back (`refresh_budget::RefreshBudget`).
    pub fn status_refresh_held(&self) {
        self.status_writes
            .get_or_create(&ResultLabel { result: "held" })
            .inc();
    }

    /// How long every status write has failed (none succeeded since the
    /// first of them), and the last error.
    pub fn status_writes_failing(&self) -> Option<(std::time::Duration, String)> {
        let failing = self
            .status_failing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        failing.as_ref().map(|(at, e)| (at.elapsed(), e.clone()))
    }

    /// One request of the endpoint check ended with `answer`.
    pub fn endpoint_checked(&self, answer: &kura_core::endpoint::Answer) {
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
        self.endpoint_checks
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn record_error(&self, label: &'static str) {
        self.count(label);
    }

    /// A KuraGateway reconcile's outcome or error label.
    pub fn count_gateway(&self, result: &'static str) {
        self.gateway_reconciles
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub(crate) fn count(&self, result: &'static str) {
        self.reconciles.get_or_create(&ResultLabel { result }).inc();
    }

    /// Observes the reconcile duration when dropped.
    pub fn reconcile_timer(self: &Arc<Self>) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            start: Instant::now(),
        }
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        self.runtime.set_leader(leading);
    }

    pub fn set_shards_filtered_by_server(&self, on: bool) {
        self.shards_filtered_by_server.set(i64::from(on));
    }

    pub fn set_config_valid(&self, valid: bool) {
        self.config_valid.set(i64::from(valid));
    }

    pub fn set_crd_compatible(&self, crd: &str, compatible: bool) {
        self.crd_compatible
            .get_or_create(&CrdLabel { crd: crd.into() })
            .set(i64::from(compatible));
    }

    pub fn count_config_reload(&self, valid: bool) {
        let result = if valid { "valid" } else { "invalid" };
        self.config_reloads
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// The text exposition, with the gauges computed from `instances`.
    pub fn encode(&self, instances: &[Arc<KuraInstance>]) -> String {
        let _one = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
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
        self.runtime.refresh();
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, self.runtime.registry()))
            .and_then(|()| encode_eof(&mut out))
            .expect("writing to a String cannot fail");
        out
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

pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.metrics
            .duration
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// The metrics of an outcome.
impl Metrics {
    pub fn record(
        &self,
        outcome: &kura_core::outcome::Outcome,
        _phase: Option<kura_core::api::Phase>,
    ) {
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
        self.count(outcome.label());
    }

    pub fn record_failure(&self, failure: &kura_core::outcome::Failure) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn instance(status: serde_json::Value) -> Arc<KuraInstance> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                "metadata": {"name": "i", "namespace": "n"},
                "spec": {"account": "a", "region": "r", "image": "i:1", "storage": {"size": "1Gi"}},
                "status": status,
            }))
            .unwrap(),
        )
    }

    pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn phase_and_stalled_gauges_are_computed_from_the_instances_at_scrape_time() {
        let m = Metrics::default();
        let stalled = serde_json::json!({"phase": "Stalled", "conditions": [
            {"type": "Stalled", "status": "True", "reason": "RetryBudgetExhausted", "message": ""}]});
        let all = [
            instance(serde_json::json!({"phase": "Ready"})),
            instance(serde_json::json!({"phase": "Ready"})),
            instance(stalled),
            instance(serde_json::Value::Null),
        ];
        let text = m.encode(&all);
        assert_eq!(value(&text, "kura_instances{phase=\"Ready\"}"), Some(2.0));
        assert_eq!(value(&text, "kura_instances{phase=\"Stalled\"}"), Some(1.0));
        assert_eq!(value(&text, "kura_instances{phase=\"None\"}"), Some(1.0));
        assert_eq!(value(&text, "kura_instances_stalled"), Some(1.0));
        // Deleted instances leave no series behind.
        let text = m.encode(&all[..1]);
        assert_eq!(value(&text, "kura_instances{phase=\"Ready\"}"), Some(1.0));
        assert_eq!(value(&text, "kura_instances{phase=\"Stalled\"}"), None);
        assert_eq!(value(&text, "kura_instances_stalled"), Some(0.0));
    }

    /// Issue 25: waiting for a window, for the budget and held apart.
    #[test]
    fn waiting_instances_by_what_they_wait_for() {
        let m = Metrics::default();
        let waiting = |reason: &str| {
            instance(serde_json::json!({
                "rollout": {"state": "Waiting", "fleetRevision": "f", "revision": "r",
                            "since": "2026-12-01T00:00:00Z", "wasReady": true},
                "conditions": [{"type": "RolloutHeld", "status": "True", "reason": reason, "message": ""}]}))
        };
        let all = [
            waiting("WaitingForWindow"),
            waiting("WaitingForWindow"),
            waiting("WaitingForBudget"),
            waiting("RolloutHalted"),
        ];
        let text = m.encode(&all);
        let state = |s: &str| value(&text, &format!("kura_rollout_instances{{state=\"{s}\"}}"));
        assert_eq!(state("window"), Some(2.0), "{text}");
        assert_eq!(state("waiting"), Some(1.0));
        assert_eq!(state("held"), Some(1.0));
    }

    #[test]
    fn config_validity_and_reloads_by_result() {
        let m = Metrics::default();
        m.set_config_valid(true);
        m.count_config_reload(false);
        m.count_config_reload(true);
        m.count_config_reload(true);
        let text = m.encode(&[]);
        assert_eq!(value(&text, "kura_config_valid"), Some(1.0), "{text}");
        let reloads = "kura_config_reloads_total{result=";
        assert_eq!(value(&text, &format!("{reloads}\"valid\"}}")), Some(2.0));
        assert_eq!(value(&text, &format!("{reloads}\"invalid\"}}")), Some(1.0));
        m.set_config_valid(false);
        assert_eq!(value(&m.encode(&[]), "kura_config_valid"), Some(0.0));
    }

    #[test]
    fn crd_compatibility_per_crd() {
        let m = Metrics::default();
        m.set_crd_compatible("kurainstances.kura.dev", false);
        m.set_crd_compatible("kuragateways.kura.dev", true);
        let text = m.encode(&[]);
        let series = |crd: &str| format!("kura_crd_compatible{{crd=\"{crd}\"}}");
        let instances = value(&text, &series("kurainstances.kura.dev"));
        assert_eq!(instances, Some(0.0), "{text}");
        let gateways = value(&text, &series("kuragateways.kura.dev"));
        assert_eq!(gateways, Some(1.0), "{text}");
    }
}
