//! The operator's memory at 200 instances, where the kernel enforces the
//! chart's limit: the operator runs from its image via the chart on the node,
//! and its container's memory cgroup records the peak.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, PostParams};
use kura_core::api::KuraInstance;
use serde_json::json;

use super::{NODE_LOCK, NodePlane, chart, operator_via_the_chart};
use crate::operator::instance;
use crate::support::{apply_json, wait_for};

const FLEET: usize = 200;

/// A StorageClass whose provisioner nobody runs, binding at once: see below.
const UNPROVISIONED: &str = "kura-test-unprovisioned";

/// At 200 instances the operator in its pod stays under the memory limit of
/// the chart's values (issue 14.4): the peak its container's memory cgroup
/// recorded, from the container's start through the apply of the 200
/// instances, is below the limit, the cgroup never hit the limit (failcnt 0),
/// and the container never restarted (an OOM kill restarts it). Negative
/// control: with the limit in values.yaml below what the operator needs, the
/// kernel reclaims at the limit, then kills the process; the peak equals the
/// limit, failcnt grows and restartCount is at least 1: each assertion fails.
///
/// The instances' pods do not run: 200 real pods are more than this 2-core
/// node holds, and the operator never reads a pod (it follows its
/// StatefulSets). Their claims are of a class whose provisioner nobody runs,
/// with no volume bound in advance, so the scheduler keeps every pod Pending
/// (unbound immediate PersistentVolumeClaims): each object the operator
/// renders, applies, caches and reports on exists as for a running instance;
/// only no container starts. The test checks that no fleet pod reached the node.
#[tokio::test]
async fn operator_memory_stays_under_the_charts_limit_at_200_instances() {
    require_node_host!();
    require_release_binary!();
    let limit = chart_memory_limit();
    let _turn = NODE_LOCK.lock().await;
    let plane = NodePlane::up();
    let client = plane.client().await;
    let system = "kura-system";
    let operator = operator_via_the_chart(&plane, &client, system).await;
    let operator_name = operator.metadata.name.clone().unwrap();

    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": UNPROVISIONED},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let fleet = "node-fleet";
    plane.namespace(&client, fleet).await;
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), fleet);
    let started = Instant::now();
    for i in 0..FLEET {
        // The chart's example region; Shared, as no gateway image can run here.
        let mut fleet_instance = instance(&format!("fleet-{i:03}"), "kura.local/kura-standin:1");
        fleet_instance["spec"]["region"] = json!("eu-west-1");
        fleet_instance["spec"]["gateway"] = json!({"mode": "Shared"});
        fleet_instance["spec"]["storage"]["class"] = json!(UNPROVISIONED);
        apply_json(&instances, "test", fleet_instance)
            .await
            .unwrap();
    }
    // From the watch cache (resourceVersion 0): polling costs the apiserver little.
    let cached = ListParams::default().match_any();
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), system);
    wait_for(
        "every instance's desired revision applied",
        Duration::from_secs(600),
        || async {
            // An OOM kill fails the test at once, with its reason.
            let container = operator_container(&system_pods, &operator_name).await?;
            assert_eq!(
                container.restart_count, 0,
                "the operator's container restarted: {:?}",
                container.last_state
            );
            let list = instances.list(&cached).await.ok()?;
            let applied = list
                .items
                .iter()
                .filter_map(|i| i.status.as_ref())
                .filter(|s| {
                    s.desired_revision.is_some() && s.applied_revision == s.desired_revision
                })
                .count();
            (applied == FLEET).then_some(())
        },
    )
    .await;
    let converged = started.elapsed();

    let pods: Api<Pod> = Api::namespaced(client.clone(), fleet);
    wait_for(
        "every fleet pod created and left unschedulable",
        Duration::from_secs(300),
        || async {
            let list = pods.list(&cached).await.ok()?;
            let unschedulable = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()))
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.status == "False"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
                })
                .count();
            (list.items.len() == FLEET && unschedulable == FLEET).then_some(())
        },
    )
    .await;

    let container = operator_container(&system_pods, &operator_name)
        .await
        .expect("the operator's container status");
    let id = container
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("the operator's container ID");
    let memory = ContainerMemory::read(id);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "operator memory at {FLEET} instances (applied in {:.1} s): peak {:.1} MiB of the chart's \
         {:.0} MiB limit ({}); now {:.1} MiB, of which rss {:.1} MiB; the process's VmHWM {}; \
         limit hit {} times; restarts {}",
        converged.as_secs_f64(),
        mib(memory.peak),
        mib(limit),
        memory.source,
        mib(memory.usage),
        mib(memory.rss),
        memory.high_water_mark,
        memory.limit_hits,
        container.restart_count,
    );
    assert_eq!(
        memory.limit, limit,
        "the kernel enforces the chart's limit on the operator's container"
    );
    assert_eq!(
        container.restart_count, 0,
        "the operator's container was restarted (OOM-killed?): {container:?}"
    );
    assert_eq!(
        memory.limit_hits, 0,
        "the container's memory reached the limit"
    );
    assert!(
        memory.peak < limit,
        "peak {} bytes, limit {limit} bytes",
        memory.peak
    );
}

