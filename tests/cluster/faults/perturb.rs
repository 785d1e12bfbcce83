//! The perturbation harness: generated fleets and edits (the preview
//! property test's generator), each step carried out while what the
//! operator sees, and when it runs, is disturbed; then oracles that need no
//! knowledge of the case.
//!
//! Two replicas with leader election on a control plane of their own: `a`
//! talks to the apiserver through a proxy (`api_proxy`) that counts its
//! writes and plays the perturbations, `b` directly, as a standby. Per step,
//! after the edit, one of:
//! - **crash before / after write k**: `a` is killed (SIGKILL) just before
//!   its k-th write of the step reaches the apiserver, or just after, and
//!   started again (a crash between two API calls of a pass);
//! - **stall at write k**: `a` is stopped (SIGSTOP) just after its k-th
//!   write, past its Lease; `b` takes over and finishes; `a` is continued;
//! - **stale view**: the watch events of one API reach `a` late;
//! - **lost events**: at write k every watch of `a` ends and the next are
//!   answered 410 Gone (a list replaces the events in between);
//! - **standby stall and a Lease deleted by hand**: `b` is stopped past a
//!   lease duration, the Lease is deleted, `b` is continued.
//!
//! Oracles, for every step: the fleet converges (`diff -A` has nothing left
//! to write or delete, the state the same edits reach undisturbed, since
//! `diff` is computed from the spec and configuration alone); no write
//! leaves `a` after it resumed past its Lease; never two leaders at once;
//! objects that are not the operator's (a ConfigMap and a Service beside
//! each fleet) are never deleted or replaced; no instance says Ready for
//! longer than two resyncs while its StatefulSet has no available pod (after
//! convergence, and once more after the test, playing the kubelet, takes one
//! Ready instance's pods out of service); and
//! what both replicas wrote to the fleet's children after the edit is what
//! `diff` predicted before it (the edit and the prediction are made with
//! both replicas stopped, as in the preview property test): exactly; after
//! a kill or a stop in the middle of the step, the same objects and actions
//! with an update sent again allowed (the successor cannot know what its
//! predecessor sent of a forced wave), never an object more or one less.
//!
//! `KURA_PERTURB_SEED` replays a run (every failure names it);
//! `KURA_PERTURB_CASES` sets the number of steps (default 24; the longer
//! job: `KURA_PERTURB_CASES=60 cargo test --test cluster -- faults::perturb::`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use k8s_openapi::api::networking::v1::IngressClass;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::faults::api_proxy::{ApiProxy, Trap};
use crate::operator::{Operator, Options, wait_role};

use crate::preview::preview_truth::property::{
    Instance, Region, Rng, apply_instance, config, edit,
};
use crate::preview::preview_truth::{
    CLASSES, Writes, audited_writes, nothing_to_change, predicted, written,
};
use crate::support::{PrivatePlane, scratch_dir, wait_for};
use kura_core::api::{KuraInstance, Phase};

/// Short, so that a stall past it takes seconds: a holder stops writing
/// 3.9 s after its last renewal, a standby takes over after 6 s.
const LEASE: Duration = Duration::from_secs(6);
const INSTANCES: usize = 3;
const STEPS_PER_FLEET: usize = 4;
/// The namespace of the Leases.
const HOME: &str = "perturb";

/// The APIs whose watch events can reach `a` late.
const LAGGED: [&str; 4] = [
    "/statefulsets",
    "/ingresses",
    "/kurainstances",
    "/configmaps",
];

