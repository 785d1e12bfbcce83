//! The write fence: no request that writes leaves a process whose Lease time
//! has run out, whatever its tasks are doing.
//!
//! Leading is decided by the campaign tasks of `leader.rs`, and reconciles are
//! dropped when the role goes (`leader::while_leading`, `shards::Gate::run`).
//! Both are tasks: a process stopped past its Lease (SIGSTOP, a frozen VM, a
//! starved node) wakes with every timer due at once, and a reconcile woken on
//! resume can send its writes before the campaign notices that the role is
//! gone. The fence does not depend on which task runs first. It is a tower
//! layer of the client itself, so every request passes it, and it compares the
//! monotonic clock, read when the request is about to be sent, with a
//! deadline per shard that only a successful renewal moves forward:
//! the renewal's send time plus the renew deadline (two thirds of the lease
//! duration), less a margin for the clocks of two processes running at
//! different rates ([`CLOCK_RATE_MARGIN`]). A standby takes over only after
//! the whole duration by its own clock, so a write that passes the fence
//! reaches the apiserver before anybody else may act, unless it spends more
//! than a third of the lease duration on the way.
//!
//! Which shard a request acts for is read from its path: an object in
//! namespace `ns` belongs to the shard of `ns`. Writes to cluster-scoped
//! objects and to the operator's own namespace (the shared ledgers of a
//! sharded fleet, this pod's Events) need any shard held. Lease requests
//! pass: a campaign's writes carry the resourceVersion they read, so a stale
//! one fails by itself (409), and a holder must be able to renew.
//!
//! Without leader election the fence is open: one process is the whole
//! fleet's by declaration.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use kura_core::shard::Shards;

/// The part of the renew deadline given up so that a process whose clock
/// runs slower than its successor's still stops first. Real clocks differ by
/// parts per million; 2% is far beyond that and costs 0.2 s of a 10 s deadline.
pub const CLOCK_RATE_MARGIN: u32 = 50;

/// Until when this process may write, per shard.
pub struct Fence {
    shards: Shards,
    /// The namespace of the Leases (and of the shared ledgers).
    own_namespace: String,
    /// `None`: no election, always open.
    until: Option<Mutex<Vec<Option<Instant>>>>,
    refused: Counter,
    /// A refusal was logged since the fence last opened (one line per loss).
    logged: AtomicBool,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("shards", &self.shards)
            .field("elected", &self.until.is_some())
            .finish()
    }
}

/// What a request is about, for the fence.
#[derive(Debug, PartialEq, Eq)]
enum Target<'a> {
    /// Reads, and the Lease API: never fenced.
    Free,
    /// An object in this namespace.
    Namespaced(&'a str),
    /// A cluster-scoped object.
    Cluster,
}

/// The error of a write the fence refused: not a failure of the request,
/// which was never sent (or, in flight, abandoned when the time ran out).
#[derive(Debug, thiserror::Error)]
pub enum Fenced {
    #[error(
        "not sent: this process holds no Lease time for shard {0} (it ran out, or it was never held); a write now could undo a leader's"
    )]
    NotSent(u32),
    #[error(
        "abandoned: this process's Lease time ran out while the request was in flight (the client's own retries included)"
    )]
    InFlight,
}

impl Fence {
    /// No election: every write passes.
    pub fn open() -> Fence {
        Fence {
            shards: Shards::ONE,
            own_namespace: String::new(),
            until: None,
            refused: Counter::default(),
            logged: AtomicBool::new(false),
        }
    }

    /// Elected: nothing passes until a Lease is held.
    pub fn elected(shards: Shards, own_namespace: &str) -> Fence {
        Fence {
            shards,
            own_namespace: own_namespace.to_string(),
            until: Some(Mutex::new(vec![None; shards.count() as usize])),
            refused: Counter::default(),
            logged: AtomicBool::new(false),
        }
    }

    /// Refused writes are counted here too.
    pub fn counted(mut self, refused: Counter) -> Fence {
        self.refused = refused;
        self
    }

    /// Shard `shard`'s Lease was renewed by a request sent at `sent`
    /// (`None`: it is not held): the deadline is that renewal's, whatever
    /// it was before (the campaign reports its renewals in order).
    pub fn renewed(&self, shard: u32, sent: Option<Instant>, renew_deadline: Duration) {
        let Some(until) = &self.until else { return };
        let mut until = until.lock().unwrap();
        let Some(slot) = until.get_mut(shard as usize) else {
            return;
        };
        *slot = sent.map(|s| s + fence_window(renew_deadline));
        if slot.is_some() {
            self.logged.store(false, Ordering::Relaxed);
        }
    }

    /// Shard `shard` is being given up: nothing more is written for it.
    /// Called before the Lease is released, so that no write of ours can
    /// follow the release.
    pub fn close(&self, shard: u32) {
        self.renewed(shard, None, Duration::ZERO);
    }

    /// Whether a write to an object in `namespace` may be sent now.
    pub fn allows_write_in(&self, namespace: &str) -> bool {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/x");
        self.check(&http::Method::PATCH, &path, Instant::now())
            .is_ok()
    }

