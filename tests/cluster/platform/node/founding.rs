//! docs/incidents.md #1, the founding incident, on the node with real traffic
//! (issue 23, item 4): a region of a single bare-metal node whose instance is
//! on a dedicated gateway, which binds :80/:443 on the node
//! (`gateway.hostPorts`) where the node's own ingress controller (Traefik,
//! hostNetwork, :80/:443) already does: the scheduler can never place the
//! gateway's pod. Two gateways wanting the same ports on one node is the
//! incident's exact situation.
//!
//! The region starts as `cloud` (the renderer before the incident's change:
//! a dedicated gateway per account); the fix is the configuration moving it to
//! `host`, whose instances share the region's class (the renderer change of
//! the incident, as configuration).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use kura_core::api::{ConditionStatus, KuraGateway, KuraInstance};

use super::ingress::{IngressNode, SHARED_CLASS, answers_200, http_get, traefik_image};
use crate::gateways::event_reasons;
use crate::operator::{Operator, Options, instance, wait_ready};
use crate::support::{apply_json, wait_for};

const GATEWAY_PODS: &str = "app.kubernetes.io/name=kura-gateway";

/// One region `r1` of network `network`; dedicated gateways run the node's
/// controller image and bind :80/:443 on their node, serving classes of
/// `gateway_controller`; the endpoint check as `check` says.
fn config(network: &str, gateway_controller: &str, check: bool) -> String {
    let image = traefik_image();
    format!(
        "gateway:\n  image: {image}\n  controller: {gateway_controller}\n  replicas: 1\n  hostPorts: true\n\
         regions:\n  r1:\n    network: {network}\n    sharedIngressClass: {SHARED_CLASS}\n    domain: kura.test\n\
         \x20   endpointCheck: {{enabled: {check}}}\n"
    )
}

/// The gateway's pod, once the scheduler has said it cannot place it: its
/// name and the scheduler's message.
async fn unschedulable_gateway_pod(pods: &Api<Pod>) -> (String, String) {
    wait_for(
        "the gateway's pod to be reported unschedulable by the scheduler",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels(GATEWAY_PODS))
                .await
                .ok()?;
            list.items.into_iter().find_map(|p| {
                let c = p
                    .status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                    .clone();
                Some((p.metadata.name?, c.message?))
            })
        },
    )
    .await
}

