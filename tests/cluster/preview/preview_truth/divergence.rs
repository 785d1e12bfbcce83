//! Four cases where `diff` and the operator disagreed on main (issue 21):
//! each previews a step with `-n NS` and with `-A`, lets the operator act,
//! and requires both previews to be what it did.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{Bench, config_yaml, predicted, shown, written};
use crate::operator::{apply_acme, instance, wait_ready};
use crate::support::{apply_json, wait_for, wait_gone};
use kura_core::api::KuraInstance;

const T: Duration = Duration::from_secs(120);

fn set(namespaces: &[&str]) -> BTreeSet<String> {
    namespaces.iter().map(|n| n.to_string()).collect()
}

/// The Ready condition's reason, once it is `reason`.
async fn ready_reason(instances: &Api<KuraInstance>, name: &str, reason: &str) {
    wait_for(&format!("{name}'s Ready reason {reason}"), T, || async {
        let s = instances.get(name).await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == reason).then_some(())
    })
    .await
}

/// The `diff` of `scope` under the bench's configuration, and the writes it predicts in `namespaces`.
fn preview(bench: &Bench, scope: &[&str], namespaces: &BTreeSet<String>) -> (Value, String) {
    let (_, report) = bench.diff(&bench.config, scope);
    let predicted = predicted(&report, namespaces);
    let text = format!(
        "diff {scope:?} predicted {predicted:?}:\n{}",
        shown(&report)
    );
    (report, text)
}

/// (a) An operator-originated restart of a Ready instance (a region's domain
/// changes its hosts and mounted configuration) is paced by the fleet budget
/// the operator computes over every instance it watches: two, one per
/// namespace, so one at a time. `diff -n` must say so as `diff -A` does.
#[tokio::test]
async fn divergence_a_a_restart_waits_for_the_budget_in_namespace_scope() {
    let before = config_yaml(&[("r1", "kura.test", "shared-a", None)]);
    let after = config_yaml(&[("r1", "kura2.test", "shared-a", None)]);
    let mut bench = Bench::start("preview-budget", 20, &before, &[]).await;
    // kura-sim starts each pod 6s late: an admitted restart holds its slot that long.
    let delay = json!({"sim.kura.dev/ready-delay": "6s"});
    for ns in ["bud-a", "bud-b"] {
        bench.namespace(ns, delay.clone()).await;
    }
    let one: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "bud-a");
    let two: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "bud-b");
    apply_json(&one, "test", instance("one", "registry.example/kura:1.0.0"))
        .await
        .unwrap();
    apply_json(&two, "test", instance("two", "registry.example/kura:1.0.0"))
        .await
        .unwrap();
    wait_ready(&one, "one").await;
    wait_ready(&two, "two").await;
    bench.converge(2, "the fleet created").await;

    bench.pause();
    bench.config = after.clone();
    let since = jiff::Timestamp::now();
    let (n_report, n_text) = preview(&bench, &["-n", "bud-a"], &set(&["bud-a"]));
    let (a_report, a_text) = preview(&bench, &["-A"], &set(&["bud-a"]));
    let waits = |report: &Value| {
        report["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "one")
            .map(|i| i["waitsForBudget"] == true)
            .unwrap()
    };
    bench.set_config(&after);
    bench.resume();
    // Paced: the operator records the instance in the budget's queue
    // (status.rollout, Waiting or Admitted) while its restart is under way.
    let state = wait_for("bud-a/one's restart in the budget's queue", T, || async {
        let rollout = one.get("one").await.ok()?.status?.rollout?;
        Some(format!("{:?}", rollout.state))
    })
    .await;
    eprintln!("the operator paces bud-a/one: status.rollout.state {state}");
    bench.converge(2, "the restart").await;
    let wrote = written(&bench.audit_log(), since, &set(&["bud-a"]));
    assert_eq!(
        predicted(&a_report, &set(&["bud-a"])),
        wrote,
        "diff -A predicts what the operator wrote:\n{a_text}"
    );
    assert!(
        waits(&a_report),
        "diff -A says bud-a/one's restart waits for the budget:\n{a_text}"
    );
    assert!(
        waits(&n_report),
        "the operator paced bud-a/one's restart (status.rollout.state {state}): diff -n bud-a \
         must say it waits for the budget, as diff -A does:\n{n_text}\n{a_text}"
    );
}

/// (b) An instance whose host (the default host of its account and region)
/// another namespace's instance holds: the operator applies nothing for it,
/// and each scope's preview must predict nothing.
#[tokio::test]
async fn divergence_b_a_host_held_in_another_namespace_is_applied_nowhere() {
    let config = config_yaml(&[("r1", "kura.test", "shared-a", None)]);
    let bench = Bench::start("preview-host", 21, &config, &[]).await;
    for ns in ["host-a", "host-b"] {
        bench.namespace(ns, json!({})).await;
    }
    let holder: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "host-a");
    let asker: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "host-b");
    apply_acme(&holder).await;
    wait_ready(&holder, "acme").await;
    bench.converge(1, "the holder").await;

    bench.pause();
    apply_acme(&asker).await;
    let since = jiff::Timestamp::now();
    let scope = set(&["host-a", "host-b"]);
    let (n_report, n_text) = preview(&bench, &["-n", "host-b"], &scope);
    let (a_report, a_text) = preview(&bench, &["-A"], &scope);
    bench.resume();
    ready_reason(&asker, "acme", "HostConflict").await;
    bench.converge(2, "the host conflict").await;
    let wrote = written(&bench.audit_log(), since, &scope);
    assert_eq!(
        predicted(&a_report, &scope),
        wrote,
        "diff -A predicts what the operator wrote:\n{a_text}"
    );
    assert_eq!(
        predicted(&n_report, &scope),
        wrote,
        "diff -n host-b predicts what the operator wrote (host-b/acme reports HostConflict):\n{n_text}"
    );
}

