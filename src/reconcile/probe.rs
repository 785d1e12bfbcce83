//! `probe`: is the applied revision active? The workload must be available and
//! every ingress must have an address. When it is not, the reason names the object
//! and the cause (INCIDENTS.md #1: "class X has no controller", not a timeout).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use super::stores::Stores;
use crate::render::Desired;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activation {
    Active {
        endpoint: String,
    },
    Waiting {
        reason: &'static str,
        message: String,
    },
}

/// One rendered ingress with what the caches know about it and its class.
pub struct IngressFacts {
    pub name: String,
    pub host: String,
    pub class_name: String,
    pub live: Option<Arc<Ingress>>,
    pub class: Option<Arc<IngressClass>>,
}

pub fn gather(desired: &Desired, stores: &Stores) -> (Option<Arc<StatefulSet>>, Vec<IngressFacts>) {
    let mut sts = None;
    let mut ingresses = Vec::new();
    for o in &desired.objects {
        match o.id.kind.as_str() {
            "StatefulSet" => sts = stores.stateful_set(&o.id),
            "Ingress" => {
                let class_name = o.body["spec"]["ingressClassName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                ingresses.push(IngressFacts {
                    name: o.id.name.clone(),
                    host: o.body["spec"]["rules"][0]["host"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    class: stores.ingress_class(&class_name),
                    class_name,
                    live: stores.ingress(&o.id),
                });
            }
            _ => {}
        }
    }
    (sts, ingresses)
}

pub fn activation(
    desired: &Desired,
    sts: Option<&StatefulSet>,
    ingresses: &[IngressFacts],
) -> Activation {
    let waiting = |reason, message: String| Activation::Waiting { reason, message };
    let Some(sts) = sts else {
        return waiting("WorkloadMissing", "StatefulSet does not exist yet".into());
    };
    let name = sts.metadata.name.clone().unwrap_or_default();
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = sts.status.clone().unwrap_or_default();
    if status.observed_generation.unwrap_or(0) < sts.metadata.generation.unwrap_or(0) {
        return waiting(
            "WorkloadProgressing",
            format!("StatefulSet {name}: the controller has not observed the latest spec yet"),
        );
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < want || available < want {
        return waiting(
            "WorkloadUnavailable",
            format!(
                "StatefulSet {name}: {available}/{want} replicas available, {updated}/{want} updated to image {}",
                desired.image
            ),
        );
    }
    let mut endpoint = None;
    for ing in ingresses {
        let has_address = ing
            .live
            .as_ref()
            .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
            .is_some_and(|lb| lb.iter().any(|a| a.ip.is_some() || a.hostname.is_some()));
        if !has_address {
            let cause = match &ing.class {
                None => format!(
                    "ingress class {} does not exist (no controller serves it)",
                    ing.class_name
                ),
                Some(class) => format!(
                    "ingress class {} (controller {}) has not given it an address: is that controller running?",
                    ing.class_name,
                    class
                        .spec
                        .as_ref()
                        .and_then(|s| s.controller.clone())
                        .unwrap_or_default()
                ),
            };
            return waiting(
                "IngressNoAddress",
                format!("ingress {} has no address; {cause}", ing.name),
            );
        }
        endpoint.get_or_insert_with(|| format!("http://{}/", ing.host));
    }
    Activation::Active {
        endpoint: endpoint.unwrap_or_default(),
    }
}
