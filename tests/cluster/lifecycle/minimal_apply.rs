//! Touch only what changed. Each child carries its own content hash, so a new
//! instance revision sends only the objects whose content changed; a field
//! taken on one child re-applies that child alone; a force token sends every
//! object. An operator started on a fleet stamped the previous way (every child
//! with the instance revision) re-applies each instance once, then idles.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::operator::{
    Operator, apply_acme, config, converged_count, create_fleet, delete_shared_class, shared_class,
};
use crate::support::*;
use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::keys::{ANNOTATION_REVISION, FIELD_MANAGER};
use kura_core::render::{ObjectId, render};
use kura_core::validate::validate;
use kura_operator::reconcile::apply::dynamic_api;

const T: Duration = Duration::from_secs(90);

/// The operator's writes in `ns` since `since`, by resource, without status.
fn writes_by_resource(ns: &str, since: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for m in mutations_since(ns, since) {
        let resource = m.split(' ').nth(1).unwrap_or_default().to_string();
        if !resource.ends_with("/status") {
            *out.entry(resource).or_default() += 1;
        }
    }
    out
}

/// The resourceVersion of every child of `name`, by object. A
/// PodDisruptionBudget's is its generation: the disruption controller writes
/// its status on every pod change, which is not a write of the operator.
async fn versions(
    ns: &TestNamespace,
    instances: &Api<KuraInstance>,
    name: &str,
) -> BTreeMap<String, String> {
    let status = instances.get(name).await.unwrap().status.unwrap();
    let mut out = BTreeMap::new();
    for entry in &status.inventory {
        let id = ObjectId::from_inventory(entry).unwrap();
        let object: DynamicObject = dynamic_api(&ns.client, &id).get(&id.name).await.unwrap();
        let version = match id.kind {
            kura_core::kind::ChildKind::PodDisruptionBudget => {
                format!("generation {:?}", object.metadata.generation)
            }
            _ => object.metadata.resource_version.unwrap(),
        };
        out.insert(id.to_string(), version);
    }
    out
}

async fn wait_applied(instances: &Api<KuraInstance>, name: &str, not: &str) -> String {
    wait_for("the new revision to be applied and Ready", T, || async {
        let s = instances.get(name).await.ok()?.status?;
        let ready = s.phase == Some(kura_core::api::Phase::Ready);
        let applied = s.applied_revision?;
        (ready && applied != not && Some(&applied) == s.desired_revision.as_ref())
            .then_some(applied)
    })
    .await
}

#[tokio::test]
async fn a_region_change_writes_only_the_children_it_changes() {
    let ns = TestNamespace::new("minimal").await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    apply_acme(&instances).await;
    let first = wait_applied(&instances, "acme", "").await;
    let before = versions(&ns, &instances, "acme").await;

    // (a) The region's domain changes: the host, so the Ingress, the cache's
    // configuration file (ConfigMap) and the pods that mount it (StatefulSet).
    let since = jiff::Timestamp::now().to_string();
    op.set_config(&config(&ns.name, "host", "example.com/none").replace("kura.test", "kura2.test"));
    let second = wait_applied(&instances, "acme", &first).await;
    let after = versions(&ns, &instances, "acme").await;
    let moved: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    let writes = writes_by_resource(&ns.name, &since);
    eprintln!("domain change: moved {moved:?}; writes {writes:?}");
    let prefix = |k: &str| moved.iter().any(|m| m.starts_with(k));
    assert!(
        prefix("Ingress") && prefix("ConfigMap") && prefix("StatefulSet"),
        "{moved:?}"
    );
    assert_eq!(
        moved.len(),
        3,
        "no other child's resourceVersion moves: {moved:?}"
    );
    assert_eq!(
        writes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["configmaps", "ingresses", "statefulsets"],
        "only the changed children are sent (negative control: every child carrying the instance revision sends all 7)"
    );

    // (b) A field taken on one child re-applies that child only.
    let since = jiff::Timestamp::now().to_string();
    let services: Api<k8s_openapi::api::core::v1::Service> = ns.api();
    let rival = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "acme", "labels": {"app.kubernetes.io/name": "not-kura"}}});
    services
        .patch(
            "acme",
            &PatchParams::apply("rival").force(),
            &Patch::Apply(&rival),
        )
        .await
        .unwrap();
    wait_for("the label taken back", T, || async {
        let s = services.get("acme").await.ok()?;
        (s.metadata.labels?.get("app.kubernetes.io/name")? == "kura").then_some(())
    })
    .await;
    let writes = writes_by_resource(&ns.name, &since);
    assert_eq!(
        writes,
        BTreeMap::from([("services".to_string(), 2)]),
        "the rival's write and one take-back, nothing else"
    );

    // (c) A force token sends every object.
    let since = jiff::Timestamp::now().to_string();
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "all"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    wait_for("the force to be handled", T, || async {
        let s = instances.get("acme").await.ok()?.status?;
        (s.last_handled_reapply_at.as_deref() == Some("all")).then_some(())
    })
    .await;
    let writes = writes_by_resource(&ns.name, &since);
    for resource in [
        "configmaps",
        "ingresses",
        "networkpolicies",
        "poddisruptionbudgets",
        "services",
        "serviceaccounts",
        "statefulsets",
    ] {
        assert_eq!(writes.get(resource), Some(&1), "{resource} in {writes:?}");
    }
    let _ = second;
    drop(op);
    delete_shared_class(&classes, &ns).await;
}

