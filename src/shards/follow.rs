//! The campaigns of a sharded fleet: this replica's membership Lease, one
//! campaign per shard, the planner that says which shards to want, and the
//! follower of each shard that keeps the [`Gate`] in step with its Lease.

// A writer module (docs/architecture.md, "Who writes"):
// it writes this replica's membership and shard Leases.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::watch;

use super::Gate;
use super::view::{Names, Seen, other_counts, view_of};
use crate::leader::{self, LeaderState, LeaseSettings};
use kura_core::keys::{LABEL_SHARD_COUNT, LABEL_SHARDS_OF};

/// Campaigns for this replica's shards until `release` resolves, keeping
/// `gate` in step and `leader` saying whether it holds any shard (the
/// leader gauge, `/readyz`); then gives every Lease up and deletes its
/// membership. Call `release` only after the controllers have stopped.
pub async fn coordinate(
    client: kube::Client,
    base: LeaseSettings,
    gate: Arc<Gate>,
    leader: watch::Sender<LeaderState>,
    release: impl std::future::Future<Output = ()>,
) {
    let names = Names {
        base: base.name.clone(),
    };
    let n = gate.shards().count();
    let labels: std::collections::BTreeMap<String, String> = [
        (LABEL_SHARDS_OF.to_string(), base.name.clone()),
        (LABEL_SHARD_COUNT.to_string(), n.to_string()),
    ]
    .into();
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let member = LeaseSettings {
        name: names.member(&base.identity),
        labels: labels.clone(),
        // Membership decides no writes.
        fence: None,
        ..base.clone()
    };
    let (member_state, membership) = watch::channel(LeaderState::default());
    let mut campaigns =
        vec![leader::campaign(client.clone(), member.clone(), member_state, stopped()).boxed()];
    let shards = (0..n)
        .map(|i| shard(i, &client, &base, &names, &labels, &gate, stopped()))
        .collect::<Vec<_>>();
    let mut intents = Vec::new();
    let mut followers = Vec::new();
    let mut states = Vec::new();
    for (campaign, follower, intent, state) in shards {
        campaigns.push(campaign);
        followers.push(follower);
        intents.push(intent);
        states.push(state);
    }
    let api: Api<Lease> = Api::namespaced(client, &base.namespace);
    let planner = plan_loop(
        api.clone(),
        &names,
        &base,
        intents,
        states,
        membership,
        leader,
    );
    tokio::pin!(release);
    // The campaigns run until told to stop, then give their Leases up.
    let mut campaigns = std::pin::pin!(futures::future::join_all(campaigns));
    let mut ended = false;
    tokio::select! {
        _ = &mut release => {}
        _ = futures::future::join_all(followers) => {}
        _ = planner => {}
        _ = &mut campaigns => ended = true,
    }
    gate.release_all();
    let _ = stop_tx.send(true);
    if !ended {
        campaigns.await;
    }
    delete_membership(&api, &member.name).await;
}

