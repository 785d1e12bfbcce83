//! What a failed apply created is found and pruned. An apply that fails half
//! way creates objects (here an alias Ingress, sent with the StatefulSet that a
//! policy rejects) that no inventory records; when the spec is reverted, they
//! must not stay on the cluster routing a host nobody configured.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::faults::admission_fakes;
use crate::operator::{instance, scenario, wait_ready};
use crate::support::*;

const T: Duration = Duration::from_secs(90);

async fn ingress_names(ingresses: &Api<Ingress>) -> Vec<String> {
    ingresses
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect()
}

#[tokio::test]
async fn objects_created_by_an_apply_that_failed_half_way_are_pruned_after_a_revert() {
    let scenario = scenario("orphans", &[]).await;
    let (instances, ns) = (&scenario.instances, &scenario.ns);
    let good = instance("acme", "registry.example/kura:1.0.0");
    apply_json(instances, "test", good.clone()).await.unwrap();
    wait_ready(instances, "acme").await;
    let ingresses: Api<Ingress> = ns.api();
    assert_eq!(ingress_names(&ingresses).await, ["acme"]);

    // StatefulSets with a "bad" image are refused here.
    let policy = admission_fakes::deny(
        &ns.name,
        "apps",
        "statefulsets",
        &["CREATE", "UPDATE"],
        "object.spec.template.spec.containers.exists(c, c.image.endsWith(':bad'))",
        "image :bad is not allowed",
    );
    let sts: Api<StatefulSet> = ns.api();
    wait_for("the policy to be enforced", T, || async {
        admission_fakes::statefulset_refused(&sts, 1, "x:bad")
            .await
            .then_some(())
    })
    .await;

    // One change: a bad image and an alias. The alias Ingress goes out in the
    // same wave as the StatefulSet, which is refused.
    let mut bad = instance("acme", "registry.example/kura:bad");
    bad["spec"]["aliases"] = json!(["nobody-configured.example.com"]);
    apply_json(instances, "test", bad).await.unwrap();
    let alias = wait_for("the alias Ingress of the failed apply", T, || async {
        ingress_names(&ingresses)
            .await
            .into_iter()
            .find(|n| n != "acme")
    })
    .await;
    wait_for("the failure in status", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "ApplyFailed").then_some(())
    })
    .await;
    let recorded = instances.get("acme").await.unwrap().status.unwrap();
    assert!(
        !recorded.inventory.iter().any(|e| e.name == alias),
        "the failed apply recorded no inventory (the test's premise)"
    );

    // Revert the spec: the previous revision again, which has no alias.
    apply_json(instances, "test", good).await.unwrap();
    wait_gone(
        "the orphaned alias Ingress to be pruned",
        T,
        &ingresses,
        &alias,
    )
    .await;
    let status = wait_ready(instances, "acme").await;
    assert!(!status.inventory.iter().any(|e| e.name == alias));
    assert_eq!(ingress_names(&ingresses).await, ["acme"]);
    drop(policy);
    scenario.finish().await;
}
