use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use super::Gate;
use super::view::{Names, Seen, view_of};
use crate::leader::LeaderState;
use kura_core::shard::Shards;

fn gate(n: u32) -> Gate {
    Gate::new(Shards::new(n).unwrap())
}

/// A namespace of shard `i` of `n`.
fn namespace_of(n: u32, i: u32) -> String {
    let s = Shards::new(n).unwrap();
    (0..)
        .map(|k| format!("ns-{k}"))
        .find(|ns| s.of_namespace(ns) == i)
        .unwrap()
}

fn holds(g: &Gate, shard: u32) {
    g.set(&g.holding, shard, true);
    g.set_leased(shard, true);
}

#[tokio::test]
async fn work_runs_only_for_a_shard_this_process_acts_for() {
    let g = gate(4);
    let (mine, other) = (namespace_of(4, 1), namespace_of(4, 2));
    holds(&g, 1);
    assert!(g.acts_for(&mine) && !g.acts_for(&other));
    assert_eq!(g.run(&mine, async { 7 }).await, Some(7));
    let started = std::sync::atomic::AtomicBool::new(false);
    let work = async { started.store(true, std::sync::atomic::Ordering::SeqCst) };
    assert_eq!(g.run(&other, work).await, None);
    assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(g.label(&mine).as_deref(), Some("1/4"));
    assert_eq!(gate(1).label(&mine), None, "one shard: status as before");
}

#[tokio::test]
async fn work_in_flight_is_dropped_when_its_shards_lease_is_lost() {
    let g = gate(2);
    let ns = namespace_of(2, 0);
    holds(&g, 0);
    let (out, wrote) =
        work_racing_a_loss(|work| g.run(&ns, work), || g.set(&g.holding, 0, false)).await;
    assert_eq!(out, None);
    assert!(!wrote);
}

/// Work that would write once `lose` has run, run by `run` beside it: what
/// `run` returned and whether the work wrote.
async fn work_racing_a_loss<F>(
    run: impl FnOnce(futures::future::BoxFuture<'static, ()>) -> F,
    lose: impl FnOnce(),
) -> (Option<()>, bool)
where
    F: std::future::Future<Output = Option<()>>,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    let (step_tx, step_rx) = tokio::sync::oneshot::channel::<()>();
    let wrote = Arc::new(AtomicBool::new(false));
    let writer = wrote.clone();
    let work = Box::pin(async move {
        let _ = step_rx.await;
        writer.store(true, Ordering::SeqCst);
    });
    let lose = async {
        tokio::task::yield_now().await;
        lose();
        let _ = step_tx.send(());
    };
    let (out, ()) = tokio::join!(run(work), lose);
    (out, wrote.load(Ordering::SeqCst))
}

/// A handover waits for the work in flight: a shard is drained when the
/// last reconcile of it ends, not before.
#[tokio::test]
async fn a_shard_is_drained_only_when_its_work_in_flight_ends() {
    let g = Arc::new(gate(2));
    let ns = namespace_of(2, 1);
    holds(&g, 1);
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let g = g.clone();
        tokio::spawn(async move { g.run(&ns, async { end_rx.await.is_ok() }).await })
    };
    while g.busy.lock().unwrap().get(&1).copied().unwrap_or(0) == 0 {
        tokio::task::yield_now().await;
    }
    // Stopped acting: no new work, the running one goes on.
    g.set_leased(1, false);
    let drained = tokio::time::timeout(Duration::from_millis(50), g.drained(1)).await;
    assert!(drained.is_err(), "drained while work was in flight");
    end_tx.send(()).unwrap();
    assert_eq!(running.await.unwrap(), Some(true));
    tokio::time::timeout(Duration::from_secs(5), g.drained(1))
        .await
        .expect("drained once the work ended");
}

#[tokio::test]
async fn acquiring_a_shard_ticks_once_per_shard_gained() {
    let g = gate(4);
    let mut ticks = Box::pin(g.acquired());
    holds(&g, 0);
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .unwrap();
    holds(&g, 2);
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .unwrap();
    // Losing one is no tick.
    g.set_leased(2, false);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), ticks.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn one_shard_follows_the_single_lease() {
    let g = gate(1);
    g.follow(LeaderState {
        leading: true,
        healthy: true,
    });
    assert_eq!(g.acting(), BTreeSet::from([0]));
    assert!(g.acts_for("any"));
    g.follow(LeaderState {
        leading: false,
        healthy: true,
    });
    assert!(!g.acts_for("any"));
}

/// A cache the apiserver filters to the held shards holds a shard's objects
/// only once it has listed them: until every such cache has, the shard is
/// not acted for, however its Lease stands (a child missing from the cache
/// would be created again, an orphan left). Without the rule a leased shard
/// is acted for at once (the first assertion of the negative control).
#[tokio::test]
async fn a_leased_shard_is_acted_for_only_once_every_filtered_cache_listed_it() {
    let unfiltered = gate(4);
    holds(&unfiltered, 1);
    assert_eq!(
        unfiltered.acting(),
        BTreeSet::from([1]),
        "no filtered cache: at once"
    );

    let g = gate(4);
    let services = g.filtered_cache();
    let config_maps = g.filtered_cache();
    let mut ticks = std::pin::pin!(g.acquired());
    holds(&g, 1);
    holds(&g, 2);
    assert!(g.acting().is_empty(), "leased, not listed yet");
    g.set_listed(services, BTreeSet::from([1, 2]));
    assert!(g.acting().is_empty(), "one cache still listing");
    g.set_listed(config_maps, BTreeSet::from([1]));
    assert_eq!(g.acting(), BTreeSet::from([1]));
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .unwrap();
    g.set_listed(config_maps, BTreeSet::from([1, 2]));
    assert_eq!(g.acting(), BTreeSet::from([1, 2]));
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .expect("a shard listed later is acquired then: what passed meanwhile is reconciled");
    // A restarted watch lists anew: a shard it has not listed again is not
    // acted for, even while leased.
    g.set_listed(services, BTreeSet::from([2]));
    assert_eq!(g.acting(), BTreeSet::from([2]));
    // Losing the Lease stops acting at once, whatever the caches hold.
    g.set_leased(2, false);
    assert!(g.acting().is_empty());
}