/// Shard `i`'s campaign (while the planner wants it) and the follower that
/// keeps `gate` in step with its Lease; the planner's intent for it, and its
/// Lease's state.
fn shard(
    i: u32,
    client: &kube::Client,
    base: &LeaseSettings,
    names: &Names,
    labels: &std::collections::BTreeMap<String, String>,
    gate: &Arc<Gate>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> (
    futures::future::BoxFuture<'static, ()>,
    futures::future::BoxFuture<'static, ()>,
    watch::Sender<bool>,
    watch::Receiver<LeaderState>,
) {
    let (intent_tx, intent_rx) = watch::channel(false);
    let (want_tx, want_rx) = watch::channel(false);
    let (state_tx, state_rx) = watch::channel(LeaderState::default());
    let settings = LeaseSettings {
        name: names.shard(i),
        labels: labels.clone(),
        fence: base.fence.as_ref().map(|(fence, _)| (fence.clone(), i)),
        ..base.clone()
    };
    let campaign =
        leader::campaign_while_wanted(client.clone(), settings, state_tx, want_rx, stopped);
    let follower = follow_shard(
        i,
        gate.clone(),
        intent_rx,
        state_rx.clone(),
        want_tx,
        base.duration,
    );
    (campaign.boxed(), follower.boxed(), intent_tx, state_rx)
}

/// Deletes this replica's membership Lease as it leaves; the others delete
/// it once stale when that fails.
async fn delete_membership(api: &Api<Lease>, name: &str) {
    let params = DeleteParams::default();
    let gone = api.delete(name, &params);
    if let Err(e) = tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .unwrap_or_else(|_| Err(kube::Error::Service("timed out".into())))
    {
        tracing::warn!(error = %e, lease = %name, "could not delete the membership lease; the others delete it once stale");
    }
}

/// Watches the fleet's Leases and sets each shard's intent from
/// `shard::plan`; publishes whether this replica holds any shard.
async fn plan_loop(
    api: Api<Lease>,
    names: &Names,
    base: &LeaseSettings,
    intents: Vec<watch::Sender<bool>>,
    mut states: Vec<watch::Receiver<LeaderState>>,
    membership: watch::Receiver<LeaderState>,
    leader: watch::Sender<LeaderState>,
) {
    let (store, writer) = reflector::store();
    let config = watcher::Config::default().labels(&format!("{LABEL_SHARDS_OF}={}", names.base));
    let mut events = std::pin::pin!(
        reflector::reflector(writer, watcher(api.clone(), config).default_backoff())
            .touched_objects()
    );
    let mut planner = Planner::default();
    // Plan only from a listed view: an empty one would want every shard.
    tokio::select! {
        _ = store.wait_until_ready() => {}
        _ = events.by_ref().for_each(|_| std::future::ready(())) => return,
    }
    loop {
        let stale = planner.plan(&store.state(), names, base, &intents);
        delete_stale(&api, &store, stale).await;
        let holds = states.iter().any(|s| s.borrow().leading);
        // Healthy while this replica can renew its membership (`/readyz`)
        // and is not refusing to act beside another count.
        let healthy = membership.borrow().healthy && planner.refused_beside.is_empty();
        leader.send_if_modified(|s| {
            let now = LeaderState {
                leading: holds,
                healthy,
            };
            std::mem::replace(s, now) != now
        });
        let changed = futures::future::select_all(states.iter_mut().map(|s| Box::pin(s.changed())));
        tokio::select! {
            event = events.next() => if event.is_none() { return },
            _ = changed => {}
            _ = tokio::time::sleep(base.retry_period()) => {}
        }
    }
}

/// What the planning remembers between rounds.
#[derive(Default)]
struct Planner {
    seen: Seen,
    planned: Option<std::collections::BTreeSet<u32>>,
    /// The other shard counts this replica refuses to act beside.
    refused_beside: std::collections::BTreeSet<u32>,
}

impl Planner {
    /// Plans from the Leases as listed and tells each shard's intent whether
    /// it is wanted; returns the stale member Leases to delete.
    fn plan(
        &mut self,
        leases: &[std::sync::Arc<Lease>],
        names: &Names,
        base: &LeaseSettings,
        intents: &[watch::Sender<bool>],
    ) -> Vec<String> {
        let count = intents.len() as u32;
        let (view, stale) = view_of(
            leases,
            &mut self.seen,
            names,
            count,
            &base.identity,
            base.duration,
            Instant::now(),
        );
        let others = other_counts(
            leases,
            &mut self.seen,
            names,
            count,
            &base.identity,
            base.duration,
            Instant::now(),
        );
        // Another count maps namespaces to shards another way: acting beside
        // it, two replicas would act for one namespace. Nothing is wanted
        // until every live replica has this count.
        let wanted = if others.is_empty() {
            kura_core::shard::plan(&view, &base.identity)
        } else {
            Default::default()
        };
        if others != self.refused_beside {
            if !others.is_empty() {
                tracing::error!(shards = count, others = ?others, lease = %names.base, "replicas with another --shards are live on these Leases: acting for no shard until they are gone; run every replica with one count");
            }
            self.refused_beside = others;
        }
        if self.planned.as_ref() != Some(&wanted) {
            tracing::info!(identity = %base.identity, members = ?view.members, wanted = ?wanted, "shards planned");
            self.planned = Some(wanted.clone());
        }
        for (i, intent) in intents.iter().enumerate() {
            intent.send_if_modified(|w| {
                std::mem::replace(w, wanted.contains(&(i as u32))) != wanted.contains(&(i as u32))
            });
        }
        stale
    }
}

/// Deletes the stale Leases `stale`, each only as it was judged stale: a
/// member that renewed it since (a replica that was stopped, not dead) keeps it.
async fn delete_stale(api: &Api<Lease>, store: &reflector::Store<Lease>, stale: Vec<String>) {
    for name in stale {
        let seen = store
            .state()
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|l| l.metadata.resource_version.clone());
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: seen,
                uid: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &params).await;
    }
}

/// Keeps `gate` in step with shard `i`'s Lease and hands the shard over
/// when the planner stops wanting it: stop starting work, wait for the work
/// in flight (at most `duration`, then drop it), then let the campaign
/// release the Lease.
async fn follow_shard(
    i: u32,
    gate: Arc<Gate>,
    mut intent: watch::Receiver<bool>,
    mut lease: watch::Receiver<LeaderState>,
    want: watch::Sender<bool>,
    duration: Duration,
) {
    loop {
        let wanted = *intent.borrow_and_update();
        let holding = lease.borrow_and_update().leading;
        gate.set(&gate.holding, i, holding);
        if wanted {
            want.send_replace(true);
            gate.set_leased(i, holding);
        } else if *want.borrow() {
            gate.set_leased(i, false);
            if holding {
                tokio::select! {
                    _ = gate.drained(i) => {}
                    _ = lease.wait_for(|s| !s.leading) => {}
                    _ = tokio::time::sleep(duration) => gate.set(&gate.holding, i, false),
                }
            }
            tracing::info!(shard = i, "handing the shard over");
            want.send_replace(false);
            continue;
        }
        tokio::select! {
            changed = intent.changed() => if changed.is_err() { return },
            changed = lease.changed() => if changed.is_err() { return },
        }
    }
}
