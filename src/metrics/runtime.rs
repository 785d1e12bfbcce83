//! The metric families that dashboards and alerts for Kubernetes controllers
//! already read, exported beside the `kura_*` ones: controller-runtime's names,
//! labels and buckets (`controller_runtime_*`, `workqueue_*`,
//! `rest_client_requests_total`, `leader_election_master_status`), so that the
//! dashboards built on them (kubebuilder's, the public controller-runtime ones)
//! show this operator unmodified; and two signals of a controller that stalls
//! without erring: the oldest reconcile in progress and the staleness of each
//! watch. Prometheus' standard `process_*` families come from
//! `metrics::process`, in the same registry; the client's requests and the
//! watches' staleness are followed by `metrics::rest`, the queue's triggers by
//! `metrics::triggers`.
//!
//! Controllers are named by their kind, lower case: `kurainstance`,
//! `kuragateway` (controller-runtime's default). No series is per instance:
//! the per-instance state is the kube-state-metrics configuration in the chart.
//!
//! **The work queue, as kube-rs runs it.** kube-rs's scheduler is not
//! controller-runtime's work queue, so the queue families are kept by following
//! the same items the scheduler gets: every trigger (a watch event mapped to an
//! object, a wake, a reconcile-all) is an add unless the object is already
//! waiting (the queue's dedup), a reconcile's start takes it out (its queue
//! duration), its end is its work duration. A reconcile's own requeue (the
//! resync, a backoff) is scheduled inside kube-rs: it counts as added when it
//! starts. An object triggered while it is being reconciled waits (depth 1)
//! and runs again after, as in client-go's queue. Errors count as retries.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::registered;

/// The instance controller's name in the conventional families.
pub const INSTANCE_CONTROLLER: &str = "kurainstance";
/// The gateway controller's name.
pub const GATEWAY_CONTROLLER: &str = "kuragateway";
const CONTROLLERS: [&str; 2] = [INSTANCE_CONTROLLER, GATEWAY_CONTROLLER];

/// controller-runtime's `controller_runtime_reconcile_time_seconds` buckets.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];
/// client-go's work-queue duration buckets: 10 ns to 1000 s, ×10.
const QUEUE_BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: &'static str,
    result: &'static str,
}

/// client-go names a queue (`name`); controller-runtime names it after its
/// controller and adds `controller`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: &'static str,
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestLabels {
    code: String,
    method: String,
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

type Seconds = Gauge<f64, AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The exemplar of a reconcile's duration: the trace of that reconcile
/// (OpenMetrics exemplar syntax, `# {trace_id="..."} 0.042`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceLabel {
    trace_id: String,
}

type ReconcileTimes = Family<
    ControllerLabel,
    HistogramWithExemplars<TraceLabel>,
    fn() -> HistogramWithExemplars<TraceLabel>,
>;

fn reconcile_histogram() -> HistogramWithExemplars<TraceLabel> {
    HistogramWithExemplars::new(RECONCILE_BUCKETS.into_iter())
}

fn queue_histogram() -> Histogram {
    Histogram::new(QUEUE_BUCKETS)
}

/// One controller's queue, as followed from outside kube-rs's scheduler.
#[derive(Default)]
struct Queue {
    /// Added and not started yet (or added again while running): since when.
    waiting: HashMap<String, Instant>,
    /// Being reconciled: since when.
    running: HashMap<String, Instant>,
}

/// controller-runtime's families per controller: `controller_runtime_*`.
struct ControllerFamilies {
    reconciles: Family<ControllerResult, Counter>,
    errors: Family<ControllerLabel, Counter>,
    reconcile_time: ReconcileTimes,
    active_workers: Family<ControllerLabel, Gauge>,
    max_concurrent: Family<ControllerLabel, Gauge>,
}

