//! The KuraGateway controller's wiring: what triggers a gateway's reconcile
//! (`gateway::reconcile`; the pass around it is `pass`'s), and the sweep of
//! IngressClasses that deleted gateways left behind.
//!
//! Triggers, all event-driven (the resync is a safety net): the gateway itself
//! (a spec, label, annotation or finalizer change, not its own status write),
//! its Deployment, Service, ServiceAccount and RoleBinding (owned), its
//! IngressClass and ClusterRoleBinding (mapped back by the labels they carry,
//! or their name), the instances that use it (an instance that goes away may
//! leave it unused), and its pods (one the scheduler cannot place).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::controller::streams::GatewayStreams;
use crate::gateway::{self, collect};
use crate::metrics::Metrics;
use crate::metrics::runtime::GATEWAY_CONTROLLER;
use crate::metrics::triggers::Triggers;
use crate::pass::{self, Kind};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::kind::ChildKind;

/// Passes what a reconcile decides from (spec, labels, annotations,
/// finalizers, deletion), not the controller's own status writes.
fn decided_from(gw: &KuraGateway) -> Option<u64> {
    let mut h = DefaultHasher::new();
    gw.metadata.generation.hash(&mut h);
    gw.metadata.labels.hash(&mut h);
    gw.metadata.annotations.hash(&mut h);
    gw.metadata.finalizers.hash(&mut h);
    gw.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The gateways an instance names (in its status: the one it resolved to and
/// the ones its last apply inventoried), in its namespace.
fn gateways_of(instance: &KuraInstance) -> Vec<ObjectRef<KuraGateway>> {
    let Some(namespace) = instance.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    let Some(status) = instance.status.as_ref() else {
        return Vec::new();
    };
    let mut names: Vec<&str> = status
        .inventory
        .iter()
        .filter(|e| e.kind == ChildKind::KuraGateway.kind())
        .map(|e| e.name.as_str())
        .chain(
            status
                .gateway
                .as_ref()
                .and_then(|g| g.gateway_name.as_deref()),
        )
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|n| ObjectRef::new(n).within(namespace))
        .collect()
}

/// The gateway a cluster-scoped object concerns (an IngressClass, a
/// ClusterRoleBinding; both named as the gateway's class): by the labels the
/// operator puts on them, or else by the name (an object of that name that
/// is not the gateway's holds the gateway in a name conflict until it goes).
fn gateway_of_cluster_child(meta: &ObjectMeta) -> Option<ObjectRef<KuraGateway>> {
    let (namespace, name) = collect::class_owner(meta).or_else(|| {
        let (namespace, name) =
            kura_core::names::parse_gateway_ingress_class(meta.name.as_deref()?)?;
        Some((namespace.to_string(), name.to_string()))
    })?;
    Some(ObjectRef::new(&name).within(&namespace))
}

/// The gateway a pod belongs to, by the label its Deployment's template gives it.
fn gateway_of_pod(pod: &Pod) -> Option<ObjectRef<KuraGateway>> {
    let name = pod
        .metadata
        .labels
        .as_ref()?
        .get(kura_core::keys::LABEL_GATEWAY)?;
    Some(ObjectRef::new(name).within(pod.metadata.namespace.as_deref()?))
}

/// The gateway's pass (`gateway::reconcile`) for the generic pipeline
/// (`pass`): its span, its metrics. Sharded, a gateway is collected only by
/// the shard that owns its namespace.
impl Kind for KuraGateway {
    const CONTROLLER: &'static str = GATEWAY_CONTROLLER;
    const NOUN: &'static str = "KuraGateway";

    fn span(&self) -> tracing::Span {
        gateway::span(self)
    }

    fn reconcile(
        self: Arc<Self>,
        ctx: Arc<Context>,
        span: &tracing::Span,
    ) -> impl std::future::Future<Output = Result<Action, pass::Error>> + Send {
        gateway::reconcile(self, ctx, span)
    }

    fn count_error(metrics: &Metrics, label: &'static str) {
        metrics.count_gateway(label);
    }
}

/// Runs the sweep of leftover IngressClasses (`collect::sweep`) when a gateway
/// is deleted (touched, and gone from the cache), when the shards this
/// process acts for change, and every resync period; only while it acts for
/// one at least (`shards::Gate::run_while_acting`; with one shard, while it
/// leads and no incompatible CRD holds it).
async fn sweep_classes(
    ctx: Arc<Context>,
    namespace: Option<String>,
    touched: impl Stream<Item = Result<KuraGateway, kube::runtime::watcher::Error>> + Send,
) {
    let store = ctx.stores.gateways.clone();
    let mut deleted = std::pin::pin!(touched.filter_map(|gw| {
        let gone = gw
            .ok()
            .filter(|gw| store.get(&ObjectRef::from_obj(gw)).is_none());
        std::future::ready(gone.map(|_| ()))
    }));
    let mut tick = tokio::time::interval(ctx.settings.resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut acting = ctx.acting.shards.acting_changes();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(()) = deleted.next() => {}
            // The sender lives as long as the process: never for real.
            changed = acting.changed() => if changed.is_err() { return std::future::pending().await },
        }
        let work = collect::sweep(&ctx, namespace.as_deref());
        let _ = ctx.acting.shards.run_while_acting(work).await;
    }
}

