//! The CRDs on the oldest and the newest Kubernetes minors users run, beside
//! the plane's 1.36: a kube-apiserver of each (1.33 and 1.37, built from the
//! Go module k8s.io/kubernetes by `scripts/control-plane.sh apiserver MINOR`,
//! cached) with an etcd of its own. CEL libraries, cost limits and schema rules
//! differ by version, so each must accept `crds/` as it is (a rule using a
//! library newer than the server fails the CRD's create), reject every
//! malformed instance of the admission suite naming the field, and accept the
//! examples. The core reconciles run on each too (`reconcile`), on a plane
//! of that minor with its own controller manager.

mod reconcile;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kura_core::api::KuraInstance;
use serde_json::{Value, json};

use crate::lifecycle::admission::{malformed_rejected, valid};
use crate::operator::free_port;
use crate::support::*;

/// etcd and a kube-apiserver of `minor`, on loopback ports of their own
/// (private plane number `port_offset`: moved by KURA_PRIVATE_PORT_BASE);
/// stopped and removed when dropped.
struct VersionPlane {
    etcd: Child,
    apiserver: Child,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Drop for VersionPlane {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

impl VersionPlane {
    async fn start(minor: &str, port_offset: u16) -> VersionPlane {
        let bin = PathBuf::from(
            run_ok(
                Command::new(repo().join("scripts/control-plane.sh"))
                    .args(["apiserver", minor])
                    .stderr(Stdio::inherit()),
            )
            .trim(),
        );
        let dir = std::env::temp_dir().join(format!("kura-k8s-{minor}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("sa.key");
        run_ok(
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(&key)
                .arg("2048"),
        );
        run_ok(
            Command::new("openssl")
                .args(["rsa", "-pubout", "-in"])
                .arg(&key)
                .arg("-out")
                .arg(dir.join("sa.pub")),
        );
        let token = format!("kura-{}-{}", std::process::id(), free_port());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},kura-admin,kura-admin,\"system:masters\"\n"),
        )
        .unwrap();
        let ports = private_ports(port_offset);
        let port = |var: &str| ports.iter().find(|(k, _)| *k == var).unwrap().1.clone();
        let (client_port, peer_port, api_port) = (
            port("KURA_ETCD_PORT"),
            port("KURA_ETCD_PEER_PORT"),
            port("KURA_API_PORT"),
        );
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let etcd = Command::new(tool("etcd"))
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!(
                "--listen-client-urls=http://127.0.0.1:{client_port}"
            ))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{client_port}"
            ))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
            ))
            .arg(format!(
                "--initial-cluster=default=http://127.0.0.1:{peer_port}"
            ))
            .arg("--unsafe-no-fsync")
            .stdout(Stdio::null())
            .stderr(log("etcd.log"))
            .spawn()
            .expect("start etcd");
        let apiserver = Command::new(bin.join("kube-apiserver"))
            .arg(format!("--etcd-servers=http://127.0.0.1:{client_port}"))
            .arg(format!("--secure-port={api_port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--cert-dir={}", dir.join("certs").display()))
            .arg(format!(
                "--token-auth-file={}",
                dir.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=RBAC")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                dir.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                key.display()
            ))
            .stdout(Stdio::null())
            .stderr(log("kube-apiserver.log"))
            .spawn()
            .expect("start kube-apiserver");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:{api_port}\n    insecure-skip-tls-verify: true\n\
                 users:\n- name: admin\n  user:\n    token: {token}\n\
                 contexts:\n- name: k\n  context: {{cluster: k, user: admin}}\n\
                 current-context: k\n"
            ),
        )
        .unwrap();
        let plane = VersionPlane {
            etcd,
            apiserver,
            dir,
            kubeconfig,
        };
        wait_for(
            &format!("kube-apiserver {minor} to be ready"),
            Duration::from_secs(120),
            || async { plane.kubectl(&["get", "--raw", "/readyz"]).ok() },
        )
        .await;
        plane
    }

    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

async fn crds_and_admission_hold_on(minor: &str, port_offset: u16) {
    let plane = VersionPlane::start(minor, port_offset).await;
    let version = plane
        .kubectl(&["version", "-o", "json"])
        .unwrap_or_else(|e| e);
    assert!(
        version.contains(&format!(
            "\"minor\": \"{}\"",
            minor.trim_start_matches("1.")
        )),
        "{version}"
    );
    let crds = repo().join("crds");
    plane
        .kubectl(&["apply", "--server-side", "-f", crds.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("Kubernetes {minor} refuses crds/: {e}"));
    plane
        .kubectl(&WAIT_CRDS)
        .unwrap_or_else(|e| panic!("Kubernetes {minor}: CRDs not established: {e}"));
    plane.kubectl(&["create", "namespace", "versions"]).unwrap();
    let client = plane.client().await;
    let resource = ApiResource::erase::<KuraInstance>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, "versions", &resource);
    // Established is not yet served: wait until a create goes through.
    wait_for(
        &format!("Kubernetes {minor} to serve kurainstances"),
        Duration::from_secs(60),
        || async {
            let object: DynamicObject = serde_json::from_value(valid("minimal")).unwrap();
            api.create(&PostParams::default(), &object).await.ok()
        },
    )
    .await;
    let failures = malformed_rejected(&api).await;
    assert!(
        failures.is_empty(),
        "Kubernetes {minor}:\n{}",
        failures.join("\n")
    );
    let text = std::fs::read_to_string(repo().join("examples/instances.yaml")).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut body: Value = serde::Deserialize::deserialize(doc).unwrap();
        body["metadata"]["namespace"] = json!("versions");
        let name = body["metadata"]["name"].clone();
        let object: DynamicObject = serde_json::from_value(body).unwrap();
        let result = api.create(&PostParams::default(), &object).await;
        assert!(
            result.is_ok(),
            "Kubernetes {minor}: example {name} rejected: {result:?}"
        );
    }
}

// The version matrix is its own phase (`KURA_CI_VERSIONS=1 .ci/run`, or
// `cargo test --test cluster -- --ignored platform::versions::`): built cold, the two
// apiservers cost more than the rest of the Go builds together.

#[tokio::test]
#[ignore = "version matrix: KURA_CI_VERSIONS=1 .ci/run, or cargo test --test cluster -- --ignored platform::versions::"]
async fn crds_and_admission_hold_on_kubernetes_1_33() {
    crds_and_admission_hold_on("1.33", 11).await;
}

#[tokio::test]
#[ignore = "version matrix: KURA_CI_VERSIONS=1 .ci/run, or cargo test --test cluster -- --ignored platform::versions::"]
async fn crds_and_admission_hold_on_kubernetes_1_37() {
    crds_and_admission_hold_on("1.37", 12).await;
}

#[tokio::test]
#[ignore = "version matrix: KURA_CI_VERSIONS=1 .ci/run, or cargo test --test cluster -- --ignored platform::versions::"]
async fn core_reconciles_hold_on_kubernetes_1_33() {
    reconcile::core_reconciles_hold_on("1.33", 9).await;
}

#[tokio::test]
#[ignore = "version matrix: KURA_CI_VERSIONS=1 .ci/run, or cargo test --test cluster -- --ignored platform::versions::"]
async fn core_reconciles_hold_on_kubernetes_1_37() {
    reconcile::core_reconciles_hold_on("1.37", 10).await;
}
