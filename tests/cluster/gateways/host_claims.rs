//! A host is served to one instance only, across the namespaces the operator
//! watches: the instance that holds a host (serves it, or claimed it first)
//! keeps it; any other instance asking for it gets nothing applied and nothing
//! deleted, and reports `HostConflict` naming the field, the host and the
//! holder. Deleting the holder reserves its hosts for an instance of the same
//! namespace and name (a recreation) for `--host-reservation`, then hands
//! them to the next claimant.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use crate::operator::{
    Operator, Options, apply_acme, config, delete_shared_class, instance, shared_class, wait_ready,
};
use crate::support::*;
use kura_core::api::{ConditionStatus, KuraInstance, Phase};

const T: Duration = Duration::from_secs(90);

pub(crate) fn with_host(name: &str, host: Option<&str>, aliases: &[&str]) -> serde_json::Value {
    let mut spec = instance(name, "registry.example/kura:1.0.0");
    if let Some(host) = host {
        spec["spec"]["host"] = json!(host);
    }
    if !aliases.is_empty() {
        spec["spec"]["aliases"] = json!(aliases);
    }
    spec
}

/// Creates or changes the instance `name` to ask for `host`, with no
/// aliases.
async fn ask_for(instances: &Api<KuraInstance>, name: &str, host: &str) {
    apply_json(instances, "test", with_host(name, Some(host), &[]))
        .await
        .unwrap();
}

/// The Ready condition's message once its reason is `HostConflict`.
pub(crate) async fn host_conflict(instances: &Api<KuraInstance>, name: &str) -> String {
    wait_for(&format!("{name} to report HostConflict"), T, || async {
        let s = instances.get(name).await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        let stalled = s.conditions.iter().find(|c| c.type_ == "Stalled")?;
        (ready.reason == "HostConflict"
            && ready.status == ConditionStatus::False
            && stalled.reason == "HostConflict"
            && stalled.status == ConditionStatus::True
            && s.phase == Some(Phase::Stalled))
        .then(|| ready.message.clone())
    })
    .await
}

