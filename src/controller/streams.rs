//! The caches both controllers read and the streams they trigger on: one
//! watch and one cache per kind, its stream copied to each controller.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::compact::{compact_child, compact_instance};
use kura_core::kind::ChildKind;

use super::reflect::{
    ChildIndexes, Shared, fan_out, indexed, reflect, reflect_child, reflect_into, reflect_observed,
    reflect_trimmed,
};
use super::scope::{Scope, Watch};
use crate::claims::Claims;
use crate::stores::Stores;
use crate::stores::cached::{self, CachedIngress, CachedMeta, CachedStatefulSet};

pub struct Streams {
    pub stores: Stores,
    pub(super) instances: Shared<KuraInstance>,
    /// The same instances, for the slots freed in other replicas' shards.
    pub(super) budget_instances: Shared<KuraInstance>,
    pub(super) gateways: Shared<KuraGateway>,
    pub(super) stateful_sets: Shared<StatefulSet>,
    pub(super) ingresses: Shared<Ingress>,
    pub(super) ingress_classes: Shared<IngressClass>,
    pub(super) services: Shared<PartialObjectMeta<Service>>,
    pub(super) config_maps: Shared<PartialObjectMeta<ConfigMap>>,
    pub(super) service_accounts: Shared<PartialObjectMeta<ServiceAccount>>,
    pub(super) pdbs: Shared<PartialObjectMeta<PodDisruptionBudget>>,
    pub(super) network_policies: Shared<PartialObjectMeta<NetworkPolicy>>,
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

/// A cache and the stream of the objects its watch touched (`K`, kept in
/// the cache as `C`).
type Reflected<C, K = C> = (Store<C>, Shared<K>);

/// The instance controller's streams (with every cache) and the gateway
/// controller's, copies of the same watches. Instances a freed host concerns
/// go to `wake`, the instance controller's one wake channel.
pub fn streams(scope: &Scope, wake: crate::claims::watch::WakeSender) -> (Streams, GatewayStreams) {
    // Host claims follow the instances and the Ingresses of ours (claims.rs).
    let claims = Arc::new(Claims::new(scope.host_reservation, Some(wake)));
    // Children by the instance they are labelled as (stores::labelled),
    // and this process's writes of them not yet seen (stores::unseen).
    let indexes = ChildIndexes::default();
    let fleet = FleetCaches::reflect(scope, &claims, &indexes);
    let local = LocalCaches::reflect(scope, &indexes);
    split(fleet, local, claims, indexes)
}

/// The caches of every object in scope, whatever the shard: the fleet budget
/// counts every instance's workload, a host is claimed once across the
/// fleet, an instance reports the gateway serving its class (which can be in
/// another namespace), and cluster-scoped kinds have no shard.
struct FleetCaches {
    instances: Reflected<KuraInstance>,
    gateways: Reflected<KuraGateway>,
    stateful_sets: Reflected<CachedStatefulSet, StatefulSet>,
    ingresses: Reflected<CachedIngress, Ingress>,
    ingress_classes: Reflected<IngressClass>,
    cluster_role_bindings: Reflected<PartialObjectMeta<ClusterRoleBinding>>,
    gateway_pods: Reflected<Pod>,
}

impl FleetCaches {
    fn reflect(scope: &Scope, claims: &Arc<Claims>, indexes: &ChildIndexes) -> FleetCaches {
        let instances = {
            let claims = claims.clone();
            reflect_observed(
                Watch::whole(scope.api::<KuraInstance>(), scope.watch_config()),
                compact_instance,
                move |store, event| claims.instance_event(store, event),
            )
        };
        let stateful_sets = reflect_into(
            Watch::whole(scope.api::<StatefulSet>(), scope.managed()),
            kura_core::cached_sts::compact,
            |cache, event| cache.apply_watcher_event(&cached::event(event, CachedStatefulSet::of)),
            indexed(indexes, ChildKind::StatefulSet),
        );
        let ingresses = {
            let claims = claims.clone();
            let mut index = indexed(indexes, ChildKind::Ingress);
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
        FleetCaches {
            instances,
            gateways: reflect(Watch::whole(
                scope.api::<KuraGateway>(),
                scope.watch_config(),
            )),
            stateful_sets,
            ingresses,
            ingress_classes: reflect(Watch::whole(
                Api::<IngressClass>::all(scope.client.clone()),
                scope.watch_config(),
            )),
            cluster_role_bindings: reflect(Watch::whole(
                Api::<PartialObjectMeta<ClusterRoleBinding>>::all(scope.client.clone()),
                scope.watch_config(),
            )),
            // Metadata and the PodScheduled condition only: what the gateway
            // reports (`Stores::gateway_trouble`).
            gateway_pods: reflect_trimmed(
                Watch::whole(scope.api::<Pod>(), scope.gateway_pods()),
                kura_core::gateway::pods::compact,
            ),
        }
    }
}

/// The caches of objects read only for an instance or a gateway of their
/// own namespace: shard-local (`Scope::shard_local`).
struct LocalCaches {
    services: Reflected<CachedMeta<Service>, PartialObjectMeta<Service>>,
    config_maps: Reflected<CachedMeta<ConfigMap>, PartialObjectMeta<ConfigMap>>,
    service_accounts: Reflected<CachedMeta<ServiceAccount>, PartialObjectMeta<ServiceAccount>>,
    pdbs: Reflected<CachedMeta<PodDisruptionBudget>, PartialObjectMeta<PodDisruptionBudget>>,
    network_policies: Reflected<CachedMeta<NetworkPolicy>, PartialObjectMeta<NetworkPolicy>>,
    /// A gateway's own objects, read for it only (in its namespace's shard).
    deployments: Reflected<PartialObjectMeta<Deployment>>,
    role_bindings: Reflected<PartialObjectMeta<RoleBinding>>,
}

impl LocalCaches {
    fn reflect(scope: &Scope, indexes: &ChildIndexes) -> LocalCaches {
        LocalCaches {
            services: reflect_child(scope, indexes, ChildKind::Service),
            config_maps: reflect_child(scope, indexes, ChildKind::ConfigMap),
            service_accounts: reflect_child(scope, indexes, ChildKind::ServiceAccount),
            pdbs: reflect_child(scope, indexes, ChildKind::PodDisruptionBudget),
            network_policies: reflect_child(scope, indexes, ChildKind::NetworkPolicy),
            deployments: reflect(
                scope.shard_local::<PartialObjectMeta<Deployment>>(scope.managed()),
            ),
            role_bindings: reflect(
                scope.shard_local::<PartialObjectMeta<RoleBinding>>(scope.managed()),
            ),
        }
    }
}

/// The caches into the instance controller's `Stores` and streams, and the
/// gateway controller's copies of the streams both follow.
fn split(
    fleet: FleetCaches,
    local: LocalCaches,
    claims: Arc<Claims>,
    indexes: ChildIndexes,
) -> (Streams, GatewayStreams) {
    let ChildIndexes { labelled, unseen } = indexes;
    let FleetCaches {
        instances: (instances_store, instances),
        gateways: (gateways_store, gateways),
        stateful_sets: (sts_store, stateful_sets),
        ingresses: (ing_store, ingresses),
        ingress_classes: (class_store, ingress_classes),
        cluster_role_bindings: (crb, cluster_role_bindings),
        gateway_pods: (pod_store, pods),
    } = fleet;
    let LocalCaches {
        services: (svc, services),
        config_maps: (cm, config_maps),
        service_accounts: (sa, service_accounts),
        pdbs: (pdb, pdbs),
        network_policies: (np, network_policies),
        deployments: (dep, deployments),
        role_bindings: (rb, role_bindings),
    } = local;
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
            unseen,
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

/// Every reflector has listed once (what `/readyz` waits for).
pub async fn caches_synced(stores: &Stores) {
    stores.synced().await
}

/// Drive the streams no controller consumes, so their caches fill.
pub async fn drain<S: Stream + Unpin>(stream: S) {
    stream.for_each(|_| async {}).await
}
