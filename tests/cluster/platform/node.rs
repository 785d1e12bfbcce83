//! A real node (`scripts/control-plane.sh up --node`): kubelet, containerd,
//! runc, CNI, kube-proxy and kube-scheduler on a plane of the test's own. Pods
//! really run, and their readiness comes from real probes, not from kura-sim.
//!
//! Root only (network, mounts, cgroups); on another host the tests say so and
//! return. One node per machine (the kubelet hard-codes host paths): the tests
//! take turns through [`NODE_LOCK`], and use their own bridge and ranges so a
//! developer's node plane (kura0) is not touched.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use kura_core::api::KuraInstance;
use serde_json::json;

use crate::operator::{Operator, Options, config, instance, wait_ready};
use crate::support::{PrivatePlane, apply_json, must_succeed, repo, wait_empty, wait_for};

// A tokio mutex: the turn is held across awaits (and is not poisoned by a failed test).
pub(crate) static NODE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const BRIDGE: &str = "kuratest0";
const NODE: &str = "kura-test-node";

/// A node plane of the test's own (a private plane with a node, on a bridge
/// and ranges of its own); dropping it runs `down` and removes its state.
struct NodePlane(PrivatePlane);

impl std::ops::Deref for NodePlane {
    type Target = PrivatePlane;
    fn deref(&self) -> &PrivatePlane {
        &self.0
    }
}

/// The tests' node: its bridge, ranges, ports and name, for scripts/control-plane.sh.
pub(crate) fn node_env() -> Vec<(&'static str, String)> {
    vec![
        ("KURA_NODE_BRIDGE", BRIDGE.to_string()),
        ("KURA_NODE_POD_CIDR", "10.219.0.0/24".to_string()),
        ("KURA_NODE_SERVICE_CIDR", "10.220.0.0/16".to_string()),
        // Below the ephemeral range (32768 and up): a client's
        // ephemeral port once took the kube-proxy's healthz port here.
        ("KURA_NODE_PORT_BASE", "29200".to_string()),
        ("KURA_NODE_NAME", NODE.to_string()),
    ]
}

impl NodePlane {
    /// Started with its node Ready and the CRDs served.
    fn up() -> NodePlane {
        let plane = PrivatePlane::with_env("node", 7, node_env());
        plane.script(&["up", "--node"]);
        plane.install_crds();
        NodePlane(plane)
    }

    fn down(&self) {
        self.script(&["down"]);
    }

    async fn namespace(&self, client: &Client, name: &str) {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
    }
}

/// Whether this host can run a node; if not, why (the test then says so and returns).
pub(crate) fn node_unsupported() -> Option<String> {
    // One node per machine: where another checkout runs these tests at the same
    // time, one of them sets KURA_TEST_NODE=0.
    if std::env::var("KURA_TEST_NODE").as_deref() == Ok("0") {
        return Some("KURA_TEST_NODE=0".into());
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("a node needs root (network, mounts, cgroups)".into());
    }
    if !std::path::Path::new("/proc/sys/net/bridge").exists() {
        return Some("no bridge netfilter (br_netfilter) on this kernel".into());
    }
    None
}

macro_rules! require_node_host {
    () => {
        if let Some(why) = crate::platform::node::node_unsupported() {
            eprintln!("SKIPPED: this host cannot run a node: {why}");
            return;
        }
    };
}

