//! Two operator processes with `--leader-elect` on one namespace: only the
//! leader writes; a standby converges new work after the leader is killed
//! (within the lease duration), and at once after a graceful shutdown.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use super::*;
use crate::operator::{Operator, Options, config, instance, shared_class};
use kura_operator::api::KuraInstance;

/// The chart's default.
const LEASE: Duration = Duration::from_secs(15);

fn replica(ns: &TestNamespace, name: &str) -> Operator {
    Operator::start_with(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &[],
        Options {
            lease_duration: Some(LEASE),
            replica: Some(name.into()),
            ..Options::default()
        },
    )
}

/// Waits until `op` reports `leader` = `value` and is ready.
async fn wait_role(op: &Operator, value: f64, timeout: Duration) {
    let role = if value == 1.0 {
        "leader"
    } else {
        "ready standby"
    };
    wait_for(role, timeout, || async {
        let leading = op.metric("kura_leader").await?;
        let ready = op.get("/readyz").await?.0 == 200;
        (leading == value && ready).then_some(())
    })
    .await
}

async fn holder(ns: &TestNamespace) -> Option<String> {
    let lease = ns.api::<Lease>().get_opt("kura-operator").await.ok()??;
    lease.spec?.holder_identity
}

/// How many reconciles `op` did, of any result.
async fn reconciles(op: &Operator) -> f64 {
    let body = op.get("/metrics").await.expect("metrics").1;
    body.lines()
        .filter(|l| l.starts_with("kura_reconciles_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two replicas, `a` leading and `b` a ready standby.
async fn pair(ns: &TestNamespace) -> (Operator, Operator) {
    let a = replica(ns, "a");
    wait_role(&a, 1.0, Duration::from_secs(60)).await;
    let b = replica(ns, "b");
    wait_role(&b, 0.0, Duration::from_secs(60)).await;
    (a, b)
}

#[tokio::test]
async fn only_the_leader_writes_and_a_standby_takes_over_after_a_kill() {
    let ns = TestNamespace::new("ops-leader").await;
    let classes = shared_class(&ns).await;
    let (mut a, b) = pair(&ns).await;
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("first", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_applied(&instances, "first", None, Duration::from_secs(90)).await;
    assert!(
        a.log().contains("applied"),
        "the leader applied: {}",
        a.log()
    );
    assert!(
        !b.log().contains("applied"),
        "the standby wrote nothing: {}",
        b.log()
    );
    assert_eq!(reconciles(&b).await, 0.0, "the standby reconciled nothing");
    assert!(reconciles(&a).await >= 1.0);
    assert_eq!(b.metric("kura_leader").await, Some(0.0));

    // kill -9: no release; the standby waits out the lease.
    a.kill();
    let killed = Instant::now();
    apply_json(
        &instances,
        "test",
        instance("second", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_role(&b, 1.0, LEASE * 2).await;
    let hand_over = killed.elapsed();
    wait_applied(&instances, "second", None, Duration::from_secs(60)).await;
    let converged = killed.elapsed();
    eprintln!(
        "hand-over after kill -9 (lease {LEASE:?}): leader after {hand_over:?}, new instance applied after {converged:?}"
    );
    assert!(
        hand_over <= LEASE + LEASE / 6 + Duration::from_secs(3),
        "taken over within the lease duration (plus one retry period): {hand_over:?}"
    );
    assert!(
        b.log().contains("applied"),
        "the new leader applied: {}",
        b.log()
    );
    assert_eq!(holder(&ns).await.map(|h| b.log().contains(&h)), Some(true));
    let _ = classes
        .delete(&format!("shared-{}", ns.name), &Default::default())
        .await;
}

#[tokio::test]
async fn graceful_shutdown_releases_the_lease_for_an_immediate_take_over() {
    let ns = TestNamespace::new("ops-release").await;
    let (mut a, b) = pair(&ns).await;
    let before = holder(&ns).await.expect("a holds the lease");
    assert!(a.log().contains(&before));

    a.terminate();
    let terminated = Instant::now();
    wait_role(&b, 1.0, LEASE * 2).await;
    let hand_over = terminated.elapsed();
    let exit = a.wait_exit(Duration::from_secs(30)).await;
    eprintln!("hand-over after SIGTERM (lease {LEASE:?}): {hand_over:?}");
    assert!(exit.success(), "a graceful exit: {exit:?}\n{}", a.log());
    assert!(a.log().contains("released the lease"), "{}", a.log());
    assert!(
        hand_over < LEASE / 3,
        "much faster than the lease duration: {hand_over:?}"
    );
    let after = holder(&ns).await.expect("b holds the lease");
    assert_ne!(after, before);
    assert!(b.log().contains(&after));
}
