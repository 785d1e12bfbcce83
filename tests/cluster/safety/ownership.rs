//! The operator creates, then owns; it never takes over what it did not
//! create. Objects that already carry the names an instance renders are left
//! exactly as they are, reported, and survive the instance; handing one over
//! is a deliberate act (`kura.dev/adopt`). A name conflict's stall ends as
//! soon as the objects are gone or handed over.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator::{
    Operator, Options, config, delete_shared_class, instance, shared_class, wait_ready,
};
use crate::support::*;
use kura_core::api::{ConditionStatus, KuraInstance};

const T: Duration = Duration::from_secs(60);

/// A user's objects with the names instance `foo` would render.
async fn users_objects(ns: &TestNamespace) -> (ServiceAccount, ConfigMap, Service) {
    let pp = PostParams::default();
    let sa = ns
        .api::<ServiceAccount>()
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "foo"}, "automountServiceAccountToken": true}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let cm = ns
        .api::<ConfigMap>()
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "foo-config"}, "data": {"mine": "yes"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let svc = ns
        .api::<Service>()
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "foo"},
                "spec": {"type": "NodePort", "selector": {"app": "users-own"},
                         "ports": [{"port": 8443, "targetPort": 8443}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    (sa, cm, svc)
}

#[tokio::test]
async fn objects_that_already_have_the_rendered_names_are_never_taken_over() {
    let ns = TestNamespace::new("taken-names").await;
    let classes = shared_class(&ns).await;
    let (sa, cm, svc) = users_objects(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("foo", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();

    // Reported, naming each object and whose it is.
    let message = wait_for("the name conflict in status", T, || async {
        let s = instances.get("foo").await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.reason == "NameConflict").then(|| c.message.clone())
    })
    .await;
    for object in [
        format!("ServiceAccount {}/foo", ns.name),
        format!("ConfigMap {}/foo-config", ns.name),
        format!("Service {}/foo", ns.name),
    ] {
        assert!(message.contains(&object), "names {object}: {message}");
    }
    let stalled = instances.get("foo").await.unwrap().status.unwrap();
    assert!(stalled.conditions.iter().any(|c| c.type_ == "Stalled"
        && c.status == ConditionStatus::True
        && c.reason == "NameConflict"));
    wait_for("a NameConflict Event", T, || async {
        let events = ns.api::<Event>().list(&ListParams::default()).await.ok()?;
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("NameConflict"))
            .then_some(())
    })
    .await;
    // Even a force re-apply never takes them over: it is attempted (a new
    // budget) and reported again.
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "t1"}}});
    instances
        .patch("foo", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    wait_for("the forced attempt", T, || async {
        let retry = instances.get("foo").await.ok()?.status?.retry?;
        (retry.inputs_key.ends_with("/t1") && retry.last_error.contains("foo-config")).then_some(())
    })
    .await;
    let unchanged = |before: &Option<String>, after: &Option<String>, what: &str| {
        assert_eq!(before, after, "{what} was written to");
    };
    let sa2 = ns.api::<ServiceAccount>().get("foo").await.unwrap();
    let cm2 = ns.api::<ConfigMap>().get("foo-config").await.unwrap();
    let svc2 = ns.api::<Service>().get("foo").await.unwrap();
    unchanged(
        &sa.metadata.resource_version,
        &sa2.metadata.resource_version,
        "the ServiceAccount",
    );
    unchanged(
        &cm.metadata.resource_version,
        &cm2.metadata.resource_version,
        "the ConfigMap",
    );
    unchanged(
        &svc.metadata.resource_version,
        &svc2.metadata.resource_version,
        "the Service",
    );
    assert_eq!(svc2.spec.unwrap().type_.as_deref(), Some("NodePort"));
    assert_eq!(sa2.automount_service_account_token, Some(true));
    assert!(cm2.metadata.owner_references.is_none());
    assert!(
        ns.api::<k8s_openapi::api::apps::v1::StatefulSet>()
            .get_opt("foo")
            .await
            .unwrap()
            .is_none(),
        "no workload runs around a name conflict (its ServiceAccount is not ours)"
    );

    // The instance goes; the user's objects stay.
    instances
        .delete("foo", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone("the instance to be gone", T, &instances, "foo").await;
    // The garbage collector has had its chance once the instance is gone and
    // an object it would delete (none here) would be gone too; the user's stay.
    assert!(
        ns.api::<ServiceAccount>()
            .get_opt("foo")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("foo-config")
            .await
            .unwrap()
            .is_some()
    );
    assert!(ns.api::<Service>().get_opt("foo").await.unwrap().is_some());
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

#[tokio::test]
async fn an_object_is_taken_over_only_when_handed_over_with_the_adopt_annotation() {
    let ns = TestNamespace::new("adopt").await;
    let classes = shared_class(&ns).await;
    users_objects(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("foo", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_for("the name conflict", T, || async {
        let s = instances.get("foo").await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.reason == "NameConflict").then_some(())
    })
    .await;
    // The user removes two, and hands the ConfigMap over.
    ns.api::<ServiceAccount>()
        .delete("foo", &DeleteParams::default())
        .await
        .unwrap();
    ns.api::<Service>()
        .delete("foo", &DeleteParams::default())
        .await
        .unwrap();
    let hand_over = json!({"metadata": {"annotations": {"kura.dev/adopt": "foo"}}});
    ns.api::<ConfigMap>()
        .patch(
            "foo-config",
            &PatchParams::default(),
            &Patch::Merge(&hand_over),
        )
        .await
        .unwrap();
    // Handing over is acted on at the next attempt: at the next resync,
    // where the names are found free (`reconcile::name_wait`), or at once
    // with a force token.
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "handed-over"}}});
    instances
        .patch("foo", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    wait_ready(&instances, "foo").await;
    let cm = ns.api::<ConfigMap>().get("foo-config").await.unwrap();
    let owner = cm.metadata.owner_references.unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|r| r.kind == "KuraInstance" && r.name == "foo"),
        "the handed-over ConfigMap is the instance's now: {owner:?}"
    );
    assert!(cm.data.unwrap().contains_key("kura.json"));
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

