//! Two operator processes with `--leader-elect` on one namespace: only the
//! leader writes; a standby converges new work after the leader is killed
//! (within the lease duration), and at once after a graceful shutdown; a
//! leader whose Lease requests hang stops before the standby takes over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use super::*;
use crate::operator::{
    Operator, Options, config, delete_shared_class, instance, shared_class, wait_role,
};
use kura_core::api::KuraInstance;

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
    pair_of(|name| replica(ns, name)).await
}

/// Two replicas started by `start`, `a` leading and `b` a ready standby.
async fn pair_of(start: impl Fn(&str) -> Operator) -> (Operator, Operator) {
    let a = start("a");
    wait_role(&a, 1.0, Duration::from_secs(60)).await;
    let b = start("b");
    wait_role(&b, 0.0, Duration::from_secs(60)).await;
    (a, b)
}

/// What a sampling of both replicas' `kura_leader` saw.
struct Roles {
    samples: usize,
    /// Samples in which both led.
    both: usize,
    /// Samples in which `b` led.
    b_led: usize,
}

/// Both replicas' roles, sampled every `period` until `window` has passed
/// since `from`.
async fn sample_roles(
    a: &Operator,
    b: &Operator,
    from: Instant,
    window: Duration,
    period: Duration,
) -> Roles {
    let mut roles = Roles {
        samples: 0,
        both: 0,
        b_led: 0,
    };
    while from.elapsed() < window {
        let (la, lb) = (a.metric("kura_leader").await, b.metric("kura_leader").await);
        roles.both += usize::from(la == Some(1.0) && lb == Some(1.0));
        roles.b_led += usize::from(lb == Some(1.0));
        roles.samples += 1;
        tokio::time::sleep(period).await;
    }
    roles
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
    delete_shared_class(&classes, &ns).await;
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

/// Short, so the stall scenario takes seconds: renew every 1 s, renew
/// deadline 4 s, a standby takes over after 6 s.
const SHORT_LEASE: Duration = Duration::from_secs(6);

/// Two replicas on [`SHORT_LEASE`], `a` leading (through `a_kubeconfig`,
/// when given) and `b` a ready standby.
async fn short_pair(
    ns: &TestNamespace,
    a_kubeconfig: Option<std::path::PathBuf>,
) -> (Operator, Operator) {
    pair_of(|name| {
        let kubeconfig = if name == "a" {
            a_kubeconfig.clone()
        } else {
            None
        };
        short_replica(ns, name, kubeconfig)
    })
    .await
}

fn short_replica(
    ns: &TestNamespace,
    name: &str,
    kubeconfig: Option<std::path::PathBuf>,
) -> Operator {
    Operator::start_with(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &[("KURA_LOG", "info,kura_operator::leader=debug")],
        Options {
            lease_duration: Some(SHORT_LEASE),
            replica: Some(name.into()),
            kubeconfig,
            ..Options::default()
        },
    )
}

/// The "two leaders" report: a leader whose Lease requests hang (a stuck
/// connection) kept reconciling long after a standby took over, and an image
/// bump was applied by both. Replica `a` talks to the apiserver through a proxy
/// that hangs its Lease requests alone; `b` talks directly. `a` must give up
/// leading at its renew deadline, before `b` may take over, and write nothing
/// after `b` leads, although its watches still show it the image bump.
#[tokio::test]
async fn a_leader_whose_lease_requests_hang_stops_before_a_standby_takes_over() {
    use std::cell::Cell;

    use crate::faults::api_proxy::ApiProxy;

    let ns = TestNamespace::new("ops-lease-stall").await;
    let classes = shared_class(&ns).await;
    let proxy = ApiProxy::start().await;
    let (a, b) = short_pair(&ns, Some(proxy.kubeconfig(&scratch_dir(&ns.name)))).await;
    let instances: Api<KuraInstance> = ns.api();
    let before = create_acme(&instances, Duration::from_secs(90)).await;
    // Positive control: the proxy sees the leader's applies.
    assert!(
        !proxy
            .writes_since(k8s_openapi::jiff::Timestamp::MIN)
            .is_empty(),
        "the proxy recorded a's writes"
    );

    proxy.stall_leases(true);
    let stalled = Instant::now();
    // Both roles, sampled together until b leads: a must have let go first.
    let a_stopped = Cell::new(None);
    let b_led = wait_for("b to lead", SHORT_LEASE * 4, || async {
        if a_stopped.get().is_none() && a.metric("kura_leader").await == Some(0.0) {
            a_stopped.set(Some(stalled.elapsed()));
        }
        (b.metric("kura_leader").await == Some(1.0)).then(|| stalled.elapsed())
    })
    .await;
    let lease = ns.api::<Lease>().get("kura-operator").await.unwrap();
    let spec = lease.spec.expect("lease spec");
    let b_identity = spec.holder_identity.clone().expect("a holder");
    assert!(b.log().contains(&b_identity), "b holds the lease");
    let takeover = spec.acquire_time.expect("acquireTime").0;
    eprintln!(
        "lease requests stalled: a stopped leading after {:?}, b led after {b_led:?}",
        a_stopped.get()
    );
    let a_stopped = a_stopped.get().unwrap_or_else(|| {
        panic!(
            "a still led when b took over ({b_led:?} after the stall):\n{}",
            a.log()
        )
    });
    assert!(
        a_stopped < b_led,
        "a stopped ({a_stopped:?}) before b led ({b_led:?})"
    );

    // An image bump after the takeover: b applies it; a, which sees it
    // through its watches, must not.
    apply_json(
        &instances,
        "test",
        instance("acme", "registry.example/kura:1.0.1"),
    )
    .await
    .unwrap();
    wait_for(
        "a's watch to deliver the bump",
        Duration::from_secs(30),
        || async {
            proxy
                .watch_delivered("registry.example/kura:1.0.1")
                .then_some(())
        },
    )
    .await;
    let after = wait_applied(
        &instances,
        "acme",
        before.applied_revision.as_deref(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        after.applied_image.as_deref(),
        Some("registry.example/kura:1.0.1")
    );

    // The stall ends: a finds b holding the Lease and stays a standby.
    proxy.stall_leases(false);
    wait_role(&a, 0.0, Duration::from_secs(30)).await;
    assert_eq!(b.metric("kura_leader").await, Some(1.0));
    let late: Vec<String> = proxy
        .writes_since(takeover)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        late.is_empty(),
        "a wrote after b took over at {takeover}:\n{}",
        late.join("\n")
    );
    delete_shared_class(&classes, &ns).await;
}

/// Deleting the Lease by hand (an administrator's cleanup, a namespace
/// restore) once gave about a second of two leaders: the standby found no
/// Lease and created one at once, while the leader still led until its next
/// renewal failed. A standby now treats a vanished Lease like one that stopped
/// being renewed (it waits the lease duration from the last change it saw),
/// and the leader re-creates its own.
#[tokio::test]
async fn deleting_the_lease_by_hand_never_gives_two_leaders() {
    let ns = TestNamespace::new("ops-lease-deleted").await;
    let (a, b) = pair(&ns).await;
    let leases = ns.api::<Lease>();
    leases
        .delete("kura-operator", &Default::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    // Past a whole lease duration: the window in which a standby could take over.
    let Roles { samples, both, .. } = sample_roles(
        &a,
        &b,
        deleted,
        LEASE + Duration::from_secs(5),
        Duration::from_millis(100),
    )
    .await;
    assert!(samples > 50, "sampled the whole window: {samples}");
    assert_eq!(
        both, 0,
        "two leaders at once in {both} of {samples} samples"
    );
    let now_holder = holder(&ns).await;
    assert!(
        now_holder.is_some_and(|h| !h.is_empty()),
        "the Lease exists again with a holder"
    );
}

/// A leader stopped (SIGSTOP: a frozen VM, a starved node) past its Lease,
/// then continued, once sent status patches within 100 ms of resuming,
/// before its campaign noticed the role was gone: the reconciles woken on
/// resume ran first, and overwrote its successor's statuses. The fence in
/// the client refuses every write once the Lease time has run out, whatever
/// task sends it. Replica `a` talks through a proxy that records its
/// writes; it is stopped just after its first write of a fleet change, and
/// continued only after `b` took over and finished the change.
#[tokio::test]
async fn a_leader_stopped_past_its_lease_writes_nothing_when_it_resumes() {
    use k8s_openapi::jiff::Timestamp;

    use crate::faults::api_proxy::ApiProxy;
    use crate::operator::{converged_count, create_fleet};

    const FLEET: usize = 24;
    let ns = TestNamespace::new("ops-lease-sigstop").await;
    let classes = shared_class(&ns).await;
    let proxy = ApiProxy::start().await;
    let (a, b) = short_pair(&ns, Some(proxy.kubeconfig(&scratch_dir(&ns.name)))).await;
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "i", FLEET).await;
    wait_for(
        "the fleet to converge",
        Duration::from_secs(180),
        || async { (converged_count(&instances, None).await == FLEET).then_some(()) },
    )
    .await;
    let old = instances.get("i00").await.unwrap().status.unwrap();
    let old_revision = old.applied_revision.expect("applied");

    // The fleet change, then a stopped as soon as it is writing it.
    let change = Timestamp::now();
    for i in 0..FLEET {
        apply_json(
            &instances,
            "test",
            instance(&format!("i{i:02}"), "registry.example/kura:1.0.1"),
        )
        .await
        .unwrap();
    }
    wait_for("a to write the change", Duration::from_secs(30), || async {
        (!proxy.writes_since(change).is_empty()).then_some(())
    })
    .await;
    a.signal("-STOP");
    wait_role(&b, 1.0, SHORT_LEASE * 4).await;
    wait_for(
        "b to finish the change",
        Duration::from_secs(180),
        || async {
            (converged_count(&instances, Some(&old_revision)).await == FLEET).then_some(())
        },
    )
    .await;

    let resumed = Timestamp::now();
    a.signal("-CONT");
    wait_role(&a, 0.0, Duration::from_secs(30)).await;
    // The reconciles woken on resume have run by now (the role went
    // after them); anything they sent went through the proxy.
    let late: Vec<String> = proxy
        .writes_since(resumed)
        .iter()
        .map(ToString::to_string)
        .collect();
    let fenced = a.metric("kura_writes_fenced_total").await;
    eprintln!(
        "after resuming: {} writes sent, {fenced:?} refused by the fence",
        late.len()
    );
    assert!(
        late.is_empty(),
        "a wrote after resuming past its Lease:\n{}\n{}",
        late.join("\n"),
        a.log()
    );
    // And what b wrote stands.
    assert_eq!(
        converged_count(&instances, Some(&old_revision)).await,
        FLEET,
        "every instance still Ready on the new revision"
    );
    delete_shared_class(&classes, &ns).await;
}

/// A standby that could not read for longer than a lease duration (stopped)
/// once re-created a Lease deleted by hand on its first read after
/// resuming, while the holder still led: it counted the duration from the
/// last change it had seen, long before. It now counts from its own first
/// read that finds the Lease missing, so the holder, which re-creates its
/// Lease at once, is always first.
#[tokio::test]
async fn a_standby_resumed_after_a_stall_never_takes_a_lease_deleted_by_hand() {
    let ns = TestNamespace::new("ops-lease-standby-stall").await;
    let (a, b) = short_pair(&ns, None).await;
    let leases = ns.api::<Lease>();
    let renewed = |lease: Lease| lease.spec.and_then(|s| s.renew_time).map(|t| t.0);

    b.signal("-STOP");
    // Stopped for longer than the lease duration: the Lease is renewed by
    // `a` all along, and `b` sees none of it.
    let stopped = k8s_openapi::jiff::Timestamp::now();
    let stall = k8s_openapi::jiff::SignedDuration::try_from(SHORT_LEASE * 2).unwrap();
    wait_for(
        "a to renew for two lease durations while b is stopped",
        SHORT_LEASE * 4,
        || async {
            let at = renewed(leases.get("kura-operator").await.ok()?)?;
            (at > stopped + stall).then_some(())
        },
    )
    .await;
    leases
        .delete("kura-operator", &Default::default())
        .await
        .unwrap();
    b.signal("-CONT");
    let resumed = Instant::now();
    let Roles {
        samples,
        both,
        b_led,
    } = sample_roles(&a, &b, resumed, SHORT_LEASE * 2, Duration::from_millis(50)).await;
    assert!(samples > 50, "sampled the whole window: {samples}");
    assert_eq!(
        both,
        0,
        "two leaders at once in {both} of {samples} samples (b led in {b_led})\n{}",
        b.log()
    );
    assert_eq!(b_led, 0, "the holder kept its Lease: b never led");
    let holder = holder(&ns).await.expect("the Lease exists again");
    assert!(a.log().contains(&holder), "a holds it again: {holder}");
}
