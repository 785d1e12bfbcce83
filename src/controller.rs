//! Controller wiring: reflectors (the caches `observe` reads), watches and their
//! mapping to instances, the error policy.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::{KuraGateway, KuraInstance};
use crate::context::Context;
use crate::keys::{FIELD_MANAGER, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::reconcile::observe::owned_fields;
use crate::reconcile::{self, stores::Stores};

/// Where the operator looks: every namespace, or one.
#[derive(Clone)]
pub struct Scope {
    pub client: Client,
    pub namespace: Option<String>,
    /// Server-side timeout of each watch request, in seconds.
    pub watch_timeout: u32,
}

impl Scope {
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }
}

impl Scope {
    pub fn watch_config(&self) -> watcher::Config {
        watcher::Config::default().timeout(self.watch_timeout)
    }

    /// Only objects this operator manages: the caches never hold anyone else's.
    fn managed(&self) -> watcher::Config {
        self.watch_config()
            .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"))
    }
}

/// A reflector's stream of touched objects; its errors never reach a controller.
pub type Shared<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

/// What a reflector can cache.
pub trait Cacheable:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}
impl<K> Cacheable for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

pub fn reflect<K: Cacheable>(api: Api<K>, wc: watcher::Config) -> (Store<K>, Shared<K>) {
    reflect_trimmed(api, wc, compact_managed_fields)
}

/// [`reflect`], keeping in the cache only what `trim` leaves of each object.
fn reflect_trimmed<K: Cacheable>(
    api: Api<K>,
    wc: watcher::Config,
    trim: fn(&mut K),
) -> (Store<K>, Shared<K>) {
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).to_string();
    let watch = watcher(api, wc).inspect(move |event| match event {
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
    let stream = reflector::reflector(writer, events)
        .touched_objects()
        .filter(|event| std::future::ready(event.is_ok()))
        .boxed();
    (reader, stream)
}

/// Of an object's managedFields the caches keep what `observe::live_child` reads:
/// the fingerprint of this operator's own apply entry (`owned_fields`) and the
/// names of the other managers of spec and metadata (`other_managers`). As
/// `serde_json::Value` trees, managedFields were the largest part of every cached
/// object (a StatefulSet's own entry alone is ~2.4 KB of JSON, many times that in
/// memory; docs/benchmarks.md, scale).
pub(crate) fn compact_managed_fields<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    let fingerprint = owned_fields(meta);
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let compact = entries
        .into_iter()
        .filter(|m| m.subresource.as_deref().unwrap_or("").is_empty())
        .map(|m| {
            let own = m.manager.as_deref() == Some(FIELD_MANAGER)
                && m.operation.as_deref() == Some("Apply");
            ManagedFieldsEntry {
                fields_v1: own
                    .then(|| {
                        fingerprint
                            .clone()
                            .map(|f| FieldsV1(serde_json::Value::String(f)))
                    })
                    .flatten(),
                manager: m.manager,
                operation: m.operation,
                ..Default::default()
            }
        })
        .collect();
    meta.managed_fields = Some(compact);
}

