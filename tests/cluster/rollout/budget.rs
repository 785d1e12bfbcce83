//! Changes the operator originates roll through a fleet budget, and nothing
//! else waits. kura-sim plays the kubelet here and is asked (namespace
//! annotations) for a slow start and, in one test, for pods that never become
//! Ready; availability is what the StatefulSets report.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{
    Operator, Options, converged_count, create_fleet, delete_shared_class, fleet_config, instance,
    shared_class, statuses,
};
use crate::support::*;
use kura_core::api::{ConditionStatus, KuraInstance, KuraInstanceStatus, Phase};

const N: usize = 30;
const T: Duration = Duration::from_secs(300);

pub(crate) async fn annotate(ns: &TestNamespace, annotations: serde_json::Value) {
    Api::<Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .unwrap();
}

fn condition<'a>(s: &'a KuraInstanceStatus, type_: &str) -> Option<&'a kura_core::api::Condition> {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == ConditionStatus::True)
}

/// The applied revision of every instance now.
async fn applied(
    instances: &Api<KuraInstance>,
) -> std::collections::BTreeMap<String, Option<String>> {
    statuses(instances)
        .await
        .into_iter()
        .map(|(n, s)| (n, s.applied_revision))
        .collect()
}

/// Every instance Ready on a revision other than the one it had `before`
/// (empty before the first), with no rollout left.
async fn converge_from(
    instances: &Api<KuraInstance>,
    before: &std::collections::BTreeMap<String, Option<String>>,
) {
    wait_for("the fleet to converge", T, || async {
        let all = statuses(instances).await;
        let done = all.len() == N
            && all.iter().all(|(n, s)| {
                s.phase == Some(Phase::Ready)
                    && s.applied_revision == s.desired_revision
                    && s.rollout.is_none()
                    && before.get(n).is_none_or(|old| *old != s.applied_revision)
            });
        done.then_some(())
    })
    .await
}

async fn converge(instances: &Api<KuraInstance>) {
    converge_from(instances, &Default::default()).await
}

struct Fleet {
    op: Operator,
    instances: Api<KuraInstance>,
    sts: Api<StatefulSet>,
    classes: Api<k8s_openapi::api::networking::v1::IngressClass>,
    ns: TestNamespace,
}

async fn fleet(
    prefix: &str,
    rollout: &str,
    annotations: serde_json::Value,
    options: Options,
) -> Fleet {
    let ns = TestNamespace::new(prefix).await;
    annotate(&ns, annotations).await;
    let classes = shared_class(&ns).await;
    let op = Operator::start_with(
        &ns.name,
        &fleet_config(&ns.name, "256Mi", rollout),
        &[],
        options,
    );
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "b", N).await;
    converge(&instances).await;
    Fleet {
        op,
        instances,
        sts: ns.api(),
        classes,
        ns,
    }
}

impl Fleet {
    async fn finish(self) {
        drop(self.op);
        delete_shared_class(&self.classes, &self.ns).await;
    }
}