fn run(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// What a node changes on the host, in a comparable form.
fn host_snapshot() -> BTreeMap<&'static str, String> {
    let mut s = BTreeMap::new();
    let links: Vec<String> = run("ip", &["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect();
    s.insert("links", links.join("\n"));
    s.insert(
        "routes",
        run("ip", &["-4", "route", "show", "table", "all"]),
    );
    // Rules and chains, without packet counters.
    let tables = |cmd: &str| {
        run(cmd, &[])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    s.insert("iptables", tables("iptables-save"));
    s.insert("ip6tables", tables("ip6tables-save"));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<&str> = mounts.lines().filter_map(|l| l.split(' ').nth(4)).collect();
    points.sort();
    s.insert("mounts", points.join("\n"));
    let dirs = [
        "/var/lib/kubelet",
        "/var/log/containers",
        "/var/log/pods",
        "/usr/libexec/kubernetes",
        "/var/lib/cni",
        "/run/containerd",
        "/opt/containerd",
        "/etc/cni",
        "/opt/cni",
    ];
    let present: Vec<&str> = dirs
        .iter()
        .copied()
        .filter(|d| std::path::Path::new(d).exists())
        .collect();
    s.insert("directories", present.join("\n"));
    s.insert(
        "cgroups",
        run(
            "find",
            &["/sys/fs/cgroup", "-maxdepth", "3", "-name", "kubepods*"],
        ),
    );
    s.insert(
        "sysctls",
        run(
            "sysctl",
            &[
                "net.ipv4.ip_forward",
                "net.bridge.bridge-nf-call-iptables",
                "vm.overcommit_memory",
                "vm.panic_on_oom",
                "kernel.panic",
                "kernel.panic_on_oops",
            ],
        ),
    );
    s
}

async fn pod_ready_on_node(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} Ready on {NODE}"),
        Duration::from_secs(120),
        || async {
            let pod = pods.get_opt(name).await.ok()??;
            let status = pod.status.as_ref()?;
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(pod)
        },
    )
    .await
}

/// The instance's StatefulSet pod, running the stand-in image (scripts/images.sh),
/// is scheduled onto the node, started by containerd, and becomes Ready through
/// its real readiness probe (GET /up on the container port `http`), which the
/// stand-in answers from the kura.json and env the renderer gives it; the
/// instance then becomes Ready. Without the node nothing would schedule or start
/// the pod (it would stay Pending, or, with kura-sim, be marked Ready by a
/// simulation with no container behind it: no containerd container ID, the
/// condition's reason "Simulated"), so every assertion below would fail.
#[tokio::test]
async fn instance_pod_runs_and_becomes_ready_through_its_real_probe() {
    require_node_host!();
    let _turn = NODE_LOCK.lock().await;
    let plane = NodePlane::up();
    let client = plane.client().await;
    let ns = "node-real";
    plane.namespace(&client, ns).await;

    // The region's shared class; kura-sim still plays the ingress controller.
    let classes = crate::operator::sim_class(&client, &format!("shared-{ns}")).await;
    // No provisioner on this node: a volume bound in advance to the claim the
    // StatefulSet will create, on a directory the plane's `down` removes.
    let data = plane.state.join("pv-acme");
    std::fs::create_dir_all(&data).unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "node-real-acme"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": data.display().to_string()},
                "claimRef": {"namespace": ns, "name": "data-acme-0"},
            },
        }))
        .unwrap(),
    )
    .await
    .unwrap();

    let options = Options {
        kubeconfig: Some(plane.kubeconfig()),
        ..Options::default()
    };
    // "cloud": bridged pods (a host-network region would put :8080 on the host).
    let _op = Operator::start_with(ns, &config(ns, "cloud", "example.com/none"), &[], options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
    // Shared: the region's ingress class (kura-sim's) only. Auto would add a
    // dedicated gateway Deployment whose image no registry here can serve.
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["gateway"] = json!({"mode": "Shared"});
    apply_json(&instances, "test", acme).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pod_ready_on_node(&pods, "acme-0").await;
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.node_name.as_deref(),
        Some(NODE),
        "scheduled onto the node"
    );
    let status = pod.status.as_ref().unwrap();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_ne!(
        ready.reason.as_deref(),
        Some("Simulated"),
        "kura-sim must leave the node's pods alone"
    );
    let container = &status.container_statuses.as_ref().unwrap()[0];
    assert!(
        container
            .container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://")),
        "a container containerd started: {container:?}"
    );
    assert!(container.ready && container.state.as_ref().unwrap().running.is_some());
    assert!(
        status
            .pod_ip
            .as_deref()
            .is_some_and(|ip| ip.starts_with("10.219.0.")),
        "an address on the pod bridge: {:?}",
        status.pod_ip
    );
    wait_ready(&instances, "acme").await;

    let _ = classes
        .delete(&format!("shared-{ns}"), &Default::default())
        .await;
}

