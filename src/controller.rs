//! Controller wiring: reflectors (the caches `observe` reads), watches and their
//! mapping to instances, the error policy.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use kura_core::compact::{compact_child, compact_instance, compact_managed_fields};
use kura_core::time::jitter;

use crate::claims::Claims;
use crate::context::Context;
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::keys::{LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY_VALUE};

use crate::reconcile::labelled::Labelled;
use crate::reconcile::stores::cached::{
    self, CachedIngress, CachedMeta, CachedObject, CachedStatefulSet,
};
use crate::reconcile::stores::foreign::ForeignNames;
use crate::reconcile::{self, stores::Stores};
use crate::runtime_metrics::{INSTANCE_CONTROLLER, Triggers};
use crate::shards::select::{Listed, Selection};
use kura_core::kind::ChildKind;

/// Where the operator looks: every namespace, or one.
#[derive(Clone)]
pub struct Scope {
    pub client: Client,
    /// How every reflector lists (`list_strategy`).
    pub list: crate::list_strategy::ListStrategy,
    pub namespace: Option<String>,
    /// Server-side timeout of each watch request, in seconds.
    pub watch_timeout: u32,
    /// How long a deleted holder's hosts stay reserved (claims.rs).
    pub host_reservation: std::time::Duration,
    /// Where the apiserver filters the shard-local caches to the shards this
    /// process holds (`shards::select`); `None`: they hold the whole scope.
    pub select: Option<Selection>,
}

impl Scope {
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        api_in(self.client.clone(), self.namespace.as_deref())
    }

    /// The watch of a kind read only for objects of their own namespace (an
    /// instance's children, a gateway's own objects): filtered by the
    /// apiserver to the held shards where it does that, else the whole scope.
    fn shard_local<K>(&self, wc: watcher::Config) -> Watch<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Cacheable,
    {
        let namespace = self.namespace.clone();
        self.shard_local_with(move |client| api_in(client, namespace.as_deref()), wc)
    }

    /// [`Scope::shard_local`], of the Api `api` builds on the client it is given.
    fn shard_local_with<K: Watchable>(
        &self,
        api: impl Fn(Client) -> Api<K> + Send + 'static,
        wc: watcher::Config,
    ) -> Watch<K> {
        match &self.select {
            Some(select) => {
                let filtered = select.watch(api, wc);
                Watch {
                    events: filtered.events,
                    listed: Some(filtered.listed),
                }
            }
            None => Watch::whole(api(self.client.clone()), wc),
        }
    }
}

fn api_in<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// A watch's events and, for a shard-filtered one, what its cache tells the
/// gate once it has written a complete list.
pub struct Watch<K> {
    events: futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    listed: Option<Listed>,
}

/// What kube's watcher can watch.
pub trait Watchable:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
}
impl<K> Watchable for K where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
}

impl<K: Watchable> Watch<K> {
    /// Every object `api` reaches: fleet-wide readers, cluster-scoped kinds.
    fn whole(api: Api<K>, wc: watcher::Config) -> Watch<K> {
        Watch {
            events: watcher(api, wc).boxed(),
            listed: None,
        }
    }
}

impl Scope {
    pub fn watch_config(&self) -> watcher::Config {
        self.list
            .apply(watcher::Config::default().timeout(self.watch_timeout))
    }

    /// Only objects this operator manages: the caches never hold anyone else's.
    fn managed(&self) -> watcher::Config {
        self.watch_config()
            .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"))
    }

    /// The dedicated gateways' pods only (their Deployments' template labels):
    /// never an instance's pods, never anyone else's.
    fn gateway_pods(&self) -> watcher::Config {
        self.watch_config().labels(&format!(
            "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_NAME}=kura-gateway"
        ))
    }
}

/// A reflector's stream of touched objects; its errors never reach a controller.
pub type Shared<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// What a reflector can cache.
pub trait Cacheable: Watchable + Resource<DynamicType = ()> + Sync {}
impl<K> Cacheable for K where K: Watchable + Resource<DynamicType = ()> + Sync {}

fn reflect<K: Cacheable>(watch: Watch<K>) -> (Store<K>, Shared<K>) {
    reflect_trimmed(watch, compact_managed_fields)
}

/// [`reflect`], keeping in the cache only what `trim` leaves of each object.
fn reflect_trimmed<K: Cacheable>(watch: Watch<K>, trim: fn(&mut K)) -> (Store<K>, Shared<K>) {
    reflect_observed(watch, trim, |_, _| {})
}

