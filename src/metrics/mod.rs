//! Operator metrics, in the Prometheus text format (prometheus-client).
//!
//! Counters move when a reconcile records its outcome; the per-phase and
//! stalled gauges are computed from the instance cache at scrape time, so a
//! deleted instance leaves them without anyone having to notice the deletion.
//!
//! Each group of families registers itself (`register`, taking the registry)
//! and keeps the methods that move it, so a new metric is added in one place:
//! the `kura_*` families here and in `reconciles`, `fleet`, `state` and
//! `writes`; controller-runtime's conventional families in `runtime` (the
//! queue followed through `triggers`, the client's requests through `rest`);
//! Prometheus' process families in `process`.

pub mod fleet;
pub mod process;
pub mod reconciles;
pub mod rest;
pub mod runtime;
pub mod state;
pub mod triggers;
pub mod writes;

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::{Metric, Registry};

use fleet::{EndpointChecks, Fleet};
use kura_core::api::KuraInstance;
use reconciles::{Outcomes, Reconciles};
use runtime::RuntimeMetrics;
use state::State;
use writes::{Ledgers, StatusWrites};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    pub(crate) result: &'static str,
}

/// Registers `metric` as `name` (a clone shares its values) and returns it.
pub(crate) fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

pub struct Metrics {
    registry: Registry,
    /// The conventional families (controller-runtime's names), beside these.
    pub runtime: Arc<RuntimeMetrics>,
    reconciles: Reconciles,
    outcomes: Outcomes,
    fleet: Fleet,
    state: State,
    status_writes: StatusWrites,
    endpoint_checks: EndpointChecks,
    /// The shared ledgers' writes and refusals (`shards::ledger`).
    pub(crate) ledgers: Ledgers,
    /// Writes the fence refused to send (`fence`).
    pub(crate) writes_fenced: Counter,
    /// Scrapes recompute the gauges: one at a time.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    /// Registered in this order, the order of the exposition.
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kura");
        let r = &mut registry;
        let reconciles = Reconciles::register(r);
        let outcomes = Outcomes::register(r);
        let fleet = Fleet::register(r);
        let state = State::register(r);
        let status_writes = StatusWrites::register(r);
        let endpoint_checks = EndpointChecks::register(r);
        let ledgers = Ledgers::register(r);
        let writes_fenced = registered(
            r,
            "writes_fenced",
            "Writes not sent because this process's lease time had run out (stopped or starved past its Lease): each would have risked undoing what its successor wrote",
            Counter::default(),
        );
        Metrics {
            registry,
            runtime: Arc::default(),
            reconciles,
            outcomes,
            fleet,
            state,
            status_writes,
            endpoint_checks,
            ledgers,
            writes_fenced,
            scrape: Mutex::new(()),
        }
    }
}

impl Metrics {
    /// A status write succeeded, or failed with `error`.
    pub fn status_write(&self, error: Option<&kube::Error>) {
        self.status_writes.written(error);
    }

    /// A refresh of counts alone was held back (`refresh_budget::RefreshBudget`).
    pub fn status_refresh_held(&self) {
        self.status_writes.held();
    }

    /// How long every status write has failed (none succeeded since the
    /// first of them), and the last error.
    pub fn status_writes_failing(&self) -> Option<(std::time::Duration, String)> {
        self.status_writes.failing()
    }

    /// One request of the endpoint check ended with `answer`.
    pub fn endpoint_checked(&self, answer: &kura_core::endpoint::Answer) {
        self.endpoint_checks.checked(answer);
    }

    pub fn record_error(&self, label: &'static str) {
        self.count(label);
    }

    /// A KuraGateway reconcile's outcome or error label.
    pub fn count_gateway(&self, result: &'static str) {
        self.reconciles.count_gateway(result);
    }

    pub(crate) fn count(&self, result: &'static str) {
        self.reconciles.count(result);
    }

    /// Observes the reconcile duration when dropped.
    pub fn reconcile_timer(self: &Arc<Self>) -> reconciles::ReconcileTimer {
        self.reconciles.timer()
    }

    pub fn set_leader(&self, leading: bool) {
        self.state.set_leader(leading);
        self.runtime.set_leader(leading);
    }

    pub fn set_shards_filtered_by_server(&self, on: bool) {
        self.state.set_shards_filtered_by_server(on);
    }

    pub fn set_config_valid(&self, valid: bool) {
        self.state.set_config_valid(valid);
    }

    pub fn set_crd_compatible(&self, crd: &str, compatible: bool) {
        self.state.set_crd_compatible(crd, compatible);
    }

    pub fn count_config_reload(&self, valid: bool) {
        self.state.count_config_reload(valid);
    }

    /// The metrics of an outcome.
    pub fn record(
        &self,
        outcome: &kura_core::outcome::Outcome,
        _phase: Option<kura_core::api::Phase>,
    ) {
        self.outcomes.record(outcome);
        self.count(outcome.label());
    }

    pub fn record_failure(&self, failure: &kura_core::outcome::Failure) {
        self.outcomes.record_failure(failure);
    }

    /// The text exposition, with the gauges computed from `instances`.
    pub fn encode(&self, instances: &[Arc<KuraInstance>]) -> String {
        let _one = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.fleet.refresh(instances);
        self.runtime.refresh();
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, self.runtime.registry()))
            .and_then(|()| encode_eof(&mut out))
            .expect("writing to a String cannot fail");
        out
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
