//! How the caches are filled: by a streaming list where the API server serves
//! one (this plane's apiserver does), by paged lists where it does not (a
//! second apiserver of the same cluster started with the WatchList feature
//! off, as a 1.33 apiserver is by default) or when told to. In each case the
//! operator's own requests (kube's request log names every URL) show the
//! path taken, and an instance converges from the caches it filled.

use std::time::Duration;

use kube::Api;

use super::startup::{start_second_apiserver, wait_ready};
use super::*;
use crate::operator::{Operator, Options, config, free_port, shared_class};
use kura_core::api::KuraInstance;

/// The operator's list and watch requests for StatefulSets, from its log.
fn stateful_set_requests(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("requesting") && l.contains("/statefulsets?"))
        .collect()
}

/// Starts an operator with `strategy` (through `kubeconfig` when given), waits
/// until an instance it reconciles is applied, and returns its log.
async fn converge_with(
    name: &str,
    strategy: &str,
    kubeconfig: Option<std::path::PathBuf>,
) -> String {
    let ns = TestNamespace::new(name).await;
    let _classes = shared_class(&ns).await;
    let options = Options {
        kubeconfig,
        ..Options::default()
    };
    let op = Operator::start_with(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &[
            ("KURA_LOG", "info,kube=debug"),
            ("KURA_LIST_STRATEGY", strategy),
        ],
        options,
    );
    let instances: Api<KuraInstance> = ns.api();
    create_acme(&instances, Duration::from_secs(120)).await;
    op.log()
}

#[tokio::test]
async fn the_caches_fill_by_a_streaming_list_where_the_server_serves_one() {
    let log = converge_with("ops-lists-auto", "auto", None).await;
    assert!(
        log.contains("list strategy") && log.contains("strategy=\"streaming\""),
        "auto chose streaming on this plane:\n{log}"
    );
    let requests = stateful_set_requests(&log);
    assert!(
        requests
            .iter()
            .any(|r| r.contains("sendInitialEvents=true")),
        "a streaming list of StatefulSets was requested: {requests:#?}"
    );
    // Negative control: no paged list (a list request carries `limit=`).
    assert!(
        !requests.iter().any(|r| r.contains("limit=")),
        "no paged list: {requests:#?}"
    );
}

#[tokio::test]
async fn paged_lists_when_told_to() {
    let log = converge_with("ops-lists-paged", "paged", None).await;
    let requests = stateful_set_requests(&log);
    assert!(
        requests.iter().any(|r| r.contains("limit=")),
        "a paged list of StatefulSets was requested: {requests:#?}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("sendInitialEvents=true")),
        "no streaming list: {requests:#?}"
    );
}

/// The fallback: an apiserver that refuses streaming lists (WatchList off, as
/// in 1.33) gets paged lists from `auto`, and the operator works; without the
/// fallback its watchers would retry the refused request forever and no
/// cache would ever sync.
#[tokio::test]
async fn auto_falls_back_to_paged_lists_where_streaming_is_refused() {
    let dir = scratch_dir("lists-no-watchlist");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let apiserver_log = dir.join("kube-apiserver.log");
    let mut apiserver = start_second_apiserver(
        port,
        &apiserver_log,
        "/registry",
        &["--feature-gates", "WatchList=false"],
    );
    let kubeconfig = kubeconfig_for(&dir, &format!("https://127.0.0.1:{port}"));
    wait_ready(&mut apiserver, &kubeconfig, &apiserver_log).await;
    let log = converge_with("ops-lists-fallback", "auto", Some(kubeconfig)).await;
    assert!(
        log.contains("list strategy") && log.contains("strategy=\"paged\""),
        "auto chose paged lists on a server refusing streaming ones:\n{log}"
    );
    let requests = stateful_set_requests(&log);
    assert!(
        requests.iter().any(|r| r.contains("limit=")),
        "{requests:#?}"
    );
}
