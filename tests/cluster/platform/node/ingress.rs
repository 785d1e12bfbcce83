//! The node's real ingress controller (issue 23, item 1): Traefik, built from
//! its Go module and run from its image in a pod on the node
//! (scripts/control-plane-node.sh, `node_ingress`), serves the regions' shared
//! class `kura-shared`, publishes the node's address in the status of the
//! Ingresses it serves, and routes a request for an instance's host to the
//! instance's pod.
//!
//! They run on the plane of KURA_TEST_KUBECONFIG when it has a node (its
//! ingress controller installed by `up --node`, or `scripts/control-plane.sh
//! ingress` on a node plane started before it existed), else on a node plane
//! of the test's own (root only, one at a time, as the other node tests).

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, Pod};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kura_core::api::{ConditionStatus, KuraInstance};
use serde_json::json;

use super::{NODE_LOCK, NodePlane};
use crate::operator::{Operator, Options, instance, wait_ready};
use crate::support::{self, apply_json, external_plane, wait_for};

pub(super) const SHARED_CLASS: &str = "kura-shared";
const CONTROLLER_NAMESPACE: &str = "kura-ingress";

/// A node with its ingress controller: the plane's (KURA_TEST_KUBECONFIG) or
/// one of the test's own. Dropped, it deletes what the test made on the plane
/// (namespaces, volumes), then the test's own plane goes (fields drop in order).
pub(super) struct IngressNode {
    pub(super) client: Client,
    /// The node's address: where the controller listens, and what it publishes.
    pub(super) address: String,
    pub(super) kubeconfig: Option<PathBuf>,
    /// Where the test's hostPath volumes go.
    volumes: PathBuf,
    /// What to delete at the end: (resource, name).
    pub(super) made: std::sync::Mutex<Vec<(&'static str, String)>>,
    _own: Option<NodePlane>,
    /// One test at a time: they share the node's controller (one stops it).
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Drop for IngressNode {
    fn drop(&mut self) {
        // Not through self.client: its connection lives on the test's runtime,
        // which is blocked in this drop.
        let kubeconfig = self
            .kubeconfig
            .clone()
            .unwrap_or_else(support::kubeconfig_path);
        for (resource, name) in self.made.lock().unwrap().drain(..) {
            let _ = std::process::Command::new(support::kubectl())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args([
                    "delete",
                    resource,
                    &name,
                    "--wait=false",
                    "--ignore-not-found",
                ])
                .stdout(std::process::Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.volumes);
    }
}

impl IngressNode {
    /// None (and the reason printed) where no node can be had.
    pub(super) async fn get(prefix: &str) -> Option<IngressNode> {
        if external_plane() {
            let turn = NODE_LOCK.lock().await;
            let client = support::client().await;
            let nodes = Api::<Node>::all(client.clone())
                .list(&ListParams::default())
                .await
                .unwrap();
            let Some(address) = nodes.items.iter().find_map(internal_ip) else {
                eprintln!("SKIPPED: the plane of KURA_TEST_KUBECONFIG has no node");
                return None;
            };
            let volumes =
                std::env::temp_dir().join(format!("kura-{prefix}-{}", std::process::id()));
            return Some(IngressNode {
                client,
                address,
                kubeconfig: None,
                volumes,
                made: Default::default(),
                _own: None,
                _turn: turn,
            });
        }
        if let Some(why) = super::node_unsupported() {
            eprintln!("SKIPPED: this host cannot run a node: {why}");
            return None;
        }
        let turn = NODE_LOCK.lock().await;
        let plane = NodePlane::up();
        let client = plane.client().await;
        let node = Api::<Node>::all(client.clone())
            .get(super::NODE)
            .await
            .unwrap();
        Some(IngressNode {
            address: internal_ip(&node).expect("the node's InternalIP"),
            kubeconfig: Some(plane.kubeconfig()),
            volumes: plane.state.join("volumes"),
            made: Default::default(),
            client,
            _own: Some(plane),
            _turn: turn,
        })
    }

    pub(super) async fn namespace(&self, prefix: &str) -> String {
        let suffix = format!("{:x}", std::process::id() ^ rand_suffix());
        let name = format!("{prefix}-{}", &suffix[suffix.len().saturating_sub(6)..]);
        Api::<Namespace>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
        self.made.lock().unwrap().push(("namespace", name.clone()));
        name
    }

    /// No provisioner on the node: a volume bound in advance to the claim the
    /// StatefulSet will create, on a directory removed at the end.
    pub(super) async fn volume_for(&self, ns: &str, claim: &str) {
        let dir = self.volumes.join(format!("{ns}-{claim}"));
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("{ns}-{claim}");
        Api::<PersistentVolume>::all(self.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "",
                        "hostPath": {"path": dir.display().to_string()},
                        "claimRef": {"namespace": ns, "name": claim},
                    },
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        self.made.lock().unwrap().push(("persistentvolume", name));
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

/// The node's controller image (scripts/images.sh traefik), which the
/// dedicated gateways run too: `kura.local/traefik:<the version built>`.
pub(super) fn traefik_image() -> String {
    let version =
        std::fs::read_to_string(support::repo().join("hack/control-plane/traefik/go.mod"))
            .unwrap()
            .lines()
            .find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some("github.com/traefik/traefik/v3"))
                    .then(|| words.next().unwrap().to_string())
            })
            .unwrap();
    format!("kura.local/traefik:{version}")
}

/// The operator's configuration: one region whose shared class is the node's.
/// "cloud": the instance's pods are bridged (a host-network region would put
/// its :8080 on the host).
pub(super) fn node_config() -> String {
    format!(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: example.com/none\n  replicas: 1\n\
         regions:\n  r1:\n    network: cloud\n    sharedIngressClass: {SHARED_CLASS}\n    domain: kura.test\n"
    )
}

/// `GET path` with `Host: host`, sent to `address:port` as a client outside
/// the cluster sends it to the address an Ingress reports: the status code and
/// body, or what failed (connection refused, timed out).
pub(super) async fn http_get(
    address: &str,
    port: u16,
    host: &str,
    path: &str,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect((address, port))
            .await
            .map_err(|e| format!("connect {address}:{port}: {e}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write to {address}:{port}: {e}"))?;
        let mut response = String::new();
        conn.read_to_string(&mut response)
            .await
            .map_err(|e| format!("read from {address}:{port}: {e}"))?;
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no HTTP status from {address}:{port}: {response:?}"))?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .unwrap_or_else(|_| Err(format!("{address}:{port}: timed out after 5s")))
}

/// Waits (2 min at most) until `GET http://host/up` sent to `address:port`
/// answers 200, and returns the body; the timeout names the last answer.
pub(super) async fn answers_200(address: &str, port: u16, host: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let last = http_get(address, port, host, "/up").await;
        if let Ok((200, body)) = last {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after 120s waiting for GET http://{host}/up through {address}:{port} to answer 200; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// An instance of the shared class on the node is reached through the real
/// controller: its Ingress gets the node's address from Traefik (the status
/// written by Traefik's client, not by kura-sim), a request for the
/// instance's host sent to that address on :80 reaches the instance's pod
/// (the stand-in answers `/up` with 200 "ok"), a request for a host no
/// Ingress has gets Traefik's 404, and the instance is Ready.
///
/// Without the node's controller (before issue 23: the shared class was
/// kura-sim's, controller kura.dev/sim-ingress) the Ingress got 127.0.0.1
/// from kura-sim, where nothing listens on :80: the address check and the
/// request fail, while the instance was Ready all the same.
#[tokio::test]
async fn shared_class_answers_through_the_nodes_ingress_controller() {
    let Some(node) = IngressNode::get("ingress").await else {
        return;
    };
    let client = node.client.clone();
    // Said in the failures below: the checks themselves decide.
    let controller = match Api::<Deployment>::namespaced(client.clone(), CONTROLLER_NAMESPACE)
        .get_opt("traefik")
        .await
        .unwrap()
    {
        Some(_) => format!("{CONTROLLER_NAMESPACE}/traefik is installed"),
        None => format!(
            "no ingress controller on the node ({CONTROLLER_NAMESPACE}/traefik): \
             `scripts/control-plane.sh up --node` installs it, `scripts/control-plane.sh ingress` \
             on a node plane started before"
        ),
    };
    let ns = node.namespace("ingress").await;
    node.volume_for(&ns, "data-acme-0").await;
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        ..Options::default()
    };
    let op = Operator::start_with(&ns, &node_config(), &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["gateway"] = json!({"mode": "Shared"});
    apply_json(&instances, "test", acme).await.unwrap();

    // The address, from the controller.
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    let (ingress, address) = wait_for(
        "the instance's Ingress to get an address",
        Duration::from_secs(120),
        || async {
            let list = ingresses.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find_map(|i| {
                let ip = i
                    .status
                    .as_ref()?
                    .load_balancer
                    .as_ref()?
                    .ingress
                    .as_ref()?
                    .first()?
                    .ip
                    .clone()?;
                Some((i, ip))
            })
        },
    )
    .await;
    assert_eq!(
        address, node.address,
        "the node's address, published by its ingress controller ({controller})"
    );
    let writers: Vec<String> = ingress
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        writers.iter().all(|m| m.starts_with("traefik")),
        "the status is the controller's (Traefik's client), not a simulation's: {writers:?}"
    );
    let host = ingress.spec.as_ref().unwrap().rules.as_ref().unwrap()[0]
        .host
        .clone()
        .unwrap();

    // A request for the instance's host, sent to that address, reaches its pod.
    let answer = answers_200(&address, 80, &host).await;
    assert_eq!(answer.trim(), "ok", "the stand-in's answer to /up");
    // Routed by host: another host is the controller's 404, not the instance's.
    let other = http_get(&address, 80, "nobody.kura.test", "/up").await;
    assert!(matches!(other, Ok((404, _))), "{other:?}");
    wait_ready(&instances, "acme").await;

    drop(op);
}

/// Item 2: a dedicated gateway's Deployment, as the operator renders it, runs
/// the same controller image (kura.local/traefik, the node's) and serves its
/// own class, and only it: a request for the instance's host sent to the
/// gateway's pod (:8080, its `web` entrypoint) reaches the instance, while the
/// node's shared controller, which serves `kura-shared` only, answers 404 for
/// that host.
///
/// The gateway's LoadBalancer Service gets no address on this node (no load
/// balancer), so the request goes to the pod. Its Traefik runs as the
/// ServiceAccount the operator creates for it, bound to the chart's two gateway
/// ClusterRoles (applied from `helm template`): an answer proves those rights
/// are what Traefik needs (without them it lists nothing and answers 404).
///
/// Before issue 23 the gateway passed ingress-nginx's flags
/// (`--ingress-class=…`, `--publish-service=…`), which Traefik refuses: the
/// pod exits at start and the request is refused.
///
/// On a plane whose state was first started without a node, the `kubernetes`
/// Service keeps 10.96.0.1 after `up --node`: the apiserver's certificate
/// names that address too (scripts/control-plane-node.sh, `node_pki`), or the
/// gateway's Traefik fails TLS and serves nothing (404).
#[tokio::test]
async fn dedicated_gateway_runs_the_controller_serving_only_its_class() {
    let Some(node) = IngressNode::get("gateway").await else {
        return;
    };
    let client = node.client.clone();
    let ns = node.namespace("gateway").await;
    node.volume_for(&ns, "data-acme-0").await;
    // The chart's ClusterRoles for the gateways, which the operator binds to
    // the gateway's own ServiceAccount: Traefik must serve with those rights.
    let roles = crate::operations::chart::apply_gateway_roles(&ns, &ns, node.kubeconfig.as_deref());
    for role in &roles {
        node.made
            .lock()
            .unwrap()
            .push(("clusterrole", role.clone()));
    }
    let image = traefik_image();
    let config = format!(
        "gateway:\n  image: {image}\n  controller: traefik.io/ingress-controller\n  replicas: 1\n\
         regions:\n  r1:\n    network: cloud\n    sharedIngressClass: {SHARED_CLASS}\n    domain: kura.test\n"
    );
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        args: vec![
            format!("--gateway-role={}", roles[0]),
            format!("--gateway-cluster-role={}", roles[1]),
        ],
        ..Options::default()
    };
    let op = Operator::start_with(&ns, &config, &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["gateway"] = json!({"mode": "Dedicated"});
    apply_json(&instances, "test", acme).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let gateway_pod = wait_for(
        "the gateway's pod to run",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=kura-gateway"))
                .await
                .ok()?;
            let pod = list.items.into_iter().next()?;
            let status = pod.status.as_ref()?;
            let running = status
                .container_statuses
                .iter()
                .flatten()
                .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
            running.then(|| status.pod_ip.clone()).flatten()
        },
    )
    .await;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &ns);
    let ingress = wait_for(
        "the instance's Ingress",
        Duration::from_secs(60),
        || async { ingresses.get_opt("acme").await.ok()? },
    )
    .await;
    let spec = ingress.spec.as_ref().unwrap();
    let class = spec.ingress_class_name.clone().unwrap();
    assert!(
        class.starts_with("kura-gw."),
        "the gateway's class: {class}"
    );
    let host = spec.rules.as_ref().unwrap()[0].host.clone().unwrap();

    let answer = answers_200(&gateway_pod, 8080, &host).await;
    assert_eq!(answer.trim(), "ok", "the stand-in's answer to /up");
    let shared = http_get(&node.address, 80, &host, "/up").await;
    assert!(
        matches!(shared, Ok((404, _))),
        "the shared controller does not serve the gateway's class: {shared:?}"
    );
    let restarts: i32 = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=kura-gateway"))
        .await
        .unwrap()
        .items
        .iter()
        .flat_map(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default()
        })
        .map(|c| c.restart_count)
        .sum();
    assert_eq!(restarts, 0, "the gateway's controller never exited");

