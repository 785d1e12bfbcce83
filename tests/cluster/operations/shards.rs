//! Shards across replicas (issue 24.4 and 24.5) on planes of their own: the
//! operator watches every namespace there, and an instance's shard is its
//! namespace's. Each replica talks to the apiserver as a user of its own
//! (impersonated, in system:masters), so the audit log names who wrote what.
//! The caches are unfiltered (the label-free path: no `shardSelector`) on
//! these planes, except where a test starts its plane with the apiserver's
//! `ShardedListAndWatch` gate (failover's second test).

mod budget;
mod counts;
mod failover;
mod gateways;
mod hosts;
mod join;
mod ledger;
mod ledger_race;
mod pace;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::operator::{Operator, Options, fleet_config, instance};
use crate::support::*;
use futures::StreamExt;
use kube::runtime::watcher;
use kura_core::api::{KuraInstance, KuraInstanceStatus, Phase, RolloutState};
use kura_core::shard::Shards;

/// The chart's default.
const LEASE: Duration = Duration::from_secs(15);
const SHARDS: u32 = 4;
/// Where the Leases and ledgers live; also the operator's "namespace" flag
/// for its files (it watches every namespace).
const HOME: &str = "shards";

/// A plane with namespaces spread over the shards, and replicas on it.
struct Bench {
    name: String,
    plane: PrivatePlane,
    client: Client,
    /// `(namespace, shard)`, `per_shard` namespaces of each shard.
    namespaces: Vec<(String, u32)>,
    config: String,
    /// The replicas' `--resync`: long, so that what converges is shown to
    /// converge by its triggers (a take-over, a handover), not by a resync.
    resync: &'static str,
}

impl Bench {
    async fn start(name: &str, offset: u16, per_shard: usize, config: String) -> Bench {
        Bench::start_on(name, PrivatePlane::new(name, offset), per_shard, config).await
    }

    /// [`Bench::start`] on `plane`, not started yet (one with settings of its own).
    async fn start_on(name: &str, plane: PrivatePlane, per_shard: usize, config: String) -> Bench {
        plane.script(&["up"]);
        plane.install_crds();
        let client = plane.client().await;
        let shards = Shards::new(SHARDS).unwrap();
        let mut namespaces = Vec::new();
        for k in 0.. {
            let ns = format!("{name}-{k}");
            let shard = shards.of_namespace(&ns);
            if namespaces.iter().filter(|(_, s)| *s == shard).count() < per_shard {
                namespaces.push((ns, shard));
            }
            if namespaces.len() == per_shard * SHARDS as usize {
                break;
            }
        }
        for ns in namespaces.iter().map(|(n, _)| n.as_str()).chain([HOME]) {
            create(&client, &json!({"metadata": {"name": ns}})).await;
        }
        // Served by this plane's kura-sim, which plays the ingress controller.
        crate::operator::sim_class(&client, &format!("shared-{HOME}")).await;
        Bench {
            name: name.to_string(),
            plane,
            client,
            namespaces,
            config,
            resync: "10m",
        }
    }

    /// A replica named `name` (the audit log's user `replica-<name>`).
    fn replica(&self, name: &str) -> Operator {
        let options = Options {
            kubeconfig: Some(self.kubeconfig_of(name)),
            all_namespaces: true,
            lease_duration: Some(LEASE),
            // The files of each test's replicas apart (tests run at once).
            replica: Some(format!("{}-{name}", self.name)),
            resync: Some(self.resync.into()),
            args: vec![format!("--shards={SHARDS}")],
        };
        Operator::start_with(HOME, &self.config, &[], options)
    }