fn lease(name: &str, holder: Option<&str>, rv: &str) -> Arc<Lease> {
    Arc::new(Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    })
}

/// Live members and holders by this process's own clock: a member that
/// stopped renewing leaves the view at two thirds of the duration, before
/// its shards' Leases expire at the whole duration; a long-dead member's
/// Lease is garbage.
#[test]
fn the_view_ages_leases_by_this_processs_clock() {
    let names = Names {
        base: "kura".into(),
    };
    let member_b = names.member("B_host-1");
    assert_eq!(member_b, "kura-member-b-host-1");
    let leases = vec![
        lease(&names.shard(0), Some("a"), "1"),
        lease(&names.shard(1), Some("b"), "2"),
        lease(&names.shard(2), Some(""), "3"),
        lease(&member_b, Some("b"), "4"),
        lease("unrelated", Some("x"), "5"),
    ];
    let mut seen = Seen::default();
    let t0 = Instant::now();
    // `leases` as listed `s` seconds after the first look, lease duration 15 s.
    let mut at = |leases: &[Arc<Lease>], s: u64| {
        let now = t0 + Duration::from_secs(s);
        view_of(
            leases,
            &mut seen,
            &names,
            3,
            "a",
            Duration::from_secs(15),
            now,
        )
    };
    let (v, stale) = at(&leases, 0);
    assert_eq!(v.members, BTreeSet::from(["a".into(), "b".into()]));
    assert_eq!(v.holders, [Some("a".into()), Some("b".into()), None]);
    assert!(stale.is_empty());
    // Nothing renewed for 11 s: b is no longer live, its shard still held.
    let (v, _) = at(&leases, 11);
    assert_eq!(v.members, BTreeSet::from(["a".into()]));
    assert_eq!(v.holders[1], Some("b".into()));
    // 15 s: its shard is free (and so is a's own, not renewed either).
    let (v, _) = at(&leases, 15);
    assert_eq!(v.holders, [None, None, None]);
    // A renewal (new resourceVersion) makes it fresh again.
    let renewed = vec![lease(&names.shard(1), Some("b"), "9")];
    let (v, _) = at(&renewed, 16);
    assert_eq!(v.holders[1], Some("b".into()));
    let (_, stale) = at(&leases[3..4], 61);
    assert_eq!(stale, [member_b]);
}

/// Held (an incompatible CRD): nothing runs, leased or not, work in flight
/// is dropped; released: the leased shards act again and `acquired` ticks,
/// so that what passed meanwhile is reconciled.
#[tokio::test]
async fn a_held_gate_acts_for_nothing_and_its_release_is_an_acquisition() {
    let g = gate(1);
    let ns = namespace_of(1, 0);
    g.follow(LeaderState {
        leading: true,
        healthy: true,
    });
    let mut ticks = std::pin::pin!(g.acquired());
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .unwrap();

    let (step_tx, step_rx) = tokio::sync::oneshot::channel::<()>();
    let wrote = std::sync::atomic::AtomicBool::new(false);
    let work = async {
        let _ = step_rx.await;
        wrote.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let hold = async {
        tokio::task::yield_now().await;
        g.hold(true);
        let _ = step_tx.send(());
    };
    let (out, ()) = tokio::join!(g.run(&ns, work), hold);
    assert_eq!(out, None, "work in flight is dropped");
    assert!(!wrote.load(std::sync::atomic::Ordering::SeqCst));
    assert!(!g.acts_for(&ns));
    assert_eq!(g.run(&ns, async { 1 }).await, None, "nothing starts");

    g.hold(false);
    assert!(g.acts_for(&ns));
    tokio::time::timeout(Duration::from_secs(5), ticks.next())
        .await
        .expect("released: everything is reconciled");
    assert_eq!(g.run(&ns, async { 2 }).await, Some(2));
}

/// Work that spans shards (the sweep of leftover classes) asks the gate
/// too, the one answer to "may I act?": it runs while one shard at least is
/// acted for, never on a held gate (an incompatible CRD), and is dropped in
/// flight when the last shard goes.
#[tokio::test]
async fn work_across_shards_runs_only_while_one_is_acted_for() {
    let g = gate(2);
    assert!(!g.acts_for_any());
    assert_eq!(g.run_while_acting(async { 1 }).await, None, "a standby");
    holds(&g, 1);
    assert!(g.acts_for_any());
    assert_eq!(g.run_while_acting(async { 2 }).await, Some(2));
    g.hold(true);
    assert_eq!(g.run_while_acting(async { 3 }).await, None, "held");
    g.hold(false);

    let (out, wrote) = work_racing_a_loss(
        |work| g.run_while_acting(work),
        || {
            g.set(&g.holding, 1, false);
            g.set_leased(1, false);
        },
    )
    .await;
    assert_eq!(out, None, "dropped when the last shard goes");
    assert!(!wrote);
}
