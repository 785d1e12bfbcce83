//! The chart's RBAC is enough for the real operator: rendered for namespaced
//! mode with leader election, applied, and the operator binary run out of
//! cluster as the chart's ServiceAccount (a kubeconfig that impersonates it).
//! It converges an instance with a dedicated gateway — every kind it renders,
//! the cluster-scoped IngressClass, Events, the Lease — and nothing it does is
//! forbidden; the same identity still gets 403 on Secrets.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use super::*;
use crate::chart::ClusterScopedCleanup;
use crate::chart::rbac::apply_chart_rbac;
use crate::operator::{Operator, Options, config, instance, shared_class, wait_ready};
use kura_operator::api::KuraInstance;

#[tokio::test]
async fn chart_rbac_is_enough_for_the_operator_and_denies_secrets() {
    let ns = TestNamespace::new("ops-rbac").await;
    let _cleanup = ClusterScopedCleanup(ns.name.clone());
    let classes = shared_class(&ns).await;
    let sa = apply_chart_rbac(
        &ns,
        &format!("watchNamespace={},leaderElection.enabled=true", ns.name),
    );

    // Bindings reach the authorizer asynchronously: start once one grant works.
    let as_sa = client_as_service_account(&ns.name, &sa).await;
    wait_for(
        "the grants to take effect",
        Duration::from_secs(30),
        || async {
            Api::<StatefulSet>::namespaced(as_sa.clone(), &ns.name)
                .list(&ListParams::default())
                .await
                .ok()
        },
    )
    .await;

    let kubeconfig = impersonating_kubeconfig(&scratch_dir(&ns.name), &ns.name, &sa);
    // A cloud region whose dedicated gateways kura-sim serves: the instance
    // needs a KuraGateway, its Deployment, Service and IngressClass.
    // kube's debug log shows every request and every non-2xx answer.
    let replica = |name: &str| {
        Operator::start_with(
            &ns.name,
            &config(&ns.name, "cloud", "kura.dev/sim-ingress"),
            &[("KURA_LOG", "info,kube=debug")],
            Options {
                kubeconfig: Some(kubeconfig.clone()),
                lease_duration: Some(Duration::from_secs(15)),
                replica: Some(name.into()),
                ..Options::default()
            },
        )
    };
    let op = replica("leader");
    wait_for("the leader to lead", Duration::from_secs(60), || async {
        (op.metric("kura_leader").await? == 1.0).then_some(())
    })
    .await;
    // A standby too: it watches the Lease, which a leader never does.
    let standby = replica("standby");
    wait_for("a ready standby", Duration::from_secs(60), || async {
        (standby.get("/readyz").await?.0 == 200).then_some(())
    })
    .await;
    assert_eq!(standby.metric("kura_leader").await, Some(0.0));
    let instances: Api<KuraInstance> = ns.api();
    apply_json(
        &instances,
        "test",
        instance("acme", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    let status = wait_ready(&instances, "acme").await;
    assert!(
        status.inventory.iter().any(|e| e.kind == "KuraGateway"),
        "the dedicated gateway path was exercised: {:?}",
        status.inventory
    );
    assert_eq!(
        op.metric("kura_leader").await,
        Some(1.0),
        "it took the Lease"
    );
    // Its list by name was answered, and its watch was sent (a denied watch
    // would show as a 403 below).
    let lease_calls = |log: &str, call: &str| {
        log.lines().any(|l| {
            l.contains("/leases?") && l.contains("fieldSelector=metadata.name") && l.contains(call)
        })
    };
    wait_for(
        "the standby's Lease watch",
        Duration::from_secs(30),
        || async {
            let log = standby.log();
            (lease_calls(&log, "http.status_code=200") && lease_calls(&log, "watch=true"))
                .then_some(())
        },
    )
    .await;
    for log in [op.log(), standby.log()] {
        for denied in ["forbidden", "Forbidden"] {
            assert!(
                !log.contains(denied),
                "a request was denied ({denied}):\n{log}"
            );
        }
    }

    match Api::<Secret>::namespaced(as_sa, &ns.name)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("Secrets must be forbidden, got {other:?}"),
    }
    let _ = classes
        .delete(&format!("shared-{}", ns.name), &Default::default())
        .await;
}
