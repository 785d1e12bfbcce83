//! `helm upgrade` with a changed region re-applies the affected instances.
//!
//! The chart is really installed and upgraded; its operator pod cannot run
//! here (no kubelet), so the operator binary runs out of cluster on a file
//! holding the ConfigMap's data as the apiserver has it. Copying the data into
//! that file after the upgrade is what the kubelet's ConfigMap volume sync does
//! in a pod (the chart mounts the directory, not a subPath, for that reason).

use std::time::Duration;

use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;

use super::*;
use crate::operations::chart::{Release, chart_dir, helm, kubectl_run};
use crate::operator::{Operator, shared_class};
use kura_core::api::KuraInstance;

/// `data."config.yaml"` of the release's ConfigMap, as stored in the cluster.
fn rendered_config(ns: &str) -> String {
    let out = kubectl_run(
        &[
            "get",
            "configmap",
            "-n",
            ns,
            &format!("{ns}-kura-operator-config"),
            "-o",
            "jsonpath={.data.config\\.yaml}",
        ],
        None,
    );
    assert!(out.ok, "reading the chart's ConfigMap: {}", out.stderr);
    out.stdout
}

#[tokio::test]
async fn helm_upgrade_of_a_region_reapplies_its_instances() {
    let ns = TestNamespace::new("ops-upgrade").await;
    let classes = shared_class(&ns).await;
    let shared = format!("shared-{}", ns.name);
    // The endpoint check off: kura-sim serves the shared class, at an address
    // where nothing answers.
    let region = |network: &str| {
        format!(
            "config.regions.r1.network={network},config.regions.r1.sharedIngressClass={shared},config.regions.r1.domain=kura.test,config.regions.r1.endpointCheck.enabled=false,config.gateway.controller=example.com/none"
        )
    };
    let _release = Release::install(
        &ns.name,
        &ns.name,
        &[
            "--set",
            &format!("watchNamespace={},{}", ns.name, region("cloud")),
        ],
    );
    let before = rendered_config(&ns.name);
    assert!(before.contains("network: cloud"), "{before}");
    let op = Operator::start(&ns.name, &before);

    let instances: Api<KuraInstance> = ns.api();
    let first = create_acme(&instances, Duration::from_secs(90)).await;
    let dedicated = first.gateway.clone().expect("a resolved gateway");
    assert_ne!(
        dedicated.ingress_class_name, shared,
        "a cloud region resolves Auto to a dedicated gateway"
    );

    let chart = chart_dir();
    let out = helm(&[
        "upgrade",
        &ns.name,
        chart.to_str().unwrap(),
        "-n",
        &ns.name,
        "--skip-crds",
        "--reuse-values",
        "--set",
        &region("host"),
    ]);
    assert!(out.ok, "helm upgrade: {}", out.stderr);
    let after = rendered_config(&ns.name);
    assert!(after.contains("network: host"), "{after}");
    // The kubelet's part: the mounted file now holds the new data.
    op.set_config(&after);

    let second = wait_applied(
        &instances,
        "acme",
        first.applied_revision.as_deref(),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        second.gateway.map(|g| g.ingress_class_name),
        Some(shared.clone()),
        "the region's shared class now"
    );
    let ingress = ns.api::<Ingress>().get("acme").await.unwrap();
    assert_eq!(
        ingress.spec.unwrap().ingress_class_name.as_deref(),
        Some(shared.as_str())
    );
    assert!(
        op.log().contains("operator configuration changed"),
        "{}",
        op.log()
    );
    let _ = classes.delete(&shared, &Default::default()).await;
}
