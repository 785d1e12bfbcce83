//! `KuraGateway`: a dedicated per-account ingress gateway (an ingress controller
//! Deployment, its Service and its IngressClass), rendered by the instance
//! controller when an instance resolves to a dedicated gateway. One made by
//! hand is served too, but never collected by the operator.
//!
//! A gateway serves the IngressClass `kura-gw.<namespace>.<name>`, so that no
//! gateway can name another namespace's class. Admission checks what it can
//! (the namespace is not visible to CRD validation rules); the gateway
//! controller checks the rest and reports it (condition `Valid`, an Event).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, ConflictStatus, InventoryEntry, RetryStatus};

// Each printcolumn repeats `type_`; clippy reads the derive's arguments as attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kura.dev",
    version = "v1alpha1",
    kind = "KuraGateway",
    namespaced,
    status = "KuraGatewayStatus",
    shortname = "kgw",
    category = "kura",
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.ingressClassName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new("self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name: must be a DNS-1035 label of at most 63 characters: it names the gateway's Service"),
    validation = Rule::new("self.spec.ingressClassName.startsWith('kura-gw.') && self.spec.ingressClassName.endsWith('.' + self.metadata.name)").message("spec.ingressClassName: must be kura-gw.<namespace>.<metadata.name>: a gateway serves the class of its own namespace and name"),
)]
#[serde(rename_all = "camelCase")]
pub struct KuraGatewaySpec {
    #[schemars(length(min = 1, max = 40), regex(pattern = super::instance::DNS_LABEL))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("account is immutable"))]
    pub account: String,
    #[schemars(length(min = 1, max = 32), regex(pattern = super::instance::DNS_LABEL))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("region is immutable"))]
    pub region: String,
    /// The IngressClass this gateway serves (cluster-scoped, created by the
    /// gateway): `kura-gw.<namespace>.<metadata.name>`, nothing else.
    #[schemars(length(min = 1, max = 253), regex(pattern = super::instance::DNS_SUBDOMAIN))]
    pub ingress_class_name: String,
    /// The ingress controller implementation name written to `IngressClass.spec.controller`.
    #[schemars(length(min = 1, max = 253))]
    pub controller: String,
    /// Bind :80 and :443 on the node (hostPort) as well as the LoadBalancer
    /// Service: for clusters where no load balancer gives the Service an
    /// address (bare metal). One such pod per node: a second one, or the
    /// node's own ingress controller, holds the ports, and the pod cannot
    /// schedule: the gateway then reports `PodUnschedulable`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_ports: bool,
    #[schemars(length(min = 1, max = 255))]
    pub image: String,
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 8))]
    pub replicas: i32,
}

fn one() -> i32 {
    1
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KuraGatewayStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Content hash of the children the current spec renders, last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<String>,
    /// Every child of the applied revision, with its hash and the fingerprint
    /// of the fields the operator owns (drift detection).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// Failed attempts of the same inputs (kept in status so a restarted
    /// operator resumes the same backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStatus>,
    /// Fields the gateway renders being taken by another manager (an
    /// autoscaler, `kubectl scale`), repeatedly: the take-backs of the
    /// current window, as an instance counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<ConflictStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
