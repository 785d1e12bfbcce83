//! The fleet budget bounds the whole fleet, not each shard: two replicas,
//! four shards, `maxUnavailable: 1`, a change of every pod template; never
//! more than one StatefulSet unavailable at once across all namespaces,
//! though both replicas admit.

use std::time::Duration;

use super::*;

#[tokio::test]
async fn the_budget_bounds_the_whole_fleet_across_replicas() {
    let (bench, a, b, first) = paced("shards-budget", 32, 2).await;
    let sampler = MostUnavailable::start(Api::all(bench.client.clone()), None);
    let since = now();
    let started = change_every_pod(&a, &b);
    bench.converged(&first, Duration::from_secs(300)).await;
    let max = sampler.finish().await;
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
