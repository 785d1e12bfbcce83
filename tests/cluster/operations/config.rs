//! An invalid operator configuration delivered at runtime (a bad ConfigMap
//! edit): the last valid configuration stays in force, and the operator says
//! so where an administrator looks before a restart would fail on the file:
//! `/readyz` answers 503 naming the file and the error, `kura_config_valid`
//! drops to 0, and a Warning Event lands on the operator's own Pod. A valid
//! file clears it all and takes effect.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::*;
use crate::operator::{Operator, config, delete_shared_class, shared_class};
use kura_core::api::KuraInstance;

const INVALID: &str = "kura_config_reloads_total{result=\"invalid\"}";
const VALID: &str = "kura_config_reloads_total{result=\"valid\"}";

/// Events `kubectl describe pod` shows for the Pod with `uid`, with `reason`.
async fn pod_events(events: &Api<Event>, uid: &str, reason: &str) -> Vec<Event> {
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let Ok(list) = events.list(&lp).await else {
        return vec![];
    };
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test]
async fn an_invalid_config_at_runtime_is_reported_and_the_last_valid_one_stays_in_force() {
    let ns = TestNamespace::new("ops-config").await;
    let classes = shared_class(&ns).await;
    // The operator runs as a process here, not in a pod: this Pod object stands
    // for the pod it would run in, and the environment below is what the
    // chart's downward API would give it.
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "kura-operator-0"},
        "spec": {"containers": [{"name": "operator", "image": "registry.example/kura-operator:test"}]},
    }))
    .unwrap();
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid = pod.metadata.uid.expect("a uid");
    let good = config(&ns.name, "host", "example.com/none");
    let op = Operator::start_with_env(
        &ns.name,
        &good,
        &[
            ("POD_NAME", "kura-operator-0"),
            ("POD_NAMESPACE", &ns.name),
            ("POD_UID", &uid),
        ],
    );
    let instances: Api<KuraInstance> = ns.api();
    let before = create_acme(&instances, Duration::from_secs(90)).await;
    wait_for("/readyz to answer 200", Duration::from_secs(30), || async {
        (op.get("/readyz").await?.0 == 200).then_some(())
    })
    .await;

    // Valid YAML, one value out of range: what a careless ConfigMap edit delivers.
    let invalid = good.replace("replicas: 1", "replicas: 0");
    assert_ne!(invalid, good);
    op.set_config(&invalid);
    let (_, why) = wait_for("/readyz to answer 503", Duration::from_secs(30), || async {
        let answer = op.get("/readyz").await?;
        (answer.0 == 503).then_some(answer)
    })
    .await;
    let path = op.config_path.display().to_string();
    assert!(
        why.contains(&path) && why.contains("gateway.replicas: must be between 1 and 8"),
        "/readyz names the file and the error: {why}"
    );
    assert_eq!(op.metric("kura_config_valid").await, Some(0.0));
    assert_eq!(op.metric(INVALID).await, Some(1.0));
    assert_eq!(op.get("/healthz").await.map(|r| r.0), Some(200), "alive");
    let events: Api<Event> = ns.api();
    let warnings = wait_for(
        "a Warning Event on the operator's Pod",
        Duration::from_secs(30),
        || async {
            let found = pod_events(&events, &uid, "InvalidConfig").await;
            (!found.is_empty()).then_some(found)
        },
    )
    .await;
    let warning = &warnings[0];
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.message.clone().unwrap_or_default();
    assert!(
        note.contains(&path) && note.contains("gateway.replicas"),
        "{note}"
    );

    // The last valid configuration is still in force: a force re-apply is
    // handled, to the same revision.
    let token = "2026-11-30T12:00:00Z";
    let patch = json!({"metadata": {"annotations": {"kura.dev/reapply-at": token}}});
    instances
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let forced = wait_for(
        "the force re-apply to be handled",
        Duration::from_secs(60),
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            (s.last_handled_reapply_at.as_deref() == Some(token)).then_some(s)
        },
    )
    .await;
    assert_eq!(forced.applied_revision, before.applied_revision);
    assert_eq!(
        op.get("/readyz").await.map(|r| r.0),
        Some(503),
        "still invalid"
    );
    assert_eq!(
        pod_events(&events, &uid, "InvalidConfig").await.len(),
        1,
        "one Event for one invalid file, not one per poll"
    );

    // A valid file (another domain, so another revision) clears it all and applies.
    op.set_config(&good.replace("domain: kura.test", "domain: kura.example"));
    wait_for(
        "/readyz to answer 200 again",
        Duration::from_secs(30),
        || async { (op.get("/readyz").await? == (200, "ok".to_string())).then_some(()) },
    )
    .await;
    assert_eq!(op.metric("kura_config_valid").await, Some(1.0));
    assert_eq!(op.metric(VALID).await, Some(1.0));
    let after = wait_applied(
        &instances,
        "acme",
        before.applied_revision.as_deref(),
        Duration::from_secs(60),
    )
    .await;
    wait_for(
        "the endpoint on the new domain",
        Duration::from_secs(60),
        || async {
            let endpoint = instances.get("acme").await.ok()?.status?.endpoint?;
            endpoint.contains("acme.r1.kura.example").then_some(())
        },
    )
    .await;
    wait_for(
        "a Normal Event that the configuration is valid again",
        Duration::from_secs(30),
        || async {
            let found = pod_events(&events, &uid, "ConfigReloaded").await;
            found
                .into_iter()
                .find(|e| e.type_.as_deref() == Some("Normal"))
        },
    )
    .await;
    // The new revision is the operator's (its configuration changed): the
    // fleet's one Event on the Pod says so, and the instance publishes no
    // Normal Event of its own for it (a fleet of N costs one Event, not N).
    let rollout = wait_for(
        "the FleetRollout Event on the operator's Pod",
        Duration::from_secs(30),
        || async {
            let found = pod_events(&events, &uid, "FleetRollout").await;
            (found.len() == 1).then(|| found[0].clone())
        },
    )
    .await;
    assert_eq!(rollout.type_.as_deref(), Some("Normal"));
    let revision = kura_core::render::hash::short(after.applied_revision.as_deref().unwrap());
    let lp = ListParams::default().fields("involvedObject.name=acme");
    let applied: Vec<String> = events
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Applied"))
        .filter_map(|e| e.message)
        .filter(|m| m.contains(revision.as_str()))
        .collect();
    assert!(
        applied.is_empty(),
        "an Applied Event of the instance: {applied:?}"
    );
    delete_shared_class(&classes, &ns).await;
}

