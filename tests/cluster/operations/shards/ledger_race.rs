//! The shared host ledger (`src/shards/ledger.rs`) against the real apiserver, as
//! a sharded replica uses it: one ConfigMap, written only with the
//! resourceVersion read. A replica's own concurrent reconciles take their
//! reservations one at a time on the copy it last wrote, so they never race
//! each other into 409s (the race that set the pace of a sharded create at
//! N=10,000), and those that waited for one write go in the next together;
//! two replicas still race, and of two grants of one host only one is ever
//! written, whether the two are in one replica's batch or in two replicas.

use std::collections::BTreeMap;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kura_core::claims::{Conflict, HostClaim};
use kura_core::shard::ledger::{self, DATA_KEY, Entry, HostReservation, Seen};
use kura_operator::shards::ledger::{Ledger, Ledgers};

use crate::support::*;

/// As many reservations at once as the operator's reconciles, twice over.
const AT_ONCE: usize = 32;
/// The ledgers' base name (the operator's is its Lease's).
const BASE: &str = "race";

/// The hosts ledger of a process of its own (a "replica").
fn replica(ns: &TestNamespace) -> Ledger {
    Ledgers::new(ns.client.clone(), &ns.name, BASE).hosts
}

/// Reserves `host` for the instance `uid` as `reconcile::execute` does.
async fn grant(ledger: &Ledger, host: &str, uid: &str) -> Result<Option<Conflict>, kube::Error> {
    let now = Timestamp::now();
    let reservation = HostReservation {
        uid: uid.to_string(),
        owner: format!("tenant/{uid}"),
        wanted: vec![HostClaim {
            host: host.to_string(),
            field: "spec.hosts[0]".to_string(),
        }],
        at: now,
    };
    // Every instance is in the cache: only the ledger decides here.
    let seen = |_: &Entry| Seen::Instance;
    ledger.reserve_hosts(now, seen, reservation).await
}

/// The ledger as written: host → uid.
async fn written(ns: &TestNamespace) -> BTreeMap<String, String> {
    let cm = ns
        .api::<ConfigMap>()
        .get(&format!("{BASE}-hosts"))
        .await
        .unwrap();
    let text = cm.data.unwrap_or_default().remove(DATA_KEY);
    ledger::parse(text.as_deref())
        .into_iter()
        .map(|e| (e.key, e.uid))
        .collect()
}

#[tokio::test]
async fn one_replicas_reservations_wait_for_each_other_not_for_conflicts() {
    let ns = TestNamespace::new("ledger-one").await;
    let ledger = replica(&ns);
    let hosts: Vec<(String, String)> = (0..AT_ONCE)
        .map(|i| (format!("h{i}.example.com"), format!("uid-{i}")))
        .collect();
    let results = join_all(hosts.iter().map(|(h, u)| grant(&ledger, h, u))).await;
    for r in &results {
        assert!(matches!(r, Ok(None)), "every host granted: {r:?}");
    }
    assert_eq!(
        ledger.refused(),
        0,
        "no reservation of one process refused another's"
    );
    // The first is written alone; all that waited for it, in one write.
    assert!(
        ledger.writes() <= 2,
        "{AT_ONCE} reservations in {} writes: those waiting are written together",
        ledger.writes()
    );
    let held = written(&ns).await;
    assert_eq!(held.len(), AT_ONCE, "every grant written: {held:?}");
    for (h, u) in &hosts {
        assert_eq!(held.get(h), Some(u));
    }

    // Negative control: the same reservations made by as many ledgers of one
    // name (a process each: what the reconciles of one process were before
    // they shared a copy and its lock) race, and are refused.
    let ns = TestNamespace::new("ledger-many").await;
    let ledgers: Vec<Ledger> = (0..AT_ONCE).map(|_| replica(&ns)).collect();
    let _ = join_all(
        hosts
            .iter()
            .zip(&ledgers)
            .map(|((h, u), ledger)| grant(ledger, h, u)),
    )
    .await;
    let refused: u64 = ledgers.iter().map(Ledger::refused).sum();
    eprintln!(
        "{AT_ONCE} reservations on one copy: 0 refused, {} writes; on {AT_ONCE} copies: {refused} refused",
        ledger.writes()
    );
    assert!(
        refused > 0,
        "uncoordinated writers of one ledger are refused"
    );
}