#[tokio::test]
async fn an_operator_change_restarts_at_most_the_budget_at_once_and_one_that_restarts_nothing_goes_at_once()
 {
    let rollout = "  maxUnavailable: 3\n  progressDeadline: 10m\n";
    let f = fleet(
        "budget",
        rollout,
        json!({"sim.kura.dev/ready-delay": "2s"}),
        Options::default(),
    )
    .await;

    // An objects-only change (the shared class's name): every instance at once.
    let moved_class = format!("moved-{}", f.ns.name);
    let all_classes: Api<k8s_openapi::api::networking::v1::IngressClass> =
        Api::all(f.ns.client.clone());
    all_classes
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": moved_class},
                "spec": {"controller": "kura.dev/sim-ingress"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let sampler = MostUnavailable::start(f.sts.clone(), None);
    f.op.set_config(&fleet_config(&f.ns.name, "256Mi", rollout).replace(
        &format!("sharedIngressClass: shared-{}", f.ns.name),
        &format!("sharedIngressClass: {moved_class}"),
    ));
    wait_for("every instance on the new class", T, || async {
        let all = statuses(&f.instances).await;
        all.iter()
            .all(|(_, s)| {
                s.gateway
                    .as_ref()
                    .is_some_and(|g| g.ingress_class_name == moved_class)
                    && s.applied_revision == s.desired_revision
            })
            .then_some(())
    })
    .await;
    let objects_only = started.elapsed();
    assert_eq!(
        sampler.finish().await,
        0,
        "no pod restarted for an ingress class"
    );
    assert!(
        statuses(&f.instances)
            .await
            .iter()
            .all(|(_, s)| condition(s, "RolloutHeld").is_none()),
        "nothing held"
    );
    eprintln!("objects-only change reached {N} instances in {objects_only:.1?}");

    // A change of every pod template: at most 3 instances restarting at once.
    let config_b = fleet_config(&f.ns.name, "320Mi", rollout).replace(
        &format!("sharedIngressClass: shared-{}", f.ns.name),
        &format!("sharedIngressClass: {moved_class}"),
    );
    let before = applied(&f.instances).await;
    let started = Instant::now();
    let sampler = MostUnavailable::start(f.sts.clone(), None);
    f.op.set_config(&config_b);
    converge_from(&f.instances, &before).await;
    let budgeted = started.elapsed();
    let max = sampler.finish().await;
    eprintln!(
        "pod-template change with maxUnavailable 3: {N} instances in {budgeted:.1?}, at most {max} unavailable at once"
    );
    assert!(max <= 3, "never more than the budget unavailable: {max}");

    // Negative control: the same kind of change with the budget at 100%.
    let config_c = config_b
        .replace("memory: 320Mi", "memory: 384Mi")
        .replace("maxUnavailable: 3", "maxUnavailable: 100%");
    let before = applied(&f.instances).await;
    let sampler = MostUnavailable::start(f.sts.clone(), None);
    f.op.set_config(&config_c);
    converge_from(&f.instances, &before).await;
    let unbounded = sampler.finish().await;
    eprintln!("the same change at maxUnavailable 100%: at most {unbounded} unavailable at once");
    assert!(
        unbounded > 3,
        "without the budget more restart at once: {unbounded}"
    );
    let _ = all_classes.delete(&moved_class, &Default::default()).await;
    f.finish().await;
}

#[tokio::test]
async fn a_change_whose_pods_never_get_ready_halts_after_the_budget_and_a_fix_supersedes_it() {
    let rollout = "  maxUnavailable: 3\n  progressDeadline: 10s\n";
    let f = fleet(
        "halt",
        rollout,
        json!({"sim.kura.dev/ready-delay": "1s", "sim.kura.dev/never-ready": "\"333Mi\""}),
        Options::default(),
    )
    .await;
    let before = unavailable(&f.sts).await.unwrap();
    assert!(before.is_empty());
    f.op.set_config(&fleet_config(&f.ns.name, "333Mi", rollout));

    // Exactly the first three admitted fail; the other 27 are held, untouched.
    let (failed, held) = wait_for("3 failed and 27 held", T, || async {
        let all = statuses(&f.instances).await;
        let failed: Vec<String> = all
            .iter()
            .filter(|(_, s)| condition(s, "RolloutFailed").is_some())
            .map(|(n, _)| n.clone())
            .collect();
        let held: Vec<String> = all
            .iter()
            .filter(|(_, s)| {
                condition(s, "RolloutHeld").is_some_and(|c| c.reason == "RolloutHalted")
            })
            .map(|(n, _)| n.clone())
            .collect();
        (failed.len() == 3 && held.len() == N - 3).then_some((failed, held))
    })
    .await;
    assert_eq!(failed, ["b00", "b01", "b02"], "the first three in order");
    let all = statuses(&f.instances).await;
    let message = &condition(&all["b10"], "RolloutHeld").unwrap().message;
    assert!(
        message.contains("b00") && message.contains("failed"),
        "names the failing instances: {message}"
    );
    assert_eq!(
        unavailable(&f.sts).await.unwrap(),
        failed,
        "the held ones run their old pods"
    );
    assert_eq!(
        f.op.metric("kura_rollout_instances{state=\"failed\"}")
            .await,
        Some(3.0)
    );
    assert_eq!(
        f.op.metric("kura_rollout_instances{state=\"held\"}").await,
        Some(27.0)
    );

    // Held instances still take their user's changes, a force, and repairs, at once.
    let user = &held[0];
    apply_json(
        &f.instances,
        "test",
        instance(user, "registry.example/kura:1.0.1"),
    )
    .await
    .unwrap();
    let forced = &held[1];
    f.instances
        .patch(
            forced,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"kura.dev/reapply-at": "now"}}})),
        )
        .await
        .unwrap();
    let repaired = &held[2];
    let services: Api<Service> = f.ns.api();
    services
        .delete(repaired, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the user change, the force and the repair",
        Duration::from_secs(60),
        || async {
            let u = f.instances.get(user).await.ok()?.status?;
            let fo = f.instances.get(forced).await.ok()?.status?;
            let svc = services.get_opt(repaired).await.ok()??;
            (u.applied_image.as_deref() == Some("registry.example/kura:1.0.1")
                && fo.last_handled_reapply_at.as_deref() == Some("now")
                && svc.metadata.deletion_timestamp.is_none())
            .then_some(())
        },
    )
    .await;

    // A corrected configuration: everything converges with no other step.
    let before = applied(&f.instances).await;
    f.op.set_config(&fleet_config(&f.ns.name, "300Mi", rollout));
    converge_from(&f.instances, &before).await;
    f.finish().await;
}

