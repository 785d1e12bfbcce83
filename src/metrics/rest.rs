//! The client's side of the conventional families: a tower layer on the
//! operator's client that counts every request (`rest_client_requests_total`)
//! and follows the staleness of lists and watches.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use super::runtime::RuntimeMetrics;

/// The tower layer on the operator's client: `rest_client_requests_total`
/// of every request, and the staleness of lists and watches (every byte of a
/// watch's response, a bookmark included, is news of its resource).
#[derive(Clone)]
pub struct RestLayer {
    metrics: Arc<RuntimeMetrics>,
    host: Arc<str>,
}

impl RestLayer {
    /// Requests to the apiserver at `host` (`host:port`, the label).
    pub fn new(metrics: Arc<RuntimeMetrics>, host: &str) -> Self {
        RestLayer {
            metrics,
            host: host.into(),
        }
    }
}

impl<S> tower::Layer<S> for RestLayer {
    type Service = RestService<S>;
    fn layer(&self, inner: S) -> RestService<S> {
        RestService {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RestService<S> {
    inner: S,
    layer: RestLayer,
}

/// The plural resource a collection request (a list or a watch: `limit=` or
/// `watch=` in the query) is about; None for any other request.
fn collection_resource<B>(request: &http::Request<B>) -> Option<String> {
    if request.method() != http::Method::GET {
        return None;
    }
    let query = request.uri().query()?;
    let collection = query
        .split('&')
        .any(|p| p.starts_with("watch=") || p.starts_with("limit="));
    if !collection {
        return None;
    }
    let resource = request.uri().path().rsplit('/').next()?;
    (!resource.is_empty()).then(|| resource.to_string())
}

impl<S, ReqBody, B> tower::Service<http::Request<ReqBody>> for RestService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<HeardBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let resource = collection_resource(&request);
        let layer = self.layer.clone();
        if let Some(r) = &resource {
            layer.metrics.watch_requested(r);
        }
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = result.as_ref().ok().map(|r| r.status().as_u16());
            layer.metrics.rest_request(code, &method, &layer.host);
            let ok = code.is_some_and(|c| (200..300).contains(&c));
            let heard = resource.filter(|_| ok);
            if let Some(r) = &heard {
                layer.metrics.watch_heard(r);
            }
            result.map(|response| {
                response.map(|body| HeardBody {
                    inner: Box::pin(body),
                    heard: heard.map(|r| (layer.metrics.clone(), r)),
                })
            })
        })
    }
}

/// A response body that tells [`RuntimeMetrics`] each time data arrives for a
/// list or watch.
pub struct HeardBody<B> {
    inner: Pin<Box<B>>,
    heard: Option<(Arc<RuntimeMetrics>, String)>,
}

impl<B: http_body::Body> http_body::Body for HeardBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let polled = self.inner.as_mut().poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some((metrics, resource))) = (&polled, &self.heard)
            && frame.is_data()
        {
            metrics.watch_heard(resource);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_watches_name_their_resource() {
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        assert_eq!(
            collection_resource(&get(
                "/apis/apps/v1/namespaces/ns/statefulsets?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=5"
            )),
            Some("statefulsets".into())
        );
        assert_eq!(
            collection_resource(&get("/apis/kura.dev/v1alpha1/kurainstances?limit=500")),
            Some("kurainstances".into())
        );
        assert_eq!(
            collection_resource(&get("/api/v1/namespaces/ns/configmaps/x")),
            None
        );
        assert_eq!(
            collection_resource(
                &http::Request::patch("/api/v1/namespaces/ns/configmaps/x?fieldManager=k")
                    .body(())
                    .unwrap()
            ),
            None
        );
    }
}
