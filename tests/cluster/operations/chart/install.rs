//! `helm install` into a namespace that enforces the `restricted` Pod Security
//! profile. No kubelet runs, but the ReplicaSet controller's pod creation goes
//! through PodSecurity admission: a pod that exists was admitted; a violation
//! shows as a ReplicaFailure condition (FailedCreate) and no pod.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::*;

const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

/// The ReplicaSet the Deployment controller made for the release's Deployment.
async fn replica_set_of(ns: &TestNamespace, deployment: &str) -> ReplicaSet {
    let uid = ns
        .api::<Deployment>()
        .get(deployment)
        .await
        .expect("the chart's Deployment")
        .metadata
        .uid
        .unwrap();
    let replica_sets: Api<ReplicaSet> = ns.api();
    wait_owned(
        "the Deployment's ReplicaSet",
        Duration::from_secs(60),
        &replica_sets,
        &uid,
    )
    .await
}

fn replica_failure(rs: &ReplicaSet) -> Option<String> {
    rs.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
}

async fn pods_of(ns: &TestNamespace, rs: &ReplicaSet) -> Vec<Pod> {
    let uid = rs.metadata.uid.clone().unwrap();
    ns.api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
        })
        .collect()
}

#[tokio::test]
async fn helm_install_pods_pass_restricted_pod_security() {
    let ns = TestNamespace::with_labels("chart-psa", &[RESTRICTED]).await;
    // Two replicas: the PodDisruptionBudget and the leader-election Role install too.
    let release = Release::install(&ns.name, &ns.name, &["--set", "replicas=2"]);
    let deployment = format!("{}-kura-operator", ns.name);
    let rs = replica_set_of(&ns, &deployment).await;

    let api: Api<ReplicaSet> = ns.api();
    let name = rs.metadata.name.clone().unwrap();
    let pods = wait_for(
        "the ReplicaSet to create both pods (admitted by PodSecurity restricted)",
        Duration::from_secs(60),
        || async {
            let rs = api.get(&name).await.ok()?;
            if let Some(failure) = replica_failure(&rs) {
                panic!("PodSecurity rejected the chart's pod: {failure}");
            }
            let pods = pods_of(&ns, &rs).await;
            (pods.len() == 2).then_some(pods)
        },
    )
    .await;
    for pod in &pods {
        let spec = pod.spec.as_ref().unwrap();
        let psc = spec.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(65532));
        // The token the operator needs was mounted (automountServiceAccountToken).
        let mounts = spec.containers[0].volume_mounts.iter().flatten();
        assert!(
            mounts
                .into_iter()
                .any(|m| m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount"),
            "no service account token mounted"
        );
    }

    // Uninstall removes the cluster-scoped objects too.
    let out = release.uninstall();
    assert!(out.ok, "helm uninstall: {}", out.stderr);
    let left = kubectl_run(
        &[
            "get",
            "clusterrole,clusterrolebinding",
            "-l",
            &format!("app.kubernetes.io/instance={}", ns.name),
            "-o",
            "name",
        ],
        None,
    );
    assert!(
        left.ok && left.stdout.trim().is_empty(),
        "left behind: {}{}",
        left.stdout,
        left.stderr
    );
}

/// The negative control: the same install with a value that breaks the
/// profile produces no pod, and the reason names PodSecurity.
#[tokio::test]
async fn profile_breaking_values_produce_replica_failure_not_pods() {
    let ns = TestNamespace::with_labels("chart-psa-bad", &[RESTRICTED]).await;
    let _release = Release::install(
        &ns.name,
        &ns.name,
        &[
            "--set",
            "containerSecurityContext.allowPrivilegeEscalation=true",
        ],
    );
    let deployment = format!("{}-kura-operator", ns.name);
    let rs = replica_set_of(&ns, &deployment).await;

    let api: Api<ReplicaSet> = ns.api();
    let name = rs.metadata.name.clone().unwrap();
    let (rs, failure) = wait_for(
        "a ReplicaFailure condition on the ReplicaSet",
        Duration::from_secs(60),
        || async {
            let rs = api.get(&name).await.ok()?;
            let failure = replica_failure(&rs)?;
            Some((rs, failure))
        },
    )
    .await;
    assert!(
        failure.starts_with("FailedCreate") && failure.contains("violates PodSecurity"),
        "{failure}"
    );
    assert!(failure.contains("allowPrivilegeEscalation"), "{failure}");
    assert!(pods_of(&ns, &rs).await.is_empty(), "a violating pod exists");
}

/// NOTES.txt as `helm install` prints it, from a server-side dry run in
/// `ns` (the cluster is asked who manages the CRDs), and the manifests.
fn dry_run_install(ns: &str, extra: &[&str]) -> (String, String) {
    let chart = chart_dir();
    let mut args = vec![
        "install",
        ns,
        chart.to_str().unwrap(),
        "-n",
        ns,
        "--dry-run=server",
    ];
    args.extend_from_slice(extra);
    let out = helm(&args);
    assert!(out.ok, "helm {args:?}: {}", out.stderr);
    let (manifests, notes) = out
        .stdout
        .split_once("\nNOTES:\n")
        .unwrap_or_else(|| panic!("no NOTES in {}", out.stdout));
    (manifests.to_string(), notes.to_string())
}

/// CRDs that exist and are not the release's (here applied with kubectl, as
/// this suite does; elsewhere another release's, in namespaced mode) are left
/// alone: the install renders none, so it neither fails on them nor takes
/// them over. NOTES.txt says so, what was installed, warns of the chart's
/// example regions, and prints the commands to follow the fleet.
#[tokio::test]
async fn crds_managed_elsewhere_are_left_alone_and_the_notes_say_what_was_installed() {
    let ns = TestNamespace::new("chart-notes").await;
    let (manifests, notes) = dry_run_install(&ns.name, &[]);
    assert!(
        !manifests.contains("kind: CustomResourceDefinition"),
        "{manifests}"
    );
    let release = format!("release {0} in namespace {0}", ns.name);
    for needle in [
        release.as_str(),
        "kurainstances.kura.dev: NOT installed or upgraded by this release: it exists and is managed by no Helm release.",
        "kuragateways.kura.dev: NOT installed or upgraded by this release: it exists and is managed by no Helm release.",
        "kura-operator crd | kubectl apply --server-side -f -",
        "Shards: 1",
        "WARNING: the chart's example region configuration is in force",
        "kura.example.com",
        "kubectl get kurainstances -A",
        "kura-operator rollout status -A",
    ] {
        assert!(notes.contains(needle), "{needle:?} in:\n{notes}");
    }

    let set = format!(
        "crds.enabled=false,shards=2,replicas=3,watchNamespace={}",
        ns.name
    );
    let (_, notes) = dry_run_install(
        &ns.name,
        &[
            "--set",
            &set,
            "--set",
            "config.regions.eu-west-1.domain=kura.acme.io",
        ],
    );
    let scoped = format!("-n {}", ns.name);
    for needle in [
        "not installed by this release (crds.enabled=false)",
        "Shards: 2, shared by 3 replica(s)",
        "(namespaced mode)",
        &format!("kubectl get kurainstances {scoped}"),
        &format!("kura-operator rollout status {scoped}"),
    ] {
        assert!(notes.contains(needle), "{needle:?} in:\n{notes}");
    }
    assert!(!notes.contains("WARNING"), "no example domain: {notes}");
}