/// Every Ingress (of any namespace the client sees) with a rule for `host`,
/// as `namespace/name`.
pub(crate) async fn ingresses_for(client: &Client, host: &str) -> Vec<String> {
    let all = Api::<Ingress>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut found: Vec<String> = all
        .items
        .iter()
        .filter(|i| {
            i.spec
                .iter()
                .flat_map(|s| s.rules.iter().flatten())
                .any(|r| r.host.as_deref() == Some(host))
        })
        .map(|i| {
            format!(
                "{}/{}",
                i.metadata.namespace.as_deref().unwrap_or_default(),
                i.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    found.sort();
    found
}

/// Warning Events with `reason` on instance `name`.
async fn events(ns: &Api<Event>, name: &str, reason: &str) -> Vec<String> {
    ns.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

pub(crate) fn assert_names(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "names {part:?}: {message}");
    }
}

#[tokio::test]
async fn two_instances_of_one_namespace_asking_for_one_host_the_first_keeps_it() {
    let ns = TestNamespace::new("claims-one").await;
    let classes = shared_class(&ns).await;
    let op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let host = format!("shop.{}.test", ns.name);
    ask_for(&instances, "first", &host).await;
    wait_ready(&instances, "first").await;
    ask_for(&instances, "second", &host).await;

    let message = host_conflict(&instances, "second").await;
    assert_names(
        &message,
        &["spec.host", &host, &format!("{}/first", ns.name)],
    );
    // Nothing applied for the second: no Ingress for the host but the first's,
    // no workload.
    assert_eq!(
        ingresses_for(&ns.client, &host).await,
        [format!("{}/first", ns.name)]
    );
    assert!(
        ns.api::<StatefulSet>()
            .get_opt("second")
            .await
            .unwrap()
            .is_none(),
        "nothing is applied for an instance whose host is taken"
    );
    let first = instances.get("first").await.unwrap().status.unwrap();
    assert_eq!(first.phase, Some(Phase::Ready), "the first keeps serving");

    // Reported once: three more reconciles (resync 3s) write no status and
    // publish no second Event.
    let settled = instances.get("second").await.unwrap();
    wait_for("one HostConflict Event", T, || async {
        (!events(&ns.api(), "second", "HostConflict").await.is_empty()).then_some(())
    })
    .await;
    op.wait_for_log_count("outcome=\"host-conflict\"", 3, Duration::from_secs(30))
        .await;
    let later = instances.get("second").await.unwrap();
    assert_eq!(
        settled.metadata.resource_version, later.metadata.resource_version,
        "an unchanged conflict writes no status"
    );
    let published = events(&ns.api(), "second", "HostConflict").await;
    assert_eq!(published.len(), 1, "one Warning Event: {published:?}");
    assert_names(
        &published[0],
        &["spec.host", &host, &format!("{}/first", ns.name)],
    );

    // Corrected through the operator: another host, and the second is served.
    let other = format!("other.{}.test", ns.name);
    ask_for(&instances, "second", &other).await;
    wait_ready(&instances, "second").await;
    assert_eq!(
        ingresses_for(&ns.client, &host).await,
        [format!("{}/first", ns.name)]
    );
    delete_shared_class(&classes, &ns).await;
}

/// A claim never moves because of what someone else does: an older instance
/// that asks for a host a younger one serves does not get it, and deleting the
/// holder's Ingress makes the holder re-create it, not hand the host over.
#[tokio::test]
async fn an_instance_serving_a_host_keeps_it_when_an_older_one_asks_for_it() {
    let ns = TestNamespace::new("claims-keep").await;
    let classes = shared_class(&ns).await;
    let _op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let host = format!("shop.{}.test", ns.name);
    let old_host = format!("old.{}.test", ns.name);
    ask_for(&instances, "older", &old_host).await;
    wait_ready(&instances, "older").await;
    ask_for(&instances, "younger", &host).await;
    wait_ready(&instances, "younger").await;

    ask_for(&instances, "older", &host).await;
    let message = host_conflict(&instances, "older").await;
    assert_names(
        &message,
        &["spec.host", &host, &format!("{}/younger", ns.name)],
    );
    assert_eq!(
        ingresses_for(&ns.client, &host).await,
        [format!("{}/younger", ns.name)]
    );
    // Nothing deleted for the older either: its Ingress still serves its old host.
    assert_eq!(
        ingresses_for(&ns.client, &old_host).await,
        [format!("{}/older", ns.name)]
    );

    // Someone deletes the holder's Ingress: the holder re-creates it.
    let ingresses: Api<Ingress> = ns.api();
    let before = ingresses.get("younger").await.unwrap().metadata.uid;
    ingresses
        .delete("younger", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the holder to re-create its Ingress", T, || async {
        let now = ingresses.get_opt("younger").await.ok()??;
        (now.metadata.uid != before).then_some(())
    })
    .await;
    wait_ready(&instances, "younger").await;
    assert_eq!(
        ingresses_for(&ns.client, &host).await,
        [format!("{}/younger", ns.name)],
        "the host stays with its holder"
    );
    let message = host_conflict(&instances, "older").await;
    assert_names(&message, &[&format!("{}/younger", ns.name)]);
    delete_shared_class(&classes, &ns).await;
}

/// Across namespaces, on a control plane of the test's own: the operator must
/// watch every namespace, which on the shared plane would reconcile other
/// tests' instances. The resync is long, so only the operator's reaction to
/// the holder's deletion can hand the host over within the test's timeout.
#[tokio::test]
async fn a_host_is_served_to_one_instance_across_namespaces() {
    let plane = PrivatePlane::up("claims", 5);
    let client = plane.client().await;
    let (a, b) = ("claims-a", "claims-b");
    for name in [a, b] {
        create_namespace(&client, name).await;
    }
    // Served by this plane's own kura-sim, which plays the region's ingress controller.
    create_sim_class(&client, "shared-claims").await;
    let options = Options {
        kubeconfig: Some(plane.kubeconfig()),
        all_namespaces: true,
        resync: Some("10m".into()),
        // No reservation for a recreation: the handover itself is tested here
        // (a_recreated_holder_keeps_its_host tests the reservation).
        args: vec!["--host-reservation=0s".into()],
        ..Options::default()
    };
    let _op = Operator::start_with(
        "claims",
        &config("claims", "host", "example.com/none"),
        &[],
        options,
    );
    let in_a: Api<KuraInstance> = Api::namespaced(client.clone(), a);
    let in_b: Api<KuraInstance> = Api::namespaced(client.clone(), b);
    // The default host of account acme in region r1: the same in both namespaces.
    let host = "acme.r1.kura.test";
    apply_acme(&in_a).await;
    wait_ready(&in_a, "acme").await;
    apply_acme(&in_b).await;

    let message = host_conflict(&in_b, "acme").await;
    assert_names(&message, &["spec.host", host, "claims-a/acme"]);
    assert_eq!(ingresses_for(&client, host).await, ["claims-a/acme"]);
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), b)
            .get_opt("acme")
            .await
            .unwrap()
            .is_none(),
        "nothing is applied for the second claimant"
    );
    let first = in_a.get("acme").await.unwrap().status.unwrap();
    assert_eq!(first.phase, Some(Phase::Ready), "the first keeps serving");
    wait_for("a HostConflict Event in claims-b", T, || async {
        let published = events(&Api::namespaced(client.clone(), b), "acme", "HostConflict").await;
        (published.len() == 1).then_some(())
    })
    .await;

    // An alias equal to another instance's host conflicts the same way.
    let own = "other.kura.test";
    apply_json(&in_b, "test", with_host("other", Some(own), &[host]))
        .await
        .unwrap();
    let message = host_conflict(&in_b, "other").await;
    assert_names(&message, &["spec.aliases[0]", host, "claims-a/acme"]);
    assert!(
        ingresses_for(&client, own).await.is_empty(),
        "nothing is applied for an instance with one host taken, not even its other hosts"
    );

    // The holder deleted: the next claimant by creation time gets the host
    // within seconds: long before any resync, and without waiting for the
    // garbage collector to delete the holder's Ingress (on a fresh plane it
    // takes about 40s to learn the CRD's kinds).
    let deleted = std::time::Instant::now();
    in_a.delete("acme", &DeleteParams::default()).await.unwrap();
    wait_for(
        "claims-b/acme to be Ready within seconds of the holder's deletion",
        Duration::from_secs(30),
        || async {
            let s = in_b.get("acme").await.ok()?.status?;
            (s.phase == Some(Phase::Ready) && s.applied_revision == s.desired_revision)
                .then_some(())
        },
    )
    .await;
    eprintln!("host handed over in {:?}", deleted.elapsed());
    wait_for("the host served by claims-b/acme alone", T, || async {
        (ingresses_for(&client, host).await == ["claims-b/acme"]).then_some(())
    })
    .await;
    wait_for("other to name the new holder", T, || async {
        let s = in_b.get("other").await.ok()?.status?;
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "HostConflict" && ready.message.contains("claims-b/acme")).then_some(())
    })
    .await;
    assert!(ingresses_for(&client, own).await.is_empty());
}

