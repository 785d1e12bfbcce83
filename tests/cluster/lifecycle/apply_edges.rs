//! Applies that are all or nothing, and quieter edges (issue 22, items 12
//! and 13): a name taken by someone else's object is found before anything
//! is written, and a child held by a finalizer is waited for, not re-applied
//! on every resync.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator::{apply_acme, instance, ready_instance, scenario, wait_ready};
use crate::support::*;
use kura_core::api::ConditionStatus;

const T: Duration = Duration::from_secs(60);

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

async fn events_with_reason(ns: &TestNamespace, reason: &str) -> Vec<Event> {
    let events = ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// `kura-operator diff -o json` of the namespace's one instance, under the
/// operator's configuration; it must exit 1 (something needs a look).
fn preview(ns: &TestNamespace) -> serde_json::Value {
    let config_path = std::env::temp_dir().join(format!("kura-diff-{}.yaml", ns.name));
    std::fs::write(
        &config_path,
        crate::operator::config(&ns.name, "host", "example.com/none"),
    )
    .unwrap();
    let (code, out, err) = crate::preview::diff::diff(
        &kubeconfig_path(),
        &[
            "-n",
            &ns.name,
            "-o",
            "json",
            "--config",
            config_path.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&config_path);
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    report["instances"][0].clone()
}

/// Item 12: an unlabelled Service of the instance's Service name, there
/// before the instance. The caches never show it (they watch labelled
/// children), so only a check of every name before the first write keeps
/// the instance's other objects from being created around it.
#[tokio::test]
async fn a_name_taken_in_any_wave_is_found_before_anything_is_written() {
    let s = scenario("name-first", &[]).await;
    let (instances, ns) = (&s.instances, &s.ns);
    let services: Api<Service> = ns.api();
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "acme"},
                "spec": {"selector": {"app": "users-own"},
                         "ports": [{"port": 8443, "targetPort": 8443}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let since = now();
    apply_acme(instances).await;

    let message = wait_for("the name conflict in status", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.reason == "NameConflict").then(|| c.message.clone())
    })
    .await;
    let service = format!("Service {}/acme", ns.name);
    assert!(message.contains(&service), "names {service}: {message}");

    // Nothing of the instance was written: none of its objects exist, and
    // no request created or applied one.
    let mine = ListParams::default().labels("kura.dev/instance=acme");
    let cms = ns.api::<ConfigMap>().list(&mine).await.unwrap();
    let sas = ns.api::<ServiceAccount>().list(&mine).await.unwrap();
    let pdbs = ns.api::<PodDisruptionBudget>().list(&mine).await.unwrap();
    let nps = ns.api::<NetworkPolicy>().list(&mine).await.unwrap();
    let found: Vec<String> = cms
        .items
        .iter()
        .map(|o| format!("ConfigMap {:?}", o.metadata.name))
        .chain(
            sas.items
                .iter()
                .map(|o| format!("ServiceAccount {:?}", o.metadata.name)),
        )
        .chain(
            pdbs.items
                .iter()
                .map(|o| format!("PodDisruptionBudget {:?}", o.metadata.name)),
        )
        .chain(
            nps.items
                .iter()
                .map(|o| format!("NetworkPolicy {:?}", o.metadata.name)),
        )
        .collect();
    assert!(
        found.is_empty(),
        "objects created around the name conflict: {found:?}"
    );
    // The preview says the same: it reads the names the operator would create.
    let preview = preview(ns);
    assert_eq!(preview["state"], "nameConflict", "{preview}");
    assert!(
        preview["problems"].to_string().contains(&service),
        "{preview}"
    );
    let written: Vec<String> = mutations_since(&ns.name, &since)
        .into_iter()
        .filter(|m| !m.contains(" kurainstances"))
        .collect();
    assert!(
        written.is_empty(),
        "written around the conflict: {written:?}"
    );

    // The Service goes; the next attempt (at once on new input) creates everything.
    services
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone("the Service to be gone", T, &services, "acme").await;
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "free"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    wait_ready(instances, "acme").await;
    let svc = services.get("acme").await.unwrap();
    assert!(
        svc.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.kind == "KuraInstance" && r.name == "acme"),
        "the Service is the instance's now"
    );
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("acme-config")
            .await
            .unwrap()
            .is_some()
    );
    s.finish().await;
}

