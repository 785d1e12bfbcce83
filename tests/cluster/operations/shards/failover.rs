//! Two replicas × four shards: every instance converges and each shard has
//! one holder; one replica killed (-9) during a fleet change: its shards are
//! taken over within the lease duration, every instance converges, and no
//! object is written by both replicas. Once with the caches unfiltered (the
//! label-free path, every apiserver), once on a plane whose apiserver filters
//! them to the held shards (`ShardedListAndWatch`): there the survivor's
//! caches lack the killed one's shards until it has listed them anew, and
//! it must not act for them before.

use std::time::{Duration, Instant};

use super::*;

#[tokio::test]
async fn two_replicas_share_the_shards_and_a_killed_ones_are_taken_over_during_a_fleet_change() {
    let bench = Bench::start("shards-fail", 30, 2, fleet_config(HOME, "256Mi", ROLLOUT)).await;
    let filtered = failover(&bench).await;
    assert!(!filtered, "this plane's apiserver has no shard filter");
}

#[tokio::test]
async fn with_the_apiservers_shard_filter_a_killed_replicas_shards_are_listed_then_taken_over() {
    let gates = [
        ("KURA_FEATURE_GATES", "ShardedListAndWatch=true".to_string()),
        ("KURA_AUDIT_READS", "1".to_string()),
    ];
    let config = fleet_config(HOME, "256Mi", ROLLOUT);
    let bench = Bench::start_on(
        "shards-srv",
        PrivatePlane::with_env("shards-srv", 34, gates.into()),
        2,
        config,
    )
    .await;
    assert!(
        failover(&bench).await,
        "the replicas use the apiserver's shard filter"
    );
    // Each replica's watches of a shard-local kind asked for the shards it
    // held at the time and no others: the last before the kill for its
    // half, the survivor's last for all four (no selector at all).
    let selectors = watch_selectors(&bench, "services");
    let a = &selectors["a"];
    let b = &selectors["b"];
    assert!(
        a.iter().any(|s| s
            .as_deref()
            .is_some_and(|s| s.matches("shardRange").count() == 2)),
        "a watched its two shards once balanced: {a:?}"
    );
    assert!(
        b.iter().any(|s| s
            .as_deref()
            .is_some_and(|s| s.matches("shardRange").count() == 2)),
        "b watched two shards once balanced: {b:?}"
    );
    assert_eq!(
        b.last(),
        Some(&None),
        "holding every shard after the take-over, b watches unfiltered: {b:?}"
    );
}

const ROLLOUT: &str = "  maxUnavailable: 100%\n";

/// The scenario; whether the replicas used the apiserver's shard filter.
async fn failover(bench: &Bench) -> bool {
    // kura-sim plays the kubelet: restarted pods are Ready after a while, so
    // the fleet change is still under way when a replica is killed.
    bench.delay_readiness("3s").await;
    let (mut a, b, held) = bench.two_replicas().await;
    let filtered = a.metric("kura_shards_filtered_by_server").await == Some(1.0);
    assert_eq!(
        b.metric("kura_shards_filtered_by_server").await == Some(1.0),
        filtered,
        "both replicas filter the same way"
    );
    let first = bench.converged_fleet().await;

    // Each instance names its shard, and was written by its shard's holder only.
    let statuses = bench.statuses().await;
    for (k, (ns, shard)) in bench.namespaces.iter().enumerate() {
        let s = &statuses[&format!("{ns}/i-{k}")];
        assert_eq!(
            s.shard.as_deref(),
            Some(format!("{shard}/{SHARDS}").as_str()),
            "{ns}"
        );
    }
    let creation = writes(bench, "");
    for w in &creation {
        let ns = w.object.split('/').next().unwrap();
        let shard = bench.namespaces.iter().find(|(n, _)| n == ns).unwrap().1;
        assert!(
            held[&w.replica].contains(&shard),
            "{w:?} written by a replica not holding shard {shard}: {held:?}"
        );
    }
    assert!(creation.iter().any(|w| w.replica == "a") && creation.iter().any(|w| w.replica == "b"));

    // The fleet change, then kill -9 of `a` while it is under way.
    let change = fleet_config(HOME, "320Mi", ROLLOUT);
    let since = now();
    a.set_config(&change);
    b.set_config(&change);
    wait_for("the change to start", Duration::from_secs(60), || async {
        let all = bench.statuses().await;
        all.iter()
            .any(|(k, s)| first.get(k).is_some_and(|old| *old != s.applied_revision))
            .then_some(())
    })
    .await;
    a.kill();
    let killed = Instant::now();
    let killed_at = now();
    let taken = bench.balanced(&[("b", &b, 4)], LEASE * 2).await;
    let taken_over = killed.elapsed();
    bench.converged(&first, Duration::from_secs(120)).await;
    let converged = killed.elapsed();
    eprintln!(
        "kill -9 of a replica holding {:?} during a fleet change (lease {LEASE:?}): its shards taken over after {taken_over:?}, the fleet converged after {converged:?}",
        held["a"]
    );
    assert_eq!(taken["b"].len(), SHARDS as usize);
    // A standby waits the lease duration by its own clock, plus one retry
    // period to notice and a little to write.
    assert!(
        taken_over <= LEASE + LEASE / 6 + Duration::from_secs(3),
        "taken over within the lease duration: {taken_over:?}"
    );
    // The instances of a's shards were reconciled when b took them (no
    // resync needed): the whole change took about one restart after that.
    assert!(
        converged <= taken_over + Duration::from_secs(45),
        "converged soon after the take-over: {converged:?}"
    );
    let during = writes(bench, &since);
    // What the kill cut off: requests of `a` the apiserver did not answer
    // with success. Such a request may not have landed, so `b` sending the
    // object again is no second write (and if it had landed, `b`'s caches
    // would show the revision's stamp and `b` would not send it).
    for w in during.iter().filter(|w| !w.succeeded()) {
        let again = during
            .iter()
            .filter(|o| o.object == w.object && o.replica != w.replica && o.succeeded())
            .count();
        eprintln!(
            "answered without success during the change: {w:?}; written by the other replica since: {again}"
        );
    }
    assert!(during.iter().any(|w| w.replica == "b"));
    let twice = written_twice(&during);
    assert!(
        twice.is_empty(),
        "objects written by both replicas (a killed at {killed_at}): {twice:#?}"
    );
    filtered
}