#[derive(Clone, Copy, Debug)]
enum Perturbation {
    Crash { at: usize, when: Trap },
    Stall { at: usize },
    Lag { api: &'static str, delay_ms: u64 },
    LostEvents { at: usize },
    StandbyStallLeaseDeleted,
}

/// The write points a crash is played at, in turn: before and after each of
/// the first writes of a step (a pass writes its children in two waves, its
/// status and an Event: seven points cover the first wave and more).
const CRASH_POINTS: usize = 7;

impl Perturbation {
    /// The kind drawn; a crash at the next write point of the enumeration
    /// (`crashes` played so far), before then after it.
    fn random(rng: &mut Rng, crashes: &mut usize) -> Perturbation {
        let at = 1 + rng.below(4);
        let kind = rng.below(6);
        if kind < 2 {
            let n = *crashes;
            *crashes += 1;
            let when = if (n / CRASH_POINTS).is_multiple_of(2) {
                Trap::Before
            } else {
                Trap::After
            };
            return Perturbation::Crash {
                at: 1 + n % CRASH_POINTS,
                when,
            };
        }
        match kind {
            2 => Perturbation::Stall { at },
            3 => Perturbation::Lag {
                api: LAGGED[rng.below(LAGGED.len())],
                delay_ms: 500 + 500 * rng.below(4) as u64,
            },
            4 => Perturbation::LostEvents { at },
            _ => Perturbation::StandbyStallLeaseDeleted,
        }
    }
}

struct Harness {
    client: Client,
    proxy: ApiProxy,
    a: Operator,
    b: Operator,
    config: String,
    /// The namespaces of the fleet the steps edit now.
    scope: BTreeSet<String>,
    /// What `diff` predicted of the step's edit, and when the edit was made.
    predicted: Writes,
    since: jiff::Timestamp,
    /// A process was killed or stopped in the middle of this step.
    interrupted: bool,
    /// The length of `a`'s log when the step's edit began.
    a_log_at_edit: usize,
    plane: PrivatePlane,
}

impl Harness {
    async fn start(config: &str) -> Harness {
        // Clear of the gateway tests' planes (40 and up, gateways.rs).
        let plane = PrivatePlane::up("perturb", 60);
        let client = plane.client().await;
        let classes: Api<IngressClass> = Api::all(client.clone());
        for class in CLASSES {
            let body = json!({"metadata": {"name": class}, "spec": {"controller": "kura.dev/sim-ingress"}});
            classes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(body).unwrap(),
                )
                .await
                .unwrap();
        }
        namespace(&client, HOME).await;
        let proxy = ApiProxy::start_to(client.clone()).await;
        let replica = |name: &str, kubeconfig| Options {
            kubeconfig: Some(kubeconfig),
            all_namespaces: true,
            lease_duration: Some(LEASE),
            replica: Some(name.into()),
            ..Options::default()
        };
        let through_proxy = proxy.kubeconfig(&scratch_dir(HOME));
        let a = Operator::start_with(HOME, config, &[], replica("a", through_proxy));
        wait_role(&a, 1.0, LEASE * 5).await;
        let b = Operator::start_with(HOME, config, &[], replica("b", plane.kubeconfig()));
        wait_role(&b, 0.0, LEASE * 5).await;
        Harness {
            client,
            proxy,
            a,
            b,
            config: config.to_string(),
            scope: BTreeSet::new(),
            predicted: Writes::new(),
            since: jiff::Timestamp::now(),
            interrupted: false,
            a_log_at_edit: 0,
            plane,
        }
    }

    fn set_config(&mut self, text: &str) {
        if text != self.config {
            self.config = text.to_string();
            self.a.set_config(text);
            self.b.set_config(text);
        }
    }

    /// `a` leads and `b` stands by, as at the start of every step: a `b`
    /// that took over is shut down gracefully (its Lease released, `a`
    /// takes it at once) and started again.
    async fn a_leads(&mut self) {
        if !self.a.alive() {
            self.a.restart(&[]);
        }
        for _ in 0..3 {
            let (a, b) = (&self.a, &self.b);
            let settled = wait_for("a to lead or b to take over", LEASE * 6, || async {
                let (la, lb) = (
                    a.metric("kura_leader").await?,
                    b.metric("kura_leader").await?,
                );
                let ready = a.get("/readyz").await?.0 == 200 && b.get("/readyz").await?.0 == 200;
                match (la == 1.0, lb == 1.0) {
                    (_, true) => Some(false),
                    (true, false) if ready => Some(true),
                    _ => None,
                }
            })
            .await;
            if settled {
                return;
            }
            self.b.terminate();
            self.b.wait_exit(Duration::from_secs(30)).await;
            self.b.restart(&[]);
        }
        panic!("a never led again:\n{}", self.a.log());
    }

