//! One function per child kind of an instance. Each returns a complete manifest.
//!
//! The output is typed ([`super::manifest`]): strings are copied from the instance,
//! and the parts that never vary are [`Constant`]s serialised once per process.

use super::instance_labels;
use super::kinds::*;
use super::manifest::{
    ConfigData, Constant, Content, Labels, Manifest, ObjectMeta, OwnerReference, TemplateMeta,
    constants,
};
use crate::api::GatewayMode;
use crate::config::OperatorConfig;
use crate::keys::*;
use crate::kind::ChildKind;
use crate::names;
use crate::validate::ValidatedInstance;

constants! {
    CONTAINER_PORTS = [{ "name": "http", "containerPort": CACHE_PORT, "protocol": "TCP" }],
    READINESS_PROBE = { "httpGet": { "path": "/up", "port": "http" }, "periodSeconds": 5 },
    LIVENESS_PROBE = { "httpGet": { "path": "/up", "port": "http" }, "periodSeconds": 10, "failureThreshold": 6 },
    CONTAINER_SECURITY = {
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
    },
    VOLUME_MOUNTS = [
        { "name": "data", "mountPath": "/var/lib/kura" },
        { "name": "config", "mountPath": "/etc/kura", "readOnly": true },
    ],
    POD_SECURITY = {
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": { "type": "RuntimeDefault" },
    },
    // Claims are retained on scale-down and deletion, so a rollout never loses data.
    CLAIM_RETENTION = { "whenDeleted": "Retain", "whenScaled": "Retain" },
    ROLLING_UPDATE = { "type": "RollingUpdate" },
    READ_WRITE_ONCE = ["ReadWriteOnce"],
    SERVICE_PORTS = [{ "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" }],
    CACHE_PORT_ONLY = [{ "ports": [{ "port": CACHE_PORT, "protocol": "TCP" }] }],
    INGRESS_ONLY = ["Ingress"],
    HTTP_PORT = { "name": "http" },
}

fn manifest(kind: ChildKind, metadata: ObjectMeta, content: Content) -> Manifest {
    Manifest {
        kind,
        metadata,
        content,
    }
}

fn metadata(instance: &ValidatedInstance, name: &str) -> ObjectMeta {
    ObjectMeta {
        annotations: None,
        labels: instance_labels(instance),
        name: name.to_string(),
        namespace: Some(instance.namespace.clone()),
        // An instance read from a file (offline `render`) has no uid yet: no owner.
        owner_references: if instance.uid.is_empty() {
            Vec::new()
        } else {
            vec![owner_reference(instance)]
        },
    }
}

/// Every child is owned by its instance, so deleting the instance lets the
/// garbage collector remove the children (and nothing else).
fn owner_reference(instance: &ValidatedInstance) -> OwnerReference {
    OwnerReference {
        api_version: "kura.dev/v1alpha1",
        block_owner_deletion: true,
        controller: true,
        kind: "KuraInstance",
        name: instance.name.clone(),
        uid: instance.uid.clone(),
    }
}

fn selector_labels(instance: &ValidatedInstance) -> Labels {
    Labels::from([
        (LABEL_NAME, "kura".to_string()),
        (LABEL_INSTANCE, instance.name.clone()),
    ])
}

fn selector(instance: &ValidatedInstance) -> Selector {
    Selector {
        match_labels: selector_labels(instance),
    }
}

fn config_map_name(instance: &ValidatedInstance) -> String {
    format!("{}-config", instance.name)
}

pub fn service_account(instance: &ValidatedInstance) -> Manifest {
    manifest(
        ChildKind::ServiceAccount,
        metadata(instance, &instance.name),
        Content::ServiceAccount {
            automount_service_account_token: false,
        },
    )
}

/// The cache's own configuration file, `kura.json`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct KuraJson<'a> {
    account: &'a str,
    data_dir: &'static str,
    hosts: Vec<&'a str>,
    listen: String,
    region: &'a str,
}

