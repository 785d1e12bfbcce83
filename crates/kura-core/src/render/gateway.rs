//! Children of a `KuraGateway`: its IngressClass, ingress controller Deployment
//! and Service, and the controller's ServiceAccount with the two bindings that
//! give it what Traefik reads (`GatewayRoles`). Pure, like the instance renderer.
//!
//! The class is named from the gateway's namespace and name, whatever the spec
//! says (the gateway controller reports a spec that names another), and
//! carries the gateway's uid: cluster-scoped, it can have no owner reference,
//! and the uid is what says whose it is. The ClusterRoleBinding is the same:
//! named as the class, carrying the uid, collected with it.

use super::Desired;
use super::kinds::*;
use super::manifest::{
    Binding, Constant, Content, Labels, Manifest, ObjectMeta, OwnerReference, TemplateMeta,
    constants,
};
use crate::api::KuraGateway;
use crate::keys::*;
use crate::kind::ChildKind;

constants! {
    CONTROLLER_PORTS = [
        { "name": "http", "containerPort": 8080, "protocol": "TCP" },
        { "name": "https", "containerPort": 8443, "protocol": "TCP" },
    ],
    // The same ports, also bound on the node (`spec.hostPorts`): the
    // scheduler places at most one such pod per node, and none beside another
    // holder of :80/:443 (a node's own ingress controller).
    CONTROLLER_HOST_PORTS = [
        { "containerPort": 8080, "hostPort": 80, "name": "http", "protocol": "TCP" },
        { "containerPort": 8443, "hostPort": 443, "name": "https", "protocol": "TCP" },
    ],
    CONTROLLER_SECURITY = {
        "allowPrivilegeEscalation": false,
        "capabilities": { "drop": ["ALL"] },
    },
    CONTROLLER_POD_SECURITY = {
        "runAsNonRoot": true,
        "runAsUser": 101,
        "seccompProfile": { "type": "RuntimeDefault" },
    },
    LOAD_BALANCER_PORTS = [
        { "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" },
        { "name": "https", "port": 443, "targetPort": "https", "protocol": "TCP" },
    ],
}

/// The ClusterRoles a gateway's ServiceAccount is bound to, both installed by
/// the chart (`--gateway-role`, `--gateway-cluster-role`). They name what the
/// operator's deployment provides, not the fleet: a flag, not configuration,
/// and never a gateway's spec (whoever may create a gateway would choose the
/// rights its pods get).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayRoles {
    /// Bound in the gateway's namespace (a RoleBinding): reading its
    /// Ingresses, Services, EndpointSlices and Secrets, writing Ingress status.
    pub namespaced: String,
    /// Bound cluster-wide (a ClusterRoleBinding): reading IngressClasses,
    /// which Traefik matches an Ingress's `ingressClassName` against, and
    /// Nodes, which its provider lists.
    pub cluster: String,
}

impl Default for GatewayRoles {
    fn default() -> Self {
        GatewayRoles {
            namespaced: "kura-operator-gateway".into(),
            cluster: "kura-operator-gateway-cluster".into(),
        }
    }
}

pub fn render_gateway(gw: &KuraGateway, roles: &GatewayRoles) -> Desired {
    let who = Identity::of(gw);
    Desired::from_objects(
        vec![
            ingress_class(gw, &who),
            service_account(&who),
            role_binding(&who, roles),
            cluster_role_binding(&who, roles),
            deployment(gw, &who),
            service(&who),
        ],
        String::new(),
        gw.spec.image.clone(),
    )
}

/// What every child of one gateway is named and labelled by.
struct Identity {
    name: String,
    namespace: String,
    uid: String,
    class_name: String,
    labels: Labels,
    /// The Deployment's pods, as its selector and the Service's name them.
    selector: Labels,
}

impl Identity {
    fn of(gw: &KuraGateway) -> Identity {
        let name = gw.metadata.name.clone().unwrap_or_default();
        let namespace = gw.metadata.namespace.clone().unwrap_or_default();
        let spec = &gw.spec;
        Identity {
            uid: gw.metadata.uid.clone().unwrap_or_default(),
            class_name: crate::names::gateway_ingress_class(&namespace, &name),
            labels: Labels::from([
                (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_string()),
                (LABEL_NAME, "kura-gateway".to_string()),
                (LABEL_GATEWAY, name.clone()),
                (LABEL_ACCOUNT, spec.account.clone()),
                (LABEL_REGION, spec.region.clone()),
            ]),
            selector: Labels::from([
                (LABEL_NAME, "kura-gateway".to_string()),
                (LABEL_GATEWAY, name.clone()),
            ]),
            name,
            namespace,
        }
    }

    /// The metadata of a namespaced child: owned by the gateway.
    fn owned(&self) -> ObjectMeta {
        ObjectMeta {
            annotations: None,
            labels: self.labels.clone(),
            name: self.name.clone(),
            namespace: Some(self.namespace.clone()),
            owner_references: vec![OwnerReference {
                api_version: "kura.dev/v1alpha1",
                block_owner_deletion: true,
                controller: true,
                kind: "KuraGateway",
                name: self.name.clone(),
                uid: self.uid.clone(),
            }],
        }
    }