    /// Makes the step's edit with both replicas stopped, and has `diff`
    /// predict what it will make the operator write (as the preview
    /// property test does); a new configuration goes to both replicas.
    async fn edit<F, Fut>(&mut self, edit_step: F)
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = String>,
    {
        self.a_log_at_edit = self.a.log().len();
        self.a.signal("-STOP");
        self.b.signal("-STOP");
        let config = edit_step(self.client.clone()).await;
        self.since = jiff::Timestamp::now();
        let path = self.plane.state.join("perturb-next-config.yaml");
        std::fs::write(&path, &config).unwrap();
        let args = ["-A", "--config", path.to_str().unwrap(), "-o", "json"];
        let (code, out, err) = crate::preview::diff::diff_raw(&self.plane.kubeconfig(), &args);
        let report: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("diff {args:?} exited {code}: {e}: {out}{err}"));
        self.predicted = predicted(&report, &self.scope);
        self.set_config(&config);
        self.a.signal("-CONT");
        self.b.signal("-CONT");
    }

    /// What the operator (either replica) wrote to the fleet's children since
    /// the step's edit, against what `diff` predicted before it: exactly,
    /// unless a process was killed or stopped in the middle of the step.
    /// Then the one that carries on may send again what its predecessor had
    /// sent (a forced re-apply is acknowledged in status only once its
    /// whole wave is applied): the same objects, the same actions, an
    /// object updated twice, but none written that was not predicted, and
    /// none predicted left unwritten.
    fn writes_as_predicted(&self) -> Option<String> {
        let audit = self.plane.state.join("audit.log");
        let wrote = written(&audit, self.since, &self.scope);
        let as_predicted = if self.interrupted || self.a_lost_its_lease() {
            same_but_resent(&self.predicted, &wrote)
        } else {
            wrote == self.predicted
        };
        (!as_predicted).then(|| {
            format!(
                "the writes were not what diff predicted:\n    predicted: {:?}\n    written:   {wrote:?}\n{}",
                self.predicted,
                self.writes_of_differing(&wrote)
            )
        })
    }

    /// The audit log's writes of the objects whose writes differ from the
    /// prediction, each with when it was received and by which replica (the
    /// proxy records `a`'s): what a failure needs to be understood.
    fn writes_of_differing(&self, wrote: &Writes) -> String {
        let audit = self.plane.state.join("audit.log");
        let by_a = self.proxy.writes_since(self.since);
        let differing = |object: &String| self.predicted.get(object) != wrote.get(object);
        let mut out = String::new();
        for w in audited_writes(&audit, self.since, &self.scope) {
            if !differing(&w.object) {
                continue;
            }
            let mine = by_a.iter().any(|p| {
                p.path == w.uri
                    && w.at.duration_since(p.at).abs() < jiff::SignedDuration::from_secs(2)
            });
            let who = if mine { 'a' } else { 'b' };
            out += &format!(
                "    {} {} {} by {who}: {}\n",
                w.at, w.action, w.object, w.uri
            );
        }
        out
    }

    /// Whether `a` lost its Lease time during the step without being made
    /// to: both replicas are stopped while the edit is made and `diff`
    /// predicts it, which on a loaded machine can outlast the 6 s Lease, and
    /// a slow apiserver can hold its renewals past it. Then its fence
    /// abandons the writes in flight, some of which the apiserver may have
    /// stored, and whoever leads next sends them again: an interruption as
    /// much as a kill (seen: a create abandoned in flight, then updated by
    /// the same replica leading again 17 s later).
    fn a_lost_its_lease(&self) -> bool {
        let log = self.a.log();
        let since_edit = log.get(self.a_log_at_edit..).unwrap_or_default();
        since_edit.contains("leading=false") || since_edit.contains("Lease time ran out")
    }

    /// Objects of the fleet written by both replicas in this step with
    /// their writes interleaved (a, b, a): two processes acting at once.
    /// One after the other (a handover) is how it should be.
    fn written_by_two_at_once(&self) -> Option<String> {
        let audit = self.plane.state.join("audit.log");
        let by_a = self.proxy.writes_since(self.since);
        let mut order: BTreeMap<String, Vec<char>> = BTreeMap::new();
        for w in audited_writes(&audit, self.since, &self.scope) {
            // a's requests pass the proxy, which records what it forwards
            // just before the apiserver receives it.
            let mine = by_a.iter().any(|p| {
                p.path == w.uri
                    && w.at.duration_since(p.at).abs() < jiff::SignedDuration::from_secs(2)
            });
            let who = if mine { 'a' } else { 'b' };
            let seq = order.entry(w.object).or_default();
            if seq.last() != Some(&who) {
                seq.push(who);
            }
        }
        let both: Vec<String> = order
            .into_iter()
            .filter(|(_, seq)| seq.len() > 2)
            .map(|(o, seq)| format!("{o}: {}", seq.iter().collect::<String>()))
            .collect();
        (!both.is_empty()).then(|| {
            format!("objects written by both replicas in turn, not one after the other: {both:?}")
        })
    }

    /// `diff -A` under the configuration in force has nothing to change.
    async fn converged(&self, what: &str) {
        let kubeconfig = self.plane.kubeconfig();
        let path = self.plane.state.join("perturb-config.yaml");
        std::fs::write(&path, &self.config).unwrap();
        let args = ["-A", "--config", path.to_str().unwrap(), "-o", "json"];
        wait_for(
            &format!("the fleet to converge after {what}"),
            Duration::from_secs(150),
            || {
                let (code, out, err) = crate::preview::diff::diff_raw(&kubeconfig, &args);
                let report: Option<serde_json::Value> = serde_json::from_str(&out).ok();
                if report.is_none() {
                    eprintln!("  diff exited {code}: {err}");
                }
                async move { report.filter(nothing_to_change).map(|_| ()) }
            },
        )
        .await;
    }

    /// Carries out `p` on the step whose edit is made by `edit_step`; what
    /// any oracle found wrong.
    async fn perturb<F, Fut>(&mut self, p: Perturbation, edit_step: F) -> Vec<String>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = String>,
    {
        let mut found = Vec::new();
        self.interrupted = false;
        match p {
            Perturbation::Crash { at, when } => {
                let mut trap = self.proxy.trap(at, when);
                self.edit(edit_step).await;
                if trap.hit(Duration::from_secs(20)).await.is_some() {
                    self.a.kill();
                    trap.release();
                    self.a.restart(&[]);
                    self.interrupted = true;
                } else {
                    self.proxy.disarm();
                }
            }
            Perturbation::Stall { at } => {
                let mut trap = self.proxy.trap(at, Trap::After);
                self.edit(edit_step).await;
                if trap.hit(Duration::from_secs(20)).await.is_some() {
                    self.a.signal("-STOP");
                    trap.release();
                    self.interrupted = true;
                    wait_role(&self.b, 1.0, LEASE * 5).await;
                    self.converged("the stall (b finishing)").await;
                    let resumed = k8s_openapi::jiff::Timestamp::now();
                    self.a.signal("-CONT");
                    wait_role(&self.a, 0.0, LEASE * 5).await;
                    let late = self.proxy.writes_since(resumed);
                    if !late.is_empty() {
                        let late: Vec<String> = late.iter().map(ToString::to_string).collect();
                        found.push(format!(
                            "a wrote after resuming past its Lease:\n    {}",
                            late.join("\n    ")
                        ));
                    }
                } else {
                    self.proxy.disarm();
                }
            }
            Perturbation::Lag { api, delay_ms } => {
                self.proxy.lag(Some((api, Duration::from_millis(delay_ms))));
                self.edit(edit_step).await;
                self.converged("the edit, under lag").await;
                self.proxy.lag(None);
            }
            Perturbation::LostEvents { at } => {
                let mut trap = self.proxy.trap(at, Trap::After);
                self.edit(edit_step).await;
                if trap.hit(Duration::from_secs(20)).await.is_some() {
                    self.proxy.cut_watches(4);
                    trap.release();
                } else {
                    self.proxy.disarm();
                }
            }
            Perturbation::StandbyStallLeaseDeleted => {
                self.edit(edit_step).await;
                found.extend(self.standby_stall_lease_deleted().await);
            }
        }
        found
    }

    /// `b` stopped for two lease durations, the Lease deleted, `b`
    /// continued: sampled for two lease durations, never two leaders.
    async fn standby_stall_lease_deleted(&mut self) -> Vec<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), HOME);
        self.b.signal("-STOP");
        let stopped = k8s_openapi::jiff::Timestamp::now();
        let stall = k8s_openapi::jiff::SignedDuration::try_from(LEASE * 2).unwrap();
        wait_for("the Lease renewed past the stall", LEASE * 4, || async {
            let lease = leases.get("kura-operator").await.ok()?;
            let at = lease.spec?.renew_time?.0;
            (at > stopped + stall).then_some(())
        })
        .await;
        let _ = leases.delete("kura-operator", &Default::default()).await;
        self.b.signal("-CONT");
        let resumed = Instant::now();
        let mut both = 0;
        while resumed.elapsed() < LEASE * 2 {
            let (la, lb) = (
                self.a.metric("kura_leader").await,
                self.b.metric("kura_leader").await,
            );
            both += usize::from(la == Some(1.0) && lb == Some(1.0));
            tokio::time::sleep(Duration::from_millis(50)).await; // the sampling period
        }
        if both > 0 {
            vec![format!(
                "two leaders in {both} samples after the Lease was deleted by hand"
            )]
        } else {
            Vec::new()
        }
    }
}