/// [`reflect_trimmed`], showing `observe` each event once the cache has it.
fn reflect_observed<K: Cacheable>(
    watch: Watch<K>,
    trim: fn(&mut K),
    observe: impl FnMut(&Store<K>, &watcher::Event<K>) + Send + 'static,
) -> (Store<K>, Shared<K>) {
    reflect_into(
        watch,
        trim,
        |cache, event| cache.apply_watcher_event(event),
        observe,
    )
}

/// Every reflector: each object watched, trimmed by `trim`, is written to
/// the cache by `write` (as it is, or in the compact form its cache keeps,
/// `stores::cached`), then shown to `observe`, then passed on to the
/// controllers as it came. A shard-filtered cache tells the gate once it has
/// written a complete list (after `observe`, so that its indexes have it too).
fn reflect_into<K: Cacheable, C: CachedObject>(
    watch: Watch<K>,
    trim: fn(&mut K),
    mut write: impl FnMut(&mut reflector::store::Writer<C>, &watcher::Event<K>) + Send + 'static,
    mut observe: impl FnMut(&Store<C>, &watcher::Event<K>) + Send + 'static,
) -> (Store<C>, Shared<K>) {
    let (reader, mut writer) = reflector::store();
    let cache = reader.clone();
    let kind = K::kind(&()).to_string();
    let Watch { events, listed } = watch;
    let watch = events.inspect(move |event| match event {
        Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff"),
        Ok(watcher::Event::Init) => tracing::debug!(%kind, "watch (re)listing"),
        Ok(watcher::Event::InitDone) => tracing::debug!(%kind, "watch listed"),
        Ok(_) => {}
    });
    let events = watch.default_backoff().modify(trim);
    // Errors end here: logged above and backed off for this watch alone. A
    // controller puts one backoff on all its trigger streams together, so an
    // error passed on (a 410 after an apiserver restart) would stop every watch
    // for up to 30 s, during which the others expire and fail in turn: the
    // instance controller went minutes without reconciling (tests/cluster/plane_faults.rs).
    let stream = events
        .inspect(move |event| {
            if let Ok(event) = event {
                write(&mut writer, event);
                observe(&cache, event);
                if let (watcher::Event::InitDone, Some(listed)) = (event, &listed) {
                    listed.done();
                }
            }
        })
        .touched_objects()
        .filter(|event| std::future::ready(event.is_ok()))
        .boxed();
    (reader, stream)
}

/// The metadata-only cache of a child kind, each object kept as
/// [`CachedMeta`], indexed by the instance it is labelled as.
fn reflect_child<K>(
    scope: &Scope,
    labelled: &Arc<Labelled>,
    kind: ChildKind,
) -> (Store<CachedMeta<K>>, Shared<PartialObjectMeta<K>>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    reflect_into(
        scope.shard_local::<PartialObjectMeta<K>>(scope.managed()),
        compact_child,
        |cache, event| cache.apply_watcher_event(&cached::event(event, cached::meta_of)),
        indexed(labelled, kind),
    )
}

/// Keeps `labelled` up to date with a reflector's events.
fn indexed<K: CachedObject, C: CachedObject>(
    labelled: &Arc<Labelled>,
    kind: ChildKind,
) -> impl FnMut(&Store<C>, &watcher::Event<K>) + Send + 'static {
    let labelled = labelled.clone();
    move |store, event| labelled.event(kind, store, event)
}

