//! The live state `diff` decides from: the reflector stores a reconcile reads
//! (`stores::Stores`), filled from one list per kind instead of
//! watches and trimmed as the operator trims its caches, so that `observe`,
//! `storage::pin` and `plan` see what they see in the operator. Besides, what
//! the caches drop and a preview reports: each StatefulSet's pod template hash
//! (will its pods restart?) and, for `--show-diff`, each object's fields owned
//! by the operator. Pure: the lists are read by `read`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::DynamicObject;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::{fields, show};
use crate::claims::Claims;
use crate::stores::Stores;
use crate::stores::cached::{CachedIngress, CachedMeta, CachedStatefulSet};
use kura_core::api::{KuraGateway, KuraInstance};
use kura_core::compact::{compact_child, compact_instance, compact_managed_fields};
use kura_core::keys::ANNOTATION_POD_TEMPLATE_HASH;
use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

pub struct Live {
    pub stores: Stores,
    /// `kura.dev/pod-template-hash` of each live StatefulSet's pod template.
    pub pod_template_hashes: BTreeMap<ObjectId, String>,
    /// The YAML of each live object's fields owned by the operator (kept for
    /// `--show-diff` only).
    pub owned: BTreeMap<ObjectId, String>,
}

/// Fills a [`Live`] one listed object at a time.
pub struct LiveBuilder {
    keep_owned: bool,
    live: Live,
    writers: Writers,
}

struct Writers {
    instances: Writer<KuraInstance>,
    gateways: Writer<KuraGateway>,
    stateful_sets: Writer<CachedStatefulSet>,
    ingresses: Writer<CachedIngress>,
    ingress_classes: Writer<IngressClass>,
    services: Writer<CachedMeta<Service>>,
    config_maps: Writer<CachedMeta<ConfigMap>>,
    service_accounts: Writer<CachedMeta<ServiceAccount>>,
    pod_disruption_budgets: Writer<CachedMeta<PodDisruptionBudget>>,
    network_policies: Writer<CachedMeta<NetworkPolicy>>,
    deployments: Writer<PartialObjectMeta<Deployment>>,
    role_bindings: Writer<PartialObjectMeta<RoleBinding>>,
    cluster_role_bindings: Writer<PartialObjectMeta<ClusterRoleBinding>>,
}

impl LiveBuilder {
    /// `keep_owned`: keep each object's operator-owned fields (`--show-diff`).
    pub fn new(keep_owned: bool) -> LiveBuilder {
        let (instances, instances_w) = reflector::store::<KuraInstance>();
        let (gateways, gateways_w) = reflector::store();
        let (stateful_sets, stateful_sets_w) = reflector::store();
        let (ingresses, ingresses_w) = reflector::store();
        let (ingress_classes, ingress_classes_w) = reflector::store();
        let (services, services_w) = reflector::store();
        let (config_maps, config_maps_w) = reflector::store();
        let (service_accounts, service_accounts_w) = reflector::store();
        let (pdbs, pdbs_w) = reflector::store();
        let (network_policies, network_policies_w) = reflector::store();
        let (deployments, deployments_w) = reflector::store();
        let (role_bindings, role_bindings_w) = reflector::store();
        let (cluster_role_bindings, cluster_role_bindings_w) = reflector::store();
        // The preview lists no pods: what the scheduler says is activation's, not a change.
        let (gateway_pods, _) = reflector::store();
        LiveBuilder {
            keep_owned,
            live: Live {
                stores: Stores {
                    instances,
                    gateways,
                    stateful_sets,
                    ingresses,
                    ingress_classes,
                    services,
                    config_maps,
                    service_accounts,
                    pod_disruption_budgets: pdbs,
                    network_policies,
                    deployments,
                    role_bindings,
                    cluster_role_bindings,
                    gateway_pods,
                    claims: std::sync::Arc::new(Claims::new(
                        kura_core::claims::index::DEFAULT_RESERVATION,
                        None,
                    )),
                    labelled: Default::default(),
                    // Never filled: the names `diff` shows are read.
                    foreign: Default::default(),
                    unseen: Default::default(),
                },
                pod_template_hashes: BTreeMap::new(),
                owned: BTreeMap::new(),
            },
            writers: Writers {
                instances: instances_w,
                gateways: gateways_w,
                stateful_sets: stateful_sets_w,
                ingresses: ingresses_w,
                ingress_classes: ingress_classes_w,
                services: services_w,
                config_maps: config_maps_w,
                service_accounts: service_accounts_w,
                pod_disruption_budgets: pdbs_w,
                network_policies: network_policies_w,
                deployments: deployments_w,
                role_bindings: role_bindings_w,
                cluster_role_bindings: cluster_role_bindings_w,
            },
        }
    }