#[tokio::test]
async fn an_upgrade_from_instance_revision_stamps_reapplies_each_instance_once_then_idles() {
    const N: usize = 5;
    let ns = TestNamespace::new("stamps").await;
    let classes = shared_class(&ns).await;
    let config_yaml = config(&ns.name, "host", "example.com/none");
    let op = Operator::start(&ns.name, &config_yaml);
    let instances: Api<KuraInstance> = ns.api();
    create_fleet(&instances, "u", N).await;
    wait_for("the fleet to converge", T, || async {
        (converged_count(&instances, None).await == N).then_some(())
    })
    .await;
    drop(op);

    // The previous release's state: every child applied by the operator's
    // field manager with the instance revision as its stamp (the fixture is
    // this renderer's output with the stamps of the old format).
    let operator_config = OperatorConfig::parse(&config_yaml).unwrap();
    for i in 0..N {
        let name = format!("u{i:02}");
        let live = instances.get(&name).await.unwrap();
        let desired = render(
            &validate(&live, &operator_config).unwrap(),
            &operator_config,
        );
        for object in &desired.objects {
            let mut body = object.body();
            body["metadata"]["annotations"][ANNOTATION_REVISION] = json!(desired.revision);
            dynamic_api(&ns.client, &object.id)
                .patch(
                    &object.id.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
                .unwrap();
        }
    }

    let op = Operator::start(&ns.name, &config_yaml);
    // Each instance is re-applied once (its stamps changed), then the fleet
    // idles: two resyncs go by (3 s each) with nothing written. A pass logs
    // its outcome before it writes its status, so the idle window starts
    // once every instance has been decided again after its apply (each
    // status write of an apply pass is done by then), and lasts two more
    // passes of each.
    op.wait_for_log_count(" applied ", N, T).await;
    op.wait_for_log_count("outcome=", 3 * N, T).await;
    let since = jiff::Timestamp::now().to_string();
    op.wait_for_log_count("outcome=", 5 * N, T).await;
    let applies_per_instance = |log: &str| {
        let mut counts = BTreeMap::new();
        for line in log.lines().filter(|l| l.contains(" applied ")) {
            if let Some(name) = line
                .split("instance=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
            {
                *counts.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        counts
    };
    let counts = applies_per_instance(&op.log());
    eprintln!("applies per instance after the upgrade: {counts:?}");
    assert_eq!(counts.len(), N, "{counts:?}");
    assert!(
        counts.values().all(|c| *c == 1),
        "exactly once each: {counts:?}"
    );
    let writes = mutations_since(&ns.name, &since);
    assert!(writes.is_empty(), "then idle: {writes:?}");
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
