//! The fence's rules, and its layer driven by hand.
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::{Context as TaskContext, Poll};

use http::Method;

use super::layer::within_lease;
use super::*;

const DEADLINE: Duration = Duration::from_secs(10);

/// A stand-in for the client's inner service that records whether a
/// request reached it. Lazy, as hyper's client is: nothing is sent before
/// the future is polled.
fn recording_service() -> (Arc<AtomicBool>, Recording) {
    let sent = Arc::new(AtomicBool::new(false));
    let seen = sent.clone();
    let inner = tower::service_fn(move |_req: http::Request<()>| {
        let seen = seen.clone();
        async move {
            seen.store(true, Ordering::SeqCst);
            Ok::<_, BoxError>(http::Response::new(()))
        }
    });
    (sent, tower::util::BoxCloneService::new(inner))
}

type Recording = tower::util::BoxCloneService<http::Request<()>, http::Response<()>, BoxError>;

fn sharded(n: u32) -> Fence {
    Fence::elected(Shards::new(n).unwrap(), "kura-system")
}

fn ns_in_shard(shards: Shards, shard: u32) -> String {
    (0..)
        .map(|i| format!("tenant-{i}"))
        .find(|ns| shards.of_namespace(ns) == shard)
        .unwrap()
}

#[test]
fn reads_and_lease_requests_are_never_fenced() {
    let fence = sharded(1);
    let now = Instant::now();
    assert!(
        fence
            .check(&Method::GET, "/api/v1/namespaces/a/pods", now)
            .is_ok()
    );
    let lease = "/apis/coordination.k8s.io/v1/namespaces/kura-system/leases/kura-operator";
    assert!(fence.check(&Method::PUT, lease, now).is_ok());
    assert!(fence.check(&Method::POST, lease, now).is_ok());
}

#[test]
fn without_election_every_write_passes() {
    let fence = Fence::open();
    let path = "/apis/apps/v1/namespaces/a/statefulsets/x";
    assert!(fence.check(&Method::PATCH, path, Instant::now()).is_ok());
}

#[test]
fn a_write_passes_until_the_renewal_plus_the_renew_deadline_less_the_margin() {
    let fence = sharded(1);
    let sent = Instant::now();
    let path = "/apis/kura.dev/v1alpha1/namespaces/a/kurainstances/x/status";
    assert!(
        fence.check(&Method::PATCH, path, sent).is_err(),
        "nothing before a lease is held"
    );
    fence.renewed(0, Some(sent), DEADLINE);
    assert!(fence.check(&Method::PATCH, path, sent).is_ok());
    let last = sent + Duration::from_millis(9_799);
    assert!(fence.check(&Method::PATCH, path, last).is_ok());
    let out = sent + Duration::from_millis(9_800);
    assert!(
        fence.check(&Method::PATCH, path, out).is_err(),
        "2% of the deadline is the margin"
    );
    // After a stall of any length, the same.
    assert!(
        fence
            .check(&Method::PATCH, path, sent + Duration::from_secs(3600))
            .is_err()
    );
}

#[test]
fn closing_a_shard_stops_its_writes_at_once() {
    let fence = sharded(1);
    let now = Instant::now();
    fence.renewed(0, Some(now), DEADLINE);
    fence.close(0);
    let path = "/api/v1/namespaces/a/configmaps/x";
    assert!(fence.check(&Method::DELETE, path, now).is_err());
}

#[test]
fn a_write_needs_the_shard_of_its_namespace() {
    let shards = Shards::new(4).unwrap();
    let fence = sharded(4);
    let now = Instant::now();
    fence.renewed(2, Some(now), DEADLINE);
    let mine = ns_in_shard(shards, 2);
    let theirs = ns_in_shard(shards, 1);
    let path = |ns: &str| format!("/apis/apps/v1/namespaces/{ns}/statefulsets/x");
    assert!(fence.check(&Method::PATCH, &path(&mine), now).is_ok());
    let refused = fence.check(&Method::PATCH, &path(&theirs), now);
    assert!(matches!(refused, Err(Fenced::NotSent(1))));
    // Core API paths too.
    let events = format!("/api/v1/namespaces/{theirs}/events");
    assert!(fence.check(&Method::POST, &events, now).is_err());
}

#[test]
fn cluster_scoped_and_own_namespace_writes_need_any_shard() {
    let fence = sharded(4);
    let now = Instant::now();
    let binding = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x";
    let ledger = "/api/v1/namespaces/kura-system/configmaps/kura-operator-hosts";
    assert!(fence.check(&Method::PUT, binding, now).is_err());
    assert!(fence.check(&Method::PUT, ledger, now).is_err());
    fence.renewed(3, Some(now), DEADLINE);
    assert!(fence.check(&Method::PUT, binding, now).is_ok());
    assert!(fence.check(&Method::PUT, ledger, now).is_ok());
}