    /// One listed object of `kind`.
    pub fn add(&mut self, kind: ChildKind, object: DynamicObject) -> Result<(), serde_json::Error> {
        let id = ObjectId {
            kind,
            namespace: object
                .metadata
                .namespace
                .clone()
                .filter(|_| kind.namespaced()),
            name: object.metadata.name.clone().unwrap_or_default(),
        };
        let mut value = into_value(kind, object)?;
        if self.keep_owned
            && let Some(owned) = fields::owned_by_operator(kind, &value)
        {
            // As YAML text: a tree of JSON values is many times its size.
            self.live.owned.insert(id.clone(), show::yaml(&owned));
        }
        let w = &mut self.writers;
        let meta =
            |value: &mut Value| serde_json::from_value::<ObjectMeta>(value["metadata"].take());
        match kind {
            ChildKind::StatefulSet => {
                let mut sts: StatefulSet = serde_json::from_value(value)?;
                let hash = sts
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref()?.annotations.as_ref())
                    .and_then(|a| a.get(ANNOTATION_POD_TEMPLATE_HASH));
                if let Some(hash) = hash {
                    self.live.pod_template_hashes.insert(id, hash.clone());
                }
                kura_core::cached_sts::compact(&mut sts);
                w.stateful_sets
                    .apply_watcher_event(&Event::Apply(CachedStatefulSet::of(&sts)));
            }
            ChildKind::Ingress => {
                let mut ingress: Ingress = serde_json::from_value(value)?;
                compact_child(&mut ingress);
                w.ingresses
                    .apply_watcher_event(&Event::Apply(CachedIngress::of(&ingress)));
            }
            ChildKind::IngressClass => {
                put(&mut w.ingress_classes, serde_json::from_value(value)?, kind)
            }
            ChildKind::KuraGateway => put(&mut w.gateways, serde_json::from_value(value)?, kind),
            ChildKind::Service => put_child(&mut w.services, meta(&mut value)?),
            ChildKind::ConfigMap => put_child(&mut w.config_maps, meta(&mut value)?),
            ChildKind::ServiceAccount => put_child(&mut w.service_accounts, meta(&mut value)?),
            ChildKind::PodDisruptionBudget => {
                put_child(&mut w.pod_disruption_budgets, meta(&mut value)?)
            }
            ChildKind::NetworkPolicy => put_child(&mut w.network_policies, meta(&mut value)?),
            ChildKind::Deployment => put(&mut w.deployments, partial(meta(&mut value)?), kind),
            ChildKind::RoleBinding => put(&mut w.role_bindings, partial(meta(&mut value)?), kind),
            ChildKind::ClusterRoleBinding => put(
                &mut w.cluster_role_bindings,
                partial(meta(&mut value)?),
                kind,
            ),
        }
        Ok(())
    }

    /// The live state, with `instances` (those `diff` reads) in its store and
    /// the hosts they and the listed Ingresses hold indexed, as the
    /// operator's caches have them once synced.
    pub fn finish(mut self, instances: &[KuraInstance]) -> Live {
        for instance in instances {
            let mut instance = instance.clone();
            compact_instance(&mut instance);
            self.writers
                .instances
                .apply_watcher_event(&Event::Apply(instance));
        }
        let stores = &self.live.stores;
        stores
            .claims
            .instance_event(&stores.instances, &Event::InitDone);
        stores.claims.ingress_event(&Event::InitDone, || {
            crate::stores::cached::ingresses(&stores.ingresses)
        });
        stores.index_labels();
        self.live
    }
}

/// The object as one JSON value, its body moved rather than copied (a copy of
/// a page of StatefulSets as values was most of the memory `diff` used).
/// Items of a list carry no type of their own: it is the kind's.
fn into_value(kind: ChildKind, object: DynamicObject) -> Result<Value, serde_json::Error> {
    let mut value = object.data;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), kind.api_version().into());
        map.insert("kind".into(), kind.kind().into());
        map.insert("metadata".into(), serde_json::to_value(object.metadata)?);
    }
    Ok(value)
}

fn partial<K: Resource<DynamicType = ()>>(meta: ObjectMeta) -> PartialObjectMeta<K> {
    meta.into_request_partial()
}

/// A metadata-only child into its store, as the operator's reflectors keep
/// it (`controller::reflect::reflect_child`).
fn put_child<K: Resource<DynamicType = ()>>(writer: &mut Writer<CachedMeta<K>>, meta: ObjectMeta) {
    let mut object = partial::<K>(meta);
    compact_child(&mut object);
    writer.apply_watcher_event(&Event::Apply(CachedMeta::new(object.metadata)));
}

/// Into the store as the operator's reflectors keep `kind` (`controller::reflect`).
fn put<K>(writer: &mut Writer<K>, mut object: K, kind: ChildKind)
where
    K: Resource<DynamicType = ()> + Clone,
{
    match kind {
        ChildKind::KuraGateway
        | ChildKind::IngressClass
        | ChildKind::Deployment
        | ChildKind::RoleBinding
        | ChildKind::ClusterRoleBinding => compact_managed_fields(&mut object),
        _ => compact_child(&mut object),
    }
    writer.apply_watcher_event(&Event::Apply(object));
}