    /// Whether a request of `method` to `path` may be sent at `now`: until
    /// when (`None`: no bound), or the shard it would act for.
    fn check(
        &self,
        method: &http::Method,
        path: &str,
        now: Instant,
    ) -> Result<Option<Instant>, Fenced> {
        let Some(until) = &self.until else {
            return Ok(None);
        };
        let target = target(method, path);
        if target == Target::Free {
            return Ok(None);
        }
        let until = until.lock().unwrap();
        let live = |s: usize| until.get(s).copied().flatten().filter(|t| now < *t);
        match target {
            Target::Free => Ok(None),
            Target::Namespaced(ns) if ns != self.own_namespace => {
                let shard = self.shards.of_namespace(ns);
                live(shard as usize).map(Some).ok_or(Fenced::NotSent(shard))
            }
            _ => (0..until.len())
                .filter_map(live)
                .max()
                .map(Some)
                .ok_or(Fenced::NotSent(0)),
        }
    }

    fn refuse(&self, fenced: &Fenced, method: &http::Method, path: &str) {
        self.refused.inc();
        if !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(%method, path, "{fenced}; further refusals are counted in kura_writes_fenced_total");
        }
    }
}

/// How long after a renewal was sent its holder may still write.
fn fence_window(renew_deadline: Duration) -> Duration {
    renew_deadline - renew_deadline / CLOCK_RATE_MARGIN
}

/// What the request at `path` acts on. Paths are the API's own:
/// `/api/v1/namespaces/{ns}/…` or `/apis/{group}/{version}/namespaces/{ns}/…`;
/// a Namespace object itself (`…/namespaces/{ns}` with nothing after) is
/// cluster-scoped.
fn target<'a>(method: &http::Method, path: &'a str) -> Target<'a> {
    use http::Method;
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Target::Free;
    }
    if path.starts_with("/apis/coordination.k8s.io/") {
        return Target::Free;
    }
    let mut parts = path.trim_start_matches('/').split('/');
    let rest: Vec<&str> = match parts.next() {
        Some("api") => parts.skip(1).collect(),
        Some("apis") => parts.skip(2).collect(),
        _ => return Target::Cluster,
    };
    match rest.as_slice() {
        ["namespaces", ns, _, ..] if !ns.is_empty() => Target::Namespaced(ns),
        _ => Target::Cluster,
    }
}

/// The fence as a layer of the client.
#[derive(Clone)]
pub struct FenceLayer(pub Arc<Fence>);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FenceService<S>;
    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FenceService<S> {
    inner: S,
    fence: Arc<Fence>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, ReqBody, B> tower::Service<http::Request<ReqBody>> for FenceService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let fence = self.fence.clone();
        if let Err(fenced) = fence.check(&method, &path, Instant::now()) {
            fence.refuse(&fenced, &method, &path);
            return Box::pin(async move { Err(Box::new(fenced) as BoxError) });
        }
        // Checked again when the future is first polled: the client's
        // service is called in a task of its own (kube's buffer) and the
        // future is driven by the caller, which may run much later (a
        // stall between the two). Hyper's future sends nothing before it is
        // polled, so the clock is read at the last moment before the
        // request leaves.
        let send = self.inner.call(request);
        Box::pin(async move {
            let until = match fence.check(&method, &path, Instant::now()) {
                Ok(until) => until,
                Err(fenced) => {
                    fence.refuse(&fenced, &method, &path);
                    return Err(Box::new(fenced) as BoxError);
                }
            };
            let Some(until) = until else {
                return send.await.map_err(Into::into);
            };
            // Bounded by the Lease time: what the client does below this
            // layer (its retries of a 429 or a 503, a reconnect) is
            // abandoned when the time runs out, not sent after it. The clock
            // is read before each poll of the client's future, not after
            // (as a timeout would): after a stall, the poll that a finished
            // connect wakes would otherwise hand the request to the
            // connection before the deadline is seen.
            match within_lease(until, send).await {
                Some(answer) => answer.map_err(Into::into),
                None => {
                    let fenced = Fenced::InFlight;
                    fence.refuse(&fenced, &method, &path);
                    Err(Box::new(fenced) as BoxError)
                }
            }
        })
    }
}

/// `send`'s output, or None once `until` has passed: the monotonic clock is
/// read before every poll of `send`, so nothing of it runs past `until`; a
/// timer wakes the future at `until` when nothing else does.
async fn within_lease<F: Future>(until: Instant, send: F) -> Option<F::Output> {
    let mut send = std::pin::pin!(send);
    let mut wake = std::pin::pin!(tokio::time::sleep_until(until.into()));
    std::future::poll_fn(|cx| {
        if Instant::now() >= until {
            return Poll::Ready(None);
        }
        if let Poll::Ready(out) = send.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        // Registers the wake-up at `until` (its output is the clock's above).
        let _ = wake.as_mut().poll(cx);
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use http::Method;

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
}
