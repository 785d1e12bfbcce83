//! The core reconciles on the oldest and newest minors: a plane of its own
//! whose kube-apiserver and kube-controller-manager are of that minor
//! (`KURA_K8S_MINOR`, scripts/control-plane.sh; its ports from
//! KURA_PRIVATE_PORT_BASE like every private plane), kura-sim playing the
//! kubelet and the ingress controller as on the shared plane, and the real
//! operator binary: create → Ready, a spec change → the new revision applied,
//! drift repaired, delete → the children collected.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{Operator, Options, instance, wait_ready};
use crate::support::{PrivatePlane, apply_json, create_namespace, create_sim_class, wait_for};
use kura_core::api::{KuraInstance, Phase};

const NS: &str = "versions";
const T: Duration = Duration::from_secs(120);

fn image(sts: &StatefulSet) -> Option<String> {
    sts.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

pub async fn core_reconciles_hold_on(minor: &str, port_offset: u16) {
    let started = Instant::now();
    let plane = PrivatePlane::with_env(
        &format!("k8s-{minor}"),
        port_offset,
        vec![("KURA_K8S_MINOR", minor.to_string())],
    );
    plane.script(&["up"]);
    plane.install_crds();
    let client = plane.client().await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        format!("{}.{}", version.major, version.minor),
        minor,
        "{version:?}"
    );
    create_namespace(&client, NS).await;
    // The region's shared class, served by this plane's kura-sim.
    create_sim_class(&client, &format!("shared-{NS}")).await;
    let options = Options {
        kubeconfig: Some(plane.kubeconfig()),
        replica: Some(format!("k8s-{minor}")),
        ..Options::default()
    };
    let op = Operator::start_in(NS, options);
    let instances: Api<KuraInstance> = Api::namespaced(client.clone(), NS);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);

    // Create → Ready (the StatefulSet controller of this minor, pods Ready
    // through kura-sim).
    let body = instance("acme", "registry.example/kura:1.0.0");
    apply_json(&instances, "test", body).await.unwrap();
    let first = wait_ready(&instances, "acme").await;
    let first_revision = first.applied_revision.clone().expect("an applied revision");
    eprintln!("versions: {minor}: Ready after {:?}", started.elapsed());

    // A spec change → a new revision, applied and Ready.
    let body = instance("acme", "registry.example/kura:1.1.0");
    apply_json(&instances, "test", body).await.unwrap();
    wait_for(
        &format!("{minor}: the new revision applied and Ready"),
        T,
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let applied = s.applied_revision?;
            (s.phase == Some(Phase::Ready)
                && applied != first_revision
                && Some(&applied) == s.desired_revision.as_ref())
            .then_some(())
        },
    )
    .await;
    let live = sts.get("acme").await.unwrap();
    assert_eq!(image(&live).as_deref(), Some("registry.example/kura:1.1.0"));

    // Drift: a deleted child comes back, an edited field is taken back.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let old_uid = cms.get("acme-config").await.unwrap().metadata.uid;
    cms.delete("acme-config", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(&format!("{minor}: the ConfigMap recreated"), T, || async {
        let cm = cms.get_opt("acme-config").await.ok()??;
        (cm.metadata.uid != old_uid).then_some(())
    })
    .await;
    let edit = json!({"spec": {"replicas": 3}});
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..Default::default()
    };
    sts.patch("acme", &intruder, &Patch::Merge(&edit))
        .await
        .unwrap();
    wait_for(&format!("{minor}: spec.replicas restored"), T, || async {
        let replicas = sts.get("acme").await.ok()?.spec?.replicas;
        (replicas == Some(1)).then_some(())
    })
    .await;

    // Delete → the instance goes and its children with it (owner
    // references, this minor's garbage collector).
    instances
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &format!("{minor}: the instance and its children gone"),
        T,
        || async {
            let gone = instances.get_opt("acme").await.ok()?.is_none()
                && sts.get_opt("acme").await.ok()?.is_none()
                && cms.get_opt("acme-config").await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    drop(op);
    eprintln!(
        "versions: {minor}: core reconciles passed in {:?} (plane start included)",
        started.elapsed()
    );
}