/// Objects that are not the operator's, beside the fleet's: a ConfigMap and
/// a Service in each of its namespaces, named like no child. Whatever is
/// done to the operator, they stay as they were (their uid).
async fn bystanders(client: &Client, namespaces: &[String]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for ns in namespaces {
        let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let body = json!({"metadata": {"name": "bystander"}, "data": {"owner": "someone else"}});
        let uid = created_uid(&configs, body).await;
        out.push(("ConfigMap".into(), ns.clone(), uid));
        let services: Api<Service> = Api::namespaced(client.clone(), ns);
        let body = json!({"metadata": {"name": "bystander"}, "spec": {"ports": [{"port": 80}]}});
        let uid = created_uid(&services, body).await;
        out.push(("Service".into(), ns.clone(), uid));
    }
    out
}

/// The uid of `body`, created in `api`.
async fn created_uid<K>(api: &Api<K>, body: serde_json::Value) -> String
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
    made.meta().uid.clone().unwrap()
}

/// The bystanders gone or replaced since they were made.
async fn bystanders_lost(client: &Client, made: &[(String, String, String)]) -> Vec<String> {
    let mut lost = Vec::new();
    for (kind, ns, uid) in made {
        let now = if kind == "ConfigMap" {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            api.get_opt("bystander")
                .await
                .ok()
                .flatten()
                .and_then(|o| o.metadata.uid)
        } else {
            let api: Api<Service> = Api::namespaced(client.clone(), ns);
            api.get_opt("bystander")
                .await
                .ok()
                .flatten()
                .and_then(|o| o.metadata.uid)
        };
        if now.as_deref() != Some(uid.as_str()) {
            lost.push(format!(
                "{kind} {ns}/bystander (not the operator's) is gone or replaced"
            ));
        }
    }
    lost
}