/// Keeps `names` (`stores::foreign`) from one metadata-only watch per kind
/// the caches hold by the operator's label, of every object without that
/// label: the names someone else's objects hold. Each watch backs off on its
/// own errors; the future runs as long as the process.
pub fn follow_foreign_names(
    scope: &Scope,
    names: Arc<ForeignNames>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let others = format!("{LABEL_MANAGED_BY}!={MANAGED_BY_VALUE}");
    let watches = ChildKind::ALL
        .into_iter()
        .filter(|kind| kind.cached_by_label())
        .map(|kind| {
            let ar = kind.api_resource();
            let namespace = scope.namespace.clone();
            let api = move |client| -> Api<PartialObjectMeta<DynamicObject>> {
                match &namespace {
                    Some(ns) => Api::namespaced_with(client, ns, &ar),
                    None => Api::all_with(client, &ar),
                }
            };
            let names = names.clone();
            // Read for an instance's own namespace only: shard-local.
            let Watch { events, listed } =
                scope.shard_local_with(api, scope.watch_config().labels(&others));
            events
                .default_backoff()
                .for_each(move |event| {
                    match event {
                        Ok(event) => {
                            let first = names.event(kind, &event);
                            if let (watcher::Event::InitDone, Some(listed)) = (&event, &listed) {
                                listed.done();
                            }
                            if first {
                                let held = names.len();
                                tracing::info!(held, "names of unlabelled objects listed: creates check them without reads");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(%kind, error = %e, "names watch failed; retrying with backoff")
                        }
                    }
                    std::future::ready(())
                })
        })
        .collect::<Vec<_>>();
    async move {
        futures::future::join_all(watches).await;
    }
}

/// The instance watch passes generation and annotation changes only: a status
/// write must not trigger a reconcile, and a generation-only filter would drop
/// the force annotation.
fn spec_or_annotations(instance: &KuraInstance) -> Option<u64> {
    let mut h = DefaultHasher::new();
    instance.metadata.generation.hash(&mut h);
    instance.metadata.annotations.hash(&mut h);
    Some(h.finish())
}

pub struct Streams {
    pub stores: Stores,
    instances: Shared<KuraInstance>,
    /// The same instances, for the slots freed in other replicas' shards.
    budget_instances: Shared<KuraInstance>,
    gateways: Shared<KuraGateway>,
    stateful_sets: Shared<StatefulSet>,
    ingresses: Shared<Ingress>,
    ingress_classes: Shared<IngressClass>,
    services: Shared<PartialObjectMeta<Service>>,
    config_maps: Shared<PartialObjectMeta<ConfigMap>>,
    service_accounts: Shared<PartialObjectMeta<ServiceAccount>>,
    pdbs: Shared<PartialObjectMeta<PodDisruptionBudget>>,
    network_policies: Shared<PartialObjectMeta<NetworkPolicy>>,
}

/// The gateway controller's triggers, copies of the instance controller's
/// (`fan_out`): each object arrives after the shared cache has it.
pub struct GatewayStreams {
    pub gateways: Shared<KuraGateway>,
    /// Every gateway touched, for the sweep of classes left by deleted ones.
    pub gateways_touched: Shared<KuraGateway>,
    pub deployments: Shared<PartialObjectMeta<Deployment>>,
    pub services: Shared<PartialObjectMeta<Service>>,
    pub ingress_classes: Shared<IngressClass>,
    /// The gateways' ServiceAccounts and bindings: one deleted or changed by
    /// someone else is applied again.
    pub service_accounts: Shared<PartialObjectMeta<ServiceAccount>>,
    pub role_bindings: Shared<PartialObjectMeta<RoleBinding>>,
    pub cluster_role_bindings: Shared<PartialObjectMeta<ClusterRoleBinding>>,
    pub instances: Shared<KuraInstance>,
    /// The gateways' pods: a pod the scheduler cannot place is reported.
    pub pods: Shared<Pod>,
}

/// The instance controller's streams (with every cache) and the gateway
/// controller's, copies of the same watches. Instances a freed host concerns
/// go to `wake`, the instance controller's one wake channel.
pub fn streams(scope: &Scope, wake: crate::claims::watch::WakeSender) -> (Streams, GatewayStreams) {
    // Host claims follow the instances and the Ingresses of ours (claims.rs).
    let claims = Arc::new(Claims::new(scope.host_reservation, Some(wake)));
    let (instances_store, instances) = {
        let claims = claims.clone();
        reflect_observed(
            Watch::whole(scope.api::<KuraInstance>(), scope.watch_config()),
            compact_instance,
            move |store, event| claims.instance_event(store, event),
        )
    };
    let (gateways_store, gateways) = reflect(Watch::whole(
        scope.api::<KuraGateway>(),
        scope.watch_config(),
    ));
    // Children by the instance they are labelled as (reconcile::labelled).
    let labelled = Arc::new(Labelled::default());
    // Fleet-wide: the fleet budget counts every instance's workload.
    let (sts_store, stateful_sets) = reflect_into(
        Watch::whole(scope.api::<StatefulSet>(), scope.managed()),
        kura_core::cached_sts::compact,
        |cache, event| cache.apply_watcher_event(&cached::event(event, CachedStatefulSet::of)),
        indexed(&labelled, ChildKind::StatefulSet),
    );
    let (ing_store, ingresses) = {
        let claims = claims.clone();
        let mut index = indexed(&labelled, ChildKind::Ingress);
        // Fleet-wide: a host is claimed once across the fleet.
        reflect_into(
            Watch::whole(scope.api::<Ingress>(), scope.managed()),
            compact_child,
            |cache, event| cache.apply_watcher_event(&cached::event(event, CachedIngress::of)),
            move |store, event| {
                claims.ingress_event(event, || cached::ingresses(store));
                index(store, event);
            },
        )
    };
    let (class_store, ingress_classes) = reflect(Watch::whole(
        Api::<IngressClass>::all(scope.client.clone()),
        scope.watch_config(),
    ));
    let (svc, services) = reflect_child(scope, &labelled, ChildKind::Service);
    let (cm, config_maps) = reflect_child(scope, &labelled, ChildKind::ConfigMap);
    let (sa, service_accounts) = reflect_child(scope, &labelled, ChildKind::ServiceAccount);
    let (pdb, pdbs) = reflect_child(scope, &labelled, ChildKind::PodDisruptionBudget);
    let (np, network_policies) = reflect_child(scope, &labelled, ChildKind::NetworkPolicy);
    // A gateway's own objects, read for it only (in its namespace's shard).
    let (dep, deployments) =
        reflect(scope.shard_local::<PartialObjectMeta<Deployment>>(scope.managed()));
    let (rb, role_bindings) =
        reflect(scope.shard_local::<PartialObjectMeta<RoleBinding>>(scope.managed()));
    let (crb, cluster_role_bindings) = reflect(Watch::whole(
        Api::<PartialObjectMeta<ClusterRoleBinding>>::all(scope.client.clone()),
        scope.watch_config(),
    ));
    // Metadata and the PodScheduled condition only: what the gateway reports.
    // Fleet-wide: an instance reports the gateway serving its class, which
    // can be in another namespace (`Stores::gateway_trouble`).
    let (pod_store, pods) = reflect_trimmed(
        Watch::whole(scope.api::<Pod>(), scope.gateway_pods()),
        kura_core::gateway::pods::compact,
    );
    let [instances, gateway_instances, budget_instances] = fan_out(instances);
    let [gateways, gateway_gateways, gateways_touched] = fan_out(gateways);
    let [services, gateway_services] = fan_out(services);
    let [ingress_classes, gateway_classes] = fan_out(ingress_classes);
    let [service_accounts, gateway_service_accounts] = fan_out(service_accounts);
    let gateway = GatewayStreams {
        gateways: gateway_gateways,
        gateways_touched,
        deployments,
        services: gateway_services,
        ingress_classes: gateway_classes,
        service_accounts: gateway_service_accounts,
        role_bindings,
        cluster_role_bindings,
        instances: gateway_instances,
        pods,
    };
    let instance = Streams {
        stores: Stores {
            instances: instances_store,
            gateways: gateways_store,
            stateful_sets: sts_store,
            ingresses: ing_store,
            ingress_classes: class_store,
            services: svc,
            config_maps: cm,
            service_accounts: sa,
            pod_disruption_budgets: pdb,
            network_policies: np,
            deployments: dep,
            role_bindings: rb,
            cluster_role_bindings: crb,
            gateway_pods: pod_store,
            claims,
            labelled,
            foreign: Default::default(),
        },
        instances,
        budget_instances,
        gateways,
        stateful_sets,
        ingresses,
        ingress_classes,
        services,
        config_maps,
        service_accounts,
        pdbs,
        network_policies,
    };
    (instance, gateway)
}

/// `N` copies of a reflector's stream, each delivering every touched object
/// (after the cache has it), so that both controllers trigger on one watch and
/// one cache. A task drives the source; it ends when every copy is dropped.
fn fan_out<K: Clone + Send + 'static, const N: usize>(mut source: Shared<K>) -> [Shared<K>; N] {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..N)
        .map(|_| futures::channel::mpsc::unbounded::<Result<K, watcher::Error>>())
        .unzip();
    tokio::spawn(async move {
        while let Some(item) = source.next().await {
            // Errors never get here: `reflect` keeps them to its own watch.
            let Ok(object) = item else { continue };
            let mut delivered = false;
            for tx in &senders {
                delivered |= tx.unbounded_send(Ok(object.clone())).is_ok();
            }
            if !delivered {
                return;
            }
        }
    });
    let copies: Vec<Shared<K>> = receivers.into_iter().map(|rx| rx.boxed()).collect();
    copies
        .try_into()
        .unwrap_or_else(|_| unreachable!("one receiver per copy"))
}

