//! Status is a report, never a trusted store: anyone who may write an
//! instance's status (a tenant, a careless script) can put anything there.
//! Nothing written there may make the operator's own status writes fail, hold
//! another instance's rollout, or make the operator read objects of another
//! namespace.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{ready_instance, wait_ready};
use crate::support::*;
use kura_core::api::KuraInstance;

const T: Duration = Duration::from_secs(90);

/// A merge patch of the status subresource by a manager that is not the operator.
async fn forge_status(instances: &Api<KuraInstance>, name: &str, status: serde_json::Value) {
    instances
        .patch_status(
            name,
            &PatchParams {
                field_manager: Some("intruder".into()),
                ..Default::default()
            },
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .expect("another manager may write status");
}

async fn set_image(instances: &Api<KuraInstance>, name: &str, image: &str) {
    instances
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": image}})),
        )
        .await
        .unwrap();
}

/// Another manager's `status.conflict` (a record the operator writes and
/// later drops) once made every later status write of the operator fail
/// with 422 ("status.conflict.managers: Required value"): the instance then
/// showed Ready for a revision it never reported on.
#[tokio::test]
async fn a_status_record_written_by_another_manager_cannot_make_the_status_writes_fail() {
    let s = ready_instance("st-forged").await;
    forge_status(
        &s.instances,
        "acme",
        json!({"conflict": {"managers": ["x"], "takeBacks": 1, "windowStart": "2020-01-01T00:00:00Z"}}),
    )
    .await;
    // A spec change: the operator applies it and must report it.
    set_image(&s.instances, "acme", "registry.example/kura:1.0.1").await;
    let status = wait_for(
        "the status to report the new generation, Ready on the new revision",
        T,
        || async {
            let i = s.instances.get("acme").await.ok()?;
            let st = i.status.clone()?;
            (st.observed_generation == i.metadata.generation
                && st.applied_image.as_deref() == Some("registry.example/kura:1.0.1")
                && st.phase == Some(kura_core::api::Phase::Ready))
            .then_some(st)
        },
    )
    .await;
    assert_eq!(
        status.conflict, None,
        "the forged record is gone: status is the operator's report"
    );
    s.finish().await;
}

/// An inventory entry naming an object of another namespace once made the
/// operator read it and say whether it exists (an Event "PruneSkipped … was
/// not created by this instance" for an existing one, nothing for a missing
/// one): an existence oracle across tenants.
#[tokio::test]
async fn an_inventory_entry_of_another_namespace_is_never_read_and_is_reported() {
    let s = ready_instance("st-inventory").await;
    let other = TestNamespace::new("st-victim").await;
    other
        .api::<ConfigMap>()
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "payroll"}, "data": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let live = s.instances.get("acme").await.unwrap();
    let mut inventory = serde_json::to_value(&live.status.unwrap_or_default().inventory).unwrap();
    inventory.as_array_mut().unwrap().push(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "payroll",
        "namespace": other.name, "hash": "0000",
    }));
    forge_status(&s.instances, "acme", json!({"inventory": inventory})).await;
    // A new revision: the apply prunes what the inventory has and it lacks.
    set_image(&s.instances, "acme", "registry.example/kura:1.0.2").await;
    wait_ready(&s.instances, "acme").await;
    let events: Api<Event> = s.ns.api();
    let notes = wait_for("an Event reporting the ignored entry", T, || async {
        let notes: Vec<(String, String)> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| Some((e.reason?, e.message?)))
            .collect();
        notes
            .iter()
            .any(|(r, m)| r == "InventoryIgnored" && m.contains("payroll"))
            .then_some(notes)
    })
    .await;
    assert!(
        !notes
            .iter()
            .any(|(r, m)| r == "PruneSkipped" && m.contains("payroll")),
        "the other namespace's object was not read: {notes:?}"
    );
    assert!(
        other
            .api::<ConfigMap>()
            .get_opt("payroll")
            .await
            .unwrap()
            .is_some(),
        "and not deleted"
    );
    s.finish().await;
}

/// A status write that fails (here an admission policy refuses every update
/// of the instance's status) is reported where it can be: a Warning Event on
/// the instance and the metric, and retried; once writes go through again,
/// status catches up.
#[tokio::test]
async fn a_failing_status_write_is_an_event_and_a_metric_and_is_retried() {
    let s = ready_instance("st-refused").await;
    let policy = crate::faults::admission_fakes::deny(
        &s.ns.name,
        "kura.dev",
        "kurainstances/status",
        &["UPDATE"],
        "true",
        "status writes refused by a test policy",
    );
    // A policy is enforced a moment after it is created: wait until it is.
    wait_for("the policy to be enforced", T, || async {
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        s.instances
            .patch_status(
                "acme",
                &dry,
                &Patch::Merge(&json!({"status": {"endpoint": "x"}})),
            )
            .await
            .is_err()
            .then_some(())
    })
    .await;
    set_image(&s.instances, "acme", "registry.example/kura:1.0.3").await;
    let events: Api<Event> = s.ns.api();
    wait_for(
        "a StatusWriteFailed Event naming the refusal",
        T,
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .any(|e| {
                    e.reason.as_deref() == Some("StatusWriteFailed")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("refused by a test policy"))
                })
                .then_some(())
        },
    )
    .await;
    let failed =
        s.op.metric("kura_status_writes_total{result=\"failed\"}")
            .await
            .unwrap_or(0.0);
    assert!(failed >= 1.0, "the metric counts it: {failed}");
    policy.lift();
    wait_for("status to catch up once writes go through", T, || async {
        let st = s.instances.get("acme").await.ok()?.status?;
        (st.applied_image.as_deref() == Some("registry.example/kura:1.0.3")
            && st.phase == Some(kura_core::api::Phase::Ready))
        .then_some(())
    })
    .await;
    s.finish().await;
}