/// Instances whose status says Ready while their StatefulSet has no
/// available pod, asked until none is or `within` has passed (a status may
/// lag its workload for one pass, not more).
async fn ready_but_unavailable(
    client: &Client,
    namespaces: &[String],
    within: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let mut wrong = Vec::new();
        for ns in namespaces {
            let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
            let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
            let Ok(list) = instances.list(&Default::default()).await else {
                continue;
            };
            for i in list.items {
                let name = i.metadata.name.clone().unwrap_or_default();
                let ready = i
                    .status
                    .as_ref()
                    .is_some_and(|s| s.phase == Some(Phase::Ready));
                if !ready {
                    continue;
                }
                let available = sets
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.status?.available_replicas)
                    .unwrap_or(0);
                if available < 1 {
                    wrong.push(format!(
                        "{ns}/{name} says Ready; its StatefulSet has no available pod"
                    ));
                }
            }
        }
        if wrong.is_empty() || Instant::now() >= deadline {
            return wrong;
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // the polling period
    }
}

/// Ready followed into an outage: one Ready instance of `namespaces` (drawn
/// by `rng`) loses its workload, and must stop saying Ready within two
/// resyncs of its StatefulSet showing no available pod; its pods are then
/// replaced and it must say Ready again before the next step (which
/// `diff` predicts from the fleet as it is). The test plays the kubelet:
/// the plane's simulated one (kura-sim) is told to leave the namespace
/// alone (`sim.kura.dev/kubelet=off`), and the pods are marked not Ready
/// through their status, as a kubelet does when a readiness probe fails.
/// What it found wrong.
async fn ready_follows_an_outage(
    client: &Client,
    namespaces: &[String],
    rng: &mut Rng,
) -> Vec<String> {
    let mut ready = Vec::new();
    for ns in namespaces {
        let instances: Api<KuraInstance> = Api::namespaced(client.clone(), ns);
        for i in instances.list(&Default::default()).await.unwrap().items {
            // A paused instance has no Ready verdict (its phase is Paused
            // once the operator sees the pause, which `diff`'s convergence
            // does not wait for: it has nothing to change).
            if !i.spec.paused
                && i.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Some(Phase::Ready))
            {
                ready.push((ns.clone(), i.metadata.name.unwrap_or_default()));
            }
        }
    }
    if ready.is_empty() {
        return Vec::new();
    }
    let (ns, name) = ready[rng.below(ready.len())].clone();
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), &ns);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let kubelet = |off: bool| json!({"metadata": {"labels": {"sim.kura.dev/kubelet": if off { json!("off") } else { json!(null) }}}});
    let namespaces_api: Api<Namespace> = Api::all(client.clone());
    namespaces_api
        .patch(&ns, &PatchParams::default(), &Patch::Merge(kubelet(true)))
        .await
        .unwrap();
    let selector = format!("{}={name}", kura_core::keys::LABEL_INSTANCE);
    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let not_ready = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ReadinessProbeFailed"},
        {"type": "ContainersReady", "status": "False", "reason": "ReadinessProbeFailed"},
    ]}});
    for pod in &listed.items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        pods.patch_status(
            &pod_name,
            &PatchParams::default(),
            &Patch::Strategic(&not_ready),
        )
        .await
        .unwrap();
    }
    let mut found = Vec::new();
    // The pods are marked not Ready again on every look: the simulated
    // kubelet may not have seen its namespace's label yet and mark them
    // Ready once more.
    let hold_outage = || async {
        for pod in &listed.items {
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            let _ = pods
                .patch_status(
                    pod_name,
                    &PatchParams::default(),
                    &Patch::Strategic(&not_ready),
                )
                .await;
        }
    };
    let unavailable = wait_until(Duration::from_secs(30), || async {
        hold_outage().await;
        sets.get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.status)
            .is_some_and(|s| s.available_replicas.unwrap_or(0) == 0)
    })
    .await;
    if unavailable {
        // Two resyncs (3 s each), counted from the StatefulSet's report.
        // The outage is held (the pods marked again) for the whole window.
        let stood_down = wait_until(Duration::from_secs(6), || async {
            hold_outage().await;
            says_ready(&instances, &name).await == Some(false)
        })
        .await;
        if !stood_down {
            found.push(format!(
                "{ns}/{name} still says Ready 6 s after its StatefulSet reported no available pod"
            ));
        }
    } else {
        found.push(format!(
            "harness: {ns}/{name}'s StatefulSet never reported its pods unavailable"
        ));
    }
    // Over: new pods, which the simulated kubelet marks Ready again.
    namespaces_api
        .patch(&ns, &PatchParams::default(), &Patch::Merge(kubelet(false)))
        .await
        .unwrap();
    for pod in listed.items {
        let _ = pods
            .delete(&pod.metadata.name.unwrap_or_default(), &Default::default())
            .await;
    }
    let again = wait_until(Duration::from_secs(90), || async {
        says_ready(&instances, &name).await == Some(true)
    })
    .await;
    if !again {
        found.push(format!(
            "{ns}/{name} did not say Ready again within 90 s of its workload coming back"
        ));
    }
    found
}

