//! No edit can make every later apply of an instance fail. A StatefulSet's
//! volume claim templates cannot change (422), so a new storage class in the
//! region's configuration must not reach a live StatefulSet: the instance keeps
//! the class it was created with, says so, and takes every other change (an
//! image fix) as before; instances created afterwards get the new class.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;

use crate::operator::{Operator, config, delete_shared_class, instance, shared_class, wait_ready};
use crate::support::*;
use kura_core::api::{ConditionStatus, KuraInstance};

const T: Duration = Duration::from_secs(90);

fn with_storage_class(namespace: &str, class: &str) -> String {
    format!(
        "{}    storageClass: {class}\n",
        config(namespace, "host", "example.com/none")
    )
}

async fn claim_class(sts: &Api<StatefulSet>, name: &str) -> Option<String> {
    let s = sts.get(name).await.ok()?;
    s.spec?
        .volume_claim_templates?
        .first()?
        .spec
        .clone()?
        .storage_class_name
}

#[tokio::test]
async fn a_new_region_storage_class_never_stalls_a_running_instance() {
    let ns = TestNamespace::new("storage-class").await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &with_storage_class(&ns.name, "standard"));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("old", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_ready(&instances, "old").await;
    let sts: Api<StatefulSet> = ns.api();
    assert_eq!(claim_class(&sts, "old").await.as_deref(), Some("standard"));

    // The region moves to another class.
    op.set_config(&with_storage_class(&ns.name, "fast-ssd"));
    let pending = wait_for("the pending storage change in status", T, || async {
        let s = instances.get("old").await.ok()?.status?;
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == "StorageChangePending" && c.status == ConditionStatus::True)?;
        Some(c.message.clone())
    })
    .await;
    assert!(
        pending.contains("fast-ssd") && pending.contains("standard"),
        "names both classes: {pending}"
    );

    // An image fix still reaches it: nothing about the instance is stuck.
    apply_json(
        &instances,
        "test",
        instance("old", "registry.example/kura:1.0.1"),
    )
    .await
    .unwrap();
    let status = wait_for("the image fix to be applied", T, || async {
        let s = instances.get("old").await.ok()?.status?;
        (s.applied_image.as_deref() == Some("registry.example/kura:1.0.1")).then_some(s)
    })
    .await;
    assert!(
        status.retry.is_none(),
        "no failed attempt: {:?}",
        status.retry
    );
    wait_ready(&instances, "old").await;
    assert_eq!(
        claim_class(&sts, "old").await.as_deref(),
        Some("standard"),
        "the live claim template is kept"
    );

    // An instance created now gets the region's new class.
    apply_json(
        &instances,
        "test",
        instance("new", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_ready(&instances, "new").await;
    assert_eq!(claim_class(&sts, "new").await.as_deref(), Some("fast-ssd"));
    let new = instances.get("new").await.unwrap().status.unwrap();
    assert!(
        !new.conditions
            .iter()
            .any(|c| c.type_ == "StorageChangePending")
    );
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