    drop(op);
}

/// Scales the node's ingress controller to 0; dropped (also when the test
/// fails), back to 1.
struct ControllerStopped(Option<PathBuf>);

impl ControllerStopped {
    fn scale(kubeconfig: &Option<PathBuf>, replicas: u32) {
        let status = std::process::Command::new(support::kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig.clone().unwrap_or_else(support::kubeconfig_path))
            .args(["-n", CONTROLLER_NAMESPACE, "scale", "deployment/traefik"])
            .arg(format!("--replicas={replicas}"))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "kubectl scale deployment/traefik");
    }

    fn new(kubeconfig: Option<PathBuf>) -> ControllerStopped {
        Self::scale(&kubeconfig, 0);
        ControllerStopped(kubeconfig)
    }
}

impl Drop for ControllerStopped {
    fn drop(&mut self) {
        Self::scale(&self.0, 1);
    }
}

/// Item 5: with the region's endpoint check on, an instance that answers
/// through the node's controller is Ready; once the controller's pod is gone
/// (scaled to 0; the Ingress keeps the address it published), the instance
/// goes not Ready within 30 s at the chart's settings (resync 10 minutes: the
/// controller's address is asked every 10 s besides the instance's own
/// check), reason EndpointNotAnswering, the message naming the address, the
/// refused connection and the class's controller; started again, it is Ready
/// again.
///
/// Without the check (before issue 23, or `endpointCheck.enabled: false`) the
/// instance stays Ready with nothing answering, and without the address watch
/// for the rest of the resync: the wait for not Ready times out.
#[tokio::test]
async fn a_stopped_controller_makes_the_instance_not_ready_until_it_answers_again() {
    let Some(node) = IngressNode::get("stopped").await else {
        return;
    };
    let client = node.client.clone();
    let ns = node.namespace("stopped").await;
    node.volume_for(&ns, "data-acme-0").await;
    let config = format!("{}    endpointCheck: {{enabled: true}}\n", node_config());
    let options = Options {
        kubeconfig: node.kubeconfig.clone(),
        // The chart's default.
        resync: Some("10m".into()),
        ..Options::default()
    };
    let op = Operator::start_with(&ns, &config, &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["gateway"] = json!({"mode": "Shared"});
    apply_json(&instances, "test", acme).await.unwrap();
    wait_ready(&instances, "acme").await;

    let stopped = ControllerStopped::new(node.kubeconfig.clone());
    let since = std::time::Instant::now();
    let ready = |want: ConditionStatus| {
        let instances = instances.clone();
        move || {
            let instances = instances.clone();
            async move {
                let s = instances.get("acme").await.ok()?.status?;
                let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
                (c.status == want).then(|| c.clone())
            }
        }
    };
    let down = wait_for(
        "the instance to go not Ready",
        Duration::from_secs(60),
        ready(ConditionStatus::False),
    )
    .await;
    let took = since.elapsed();
    assert_eq!(down.reason, "EndpointNotAnswering", "{down:?}");
    for part in [
        format!("via {}:80", node.address),
        "connection refused".to_string(),
        "traefik.io/ingress-controller".to_string(),
    ] {
        assert!(
            down.message.contains(&part),
            "{part:?} in {:?}",
            down.message
        );
    }
    assert!(
        took <= Duration::from_secs(30),
        "within 30 s at the chart's resync: {took:?}"
    );
    eprintln!(
        "not Ready {took:?} after the controller was scaled to 0: {}",
        down.message
    );

    drop(stopped);
    wait_for(
        "the instance to be Ready again",
        Duration::from_secs(120),
        ready(ConditionStatus::True),
    )
    .await;
    drop(op);
}