/// Whether instance `name`'s status says Ready; `None` when it cannot be read
/// or has no status yet.
async fn says_ready(instances: &Api<KuraInstance>, name: &str) -> Option<bool> {
    let status = instances.get_opt(name).await.ok().flatten()?.status?;
    Some(status.phase == Some(Phase::Ready))
}

/// Whether `check` holds before `within` has passed, asked every 200 ms.
async fn wait_until<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // the polling period
    }
}

/// `wrote` has the objects and actions of `predicted`, each action once or
/// more, and nothing else: a create or an update is any number of writes of
/// the object. A process killed with its create in flight can have it
/// stored while the apiserver records the request as failed (its client went
/// away), so the audit log shows only the successor's update of the object
/// the create made: half-way success, which the operator cannot tell apart.
fn same_but_resent(predicted: &Writes, wrote: &Writes) -> bool {
    let set = |v: &Vec<String>| {
        v.iter()
            .map(|a| match a.as_str() {
                "create" | "update" => "write".to_string(),
                other => other.to_string(),
            })
            .collect::<BTreeSet<String>>()
    };
    predicted.keys().eq(wrote.keys())
        && predicted
            .iter()
            .all(|(object, actions)| set(actions) == set(&wrote[object]))
}

async fn namespace(client: &Client, name: &str) {
    let body = json!({"metadata": {"name": name}});
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|e| panic!("{name}={v:?}: {e}")),
        Err(_) => default,
    }
}

