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
//!
//! For the perturbation harness (`perturb`), it can also stop at the k-th
//! write (before or after forwarding it) until the test has acted (killed
//! or stopped the operator), delay the watch events of one API (a stale
//! view), and end every watch with the next ones answered 410 Gone (events
//! lost: the operator must list again).

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

/// Where a trapped write stops: before it is forwarded (it never reaches
/// the apiserver), or after (it did, and its answer waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trap {
    Before,
    After,
}

/// A trap set on the k-th write from now.
struct Armed {
    remaining: usize,
    when: Trap,
    hit: tokio::sync::oneshot::Sender<Write>,
    release: watch::Receiver<bool>,
}

/// The handle of a set trap: [`Sprung::hit`] resolves with the write once it
/// is reached; the write goes on (or is dropped) after [`Sprung::release`].
pub struct Sprung {
    hit: tokio::sync::oneshot::Receiver<Write>,
    release: watch::Sender<bool>,
}

impl Sprung {
    pub async fn hit(&mut self, timeout: std::time::Duration) -> Option<Write> {
        tokio::time::timeout(timeout, &mut self.hit)
            .await
            .ok()
            .and_then(Result::ok)
    }

    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Drop for Sprung {
    fn drop(&mut self) {
        self.release.send_replace(true);
    }
}

struct Shared {
    upstream: kube::Client,
    armed: Mutex<Option<Armed>>,
    /// Watch responses of paths containing the part are delayed this long per chunk.
    lag: Mutex<Option<(String, std::time::Duration)>>,
    /// Each increment ends every open watch response.
    cuts: watch::Sender<u64>,
    /// Watch requests still to be answered 410 Gone.
    gone: std::sync::atomic::AtomicUsize,
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
        Self::start_to(crate::support::client().await).await
    }

    /// A proxy to the apiserver `upstream` talks to (a private plane's).
    pub async fn start_to(upstream: kube::Client) -> ApiProxy {
        let shared = Arc::new(Shared {
            upstream,
            armed: Mutex::default(),
            lag: Mutex::default(),
            cuts: watch::channel(0).0,
            gone: Default::default(),
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

    /// Stops at the `k`-th write from now (1 is the next), outside the Lease API.
    pub fn trap(&self, k: usize, when: Trap) -> Sprung {
        let (hit_tx, hit) = tokio::sync::oneshot::channel();
        let (release, release_rx) = watch::channel(false);
        *self.shared.armed.lock().unwrap() = Some(Armed {
            remaining: k.max(1),
            when,
            hit: hit_tx,
            release: release_rx,
        });
        Sprung { hit, release }
    }

    /// No trap set any more (one not reached).
    pub fn disarm(&self) {
        self.shared.armed.lock().unwrap().take();
    }

    /// Delay every chunk of watch responses of paths containing `part` by
    /// `delay` (`None`: no lag).
    pub fn lag(&self, lag: Option<(&str, std::time::Duration)>) {
        *self.shared.lag.lock().unwrap() = lag.map(|(p, d)| (p.to_string(), d));
    }

    /// End every open watch, and answer the next `gone` watch requests 410
    /// Gone: the events in between are never delivered, a list replaces them.
    pub fn cut_watches(&self, gone: usize) {
        self.shared
            .gone
            .store(gone, std::sync::atomic::Ordering::SeqCst);
        self.shared.cuts.send_modify(|c| *c += 1);
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
    let write = (!path.contains("/leases")
        && !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS))
    .then(|| Write {
        at: Timestamp::now(),
        method: parts.method.clone(),
        path: target.clone(),
    });
    let sprung = write.as_ref().and_then(|w| spring(&shared, w));
    if let Some((Trap::Before, mut release)) = sprung {
        let _ = release.wait_for(|r| *r).await;
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "dropped by the proxy's trap",
        )
            .into_response();
    }
    if let Some(write) = write {
        shared.writes.lock().unwrap().push(write);
    }
    if target.contains("watch=true") && take_gone(&shared) {
        let gone = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Expired", "code": 410,
            "message": "too old resource version (the proxy's lost events)",
        });
        return (StatusCode::GONE, gone.to_string()).into_response();
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
    if let Some((Trap::After, mut release)) = sprung {
        let _ = release.wait_for(|r| *r).await;
    }
    let (parts, body) = response.into_parts();
    let body = Body::new(body);
    if !target.contains("watch=true") {
        shared.answered.lock().unwrap().push(path);
        return Response::from_parts(parts, body);
    }
    let recorder = shared.clone();
    let lag = shared
        .lag
        .lock()
        .unwrap()
        .clone()
        .filter(|(part, _)| path.contains(part.as_str()))
        .map(|(_, d)| d);
    let mut cut = shared.cuts.subscribe();
    cut.mark_unchanged();
    let stream = body
        .into_data_stream()
        .then(move |chunk| async move {
            if let Some(delay) = lag {
                tokio::time::sleep(delay).await; // the lag being played
            }
            chunk
        })
        .inspect(move |chunk| {
            if let Ok(bytes) = chunk {
                recorder.watched.lock().unwrap().extend_from_slice(bytes);
            }
        })
        .take_until(async move {
            let _ = cut.changed().await;
        });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Counts `write` against the trap; the trap's kind and release once reached.
fn spring(shared: &Shared, write: &Write) -> Option<(Trap, watch::Receiver<bool>)> {
    let mut armed = shared.armed.lock().unwrap();
    let trap = armed.as_mut()?;
    trap.remaining -= 1;
    if trap.remaining > 0 {
        return None;
    }
    let trap = armed.take()?;
    let _ = trap.hit.send(write.clone());
    Some((trap.when, trap.release))
}

/// Whether this watch request is one to answer 410 Gone.
fn take_gone(shared: &Shared) -> bool {
    use std::sync::atomic::Ordering;
    shared
        .gone
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| g.checked_sub(1))
        .is_ok()
}