/// `down` undoes everything a node did to the host, after a pod ran (so there
/// were veths, a network namespace mount, container mounts, pod cgroups and
/// kube-proxy's chains): no leftover bridge, route, iptables rule or chain,
/// mount, cgroup, hard-coded directory or changed sysctl. Without the journal
/// and its undo in `down`, the bridge, its route, the guard rule, the KUBE-*
/// chains and the kubepods cgroups would all remain and the snapshots differ;
/// without `down` deleting the Node object, the plane started again without a
/// node would still list it.
#[tokio::test]
async fn down_leaves_the_host_as_it_was() {
    require_node_host!();
    let _turn = NODE_LOCK.lock().await;
    let before = host_snapshot();
    {
        let plane = NodePlane::up();
        let client = plane.client().await;
        plane.namespace(&client, "node-clean").await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "node-clean");
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "standin"},
                "spec": {"containers": [{
                    "name": "standin", "image": "kura.local/kura-standin:1",
                    "imagePullPolicy": "Never",
                    "env": [{"name": "KURA_CONFIG", "value": "/missing"}],
                    // Ready means the container runs and serves: here it answers 503
                    // (no configuration), so readiness is on the TCP port.
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
        pod_ready_on_node(&pods, "standin").await;
        let during = host_snapshot();
        assert_ne!(
            before["links"], during["links"],
            "the node made its bridge (else this test proves nothing)"
        );
        plane.down();
        // Nor does the cluster keep the node: the same state started again
        // without one has no Node object (a Node left registered would make
        // kura-sim leave every pod to a kubelet that no longer runs).
        plane.script(&["up"]);
        let nodes: Api<Node> = Api::all(plane.client().await);
        let left = nodes.list(&Default::default()).await.unwrap().items;
        assert!(
            left.is_empty(),
            "nodes left registered after down: {:?}",
            left.iter().map(|n| &n.metadata.name).collect::<Vec<_>>()
        );
    }
    let after = host_snapshot();
    for (what, was) in &before {
        assert_eq!(was, &after[what], "{what} after down differ from before up");
    }
    assert!(
        !run("ip", &["-o", "link", "show"]).contains(BRIDGE),
        "bridge {BRIDGE} left behind"
    );
}

/// `up --node` names a node port another process holds and stops, and `down`
/// then leaves the host as it was. A port in the node's range taken by some
/// process (it happened: a client's ephemeral port on the kube-proxy's healthz
/// port, when the tests' base was in the ephemeral range) otherwise showed up
/// as a health check that never answered, minutes later, naming no port.
/// Negative control: without `require_free_port` for the kubelet's port,
/// `up --node` succeeds with that port held by another process (run here: the
/// kubelet came up beside the holder and nothing noticed), and the first
/// assertion fails.
#[tokio::test]
async fn up_names_a_node_port_another_process_holds() {
    require_node_host!();
    let _turn = NODE_LOCK.lock().await;
    let before = host_snapshot();
    let env = node_env();
    let base: u16 = env
        .iter()
        .find(|(k, _)| *k == "KURA_NODE_PORT_BASE")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    // The kubelet's port (scripts/control-plane-node.sh: the base + 50).
    let kubelet = base + 50;
    let holder = std::net::TcpListener::bind(("127.0.0.1", kubelet))
        .unwrap_or_else(|e| panic!("port {kubelet} must be free for this test: {e}"));
    {
        let plane = PrivatePlane::with_env("node-port", 8, env);
        let started = std::time::Instant::now();
        let (ok, said) = crate::platform::control_plane::run(plane.on_this_plane(
            Command::new(repo().join("scripts/control-plane.sh")).args(["up", "--node"]),
        ));
        assert!(!ok, "`up --node` must fail: {said}");
        assert!(
            said.contains(&format!("kubelet: port {kubelet}")) && said.contains("in use"),
            "names the component and the port: {said}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "before any node health check times out: {:?}",
            started.elapsed()
        );
        plane.script(&["down"]);
    }
    drop(holder);
    let after = host_snapshot();
    for (what, was) in &before {
        assert_eq!(was, &after[what], "{what} after down differ from before up");
    }
}

fn sysctl(key: &str) -> String {
    run("sysctl", &["-n", key]).trim().to_string()
}

/// `down` undoes only what `up` did, and leaves what others did: a KUBE-*
/// chain that was there before `up` (another kube-proxy's), a sysctl an
/// administrator changed after `up` set it, a host directory the node
/// journaled (absent before `up`) that another tool then filled. The undo is
/// hack/control-plane/hostjournal (its unit tests cover each rule with a fake
/// host); this is the real host. Negative control: with the bash undo it
/// replaced (596b79c), all three were removed or reset (run by hand: the
/// chain was deleted, kernel.panic went back to its value before `up`, the
/// directory was `rm -rf`'d).
#[tokio::test]
async fn down_leaves_what_others_changed_since_up() {
    require_node_host!();
    let _turn = NODE_LOCK.lock().await;
    const CHAIN: &str = "KUBE-NOT-THE-NODES";
    // A directory of the node's list that does not exist here (the node
    // journals it), which "another tool" creates after `up`.
    let dir = ["/opt/cni", "/etc/cni", "/run/nri", "/opt/containerd"]
        .into_iter()
        .find(|d| !std::path::Path::new(d).exists())
        .expect("one of the node's host directories is absent");
    let file = format!("{dir}/installed-by-another-tool");
    // With iptables-nft, the chain makes the filter table if there is none:
    // the test removes it again (when empty) at the end.
    let had_filter = Command::new("nft")
        .args(["list", "table", "ip", "filter"])
        .output()
        .is_ok_and(|o| o.status.success());
    must_succeed(Command::new("iptables").args(["-t", "filter", "-N", CHAIN]));
    let panic_before = sysctl("kernel.panic");
    let before = host_snapshot();
    let changed = {
        let plane = NodePlane::up();
        assert_eq!(
            sysctl("kernel.panic"),
            "10",
            "up sets the kubelet's kernel.panic"
        );
        let changed = if panic_before == "30" { "31" } else { "30" };
        must_succeed(Command::new("sysctl").args(["-qw", &format!("kernel.panic={changed}")]));
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(&file, "not the node's").unwrap();
        plane.down();
        changed
    };
    let chain_left = run("iptables", &["-t", "filter", "-S"]).contains(&format!("-N {CHAIN}"));
    let panic_after = sysctl("kernel.panic");
    let file_left = std::path::Path::new(&file).exists();
    // Put the host back before asserting: a failure must not leave it changed.
    let _ = Command::new("sysctl")
        .args(["-qw", &format!("kernel.panic={panic_before}")])
        .status();
    let _ = std::fs::remove_dir_all(dir);
    let after = host_snapshot();
    let _ = Command::new("iptables")
        .args(["-t", "filter", "-X", CHAIN])
        .status();
    let empty = |l: &str| l.starts_with("-P ") || l.is_empty();
    if !had_filter && run("iptables", &["-t", "filter", "-S"]).lines().all(empty) {
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", "filter"])
            .status();
    }
    assert!(
        chain_left,
        "down removed {CHAIN}, which was there before up"
    );
    assert_eq!(
        panic_after, changed,
        "down reset kernel.panic, which someone changed after up"
    );
    assert!(file_left, "down removed {file}, which another tool made");
    for (what, was) in &before {
        assert_eq!(was, &after[what], "{what} after down differ from before up");
    }
}

/// The operator's image is built from the release binary (scripts/images.sh):
/// without one the test says so and returns.
macro_rules! require_release_binary {
    () => {
        let binary = crate::support::repo().join("target/release/kura-operator");
        if !binary.exists() {
            eprintln!(
                "SKIPPED: {} is missing: run scripts/release-build.sh first",
                binary.display()
            );
            return;
        }
    };
}

fn chart() -> String {
    repo().join("charts/kura-operator").display().to_string()
}

/// The operator as users run it: its image imported into the node's containerd
/// (scripts/images.sh, from the release binary), installed as release `kura` of
/// the chart into `ns`, a namespace enforcing the `restricted` Pod Security
/// profile. Returns its pod once Ready
/// (the kubelet probing its /readyz), run by containerd.
async fn operator_via_the_chart(plane: &NodePlane, client: &Client, ns: &str) -> Pod {
    must_succeed(plane.on_this_plane(
        Command::new(repo().join("scripts/images.sh")).args(["operator", "--import"]),
    ));
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let chart = chart();
    let tag = format!("image.tag={version}");
    let args = [
        "install",
        "kura",
        &chart,
        "-n",
        ns,
        "--wait",
        "--timeout",
        "120s",
        "--set",
        "image.repository=kura.local/kura-operator",
        "--set",
        &tag,
        "--set",
        "image.pullPolicy=Never",
    ];
    helm(plane, &args);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = wait_for(
        "the operator pod Ready",
        Duration::from_secs(120),
        || async {
            let list = pods.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        },
    )
    .await;
    let container = &pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert!(
        container
            .container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://")),
        "the operator runs in a container: {container:?}"
    );
    pod
}

/// The operator as users run it: its image (scripts/images.sh, from the release
/// binary), installed with the chart into a namespace enforcing the `restricted`
/// Pod Security profile, runs on the node, connects in-cluster through the
/// `kubernetes` Service (the apiserver's certificate names the Service IP),
/// becomes Ready through its real /readyz probe, and makes an instance's pod
/// Ready. Without the node the Deployment's pod never starts (no scheduler, no
/// kubelet): the rollout never completes; without the Service IP in the
/// certificate or the lease endpoint reconciler, the operator could not reach
/// the apiserver and would never be Ready.
#[tokio::test]
async fn operator_from_its_image_via_the_chart_in_a_restricted_namespace() {
    require_node_host!();
    require_release_binary!();
    let _turn = NODE_LOCK.lock().await;
    let plane = NodePlane::up();
    let client = plane.client().await;
    let ns = "kura-system";
    operator_via_the_chart(&plane, &client, ns).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let chart = chart();

    // The in-cluster operator (every namespace: the chart's default) reconciles
    // an instance of the chart's example region onto the node.
    let demo = "node-chart-demo";
    plane.namespace(&client, demo).await;
    // The chart's example region's shared class, kura-shared, is the node's:
    // its ingress controller (Traefik, installed by `up --node`) serves it.
    let data = plane.state.join("pv-chart");
    std::fs::create_dir_all(&data).unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "node-chart-acme"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "hostPath": {"path": data.display().to_string()},
                    "claimRef": {"namespace": demo, "name": "data-acme-0"},
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), demo);
    let mut acme = instance("acme", "kura.local/kura-standin:1");
    acme["spec"]["region"] = json!("eu-west-1");
    acme["spec"]["gateway"] = json!({"mode": "Shared"});
    apply_json(&instances, "test", acme).await.unwrap();
    wait_ready(&instances, "acme").await;
    let demo_pods: Api<Pod> = Api::namespaced(client.clone(), demo);
    pod_ready_on_node(&demo_pods, "acme-0").await;

    // A force re-apply by annotation, as users do, reaches the in-cluster
    // operator and is acknowledged (without the operator running in its pod
    // nothing would ever acknowledge it).
    forced_and_acknowledged(&instances, "2026-12-01T00:00:00Z").await;

    // kill -9 of the operator's process in its container: the kubelet
    // restarts the container and the operator goes on reconciling.
    let kill = Command::new("pkill")
        .args(["-KILL", "-f", "^/kura-operator run"])
        .status()
        .unwrap();
    assert!(kill.success(), "no process of the operator's image to kill");
    wait_for(
        "the operator's container restarted and Ready",
        Duration::from_secs(120),
        || async {
            let list = pods.list(&Default::default()).await.ok()?.items;
            let pod = list.first()?;
            let status = pod.status.as_ref()?;
            let restarted = status.container_statuses.as_ref()?[0].restart_count >= 1;
            let ready = status
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (restarted && ready).then_some(())
        },
    )
    .await;
    forced_and_acknowledged(&instances, "2026-12-01T00:01:00Z").await;

    // helm upgrade with a changed region: the operator follows its ConfigMap
    // through the API (the chart's --config-map), not the volume the kubelet
    // refreshes on its own schedule (58.8 s measured when it read the file);
    // the latency from the upgrade to the applied change is printed.
    let before = instances
        .get("acme")
        .await
        .unwrap()
        .status
        .unwrap()
        .applied_revision;
    let upgraded = std::time::Instant::now();
    helm_upgrade_set(
        &plane,
        &chart,
        ns,
        "config.regions.eu-west-1.domain=upgraded.kura.example.com",
    );
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(client.clone(), demo);
    wait_for(
        "the upgraded region to be applied",
        Duration::from_secs(240),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let ingress = ingresses.get("acme").await.ok()?;
            let host = ingress.spec?.rules?.first()?.host.clone()?;
            (s.applied_revision != before && host.ends_with(".upgraded.kura.example.com"))
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "helm upgrade (region domain) to applied: {:.1} s",
        upgraded.elapsed().as_secs_f64()
    );

    // A helm upgrade that rolls the operator's pods (a pod label): the new
    // pod starts before the old one stops. With leader election (on by
    // default) only the Lease holder writes, so the instance is never written
    // by two processes: force tokens set all through the roll are applied by
    // one pod, then by the other, never interleaved (the audit log's source
    // IP of each write is the writing pod's).
    let rolled_at = jiff::Timestamp::now();
    let upgrade = {
        let (plane_state, chart, ns) = (plane.kubeconfig(), chart.to_string(), ns.to_string());
        tokio::task::spawn_blocking(move || {
            must_succeed(
                Command::new(crate::support::tool("helm"))
                    .arg("--kubeconfig")
                    .arg(plane_state)
                    .args(["upgrade", "kura", &chart, "-n", &ns, "--reuse-values"])
                    .args([
                        "--set",
                        "podLabels.rolled=once",
                        "--wait",
                        "--timeout",
                        "120s",
                    ]),
            );
        })
    };
    let mut tokens = 0;
    while !upgrade.is_finished() {
        tokens += 1;
        force(&instances, &format!("2026-12-01T00:01:{:02}Z", tokens % 60)).await;
        tokio::time::sleep(Duration::from_millis(500)).await; // the pace of the tokens
    }
    upgrade.await.unwrap();
    forced_and_acknowledged(&instances, "2026-12-01T00:01:59Z").await;
    let writers = operator_writers_since(&plane, &[demo], rolled_at);
    let switches = writers.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "rolling helm upgrade: {tokens} force tokens, {} writes to {demo}, writers in order: {:?}",
        writers.len(),
        writers.iter().fold(Vec::<&String>::new(), |mut v, w| {
            if v.last() != Some(&w) {
                v.push(w);
            }
            v
        })
    );
    assert!(
        switches <= 1,
        "one writer, then the other, never both: {switches} switches between writers"
    );

    // Two replicas with leader election: the leader's pod deleted, the other
    // takes over and reconciles (the Lease names the holder's pod).
    helm_upgrade_set(&plane, &chart, ns, "replicas=2");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    let holder = || async {
        let lease = leases.get("kura-operator").await.ok()?;
        lease.spec?.holder_identity
    };
    let (leader, standby) = wait_for(
        "a leader among two ready replicas",
        Duration::from_secs(120),
        || async {
            let names: Vec<String> = pods
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            let held = holder().await?;
            let leader = names
                .iter()
                .find(|n| held.starts_with(&format!("{n}-")))?
                .clone();
            let standby = names.into_iter().find(|n| *n != leader)?;
            Some((leader, standby))
        },
    )
    .await;
    pods.delete(&leader, &Default::default()).await.unwrap();
    // The standby, warm, normally wins; the leader's replacement pod may too.
    let successor = wait_for(
        "another replica to take the Lease",
        Duration::from_secs(120),
        || async {
            let held = holder().await?;
            (!held.starts_with(&format!("{leader}-"))).then_some(held)
        },
    )
    .await;
    eprintln!("leader {leader} deleted; standby {standby}; the Lease now held by {successor}");
    forced_and_acknowledged(&instances, "2026-12-01T00:02:00Z").await;

    // helm uninstall removes the operator, not what it manages: the instance,
    // its StatefulSet, its pod and its data stay.
    let pod_uid = demo_pods.get("acme-0").await.unwrap().metadata.uid;
    helm(
        &plane,
        &["uninstall", "kura", "-n", ns, "--wait", "--timeout", "120s"],
    );
    wait_empty(
        "the operator's pods to be gone",
        Duration::from_secs(120),
        &pods,
    )
    .await;
    assert!(
        instances.get_opt("acme").await.unwrap().is_some(),
        "the instance stays"
    );
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), demo);
    assert!(
        sts.get_opt("acme").await.unwrap().is_some(),
        "its StatefulSet stays"
    );
    assert_eq!(
        demo_pods.get("acme-0").await.unwrap().metadata.uid,
        pod_uid,
        "its pod keeps running"
    );
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), demo);
    assert!(
        claims.get_opt("data-acme-0").await.unwrap().is_some(),
        "its data stays"
    );
}