    /// The plane's admin kubeconfig, impersonating `replica-<name>` with the
    /// admin's powers.
    fn kubeconfig_of(&self, name: &str) -> PathBuf {
        let text = std::fs::read_to_string(self.plane.kubeconfig()).unwrap();
        let mut kc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        kc["users"][0]["user"]["as"] = format!("replica-{name}").into();
        kc["users"][0]["user"]["as-groups"] = serde_yaml::to_value(["system:masters"]).unwrap();
        let path = self.plane.state.join(format!("replica-{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&kc).unwrap()).unwrap();
        path
    }

    /// Replicas `a` and `b`, once each holds half the shards; the shards of
    /// each.
    async fn two_replicas(&self) -> (Operator, Operator, BTreeMap<String, BTreeSet<u32>>) {
        let a = self.replica("a");
        let b = self.replica("b");
        let half = SHARDS as usize / 2;
        let held = self
            .balanced(&[("a", &a, half), ("b", &b, half)], Duration::from_secs(90))
            .await;
        (a, b, held)
    }

    /// One instance per namespace ([`Bench::create_fleet`]), every one
    /// converged: their applied revisions.
    async fn converged_fleet(&self) -> BTreeMap<String, Option<String>> {
        self.create_fleet().await;
        self.converged(&Default::default(), Duration::from_secs(120))
            .await
    }

    /// kura-sim plays the kubelet: the pods of every namespace of the bench
    /// become Ready `delay` after they start, so a restart is seen.
    async fn delay_readiness(&self, delay: &str) {
        let patch = json!({"metadata": {"annotations": {"sim.kura.dev/ready-delay": delay}}});
        for (ns, _) in &self.namespaces {
            Api::<Namespace>::all(self.client.clone())
                .patch(ns, &Default::default(), &kube::api::Patch::Merge(&patch))
                .await
                .unwrap();
        }
    }

    fn instances(&self, ns: &str) -> Api<KuraInstance> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// One instance per namespace, `i-<k>` (its own host).
    async fn create_fleet(&self) {
        for (k, (ns, _)) in self.namespaces.iter().enumerate() {
            let body = instance(&format!("i-{k}"), "registry.example/kura:1.0.0");
            apply_json(&self.instances(ns), "test", body).await.unwrap();
        }
    }

    /// Every instance's status, by `namespace/name`.
    async fn statuses(&self) -> BTreeMap<String, KuraInstanceStatus> {
        let all: Api<KuraInstance> = Api::all(self.client.clone());
        crate::operator::statuses_by(&all, |i| {
            format!(
                "{}/{}",
                i.metadata.namespace.clone().unwrap_or_default(),
                i.metadata.name.clone().unwrap_or_default()
            )
        })
        .await
    }

    /// Every instance Ready on its desired revision, none on the revision
    /// it had in `before`, no rollout left; the applied revisions.
    async fn converged(
        &self,
        before: &BTreeMap<String, Option<String>>,
        timeout: Duration,
    ) -> BTreeMap<String, Option<String>> {
        wait_for("every instance to converge", timeout, || async {
            let all = self.statuses().await;
            let done = all.len() == self.namespaces.len()
                && all.iter().all(|(k, s)| {
                    s.phase == Some(Phase::Ready)
                        && s.applied_revision.is_some()
                        && s.applied_revision == s.desired_revision
                        && s.rollout.is_none()
                        && before.get(k).is_none_or(|old| *old != s.applied_revision)
                });
            done.then(|| {
                all.into_iter()
                    .map(|(k, s)| (k, s.applied_revision))
                    .collect()
            })
        })
        .await
    }

    /// The holder of each shard's Lease (`None`: free).
    async fn holders(&self) -> Vec<Option<String>> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), HOME);
        let mut out = Vec::new();
        for i in 0..SHARDS {
            let lease = leases
                .get_opt(&format!("kura-operator-shard-{i}"))
                .await
                .ok()
                .flatten();
            out.push(
                lease
                    .and_then(|l| l.spec?.holder_identity)
                    .filter(|h| !h.is_empty()),
            );
        }
        out
    }

    /// Waits until every shard is held, by the replicas in `counts` (name →
    /// how many shards), identified by their logs; returns the shards of each.
    async fn balanced(
        &self,
        replicas: &[(&str, &Operator, usize)],
        timeout: Duration,
    ) -> BTreeMap<String, BTreeSet<u32>> {
        wait_for("the shards to be balanced", timeout, || async {
            let holders = self.holders().await;
            let mut held: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for (i, h) in holders.iter().enumerate() {
                let h = h.as_deref()?;
                let (name, ..) = replicas.iter().find(|(_, op, _)| is(op, h))?;
                held.entry(name.to_string()).or_default().insert(i as u32);
            }
            let ok = replicas
                .iter()
                .all(|(name, _, n)| held.get(*name).map_or(0, |s| s.len()) == *n);
            ok.then_some(held)
        })
        .await
    }
}

/// Whether `identity` is `op`'s own (its log names the others too, as members).
fn is(op: &Operator, identity: &str) -> bool {
    op.log().contains(&format!("identity={identity} "))
}

async fn create(client: &Client, namespace: &serde_json::Value) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(namespace.clone()).unwrap(),
        )
        .await
        .unwrap();
}

/// The operator configuration: region r1 on the plane's shared class, with
/// pod memory `memory` (a change of it changes every pod template) and a
/// rollout section.
/// The rollout section of the budget's tests: one instance at a time.
const ONE_AT_A_TIME: &str = "  maxUnavailable: 1\n  progressDeadline: 10m\n";

/// Replicas `a` and `b` over a converged fleet at [`ONE_AT_A_TIME`], whose
/// restarted pods are Ready 2 s after they start (kura-sim), so that a change
/// of every pod template is paced by the budget; the applied revisions.
async fn paced(
    name: &str,
    offset: u16,
    per_shard: usize,
) -> (Bench, Operator, Operator, BTreeMap<String, Option<String>>) {
    let bench = Bench::start(
        name,
        offset,
        per_shard,
        fleet_config(HOME, "256Mi", ONE_AT_A_TIME),
    )
    .await;
    bench.delay_readiness("2s").await;
    let (a, b, _) = bench.two_replicas().await;
    let first = bench.converged_fleet().await;
    (bench, a, b, first)
}