/// In namespaced mode the operator's pod may live outside the namespace it
/// watches, which its Role covers: the chart grants it Events in its own
/// namespace too, so the invalid-configuration Event is published there.
#[tokio::test]
async fn namespaced_mode_can_publish_the_config_event_in_the_pods_own_namespace() {
    use k8s_openapi::api::events::v1::Event as NewEvent;

    let release = TestNamespace::new("ops-config-rel").await;
    let watched = TestNamespace::new("ops-config-watched").await;
    let _cleanup = crate::operations::chart::ClusterScopedCleanup(release.name.clone());
    let sa = crate::operations::chart::rbac::apply_chart_rbac(
        &release,
        &format!("watchNamespace={}", watched.name),
    );
    // Bindings reach the authorizer asynchronously: start once the Event grant
    // works (a dry run is authorised like the real create).
    let as_sa = client_as_service_account(&release.name, &sa).await;
    let probe: NewEvent = serde_json::from_value(json!({
        "metadata": {"name": "grant-probe"},
        "eventTime": "2026-11-30T12:00:00.000000Z",
        "reportingController": "kura-operator", "reportingInstance": "test",
        "action": "Probe", "reason": "Probe", "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": release.name, "name": "kura-operator-0"},
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the Event grant to take effect",
        Duration::from_secs(30),
        || async {
            Api::<NewEvent>::namespaced(as_sa.clone(), &release.name)
                .create(&dry_run, &probe)
                .await
                .ok()
        },
    )
    .await;
    let kubeconfig = impersonating_kubeconfig(&scratch_dir(&release.name), &release.name, &sa);
    let good = config(&watched.name, "host", "example.com/none");
    let op = Operator::start_with(
        &watched.name,
        &good,
        &[
            ("POD_NAME", "kura-operator-0"),
            ("POD_NAMESPACE", &release.name),
        ],
        crate::operator::Options {
            kubeconfig: Some(kubeconfig),
            ..Default::default()
        },
    );
    wait_for("/readyz to answer 200", Duration::from_secs(60), || async {
        (op.get("/readyz").await?.0 == 200).then_some(())
    })
    .await;
    op.set_config(&good.replace("replicas: 1", "replicas: 0"));
    let events: Api<Event> = release.api();
    let warning = wait_for(
        "the Warning Event in the pod's namespace",
        Duration::from_secs(30),
        || async {
            let lp = ListParams::default().fields("involvedObject.name=kura-operator-0");
            let list = events.list(&lp).await.ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("InvalidConfig"))
        },
    )
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        !op.log().contains("could not publish event"),
        "{}",
        op.log()
    );
}

/// In a pod the chart has the operator follow its ConfigMap through the API
/// (`--config-map`): a change takes effect as soon as the apiserver has it,
/// not after the kubelet refreshes the mounted file (tens of seconds). Here
/// the file is never touched: what changes the instance can only have come
/// through the API. An invalid edit is reported naming the ConfigMap, the
/// last valid configuration staying in force.
#[tokio::test]
async fn a_config_map_edit_reaches_the_operator_through_the_api() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ns = TestNamespace::new("ops-config-map").await;
    let classes = shared_class(&ns).await;
    let good = config(&ns.name, "host", "example.com/none");
    let maps: Api<ConfigMap> = ns.api();
    let put = |text: String| {
        let maps = maps.clone();
        async move {
            apply_json(
                &maps,
                "test",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "kura-operator-config"},
                       "data": {"config.yaml": text}}),
            )
            .await
            .unwrap();
        }
    };
    put(good.clone()).await;
    let at = format!("{}/kura-operator-config", ns.name);
    let op = Operator::start_full(&ns.name, &good, &["--config-map", &at], &[]);
    let instances: Api<KuraInstance> = ns.api();
    let before = create_acme(&instances, Duration::from_secs(90)).await;

    // An invalid edit: reported naming the ConfigMap, nothing applied.
    put(good.replace("replicas: 1", "replicas: 0")).await;
    let (_, why) = wait_for("/readyz to answer 503", Duration::from_secs(30), || async {
        let answer = op.get("/readyz").await?;
        (answer.0 == 503).then_some(answer)
    })
    .await;
    assert!(
        why.contains(&format!("ConfigMap {at} key config.yaml"))
            && why.contains("gateway.replicas"),
        "/readyz names the ConfigMap and the error: {why}"
    );

    // A valid edit (another domain): applied, the file untouched.
    put(good.replace("domain: kura.test", "domain: kura.example")).await;
    wait_applied(
        &instances,
        "acme",
        before.applied_revision.as_deref(),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        op.get("/readyz").await,
        Some((200, "ok".to_string())),
        "valid again"
    );
    assert_eq!(
        std::fs::read_to_string(&op.config_path).unwrap(),
        good,
        "negative control: the file still holds the start-up configuration, so the change came through the API"
    );
    delete_shared_class(&classes, &ns).await;
}
