//! The client's bottom with the fence in its sockets: reads, and the Lease
//! API, go over connections of their own, and the writes of each shard over
//! connections that refuse bytes past that shard's Lease time
//! (`socket.rs`); writes needing any shard (cluster-scoped objects, the
//! operator's own namespace) over one more pool.
//!
//! Above the pools the stack is kube's own (its base URI, retries of 429
//! and 503, authentication with refreshed tokens, extra headers), built
//! from the same configuration, so a fenced client behaves like the
//! default one in everything but the fence.

use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use http_body_util::BodyExt as _;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt as _, DynBody};
use tower::{ServiceBuilder, ServiceExt as _};

use super::socket::FencedConnector;
use super::{BoxError, Fence, Scope};

/// The client's bottom for `config`: with election, [`fenced_service`];
/// without (the fence open), or through an HTTP proxy (whose tunnel this
/// stack does not build), kube's own, whose writes the layer above still
/// fences.
pub fn client_bottom(
    config: kube::Config,
    fence: Arc<Fence>,
) -> Result<kube::client::ClientBuilder<FencedService>, kube::Error> {
    if fence.until.is_none() {
        return kube::client::ClientBuilder::try_from(config);
    }
    if config.proxy_url.is_some() {
        tracing::warn!(
            "an HTTP proxy is configured: writes are fenced when handed to the client, not in its sockets"
        );
        return kube::client::ClientBuilder::try_from(config);
    }
    let namespace = config.default_namespace.clone();
    Ok(kube::client::ClientBuilder::new(
        fenced_service(&config, fence)?,
        namespace,
    ))
}

/// The service kube's own builder makes, with the fence in its sockets.
pub type FencedService =
    tower::util::BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// The stack for `config` whose writes leave only within `fence`'s Lease
/// times, down to their last byte.
pub fn fenced_service(
    config: &kube::Config,
    fence: Arc<Fence>,
) -> Result<FencedService, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_https_connector_with_connector(http)?;
    let pools = Pools::new(config, tls, fence);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let stack = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(http_trace())
        .map_err(BoxError::from)
        .service(pools);
    Ok(stack
        .map_response(|response: http::Response<_>| {
            response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        })
        .boxed())
}

/// The span and lines kube's own stack gives every request (`HTTP`, with
/// its method, URL and status), under kube's target, so that a log filter
/// showing kube's requests (`kube=debug`) shows them with election too.
#[allow(clippy::type_complexity)] // the layer's type names each of its callbacks
fn http_trace() -> tower_http::trace::TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
    impl Fn(&http::Request<Body>) -> tracing::Span + Clone,
    impl Fn(&http::Request<Body>, &tracing::Span) + Clone,
    impl Fn(&http::Response<hyper::body::Incoming>, std::time::Duration, &tracing::Span) + Clone,
    (),
    impl Fn(Option<&http::HeaderMap>, std::time::Duration, &tracing::Span) + Clone,
    impl Fn(tower_http::classify::ServerErrorsFailureClass, std::time::Duration, &tracing::Span) + Clone,
> {
    use tower_http::classify::ServerErrorsFailureClass;
    tower_http::trace::TraceLayer::new_for_http()
        .make_span_with(|request: &http::Request<Body>| {
            tracing::debug_span!(
                target: "kube_client::client::builder",
                "HTTP",
                http.method = %request.method(),
                http.url = %request.uri(),
                http.status_code = tracing::field::Empty,
                otel.name = request.extensions().get::<&'static str>().unwrap_or(&"HTTP"),
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
            )
        })
        .on_request(|_: &http::Request<Body>, _: &tracing::Span| {
            tracing::debug!(target: "kube_client::client::builder", "requesting");
        })
        .on_response(
            |response: &http::Response<hyper::body::Incoming>, _: std::time::Duration, span: &tracing::Span| {
                let status = response.status();
                span.record("http.status_code", status.as_u16());
                if status.is_client_error() || status.is_server_error() {
                    span.record("otel.status_code", "ERROR");
                }
            },
        )
        .on_body_chunk(())
        // With the status recorded in the span: the line that shows a
        // request's answer.
        .on_eos(
            |_: Option<&http::HeaderMap>, _: std::time::Duration, _: &tracing::Span| {
                tracing::debug!(target: "kube_client::client::builder", "stream closed");
            },
        )
        .on_failure(
            |failure: ServerErrorsFailureClass, _: std::time::Duration, span: &tracing::Span| {
                span.record("otel.status_code", "ERROR");
                match failure {
                    ServerErrorsFailureClass::StatusCode(status) => {
                        span.record("http.status_code", status.as_u16());
                        tracing::error!(target: "kube_client::client::builder", "failed with status {status}");
                    }
                    ServerErrorsFailureClass::Error(error) => {
                        tracing::error!(target: "kube_client::client::builder", "failed with error {error}");
                    }
                }
            },
        )
}

type Pool<C> = HyperClient<TimeoutConnector<FencedConnector<C>>, Body>;

/// One connection pool per scope a request can need.
struct Pools<C> {
    fence: Arc<Fence>,
    free: Pool<C>,
    /// Indexed by shard.
    shards: Vec<Pool<C>>,
    any_shard: Pool<C>,
}

impl<C: Clone> Clone for Pools<C> {
    fn clone(&self) -> Self {
        Pools {
            fence: self.fence.clone(),
            free: self.free.clone(),
            shards: self.shards.clone(),
            any_shard: self.any_shard.clone(),
        }
    }
}

impl<C> Pools<C>
where
    C: tower::Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response:
        hyper::rt::Read + hyper::rt::Write + hyper_util::client::legacy::connect::Connection,
    C::Response: Send + Unpin + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    fn new(config: &kube::Config, connector: C, fence: Arc<Fence>) -> Self {
        let pool = |scope: Scope| {
            let fenced = FencedConnector {
                inner: connector.clone(),
                fence: fence.clone(),
                scope,
            };
            // The same bounds kube's own builder sets.
            let mut timed = TimeoutConnector::new(fenced);
            timed.set_connect_timeout(config.connect_timeout);
            timed.set_read_timeout(config.read_timeout);
            timed.set_write_timeout(config.write_timeout);
            timed.set_reset_reader_on_write(config.reset_reader_on_write);
            HyperClient::builder(TokioExecutor::new()).build(timed)
        };
        Pools {
            free: pool(Scope::Free),
            shards: (0..fence.shards.count())
                .map(|s| pool(Scope::Shard(s)))
                .collect(),
            any_shard: pool(Scope::AnyShard),
            fence,
        }
    }
}

impl<C> tower::Service<http::Request<Body>> for Pools<C>
where
    C: tower::Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response:
        hyper::rt::Read + hyper::rt::Write + hyper_util::client::legacy::connect::Connection,
    C::Response: Send + Unpin + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        // A hyper client is always ready: it queues for a connection itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let pool = match self.fence.scope(request.method(), request.uri().path()) {
            Scope::Free => &self.free,
            Scope::Shard(shard) => &self.shards[shard as usize],
            Scope::AnyShard => &self.any_shard,
        };
        pool.request(request)
    }
}