/// A name conflict stalls at once (retrying cannot help while the objects are
/// there), and the stall ends as soon as they are gone: the watch of
/// unlabelled names wakes the instance, whose pass finds the names free and
/// tries again, with no force token, long before the stall window and the
/// resync (10 minutes each here, the defaults) end.
#[tokio::test]
async fn a_name_conflicts_stall_ends_once_the_objects_are_gone() {
    let ns = TestNamespace::new("names-freed").await;
    let classes = shared_class(&ns).await;
    users_objects(&ns).await;
    let options = Options {
        resync: Some("10m".into()),
        ..Options::default()
    };
    let op = Operator::start_in(&ns.name, options);
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("foo", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    wait_for("the name conflict's stall", T, || async {
        let s = instances.get("foo").await.ok()?.status?;
        s.conditions
            .iter()
            .any(|c| {
                c.type_ == "Stalled"
                    && c.status == ConditionStatus::True
                    && c.reason == "NameConflict"
            })
            .then_some(())
    })
    .await;
    let gone = DeleteParams::default();
    ns.api::<ServiceAccount>()
        .delete("foo", &gone)
        .await
        .unwrap();
    ns.api::<ConfigMap>()
        .delete("foo-config", &gone)
        .await
        .unwrap();
    ns.api::<Service>().delete("foo", &gone).await.unwrap();
    let uid = instances.get("foo").await.unwrap().metadata.uid.unwrap();
    wait_for("the instance's own ConfigMap", T, || async {
        let cm = ns.api::<ConfigMap>().get_opt("foo-config").await.ok()??;
        cm.metadata
            .owner_references?
            .iter()
            .any(|r| r.uid == uid)
            .then_some(())
    })
    .await;
    wait_for("the stall to be over", T, || async {
        let s = instances.get("foo").await.ok()?.status?;
        (!s.conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == ConditionStatus::True))
        .then_some(())
    })
    .await;
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
