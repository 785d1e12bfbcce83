//! The chart's RBAC is enough for the real operator: rendered for namespaced
//! mode with leader election, applied, and the operator binary run out of
//! cluster as the chart's ServiceAccount (a kubeconfig that impersonates it).
//! It converges an instance with a dedicated gateway — every kind it renders,
//! the cluster-scoped IngressClass, Events, the Lease — and nothing it does is
//! forbidden (binding the gateway's ClusterRoles included: the chart grants
//! `bind` on those two only); the same identity still gets 403 on Secrets.
//! The gateway's ingress controller runs as its own ServiceAccount, which can
//! read what Traefik reads in its namespace and no other.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use super::*;
use crate::operations::chart::ClusterScopedCleanup;
use crate::operations::chart::rbac::{access, allowed, apply_chart_rbac, wait_allowed};
use crate::operator::{
    Operator, Options, apply_acme, config, delete_shared_class, shared_class, wait_ready,
};
use kura_core::api::KuraInstance;

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
    wait_granted::<StatefulSet>(&as_sa, &ns.name).await;

    let kubeconfig = impersonating_kubeconfig(&scratch_dir(&ns.name), &ns.name, &sa);
    // A cloud region whose dedicated gateways kura-sim serves: the instance
    // needs a KuraGateway, its Deployment, Service and IngressClass.
    // kube's debug log shows every request and every non-2xx answer.
    // The chart's flags naming the ClusterRoles it installs for the gateways
    // (`<release namespace>-<fullname>-gateway[-cluster]`): the operator may
    // bind those and no other.
    let roles = format!("{0}-{0}-kura-operator-gateway", ns.name);
    let gateway_flags = vec![
        format!("--gateway-role={roles}"),
        format!("--gateway-cluster-role={roles}-cluster"),
    ];
    let replica = |name: &str| {
        Operator::start_with(
            &ns.name,
            &config(&ns.name, "cloud", "kura.dev/sim-ingress"),
            &[("KURA_LOG", "info,kube=debug")],
            Options {
                kubeconfig: Some(kubeconfig.clone()),
                lease_duration: Some(Duration::from_secs(15)),
                replica: Some(name.into()),
                args: gateway_flags.clone(),
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
    apply_acme(&instances).await;
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
    gateway_has_its_rights_and_no_more(&ns, &kura_core::names::gateway("acme", "r1")).await;
    delete_shared_class(&classes, &ns).await;
}

/// The dedicated gateway's ServiceAccount, as the operator bound it to the
/// chart's gateway ClusterRoles: Traefik's reads in its own namespace (Secrets
/// included, for TLS) and the IngressClasses; nothing in another namespace,
/// no writes but Ingress status. The namespace's `default` ServiceAccount,
/// which the gateway's pod used before it had its own, gets nothing.
async fn gateway_has_its_rights_and_no_more(ns: &TestNamespace, gateway: &str) {
    let as_gateway = client_as_service_account(&ns.name, gateway).await;
    let here = ns.name.as_str();
    let can = [
        access("list", "networking.k8s.io", "ingresses").ns(here),
        access("update", "networking.k8s.io", "ingresses/status").ns(here),
        access("watch", "", "services").ns(here),
        access("get", "", "secrets").ns(here),
        access("list", "discovery.k8s.io", "endpointslices").ns(here),
        access("list", "networking.k8s.io", "ingressclasses"),
    ];
    wait_allowed(&as_gateway, &can).await;
    let cannot = [
        access("get", "", "secrets").ns("default"),
        access("list", "networking.k8s.io", "ingresses"),
        access("create", "apps", "deployments").ns(here),
        access("patch", "networking.k8s.io", "ingresses").ns(here),
        access("create", "networking.k8s.io", "ingressclasses"),
    ];
    for a in &cannot {
        assert!(
            !allowed(&as_gateway, a).await,
            "the gateway may {}",
            a.describe()
        );
    }
    let as_default = client_as_service_account(here, "default").await;
    let theirs = access("list", "networking.k8s.io", "ingresses").ns(here);
    assert!(
        !allowed(&as_default, &theirs).await,
        "the namespace's default ServiceAccount got the gateway's rights"
    );
}
