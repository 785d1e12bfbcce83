//! Children of a `KuraGateway`: its IngressClass, ingress controller Deployment
//! and Service. Pure, like the instance renderer.
//!
//! The class is named from the gateway's namespace and name, whatever the spec
//! says (the gateway controller reports a spec that names another), and
//! carries the gateway's uid: cluster-scoped, it can have no owner reference,
//! and the uid is what says whose it is.

use super::Desired;
use super::kinds::*;
use super::manifest::{
    Constant, Content, Labels, Manifest, ObjectMeta, OwnerReference, TemplateMeta, constants,
};
use crate::api::KuraGateway;
use crate::keys::*;
use crate::kind::ChildKind;

constants! {
    CONTROLLER_PORTS = [
        { "name": "http", "containerPort": 8080, "protocol": "TCP" },
        { "name": "https", "containerPort": 8443, "protocol": "TCP" },
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

pub fn render_gateway(gw: &KuraGateway) -> Desired {
    let name = gw.metadata.name.clone().unwrap_or_default();
    let namespace = gw.metadata.namespace.clone().unwrap_or_default();
    let uid = gw.metadata.uid.clone().unwrap_or_default();
    let spec = &gw.spec;
    let labels = Labels::from([
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_string()),
        (LABEL_NAME, "kura-gateway".to_string()),
        (LABEL_GATEWAY, name.clone()),
        (LABEL_ACCOUNT, spec.account.clone()),
        (LABEL_REGION, spec.region.clone()),
    ]);
    let selector = Labels::from([
        (LABEL_NAME, "kura-gateway".to_string()),
        (LABEL_GATEWAY, name.clone()),
    ]);
    let metadata = ObjectMeta {
        annotations: None,
        labels: labels.clone(),
        name: name.clone(),
        namespace: Some(namespace.clone()),
        owner_references: vec![OwnerReference {
            api_version: "kura.dev/v1alpha1",
            block_owner_deletion: true,
            controller: true,
            kind: "KuraGateway",
            name: name.clone(),
            uid: uid.clone(),
        }],
    };
    let class_name = crate::names::gateway_ingress_class(&namespace, &name);
    // Cluster-scoped: no owner reference is possible. The uid says whose it
    // is; the gateway controller collects it once no gateway has that uid.
    let mut class_labels = labels.clone();
    class_labels.insert(LABEL_GATEWAY_NAMESPACE, namespace.clone());
    let ingress_class = Manifest {
        kind: ChildKind::IngressClass,
        metadata: ObjectMeta {
            annotations: Some([(ANNOTATION_GATEWAY_UID, uid.clone())].into()),
            labels: class_labels,
            name: class_name.clone(),
            namespace: None,
            owner_references: Vec::new(),
        },
        content: Content::Spec(Spec::IngressClass(IngressClassSpec {
            controller: spec.controller.clone(),
        })),
    };
    // Traefik v3's command line (the node's ingress controller, built from its
    // Go module in hack/control-plane/traefik): its Kubernetes Ingress provider
    // serves this gateway's class only, in the gateway's namespace only, and
    // publishes the LoadBalancer Service's address in the Ingresses' status.
    // It serves IngressClasses whose controller is `traefik.io/ingress-controller`:
    // `gateway.controller` in the operator configuration.
    let container = GatewayContainer {
        args: vec![
            "--global.checknewversion=false".to_string(),
            "--global.sendanonymoususage=false".to_string(),
            "--entrypoints.web.address=:8080".to_string(),
            "--entrypoints.websecure.address=:8443".to_string(),
            "--providers.kubernetesingress=true".to_string(),
            format!("--providers.kubernetesingress.ingressclass={class_name}"),
            format!("--providers.kubernetesingress.namespaces={namespace}"),
            format!(
                "--providers.kubernetesingress.ingressendpoint.publishedservice={namespace}/{name}"
            ),
        ],
        image: spec.image.clone(),
        name: "controller",
        ports: Constant::of(&CONTROLLER_PORTS),
        security_context: Constant::of(&CONTROLLER_SECURITY),
    };
    let deployment = Manifest {
        kind: ChildKind::Deployment,
        metadata: metadata.clone(),
        content: Content::Spec(Spec::Deployment(Box::new(DeploymentSpec {
            replicas: spec.replicas,
            selector: Selector {
                match_labels: selector.clone(),
            },
            template: GatewayPodTemplate {
                metadata: TemplateMeta {
                    annotations: None,
                    labels,
                    name: None,
                },
                spec: GatewayPodSpec {
                    automount_service_account_token: true,
                    containers: vec![container],
                    security_context: Constant::of(&CONTROLLER_POD_SECURITY),
                },
            },
        }))),
    };
    let service = Manifest {
        kind: ChildKind::Service,
        metadata,
        content: Content::Spec(Spec::Service(ServiceSpec {
            ports: Constant::of(&LOAD_BALANCER_PORTS),
            selector,
            service_type: "LoadBalancer",
        })),
    };
    Desired::from_objects(
        vec![ingress_class, deployment, service],
        String::new(),
        gw.spec.image.clone(),
    )
}