fn ready_condition(i: &KuraInstance) -> Option<&kura_core::api::Condition> {
    i.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The incident, end to end: the instance is not Ready and says why (its
/// Ingress has no address because its gateway's pod cannot be scheduled,
/// naming the gateway, the pod and the scheduler's message), and so does the
/// gateway (status and a Warning Event); the configuration moves the region to
/// the shared class, and within seconds a request for the instance's host
/// through the node's real controller answers `/up` with 200, the instance is
/// Ready, and the stranded gateway, its Deployment and its pods are gone.
///
/// Without the pod report (before issue 23) the gateway said Ready ("serves
/// ingress class …") and the instance only that the class's controller had
/// not given an address; without the content-hash revision the move would
/// change nothing (docs/incidents.md #1), and no request would ever answer.
#[tokio::test]
async fn founding_incident_stranded_gateway_is_reported_and_the_shared_class_heals_it() {
    let Some(node) = IngressNode::get("founding").await else {
        return;
    };
    let client = node.client.clone();
    let ns = node.namespace("founding").await;
    node.volume_for(&ns, "data-acme-0").await;
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        ..Options::default()
    };
    let controller = "traefik.io/ingress-controller";
    let op = Operator::start_with(&ns, &config("cloud", controller, true), &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    // gateway Auto: dedicated in a cloud region.
    apply_json(
        &instances,
        "test",
        instance("acme", "kura.local/kura-standin:1"),
    )
    .await
    .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (pod, scheduler) = unschedulable_gateway_pod(&pods).await;
    assert!(
        scheduler.contains("free ports"),
        "the node's controller holds :80/:443: {scheduler}"
    );
    let gateways: Api<KuraGateway> = Api::namespaced(client.clone(), &ns);
    let gateway = gateways.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // The gateway says it, in its status and once in an Event.
    let said = wait_for(
        "the gateway to report its unschedulable pod",
        Duration::from_secs(120),
        || async {
            let s = gateways.get(&gateway).await.ok()?.status?;
            let c = s.conditions.into_iter().find(|c| c.type_ == "Ready")?;
            (c.reason == "PodUnschedulable").then_some(c)
        },
    )
    .await;
    assert_eq!(said.status, ConditionStatus::False);
    for part in [
        format!("gateway {gateway}"),
        format!("pod {pod}"),
        scheduler.clone(),
    ] {
        assert!(
            said.message.contains(&part),
            "{part:?} in {:?}",
            said.message
        );
    }
    wait_for(
        "a PodUnschedulable Event on the gateway",
        Duration::from_secs(60),
        || async {
            event_reasons(&client, &ns, &gateway)
                .await
                .into_iter()
                .find(|(reason, note)| reason == "PodUnschedulable" && note.contains(&pod))
        },
    )
    .await;
    // And the instance it serves is not Ready, saying why (a message change
    // alone is written at most every 30 s: the wait allows for it).
    let wedged = wait_for(
        "the instance to be not Ready naming the gateway's unschedulable pod",
        Duration::from_secs(120),
        || async {
            let i = instances.get("acme").await.ok()?;
            let c = ready_condition(&i)?.clone();
            (c.status == ConditionStatus::False && c.message.contains(&pod)).then_some(c)
        },
    )
    .await;
    assert_eq!(wedged.reason, "IngressNoAddress", "{wedged:?}");
    for part in [format!("gateway {gateway}"), scheduler.clone()] {
        assert!(
            wedged.message.contains(&part),
            "{part:?} in {:?}",
            wedged.message
        );
    }
    eprintln!("wedged: {}", wedged.message);

    // The fix: the region becomes a host-network region (the shared class).
    let fixed = Instant::now();
    op.set_config(&config("host", controller, true));
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    let host = wait_for(
        "the instance's Ingress to move to the shared class",
        Duration::from_secs(120),
        || async {
            let spec = ingresses.get("acme").await.ok()?.spec?;
            (spec.ingress_class_name.as_deref() == Some(SHARED_CLASS))
                .then(|| spec.rules?.first()?.host.clone())
                .flatten()
        },
    )
    .await;
    let answer = answers_200(&node.address, 80, &host).await;
    let answered = fixed.elapsed();
    assert_eq!(answer.trim(), "ok", "the stand-in's answer to /up");
    wait_ready(&instances, "acme").await;
    let ready = fixed.elapsed();
    // Stranded no more: the gateway, its Deployment and its pods are gone.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the stranded gateway, its Deployment and its pods to be gone",
        Duration::from_secs(120),
        || async {
            let none = |n: usize| n == 0;
            let g = gateways
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len();
            let d = deployments
                .list(&ListParams::default().labels(GATEWAY_PODS))
                .await
                .ok()?
                .items
                .len();
            let p = pods
                .list(&ListParams::default().labels(GATEWAY_PODS))
                .await
                .ok()?
                .items
                .len();
            (none(g) && none(d) && none(p)).then_some(())
        },
    )
    .await;
    eprintln!(
        "configuration fixed → /up answered 200 through {}:80 after {:.1} s, Ready after {:.1} s, gateway gone after {:.1} s",
        node.address,
        answered.as_secs_f64(),
        ready.as_secs_f64(),
        fixed.elapsed().as_secs_f64()
    );
    assert!(
        answered < Duration::from_secs(60),
        "within seconds of the configuration change: {answered:?}"
    );
    drop(op);
}

/// The negative control: the same stranded gateway, with the endpoint check
/// off and the address simulated (the gateway's class served by kura-sim's
/// controller name, which gives its Ingresses 127.0.0.1 without anything
/// listening there), shows the old behaviour: the instance is Ready while its
/// gateway's pod cannot be scheduled and no request for its host answers.
/// This is what "Ready" meant before issue 23; the test above fails in the
/// same setup only because the check and the pod report exist.
#[tokio::test]
async fn negative_control_check_off_and_simulated_address_is_ready_while_nothing_answers() {
    let Some(node) = IngressNode::get("founding-off").await else {
        return;
    };
    let client = node.client.clone();
    let ns = node.namespace("founding-off").await;
    node.volume_for(&ns, "data-acme-0").await;
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        ..Options::default()
    };
    // kura-sim plays the gateway's ingress controller: it publishes 127.0.0.1.
    let op = Operator::start_with(
        &ns,
        &config("cloud", "kura.dev/sim-ingress", false),
        &[],
        options,
    );
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    apply_json(
        &instances,
        "test",
        instance("acme", "kura.local/kura-standin:1"),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (pod, _) = unschedulable_gateway_pod(&pods).await;
    wait_ready(&instances, "acme").await;
    let ingress = Api::<Ingress>::namespaced(client.clone(), &ns)
        .get("acme")
        .await
        .unwrap();
    let host = ingress.spec.unwrap().rules.unwrap()[0]
        .host
        .clone()
        .unwrap();
    let address = ingress
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap()[0]
        .ip
        .clone()
        .unwrap();
    let answer = http_get(&address, 80, &host, "/up").await;
    assert!(
        !matches!(answer, Ok((200, _))),
        "nothing of the instance answers at the simulated address {address}: {answer:?}"
    );
    let still = pods.get(&pod).await.unwrap();
    assert!(
        still.spec.unwrap().node_name.is_none(),
        "the gateway's pod is still not scheduled while the instance is Ready"
    );
    eprintln!("Ready with nothing answering at {address}:80 for {host}: {answer:?}");
    drop(op);
}
