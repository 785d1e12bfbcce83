//! Follows the operator configuration file. A ConfigMap-mounted file changes by a
//! symlink swap, so the file's bytes are compared, not its inode events. A valid
//! new configuration replaces the old one and reconciles every instance (its
//! rendered output, and so its revision, may change); an invalid one is reported
//! and ignored, so a bad edit never reaches the cluster.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, watch};

use crate::config::OperatorConfig;

pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Returns the stream of "configuration changed" ticks for `reconcile_all_on`.
pub fn follow(
    path: PathBuf,
    initial_text: String,
    tx: watch::Sender<Arc<OperatorConfig>>,
) -> impl Stream<Item = ()> {
    let (changed_tx, changed_rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut last = initial_text;
        let mut interval = tokio::time::interval(POLL_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Ok(text) = tokio::fs::read_to_string(&path).await else {
                continue;
            };
            if text == last {
                continue;
            }
            last = text.clone();
            match OperatorConfig::parse(&text) {
                Ok(config) => {
                    tracing::info!(path = %path.display(), "operator configuration changed; reconciling every instance");
                    tx.send_replace(Arc::new(config));
                    let _ = changed_tx.try_send(());
                }
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "ignoring invalid operator configuration; the previous one stays in force")
                }
            }
        }
    });
    tokio_stream_from(changed_rx)
}

fn tokio_stream_from(mut rx: mpsc::Receiver<()>) -> impl Stream<Item = ()> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
