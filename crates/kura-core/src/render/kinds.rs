//! The `spec`s of the rendered kinds. Fields are declared in the byte order of
//! their JSON names: see [`super::manifest`] for why.

use serde::Serialize;

use super::manifest::{Constant, Labels, TemplateMeta};
use crate::api::ResourceAmounts;

/// The two large specs are boxed, so that every manifest is cheap to move.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum Spec {
    StatefulSet(Box<StatefulSetSpec>),
    Service(ServiceSpec),
    PodDisruptionBudget(BudgetSpec),
    NetworkPolicy(NetworkPolicySpec),
    Ingress(IngressSpec),
    KuraGateway(GatewaySpec),
    IngressClass(IngressClassSpec),
    Deployment(Box<DeploymentSpec>),
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    pub match_labels: Labels,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetSpec {
    pub persistent_volume_claim_retention_policy: Constant,
    pub pod_management_policy: &'static str,
    pub replicas: i32,
    pub selector: Selector,
    pub service_name: String,
    pub template: PodTemplate,
    pub update_strategy: Constant,
    pub volume_claim_templates: Vec<ClaimTemplate>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct PodTemplate {
    pub metadata: TemplateMeta,
    pub spec: PodSpec,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub automount_service_account_token: bool,
    pub containers: Vec<Container>,
    pub enable_service_links: bool,
    pub security_context: Constant,
    pub service_account_name: String,
    pub volumes: Vec<ConfigMapVolume>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapVolume {
    pub config_map: NameRef,
    pub name: &'static str,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NameRef {
    pub name: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub env: Vec<EnvVar>,
    pub image: String,
    pub liveness_probe: Constant,
    pub name: &'static str,
    pub ports: Constant,
    pub readiness_probe: Constant,
    pub resources: Resources,
    pub security_context: Constant,
    pub volume_mounts: Constant,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    pub secret_key_ref: SecretKeySelector,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct SecretKeySelector {
    pub key: String,
    pub name: String,
}

/// `ResourceAmounts` (cpu, memory) is already in canonical order.
#[derive(Serialize, Clone, Debug, PartialEq, Default)]
pub struct Resources {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceAmounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceAmounts>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ClaimTemplate {
    pub metadata: TemplateMeta,
    pub spec: ClaimSpec,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSpec {
    pub access_modes: Constant,
    pub resources: StorageResources,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct StorageResources {
    pub requests: StorageRequest,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct StorageRequest {
    pub storage: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ServiceSpec {
    pub ports: Constant,
    pub selector: Labels,
    #[serde(rename = "type")]
    pub service_type: &'static str,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSpec {
    pub max_unavailable: i32,
    pub selector: Selector,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    pub ingress: Constant,
    pub pod_selector: Selector,
    pub policy_types: Constant,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    pub ingress_class_name: String,
    pub rules: Vec<IngressRule>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct IngressRule {
    pub host: String,
    pub http: HttpRule,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct HttpRule {
    pub paths: Vec<HttpPath>,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpPath {
    pub backend: Backend,
    pub path: &'static str,
    pub path_type: &'static str,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Backend {
    pub service: ServiceBackend,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct ServiceBackend {
    pub name: String,
    pub port: Constant,
}

/// The spec of a dedicated `KuraGateway` as an instance renders it; the API type
/// (`crate::api::KuraGatewaySpec`) reads it back.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    pub account: String,
    pub controller: String,
    /// Absent unless set: an unchanged configuration renders what it did.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_ports: bool,
    pub image: String,
    pub ingress_class_name: String,
    pub region: String,
    pub replicas: i32,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct IngressClassSpec {
    pub controller: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct DeploymentSpec {
    pub replicas: i32,
    pub selector: Selector,
    pub template: GatewayPodTemplate,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct GatewayPodTemplate {
    pub metadata: TemplateMeta,
    pub spec: GatewayPodSpec,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayPodSpec {
    pub automount_service_account_token: bool,
    pub containers: Vec<GatewayContainer>,
    pub security_context: Constant,
    pub service_account_name: String,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayContainer {
    pub args: Vec<String>,
    pub image: String,
    pub name: &'static str,
    pub ports: Constant,
    pub security_context: Constant,
}