async fn operator_container(pods: &Api<Pod>, name: &str) -> Option<ContainerStatus> {
    let pod = pods.get(name).await.ok()?;
    pod.status?.container_statuses?.into_iter().next()
}

/// `resources.limits.memory` of the chart's values.yaml, in bytes.
fn chart_memory_limit() -> u64 {
    let values = Path::new(&chart()).join("values.yaml");
    let values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&values).unwrap()).unwrap();
    let limit = values["resources"]["limits"]["memory"]
        .as_str()
        .expect("values.yaml: resources.limits.memory");
    memory_bytes(limit).unwrap_or_else(|| panic!("values.yaml: memory limit {limit:?}"))
}

/// Bytes of a memory quantity with a binary suffix or none (what the chart uses).
fn memory_bytes(quantity: &str) -> Option<u64> {
    let units = [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)];
    for (suffix, factor) in units {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<u64>().ok()?.checked_mul(factor);
        }
    }
    quantity.parse().ok()
}

/// What a container's memory cgroup says, cgroup v1 (this machine: the
/// kubelet's cgroupfs driver puts the memory controller's tree under
/// /sys/fs/cgroup/memory/kubepods) or v2.
struct ContainerMemory {
    /// The highest usage since the container started (v1 memory.max_usage_in_bytes,
    /// v2 memory.peak): every byte charged to it, page cache included.
    peak: u64,
    usage: u64,
    /// Anonymous memory now.
    rss: u64,
    limit: u64,
    /// Times the usage reached the limit (v1 memory.failcnt, v2 `max` in memory.events).
    limit_hits: u64,
    source: &'static str,
    /// VmHWM of the container's first process (the operator): its peak
    /// resident set, file pages of the binary included, for comparison with
    /// the host-process figures of docs/benchmarks.md.
    high_water_mark: String,
}

impl ContainerMemory {
    fn read(container_id: &str) -> ContainerMemory {
        let v1 = Path::new("/sys/fs/cgroup/memory/kubepods");
        let (root, v2) = if v1.is_dir() {
            (v1.to_path_buf(), false)
        } else {
            (PathBuf::from("/sys/fs/cgroup/kubepods"), true)
        };
        let dir = find_dir(&root, container_id, 4).unwrap_or_else(|| {
            panic!(
                "no cgroup of container {container_id} under {}",
                root.display()
            )
        });
        let file = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
        };
        let number = |name: &str| file(name).trim().parse::<u64>().unwrap();
        let high_water_mark = file("cgroup.procs")
            .lines()
            .next()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
                Some(line.trim_start_matches("VmHWM:").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let stat = |text: String, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {key} in {}", dir.display()))
        };
        if v2 {
            ContainerMemory {
                peak: number("memory.peak"),
                usage: number("memory.current"),
                rss: stat(file("memory.stat"), "anon"),
                limit: number("memory.max"),
                limit_hits: stat(file("memory.events"), "max"),
                source: "cgroup v2 memory.peak",
                high_water_mark,
            }
        } else {
            ContainerMemory {
                peak: number("memory.max_usage_in_bytes"),
                usage: number("memory.usage_in_bytes"),
                rss: stat(file("memory.stat"), "rss"),
                limit: number("memory.limit_in_bytes"),
                limit_hits: number("memory.failcnt"),
                source: "cgroup v1 memory.max_usage_in_bytes",
                high_water_mark,
            }
        }
    }
}

/// The directory named `name` at most `depth` levels under `root`.
fn find_dir(root: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name() == name {
            return Some(path);
        }
        if depth > 1
            && let Some(found) = find_dir(&path, name, depth - 1)
        {
            return Some(found);
        }
    }
    None
}