impl ControllerFamilies {
    fn register(r: &mut Registry) -> Self {
        let reconciles = Family::<ControllerResult, Counter>::default();
        let errors = Family::<ControllerLabel, Counter>::default();
        let terminal_errors = Family::<ControllerLabel, Counter>::default();
        let panics = Family::<ControllerLabel, Counter>::default();
        let reconcile_time: ReconcileTimes = Family::new_with_constructor(reconcile_histogram);
        let active_workers = Family::<ControllerLabel, Gauge>::default();
        let max_concurrent = Family::<ControllerLabel, Gauge>::default();
        // Every controller's series exist from the start, at zero: a rate or
        // an alert over them has a series to read before the first reconcile.
        for controller in CONTROLLERS {
            let c = ControllerLabel { controller };
            for result in ["success", "error", "requeue", "requeue_after"] {
                let _ = reconciles.get_or_create(&ControllerResult { controller, result });
            }
            let _ = errors.get_or_create(&c);
            let _ = terminal_errors.get_or_create(&c);
            let _ = panics.get_or_create(&c);
            let _ = reconcile_time.get_or_create(&c);
            let _ = active_workers.get_or_create(&c);
            let _ = max_concurrent.get_or_create(&c);
        }
        // Registered in controller-runtime's order.
        let reconciles = registered(
            r,
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            reconciles,
        );
        let errors = registered(
            r,
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            errors,
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller (always 0: failures of the input itself are recorded in status and retried)",
            terminal_errors,
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller (always 0: a panic ends the process)",
            panics,
        );
        ControllerFamilies {
            reconciles,
            errors,
            reconcile_time: registered(
                r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                reconcile_time,
            ),
            active_workers: registered(
                r,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                active_workers,
            ),
            max_concurrent: registered(
                r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller (0: unbounded)",
                max_concurrent,
            ),
        }
    }
}

/// client-go's work-queue families per controller: `workqueue_*`.
struct QueueFamilies {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Histograms<QueueLabels>,
    work_duration: Histograms<QueueLabels>,
    unfinished: Family<QueueLabels, Seconds>,
    longest: Family<QueueLabels, Seconds>,
    retries: Family<QueueLabels, Counter>,
}

impl QueueFamilies {
    fn register(r: &mut Registry) -> Self {
        let families = QueueFamilies {
            depth: registered(
                r,
                "workqueue_depth",
                "Current depth of workqueue",
                Family::default(),
            ),
            adds: registered(
                r,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            queue_duration: registered(
                r,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                Family::new_with_constructor(queue_histogram),
            ),
            work_duration: registered(
                r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                Family::new_with_constructor(queue_histogram),
            ),
            unfinished: registered(
                r,
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads",
                Family::default(),
            ),
            longest: registered(
                r,
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                Family::default(),
            ),
            retries: registered(
                r,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
        };
        // Every controller's queue exists from the start, at zero.
        for controller in CONTROLLERS {
            let q = queue_labels(controller);
            let _ = families.depth.get_or_create(&q);
            let _ = families.adds.get_or_create(&q);
            let _ = families.queue_duration.get_or_create(&q);
            let _ = families.work_duration.get_or_create(&q);
            let _ = families.unfinished.get_or_create(&q);
            let _ = families.longest.get_or_create(&q);
            let _ = families.retries.get_or_create(&q);
        }
        families
    }
}

/// The two signals of a controller that stalls without erring.
struct StallFamilies {
    oldest: Family<ControllerLabel, Seconds>,
    staleness: Family<ResourceLabel, Seconds>,
}

impl StallFamilies {
    fn register(r: &mut Registry) -> Self {
        let oldest = Family::<ControllerLabel, Seconds>::default();
        for controller in CONTROLLERS {
            let _ = oldest.get_or_create(&ControllerLabel { controller });
        }
        StallFamilies {
            oldest: registered(
                r,
                "kura_reconcile_oldest_in_progress_seconds",
                "Age of the oldest reconcile in progress per controller (0: none); grows without bound when a reconcile hangs",
                oldest,
            ),
            staleness: registered(
                r,
                "kura_watch_staleness_seconds",
                "Seconds since the apiserver last sent anything (a list, a watch event or bookmark) for a watched resource; the apiserver sends a bookmark about every minute on a healthy watch",
                Family::default(),
            ),
        }
    }
}

pub struct RuntimeMetrics {
    registry: Registry,
    controller: ControllerFamilies,
    queue: QueueFamilies,
    rest_requests: Family<RestLabels, Counter>,
    leader: Family<NameLabel, Gauge>,
    lease: OnceLock<String>,
    stall: StallFamilies,
    queues: Mutex<HashMap<&'static str, Queue>>,
    /// Per watched resource (plural): when the operator last heard from the
    /// apiserver about it (a list, a watch response, an event, a bookmark).
    watches: Mutex<HashMap<String, Instant>>,
}

impl Default for RuntimeMetrics {
    /// Registered in this order, the order of the exposition.
    fn default() -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let controller = ControllerFamilies::register(r);
        let queue = QueueFamilies::register(r);
        let rest_requests = registered(
            r,
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            Family::default(),
        );
        let leader = registered(
            r,
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
            Family::default(),
        );
        let stall = StallFamilies::register(r);
        // Prometheus' standard process families, unprefixed like the others.
        r.register_collector(Box::new(super::process::ProcessCollector));
        RuntimeMetrics {
            registry,
            controller,
            queue,
            rest_requests,
            leader,
            lease: OnceLock::new(),
            stall,
            queues: Mutex::new(HashMap::new()),
            watches: Mutex::new(HashMap::new()),
        }
    }
}

fn queue_labels(controller: &'static str) -> QueueLabels {
    QueueLabels {
        name: controller,
        controller,
    }
}

/// A queue item: `namespace/name`.
fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

impl RuntimeMetrics {
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Queue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `controller`'s `--concurrency` (0: unbounded).
    pub fn set_max_concurrent(&self, controller: &'static str, n: u16) {
        self.controller
            .max_concurrent
            .get_or_create(&ControllerLabel { controller })
            .set(i64::from(n));
    }