#[tokio::test]
async fn one_write_of_waiting_reservations_grants_a_host_once() {
    let ns = TestNamespace::new("ledger-batch").await;
    let ledger = replica(&ns);
    // Each instance asks for a host of its own and the one they share, all
    // waiting behind the first write.
    let asks: Vec<(String, String)> = (0..AT_ONCE)
        .map(|i| (format!("b{i}.example.com"), format!("uid-{i}")))
        .collect();
    let ledger = &ledger;
    let results = join_all(asks.iter().map(|(own, uid)| async move {
        let now = Timestamp::now();
        let claim = |host: &str, i: usize| HostClaim {
            host: host.to_string(),
            field: format!("spec.hosts[{i}]"),
        };
        let reservation = HostReservation {
            uid: uid.clone(),
            owner: format!("tenant/{uid}"),
            wanted: vec![claim(own, 0), claim("shared.example.com", 1)],
            at: now,
        };
        let seen = |_: &Entry| Seen::Instance;
        ledger.reserve_hosts(now, seen, reservation).await
    }))
    .await;
    let granted: Vec<&String> = asks
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Ok(None)))
        .map(|((_, uid), _)| uid)
        .collect();
    assert_eq!(
        granted.len(),
        1,
        "the shared host granted once: {granted:?}"
    );
    assert!(
        results.iter().all(|r| r.is_ok()),
        "the others were told of the conflict: {results:?}"
    );
    let held = written(&ns).await;
    assert_eq!(held.get("shared.example.com"), Some(granted[0]));
    // A reservation that lost one host wrote none of its others.
    assert_eq!(held.len(), 2, "only the winner's two hosts: {held:?}");
    assert!(ledger.writes() <= 2, "in {} writes", ledger.writes());
}

#[tokio::test]
async fn two_replicas_never_grant_one_host_twice() {
    let ns = TestNamespace::new("ledger-two").await;
    let (a, b) = (replica(&ns), replica(&ns));
    // Both have a copy: each one's next write is on a copy the other makes stale.
    grant(&a, "warm-a.example.com", "a-warm").await.unwrap();
    grant(&b, "warm-b.example.com", "b-warm").await.unwrap();

    let hosts: Vec<String> = (0..AT_ONCE / 2)
        .map(|i| format!("contested{i}.example.com"))
        .collect();
    let of = |ledger: &'static str| {
        let (a, b) = (&a, &b);
        let hosts = &hosts;
        async move {
            let l = if ledger == "a" { a } else { b };
            join_all(hosts.iter().enumerate().map(|(i, h)| async move {
                let uid = format!("{ledger}-{i}");
                (h.clone(), uid.clone(), grant(l, h, &uid).await)
            }))
            .await
        }
    };
    let (from_a, from_b) = tokio::join!(of("a"), of("b"));
    let held = written(&ns).await;
    for h in &hosts {
        let granted: Vec<&String> = from_a
            .iter()
            .chain(&from_b)
            .filter(|(host, _, r)| host == h && matches!(r, Ok(None)))
            .map(|(_, uid, _)| uid)
            .collect();
        assert_eq!(granted.len(), 1, "{h} granted exactly once: {granted:?}");
        assert_eq!(
            held.get(h),
            Some(granted[0]),
            "the grant is the one written"
        );
        let lost = from_a
            .iter()
            .chain(&from_b)
            .filter(|(host, _, r)| host == h && matches!(r, Ok(Some(_))))
            .count();
        assert_eq!(lost, 1, "the other replica was told of the conflict");
    }
    eprintln!(
        "two replicas: {} and {} writes refused by the other's",
        a.refused(),
        b.refused()
    );
    assert!(a.refused() + b.refused() > 0, "the replicas did race");
}

#[tokio::test]
async fn a_stale_copy_never_holds_a_host_back() {
    let ns = TestNamespace::new("ledger-stale").await;
    let (a, b) = (replica(&ns), replica(&ns));
    let host = "moving.example.com";
    assert!(grant(&a, host, "first").await.unwrap().is_none());
    // B's copy now shows the host held by "first" ...
    assert!(grant(&b, host, "second").await.unwrap().is_some());
    // ... and A ends that entry, which B's copy does not show.
    a.remove(host, "first").await.unwrap();
    assert_eq!(
        grant(&b, host, "second").await.unwrap().map(|c| c.0.len()),
        None,
        "the refusal made on the stale copy was made again on a fresh read"
    );
    assert_eq!(
        written(&ns).await.get(host).map(String::as_str),
        Some("second")
    );
}