/// The gateway controller and the sweep. Returns when `shutdown` resolves.
/// `namespace`: the one namespace the operator watches, if it watches one.
pub fn gateway_controller(
    streams: GatewayStreams,
    namespace: Option<String>,
    ctx: Arc<Context>,
    (leading, wake): (
        impl Stream<Item = ()> + Send + 'static,
        tokio::sync::mpsc::UnboundedReceiver<ObjectRef<KuraGateway>>,
    ),
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> {
    let gateways = streams
        .gateways
        .predicate_filter(decided_from, Default::default());
    // The work-queue metrics follow every trigger (`metrics::triggers`).
    let q = Triggers {
        metrics: ctx.report.metrics.runtime.clone(),
        controller: GATEWAY_CONTROLLER,
    };
    let runtime = q.metrics.clone();
    let controller = Controller::for_stream(q.objects(gateways), ctx.stores.gateways.clone())
        .owns_stream(q.owned::<KuraGateway, _, _, _>(streams.deployments))
        .owns_stream(q.owned::<KuraGateway, _, _, _>(streams.services))
        .owns_stream(q.owned::<KuraGateway, _, _, _>(streams.service_accounts))
        .owns_stream(q.owned::<KuraGateway, _, _, _>(streams.role_bindings))
        .watches_stream(
            streams.ingress_classes,
            q.mapped(|class: IngressClass| {
                gateway_of_cluster_child(&class.metadata)
                    .into_iter()
                    .collect()
            }),
        )
        .watches_stream(
            streams.cluster_role_bindings,
            q.mapped(|binding: PartialObjectMeta<ClusterRoleBinding>| {
                gateway_of_cluster_child(&binding.metadata)
                    .into_iter()
                    .collect()
            }),
        )
        .watches_stream(
            streams.instances,
            q.mapped(|i: KuraInstance| gateways_of(&i)),
        )
        // Its pods: one the scheduler cannot place is reported, and no more
        // once placed or gone (the cache keeps their PodScheduled condition only).
        .watches_stream(
            streams.pods,
            q.mapped(|p: Pod| gateway_of_pod(&p).into_iter().collect()),
        )
        .reconcile_all_on(q.all(leading, ctx.stores.gateways.clone()))
        // Those a name conflict stalled, when a name they wait for changes.
        .reconcile_on(q.refs(futures::stream::unfold(wake, |mut rx| async move {
            rx.recv().await.map(|r| (r, rx))
        })))
        .graceful_shutdown_on(shutdown);
    let controller = pass::run(controller, ctx.clone(), runtime);
    let sweep = sweep_classes(ctx, namespace, streams.gateways_touched);
    // The sweep ends with the controller (it never ends by itself).
    async move {
        tokio::select! {
            _ = controller => {}
            _ = sweep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decided_from, gateways_of};
    use kura_core::api::{KuraGateway, KuraInstance};

    #[test]
    fn an_instance_maps_to_the_gateways_its_status_names_in_its_namespace() {
        let i: KuraInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"account": "a", "region": "r", "image": "k:1", "storage": {"size": "1Gi"}},
            "status": {
                "gateway": {"mode": "Shared", "ingressClassName": "shared", "gatewayName": "gw-new"},
                "inventory": [
                    {"apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway", "name": "gw-old", "namespace": "ns", "hash": "h"},
                    {"apiVersion": "v1", "kind": "Service", "name": "a", "namespace": "ns", "hash": "h"},
                ],
            },
        }))
        .unwrap();
        let refs: Vec<String> = gateways_of(&i).iter().map(ToString::to_string).collect();
        assert_eq!(refs.len(), 2, "{refs:?}");
        assert!(refs.iter().all(|r| r.contains("ns")), "{refs:?}");
        assert!(
            refs.iter().any(|r| r.contains("gw-old")) && refs.iter().any(|r| r.contains("gw-new"))
        );
    }

    #[test]
    fn the_gateways_own_status_writes_do_not_trigger_it() {
        let mut gw: KuraGateway = serde_json::from_value(serde_json::json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraGateway",
            "metadata": {"name": "g", "namespace": "ns", "generation": 1},
            "spec": {"account": "a", "region": "r", "ingressClassName": "kura-gw.ns.g", "controller": "c", "image": "g:1"},
        }))
        .unwrap();
        let before = decided_from(&gw);
        gw.status = Some(Default::default());
        gw.metadata.resource_version = Some("2".into());
        assert_eq!(decided_from(&gw), before);
        gw.metadata.finalizers = Some(vec!["x".into()]);
        assert_ne!(decided_from(&gw), before);
    }
}