    /// Leader election on the Lease `name`: `leader_election_master_status`
    /// is exported (as client-go does, only with an election).
    pub fn leader_election(&self, name: &str) {
        let _ = self.lease.set(name.to_string());
        self.set_leader(false);
    }

    pub fn set_leader(&self, leading: bool) {
        if let Some(name) = self.lease.get() {
            self.leader
                .get_or_create(&NameLabel { name: name.clone() })
                .set(i64::from(leading));
        }
    }

    /// An object was triggered (an add, unless it is already waiting).
    pub fn queued(&self, controller: &'static str, namespace: Option<&str>, name: &str) {
        let mut queues = self.queues();
        let queue = queues.entry(controller).or_default();
        if let std::collections::hash_map::Entry::Vacant(e) =
            queue.waiting.entry(key(namespace, name))
        {
            e.insert(Instant::now());
            self.queue
                .adds
                .get_or_create(&queue_labels(controller))
                .inc();
        }
    }

    /// The controller found no such object (deleted since its trigger): it
    /// leaves the queue without a reconcile.
    pub fn forget(&self, controller: &'static str, namespace: Option<&str>, name: &str) {
        if let Some(queue) = self.queues().get_mut(controller) {
            queue.waiting.remove(&key(namespace, name));
        }
    }

    /// A reconcile of `object` starts; it ends when the guard is dropped.
    pub fn start<K: Resource>(
        self: &Arc<Self>,
        controller: &'static str,
        object: &K,
    ) -> InProgress {
        let item = key(object.meta().namespace.as_deref(), &object.name_any());
        let now = Instant::now();
        let labels = queue_labels(controller);
        {
            let mut queues = self.queues();
            let queue = queues.entry(controller).or_default();
            let since = match queue.waiting.remove(&item) {
                Some(at) => at,
                // A requeue kube-rs scheduled: added as it starts.
                None => {
                    self.queue.adds.get_or_create(&labels).inc();
                    now
                }
            };
            self.queue
                .queue_duration
                .get_or_create(&labels)
                .observe(now.saturating_duration_since(since).as_secs_f64());
            queue.running.insert(item.clone(), now);
        }
        InProgress {
            metrics: self.clone(),
            controller,
            item,
            start: now,
        }
    }

