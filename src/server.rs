//! `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`.
//!
//! Served from the first moment of `run`, before the apiserver is reached:
//! `/healthz` says the process is alive, `/readyz` that it can do its job — the
//! installed CRDs serve what it reads and writes (`crd_check`), the
//! caches have synced, the configuration file on disk is the one in force and,
//! under leader election, it leads or is a standby that can reach its Lease.
//!
//! Why an invalid configuration file makes the pod unready (and never unalive):
//! the operator still works with the last valid configuration, but the file it
//! would start with is broken, so a restart would exit 1 and leave no operator.
//! Readiness is what everything around a Deployment watches: a file changed in
//! place (the chart's ConfigMap mount) turns the running pods unready, which
//! `kubectl get pods`, availability alerts and GitOps health show, and which
//! makes a PodDisruptionBudget refuse the drain that would restart them into
//! the bad file; a file delivered by a rollout makes the new pod exit at start,
//! never ready, so the rollout halts instead of replacing the running pods.
//! Liveness stays true: a restart is the one thing that cannot help. The
//! chart's metrics Service publishes unready pods, so `kura_config_valid` is
//! still scraped. (The chart README's Troubleshooting has the long form.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use crate::config_watch::FileState;
use crate::leader::LeaderState;
use crate::metrics::Metrics;
use kura_core::api::KuraInstance;

/// Every status write failing for this long (none succeeding meanwhile)
/// makes the operator unready: it cannot report what it does. One instance
/// whose writes fail while others' succeed does not (a tenant cannot make
/// the operator unready); its failures are its Events and the metric.
pub const STATUS_FAILING_UNREADY: std::time::Duration = std::time::Duration::from_secs(120);

/// What the endpoints report; filled in as start-up progresses.
#[derive(Default)]
pub struct Probes {
    pub metrics: Arc<Metrics>,
    synced: AtomicBool,
    instances: OnceLock<Store<KuraInstance>>,
    leader: OnceLock<watch::Receiver<LeaderState>>,
    config: OnceLock<watch::Receiver<FileState>>,
    /// Why the installed CRDs keep this process from acting (`crd_check`).
    crds: OnceLock<watch::Receiver<Option<String>>>,
}

impl Probes {
    /// Probes reporting `metrics` (made before the client, which counts its
    /// requests in them).
    pub fn with_metrics(metrics: Arc<Metrics>) -> Self {
        Probes {
            metrics,
            ..Probes::default()
        }
    }

    pub fn set_instances(&self, store: Store<KuraInstance>) {
        let _ = self.instances.set(store);
    }

    pub fn set_leader(&self, state: watch::Receiver<LeaderState>) {
        let _ = self.leader.set(state);
    }

    pub fn set_config_state(&self, state: watch::Receiver<FileState>) {
        let _ = self.config.set(state);
    }

    pub fn set_crds(&self, state: watch::Receiver<Option<String>>) {
        let _ = self.crds.set(state);
    }

    /// Every reflector has listed once (`Store::wait_until_ready`).
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// `Ok` when ready, otherwise why not.
    pub fn ready(&self) -> Result<(), String> {
        self.ready_with(STATUS_FAILING_UNREADY)
    }

    /// [`Probes::ready`], unready once no status write has succeeded for
    /// `status_unready_after`.
    fn ready_with(&self, status_unready_after: std::time::Duration) -> Result<(), String> {
        if let Some(state) = self.config.get()
            && let FileState::Invalid(why) = &*state.borrow()
        {
            return Err(format!(
                "invalid {why}; the last valid configuration stays in force"
            ));
        }
        // Before the caches: an absent CRD also keeps them from listing.
        if let Some(state) = self.crds.get()
            && let Some(why) = &*state.borrow()
        {
            return Err(why.clone());
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err("caches not synced".into());
        }
        if let Some((failing, error)) = self.metrics.status_writes_failing()
            && failing >= status_unready_after
        {
            return Err(format!(
                "no status write has succeeded for {}s: {error}",
                failing.as_secs()
            ));
        }
        match self.leader.get() {
            Some(state) if !state.borrow().healthy => {
                Err("leader election: the lease cannot be read or renewed".into())
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
        Ok(()) => (StatusCode::OK, "ok".to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_synced_and_not_while_the_config_file_is_invalid() {
        let probes = Probes::default();
        assert_eq!(probes.ready(), Err("caches not synced".to_string()));
        probes.set_synced();
        assert_eq!(probes.ready(), Ok(()));
        let (tx, rx) = watch::channel(FileState::Valid);
        probes.set_config_state(rx);
        assert_eq!(probes.ready(), Ok(()));
        tx.send_replace(FileState::Invalid(
            "operator config /etc/c.yaml: regions: at least one region is required".into(),
        ));
        assert_eq!(
            probes.ready(),
            Err("invalid operator config /etc/c.yaml: regions: at least one region is required; the last valid configuration stays in force".to_string())
        );
        tx.send_replace(FileState::Valid);
        assert_eq!(probes.ready(), Ok(()));
    }

    /// An incompatible CRD makes the operator unready with the reason, and
    /// comes before the caches (which an absent CRD keeps from listing).
    #[test]
    fn unready_while_a_crd_is_not_compatible() {
        let probes = Probes::default();
        let (tx, rx) = watch::channel(Some("CRD kurainstances.kura.dev is not compatible".into()));
        probes.set_crds(rx);
        assert_eq!(
            probes.ready(),
            Err("CRD kurainstances.kura.dev is not compatible".to_string())
        );
        probes.set_synced();
        assert!(probes.ready().is_err());
        tx.send_replace(None);
        assert_eq!(probes.ready(), Ok(()));
    }

    /// Status writes that keep failing make the operator unready (it cannot
    /// report what it does), naming the error; one success ends it.
    #[test]
    fn no_status_write_succeeding_for_a_while_makes_the_operator_unready() {
        let probes = Probes::default();
        probes.set_synced();
        let now = std::time::Duration::ZERO;
        probes
            .metrics
            .status_write(Some(&kube::Error::Service("refused by a policy".into())));
        assert_eq!(
            probes.ready(),
            Ok(()),
            "not at once: {STATUS_FAILING_UNREADY:?}"
        );
        let unready = probes.ready_with(now).unwrap_err();
        assert!(
            unready.contains("no status write has succeeded")
                && unready.contains("refused by a policy"),
            "{unready}"
        );
        probes.metrics.status_write(None);
        assert_eq!(probes.ready_with(now), Ok(()));
    }

    #[test]
    fn a_standby_that_cannot_reach_its_lease_is_not_ready() {
        let probes = Probes::default();
        probes.set_synced();
        let (tx, rx) = watch::channel(LeaderState {
            leading: false,
            healthy: true,
        });
        probes.set_leader(rx);
        assert_eq!(probes.ready(), Ok(()));
        tx.send_replace(LeaderState::default());
        assert!(probes.ready().unwrap_err().contains("lease"));
    }
}
