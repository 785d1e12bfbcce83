//! Reflector stores of everything a reconcile observes: the decision is rebuilt
//! from these caches of cluster state on every pass, and a converged pass reads
//! nothing from the apiserver.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{KuraGateway, KuraInstance};
use crate::render::ObjectId;

#[derive(Clone)]
pub struct Stores {
    pub instances: Store<KuraInstance>,
    pub gateways: Store<KuraGateway>,
    pub stateful_sets: Store<StatefulSet>,
    pub ingresses: Store<Ingress>,
    pub ingress_classes: Store<IngressClass>,
    pub services: Store<PartialObjectMeta<Service>>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    pub pod_disruption_budgets: Store<PartialObjectMeta<PodDisruptionBudget>>,
    pub network_policies: Store<PartialObjectMeta<NetworkPolicy>>,
    pub deployments: Store<PartialObjectMeta<Deployment>>,
}

fn key<K: kube::Resource<DynamicType = ()>>(id: &ObjectId) -> ObjectRef<K> {
    let r = ObjectRef::new(&id.name);
    match &id.namespace {
        Some(ns) => r.within(ns),
        None => r,
    }
}

impl Stores {
    /// Metadata of any object kind the operator renders, from its cache.
    pub fn meta(&self, id: &ObjectId) -> Option<ObjectMeta> {
        let meta = match (id.api_version.as_str(), id.kind.as_str()) {
            ("apps/v1", "StatefulSet") => {
                self.stateful_sets.get(&key(id)).map(|o| o.metadata.clone())
            }
            ("apps/v1", "Deployment") => self.deployments.get(&key(id)).map(|o| o.metadata.clone()),
            ("networking.k8s.io/v1", "Ingress") => {
                self.ingresses.get(&key(id)).map(|o| o.metadata.clone())
            }
            ("networking.k8s.io/v1", "IngressClass") => self
                .ingress_classes
                .get(&key(id))
                .map(|o| o.metadata.clone()),
            ("networking.k8s.io/v1", "NetworkPolicy") => self
                .network_policies
                .get(&key(id))
                .map(|o| o.metadata.clone()),
            ("policy/v1", "PodDisruptionBudget") => self
                .pod_disruption_budgets
                .get(&key(id))
                .map(|o| o.metadata.clone()),
            ("v1", "Service") => self.services.get(&key(id)).map(|o| o.metadata.clone()),
            ("v1", "ConfigMap") => self.config_maps.get(&key(id)).map(|o| o.metadata.clone()),
            ("v1", "ServiceAccount") => self
                .service_accounts
                .get(&key(id))
                .map(|o| o.metadata.clone()),
            ("kura.dev/v1alpha1", "KuraGateway") => {
                self.gateways.get(&key(id)).map(|o| o.metadata.clone())
            }
            _ => None,
        };
        // An object being deleted is as good as missing: it must be re-created.
        meta.filter(|m| m.deletion_timestamp.is_none())
    }

    pub fn stateful_set(&self, id: &ObjectId) -> Option<std::sync::Arc<StatefulSet>> {
        self.stateful_sets.get(&key(id))
    }

    pub fn ingress(&self, id: &ObjectId) -> Option<std::sync::Arc<Ingress>> {
        self.ingresses.get(&key(id))
    }

    pub fn ingress_class(&self, name: &str) -> Option<std::sync::Arc<IngressClass>> {
        self.ingress_classes.get(&ObjectRef::new(name))
    }
}