/// (c) Objects of the instance's generated names that are someone else's
/// (an unlabelled Service): the operator writes nothing, so the preview must
/// predict nothing. Twice: the Service there before the instance, and the
/// instance's own Service replaced by someone else's after it converged.
#[tokio::test]
async fn divergence_c_a_name_taken_by_someone_elses_service_is_written_nowhere() {
    let config = config_yaml(&[("r1", "kura.test", "shared-a", None)]);
    let bench = Bench::start("preview-name", 22, &config, &[]).await;
    bench.namespace("name-a", json!({})).await;
    let scope = set(&["name-a"]);
    let instances: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "name-a");
    let services: Api<Service> = Api::namespaced(bench.client.clone(), "name-a");
    let users_service = || -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "foo"},
            "spec": {"ports": [{"port": 9999}]},
        }))
        .unwrap()
    };

    // The Service is there first.
    bench.pause();
    services
        .create(&PostParams::default(), &users_service())
        .await
        .unwrap();
    apply_json(
        &instances,
        "test",
        instance("foo", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    let since = jiff::Timestamp::now();
    let (n_report, n_text) = preview(&bench, &["-n", "name-a"], &scope);
    let (a_report, a_text) = preview(&bench, &["-A"], &scope);
    bench.resume();
    // Reported once its apply has been refused: nothing more to wait for.
    ready_reason(&instances, "foo", "NameConflict").await;
    let wrote = written(&bench.audit_log(), since, &scope);
    for (report, text) in [(&n_report, &n_text), (&a_report, &a_text)] {
        assert_eq!(
            predicted(report, &scope),
            wrote,
            "a Service there before the instance: the prediction is what the operator wrote:\n{text}"
        );
    }

    // The user removes theirs and forces a new attempt (instead of waiting
    // out the backoff): the operator creates its own.
    services
        .delete("foo", &DeleteParams::default())
        .await
        .unwrap();
    instances
        .patch(
            "foo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kura.dev/reapply-at": "retry"}}})),
        )
        .await
        .unwrap();
    wait_ready(&instances, "foo").await;
    bench.converge(1, "the instance").await;

    // Its Service replaced by someone else's.
    bench.pause();
    services
        .delete("foo", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone("the Service to be gone", T, &services, "foo").await;
    services
        .create(&PostParams::default(), &users_service())
        .await
        .unwrap();
    let since = jiff::Timestamp::now();
    let (n_report, n_text) = preview(&bench, &["-n", "name-a"], &scope);
    let (a_report, a_text) = preview(&bench, &["-A"], &scope);
    bench.resume();
    // Not Ready once it has tried (and been refused, or written).
    let reason = wait_for("foo to report what it did", T, || async {
        let s = instances.get("foo").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.status != kura_core::api::ConditionStatus::True)
            .then(|| format!("{}: {}", ready.reason, ready.message))
    })
    .await;
    eprintln!("foo reports {reason}");
    let wrote = written(&bench.audit_log(), since, &scope);
    let live = services.get("foo").await.unwrap();
    assert_eq!(
        live.spec.and_then(|s| s.ports).unwrap_or_default()[0].port,
        9999,
        "the user's Service is left as it is"
    );
    for (report, text) in [(&n_report, &n_text), (&a_report, &a_text)] {
        assert_eq!(
            predicted(report, &scope),
            wrote,
            "the instance's Service replaced by someone else's: the prediction is what the \
             operator wrote:\n{text}"
        );
    }
}

/// (d) An object handed over with `kura.dev/adopt`: the operator's write is an
/// update of the existing object (a server-side apply answered 200), so the
/// preview must show an update, not a create.
#[tokio::test]
async fn divergence_d_an_adopted_object_is_updated_not_created() {
    let config = config_yaml(&[("r1", "kura.test", "shared-a", None)]);
    let bench = Bench::start("preview-adopt", 23, &config, &[]).await;
    bench.namespace("adopt-a", json!({})).await;
    let scope = set(&["adopt-a"]);
    let instances: Api<KuraInstance> = Api::namespaced(bench.client.clone(), "adopt-a");
    let maps: Api<ConfigMap> = Api::namespaced(bench.client.clone(), "adopt-a");

    bench.pause();
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "foo-config", "annotations": {"kura.dev/adopt": "foo"}},
            "data": {"mine": "yes"},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    apply_json(
        &instances,
        "test",
        instance("foo", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    let since = jiff::Timestamp::now();
    let (n_report, n_text) = preview(&bench, &["-n", "adopt-a"], &scope);
    let (a_report, a_text) = preview(&bench, &["-A"], &scope);
    bench.resume();
    wait_ready(&instances, "foo").await;
    bench.converge(1, "the adoption").await;
    let wrote = written(&bench.audit_log(), since, &scope);
    assert_eq!(
        wrote.get("ConfigMap adopt-a/foo-config"),
        Some(&vec!["update".to_string()]),
        "negative control: the operator updated the handed-over ConfigMap: {wrote:?}"
    );
    for (report, text) in [(&n_report, &n_text), (&a_report, &a_text)] {
        assert_eq!(
            predicted(report, &scope),
            wrote,
            "the prediction is what the operator wrote:\n{text}"
        );
    }
}
