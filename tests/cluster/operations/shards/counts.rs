//! Replicas started with different `--shards` on the same Leases map
//! namespaces to shards differently: shard 1 of 2 and shard 3 of 4 share
//! namespaces, so each would act for namespaces the other acts for. Every
//! Lease carries its replica's count (`kura.dev/shard-count`), and a sharded
//! replica acts for no shard while it sees a live replica of another count.
//!
//! Both counts stop, not just the newcomer: neither can know which count is
//! meant (a rollout that changes `--shards` starts the new count beside the
//! old), so the fleet acts for nothing, not ready and saying why in its log,
//! until one count is gone; then the other resumes. An unsharded replica
//! (`--shards 1`, its single Lease) has no planner: it leads as before, and a
//! sharded replica beside it stands aside.

use std::time::Duration;

use super::*;

const REFUSAL: &str = "replicas with another --shards are live on these Leases";

/// A replica named `name` with `--shards=shards` on the bench's Leases.
fn replica_of(bench: &Bench, name: &str, shards: u32) -> Operator {
    let options = Options {
        kubeconfig: Some(bench.kubeconfig_of(name)),
        all_namespaces: true,
        lease_duration: Some(LEASE),
        replica: Some(format!("{}-{name}", bench.name)),
        resync: Some(bench.resync.into()),
        args: vec![format!("--shards={shards}")],
    };
    Operator::start_with(HOME, &bench.config, &[], options)
}

/// Whether `op` holds a Lease (`kura_leader`) and answers `/readyz` 200.
async fn leading_and_ready(op: &Operator) -> Option<(bool, bool)> {
    let leading = op.metric("kura_leader").await? == 1.0;
    let ready = op.get("/readyz").await?.0 == 200;
    Some((leading, ready))
}

/// `op` refuses: it logged why, leads nothing, and is not ready.
async fn refuses(op: &Operator) -> bool {
    op.log().contains(REFUSAL) && leading_and_ready(op).await == Some((false, false))
}

/// The instances whose status names a shard of `count` (`i/count`).
async fn labelled_of(bench: &Bench, count: u32) -> Vec<String> {
    let suffix = format!("/{count}");
    let all = bench.statuses().await;
    all.into_iter()
        .filter(|(_, s)| s.shard.as_deref().is_some_and(|x| x.ends_with(&suffix)))
        .map(|(k, s)| format!("{k}: {}", s.shard.unwrap_or_default()))
        .collect()
}

/// The bench's instance `k` on image `tag` (an edit of its pods).
async fn edit(bench: &Bench, k: usize, tag: &str) {
    let ns = &bench.namespaces[k].0;
    let body = instance(&format!("i-{k}"), &format!("registry.example/kura:{tag}"));
    apply_json(&bench.instances(ns), "test", body)
        .await
        .unwrap();
}

/// Every instance of namespace `k` converged from its revision in `first`.
async fn converged_in(bench: &Bench, first: &BTreeMap<String, Option<String>>, k: usize) {
    let mut before = first.clone();
    before.retain(|key, _| key.starts_with(&format!("{}/", bench.namespaces[k].0)));
    bench.converged(&before, Duration::from_secs(90)).await;
}

