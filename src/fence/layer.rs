//! The fence as a layer of the client: the clock read when a write is
//! handed to the client, when its future is first polled and before every
//! poll after that.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use super::{BoxError, Fence, Fenced};

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
pub(super) async fn within_lease<F: Future>(until: Instant, send: F) -> Option<F::Output> {
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
