//! Start-up against a real apiserver on which the CRDs are not installed: one
//! line naming the missing CRD, and a non-zero exit.
//!
//! The shared plane's CRDs cannot be removed (every other test uses them), so
//! this starts a second kube-apiserver — the same binary, certificates and
//! tokens — on the plane's etcd under an etcd prefix of its own, where no CRD
//! was ever created. The prefix is fixed, so runs reuse its few keys.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;
use crate::operator::{config, free_port};

/// Kills the second apiserver, also when the test fails.
pub(super) struct Apiserver(pub(super) Child);

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_apiserver_without_crds(port: u16, log: &std::path::Path) -> Apiserver {
    start_second_apiserver(port, log, "/kura-ops-test-no-crds", &[])
}

/// A second kube-apiserver on the plane's etcd under `etcd_prefix` (the
/// plane's own, `/registry`, to serve the same objects as the plane: two
/// apiservers of one cluster), with `extra` flags.
pub(super) fn start_second_apiserver(
    port: u16,
    log: &std::path::Path,
    etcd_prefix: &str,
    extra: &[&str],
) -> Apiserver {
    let state = kubeconfig_path().parent().unwrap().to_path_buf();
    let pki = |f: &str| state.join("pki").join(f);
    // scripts/control-plane.sh's etcd address.
    let etcd_port = std::env::var("KURA_ETCD_PORT").unwrap_or_else(|_| "23790".into());
    let child = Command::new(tool("kube-apiserver"))
        .args(["--etcd-servers", &format!("http://127.0.0.1:{etcd_port}")])
        .args(["--etcd-prefix", etcd_prefix])
        .args([
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
        ])
        .args(["--secure-port", &port.to_string()])
        .args(["--endpoint-reconciler-type", "none"])
        .arg("--tls-cert-file")
        .arg(pki("apiserver.crt"))
        .arg("--tls-private-key-file")
        .arg(pki("apiserver.key"))
        .arg("--client-ca-file")
        .arg(pki("ca.crt"))
        .arg("--token-auth-file")
        .arg(pki("tokens.csv"))
        .args(["--authorization-mode", "RBAC"])
        .args(["--service-account-issuer", "https://kubernetes.default.svc"])
        .arg("--service-account-key-file")
        .arg(pki("sa.pub"))
        .arg("--service-account-signing-key-file")
        .arg(pki("sa.key"))
        .args(["--service-cluster-ip-range", "10.96.0.0/16"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start a second kube-apiserver");
    Apiserver(child)
}

/// Until the second apiserver answers `/readyz`.
pub(super) async fn wait_ready(
    apiserver: &mut Apiserver,
    kubeconfig: &std::path::Path,
    log: &std::path::Path,
) {
    wait_for(
        "the second apiserver to be ready",
        Duration::from_secs(120),
        || {
            assert!(
                apiserver.0.try_wait().unwrap().is_none(),
                "the second apiserver exited: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            let ready = Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["get", "--raw", "/readyz"])
                .output()
                .is_ok_and(|o| o.status.success());
            async move { ready.then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn missing_crds_fail_start_up_in_one_line() {
    let dir = scratch_dir("no-crds");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let log = dir.join("kube-apiserver.log");
    let mut apiserver = start_apiserver_without_crds(port, &log);
    let kubeconfig = kubeconfig_for(&dir, &format!("https://127.0.0.1:{port}"));
    wait_ready(&mut apiserver, &kubeconfig, &log).await;

    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config("no-crds", "host", "example.com/none")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--config"])
        .arg(&config_path)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .expect("run kura-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(
        stderr.contains("CRD kurainstances.kura.dev is not installed"),
        "{stderr}"
    );
}