#[test]
fn paths_name_their_namespace_or_none() {
    assert_eq!(
        target(&Method::PATCH, "/api/v1/namespaces/a/services/s"),
        Target::Namespaced("a")
    );
    assert_eq!(
        target(
            &Method::PATCH,
            "/apis/networking.k8s.io/v1/namespaces/b/ingresses/i",
        ),
        Target::Namespaced("b")
    );
    assert_eq!(
        target(&Method::DELETE, "/api/v1/namespaces/a"),
        Target::Cluster,
        "the Namespace object itself"
    );
    assert_eq!(
        target(
            &Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        ),
        Target::Cluster
    );
    assert_eq!(target(&Method::GET, "/api/v1/pods"), Target::Free);
    assert_eq!(
        target(&Method::POST, "/apis/events.k8s.io/v1/namespaces/k/events"),
        Target::Namespaced("k"),
        "an Event is a write like any other, in the operator's namespace too"
    );
}

#[tokio::test]
async fn a_refused_request_never_reaches_the_inner_service() {
    use tower::{Layer, Service, ServiceExt};
    let (sent, inner) = recording_service();
    let fence = Arc::new(sharded(1));
    let counter = Counter::default();
    let fence = Arc::new(Arc::into_inner(fence).unwrap().counted(counter.clone()));
    let mut service = FenceLayer(fence.clone()).layer(inner);
    let request = || {
        http::Request::builder()
            .method(Method::PATCH)
            .uri("/api/v1/namespaces/a/configmaps/x")
            .body(())
            .unwrap()
    };
    let refused = service.ready().await.unwrap().call(request()).await;
    let error = refused.unwrap_err();
    assert!(error.downcast_ref::<Fenced>().is_some(), "{error}");
    assert!(!sent.load(Ordering::SeqCst), "nothing was sent");
    assert_eq!(counter.get(), 1);
    fence.renewed(0, Some(Instant::now()), DEADLINE);
    let passed = service.ready().await.unwrap().call(request()).await;
    assert!(passed.is_ok());
    assert!(sent.load(Ordering::SeqCst));
}

/// A request in flight when the process stalls: after the stall, the
/// first poll that comes (a finished connect wakes it) sees the Lease
/// time over before the client's future can hand the request on. A
/// timeout, which polls the inner future first, would let it go.
#[tokio::test]
async fn after_a_stall_the_clock_is_read_before_the_client_goes_on() {
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = polls.clone();
    // Pending at its first poll; at its second it would send.
    let send = std::future::poll_fn(move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            Poll::Pending
        } else {
            Poll::Ready("sent")
        }
    });
    let until = Instant::now() + Duration::from_millis(20);
    let mut fenced = std::pin::pin!(within_lease(until, send));
    let waker = futures::task::noop_waker();
    let mut cx = TaskContext::from_waker(&waker);
    assert!(fenced.as_mut().poll(&mut cx).is_pending());
    // The stall: the Lease time runs out while nothing polls.
    while Instant::now() < until {
        std::hint::spin_loop();
    }
    assert_eq!(fenced.as_mut().poll(&mut cx), Poll::Ready(None));
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "not polled after the time ran out"
    );
}

/// The service is called while the Lease holds, and its future first
/// polled after the time ran out (a stall in between): not sent.
#[tokio::test]
async fn a_request_called_in_time_and_polled_too_late_is_not_sent() {
    use tower::{Layer, Service, ServiceExt};
    let (sent, inner) = recording_service();
    let fence = Arc::new(sharded(1));
    fence.renewed(0, Some(Instant::now()), DEADLINE);
    let mut service = FenceLayer(fence.clone()).layer(inner);
    let request = http::Request::builder()
        .method(Method::PATCH)
        .uri("/api/v1/namespaces/a/configmaps/x")
        .body(())
        .unwrap();
    let pending = service.ready().await.unwrap().call(request);
    // The Lease time runs out before the future is driven.
    fence.renewed(0, Some(Instant::now() - DEADLINE), DEADLINE);
    assert!(
        pending
            .await
            .unwrap_err()
            .downcast_ref::<Fenced>()
            .is_some()
    );
    assert!(!sent.load(Ordering::SeqCst));
}

/// A write sent in time whose answer (the client's retries below this
/// layer included) outlasts the Lease time is abandoned at that time.
#[tokio::test]
async fn a_write_in_flight_is_abandoned_when_the_lease_time_runs_out() {
    use tower::{Layer, Service, ServiceExt};
    // An answer that takes a minute: a 429 retried with Retry-After.
    let inner = tower::service_fn(|_req: http::Request<()>| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, BoxError>(http::Response::new(()))
    });
    let fence = Arc::new(sharded(1));
    // A short Lease: the answer is abandoned after 0.3 s, not 60.
    fence.renewed(0, Some(Instant::now()), Duration::from_millis(300));
    let mut service = FenceLayer(fence).layer(inner);
    let request = http::Request::builder()
        .method(Method::PATCH)
        .uri("/api/v1/namespaces/a/configmaps/x")
        .body(())
        .unwrap();
    let started = Instant::now();
    let answer = service.ready().await.unwrap().call(request).await;
    assert!(matches!(
        answer.unwrap_err().downcast_ref::<Fenced>(),
        Some(Fenced::InFlight)
    ));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