/// The operator's change of every pod template (the pods' memory), given to
/// both replicas; when.
fn change_every_pod(a: &Operator, b: &Operator) -> Instant {
    let change = fleet_config(HOME, "320Mi", ONE_AT_A_TIME);
    let started = Instant::now();
    a.set_config(&change);
    b.set_config(&change);
    started
}

/// The `shardSelector` of each watch of `resource` (in every namespace) by
/// each replica, in the order they were made (`None`: unfiltered), from the
/// audit log of a plane that logs reads (`KURA_AUDIT_READS`).
fn watch_selectors(bench: &Bench, resource: &str) -> BTreeMap<String, Vec<Option<String>>> {
    let text = audit_text(&bench.plane.kubeconfig().with_file_name("audit.log"));
    let mut out: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for e in text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let Some(replica) = e["impersonatedUser"]["username"]
            .as_str()
            .and_then(|u| u.strip_prefix("replica-"))
        else {
            continue;
        };
        // A watch is logged when it starts and again when it ends: the start.
        if e["verb"] != "watch"
            || e["stage"] != "ResponseStarted"
            || e["objectRef"]["resource"] != resource
        {
            continue;
        }
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let selector = uri.split_once('?').and_then(|(_, q)| {
            q.split('&')
                .find_map(|p| p.strip_prefix("shardSelector="))
                .map(|v| {
                    let v = v.replace('+', " ");
                    percent_decode(&v)
                })
        });
        out.entry(replica.to_string()).or_default().push(selector);
    }
    out
}

/// `%XX` escapes decoded (the audit log keeps the request URI as sent).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One mutating request of a replica in the audit log.
#[derive(Debug)]
struct Write {
    replica: String,
    verb: String,
    /// When the apiserver received it (RFC 3339).
    at: String,
    /// `namespace/resource[/subresource]/name`.
    object: String,
    /// The apiserver's answer (0: none logged).
    code: i64,
}

impl Write {
    /// The apiserver answered it with success. A replica killed while its
    /// request is in flight gets no such answer: the apiserver gives up on
    /// a client that is gone (5xx in the log).
    fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// The replicas' mutating requests at or after `since` (RFC 3339) in the
/// namespaces of the bench, read from the plane's audit log.
fn writes(bench: &Bench, since: &str) -> Vec<Write> {
    let ours: BTreeSet<&str> = bench.namespaces.iter().map(|(n, _)| n.as_str()).collect();
    let text = audit_text(&bench.plane.kubeconfig().with_file_name("audit.log"));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| {
            let replica = e["impersonatedUser"]["username"]
                .as_str()?
                .strip_prefix("replica-")?;
            let o = &e["objectRef"];
            // A plane that logs reads too (KURA_AUDIT_READS) logs them here.
            if matches!(e["verb"].as_str()?, "get" | "list" | "watch") {
                return None;
            }
            let namespace = o["namespace"].as_str()?;
            let at = e["requestReceivedTimestamp"].as_str()?;
            if !ours.contains(namespace) || at < since || o["resource"] == "events" {
                return None;
            }
            let sub = o["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            Some(Write {
                replica: replica.to_string(),
                verb: e["verb"].as_str()?.to_string(),
                at: at.to_string(),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
                object: format!(
                    "{namespace}/{}{sub}/{}",
                    o["resource"].as_str()?,
                    o["name"].as_str()?
                ),
            })
        })
        .collect()
}

/// The objects (not statuses) written by more than one replica among `writes`
/// (writes the apiserver answered with success; the failure message lists
/// every request, answered or not).
fn written_twice(writes: &[Write]) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for w in writes
        .iter()
        .filter(|w| w.succeeded() && !w.object.contains("/status/"))
    {
        by.entry(w.object.clone())
            .or_default()
            .insert(w.replica.clone());
    }
    by.retain(|_, who| who.len() > 1);
    // Each such object's writes, in order, for the failure message: who,
    // which verb, when.
    by.into_keys()
        .map(|object| {
            let mut seen: Vec<String> = writes
                .iter()
                .filter(|w| w.object == object)
                .map(|w| format!("{} {} {} -> {}", w.at, w.replica, w.verb, w.code))
                .collect();
            seen.sort();
            (object, seen)
        })
        .collect()
}

/// Now, as the audit log writes it.
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Each instance's rollout record as a watch of the test sees it, with when.
type Timeline = Arc<Mutex<Vec<(Instant, String, Option<RolloutState>)>>>;

fn follow(client: Client) -> (Timeline, tokio::task::JoinHandle<()>) {
    let timeline: Timeline = Arc::default();
    let seen = timeline.clone();
    let task = tokio::spawn(async move {
        let all: Api<KuraInstance> = Api::all(client);
        let mut events = watcher(all, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let Ok(watcher::Event::Apply(i) | watcher::Event::InitApply(i)) = event else {
                continue;
            };
            let key = format!(
                "{}/{}",
                i.metadata.namespace.unwrap_or_default(),
                i.metadata.name.unwrap_or_default()
            );
            let state = i.status.and_then(|s| s.rollout).map(|r| r.state);
            seen.lock().unwrap().push((Instant::now(), key, state));
        }
    });
    (timeline, task)
}
