//! The control plane itself is real: controllers run, RBAC and PodSecurity are
//! enforced, the cached tools match the server, and the script is safe to rerun.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn deployment_controller_and_garbage_collector_run() {
    let ns = TestNamespace::new("cp-gc").await;
    let deployments: Api<Deployment> = ns.api();
    let deployment = apply_json(&deployments, "cp-test", json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "namespace": ns.name },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } },
                          "spec": { "containers": [{ "name": "web", "image": "registry.example/web:1" }] } },
        },
    }))
    .await
    .expect("server-side apply of a Deployment");
    let uid = deployment.metadata.uid.clone().unwrap();

    // The Deployment controller (kube-controller-manager) creates a ReplicaSet.
    let replica_sets: Api<ReplicaSet> = ns.api();
    wait_owned(
        "a ReplicaSet owned by the Deployment",
        Duration::from_secs(30),
        &replica_sets,
        &uid,
    )
    .await;

    // The garbage collector removes a ConfigMap whose owner is deleted.
    let config_maps: Api<ConfigMap> = ns.api();
    let owned: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "owned", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": uid }] },
        "data": { "k": "v" },
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &owned)
        .await
        .unwrap();
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    wait_gone(
        "the owned ConfigMap to be garbage-collected",
        Duration::from_secs(60),
        &config_maps,
        "owned",
    )
    .await;
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts() {
    let ns = TestNamespace::new("cp-rbac").await;
    let sas: Api<ServiceAccount> = ns.api();
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "nobody"}})).unwrap(),
    )
    .await
    .unwrap();
    let as_sa = client_as_service_account(&ns.name, "nobody").await;
    let cms: Api<ConfigMap> = Api::namespaced(as_sa, &ns.name);
    match cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("a ServiceAccount without bindings must get 403, got {other:?}"),
    }

    let roles: Api<Role> = ns.api();
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "read-cm"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = ns.api();
    bindings
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "read-cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-cm"},
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": ns.name}],
        })).unwrap())
        .await
        .unwrap();
    wait_for(
        "the RoleBinding to allow listing",
        Duration::from_secs(30),
        || async { cms.list(&ListParams::default()).await.ok().map(|_| ()) },
    )
    .await;
}

#[tokio::test]
async fn pod_security_admission_rejects_privileged_pods() {
    let ns = TestNamespace::with_labels(
        "cp-psa",
        &[("pod-security.kubernetes.io/enforce", "restricted")],
    )
    .await;
    let pods: Api<Pod> = ns.api();
    let privileged: Pod = serde_json::from_value(json!({
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "registry.example/c:1",
                                  "securityContext": {"privileged": true}}]},
    }))
    .unwrap();
    match pods.create(&PostParams::default(), &privileged).await {
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("violates PodSecurity") => {
        }
        other => panic!("a privileged pod must be rejected by PodSecurity, got {other:?}"),
    }
}

pub(crate) fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("run command");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn cached_tools_match_the_server() {
    let _ = client().await; // the plane is up
    let (ok, helm) = run(Command::new(tool("helm")).arg("version"));
    assert!(ok && helm.contains("v3."), "helm version: {helm}");
    let (ok, version) = run(Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig_path())
        .args(["version", "-o", "json"]));
    assert!(ok, "kubectl version: {version}");
    let v: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(
        v["clientVersion"]["minor"], v["serverVersion"]["minor"],
        "kubectl must match the server's minor version: {v}"
    );
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.36.3");
}