pub fn config_map_data(instance: &ValidatedInstance) -> ConfigData {
    let config = KuraJson {
        account: &instance.account,
        data_dir: "/var/lib/kura",
        hosts: std::iter::once(&instance.host)
            .chain(&instance.aliases)
            .map(String::as_str)
            .collect(),
        listen: format!(":{CACHE_PORT}"),
        region: &instance.region,
    };
    ConfigData {
        // Canonical, like every manifest: the field order above is byte order.
        kura_json: serde_json::to_string(&config).expect("kura.json serialises"),
    }
}

pub fn config_map(instance: &ValidatedInstance, data: ConfigData) -> Manifest {
    manifest(
        ChildKind::ConfigMap,
        metadata(instance, &config_map_name(instance)),
        Content::ConfigMap { data },
    )
}

fn env(instance: &ValidatedInstance) -> Vec<EnvVar> {
    let plain = |name: &str, value: &str| EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        value_from: None,
    };
    let mut env = vec![
        plain("KURA_ACCOUNT", &instance.account),
        plain("KURA_REGION", &instance.region),
        plain("KURA_CONFIG", "/etc/kura/kura.json"),
    ];
    env.extend(instance.env.iter().map(|var| match &var.secret_key_ref {
        Some(r) => EnvVar {
            name: var.name.clone(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: SecretKeySelector {
                    key: r.key.clone(),
                    name: r.name.clone(),
                },
            }),
        },
        None => plain(&var.name, var.value.as_deref().unwrap_or_default()),
    }));
    env
}

/// The pod template, without the pod-template-hash annotation (which is derived
/// from it: see [`annotate_pod_template`]).
pub fn pod_template(instance: &ValidatedInstance) -> PodTemplate {
    let container = Container {
        env: env(instance),
        image: instance.image.clone(),
        liveness_probe: Constant::of(&LIVENESS_PROBE),
        name: KURA_CONTAINER,
        ports: Constant::of(&CONTAINER_PORTS),
        readiness_probe: Constant::of(&READINESS_PROBE),
        resources: Resources {
            limits: instance.resources.limits.clone(),
            requests: instance.resources.requests.clone(),
        },
        security_context: Constant::of(&CONTAINER_SECURITY),
        volume_mounts: Constant::of(&VOLUME_MOUNTS),
    };
    PodTemplate {
        metadata: TemplateMeta {
            annotations: None,
            labels: instance_labels(instance),
            name: None,
        },
        spec: PodSpec {
            automount_service_account_token: false,
            containers: vec![container],
            enable_service_links: false,
            security_context: Constant::of(&POD_SECURITY),
            service_account_name: instance.name.clone(),
            volumes: vec![ConfigMapVolume {
                config_map: NameRef {
                    name: config_map_name(instance),
                },
                name: "config",
            }],
        },
    }
}

/// Stamp the hash of the pod-relevant inputs into the template: a change of it is
/// what rolls the pods, and nothing else does (docs/incidents.md #4).
pub fn annotate_pod_template(template: &mut PodTemplate, pod_template_hash: &str) {
    template.metadata.annotations =
        Some([(ANNOTATION_POD_TEMPLATE_HASH, pod_template_hash.to_string())].into());
}

/// A StatefulSet: each replica gets a stable identity and its own cache volume
/// from the claim template; claims are retained on scale-down and deletion, so a
/// rollout can never lose data.
pub fn stateful_set(instance: &ValidatedInstance, template: PodTemplate) -> Manifest {
    let claim_template = ClaimTemplate {
        metadata: TemplateMeta {
            annotations: None,
            labels: selector_labels(instance),
            name: Some("data"),
        },
        spec: ClaimSpec {
            access_modes: Constant::of(&READ_WRITE_ONCE),
            resources: StorageResources {
                requests: StorageRequest {
                    storage: instance.storage_size.clone(),
                },
            },
            storage_class_name: instance.storage_class.clone(),
        },
    };
    let spec = StatefulSetSpec {
        persistent_volume_claim_retention_policy: Constant::of(&CLAIM_RETENTION),
        pod_management_policy: "Parallel",
        replicas: instance.replicas,
        selector: selector(instance),
        service_name: instance.name.clone(),
        template,
        update_strategy: Constant::of(&ROLLING_UPDATE),
        volume_claim_templates: vec![claim_template],
    };
    manifest(
        ChildKind::StatefulSet,
        metadata(instance, &instance.name),
        Content::Spec(Spec::StatefulSet(Box::new(spec))),
    )
}