    /// The metadata of a cluster-scoped child: no owner reference is
    /// possible. The uid says whose it is; the gateway controller collects it
    /// once no gateway has that uid.
    fn cluster_scoped(&self) -> ObjectMeta {
        let mut labels = self.labels.clone();
        labels.insert(LABEL_GATEWAY_NAMESPACE, self.namespace.clone());
        ObjectMeta {
            annotations: Some([(ANNOTATION_GATEWAY_UID, self.uid.clone())].into()),
            labels,
            name: self.class_name.clone(),
            namespace: None,
            owner_references: Vec::new(),
        }
    }

    fn binding(&self, cluster_role: &str) -> Content {
        Content::Binding(Binding {
            cluster_role: cluster_role.to_string(),
            service_account: self.name.clone(),
            namespace: self.namespace.clone(),
        })
    }
}

fn ingress_class(gw: &KuraGateway, who: &Identity) -> Manifest {
    Manifest {
        kind: ChildKind::IngressClass,
        metadata: who.cluster_scoped(),
        content: Content::Spec(Spec::IngressClass(IngressClassSpec {
            controller: gw.spec.controller.clone(),
        })),
    }
}

/// The controller's own identity: the namespace's `default` ServiceAccount
/// is the tenant's, and gets nothing from the operator.
fn service_account(who: &Identity) -> Manifest {
    Manifest {
        kind: ChildKind::ServiceAccount,
        metadata: who.owned(),
        // The pod asks for its token (`automountServiceAccountToken: true`
        // in its spec); nothing else running as this account gets one.
        content: Content::ServiceAccount {
            automount_service_account_token: false,
        },
    }
}

/// Namespaced rights, in the gateway's namespace only: Traefik's Kubernetes
/// Ingress provider watches that namespace only (`controller_args`).
fn role_binding(who: &Identity, roles: &GatewayRoles) -> Manifest {
    Manifest {
        kind: ChildKind::RoleBinding,
        metadata: who.owned(),
        content: who.binding(&roles.namespaced),
    }
}

/// Cluster-scoped rights (IngressClasses, Nodes: read only).
fn cluster_role_binding(who: &Identity, roles: &GatewayRoles) -> Manifest {
    Manifest {
        kind: ChildKind::ClusterRoleBinding,
        metadata: who.cluster_scoped(),
        content: who.binding(&roles.cluster),
    }
}

/// Traefik v3's command line (the node's ingress controller, built from its
/// Go module in hack/control-plane/traefik): its Kubernetes Ingress provider
/// serves this gateway's class only, in the gateway's namespace only, and
/// publishes the LoadBalancer Service's address in the Ingresses' status.
/// It serves IngressClasses whose controller is `traefik.io/ingress-controller`:
/// `gateway.controller` in the operator configuration.
fn controller_args(who: &Identity) -> Vec<String> {
    let (class, namespace, name) = (&who.class_name, &who.namespace, &who.name);
    vec![
        "--global.checknewversion=false".to_string(),
        "--global.sendanonymoususage=false".to_string(),
        "--entrypoints.web.address=:8080".to_string(),
        "--entrypoints.websecure.address=:8443".to_string(),
        "--providers.kubernetesingress=true".to_string(),
        format!("--providers.kubernetesingress.ingressclass={class}"),
        format!("--providers.kubernetesingress.namespaces={namespace}"),
        format!(
            "--providers.kubernetesingress.ingressendpoint.publishedservice={namespace}/{name}"
        ),
    ]
}

fn deployment(gw: &KuraGateway, who: &Identity) -> Manifest {
    let container = GatewayContainer {
        args: controller_args(who),
        image: gw.spec.image.clone(),
        name: "controller",
        ports: if gw.spec.host_ports {
            Constant::of(&CONTROLLER_HOST_PORTS)
        } else {
            Constant::of(&CONTROLLER_PORTS)
        },
        security_context: Constant::of(&CONTROLLER_SECURITY),
    };
    Manifest {
        kind: ChildKind::Deployment,
        metadata: who.owned(),
        content: Content::Spec(Spec::Deployment(Box::new(DeploymentSpec {
            replicas: gw.spec.replicas,
            selector: Selector {
                match_labels: who.selector.clone(),
            },
            template: GatewayPodTemplate {
                metadata: TemplateMeta {
                    annotations: None,
                    labels: who.labels.clone(),
                    name: None,
                },
                spec: GatewayPodSpec {
                    automount_service_account_token: true,
                    containers: vec![container],
                    security_context: Constant::of(&CONTROLLER_POD_SECURITY),
                    service_account_name: who.name.clone(),
                },
            },
        }))),
    }
}

fn service(who: &Identity) -> Manifest {
    Manifest {
        kind: ChildKind::Service,
        metadata: who.owned(),
        content: Content::Spec(Spec::Service(ServiceSpec {
            ports: Constant::of(&LOAD_BALANCER_PORTS),
            selector: who.selector.clone(),
            service_type: "LoadBalancer",
        })),
    }
}