/// Error policy: the errors that reach here are transient (throttling, a server
/// error, a failed prune or status write); apply failures of the input itself are
/// recorded in status and retried by `plan`. Backoff is exponential per instance
/// (`RetryPolicy::transient_backoff`: 0.5 s doubling to 60 s, jittered) and
/// resets on the next successful reconcile.
fn error_policy(
    instance: Arc<KuraInstance>,
    error: &reconcile::Error,
    ctx: Arc<Context>,
) -> Action {
    let failures = error.failures();
    let delay = ctx
        .policy
        .transient_backoff(failures, jitter(instance.as_ref(), failures));
    tracing::warn!(
        namespace = ?instance.metadata.namespace,
        instance = ?instance.metadata.name,
        error = %error,
        retry_in = ?delay,
        "reconcile failed; retrying"
    );
    ctx.metrics.record_error(error.label());
    if let reconcile::Error::Transient { failure, .. } = error {
        ctx.metrics.record_failure(failure);
    }
    Action::requeue(delay)
}

/// A standby reconciles nothing (it is reconciled in full when it starts
/// leading); the leader's reconciles are timed, and cancelled when it stops
/// leading. Sharded: the same per shard, by the instance's namespace
/// (`shards::Gate::run`).
async fn reconcile_if_leading(
    instance: Arc<KuraInstance>,
    ctx: Arc<Context>,
) -> Result<Action, reconcile::Error> {
    let in_progress = ctx
        .metrics
        .runtime
        .start(INSTANCE_CONTROLLER, instance.as_ref());
    let namespace = instance.metadata.namespace.clone().unwrap_or_default();
    if !ctx.shards.acts_for(&namespace) {
        return Ok(Action::await_change());
    }
    let _timer = ctx.metrics.reconcile_timer();
    let span = reconcile::span(&instance);
    let work = reconcile::reconcile(instance, ctx.clone(), &span);
    let result = ctx
        .shards
        .run(&namespace, work)
        .await
        .unwrap_or(Ok(Action::await_change()));
    // Its trace is the exemplar of the reconcile histogram.
    in_progress.done(&result, crate::traces::trace_id(&span));
    result
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
    if ctx.ledgers.is_none() {
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

/// Every reflector has listed once (what `/readyz` waits for).
pub async fn caches_synced(stores: &Stores) {
    stores.synced().await
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
    // The work-queue metrics follow every trigger (runtime_metrics.rs).
    let q = Triggers {
        metrics: ctx.metrics.runtime.clone(),
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
                observed.memory.observed(instance);
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
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown);
    let runtime = q.metrics;
    controller
        .run(reconcile_if_leading, error_policy, ctx)
        .for_each(move |result| {
            // Triggered, then deleted before its turn: out of the queue.
            if let Err(kube::runtime::controller::Error::ObjectNotFound(r)) = &result {
                runtime.forget(INSTANCE_CONTROLLER, r.namespace.as_deref(), &r.name);
            }
            async move {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "controller event");
                }
            }
        })
}

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

