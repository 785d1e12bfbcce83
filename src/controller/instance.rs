//! The KuraInstance controller: what triggers an instance's reconcile; the
//! pass around it (the leader's only, its error policy) is `pass`'s.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::networking::v1::IngressClass;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};

use kura_core::api::{KuraGateway, KuraInstance};

use super::reflect::Shared;
use super::streams::Streams;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::metrics::reconciles::ReconcileTimer;
use crate::metrics::runtime::INSTANCE_CONTROLLER;
use crate::metrics::triggers::Triggers;
use crate::pass::{self, Kind};
use crate::reconcile;

/// The instance watch passes generation and annotation changes only: a status
/// write must not trigger a reconcile, and a generation-only filter would drop
/// the force annotation.
fn spec_or_annotations(instance: &KuraInstance) -> Option<u64> {
    let mut h = DefaultHasher::new();
    instance.metadata.generation.hash(&mut h);
    instance.metadata.annotations.hash(&mut h);
    Some(h.finish())
}

/// The instance's pass (`reconcile::reconcile`) for the generic pipeline
/// (`pass`): its span, its metrics.
impl Kind for KuraInstance {
    const CONTROLLER: &'static str = INSTANCE_CONTROLLER;
    const NOUN: &'static str = "KuraInstance";

    fn span(&self) -> tracing::Span {
        reconcile::span(self)
    }

    fn reconcile(
        self: Arc<Self>,
        ctx: Arc<Context>,
        span: &tracing::Span,
    ) -> impl std::future::Future<Output = Result<Action, pass::Error>> + Send {
        reconcile::reconcile(self, ctx, span)
    }

    fn count_error(metrics: &Metrics, label: &'static str) {
        metrics.record_error(label);
    }

    fn timer(metrics: &Arc<Metrics>) -> Option<ReconcileTimer> {
        Some(metrics.reconcile_timer())
    }
}

/// Sharded: the waiting instances that may go when an instance of any
/// shard leaves the budget. Its status write triggers no reconcile (the
/// instance watch passes spec and annotations only), and the replica that
/// wrote it wakes only its own next in line; so every replica follows the
/// admitted records in its cache and wakes the next in line of the fleet
/// (the instances of other shards' are no-ops here). Unsharded: nothing,
/// `report::after` wakes them.
fn freed_elsewhere(
    instances: Shared<KuraInstance>,
    ctx: Arc<Context>,
) -> futures::stream::BoxStream<'static, ObjectRef<KuraInstance>> {
    if ctx.acting.ledgers.is_none() {
        return futures::stream::empty().boxed();
    }
    let mut admitted = std::collections::HashSet::new();
    instances
        .filter_map(move |event| {
            let left = event.ok().and_then(|i| {
                let uid = i.metadata.uid.clone()?;
                let now = i
                    .status
                    .as_ref()
                    .and_then(|s| s.rollout.as_ref())
                    .is_some_and(|r| r.state == kura_core::api::RolloutState::Admitted);
                if now {
                    admitted.insert(uid);
                    None
                } else {
                    admitted.remove(&uid).then_some(())
                }
            });
            let next = left.map(|()| {
                let config = ctx.config();
                reconcile::budget::next_in_line(&ctx, &config, jiff::Timestamp::now())
            });
            std::future::ready(next)
        })
        .flat_map(futures::stream::iter)
        .boxed()
}

/// The instance controller. Returns when `shutdown` resolves. `reconcile_all`
/// ticks on a configuration change and when this process starts leading;
/// `wake` names instances to reconcile now: the rollout budget's next in
/// line, and those waiting for a host that was just freed (its holder
/// deleted, or given other hosts), at once rather than at the next resync.
pub fn instance_controller(
    streams: Streams,
    ctx: Arc<Context>,
    reconcile_all: impl Stream<Item = ()> + Send + 'static,
    wake: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<KuraInstance>>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> {
    let instances_store = streams.stores.instances.clone();
    let by_gateway = instances_store.clone();
    let by_class = instances_store.clone();
    // The work-queue metrics follow every trigger (`metrics::triggers`).
    let q = Triggers {
        metrics: ctx.report.metrics.runtime.clone(),
        controller: INSTANCE_CONTROLLER,
    };
    q.metrics
        .set_max_concurrent(INSTANCE_CONTROLLER, concurrency);
    // Every instance event, status writes included (before the filter): the
    // status copies this process kept are dropped once the cache shows them.
    let observed = ctx.clone();
    let instances = streams
        .instances
        .inspect(move |event| {
            if let Ok(instance) = event {
                observed.memory.instances.observed(instance);
            }
        })
        .predicate_filter(spec_or_annotations, Default::default());
    let controller = Controller::for_stream(q.objects(instances), instances_store.clone())
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.stateful_sets))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.ingresses))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.services))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.config_maps))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.service_accounts))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.pdbs))
        .owns_stream(q.owned::<KuraInstance, _, _, _>(streams.network_policies))
        // A gateway is not owned by one instance: map it to the instances using it.
        .watches_stream(
            streams.gateways,
            q.mapped(move |gw: KuraGateway| {
                let name = gw.metadata.name.clone().unwrap_or_default();
                let ns = gw.metadata.namespace.clone();
                instances_using(&by_gateway, ns.as_deref(), |s| {
                    s.gateway_name.as_deref() == Some(name.as_str())
                })
            }),
        )
        // An IngressClass appearing (or changing) can activate waiting instances.
        .watches_stream(
            streams.ingress_classes,
            q.mapped(move |class: IngressClass| {
                let name = class.metadata.name.clone().unwrap_or_default();
                instances_using(&by_class, None, |s| s.ingress_class_name == name)
            }),
        )
        .reconcile_all_on(q.all(reconcile_all, instances_store))
        .reconcile_on(q.refs(futures::stream::unfold(wake, |mut rx| async move {
            rx.recv().await.map(|r| (r, rx))
        })))
        .reconcile_on(q.refs(freed_elsewhere(streams.budget_instances, ctx.clone())))
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(concurrency)
                .debounce(BURST),
        )
        .graceful_shutdown_on(shutdown);
    pass::run(controller, ctx, q.metrics)
}

/// How long a request to reconcile an instance waits for the events that
/// come with it (trailing-edge debounce): a burst (one `kubectl apply` of a
/// file, a watch that catches up after a stall or a relist) is in the cache
/// whole before any of it is decided. Two instances that ask for one host in
/// the same second are then ranked together, by creation and namespace/name
/// as `diff` predicts, instead of the first one delivered being granted it
/// while the other is still on its way. Short beside every other wait.
const BURST: std::time::Duration = std::time::Duration::from_millis(250);

fn instances_using(
    store: &Store<KuraInstance>,
    namespace: Option<&str>,
    pred: impl Fn(&kura_core::api::GatewayStatus) -> bool,
) -> Vec<ObjectRef<KuraInstance>> {
    store
        .state()
        .iter()
        .filter(|i| namespace.is_none() || i.metadata.namespace.as_deref() == namespace)
        .filter(|i| {
            i.status
                .as_ref()
                .and_then(|s| s.gateway.as_ref())
                .is_some_and(&pred)
        })
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}