#[tokio::test]
async fn script_is_idempotent_and_reports_crashes() {
    let _ = client().await;
    let script = repo().join("scripts/control-plane.sh");
    let pids = || {
        std::fs::read_to_string(repo().join(".control-plane/kube-apiserver.pid"))
            .unwrap_or_default()
    };
    // A plane run by someone else (KURA_TEST_KUBECONFIG) is not this checkout's to
    // `up`: its state lives elsewhere and `up` here would start a second plane.
    if external_plane() {
        eprintln!("external control plane: the second-`up` check runs where the plane is owned");
    } else {
        let before = pids();
        let (ok, out) = run(Command::new(&script).arg("up"));
        assert!(ok, "a second `up` must succeed: {out}");
        assert!(out.contains("already running"), "{out}");
        assert_eq!(
            before,
            pids(),
            "a second `up` must not restart the apiserver"
        );
    }

    // `down` where nothing runs is a no-op that succeeds.
    let empty = std::env::temp_dir().join(format!("kura-cp-empty-{}", std::process::id()));
    let (ok, out) = run(Command::new(&script)
        .arg("down")
        .env("KURA_CP_STATE", &empty));
    assert!(ok, "`down` with nothing running must succeed: {out}");

    // A component that cannot start is reported with the tail of its log, promptly:
    // etcd whose peer port is taken, then an apiserver whose port is taken.
    for (component, env) in [
        (
            "etcd",
            [
                ("KURA_ETCD_PORT", "23792"),
                ("KURA_ETCD_PEER_PORT", "23800"),
                ("KURA_API_PORT", "16444"),
                // Every port set here: one inherited from the environment
                // could be a running plane's, refused before the one under test.
                ("KURA_KCM_PORT", "24257"),
            ],
        ),
        (
            "kube-apiserver",
            [
                ("KURA_ETCD_PORT", "23793"),
                ("KURA_ETCD_PEER_PORT", "23803"),
                ("KURA_API_PORT", "16443"),
                ("KURA_KCM_PORT", "24258"),
            ],
        ),
    ] {
        let broken =
            std::env::temp_dir().join(format!("kura-cp-broken-{component}-{}", std::process::id()));
        let started = std::time::Instant::now();
        let (ok, out) = run(Command::new(&script)
            .arg("up")
            .env("KURA_CP_STATE", &broken)
            .envs(env));
        let _ = run(Command::new(&script)
            .arg("down")
            .env("KURA_CP_STATE", &broken));
        let _ = std::fs::remove_dir_all(&broken);
        assert!(!ok, "{component} that cannot bind must fail `up`: {out}");
        assert!(
            out.contains(&format!("{component} is not running; last lines")),
            "{out}"
        );
        assert!(
            out.contains("address already in use"),
            "the log tail must show the cause: {out}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{component} failure took {:?}",
            started.elapsed()
        );
    }
}

/// A port another plane holds is refused at `up`, naming it. Otherwise a
/// second plane whose etcd could not bind its client port passed the health
/// check on the first plane's etcd and ran its apiserver on it: its `up`
/// succeeded, and when the first plane went down the second lost its storage
/// mid-test (two checkouts running tests/cluster/faults/plane_faults.rs at once, on
/// the same fixed ports).
#[tokio::test]
async fn up_refuses_an_etcd_port_another_plane_holds() {
    let first = PrivatePlane::up("etcd-owner", 4);
    let second = PrivatePlane::new("etcd-borrower", 5);
    let taken = first
        .env()
        .iter()
        .find(|(k, _)| *k == "KURA_ETCD_PORT")
        .map(|(_, v)| v.clone())
        .unwrap();
    let started = std::time::Instant::now();
    let (ok, out) = run(Command::new(repo().join("scripts/control-plane.sh"))
        .arg("up")
        .envs(second.env().iter().map(|(k, v)| (*k, v.as_str())))
        .env("KURA_ETCD_PORT", &taken));
    assert!(
        !ok,
        "`up` must fail when its etcd port is another plane's: {out}"
    );
    assert!(
        out.contains(&format!("port {taken}")) && out.contains("in use"),
        "names the port: {out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "promptly: {:?}",
        started.elapsed()
    );
    drop(second);
    // The first plane is untouched.
    let nodes = kube::Api::<Namespace>::all(first.client().await)
        .list(&Default::default())
        .await;
    assert!(nodes.is_ok(), "{nodes:?}");
}