/// Drive the streams no controller consumes, so their caches fill.
pub async fn drain<S: Stream + Unpin>(stream: S) {
    stream.for_each(|_| async {}).await
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use serde_json::json;

    use super::compact_managed_fields;
    use crate::reconcile::observe::{live_child, live_child_as};
    use kura_core::kind::ChildKind;
    use kura_core::plan::Owner;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        field: &str,
    ) -> serde_json::Value {
        json!({
            "manager": manager, "operation": operation, "subresource": subresource,
            "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {format!("f:{field}"): {}}},
        })
    }

    /// The example acme-eu's StatefulSet as the operator renders it.
    fn rendered_stateful_set() -> kura_core::render::Manifest {
        let config =
            kura_core::config::OperatorConfig::parse(include_str!("../examples/config.yaml"))
                .unwrap();
        let instance: kura_core::api::KuraInstance = serde_yaml::from_str(
            include_str!("../examples/instances.yaml")
                .split("\n---\n")
                .next()
                .unwrap(),
        )
        .unwrap();
        let validated = kura_core::validate::validate(&instance, &config).unwrap();
        let desired = kura_core::render::render(&validated, &config);
        let sts = desired
            .objects
            .into_iter()
            .find(|o| o.id.kind == ChildKind::StatefulSet);
        sts.unwrap().manifest
    }

    /// Compacting keeps exactly what drift and conflict detection read, and
    /// of other managers only what they hold that the operator's entry does not.
    #[test]
    fn compacted_cache_objects_observe_the_same() {
        let rendered = rendered_stateful_set();
        let mut sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "a", "managedFields": [
                entry("kube-controller-manager", "Update", Some("status"), "replicas"),
                entry("kura-operator", "Apply", None, "template"),
                entry("kura-operator", "Apply", Some("status"), "x"),
                entry("kubectl", "Update", None, "replicas"),
                entry("kubectl", "Update", Some("scale"), "replicas"),
                entry("gitops", "Apply", None, "template"),
                entry("annotator", "Update", None, "minReadySeconds"),
            ]},
        }))
        .unwrap();
        let before = live_child(&sts.metadata, Owner::Ours, Some(&rendered));
        assert!(before.owned_fields.is_some());
        assert_eq!(
            before.other_managers,
            ["kubectl", "kubectl (scale subresource)"]
        );
        compact_managed_fields(&mut sts);
        assert_eq!(
            live_child(&sts.metadata, Owner::Ours, Some(&rendered)),
            before
        );
        let kept: Vec<(Option<String>, Option<String>)> = sts
            .metadata
            .managed_fields
            .unwrap()
            .into_iter()
            .map(|m| (m.manager, m.subresource))
            .collect();
        let some = |s: &str| Some(s.to_string());
        // Status writers are gone; gitops shares what it holds with us.
        assert_eq!(
            kept,
            [
                (some("kura-operator"), None),
                (some("kubectl"), None),
                (some("kubectl"), some("scale")),
                (some("annotator"), None),
            ]
        );

        let mut foreign: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "b", "managedFields": [entry("kubectl", "Update", None, "replicas")]},
        }))
        .unwrap();
        let before = live_child(&foreign.metadata, Owner::Ours, Some(&rendered));
        compact_managed_fields(&mut foreign);
        assert_eq!(
            live_child(&foreign.metadata, Owner::Ours, Some(&rendered)),
            before
        );
        assert_eq!(before.owned_fields, None);
        assert_eq!(before.other_managers, ["kubectl"]);
    }

    /// A gateway's children are applied by a field manager of their own: its
    /// fingerprint survives compaction too.
    /// A cached child keeps the labels ownership, pruning and the label index
    /// read, and the operator's annotations; another writer's are dropped.
    #[test]
    fn a_cached_child_keeps_the_labels_and_annotations_the_operator_reads() {
        let mut cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns",
                "labels": {"app.kubernetes.io/managed-by": "kura-operator", "kura.dev/instance": "a",
                           "app.kubernetes.io/name": "kura", "kura.dev/account": "acme", "team": "x"},
                "annotations": {"kura.dev/revision": "r1", "kura.dev/adopt": "a", "note": "hello"}},
        }))
        .unwrap();
        super::compact_child(&mut cm);
        let keys = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.as_ref().unwrap().keys().cloned().collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&cm.metadata.labels),
            ["app.kubernetes.io/managed-by", "kura.dev/instance"]
        );
        assert_eq!(
            keys(&cm.metadata.annotations),
            ["kura.dev/adopt", "kura.dev/revision"]
        );
    }

    #[test]
    fn compacting_keeps_the_gateway_managers_fingerprint() {
        let rendered = rendered_stateful_set();
        let mut deployment: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "g", "managedFields": [
                entry("kura-operator-gateway", "Apply", None, "template"),
                entry("scaler", "Update", None, "replicas"),
            ]},
        }))
        .unwrap();
        let observe = |d: &StatefulSet| {
            live_child_as(
                &d.metadata,
                Owner::Ours,
                "kura-operator-gateway",
                Some(&rendered),
            )
        };
        let before = observe(&deployment);
        assert!(before.owned_fields.is_some());
        assert_eq!(before.other_managers, ["scaler"]);
        compact_managed_fields(&mut deployment);
        assert_eq!(observe(&deployment), before);
    }

    /// Each copy of a stream gets every object, in order.
    #[tokio::test]
    async fn every_copy_of_a_fanned_out_stream_gets_every_object() {
        use futures::StreamExt;
        let source: super::Shared<u32> = futures::stream::iter([1, 2, 3].map(Ok)).boxed();
        let [a, b] = super::fan_out(source);
        let got =
            |s: super::Shared<u32>| s.filter_map(|r| async move { r.ok() }).collect::<Vec<_>>();
        assert_eq!(got(a).await, [1, 2, 3]);
        assert_eq!(got(b).await, [1, 2, 3]);
    }
}