/// Reads of names the operator was about to create and found free: each is
/// a GET the apiserver answers 404.
async fn free_name_reads(op: &crate::operator::Operator) -> f64 {
    let (_, body) = op.get("/metrics").await.expect("metrics");
    body.lines()
        .filter(|l| l.starts_with("rest_client_requests_total{code=\"404\",method=\"GET\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The names a fleet's first apply creates are checked against the names of
/// unlabelled objects the operator watches (stores::foreign), not read one by
/// one: creating instances costs no read of a free name, and a name someone
/// else's object took after the operator started is still found before
/// anything is written. Without the index each instance reads its seven
/// names, seven GETs answered 404.
#[tokio::test]
async fn free_names_cost_no_read_and_a_taken_one_is_still_found() {
    let s = scenario("name-index", &[]).await;
    let (instances, ns) = (&s.instances, &s.ns);
    wait_for("the names index listed", T, || async {
        let log = s.op.log();
        log.contains("names of unlabelled objects listed")
            .then_some(())
    })
    .await;
    // Taken after the index listed: it learns of the Service from its watch.
    ns.api::<Service>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "held"},
                "spec": {"ports": [{"port": 8443}]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let before = free_name_reads(&s.op).await;
    for name in ["free-a", "free-b", "free-c", "held"] {
        apply_json(
            instances,
            "test",
            instance(name, "registry.example/kura:1.0.0"),
        )
        .await
        .unwrap();
    }
    for name in ["free-a", "free-b", "free-c"] {
        wait_ready(instances, name).await;
    }
    let message = wait_for("the name conflict in status", T, || async {
        let s = instances.get("held").await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.reason == "NameConflict").then(|| c.message.clone())
    })
    .await;
    assert!(
        message.contains(&format!("Service {}/held", ns.name)),
        "{message}"
    );
    let held_cm = ns.api::<ConfigMap>().get_opt("held-config").await.unwrap();
    assert!(held_cm.is_none(), "nothing of `held` is written");
    let reads = free_name_reads(&s.op).await - before;
    assert_eq!(reads, 0.0, "names read one by one (GETs answered 404)");
    s.finish().await;
}

/// Item 13: a child held by a finalizer after its deletion is waited for:
/// never applied while it hangs, reported once, created again once gone.
#[tokio::test]
async fn a_child_held_by_a_finalizer_is_waited_for_not_reapplied() {
    let s = ready_instance("terminating").await;
    let (instances, ns) = (&s.instances, &s.ns);
    let cms: Api<ConfigMap> = ns.api();
    let old_uid = cms.get("acme-config").await.unwrap().metadata.uid;
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    cms.patch("acme-config", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    let applied_before = events_with_reason(ns, "Applied").await.len();
    let since = now();
    cms.delete("acme-config", &DeleteParams::default())
        .await
        .unwrap();

    // Several resyncs (3 s) while it hangs.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let sent: Vec<String> = mutations_since(&ns.name, &since)
        .into_iter()
        .filter(|m| m.starts_with("patch configmaps acme-config") || m.starts_with("create"))
        .collect();
    assert!(
        sent.is_empty(),
        "applied while it is being deleted: {sent:?}"
    );
    let applied = events_with_reason(ns, "Applied").await.len();
    assert_eq!(
        applied, applied_before,
        "Applied Events while the ConfigMap hangs"
    );
    let status = instances.get("acme").await.unwrap().status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, ConditionStatus::False, "{ready:?}");
    assert_eq!(ready.reason, "ChildTerminating", "{ready:?}");
    let cm = format!("ConfigMap {}/acme-config", ns.name);
    assert!(ready.message.contains(&cm), "{}", ready.message);
    assert!(
        ready.message.contains("example.com/hold"),
        "{}",
        ready.message
    );
    let reconciling = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling")
        .expect("Reconciling");
    assert_eq!(reconciling.status, ConditionStatus::True, "{reconciling:?}");
    // The preview says the same.
    let preview = preview(ns);
    assert_eq!(preview["state"], "childTerminating", "{preview}");
    assert!(
        preview["problems"].to_string().contains("example.com/hold"),
        "{preview}"
    );
    let told = events_with_reason(ns, "ChildTerminating").await;
    assert_eq!(told.len(), 1, "one Event, not one per resync: {told:?}");
    assert_eq!(told[0].count.unwrap_or(1), 1, "{told:?}");

    // The finalizer goes; the ConfigMap is created again and the instance is Ready.
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch(
        "acme-config",
        &PatchParams::default(),
        &Patch::Merge(&release),
    )
    .await
    .unwrap();
    wait_for("the ConfigMap to be created again", T, || async {
        let cm = cms.get_opt("acme-config").await.ok()??;
        (cm.metadata.uid != old_uid && cm.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    wait_ready(instances, "acme").await;
    s.finish().await;
}
