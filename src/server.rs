//! `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`.
//!
//! Served from the first moment of `run`, before the apiserver is reached:
//! `/healthz` says the process is alive, `/readyz` that it can do its job — the
//! caches have synced and, under leader election, it leads or is a standby that
//! can reach its Lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use crate::api::KuraInstance;
use crate::leader::LeaderState;
use crate::metrics::Metrics;

/// What the endpoints report; filled in as start-up progresses.
#[derive(Default)]
pub struct Probes {
    pub metrics: Arc<Metrics>,
    synced: AtomicBool,
    instances: OnceLock<Store<KuraInstance>>,
    leader: OnceLock<watch::Receiver<LeaderState>>,
}

impl Probes {
    pub fn set_instances(&self, store: Store<KuraInstance>) {
        let _ = self.instances.set(store);
    }

    pub fn set_leader(&self, state: watch::Receiver<LeaderState>) {
        let _ = self.leader.set(state);
    }

    /// Every reflector has listed once (`Store::wait_until_ready`).
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// `Ok` when ready, otherwise why not.
    pub fn ready(&self) -> Result<(), &'static str> {
        if !self.synced.load(Ordering::Acquire) {
            return Err("caches not synced");
        }
        match self.leader.get() {
            Some(state) if !state.borrow().healthy => {
                Err("leader election: the lease cannot be read or renewed")
            }
            _ => Ok(()),
        }
    }
}

pub async fn serve(
    listener: tokio::net::TcpListener,
    probes: Arc<Probes>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(probes);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn readyz(State(probes): State<Arc<Probes>>) -> impl IntoResponse {
    match probes.ready() {
        Ok(()) => (StatusCode::OK, "ok"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(probes): State<Arc<Probes>>) -> impl IntoResponse {
    let instances = probes
        .instances
        .get()
        .map(|s| s.state())
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        probes.metrics.encode(&instances),
    )
}
