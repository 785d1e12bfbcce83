//! The fleet budget under a hostile tenant: a record in status the operator
//! did not write, a pause right after an admission, and instances that are
//! not Ready while their pods serve must neither hold the fleet nor let more
//! than the budget restart at once. kura-sim plays the kubelet (its
//! namespace annotations set how long a restarted pod takes to be Ready) and
//! the ingress controller of the classes whose controller is
//! `kura.dev/sim-ingress`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{
    Operator, Options, delete_shared_class, fleet_config, instance, shared_class, statuses,
};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase, RolloutState};

const T: Duration = Duration::from_secs(180);

/// `names` each applied on a revision other than the one they had in
/// `before` (any, for a name not in it), with no rollout record left.
async fn rolled(
    instances: &Api<KuraInstance>,
    names: &[&str],
    before: &BTreeMap<String, Option<String>>,
    ready: bool,
) {
    wait_for(&format!("{names:?} to take the change"), T, || async {
        let all = statuses(instances).await;
        names
            .iter()
            .all(|n| {
                all.get(*n).is_some_and(|s| {
                    s.applied_revision.is_some()
                        && s.applied_revision == s.desired_revision
                        && s.rollout.is_none()
                        && (!ready || s.phase == Some(Phase::Ready))
                        && before.get(*n).is_none_or(|b| *b != s.applied_revision)
                })
            })
            .then_some(())
    })
    .await
}

async fn applied(instances: &Api<KuraInstance>) -> BTreeMap<String, Option<String>> {
    statuses(instances)
        .await
        .into_iter()
        .map(|(n, s)| (n, s.applied_revision))
        .collect()
}

struct Small {
    op: Operator,
    instances: Api<KuraInstance>,
    classes: Api<IngressClass>,
    ns: TestNamespace,
}

impl Small {
    async fn start(prefix: &str, ready_delay: &str, rollout: &str) -> Small {
        let ns = TestNamespace::new(prefix).await;
        annotate_ns(&ns, "sim.kura.dev/ready-delay", ready_delay).await;
        let classes = shared_class(&ns).await;
        let op = Operator::start_with(
            &ns.name,
            &fleet_config(&ns.name, "256Mi", rollout),
            &[],
            Options::default(),
        );
        let instances = ns.api();
        Small {
            op,
            instances,
            classes,
            ns,
        }
    }

    /// Asks kura-sim (namespace annotations) for how it plays the kubelet.
    async fn annotate(&self, key: &str, value: &str) {
        annotate_ns(&self.ns, key, value).await
    }

    async fn create(&self, name: &str, spec: impl FnOnce(&mut serde_json::Value)) {
        let mut body = instance(name, "registry.example/kura:1.0.0");
        spec(&mut body);
        apply_json(&self.instances, "test", body).await.unwrap();
    }

    async fn finish(self) {
        drop(self.op);
        delete_shared_class(&self.classes, &self.ns).await;
    }
}

async fn annotate_ns(ns: &TestNamespace, key: &str, value: &str) {
    Api::<Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

async fn all_ready(instances: &Api<KuraInstance>, names: &[&str]) {
    rolled(instances, names, &BTreeMap::new(), true).await
}

/// A record in status the operator did not write, here on an instance the
/// operator cannot reconcile (its region is unknown, so it is Invalid and
/// nothing rewrites its status), once counted as a rollout in flight for
/// good: with `maxUnavailable: 1` nobody else was ever admitted.
#[tokio::test]
async fn a_rollout_record_the_operator_did_not_write_holds_nobody() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10m\n";
    let f = Small::start("forged-record", "1s", rollout).await;
    let fleet = ["b00", "b01", "b02"];
    for n in fleet {
        f.create(n, |_| {}).await;
    }
    f.create("zz", |b| b["spec"]["region"] = json!("nowhere"))
        .await;
    all_ready(&f.instances, &fleet).await;
    wait_for("zz to be Invalid", T, || async {
        let s = f.instances.get("zz").await.ok()?.status?;
        (s.phase == Some(Phase::Invalid)).then_some(())
    })
    .await;
    // The fleet revision in force, read from nowhere: a forger would copy it
    // from a record of its own. Both a wrong one and the operator's own
    // format with an old `since` are tried, on two instances.
    f.instances
        .patch_status(
            "zz",
            &PatchParams {
                field_manager: Some("intruder".into()),
                ..Default::default()
            },
            &Patch::Merge(&json!({"status": {"rollout": {
                "state": "Admitted", "fleetRevision": "forged", "revision": "x",
                "since": "2020-01-01T00:00:00Z", "wasReady": true}}})),
        )
        .await
        .unwrap();
    let before = applied(&f.instances).await;
    f.op.set_config(&fleet_config(&f.ns.name, "320Mi", rollout));
    rolled(&f.instances, &fleet, &before, true).await;
    f.finish().await;
}

