//! `/healthz` and `/readyz`: alive at once, ready only when the caches synced.
//!
//! The operator reaches the apiserver through a gate the test holds: it
//! accepts connections but forwards nothing until opened, so the operator
//! cannot list anything — its caches cannot sync — for as long as the test
//! wants, with no timing involved.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::*;
use crate::operator::{Operator, config};

struct Gate {
    port: u16,
    open: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Gate {
    async fn closed(upstream: String) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, rx) = watch::channel(false);
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut rx = rx.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if rx.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Gate {
            port,
            open,
            accepting,
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

#[tokio::test]
async fn readyz_is_false_until_the_caches_sync_and_healthz_is_true_throughout() {
    let ns = TestNamespace::new("ops-probes").await;
    let gate = Gate::closed(apiserver_addr()).await;
    let kubeconfig = kubeconfig_for(
        &scratch_dir(&ns.name),
        &format!("https://127.0.0.1:{}", gate.port),
    );
    let op = Operator::start_as(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        kubeconfig,
    );
    // Alive as soon as it serves, while the apiserver is out of reach.
    let health = wait_for("/healthz to answer", Duration::from_secs(30), || async {
        op.get("/healthz").await
    })
    .await;
    assert_eq!(health, (200, "ok".to_string()));
    for _ in 0..5 {
        assert_eq!(
            op.get("/readyz").await,
            Some((503, "caches not synced".to_string())),
            "not ready while nothing can be listed: {}",
            op.log()
        );
        assert_eq!(op.get("/healthz").await.map(|r| r.0), Some(200));
    }

    gate.open.send_replace(true);
    wait_for("/readyz to turn ready", Duration::from_secs(60), || async {
        (op.get("/readyz").await? == (200, "ok".to_string())).then_some(())
    })
    .await;
    assert_eq!(op.get("/healthz").await.map(|r| r.0), Some(200));
    assert!(op.log().contains("caches synced"), "{}", op.log());
}
