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
use kube::api::{Patch, PatchParams};
use kura_core::shard::ledger;

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
    let sampler = MostUnavailable::start(Api::all(bench.client.clone()), None);
    let started = change_every_pod(&a, &b);
    bench.converged(&first, Duration::from_secs(240)).await;
    let took = started.elapsed();
    let max = sampler.finish().await;
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

/// Well under the entries' TTL (60 s), which is how long an entry of a
/// paused or deleting instance dated now would hold the only slot, and far
/// under the 119 s one dated 59 s ahead held it (its age was taken as an
/// absolute value); a join and an admission on a loaded machine.
const PROMPT: Duration = Duration::from_secs(30);

/// Long enough to see how long the slot was held before the fix (119 s).
const MEASURE: Duration = Duration::from_secs(150);

/// The budget's ledger written by hand: an entry for each of `instances`
/// (`(key, uid)`), dated as `dated` in turn.
async fn write_ledger(bench: &Bench, instances: &[(String, String)], dated: &[Timestamp]) {
    let entries: Vec<serde_json::Value> = instances
        .iter()
        .zip(dated)
        .map(|((key, uid), at)| json!({"key": key, "uid": uid, "at": at.to_string()}))
        .collect();
    let ledgers: Api<ConfigMap> = Api::namespaced(bench.client.clone(), HOME);
    let _ = ledgers.delete(LEDGER, &Default::default()).await;
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": LEDGER},
        "data": {"entries": json!(entries).to_string()},
    });
    apply_json(&ledgers, "hand", body).await.unwrap();
}

/// How long after `started` the first of `keys` (`namespace/name`) was
/// admitted in `timeline`, waiting up to [`MEASURE`].
async fn first_admission(timeline: &Timeline, started: Instant, keys: &[String]) -> Duration {
    wait_for("an admission", MEASURE, || async {
        let timeline = timeline.lock().unwrap();
        timeline
            .iter()
            .find(|(at, key, s)| {
                *at >= started && keys.contains(key) && *s == Some(RolloutState::Admitted)
            })
            .map(|(at, ..)| at.duration_since(started))
    })
    .await
}

/// The budget's ledger's text now.
async fn ledger_text(bench: &Bench) -> String {
    let ledger = Api::<ConfigMap>::namespaced(bench.client.clone(), HOME)
        .get(LEDGER)
        .await
        .unwrap();
    let mut data = ledger.data.unwrap_or_default();
    data.remove("entries").unwrap_or_default()
}

/// Instance `i-<k>` patched with `patch`: its key (`namespace/i-<k>`) and
/// uid.
async fn patch_instance(bench: &Bench, k: usize, patch: &serde_json::Value) -> (String, String) {
    let api = bench.instances(&bench.namespaces[k].0);
    let patched = api
        .patch(
            &format!("i-{k}"),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .unwrap();
    let ns = patched.metadata.namespace.clone().unwrap();
    (format!("{ns}/i-{k}"), patched.metadata.uid.clone().unwrap())
}

/// The ledger's text names none of `instances`' uids.
async fn assert_left_out(bench: &Bench, instances: &[(String, String)]) {
    let text = ledger_text(bench).await;
    for (_, uid) in instances {
        assert!(!text.contains(uid.as_str()), "{text}");
    }
}

/// The entry and its kin, by hand, with the real uids of their
/// instances: an admission of a paused instance dated 59 s ahead, one of a
/// paused instance dated now, one of an instance being deleted (held by
/// someone else's finalizer) dated now. None holds the fleet's only slot:
/// the last instance's change is admitted at once.
#[tokio::test]
async fn entries_of_paused_or_deleting_instances_or_dated_ahead_hold_no_slot() {
    let (bench, a, b, _) = paced("shards-out", 38, 1).await;
    let ns = |k: usize| bench.namespaces[k].0.clone();
    let pause = json!({"spec": {"paused": true, "pause": {"by": "test", "reason": "a hold"}}});
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    let mut held = Vec::new();
    for (k, patch) in [(0, &pause), (1, &pause), (2, &hold)] {
        held.push(patch_instance(&bench, k, patch).await);
    }
    let deleting = bench.instances(&ns(2));
    deleting.delete("i-2", &Default::default()).await.unwrap();

    let now = Timestamp::now();
    let ahead = now + SignedDuration::from_secs(59);
    write_ledger(&bench, &held, &[ahead, now, now]).await;

    let (timeline, watch) = follow(bench.client.clone());
    let started = change_every_pod(&a, &b);
    let last = format!("{}/i-3", ns(3));
    let admitted = first_admission(&timeline, started, &[last]).await;
    watch.abort();
    eprintln!("the last instance admitted after {admitted:?}");
    assert!(
        admitted < PROMPT,
        "the entries of paused, deleting and future-dated admissions held the only slot: \
         the last instance admitted after {admitted:?}"
    );
    // Its admission's write left none of them in the ledger.
    assert_left_out(&bench, &held).await;
}

/// An entry dated more than the clocks' skew ahead is re-dated to the
/// reader's clock when it is read, even by a read that reserves nothing:
/// left as it was, it would count for a TTL from its own date. Here an entry
/// dated now holds the only slot for its TTL (60 s), as a replica's
/// admission would, and one dated 59 s ahead would hold it until 119 s; both
/// for instances the change does not restart (their own memory request).
/// The next admission comes when both end, a TTL after the first read.
#[tokio::test]
async fn an_entry_dated_ahead_is_re_dated_when_read_not_counted_later() {
    let (bench, a, b, _) = paced("shards-ahead", 39, 1).await;
    let ns = |k: usize| bench.namespaces[k].0.clone();
    // The fleet's change (the regions' default request) does not reach them.
    let own = json!({"spec": {"resources": {"requests": {"memory": "256Mi"}}}});
    let mut unchanged = Vec::new();
    for k in [0, 1] {
        unchanged.push(patch_instance(&bench, k, &own).await);
    }
    for k in [0, 1] {
        let api = bench.instances(&ns(k));
        wait_for(
            "its own request applied",
            Duration::from_secs(60),
            || async {
                let i = api.get(&format!("i-{k}")).await.ok()?;
                let s = i.status?;
                let done = s.phase == Some(Phase::Ready)
                    && s.observed_generation.is_some()
                    && s.observed_generation == i.metadata.generation
                    && s.applied_revision == s.desired_revision;
                done.then_some(())
            },
        )
        .await;
    }

    let now = Timestamp::now();
    let dated = [now, now + SignedDuration::from_secs(59)];
    write_ledger(&bench, &unchanged, &dated).await;

    let (timeline, watch) = follow(bench.client.clone());
    let started = change_every_pod(&a, &b);
    let changed = [2, 3].map(|k| format!("{}/i-{k}", ns(k)));
    let admitted = first_admission(&timeline, started, &changed).await;
    watch.abort();
    eprintln!("the first admission after {admitted:?}");
    assert!(
        admitted > Duration::from_secs(40),
        "the entry dated now held the slot for its TTL: the first admission after {admitted:?}"
    );
    assert!(
        admitted < ledger::TTL + PROMPT,
        "the entry dated ahead did not take the slot over: the first admission after {admitted:?}"
    );
    assert_left_out(&bench, &unchanged).await;
}