/// Pausing an instance right after it was admitted once kept its Admitted
/// record for good: with `maxUnavailable: 1` it held the only slot, and
/// nobody after it was admitted. A pause releases the slot.
#[tokio::test]
async fn pausing_an_admitted_instance_releases_its_slot() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10m\n";
    let f = Small::start("pause-slot", "4s", rollout).await;
    let fleet = ["b00", "b01", "b02"];
    for n in fleet {
        f.create(n, |_| {}).await;
    }
    all_ready(&f.instances, &fleet).await;
    let before = applied(&f.instances).await;
    f.op.set_config(&fleet_config(&f.ns.name, "320Mi", rollout));
    wait_for("b00 to be admitted", T, || async {
        let s = f.instances.get("b00").await.ok()?.status?;
        s.rollout
            .filter(|r| r.state == RolloutState::Admitted)
            .map(|_| ())
    })
    .await;
    f.instances
        .patch(
            "b00",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    rolled(&f.instances, &["b01", "b02"], &before, true).await;
    let b00 = statuses(&f.instances).await.remove("b00").unwrap();
    assert!(
        b00.rollout.is_none(),
        "the paused instance holds no record: {:?}",
        b00.rollout
    );
    f.finish().await;
}

/// Instances that are not Ready only because their Ingress has no address
/// (no controller serves the class) still serve from their pods: once they
/// were admitted uncounted, all at once. Their restarts count against the
/// budget, and such an instance's rollout is done when its workload is
/// available again (it never becomes Ready here), so it neither holds the
/// slot nor fails the fleet.
#[tokio::test]
async fn instances_whose_pods_serve_are_counted_though_not_ready() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 20s\n";
    let f = Small::start("serving", "3s", rollout).await;
    // A class no controller serves: the Ingresses never get an address.
    let unserved = format!("unserved-{}", f.ns.name);
    f.classes
        .create(
            &Default::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": unserved}, "spec": {"controller": "example.com/nobody"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let with_class = |memory: &str| {
        fleet_config(&f.ns.name, memory, rollout).replace(
            &format!("sharedIngressClass: shared-{}", f.ns.name),
            &format!("sharedIngressClass: {unserved}"),
        )
    };
    f.op.set_config(&with_class("256Mi"));
    let fleet = ["b00", "b01", "b02", "b03"];
    for n in fleet {
        f.create(n, |_| {}).await;
    }
    let sts: Api<StatefulSet> = f.ns.api();
    wait_for("every workload available, no instance Ready", T, || async {
        let all = statuses(&f.instances).await;
        let applied = all.len() == fleet.len()
            && all.values().all(|s| {
                s.applied_revision.is_some()
                    && s.applied_revision == s.desired_revision
                    && s.phase != Some(Phase::Ready)
            });
        (applied
            && sts.list(&ListParams::default()).await.ok()?.items.len() == fleet.len()
            && unavailable(&sts).await.map_or(0, |names| names.len()) == 0)
            .then_some(())
    })
    .await;
    let before = applied(&f.instances).await;
    let max = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampling = {
        let (max, sts) = (max.clone(), sts.clone());
        tokio::spawn(async move {
            loop {
                let n = unavailable(&sts).await.map_or(0, |names| names.len());
                max.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await; // the sampling period
            }
        })
    };
    f.op.set_config(&with_class("320Mi"));
    rolled(&f.instances, &fleet, &before, false).await;
    sampling.abort();
    let max = max.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        max <= 1,
        "never more than the budget restarting at once: {max}"
    );
    let all = statuses(&f.instances).await;
    assert!(
        all.values().all(|s| !s.conditions.iter().any(
            |c| c.type_ == "RolloutFailed" && c.status == kura_core::api::ConditionStatus::True
        )),
        "no rollout failed: {all:?}"
    );
    let _ = f.classes.delete(&unserved, &Default::default()).await;
    f.finish().await;
}

