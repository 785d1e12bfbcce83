//! A restart is free: an operator started on a converged fleet writes nothing.
//! Before every cache has listed, a reconcile would see every child "missing"
//! and re-apply the fleet (with status writes and Ready flapping).

use std::time::Duration;

use kube::api::Api;

use crate::operator::{Operator, config, converged_count, create_fleet, shared_class};
use crate::support::*;
use kura_operator::api::KuraInstance;

const N: usize = 40;

#[tokio::test]
async fn a_restarted_operator_writes_nothing_to_a_converged_fleet() {
    let ns = TestNamespace::new("restart").await;
    let classes = shared_class(&ns).await;
    let mut op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "r", N).await;
    wait_for("the fleet to converge", Duration::from_secs(240), || async {
        (converged_count(&instances, None).await == N).then_some(())
    })
    .await;

    // Restart (no leader election: the chart's default), as a rollout of the
    // operator's Deployment or a crash would.
    op.kill();
    let since = jiff::Timestamp::now().to_string();
    op.restart(&[]);
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
    assert_eq!(converged_count(&instances, None).await, N);
    drop(op);
    let _ = classes
        .delete(&format!("shared-{}", ns.name), &Default::default())
        .await;
}