/// A cached StatefulSet keeps what `observe` and `probe` read: its metadata
/// (compacted), the replica count, the containers' names and images, the
/// claim templates' names, classes and sizes (storage is pinned to them:
/// `reconcile::storage`), and the status. The rest of the pod template was
/// most of the operator's memory at scale (docs/benchmarks.md, scale).
pub(crate) fn compact_stateful_set(sts: &mut StatefulSet) {
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
    };
    compact_managed_fields(sts);
    if let Some(spec) = sts.spec.as_mut() {
        let containers = spec
            .template
            .spec
            .take()
            .map(|pod| {
                pod.containers
                    .into_iter()
                    .map(|c| k8s_openapi::api::core::v1::Container {
                        name: c.name,
                        image: c.image,
                        ..Default::default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let claims = spec.volume_claim_templates.take().map(|templates| {
            templates
                .into_iter()
                .map(|t| PersistentVolumeClaim {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: t.metadata.name,
                        ..Default::default()
                    },
                    spec: t.spec.map(|s| PersistentVolumeClaimSpec {
                        storage_class_name: s.storage_class_name,
                        resources: s.resources.map(|r| VolumeResourceRequirements {
                            requests: r.requests,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    status: None,
                })
                .collect()
        });
        *spec = k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: spec.replicas,
            template: k8s_openapi::api::core::v1::PodTemplateSpec {
                metadata: None,
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    containers,
                    ..Default::default()
                }),
            },
            volume_claim_templates: claims,
            ..Default::default()
        };
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
    gateways: Shared<KuraGateway>,
    stateful_sets: Shared<StatefulSet>,
    ingresses: Shared<Ingress>,
    ingress_classes: Shared<IngressClass>,
    services: Shared<PartialObjectMeta<Service>>,
    config_maps: Shared<PartialObjectMeta<ConfigMap>>,
    service_accounts: Shared<PartialObjectMeta<ServiceAccount>>,
    pdbs: Shared<PartialObjectMeta<PodDisruptionBudget>>,
    network_policies: Shared<PartialObjectMeta<NetworkPolicy>>,
    pub deployments: Shared<PartialObjectMeta<Deployment>>,
}

pub fn streams(scope: &Scope) -> Streams {
    let (instances_store, instances) = reflect(scope.api::<KuraInstance>(), scope.watch_config());
    let (gateways_store, gateways) = reflect(scope.api::<KuraGateway>(), scope.watch_config());
    let (sts_store, stateful_sets) = reflect_trimmed(
        scope.api::<StatefulSet>(),
        scope.managed(),
        compact_stateful_set,
    );
    let (ing_store, ingresses) = reflect(scope.api::<Ingress>(), scope.managed());
    let (class_store, ingress_classes) = reflect(
        Api::<IngressClass>::all(scope.client.clone()),
        scope.watch_config(),
    );
    let (svc, services) = reflect(scope.api::<PartialObjectMeta<Service>>(), scope.managed());
    let (cm, config_maps) = reflect(scope.api::<PartialObjectMeta<ConfigMap>>(), scope.managed());
    let (sa, service_accounts) = reflect(
        scope.api::<PartialObjectMeta<ServiceAccount>>(),
        scope.managed(),
    );
    let (pdb, pdbs) = reflect(
        scope.api::<PartialObjectMeta<PodDisruptionBudget>>(),
        scope.managed(),
    );
    let (np, network_policies) = reflect(
        scope.api::<PartialObjectMeta<NetworkPolicy>>(),
        scope.managed(),
    );
    let (dep, deployments) = reflect(
        scope.api::<PartialObjectMeta<Deployment>>(),
        scope.managed(),
    );
    Streams {
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
        },
        instances,
        gateways,
        stateful_sets,
        ingresses,
        ingress_classes,
        services,
        config_maps,
        service_accounts,
        pdbs,
        network_policies,
        deployments,
    }
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
        .transient_backoff(failures, jitter(&instance, failures));
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

/// A number in 0..1, different per instance and attempt (and per process: the
/// hasher's keys are random), to spread retries.
pub fn jitter(instance: &KuraInstance, failures: u32) -> f64 {
    use std::hash::BuildHasher;
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let h = KEYS
        .get_or_init(Default::default)
        .hash_one((&instance.metadata.uid, failures));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A standby reconciles nothing (it is reconciled in full when it starts
/// leading); the leader's reconciles are timed, and cancelled when it stops
/// leading (`leader::while_leading`).
async fn reconcile_if_leading(
    instance: Arc<KuraInstance>,
    ctx: Arc<Context>,
) -> Result<Action, reconcile::Error> {
    if !ctx.leading() {
        return Ok(Action::await_change());
    }
    let _timer = ctx.metrics.reconcile_timer();
    let work = reconcile::reconcile(instance, ctx.clone());
    crate::leader::while_leading(&ctx.leader, work)
        .await
        .unwrap_or(Ok(Action::await_change()))
}

/// Every reflector has listed once (what `/readyz` waits for).
pub async fn caches_synced(stores: &Stores) {
    let _ = futures::join!(
        stores.instances.wait_until_ready(),
        stores.gateways.wait_until_ready(),
        stores.stateful_sets.wait_until_ready(),
        stores.ingresses.wait_until_ready(),
        stores.ingress_classes.wait_until_ready(),
        stores.services.wait_until_ready(),
        stores.config_maps.wait_until_ready(),
        stores.service_accounts.wait_until_ready(),
        stores.pod_disruption_budgets.wait_until_ready(),
        stores.network_policies.wait_until_ready(),
        stores.deployments.wait_until_ready(),
    );
}

/// The instance controller. Returns when `shutdown` resolves. `reconcile_all`
/// ticks on a configuration change and when this process starts leading.
pub fn instance_controller(
    streams: Streams,
    ctx: Arc<Context>,
    reconcile_all: impl Stream<Item = ()> + Send + 'static,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> {
    let instances_store = streams.stores.instances.clone();
    let by_gateway = instances_store.clone();
    let by_class = instances_store.clone();
    let instances = streams
        .instances
        .predicate_filter(spec_or_annotations, Default::default());
    let controller = Controller::for_stream(instances, instances_store)
        .owns_stream(streams.stateful_sets)
        .owns_stream(streams.ingresses)
        .owns_stream(streams.services)
        .owns_stream(streams.config_maps)
        .owns_stream(streams.service_accounts)
        .owns_stream(streams.pdbs)
        .owns_stream(streams.network_policies)
        // A gateway is not owned by one instance: map it to the instances using it.
        .watches_stream(streams.gateways, move |gw: KuraGateway| {
            let name = gw.metadata.name.clone().unwrap_or_default();
            let ns = gw.metadata.namespace.clone();
            instances_using(&by_gateway, ns.as_deref(), |s| {
                s.gateway_name.as_deref() == Some(name.as_str())
            })
        })
        // An IngressClass appearing (or changing) can activate waiting instances.
        .watches_stream(streams.ingress_classes, move |class: IngressClass| {
            let name = class.metadata.name.clone().unwrap_or_default();
            instances_using(&by_class, None, |s| s.ingress_class_name == name)
        })
        .reconcile_all_on(reconcile_all)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown);
    controller
        .run(reconcile_if_leading, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::trace!(error = %e, "controller event");
            }
        })
}

fn instances_using(
    store: &Store<KuraInstance>,
    namespace: Option<&str>,
    pred: impl Fn(&crate::api::GatewayStatus) -> bool,
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
    use crate::reconcile::observe::live_child;
    use crate::reconcile::plan::Owner;

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

    /// A trimmed StatefulSet still answers what observe and probe ask of it.
    #[test]
    fn trimmed_stateful_sets_keep_replicas_images_and_status() {
        let mut sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "a", "generation": 3},
            "spec": {
                "replicas": 3, "serviceName": "a", "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": {
                    "containers": [{"name": "kura", "image": "k:1", "env": [{"name": "X", "value": "1"}]}],
                    "volumes": [{"name": "v", "emptyDir": {}}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "cache"}}],
            },
            "status": {"replicas": 3, "availableReplicas": 2, "updatedReplicas": 3, "observedGeneration": 3},
        }))
        .unwrap();
        let status = sts.status.clone();
        super::compact_stateful_set(&mut sts);
        let spec = sts.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.containers[0].name, "kura");
        assert_eq!(pod.containers[0].image.as_deref(), Some("k:1"));
        assert!(pod.containers[0].env.is_none() && pod.volumes.is_none());
        let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("cache"));
        assert_eq!(sts.status, status);
        assert_eq!(sts.metadata.generation, Some(3));
    }

    /// Compacting keeps exactly what drift and conflict detection read.
    #[test]
    fn compacted_cache_objects_observe_the_same() {
        let mut sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "a", "managedFields": [
                entry("kube-controller-manager", "Update", Some("status"), "replicas"),
                entry("kura-operator", "Apply", None, "template"),
                entry("kura-operator", "Apply", Some("status"), "x"),
                entry("kubectl", "Update", None, "replicas"),
            ]},
        }))
        .unwrap();
        let before = live_child(&sts.metadata, Owner::Ours);
        assert!(before.owned_fields.is_some());
        assert_eq!(before.other_managers, ["kubectl"]);
        compact_managed_fields(&mut sts);
        assert_eq!(live_child(&sts.metadata, Owner::Ours), before);
        let kept = sts.metadata.managed_fields.unwrap();
        assert_eq!(kept.len(), 2);
        assert!(kept.iter().all(|m| m.subresource.is_none()));

        let mut foreign: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "b", "managedFields": [entry("kubectl", "Update", None, "replicas")]},
        }))
        .unwrap();
        let before = live_child(&foreign.metadata, Owner::Ours);
        compact_managed_fields(&mut foreign);
        assert_eq!(live_child(&foreign.metadata, Owner::Ours), before);
        assert_eq!(before.owned_fields, None);
    }
}
