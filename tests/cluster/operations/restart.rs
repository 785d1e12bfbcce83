//! A restart is free: an operator started on a converged fleet writes nothing.
//! Before every cache has listed, a reconcile would see every child "missing"
//! and re-apply the fleet (with status writes and Ready flapping). The restarted
//! operator talks through a proxy that holds its StatefulSet lists for a few
//! seconds, as a busy apiserver would: every other cache fills first.

use std::time::Duration;

use kube::api::Api;

use crate::faults::api_proxy::ApiProxy;
use crate::operator::{
    Operator, Options, config, converged_count, create_fleet, delete_shared_class, shared_class,
};
use crate::support::*;
use kura_core::api::KuraInstance;

const N: usize = 40;

#[tokio::test]
async fn a_restarted_operator_writes_nothing_to_a_converged_fleet() {
    let ns = TestNamespace::new("restart").await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "r", N).await;
    wait_for(
        "the fleet to converge",
        Duration::from_secs(240),
        || async { (converged_count(&instances, None).await == N).then_some(()) },
    )
    .await;

    // Restart (no leader election: the chart's default), as a rollout of the
    // operator's Deployment or a crash would, behind the proxy.
    drop(op);
    let proxy = ApiProxy::start().await;
    proxy.stall(Some("/statefulsets"));
    let since = jiff::Timestamp::now().to_string();
    let options = Options {
        kubeconfig: Some(
            proxy.kubeconfig(&std::env::temp_dir().join(format!("kura-op-{}", ns.name))),
        ),
        ..Options::default()
    };
    let op = Operator::start_in(&ns.name, options);
    // The other caches list meanwhile (the instances among them): a reconcile
    // now would see no StatefulSet at all.
    wait_for(
        "the operator to list its instances",
        Duration::from_secs(60),
        || async { proxy.answered("/kurainstances").then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await; // the slow list, not synchronisation
    proxy.stall(None);
    // Every instance is reconciled at least twice after the restart (the
    // first pass at start, the next at the 3 s resync): the window in which a
    // cold cache would have re-applied.
    op.wait_for_log_count("outcome=", 2 * N, Duration::from_secs(120))
        .await;
    let writes = mutations_since(&ns.name, &since);
    assert!(
        writes.is_empty(),
        "a restart of a converged fleet writes nothing, got {}: {:?}",
        writes.len(),
        &writes[..writes.len().min(20)]
    );
    assert!(proxy.writes_since(since.parse().unwrap()).is_empty());
    assert_eq!(converged_count(&instances, None).await, N);
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
