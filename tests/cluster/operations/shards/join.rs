//! A third replica joining two takes its share of the shards: the others
//! hand those over gracefully (stop, drain, release) and keep theirs, so only
//! the shards that move pause, and only for the handover.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::*;

#[tokio::test]
async fn a_joining_replica_takes_shards_without_a_pause_of_the_others() {
    let bench = Arc::new(
        Bench::start(
            "shards-join",
            31,
            1,
            fleet_config(HOME, "256Mi", "  maxUnavailable: 1\n"),
        )
        .await,
    );
    let (_a, _b, before) = bench.two_replicas().await;
    bench.converged_fleet().await;
    let identities = bench.holders().await;

    // Samples the holders every 100 ms: how long each shard went without one,
    // and which shards changed hands.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (bench, stop) = (bench.clone(), stop.clone());
        tokio::spawn(async move {
            let mut free_since: Vec<Option<Instant>> = vec![None; SHARDS as usize];
            let mut longest = Duration::ZERO;
            let mut moved = BTreeSet::new();
            let first = bench.holders().await;
            while !stop.load(Ordering::Relaxed) {
                let now = bench.holders().await;
                for (i, h) in now.iter().enumerate() {
                    if h.is_none() {
                        let since = *free_since[i].get_or_insert_with(Instant::now);
                        longest = longest.max(since.elapsed());
                    } else {
                        free_since[i] = None;
                        if *h != first[i] {
                            moved.insert(i as u32);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (longest, moved)
        })
    };
    let c = bench.replica("c");
    // Four over three: 2, 1 and 1.
    let after = wait_for("c to hold a shard", Duration::from_secs(90), || async {
        let holders = bench.holders().await;
        let c_holds = holders.iter().flatten().filter(|h| is(&c, h)).count();
        (c_holds == 1 && holders.iter().all(Option::is_some)).then_some(holders)
    })
    .await;
    // Settled: nothing moves once balanced.
    tokio::time::sleep(LEASE / 3).await;
    assert_eq!(
        bench.holders().await,
        after,
        "a balanced fleet moves nothing"
    );
    stop.store(true, Ordering::Relaxed);
    let (longest, moved) = sampler.await.unwrap();
    eprintln!(
        "a third replica joined: shards {moved:?} moved, the longest without a holder {longest:?}; before {before:?}"
    );
    assert_eq!(
        moved.len(),
        1,
        "only the shard c took changed hands: {moved:?} ({identities:?} → {after:?})"
    );
    assert!(
        longest < Duration::from_secs(3),
        "a handover is a release and an immediate take, far below the lease duration: {longest:?}"
    );

    // The shard c took is c's now: an edit there is applied by c.
    let shard = *moved.iter().next().unwrap();
    let (k, (ns, _)) = bench
        .namespaces
        .iter()
        .enumerate()
        .find(|(_, (_, s))| *s == shard)
        .unwrap();
    let since = now();
    let edit = instance(&format!("i-{k}"), "registry.example/kura:1.1.0");
    apply_json(&bench.instances(ns), "test", edit)
        .await
        .unwrap();
    wait_for(
        "the edit to be applied",
        Duration::from_secs(60),
        || async {
            let w = writes(&bench, &since);
            w.iter()
                .any(|w| w.replica == "c" && w.object.contains("statefulsets"))
                .then_some(())
        },
    )
    .await;
    let w = writes(&bench, &since);
    assert!(
        w.iter().all(|w| w.replica == "c"),
        "only c writes its shard: {w:?}"
    );
}
