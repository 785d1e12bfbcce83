//! `kura-operator diff` failures, with the real binary and no cluster: exit
//! code 2 (1 means "changes", as for `kubectl diff`) and one line on stderr
//! naming the problem.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kura-diff-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A kubeconfig for an apiserver that is not there (nothing listens on port 1).
    fn unreachable_kubeconfig(&self) -> PathBuf {
        self.file(
            "kubeconfig",
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
             users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
        )
    }

    /// `kura-operator diff ARGS --kubeconfig <unreachable>` with no other
    /// cluster configuration in the environment; stderr, after asserting exit
    /// code 2 and exactly one line.
    fn fails(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
            .arg("diff")
            .args(args)
            .arg("--kubeconfig")
            .arg(self.unreachable_kubeconfig())
            .env_clear()
            .env("HOME", &self.0)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("run kura-operator diff");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "exit code; stderr: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
        assert!(stderr.starts_with("kura-operator: "), "{stderr}");
        assert!(out.stdout.is_empty(), "no report on an error");
        stderr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(s: &Scratch) -> String {
    let path: &Path = &s.file("config.yaml", include_str!("../examples/config.yaml"));
    path.to_str().unwrap().to_string()
}

#[test]
fn a_missing_configuration_file_is_named() {
    let s = Scratch::new("nocfg");
    let err = s.fails(&["--config", "/nonexistent/kura/config.yaml"]);
    assert!(
        err.contains("operator config /nonexistent/kura/config.yaml: cannot read"),
        "{err}"
    );
}

#[test]
fn an_invalid_configuration_names_its_field() {
    let s = Scratch::new("badcfg");
    let bad = s.file(
        "config.yaml",
        &include_str!("../examples/config.yaml").replace("replicas: 1", "replicas: 0"),
    );
    let err = s.fails(&["--config", bad.to_str().unwrap()]);
    assert!(err.contains("gateway.replicas"), "{err}");
}

#[test]
fn a_config_map_reference_needs_a_namespace_and_a_name() {
    let s = Scratch::new("badref");
    let err = s.fails(&["--config-map", "kura-operator-config"]);
    assert!(err.contains("expected NAMESPACE/NAME"), "{err}");
}

#[test]
fn an_unreachable_apiserver_names_the_read() {
    let s = Scratch::new("unreachable");
    let config = config(&s);
    let err = s.fails(&["-n", "shop", "--config", &config]);
    assert!(
        err.contains("list kurainstances in namespace shop"),
        "{err}"
    );
}
