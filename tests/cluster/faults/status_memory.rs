//! The process's memory never hides what the cluster says: a status written
//! by someone else after the operator's own write wins at once. Here an
//! administrator clears `retry` of a Stalled instance to ask for an immediate
//! retry; the operator must act on it, not on the status it wrote last.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::faults::admission_fakes;
use crate::operator::{apply_acme, scenario};
use crate::support::*;
use kura_core::api::Phase;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_administrator_clearing_retry_gets_an_immediate_retry() {
    // One failed attempt stalls, and the stall window is long (10 minutes).
    let scenario = scenario(
        "cleared-retry",
        &["--retry-budget", "1", "--stall-window", "10m"],
    )
    .await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let _policy = admission_fakes::deny(
        &ns.name,
        "apps",
        "statefulsets",
        &["CREATE", "UPDATE"],
        "true",
        "no workloads here yet",
    );
    let sts: Api<StatefulSet> = ns.api();
    wait_for("the policy to be enforced", T, || async {
        admission_fakes::statefulset_refused(&sts, 1, "x:1")
            .await
            .then_some(())
    })
    .await;
    apply_acme(instances).await;
    let stalled = wait_for("the instance to stall", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.phase == Some(Phase::Stalled)).then_some(s)
    })
    .await;
    let first_failure = stalled.retry.unwrap().last_failure_time;

    // The administrator clears the retry record (a status write of their own).
    let clear = json!({"status": {"retry": null}});
    instances
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&clear))
        .await
        .unwrap();
    // A status write triggers no reconcile; any other event does (here the
    // administrator's note on the instance). That pass must read the cleared
    // record, not the status this process wrote before, and try at once: a
    // new attempt, recorded with a new failure time, long before 10 minutes.
    let note = json!({"metadata": {"annotations": {"example.com/note": "retry cleared"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&note))
        .await
        .unwrap();
    wait_for("a new attempt after the clear", T, || async {
        let retry = instances.get("acme").await.ok()?.status?.retry?;
        (retry.last_failure_time != first_failure).then_some(())
    })
    .await;
    scenario.finish().await;
}