/// The source IPs (one per pod) of the operator's writes in `namespaces` since
/// `since`, in the order the apiserver received them (from the plane's audit
/// log; Events and Leases are left out).
fn operator_writers_since(
    plane: &PrivatePlane,
    namespaces: &[&str],
    since: jiff::Timestamp,
) -> Vec<String> {
    let text = crate::support::audit_text(&plane.kubeconfig().with_file_name("audit.log"));
    let mut writes: Vec<(jiff::Timestamp, String)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| {
            e["objectRef"]["namespace"]
                .as_str()
                .is_some_and(|ns| namespaces.contains(&ns))
        })
        .filter(|e| {
            !matches!(
                e["objectRef"]["resource"].as_str(),
                Some("events" | "leases")
            )
        })
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            )
        })
        .filter(|e| {
            e["user"]["username"]
                .as_str()
                .is_some_and(|u| u.starts_with("system:serviceaccount:") && u.contains("kura"))
        })
        .filter_map(|e| {
            let at = e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            let ip = e["sourceIPs"][0].as_str()?.to_string();
            (at >= since).then_some((at, ip))
        })
        .collect();
    writes.sort();
    writes.into_iter().map(|(_, ip)| ip).collect()
}

/// helm against `plane`; it must succeed.
fn helm(plane: &PrivatePlane, args: &[&str]) {
    must_succeed(
        Command::new(crate::support::tool("helm"))
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .args(args),
    );
}

/// `helm upgrade` of release `kura` in `ns`, its values kept but `setting`.
fn helm_upgrade_set(plane: &PrivatePlane, chart: &str, ns: &str, setting: &str) {
    helm(
        plane,
        &[
            "upgrade",
            "kura",
            chart,
            "-n",
            ns,
            "--reuse-values",
            "--set",
            setting,
            "--wait",
            "--timeout",
            "120s",
        ],
    );
}

/// Set the force annotation of `acme` to `token`.
async fn force(instances: &Api<KuraInstance>, token: &str) {
    instances
        .patch(
            "acme",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"kura.dev/reapply-at": token}}}),
            ),
        )
        .await
        .unwrap();
}

/// Set the force annotation to `token`; the operator acknowledges it in status.
async fn forced_and_acknowledged(instances: &Api<KuraInstance>, token: &str) {
    force(instances, token).await;
    wait_for(
        "the force re-apply to be acknowledged",
        Duration::from_secs(120),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            (s.last_handled_reapply_at.as_deref() == Some(token)).then_some(())
        },
    )
    .await;
}

mod backend;
mod founding;
mod ingress;
mod memory;
mod shards;