#[tokio::test]
async fn replicas_of_two_shard_counts_act_for_nothing_until_one_count_is_gone() {
    let bench = Bench::start(
        "shards-count",
        41,
        1,
        fleet_config(HOME, "256Mi", "  maxUnavailable: 100%\n"),
    )
    .await;
    let a = replica_of(&bench, "a", 2);
    wait_for(
        "a to hold both its shards",
        Duration::from_secs(90),
        || async {
            let holders = bench.holders().await;
            let both = holders[..2]
                .iter()
                .all(|h| h.as_deref().is_some_and(|h| is(&a, h)));
            (both && leading_and_ready(&a).await == Some((true, true))).then_some(())
        },
    )
    .await;
    let first = bench.converged_fleet().await;
    assert_eq!(
        labelled_of(&bench, 2).await.len(),
        bench.namespaces.len(),
        "a names its shards of 2"
    );

    // B, another count on the same Leases: it never acts, and a stops too.
    let since_b = now();
    let mut b = replica_of(&bench, "b", 4);
    wait_for(
        "b to refuse, or to act",
        Duration::from_secs(60),
        || async {
            let acted = !labelled_of(&bench, 4).await.is_empty()
                || writes(&bench, &since_b).iter().any(|w| w.replica == "b");
            (acted || refuses(&b).await).then_some(())
        },
    )
    .await;
    let by_b: Vec<_> = writes(&bench, &since_b)
        .into_iter()
        .filter(|w| w.replica == "b")
        .collect();
    let of_4 = labelled_of(&bench, 4).await;
    assert!(
        by_b.is_empty() && of_4.is_empty(),
        "b, of another count, acted: it wrote {by_b:?}; statuses of shards of 4: {of_4:?}"
    );
    wait_for("a to refuse too", Duration::from_secs(60), || async {
        refuses(&a).await.then_some(())
    })
    .await;
    // Both stopped: an edit now is applied by nobody while both run.
    let since_edit = now();
    edit(&bench, 0, "1.1.0").await;
    let watched = Instant::now();
    while watched.elapsed() < LEASE {
        let by_b: Vec<_> = writes(&bench, &since_b)
            .into_iter()
            .filter(|w| w.replica == "b")
            .collect();
        assert!(by_b.is_empty(), "b, of another count, wrote: {by_b:?}");
        let of_4 = labelled_of(&bench, 4).await;
        assert!(of_4.is_empty(), "statuses of shards of 4: {of_4:?}");
        let after_edit = writes(&bench, &since_edit);
        assert!(
            after_edit.is_empty(),
            "a wrote beside a live replica of another count: {after_edit:?}"
        );
        assert!(refuses(&b).await, "b acts for no shard, not ready");
        assert!(refuses(&a).await, "a acts for no shard, not ready");
        tokio::time::sleep(Duration::from_millis(500)).await; // the sampling period
    }
    let held = bench.holders().await;
    assert!(
        held.iter().all(Option::is_none),
        "no shard Lease held: {held:?}"
    );

    // B gone: a resumes, and applies the edit made meanwhile.
    b.terminate();
    b.wait_exit(Duration::from_secs(30)).await;
    converged_in(&bench, &first, 0).await;
    assert_eq!(leading_and_ready(&a).await, Some((true, true)));
    let w = writes(&bench, &since_b);
    assert!(w.iter().all(|w| w.replica == "a"), "only a wrote: {w:?}");
    assert!(w.iter().any(|w| w.object.contains("statefulsets")));
    assert!(labelled_of(&bench, 4).await.is_empty());

    // An unsharded replica (its single Lease) beside a: c leads as before,
    // a stands aside. They may overlap until a has seen c's Lease: nothing
    // orders the single Lease and the shards' Leases.
    let mut c = replica_of(&bench, "c", 1);
    wait_for(
        "c to lead and a to stand aside",
        Duration::from_secs(90),
        || async {
            let c_leads = leading_and_ready(&c).await == Some((true, true));
            let a_refusals = a.log().matches(REFUSAL).count();
            (c_leads && a_refusals >= 2 && refuses(&a).await).then_some(())
        },
    )
    .await;
    let since_c = now();
    edit(&bench, 1, "1.1.0").await;
    converged_in(&bench, &first, 1).await;
    let w = writes(&bench, &since_c);
    assert!(w.iter().all(|w| w.replica == "c"), "only c wrote: {w:?}");
    assert!(w.iter().any(|w| w.object.contains("statefulsets")));
    assert!(refuses(&a).await, "a still stands aside");

    // C gone: a resumes.
    c.terminate();
    c.wait_exit(Duration::from_secs(30)).await;
    let since_a = now();
    edit(&bench, 2, "1.1.0").await;
    converged_in(&bench, &first, 2).await;
    let w = writes(&bench, &since_a);
    assert!(w.iter().all(|w| w.replica == "a"), "only a wrote: {w:?}");
    assert_eq!(leading_and_ready(&a).await, Some((true, true)));
}