pub fn service(instance: &ValidatedInstance) -> Manifest {
    let spec = ServiceSpec {
        ports: Constant::of(&SERVICE_PORTS),
        selector: selector_labels(instance),
        service_type: "ClusterIP",
    };
    manifest(
        ChildKind::Service,
        metadata(instance, &instance.name),
        Content::Spec(Spec::Service(spec)),
    )
}

pub fn pod_disruption_budget(instance: &ValidatedInstance) -> Manifest {
    let spec = BudgetSpec {
        max_unavailable: 1,
        selector: selector(instance),
    };
    manifest(
        ChildKind::PodDisruptionBudget,
        metadata(instance, &instance.name),
        Content::Spec(Spec::PodDisruptionBudget(spec)),
    )
}

/// Only the cache port is reachable; everything else to the pods is denied.
pub fn network_policy(instance: &ValidatedInstance) -> Manifest {
    let spec = NetworkPolicySpec {
        ingress: Constant::of(&CACHE_PORT_ONLY),
        pod_selector: selector(instance),
        policy_types: Constant::of(&INGRESS_ONLY),
    };
    manifest(
        ChildKind::NetworkPolicy,
        metadata(instance, &instance.name),
        Content::Spec(Spec::NetworkPolicy(spec)),
    )
}

/// One Ingress per host, all with the resolved ingress class.
pub fn ingresses(instance: &ValidatedInstance) -> impl Iterator<Item = Manifest> + '_ {
    std::iter::once(&instance.host)
        .chain(instance.aliases.iter())
        .enumerate()
        .map(|(i, host)| {
            let path = HttpPath {
                backend: Backend {
                    service: ServiceBackend {
                        name: instance.name.clone(),
                        port: Constant::of(&HTTP_PORT),
                    },
                },
                path: "/",
                path_type: "Prefix",
            };
            let spec = IngressSpec {
                ingress_class_name: instance.gateway.ingress_class_name.clone(),
                rules: vec![IngressRule {
                    host: host.clone(),
                    http: HttpRule { paths: vec![path] },
                }],
            };
            manifest(
                ChildKind::Ingress,
                metadata(instance, &names::ingress(&instance.name, i, host)),
                Content::Spec(Spec::Ingress(spec)),
            )
        })
}

/// The dedicated gateway, when the instance resolved to one. It is shared by every
/// instance of the same account and region in the namespace, so it carries no
/// owner reference to any one of them: it is deleted when no instance's desired
/// state references it any more (see reconcile::prune and the gateway controller).
pub fn gateway(instance: &ValidatedInstance, config: &OperatorConfig) -> Option<Manifest> {
    if instance.gateway.mode != GatewayMode::Dedicated {
        return None;
    }
    let name = instance.gateway.gateway_name.as_ref()?;
    let metadata = ObjectMeta {
        annotations: None,
        labels: Labels::from([
            (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_string()),
            (LABEL_NAME, "kura-gateway".to_string()),
            (LABEL_ACCOUNT, instance.account.clone()),
            (LABEL_REGION, instance.region.clone()),
        ]),
        name: name.clone(),
        namespace: Some(instance.namespace.clone()),
        owner_references: Vec::new(),
    };
    let spec = GatewaySpec {
        account: instance.account.clone(),
        controller: config.gateway.controller.clone(),
        host_ports: config.gateway.host_ports,
        image: config.gateway.image.clone(),
        ingress_class_name: instance.gateway.ingress_class_name.clone(),
        region: instance.region.clone(),
        replicas: config.gateway.replicas,
    };
    Some(manifest(
        ChildKind::KuraGateway,
        metadata,
        Content::Spec(Spec::KuraGateway(spec)),
    ))
}
