//! Operator faults against the real control plane: the operator is killed with
//! SIGKILL at 20 pseudo-random points of a fleet-wide rollout of 50 instances
//! and restarted each time. The fleet converges, GC removes exactly the stale
//! objects (the dedicated gateways), nothing is duplicated and no volume is lost.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::operator::{Operator, config, shared_class};
use crate::support::*;
use kura_core::api::{KuraGateway, KuraInstance, Phase};

const FLEET: usize = 50;
const KILLS: usize = 20;

/// Instances Ready with their desired revision applied and on ingress `class`.
async fn converged(instances: &Api<KuraInstance>, class: &str) -> (usize, usize) {
    let list = instances.list(&ListParams::default()).await.unwrap();
    let done = list
        .items
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                s.phase == Some(Phase::Ready)
                    && s.applied_revision == s.desired_revision
                    && s.gateway
                        .as_ref()
                        .is_some_and(|g| g.ingress_class_name.starts_with(class))
            })
        })
        .count();
    (done, list.items.len())
}

/// Whether this operator run's log ends, for some instance, with an apply not
/// yet recorded in status: the kill landed inside that reconcile's apply phase.
fn applied_without_status(log: &str) -> bool {
    let mut last = std::collections::HashMap::new();
    for line in log.lines() {
        // Named by its reconcile's span: `reconcile{namespace=… instance=…}`.
        let event = if line.contains("kura_operator::reconcile::report: applied ") {
            "applied"
        } else if line.contains("status written") {
            "status"
        } else {
            continue;
        };
        if let Some(name) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("instance="))
        {
            last.insert(name.to_string(), event);
        }
    }
    last.values().any(|e| *e == "applied")
}

#[tokio::test]
async fn fleet_converges_after_twenty_kills_during_a_rollout() {
    let ns = TestNamespace::new("chaos").await;
    let classes = shared_class(&ns).await;
    // Cloud first: ten dedicated gateways (served by kura-sim), five instances each.
    let cloud = config(&ns.name, "cloud", "kura.dev/sim-ingress");
    let mut op = Operator::start(&ns.name, &cloud);
    let instances: Api<KuraInstance> = ns.api();
    for i in 0..FLEET {
        let body = json!({
            "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": format!("i{i:02}")},
            // Five instances share an account (and its gateway); each has a
            // host of its own, since a host is served to one instance only.
            "spec": {"account": format!("acct{}", i % 10), "host": format!("i{i:02}.kura.test"), "region": "r1", "image": "registry.example/kura:1.0.0", "storage": {"size": "1Gi"}},
        });
        apply_json(&instances, "test", body).await.unwrap();
    }
    wait_for(
        "the fleet to be Ready on dedicated gateways",
        Duration::from_secs(180),
        || async {
            let (done, total) = converged(&instances, "kura-gw.").await;
            (done == FLEET && total == FLEET).then_some(())
        },
    )
    .await;
    let gateways: Api<KuraGateway> = ns.api();
    assert_eq!(
        gateways
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        10
    );

    // The rollout: the region becomes host-network; every instance moves to the
    // shared class and every gateway becomes stale. Kill the operator during it.
    op.set_config(&config(&ns.name, "host", "kura.dev/sim-ingress"));
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut during_rollout = 0;
    let mut mid_apply = 0;
    let mut log_seen = op.log().len();
    for _ in 0..KILLS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(50 + seed % 300);
        tokio::time::sleep(delay).await; // the fault's random point, not synchronisation
        if converged(&instances, &format!("shared-{}", ns.name))
            .await
            .0
            < FLEET
        {
            during_rollout += 1;
        }
        op.kill();
        let log = op.log();
        if applied_without_status(&log[log_seen..]) {
            mid_apply += 1;
        }
        log_seen = log.len();
        op.restart(&[]);
    }
    let started = std::time::Instant::now();
    wait_for(
        "the fleet to converge on the shared class after the kills",
        Duration::from_secs(180),
        || async {
            let (done, _) = converged(&instances, &format!("shared-{}", ns.name)).await;
            let gone = gateways
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty();
            (done == FLEET && gone).then_some(())
        },
    )
    .await;
    eprintln!(
        "{KILLS} SIGKILLs, {during_rollout} landed while the rollout was unfinished, {mid_apply} between an apply and its status write; reconverged {:?} after the last restart",
        started.elapsed()
    );

    let shared = format!("shared-{}", ns.name);
    let ingresses = Api::<Ingress>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        ingresses.len(),
        FLEET,
        "one ingress per instance, none duplicated or orphaned"
    );
    assert!(
        ingresses.iter().all(
            |i| i.spec.as_ref().unwrap().ingress_class_name.as_deref() == Some(shared.as_str())
        )
    );
    assert_eq!(
        Api::<StatefulSet>::namespaced(ns.client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        FLEET
    );
    let cms = Api::<ConfigMap>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=kura-operator"))
        .await
        .unwrap();
    assert_eq!(cms.items.len(), FLEET);
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pvcs.items.len(), FLEET, "no volume lost");
    assert!(
        during_rollout >= 1,
        "at least one kill must land mid-rollout for this test to mean anything"
    );
    drop(op);
    let _ = classes.delete(&shared, &Default::default()).await;
}
