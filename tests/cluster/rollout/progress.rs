//! Progress messages say where a rollout is. A message whose counts move on
//! ("0/1 replicas available" becoming "1/1 …") may wait for the status write
//! throttle (`status::MESSAGE_REFRESH`, 30 s, and the fleet's refresh rate,
//! the last test below), but a message about a step that is over (the
//! StatefulSet taking the revision: once it said "StatefulSet does not exist
//! yet" for 30 s while its pods were being created) never stays once the
//! cluster shows that step done, and Ready is written as soon as it is.
//!
//! kura-sim plays no kubelet in this test's namespace (`sim.kura.dev/kubelet=off`):
//! the test plays it, so a rollout waits at "0/1 replicas available" for as
//! long as the test wants, then the test marks the pods Ready.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{Operator, apply_acme, config, delete_shared_class, instance, shared_class};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

const T: Duration = Duration::from_secs(60);
/// Well under the 30 s write throttle and the 15 s activation recheck: the
/// StatefulSet's own events bring the news.
const NEWS: Duration = Duration::from_secs(10);

/// The test plays the kubelet: every pod Running and Ready.
async fn mark_pods_ready(pods: &Api<Pod>) {
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        mark_pod_ready(pods, &pod.metadata.name.unwrap()).await;
    }
}

