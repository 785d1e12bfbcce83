//! The shared ledger is not a trusted store: whoever may write its ConfigMap
//! can forge entries, and a replica may die holding one. Here the budget's
//! ledger is written by hand before a fleet change, as a hostile or careless
//! hand would: an admission for an instance that never existed, one for an
//! earlier instance of a live instance's name (deleted since), one dated an
//! hour ahead, and the ConfigMap made immutable. The fleet change is still
//! bounded by the budget, starts at once (the forged entries hold no slot),
//! and converges (an immutable ledger is replaced, not retried forever).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::*;

/// The budget's ledger (`shards/ledger.rs`): `<lease>-budget` beside the Leases.
const LEDGER: &str = "kura-operator-budget";

/// Well under the entries' TTL (60 s), which is how long a forged admission
/// would otherwise hold the only slot; over the 10 s an entry for an instance
/// no cache shows still counts (`shard::ledger::UNSEEN`: the ghost's, dated
/// now), plus a join and an admission.
const FIRST_ADMISSION: Duration = Duration::from_secs(30);

async fn forge(bench: &Bench) {
    let now = Timestamp::now();
    let entry =
        |key: &str, uid: &str, at: Timestamp| json!({"key": key, "uid": uid, "at": at.to_string()});
    let (ns, _) = &bench.namespaces[0];
    let entries = json!([
        entry("gone/ghost", "00000000-0000-0000-0000-000000000001", now),
        entry(
            &format!("{ns}/i-0"),
            "00000000-0000-0000-0000-000000000002",
            now
        ),
        entry(
            "gone/later",
            "00000000-0000-0000-0000-000000000003",
            now + SignedDuration::from_hours(1)
        ),
    ]);
    let ledgers: Api<ConfigMap> = Api::namespaced(bench.client.clone(), HOME);
    let _ = ledgers.delete(LEDGER, &Default::default()).await;
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": LEDGER},
        "immutable": true,
        "data": {"entries": entries.to_string()},
    });
    apply_json(&ledgers, "hand", body).await.unwrap();
}

#[tokio::test]
async fn a_forged_ledger_neither_breaks_the_budget_nor_wedges_the_rollout() {
    let (bench, a, b, first) = paced("shards-ledger", 36, 1).await;

    forge(&bench).await;
    let (timeline, watch) = follow(bench.client.clone());
    let sampler = MostUnavailable::start(bench.client.clone());
    let started = change_every_pod(&a, &b);
    bench.converged(&first, Duration::from_secs(240)).await;
    let took = started.elapsed();
    let max = sampler.stop().await;
    watch.abort();
    let admitted = timeline
        .lock()
        .unwrap()
        .iter()
        .find(|(at, _, s)| *at >= started && *s == Some(RolloutState::Admitted))
        .map(|(at, ..)| at.duration_since(started));
    eprintln!(
        "with a forged ledger: the first admission after {admitted:?}, converged after {took:?}, at most {max} unavailable"
    );
    assert_eq!(max, 1, "the budget still bounds the fleet");
    let admitted = admitted.expect("the change admitted instances");
    assert!(
        admitted < FIRST_ADMISSION,
        "the forged entries held no slot: the first admission after {admitted:?}"
    );
    // The ledger was replaced, and holds none of the forged entries.
    let ledger = Api::<ConfigMap>::namespaced(bench.client.clone(), HOME)
        .get(LEDGER)
        .await
        .unwrap();
    assert_ne!(ledger.immutable, Some(true));
    let text = ledger.data.unwrap_or_default().remove("entries");
    assert!(
        !text.as_deref().unwrap_or_default().contains("00000000-"),
        "{text:?}"
    );
}