/// Polls `name` for `period`, failing as soon as it is not Ready (a holder
/// that lost its host reports HostConflict).
async fn stays_ready(instances: &Api<KuraInstance>, name: &str, period: Duration) {
    let end = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < end {
        let s = instances
            .get(name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready");
        assert!(
            s.phase == Some(Phase::Ready),
            "{name} stays Ready, got {:?}: {:?}",
            s.phase,
            ready.map(|c| (&c.reason, &c.message))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Polls `name` for `period`, failing as soon as it is not in HostConflict.
async fn stays_in_conflict(instances: &Api<KuraInstance>, name: &str, period: Duration) {
    let end = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < end {
        let s = instances
            .get(name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready");
        assert!(
            ready.is_some_and(|c| c.reason == "HostConflict"),
            "{name} keeps waiting, got {:?}: {:?}",
            s.phase,
            ready.map(|c| (&c.reason, &c.message))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Issue 22.10: an Ingress labelled as the operator's, controlled by a paused
/// instance older than the holder, and even applied under the operator's
/// field manager name, is not a claim: the instance that served the host
/// first keeps it, and the forger's instance, unpaused, waits.
#[tokio::test]
async fn a_labelled_ingress_is_not_a_claim() {
    let ns = TestNamespace::new("claims-forged").await;
    let classes = shared_class(&ns).await;
    let _op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let host = format!("shop.{}.test", ns.name);
    // The forger's instance goes first by creation, paused so nothing is applied.
    let mut forger = with_host("aaa", Some(&format!("own.{}.test", ns.name)), &[]);
    forger["spec"]["paused"] = json!(true);
    let forger = apply_json(&instances, "test", forger).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await; // creation times have whole seconds: a later one
    ask_for(&instances, "holder", &host).await;
    wait_ready(&instances, "holder").await;

    let forged = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {
            "name": "forged",
            "labels": {"app.kubernetes.io/managed-by": "kura-operator", "kura.dev/instance": "aaa"},
            "ownerReferences": [{"apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                "name": "aaa", "uid": forger.metadata.uid.clone().unwrap(), "controller": true}],
        },
        "spec": {"ingressClassName": format!("shared-{}", ns.name), "rules": [{"host": host}]},
    });
    // Under the operator's own field manager name: names are the client's choice.
    apply_json(&ns.api::<Ingress>(), "kura-operator", forged)
        .await
        .unwrap();
    apply_json(&instances, "test", {
        let mut forger = with_host("aaa", Some(&host), &[]);
        forger["spec"]["paused"] = json!(true);
        forger
    })
    .await
    .unwrap();
    stays_ready(&instances, "holder", Duration::from_secs(12)).await;

    // Unpaused, the forger's instance asks for the host and waits.
    ask_for(&instances, "aaa", &host).await;
    let message = host_conflict(&instances, "aaa").await;
    assert_names(
        &message,
        &["spec.host", &host, &format!("{}/holder", ns.name)],
    );
    stays_ready(&instances, "holder", Duration::from_secs(6)).await;
    delete_shared_class(&classes, &ns).await;
}

/// Issue 22.11: a paused instance that serves nothing claims nothing: an
/// older paused instance does not keep a younger one from a free host.
#[tokio::test]
async fn a_paused_instance_claims_no_new_host() {
    let ns = TestNamespace::new("claims-paused").await;
    let classes = shared_class(&ns).await;
    let _op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let host = format!("shop.{}.test", ns.name);
    let mut squatter = with_host("squatter", Some(&host), &[]);
    squatter["spec"]["paused"] = json!(true);
    apply_json(&instances, "test", squatter).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await; // creation times have whole seconds: a later one
    ask_for(&instances, "user", &host).await;
    wait_ready(&instances, "user").await;
    assert_eq!(
        ingresses_for(&ns.client, &host).await,
        [format!("{}/user", ns.name)]
    );
    // Unpaused, the squatter waits: the host is served.
    ask_for(&instances, "squatter", &host).await;
    let message = host_conflict(&instances, "squatter").await;
    assert_names(&message, &[&host, &format!("{}/user", ns.name)]);
    delete_shared_class(&classes, &ns).await;
}

/// Issue 22.11: an owner that deletes and recreates its instance (immutable
/// fields) keeps its hosts: they stay reserved for an instance of the same
/// namespace and name for `--host-reservation` (5 minutes by default), and
/// the instance waiting for them keeps waiting.
#[tokio::test]
async fn a_recreated_holder_keeps_its_host() {
    let ns = TestNamespace::new("claims-recreate").await;
    let classes = shared_class(&ns).await;
    let _op = Operator::start(&ns.name, &config(&ns.name, "host", "example.com/none"));
    let instances: Api<KuraInstance> = ns.api();
    let host = format!("shop.{}.test", ns.name);
    ask_for(&instances, "holder", &host).await;
    wait_ready(&instances, "holder").await;
    ask_for(&instances, "next", &host).await;
    host_conflict(&instances, "next").await;

    instances
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the holder to be gone", T, || async {
        instances
            .get_opt("holder")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    stays_in_conflict(&instances, "next", Duration::from_secs(10)).await;
    let message = host_conflict(&instances, "next").await;
    assert_names(
        &message,
        &[&host, &format!("{}/holder", ns.name), "reserved"],
    );

    ask_for(&instances, "holder", &host).await;
    wait_ready(&instances, "holder").await;
    wait_for(
        "the host served by the recreated holder alone",
        T,
        || async {
            (ingresses_for(&ns.client, &host).await == [format!("{}/holder", ns.name)])
                .then_some(())
        },
    )
    .await;
    stays_in_conflict(&instances, "next", Duration::from_secs(6)).await;
    delete_shared_class(&classes, &ns).await;
}
