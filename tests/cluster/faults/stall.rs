//! docs/incidents.md #2 against the real control plane: an apply the apiserver keeps
//! rejecting reaches an explicit Stalled state with the last error, does not
//! hot-loop, is retried by a force token, and recovers at once when the spec is
//! fixed.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::operator::{Operator, config, delete_shared_class, instance, shared_class, wait_ready};
use crate::support::*;
use kura_core::api::{KuraInstance, Phase};

/// A ValidatingAdmissionPolicy (enforced by the apiserver itself) that rejects
/// StatefulSets with more than 2 replicas in one namespace.
pub(crate) async fn deny_big_statefulsets(ns: &TestNamespace) -> impl Drop {
    let gvk = |kind: &str| GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let policy_api: Api<DynamicObject> = Api::all_with(
        ns.client.clone(),
        &ApiResource::from_gvk(&gvk("ValidatingAdmissionPolicy")),
    );
    let binding_api: Api<DynamicObject> = Api::all_with(
        ns.client.clone(),
        &ApiResource::from_gvk(&gvk("ValidatingAdmissionPolicyBinding")),
    );
    let name = format!("deny-big-{}", ns.name);
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["statefulsets"]}]},
            "validations": [{"expression": "object.spec.replicas <= 2", "message": "test policy: at most 2 replicas"}],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}}}},
    });
    policy_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(policy).unwrap(),
        )
        .await
        .unwrap();
    binding_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding).unwrap(),
        )
        .await
        .unwrap();
    // The policy takes effect asynchronously: wait until a dry-run is denied.
    let sts: Api<StatefulSet> = ns.api();
    let probe: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "policy-probe"},
        "spec": {"replicas": 3, "serviceName": "x", "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]}}},
    }))
    .unwrap();
    wait_for(
        "the admission policy to take effect",
        Duration::from_secs(30),
        || async {
            sts.create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
            .err()
            .map(|_| ())
        },
    )
    .await;
    struct Cleanup(Api<DynamicObject>, Api<DynamicObject>, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let (p, b, n) = (self.0.clone(), self.1.clone(), self.2.clone());
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let _ = b.delete(&n, &Default::default()).await;
                    let _ = p.delete(&n, &Default::default()).await;
                });
            });
        }
    }
    Cleanup(policy_api, binding_api, name)
}

#[tokio::test]
async fn rejected_apply_stalls_without_hot_loop_and_recovers_on_fix() {
    let ns = TestNamespace::new("stall").await;
    let classes = shared_class(&ns).await;
    let _policy = deny_big_statefulsets(&ns).await;
    let op = Operator::start_full(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        &["--retry-budget", "2", "--stall-window", "60s"],
        &[],
    );
    let instances: Api<KuraInstance> = ns.api();
    let mut spec = instance("acme", "registry.example/kura:1.0.0");
    spec["spec"]["replicas"] = json!(3);
    apply_json(&instances, "test", spec.clone()).await.unwrap();

    let stalled = wait_for(
        "the instance to be Stalled",
        Duration::from_secs(60),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let c = s.conditions.iter().find(|c| {
                c.type_ == "Stalled" && c.status == kura_core::api::ConditionStatus::True
            })?;
            (s.phase == Some(Phase::Stalled)).then_some(c.message.clone())
        },
    )
    .await;
    assert!(
        stalled.contains("test policy: at most 2 replicas"),
        "Stalled carries the last error: {stalled}"
    );

    // No hot loop: count reconciles of this instance over two minutes.
    let count = || op.log().matches("outcome=").count();
    let attempts = || op.log().matches("outcome=\"apply-failed\"").count();
    let (reconciles_before, attempts_before) = (count(), attempts());
    tokio::time::sleep(Duration::from_secs(120)).await; // an observation window, not synchronisation
    let (reconciles, retries) = (count() - reconciles_before, attempts() - attempts_before);
    eprintln!("stalled for 120 s: {reconciles} reconciles, {retries} apply attempts");
    assert!(
        reconciles <= 6,
        "a stalled instance must not hot-loop: {reconciles} reconciles in 120 s"
    );
    assert!(
        retries <= 3,
        "bounded retries after the stall window: {retries}"
    );
    assert!(
        retries >= 1,
        "the stall window (60 s) must lead to a bounded retry: {retries}"
    );

    // A force token while Stalled is acted on at once, with a fresh budget;
    // its apply is rejected too, so it is not recorded as handled and the
    // failure stays what status says (a force never hides an error).
    let force = json!({"metadata": {"annotations": {"kura.dev/reapply-at": "while-stalled"}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&force))
        .await
        .unwrap();
    let attempted = wait_for(
        "the force token to be attempted while Stalled",
        Duration::from_secs(30),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let retry = s.retry.clone()?;
            retry.inputs_key.ends_with("/while-stalled").then_some(s)
        },
    )
    .await;
    assert_ne!(
        attempted.last_handled_reapply_at.as_deref(),
        Some("while-stalled")
    );
    let ready = attempted
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert!(
        ready.message.contains("at most 2 replicas"),
        "still reported: {}",
        ready.message
    );
    let events: Api<Event> = ns.api();
    let reasons = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<Vec<String>>()
    };
    assert!(reasons().await.iter().any(|r| r == "Stalled"));

    // Fixing the spec is new input: applied at once, with a fresh budget.
    let fixed_at = std::time::Instant::now();
    spec["spec"]["replicas"] = json!(2);
    apply_json(&instances, "test", spec).await.unwrap();
    let status = wait_ready(&instances, "acme").await;
    assert!(
        fixed_at.elapsed() < Duration::from_secs(30),
        "recovery took {:?}",
        fixed_at.elapsed()
    );
    // The force token went through with the fix: now it is handled.
    assert_eq!(
        status.last_handled_reapply_at.as_deref(),
        Some("while-stalled")
    );
    wait_for("a ForcedReapply Event", Duration::from_secs(30), || async {
        reasons()
            .await
            .iter()
            .any(|r| r == "ForcedReapply")
            .then_some(())
    })
    .await;
    drop(op);
    delete_shared_class(&classes, &ns).await;
}
