//! A reverse proxy between one operator process and the apiserver that can
//! hang one API alone: the Lease API (the stuck connection of the "two
//! leaders" report), or the lists and watches of one kind (a busy apiserver
//! slow to fill one of the operator's caches).
//!
//! Every request is forwarded with the plane's admin credentials (the operator
//! behind it gets a kubeconfig with an `http://` server and none of its own);
//! responses stream back, so watches work. While stalled, requests whose path
//! contains the stalled part are held without an answer until the stall ends
//! (or the operator gives up on them). The proxy records every write it
//! forwards outside the Lease API, and the bytes of every watch response, so a
//! test can tell what the operator was shown and what it did.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

/// One write forwarded to the apiserver, outside the Lease API.
#[derive(Clone)]
pub struct Write {
    pub at: Timestamp,
    pub method: Method,
    pub path: String,
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.at, self.method, self.path)
    }
}

struct Shared {
    upstream: kube::Client,
    /// The part of a path whose requests are held, while a stall lasts.
    stalled: watch::Sender<Option<String>>,
    writes: Mutex<Vec<Write>>,
    /// Everything streamed back to watch requests (a test's few objects).
    watched: Mutex<Vec<u8>>,
    /// The paths of reads answered (lists among them).
    answered: Mutex<Vec<String>>,
}

pub struct ApiProxy {
    pub port: u16,
    shared: Arc<Shared>,
    serving: tokio::task::JoinHandle<()>,
}

impl ApiProxy {
    pub async fn start() -> ApiProxy {
        let shared = Arc::new(Shared {
            upstream: crate::support::client().await,
            stalled: watch::channel(None).0,
            writes: Mutex::default(),
            watched: Mutex::default(),
            answered: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ApiProxy {
            port,
            shared,
            serving,
        }
    }

    /// A kubeconfig for the proxy: plain HTTP on 127.0.0.1, no credentials
    /// (the proxy adds the admin's).
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(format!("kubeconfig-proxy-{}", self.port));
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{}\n\
             users:\n- name: nobody\n  user: {{}}\n\
             contexts:\n- name: proxy\n  context: {{cluster: proxy, user: nobody}}\n\
             current-context: proxy\n",
            self.port
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Hold (true) or release (false) requests to the Lease API.
    pub fn stall_leases(&self, stalled: bool) {
        self.stall(stalled.then_some("/leases"));
    }

    /// Hold requests whose path contains `part` (e.g. `/statefulsets`), or
    /// release them (`None`).
    pub fn stall(&self, part: Option<&str>) {
        self.shared.stalled.send_replace(part.map(String::from));
    }

    /// Writes forwarded at or after `since`.
    pub fn writes_since(&self, since: Timestamp) -> Vec<Write> {
        let writes = self.shared.writes.lock().unwrap();
        writes.iter().filter(|w| w.at >= since).cloned().collect()
    }

    /// Whether a read (a list among them) of a path containing `part` has been answered.
    pub fn answered(&self, part: &str) -> bool {
        self.shared
            .answered
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.contains(part))
    }

    /// Whether a watch response has carried `needle` to the operator.
    pub fn watch_delivered(&self, needle: &str) -> bool {
        let watched = self.shared.watched.lock().unwrap();
        watched
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let path = parts.uri.path().to_string();
    // Nothing answers while the stall lasts: a hung connection as far as the
    // operator can tell.
    let mut stalled = shared.stalled.subscribe();
    let _ = stalled
        .wait_for(|part| part.as_deref().is_none_or(|p| !path.contains(p)))
        .await;
    if !path.contains("/leases")
        && !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS)
    {
        shared.writes.lock().unwrap().push(Write {
            at: Timestamp::now(),
            method: parts.method.clone(),
            path: target.clone(),
        });
    }
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut upstream = axum::http::Request::builder()
        .method(parts.method)
        .uri(&target);
    for (name, value) in &parts.headers {
        // The upstream connection has its own host and framing.
        if ![header::HOST, header::CONTENT_LENGTH, header::CONNECTION].contains(name) {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = upstream
        .body(kube::client::Body::from(body.to_vec()))
        .unwrap();
    let response = match shared.upstream.send(upstream).await {
        Ok(response) => response,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (parts, body) = response.into_parts();
    let body = Body::new(body);
    if !target.contains("watch=true") {
        shared.answered.lock().unwrap().push(path);
        return Response::from_parts(parts, body);
    }
    let recorder = shared.clone();
    let stream = body.into_data_stream().inspect(move |chunk| {
        if let Ok(bytes) = chunk {
            recorder.watched.lock().unwrap().extend_from_slice(bytes);
        }
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