/// The test plays the kubelet: pod `name` Running and Ready.
async fn mark_pod_ready(pods: &Api<Pod>, name: &str) {
    let now = jiff::Timestamp::now().to_string();
    let ready = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let status = json!({"status": {"phase": "Running", "startTime": now, "conditions": [
        ready("PodScheduled"), ready("Initialized"), ready("ContainersReady"), ready("Ready")]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The applied revision once it is not `before`, and the stamp it gives the
/// StatefulSet (each child carries its own hash, as the inventory records it).
async fn applied_after(instances: &Api<KuraInstance>, before: Option<&str>) -> (String, String) {
    wait_for("the apply", T, || async {
        let status = instances.get("acme").await.ok()?.status?;
        let applied = status.applied_revision?;
        let stamp = status
            .inventory
            .iter()
            .find(|e| e.kind == "StatefulSet")?
            .hash
            .clone();
        (Some(applied.as_str()) != before).then_some((applied, stamp))
    })
    .await
}

/// Once the StatefulSet carries the `stamp` of the applied revision and its
/// controller has observed it, the instance soon says how its pods are doing
/// (counts may lag).
async fn message_follows_the_rollout(
    instances: &Api<KuraInstance>,
    sts: &Api<StatefulSet>,
    stamp: &str,
) {
    wait_for(
        "the StatefulSet to carry the revision, observed by its controller",
        T,
        || async {
            let s = sts.get("acme").await.ok()?;
            let carries = s.metadata.annotations.as_ref()?.get("kura.dev/revision")? == stamp;
            let observed = s.status?.observed_generation >= s.metadata.generation;
            (carries && observed).then_some(())
        },
    )
    .await;
    let started = std::time::Instant::now();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let status = instances.get("acme").await.unwrap().status.unwrap();
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned();
        let ready = ready.unwrap_or_default();
        if seen.last() != Some(&ready.message) {
            seen.push(ready.message.clone());
        }
        if status.phase == Some(Phase::Activating)
            && ready.reason == "WorkloadProgressing"
            && ready.message.contains("replicas available")
        {
            return;
        }
        assert!(
            started.elapsed() < NEWS,
            "{:?} after the StatefulSet showed stamp {stamp}, the status still said {seen:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await; // polling the status, bounded above
    }
}

/// Ready, with no wait for the throttle: a new phase is written at once.
async fn ready_soon(instances: &Api<KuraInstance>) -> kura_core::api::KuraInstanceStatus {
    wait_for("Ready after the pods are", NEWS, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.phase == Some(Phase::Ready) && s.applied_revision == s.desired_revision).then_some(s)
    })
    .await
}

#[tokio::test]
async fn a_message_about_a_finished_step_does_not_outlive_it() {
    let ns = TestNamespace::with_labels("progress", &[("sim.kura.dev/kubelet", "off")]).await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let sts: Api<StatefulSet> = ns.api();
    let pods: Api<Pod> = ns.api();

    // A new instance: created, then its pod waits for the kubelet.
    apply_acme(&instances).await;
    let (first, stamp) = applied_after(&instances, None).await;
    message_follows_the_rollout(&instances, &sts, &stamp).await;
    mark_pods_ready(&pods).await;
    ready_soon(&instances).await;

    // A new image: the pod is replaced, and the new one waits for the kubelet.
    apply_json(
        &instances,
        "test",
        instance("acme", "registry.example/kura:2.0.0"),
    )
    .await
    .unwrap();
    let (second, stamp) = applied_after(&instances, Some(&first)).await;
    message_follows_the_rollout(&instances, &sts, &stamp).await;
    wait_for("the new pod", T, || async {
        let list = pods.list(&ListParams::default()).await.ok()?.items;
        list.iter()
            .any(|p| {
                p.spec.as_ref().is_some_and(|s| {
                    s.containers[0].image.as_deref() == Some("registry.example/kura:2.0.0")
                })
            })
            .then_some(())
    })
    .await;
    mark_pods_ready(&pods).await;
    let ready = ready_soon(&instances).await;
    assert_eq!(ready.applied_revision.as_deref(), Some(second.as_str()));
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

/// Refreshes of counts alone are rationed across the fleet
/// (`--status-refresh-rate`, `refresh_budget::RefreshBudget`), and none is
/// lost: a refresh held back is written by a later pass of its instance.
///
/// Eight instances of two replicas wait at "0/2 replicas available"; the test
/// (playing the kubelet) then makes one pod of each Ready, so every instance's
/// message changes in its counts alone, at about the same time. Each may
/// refresh 30 s after its last write, and the process may send one refresh
/// every 5 s: most are held back (`kura_status_writes_total{result="held"}`),
/// and every instance still comes to say "1/2 replicas available". With the
/// rate at 1000 a second (the negative control, run by hand) nothing is held
/// and the assertion on `held` fails.
#[tokio::test]
async fn count_refreshes_are_rationed_across_the_fleet_and_none_is_lost() {
    const NAMES: [&str; 8] = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"];
    let ns = TestNamespace::with_labels("refresh", &[("sim.kura.dev/kubelet", "off")]).await;
    let classes = shared_class(&ns).await;
    let op = Operator::start_full(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &["--status-refresh-rate", "0.2"],
        &[],
    );
    let instances: Api<KuraInstance> = ns.api();
    let pods: Api<Pod> = ns.api();
    for name in NAMES {
        let mut body = instance(name, "registry.example/kura:1.0.0");
        body["spec"]["replicas"] = json!(2);
        apply_json(&instances, "test", body).await.unwrap();
    }
    let message = |s: &kura_core::api::KuraInstanceStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    // Every instance applied, its pods not Ready.
    wait_for(
        "every instance applied and waiting for its pods",
        T,
        || async {
            let list = instances.list(&ListParams::default()).await.ok()?.items;
            let waiting = list.iter().filter(|i| {
                i.status.as_ref().is_some_and(|s| {
                    s.applied_revision.is_some()
                        && s.applied_revision == s.desired_revision
                        && message(s).contains("0/2 replicas available")
                })
            });
            (waiting.count() == NAMES.len()).then_some(())
        },
    )
    .await;
    // The test plays the kubelet: the first pod of each instance Ready.
    for name in NAMES {
        let pod = format!("{name}-0");
        wait_for(&format!("pod {pod}"), T, || async {
            pods.get_opt(&pod).await.ok()?.map(|_| ())
        })
        .await;
        mark_pod_ready(&pods, &pod).await;
    }
    // 30 s per instance, then one refresh every 5 s for the eight, each asked
    // again at its instance's 15 s recheck: well within three minutes.
    wait_for(
        "every instance to say 1/2 replicas available",
        Duration::from_secs(180),
        || async {
            let list = instances.list(&ListParams::default()).await.ok()?.items;
            let done = list.iter().filter(|i| {
                i.status
                    .as_ref()
                    .is_some_and(|s| message(s).contains("1/2 replicas available"))
            });
            (done.count() == NAMES.len()).then_some(())
        },
    )
    .await;
    let held = op
        .metric("kura_status_writes_total{result=\"held\"}")
        .await
        .unwrap_or(0.0);
    assert!(
        held >= 1.0,
        "eight refreshes due together at one every 5 s: some are held back (held {held})"
    );
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