    /// An HTTP request to the apiserver got `code` (None: no response).
    pub(super) fn rest_request(&self, code: Option<u16>, method: &str, host: &str) {
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.rest_requests
            .get_or_create(&RestLabels {
                code,
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
    }

    /// A list or watch of `resource` was asked for: its staleness counts
    /// from the first such request.
    pub(super) fn watch_requested(&self, resource: &str) {
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if !watches.contains_key(resource) {
            watches.insert(resource.to_string(), Instant::now());
        }
    }

    /// The apiserver sent something about `resource`.
    pub(super) fn watch_heard(&self, resource: &str) {
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        match watches.get_mut(resource) {
            Some(at) => *at = Instant::now(),
            None => {
                watches.insert(resource.to_string(), Instant::now());
            }
        }
    }

    /// Sets the gauges computed at scrape time.
    pub(crate) fn refresh(&self) {
        let now = Instant::now();
        {
            let queues = self.queues();
            for controller in CONTROLLERS {
                let labels = queue_labels(controller);
                let c = ControllerLabel { controller };
                let (waiting, running, unfinished, longest) = match queues.get(controller) {
                    None => (0, 0, 0.0, 0.0),
                    Some(q) => {
                        let ages = q
                            .running
                            .values()
                            .map(|at| now.saturating_duration_since(*at).as_secs_f64());
                        let (sum, max) = ages.fold((0.0, 0.0_f64), |(s, m), a| (s + a, m.max(a)));
                        (q.waiting.len(), q.running.len(), sum, max)
                    }
                };
                self.queue
                    .depth
                    .get_or_create(&labels)
                    .set(i64::try_from(waiting).unwrap_or(i64::MAX));
                self.controller
                    .active_workers
                    .get_or_create(&c)
                    .set(i64::try_from(running).unwrap_or(i64::MAX));
                self.queue.unfinished.get_or_create(&labels).set(unfinished);
                self.queue.longest.get_or_create(&labels).set(longest);
                self.stall.oldest.get_or_create(&c).set(longest);
            }
        }
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        for (resource, at) in watches.iter() {
            self.stall
                .staleness
                .get_or_create(&ResourceLabel {
                    resource: resource.clone(),
                })
                .set(now.saturating_duration_since(*at).as_secs_f64());
        }
    }
}

/// A reconcile in progress: [`InProgress::done`] records how it ended; dropped
/// (returned, cancelled), it leaves the queue's running set.
pub struct InProgress {
    metrics: Arc<RuntimeMetrics>,
    controller: &'static str,
    item: String,
    start: Instant,
}

impl InProgress {
    /// The reconcile returned `result` (the leader's only: a standby's
    /// reconciles do nothing and are not counted); `trace_id` names its
    /// trace when traces are exported: the exemplar of its duration.
    pub fn done<E>(&self, result: &Result<Action, E>, trace_id: Option<String>) {
        let c = ControllerLabel {
            controller: self.controller,
        };
        let label = match result {
            Err(_) => "error",
            Ok(action) if *action == Action::await_change() => "success",
            Ok(_) => "requeue_after",
        };
        self.metrics
            .controller
            .reconciles
            .get_or_create(&ControllerResult {
                controller: self.controller,
                result: label,
            })
            .inc();
        if result.is_err() {
            self.metrics.controller.errors.get_or_create(&c).inc();
            self.metrics
                .queue
                .retries
                .get_or_create(&queue_labels(self.controller))
                .inc();
        }
        self.metrics
            .controller
            .reconcile_time
            .get_or_create(&c)
            .observe(
                self.start.elapsed().as_secs_f64(),
                trace_id.map(|trace_id| TraceLabel { trace_id }),
                None,
            );
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if let Some(queue) = self.metrics.queues().get_mut(self.controller) {
            queue.running.remove(&self.item);
        }
        self.metrics
            .queue
            .work_duration
            .get_or_create(&queue_labels(self.controller))
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &RuntimeMetrics) -> String {
        m.refresh();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, m.registry()).unwrap();
        out
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn configmap(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm
    }

    /// The process families of Prometheus' clients, unprefixed, with their
    /// types and values read from /proc at the scrape.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_exposition_has_the_standard_process_families() {
        let t = text(&RuntimeMetrics::default());
        for (family, kind) in [
            ("process_cpu_seconds", "counter"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            ("process_start_time_seconds", "gauge"),
        ] {
            assert!(
                t.contains(&format!("# TYPE {family} {kind}\n")),
                "{family}: {t}"
            );
        }
        let cpu = value(&t, "process_cpu_seconds_total").unwrap();
        let rss = value(&t, "process_resident_memory_bytes").unwrap();
        let vsz = value(&t, "process_virtual_memory_bytes").unwrap();
        let open = value(&t, "process_open_fds").unwrap();
        let max = value(&t, "process_max_fds").unwrap();
        let start = value(&t, "process_start_time_seconds").unwrap();
        assert!(cpu >= 0.0, "{cpu}");
        assert!(rss >= 1e6 && rss <= vsz, "rss {rss}, vsz {vsz}");
        assert!(open >= 3.0 && open <= max, "open {open}, max {max}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start > now - 86_400.0 && start <= now + 1.0,
            "{start} vs {now}"
        );
        // Read again at each scrape: the CPU time never goes back.
        let later = value(
            &text(&RuntimeMetrics::default()),
            "process_cpu_seconds_total",
        )
        .unwrap();
        assert!(later >= cpu, "{later} < {cpu}");
    }

    /// A triggered object waits (depth), a second trigger before its start is
    /// no second add, its start ends the wait and its end the work; a
    /// trigger while it runs waits again.
    #[test]
    fn the_queue_families_follow_triggers_starts_and_ends() {
        let m = Arc::new(RuntimeMetrics::default());
        let q = "{name=\"kurainstance\",controller=\"kurainstance\"}";
        let text0 = text(&m);
        assert_eq!(value(&text0, &format!("workqueue_depth{q}")), Some(0.0));
        assert_eq!(
            value(
                &text0,
                "controller_runtime_reconcile_total{controller=\"kurainstance\",result=\"success\"}"
            ),
            Some(0.0)
        );
        m.queued(INSTANCE_CONTROLLER, Some("ns"), "a");
        m.queued(INSTANCE_CONTROLLER, Some("ns"), "a");
        m.queued(INSTANCE_CONTROLLER, Some("ns"), "b");
        let t = text(&m);
        assert_eq!(value(&t, &format!("workqueue_depth{q}")), Some(2.0));
        assert_eq!(value(&t, &format!("workqueue_adds_total{q}")), Some(2.0));
        let running = m.start(INSTANCE_CONTROLLER, &configmap("a"));
        m.queued(INSTANCE_CONTROLLER, Some("ns"), "a");
        let t = text(&m);
        assert_eq!(value(&t, &format!("workqueue_depth{q}")), Some(2.0));
        assert_eq!(
            value(
                &t,
                "controller_runtime_active_workers{controller=\"kurainstance\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&t, &format!("workqueue_queue_duration_seconds_count{q}")),
            Some(1.0)
        );
        running.done::<()>(
            &Ok(Action::requeue(std::time::Duration::from_secs(1))),
            None,
        );
        running.done::<()>(&Err(()), None);
        drop(running);
        m.forget(INSTANCE_CONTROLLER, Some("ns"), "b");
        let t = text(&m);
        assert_eq!(value(&t, &format!("workqueue_depth{q}")), Some(1.0), "{t}");
        assert_eq!(
            value(
                &t,
                "controller_runtime_active_workers{controller=\"kurainstance\"}"
            ),
            Some(0.0)
        );
        for (series, v) in [
            (
                "controller_runtime_reconcile_total{controller=\"kurainstance\",result=\"requeue_after\"}",
                1.0,
            ),
            (
                "controller_runtime_reconcile_total{controller=\"kurainstance\",result=\"error\"}",
                1.0,
            ),
            (
                "controller_runtime_reconcile_errors_total{controller=\"kurainstance\"}",
                1.0,
            ),
            (
                "controller_runtime_reconcile_time_seconds_count{controller=\"kurainstance\"}",
                2.0,
            ),
            (
                "workqueue_retries_total{name=\"kurainstance\",controller=\"kurainstance\"}",
                1.0,
            ),
            (
                "workqueue_work_duration_seconds_count{name=\"kurainstance\",controller=\"kurainstance\"}",
                1.0,
            ),
        ] {
            assert_eq!(value(&t, series), Some(v), "{series} in\n{t}");
        }
        // a, b, a again while running, then c: a start nothing triggered (a
        // requeue kube-rs scheduled) is an add.
        drop(m.start(INSTANCE_CONTROLLER, &configmap("c")));
        assert_eq!(
            value(&text(&m), &format!("workqueue_adds_total{q}")),
            Some(4.0)
        );
    }

    /// A reconcile with a trace is its duration's exemplar, in OpenMetrics
    /// syntax on its bucket's line; one without (traces off) adds none.
    #[test]
    fn a_traced_reconcile_is_the_exemplar_of_its_duration() {
        let m = Arc::new(RuntimeMetrics::default());
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        m.start(INSTANCE_CONTROLLER, &configmap("a"))
            .done::<()>(&Ok(Action::await_change()), None);
        assert!(!text(&m).contains(" # {"), "{}", text(&m));
        m.start(INSTANCE_CONTROLLER, &configmap("a"))
            .done::<()>(&Ok(Action::await_change()), Some(id.into()));
        let t = text(&m);
        let line = t
            .lines()
            .find(|l| l.contains(&format!(" # {{trace_id=\"{id}\"}} ")))
            .unwrap_or_else(|| panic!("no exemplar in\n{t}"));
        assert!(
            line.starts_with("controller_runtime_reconcile_time_seconds_bucket{")
                && line.contains("controller=\"kurainstance\""),
            "{line}"
        );
    }

    /// The oldest reconcile in progress grows while one hangs.
    #[test]
    fn the_oldest_reconcile_in_progress_is_its_age() {
        let m = Arc::new(RuntimeMetrics::default());
        let series = "kura_reconcile_oldest_in_progress_seconds{controller=\"kuragateway\"}";
        assert_eq!(value(&text(&m), series), Some(0.0));
        let hung = m.start(GATEWAY_CONTROLLER, &configmap("g"));
        let age = value(&text(&m), series).unwrap();
        assert!(age > 0.0, "{age}");
        assert!(value(&text(&m), series).unwrap() > age);
        drop(hung);
        assert_eq!(value(&text(&m), series), Some(0.0));
    }
}
