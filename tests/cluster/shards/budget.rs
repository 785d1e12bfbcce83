//! The fleet budget bounds the whole fleet, not each shard: two replicas,
//! four shards, `maxUnavailable: 1`, a change of every pod template; never
//! more than one StatefulSet unavailable at once across all namespaces,
//! though both replicas admit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;

use super::*;

/// StatefulSets of the whole plane not fully Ready now.
async fn unavailable(client: &Client) -> Option<usize> {
    let list = Api::<StatefulSet>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    let down = list.items.iter().filter(|s| {
        let want = s.spec.as_ref().and_then(|x| x.replicas).unwrap_or(1);
        let status = s.status.clone().unwrap_or_default();
        status.ready_replicas.unwrap_or(0) < want || status.updated_replicas.unwrap_or(0) < want
    });
    Some(down.count())
}

#[tokio::test]
async fn the_budget_bounds_the_whole_fleet_across_replicas() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10m\n";
    let bench = Bench::start("shards-budget", 32, 2, fleet_config("256Mi", rollout)).await;
    for (ns, _) in &bench.namespaces {
        let patch = json!({"metadata": {"annotations": {"sim.kura.dev/ready-delay": "2s"}}});
        Api::<Namespace>::all(bench.client.clone())
            .patch(ns, &Default::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let a = bench.replica("a");
    let b = bench.replica("b");
    bench
        .balanced(&[("a", &a, 2), ("b", &b, 2)], Duration::from_secs(90))
        .await;
    bench.create_fleet().await;
    let first = bench
        .converged(&Default::default(), Duration::from_secs(120))
        .await;

    let max = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (max, stop, client) = (max.clone(), stop.clone(), bench.client.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Some(n) = unavailable(&client).await {
                    max.fetch_max(n, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await; // the sampling period
            }
        })
    };
    let since = now();
    let change = fleet_config("320Mi", rollout);
    let started = Instant::now();
    a.set_config(&change);
    b.set_config(&change);
    bench.converged(&first, Duration::from_secs(300)).await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let max = max.load(Ordering::Relaxed);
    let n = bench.namespaces.len();
    eprintln!(
        "maxUnavailable 1 over {n} instances in 4 shards on 2 replicas: {:?}, at most {max} unavailable at once",
        started.elapsed()
    );
    assert_eq!(
        max, 1,
        "the budget bounds the fleet, not each replica's part of it"
    );
    // Both replicas admitted and applied (each its own shards).
    let w = writes(&bench, &since);
    for r in ["a", "b"] {
        assert!(
            w.iter()
                .any(|w| w.replica == r && w.object.contains("statefulsets")),
            "{r} applied some of the change: {w:?}"
        );
    }
    let twice = written_twice(&w);
    assert!(
        twice.is_empty(),
        "objects written by both replicas: {twice:?}"
    );
}
