//! One failure count: new inputs start their retries from the first backoff.
//! An instance that failed several times on one revision gets a new revision
//! (a corrected, or still failing, spec): its first retry comes after the base
//! backoff (5 s), not after the backoff the old revision's count had reached
//! (80 s after four failures).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use serde_json::json;

use crate::faults::admission_fakes;
use crate::operator::{instance, scenario};
use crate::support::*;
use kura_core::api::{KuraInstance, RetryStatus};

async fn retry(instances: &Api<KuraInstance>) -> Option<RetryStatus> {
    instances.get("acme").await.ok()?.status?.retry
}

#[tokio::test]
async fn a_new_revision_is_retried_on_the_first_backoff_not_on_the_old_count() {
    // Backoff 5 s doubling (5, 10, 20, 40 s ...), a budget large enough not to stall.
    let scenario = scenario("retry-count", &["--retry-budget", "20"]).await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let _policy = admission_fakes::deny(
        &ns.name,
        "apps",
        "statefulsets",
        &["CREATE", "UPDATE"],
        "object.spec.replicas > 2",
        "at most 2 replicas here",
    );
    let sts: Api<StatefulSet> = ns.api();
    wait_for(
        "the policy to be enforced",
        Duration::from_secs(60),
        || async {
            admission_fakes::statefulset_refused(&sts, 3, "x:1")
                .await
                .then_some(())
        },
    )
    .await;
    let mut spec = instance("acme", "registry.example/kura:1.0.0");
    spec["spec"]["replicas"] = json!(3);
    apply_json(instances, "test", spec.clone()).await.unwrap();
    let old = wait_for(
        "four failures of the first revision",
        Duration::from_secs(90),
        || async { retry(instances).await.filter(|r| r.failures >= 4) },
    )
    .await;

    // A new revision, still refused: its own count starts at 1, and its second
    // attempt follows after the first backoff (5 s), not the old count's (80 s).
    spec["spec"]["replicas"] = json!(4);
    apply_json(instances, "test", spec).await.unwrap();
    let first = wait_for(
        "the new revision's first failure",
        Duration::from_secs(30),
        || async {
            retry(instances)
                .await
                .filter(|r| r.inputs_key != old.inputs_key)
        },
    )
    .await;
    assert_eq!(first.failures, 1, "new inputs, a new count: {first:?}");
    let second = wait_for(
        "the new revision's second attempt",
        Duration::from_secs(20),
        || async {
            retry(instances)
                .await
                .filter(|r| r.inputs_key == first.inputs_key && r.failures >= 2)
        },
    )
    .await;
    let gap = second
        .last_failure_time
        .parse::<jiff::Timestamp>()
        .unwrap()
        .duration_since(first.last_failure_time.parse().unwrap());
    eprintln!("second attempt {gap:#} after the first");
    assert!(gap < jiff::SignedDuration::from_secs(15), "{gap:#}");
    scenario.finish().await;
}
