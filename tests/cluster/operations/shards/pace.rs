//! A sharded rollout at `maxUnavailable: 1` is paced by the restarts, not by
//! rechecks: when an instance leaves the budget, the next in line (in
//! whichever shard) is admitted at once. Its admission's entry in the shared
//! ledger ends before the status write that wakes the next in line; were it
//! ended after, the woken instance would find the slot taken and wait for a
//! recheck (issue 24: 8 instances took 163 s).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kura_core::api::RolloutState;

use super::*;

/// Longer than any handover of a slot takes on a loaded machine (a status
/// write seen by a watch, a ledger read and write, a status write), far
/// shorter than the recheck a refused admission waits for.
const HANDOVER: Duration = Duration::from_secs(8);

/// The handovers of the slot in `timeline`: from each instance leaving
/// Admitted, while another waits, to the next admission.
fn handovers(timeline: &[(Instant, String, Option<RolloutState>)]) -> Vec<Duration> {
    let mut state: BTreeMap<&str, Option<RolloutState>> = BTreeMap::new();
    let mut freed: Option<Instant> = None;
    let mut out = Vec::new();
    for (at, key, now) in timeline {
        let was = state.insert(key, *now).flatten();
        if was == Some(RolloutState::Admitted) && *now != Some(RolloutState::Admitted) {
            let waiting = state.values().any(|s| *s == Some(RolloutState::Waiting));
            freed = waiting.then_some(*at);
        }
        if *now == Some(RolloutState::Admitted)
            && was != Some(RolloutState::Admitted)
            && let Some(since) = freed.take()
        {
            out.push(at.duration_since(since));
        }
    }
    out
}

#[tokio::test]
async fn the_next_in_line_is_admitted_as_soon_as_a_slot_frees() {
    // As in `budget`, where 8 instances took 163 s before.
    let (bench, a, b, first) = paced("shards-pace", 34, 2).await;
    let refused = || {
        let taken = kura_operator::reconcile::execute::SLOT_TAKEN;
        a.log().matches(taken).count() + b.log().matches(taken).count()
    };
    let before = refused();

    let (timeline, watch) = follow(bench.client.clone());
    let started = change_every_pod(&a, &b);
    // The bug's pace (a recheck per instance) would take minutes.
    bench.converged(&first, Duration::from_secs(400)).await;
    let took = started.elapsed();
    watch.abort();
    let timeline = timeline.lock().unwrap().clone();
    let gaps = handovers(&timeline);
    let n = bench.namespaces.len();
    eprintln!(
        "maxUnavailable 1 over {n} instances in 4 shards on 2 replicas: {took:?}; handovers {gaps:?}"
    );
    // One slot, so every instance but the first was handed it.
    assert_eq!(gaps.len(), n - 1, "{timeline:?}");
    // The next in line is woken by the status write that frees the slot; had
    // the ledger still counted the one that left, its admission would be
    // refused and wait for a recheck.
    assert_eq!(
        refused() - before,
        0,
        "no admission of the next in line is refused: handovers {gaps:?}"
    );
    let waits: Vec<&Duration> = gaps.iter().filter(|g| **g > HANDOVER).collect();
    assert!(
        waits.is_empty(),
        "every handover of the slot is immediate, none waits for a recheck: {gaps:?}"
    );
}
