//! `helm upgrade`s that change `shards`, with the operator's pods really
//! running on the node: never two generations of the operator acting at once,
//! whatever the direction (1→2, 2→4, 4→2, 2→1).
//!
//! Writes are made to happen all through each upgrade (a force token on every
//! instance every half second), and the plane's audit log says who sent each
//! of the operator's writes (the source address is the writing pod's); the
//! pods seen during the upgrade say which generation (ReplicaSet) each address
//! belongs to. One generation, then the next, never back: at most one switch.
//! The negative control shows that the measurement sees two generations when
//! they do act at once: a rolling update whose new pod runs without leader
//! election. (A rolling update to another shard count, as the chart rolled
//! before it recreated its pods, no longer shows two writers: a replica
//! beside a live replica of another count acts for no shard and is not
//! Ready, so such a rollout waits instead.)

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::apps::v1::Deployment;

use super::*;

/// The namespaces of the instances: several, so that with 2 and 4 shards
/// they are spread over the shards.
const SPREAD: [&str; 4] = ["shards-n0", "shards-n1", "shards-n2", "shards-n3"];

/// A force token not used before in this test (a time, as users write one).
fn token(n: &mut i64) -> String {
    *n += 1;
    jiff::Timestamp::from_second(1_796_000_000 + *n)
        .unwrap()
        .to_string()
}

/// The operator's pods' addresses, each with its generation (the ReplicaSet's
/// pod-template-hash), added to `seen`.
async fn note_generations(pods: &Api<Pod>, seen: &mut BTreeMap<String, String>) {
    let Ok(list) = pods.list(&Default::default()).await else {
        return;
    };
    for pod in list.items {
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"))
            .cloned();
        let ip = pod.status.and_then(|s| s.pod_ip);
        if let (Some(hash), Some(ip)) = (hash, ip) {
            seen.insert(ip, hash);
        }
    }
}

/// Every instance acknowledges a new force token: some generation acts for
/// each of them.
async fn all_acknowledge(instances: &[Api<KuraInstance>], n: &mut i64) {
    for api in instances {
        let token = token(n);
        force(api, &token).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            let status = api.get("acme").await.ok().and_then(|i| i.status);
            if status
                .as_ref()
                .is_some_and(|s| s.last_handled_reapply_at.as_deref() == Some(token.as_str()))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the force token {token} in {:?} not acknowledged within 180 s: {status:?}",
                api.resource_url()
            );
            tokio::time::sleep(Duration::from_millis(200)).await; // polling
        }
    }
}

/// The generations of the operator's writes to the instances' namespaces
/// while `change` runs (and until every instance acknowledged a token after
/// it), in order, each run of one generation counted once.
async fn generations_through(
    plane: &PrivatePlane,
    pods: &Api<Pod>,
    instances: &[Api<KuraInstance>],
    n: &mut i64,
    change: impl Future<Output = ()>,
) -> Vec<String> {
    let since = jiff::Timestamp::now();
    let mut seen = BTreeMap::new();
    let mut change = std::pin::pin!(change);
    loop {
        note_generations(pods, &mut seen).await;
        for api in instances {
            force(api, &token(n)).await;
        }
        tokio::select! {
            () = &mut change => break,
            // The pace of the tokens, not a wait for anything.
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    note_generations(pods, &mut seen).await;
    all_acknowledge(instances, n).await;
    let mut runs: Vec<String> = Vec::new();
    for ip in operator_writers_since(plane, &SPREAD, since) {
        let generation = seen
            .get(&ip)
            .cloned()
            .unwrap_or_else(|| format!("unknown pod at {ip}"));
        if runs.last() != Some(&generation) {
            runs.push(generation);
        }
    }
    runs
}

/// `helm upgrade --reuse-values --set setting` of release `kura`, off the runtime.
async fn helm_upgrade(plane: &PrivatePlane, ns: &str, setting: &str) {
    let (kubeconfig, chart, ns, setting) = (
        plane.kubeconfig(),
        chart(),
        ns.to_string(),
        setting.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        must_succeed(
            Command::new(crate::support::tool("helm"))
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["upgrade", "kura", &chart, "-n", &ns, "--reuse-values"])
                .args(["--set", &setting, "--wait", "--timeout", "180s"]),
        );
    })
    .await
    .unwrap();
}

/// The operator's Deployment rolled so that two generations do act at once:
/// a rolling update whose new pod runs without leader election, the old pod
/// kept 20 s after the new one is ready. Waits for the rollout to complete.
async fn rolled_without_election(client: &Client, ns: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let mut deployment = deployments.get("kura-kura-operator").await.unwrap();
    let spec = deployment.spec.as_mut().unwrap();
    spec.strategy = Some(
        serde_json::from_value(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}}))
        .unwrap(),
    );
    spec.min_ready_seconds = Some(20);
    let container = &mut spec.template.spec.as_mut().unwrap().containers[0];
    let args = container.args.as_mut().unwrap();
    args.retain(|a| !a.starts_with("--leader-elect") && !a.starts_with("--lease-"));
    deployments
        .replace("kura-kura-operator", &PostParams::default(), &deployment)
        .await
        .unwrap();
    wait_for(
        "the rolling update to complete",
        Duration::from_secs(240),
        || async {
            let d = deployments.get("kura-kura-operator").await.ok()?;
            let s = d.status?;
            let want = d.spec?.replicas.unwrap_or(1);
            let done = s.observed_generation >= d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.replicas == Some(want)
                && s.available_replicas == Some(want);
            done.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn upgrades_that_change_shards_never_have_two_generations_acting_at_once() {
    require_node_host!();
    require_release_binary!();
    let _turn = NODE_LOCK.lock().await;
    let plane = NodePlane::up();
    let client = plane.client().await;
    let ns = "kura-system";
    operator_via_the_chart(&plane, &client, ns).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut instances = Vec::new();
    for spread in SPREAD {
        plane.namespace(&client, spread).await;
        let api: Api<KuraInstance> = Api::namespaced(client.clone(), spread);
        // The chart's example region; the pods need not run (no volume
        // here): the operator writes their status all the same.
        let mut acme = instance("acme", "kura.local/kura-standin:1");
        acme["spec"]["region"] = json!("eu-west-1");
        acme["spec"]["gateway"] = json!({"mode": "Shared"});
        // An account of its own: its host is its own.
        acme["spec"]["account"] = json!(format!("acme-{spread}"));
        apply_json(&api, "test", acme).await.unwrap();
        instances.push(api);
    }
    let mut n = 0;
    all_acknowledge(&instances, &mut n).await;

    for setting in [
        "shards=2,replicas=2",
        "shards=4",
        "shards=2",
        "shards=1,replicas=1",
    ] {
        let upgrade = helm_upgrade(&plane, ns, setting);
        let runs = generations_through(&plane, &pods, &instances, &mut n, upgrade).await;
        eprintln!("helm upgrade --set {setting}: writers' generations in order {runs:?}");
        assert!(
            runs.len() <= 2 && runs.iter().all(|g| !g.starts_with("unknown")),
            "{setting}: one generation, then the other, never both: {runs:?}"
        );
    }

    // The negative control: the measurement sees two generations when they
    // do act at once (a new pod without leader election, rolled beside the
    // old leader).
    let roll = rolled_without_election(&client, ns);
    let runs = generations_through(&plane, &pods, &instances, &mut n, roll).await;
    eprintln!(
        "a rolling update without election: {} runs of one generation, the first {:?}",
        runs.len(),
        &runs[..runs.len().min(6)]
    );
    assert!(
        runs.len() > 2,
        "the negative control: both generations write, interleaved: {runs:?}"
    );
}