#[tokio::test]
async fn instances_that_are_not_ready_take_the_change_first_and_do_not_count() {
    let rollout = "  maxUnavailable: 1\n  progressDeadline: 10m\n";
    let ns = TestNamespace::new("not-ready-first").await;
    annotate(
        &ns,
        json!({"sim.kura.dev/ready-delay": "2s", "sim.kura.dev/never-ready": "kura:broken"}),
    )
    .await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &fleet_config(&ns.name, "256Mi", rollout));
    let instances: Api<KuraInstance> = ns.api();
    let broken = ["z0", "z1", "z2"];
    for name in broken {
        apply_json(
            &instances,
            "test",
            instance(name, "registry.example/kura:broken"),
        )
        .await
        .unwrap();
    }
    create_fleet(&instances, "b", 8).await;
    wait_for("8 Ready, 3 not", T, || async {
        (converged_count(&instances, None).await == 8).then_some(())
    })
    .await;
    let sts: Api<StatefulSet> = ns.api();
    let ready_ones: Vec<String> = (0..8).map(|i| format!("b{i:02}")).collect();
    let sampler = MostUnavailable::start(sts.clone(), Some(ready_ones));
    let before: Vec<(String, Option<String>)> = statuses(&instances)
        .await
        .into_iter()
        .filter(|(n, _)| broken.contains(&n.as_str()))
        .map(|(n, s)| (n, s.applied_revision))
        .collect();
    op.set_config(&fleet_config(&ns.name, "320Mi", rollout));
    // The not-Ready ones take it at once, whatever the budget says.
    wait_for(
        "the broken ones to take the change",
        Duration::from_secs(60),
        || async {
            let all = statuses(&instances).await;
            let moved = all.iter().filter(|(n, s)| {
                before.iter().any(|(b, old)| {
                    b == *n
                        && s.applied_revision != *old
                        && s.applied_revision == s.desired_revision
                })
            });
            (moved.count() == broken.len()).then_some(())
        },
    )
    .await;
    wait_for("the Ready ones to converge", T, || async {
        (converged_count(&instances, None).await == 8).then_some(())
    })
    .await;
    let max = sampler.finish().await;
    assert!(
        max <= 1,
        "the broken instances do not count: {max} Ready ones unavailable at once"
    );
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

#[tokio::test]
async fn the_bound_holds_across_a_kill_and_a_leader_hand_over() {
    let rollout = "  maxUnavailable: 2\n  progressDeadline: 10m\n";
    let lease = Options {
        lease_duration: Some(Duration::from_secs(6)),
        replica: Some("a".into()),
        ..Options::default()
    };
    let mut f = fleet(
        "budget-ha",
        rollout,
        json!({"sim.kura.dev/ready-delay": "2s"}),
        lease,
    )
    .await;
    let standby = Operator::start_with(
        &f.ns.name,
        &fleet_config(&f.ns.name, "256Mi", rollout),
        &[],
        Options {
            lease_duration: Some(Duration::from_secs(6)),
            replica: Some("b".into()),
            ..Options::default()
        },
    );
    let before = applied(&f.instances).await;
    let sampler = MostUnavailable::start(f.sts.clone(), None);
    let change = fleet_config(&f.ns.name, "320Mi", rollout);
    f.op.set_config(&change);
    standby.set_config(&change);
    // Mid-rollout: the leader is killed (kill -9); the standby takes over
    // after the lease and goes on from what the statuses say.
    wait_for("the rollout to be under way", T, || async {
        let now = applied(&f.instances).await;
        let moved = now
            .iter()
            .filter(|(n, r)| before.get(*n) != Some(*r))
            .count();
        (moved >= 4).then_some(())
    })
    .await;
    f.op.kill();
    converge_from(&f.instances, &before).await;
    let max = sampler.finish().await;
    eprintln!("across a kill -9 and a hand-over: at most {max} unavailable at once");
    assert!(max <= 2, "the bound holds: {max}");
    drop(standby);
    f.finish().await;
}

/// Busy-loops on every core until dropped: a slow cluster, for the tests
/// whose guarantees must not depend on timing.
struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start() -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        CpuHog { stop, threads }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The bound holds when the machine is slow: a busy loop on every core
/// beside the apiserver, the operator and kura-sim while a pod-template
/// change rolls through the fleet (on a fresh clone under load, the bound
/// of 3 was once seen broken with 13 restarting at once).
#[tokio::test]
async fn the_budget_holds_on_a_loaded_machine() {
    let rollout = "  maxUnavailable: 3\n  progressDeadline: 10m\n";
    let f = fleet(
        "budget-load",
        rollout,
        json!({"sim.kura.dev/ready-delay": "2s"}),
        Options::default(),
    )
    .await;
    let before = applied(&f.instances).await;
    let hog = CpuHog::start();
    let sampler = MostUnavailable::start(f.sts.clone(), None);
    f.op.set_config(&fleet_config(&f.ns.name, "320Mi", rollout));
    converge_from(&f.instances, &before).await;
    let max = sampler.finish().await;
    drop(hog);
    eprintln!("under a CPU hog: at most {max} of {N} unavailable at once (bound 3)");
    assert!(max <= 3, "never more than the budget unavailable: {max}");
    f.finish().await;
}