/// An instance whose pods never served (its image never gets Ready) takes an
/// operator change at once, uncounted; once, when its progress deadline
/// passed, its "failed" rollout halted every other instance's. Its failure
/// says nothing about the change, so the fleet goes on.
#[tokio::test]
async fn an_instance_that_never_served_does_not_halt_the_fleet() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10s\n";
    let f = Small::start("never-served", "4s", rollout).await;
    f.annotate("sim.kura.dev/never-ready", "kura:broken").await;
    f.create("z0", |b| {
        b["spec"]["image"] = json!("registry.example/kura:broken")
    })
    .await;
    let fleet = ["b00", "b01", "b02", "b03"];
    for n in fleet {
        f.create(n, |_| {}).await;
    }
    all_ready(&f.instances, &fleet).await;
    let before = applied(&f.instances).await;
    f.op.set_config(&fleet_config(&f.ns.name, "320Mi", rollout));
    // One at a time, 4 s each to be Ready: past z0's 10 s deadline (the
    // shortest the configuration allows).
    rolled(&f.instances, &fleet, &before, true).await;
    let all = statuses(&f.instances).await;
    assert!(
        all.values()
            .all(|s| !s.conditions.iter().any(|c| c.reason == "RolloutHalted")),
        "nobody was halted: {all:?}"
    );
    f.finish().await;
}

/// An instance held by the budget once kept Ready=True while its workload was
/// scaled to zero under it, and the scale was never repaired (the held plan
/// left the StatefulSet out). What is live decides: a workload that no longer
/// serves cannot be made less available, so it takes its change at once (the
/// repair), and its status says it is not Ready.
#[tokio::test]
async fn a_held_instance_whose_workload_is_scaled_away_is_repaired_and_not_ready() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10s\n";
    let f = Small::start("held-scaled", "1s", rollout).await;
    f.annotate("sim.kura.dev/never-ready", "\"320Mi\"").await;
    let fleet = ["b00", "b01"];
    for n in fleet {
        f.create(n, |_| {}).await;
    }
    all_ready(&f.instances, &fleet).await;
    // One is admitted and never gets Ready: the rollout halts, the other is
    // held (which one goes first is the order their passes ran in).
    f.op.set_config(&fleet_config(&f.ns.name, "320Mi", rollout));
    let held = wait_for("one of the two to be held", T, || async {
        for name in fleet {
            let s = f.instances.get(name).await.ok()?.status?;
            if s.conditions.iter().any(|c| {
                c.type_ == "RolloutHeld" && c.status == kura_core::api::ConditionStatus::True
            }) {
                return Some(name);
            }
        }
        None
    })
    .await;
    let sts: Api<StatefulSet> = f.ns.api();
    sts.patch_scale(
        held,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    wait_for(
        "the held one's workload repaired and it not Ready",
        T,
        || async {
            let replicas = sts.get(held).await.ok()?.spec?.replicas?;
            let s = f.instances.get(held).await.ok()?.status?;
            let ready = s
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == kura_core::api::ConditionStatus::True);
            (replicas == 1 && !ready).then_some(())
        },
    )
    .await;
    f.finish().await;
}