#[tokio::test]
async fn perturbed_fleets_converge_and_no_stalled_leader_writes() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let seed = env_number("KURA_PERTURB_SEED", now);
    let cases = env_number("KURA_PERTURB_CASES", 24) as usize;
    let replay = format!("KURA_PERTURB_SEED={seed} KURA_PERTURB_CASES={cases}");
    eprintln!("perturbation harness: {replay}");
    let mut rng = Rng(seed);
    let mut regions = [Region::random(&mut rng), Region::random(&mut rng)];
    let mut h = Harness::start(&config(&regions)).await;
    let mut failures = Vec::new();
    let (mut case, mut fleet, mut crashes) = (0, 0, 0);
    while case < cases {
        let namespaces = vec![format!("q{fleet}a"), format!("q{fleet}b")];
        for ns in &namespaces {
            namespace(&h.client, ns).await;
        }
        let others = bystanders(&h.client, &namespaces).await;
        h.scope = namespaces.iter().cloned().collect();
        let mut instances: Vec<Instance> = (0..INSTANCES)
            .map(|i| {
                crate::preview::preview_truth::property::random_instance(
                    &mut rng,
                    fleet,
                    &namespaces,
                    i,
                )
            })
            .collect();
        for step in 0..STEPS_PER_FLEET.min(cases - case) {
            h.a_leads().await;
            let perturbation = Perturbation::random(&mut rng, &mut crashes);
            let label =
                format!("{replay}: case {case} (fleet {fleet}, step {step}), {perturbation:?}");
            let mut what = String::new();
            let found = {
                let (rng, instances, regions, what) =
                    (&mut rng, &mut instances, &mut regions, &mut what);
                let step_edit = |client: Client| async move {
                    *what = if step == 0 {
                        for i in instances.iter() {
                            apply_instance(&client, i).await;
                        }
                        format!("fleet {fleet} created")
                    } else {
                        edit(&client, rng, fleet, instances, regions).await
                    };
                    config(regions)
                };
                h.perturb(perturbation, step_edit).await
            };
            eprintln!("{label}: {what}");
            h.converged(&label).await;
            let mut found = found;
            found.extend(h.writes_as_predicted());
            found.extend(h.written_by_two_at_once());
            found.extend(bystanders_lost(&h.client, &others).await);
            // Two resyncs (3 s each): a status may lag its workload for a pass.
            found.extend(
                ready_but_unavailable(&h.client, &namespaces, Duration::from_secs(6)).await,
            );
            found.extend(ready_follows_an_outage(&h.client, &namespaces, &mut rng).await);
            for f in found {
                failures.push(format!("{label}: {what}\n  {f}"));
            }
            case += 1;
        }
        fleet += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases found a hole (replay: {replay}):\n\n{}\n\na: {}\nb: {}",
        failures.len(),
        failures.join("\n\n"),
        h.a.log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n"),
        h.b.log()
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n"),
    );
}
