//! Start-up failures of `kura-operator run`, with the real binary: each is one
//! line on stderr naming the problem, and a non-zero exit. None of these needs
//! a cluster: the configuration is checked before the kubeconfig is used, the
//! kubeconfig before the network. (A cluster without the CRDs is covered in
//! tests/cluster/operations/startup.rs.)

// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![allow(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::Command;

const GOOD_CONFIG: &str = include_str!("../examples/config.yaml");

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kura-startup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Scratch {
    /// `run --config CONFIG [--kubeconfig KUBECONFIG] EXTRA...`, failing (see [`fails`]).
    fn run_fails(&self, config: &Path, kubeconfig: Option<&Path>, extra: &[&str]) -> String {
        let mut args = vec!["--config", config.to_str().unwrap()];
        if let Some(kc) = kubeconfig {
            args.extend(["--kubeconfig", kc.to_str().unwrap()]);
        }
        args.extend(extra);
        fails(&self.0, &args)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `kura-operator run ARGS` with no cluster configuration in the
/// environment (HOME is the scratch directory, so no ~/.kube/config either);
/// returns stderr after asserting a failing exit and exactly one line.
fn fails(home: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .arg("run")
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("run kura-operator");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "stderr must be one line: {stderr:?}"
    );
    assert!(stderr.starts_with("kura-operator: "), "{stderr}");
    stderr
}

/// A kubeconfig for an apiserver that is not there (nothing listens on port 1).
fn unreachable_kubeconfig(s: &Scratch) -> PathBuf {
    s.file(
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
         users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
}

#[test]
fn no_cluster_configuration_is_one_line() {
    let s = Scratch::new("nokube");
    let config = s.file("config.yaml", GOOD_CONFIG);
    let err = s.run_fails(&config, None, &[]);
    assert!(err.contains("no cluster configuration"), "{err}");
}

#[test]
fn missing_kubeconfig_file_is_named() {
    let s = Scratch::new("kcmissing");
    let config = s.file("config.yaml", GOOD_CONFIG);
    let kc = s.0.join("absent-kubeconfig");
    let err = s.run_fails(&config, Some(&kc), &[]);
    assert!(
        err.contains(&format!("kubeconfig {}", kc.display())),
        "{err}"
    );
}

#[test]
fn unparsable_kubeconfig_is_one_line() {
    // The YAML parser's message spans several lines (a source snippet).
    let s = Scratch::new("kcbad");
    let config = s.file("config.yaml", GOOD_CONFIG);
    let kc = s.file("kubeconfig", "clusters: [\n");
    let err = s.run_fails(&config, Some(&kc), &[]);
    assert!(err.contains("kubeconfig") && err.contains("parse"), "{err}");
}

#[test]
fn missing_config_file_is_named() {
    let s = Scratch::new("cfgmissing");
    let err = fails(&s.0, &["--config", "/nonexistent/kura/config.yaml"]);
    assert!(
        err.contains("operator config /nonexistent/kura/config.yaml: cannot read"),
        "{err}"
    );
}

#[test]
fn unreachable_apiserver_is_one_line() {
    // kube logs failed connections itself; logging starts after the checks.
    let s = Scratch::new("unreachable");
    let config = s.file("config.yaml", GOOD_CONFIG);
    let kc = unreachable_kubeconfig(&s);
    let err = s.run_fails(&config, Some(&kc), &["--metrics-addr", "127.0.0.1:0"]);
    assert!(err.contains("cannot reach the apiserver"), "{err}");
}

#[test]
fn metrics_address_in_use_is_named() {
    let s = Scratch::new("addrinuse");
    let config = s.file("config.yaml", GOOD_CONFIG);
    let kc = unreachable_kubeconfig(&s);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = s.run_fails(&config, Some(&kc), &["--metrics-addr", &addr]);
    assert!(err.contains(&format!("--metrics-addr {addr}")), "{err}");
}

const REGION: &str =
    "regions:\n  r1:\n    network: cloud\n    sharedIngressClass: shared\n    domain: kura.test\n";

/// Malformed operator configurations: each fails start-up naming what is wrong.
#[test]
fn malformed_configs_each_fail_naming_the_field() {
    let gateway = |replicas: &str| {
        format!(
            "gateway:\n  image: gw:1\n  controller: example.com/gw\n  replicas: {replicas}\n{REGION}"
        )
    };
    let region_with = |line: &str| format!("{REGION}    {line}\n");
    let corpus: Vec<(&str, String, &str)> = vec![
        (
            "unknown top-level field",
            format!("{REGION}regoins: {{}}\n"),
            "unknown field `regoins`",
        ),
        (
            "unknown region field",
            region_with("sharedIngresClass: x"),
            "regions.r1: unknown field `sharedIngresClass`",
        ),
        (
            "bad region name",
            REGION.replace("r1:", "Bad_Region:"),
            "regions.Bad_Region: region name must be a DNS label",
        ),
        (
            "wrong network",
            REGION.replace("cloud", "clod"),
            "regions.r1.network: unknown variant `clod`",
        ),
        (
            "missing regions",
            "gateway:\n  image: gw:1\n  controller: example.com/gw\n  replicas: 1\n".into(),
            "missing field `regions`",
        ),
        (
            "no region at all",
            "regions: {}\n".into(),
            "regions: at least one region is required",
        ),
        (
            "bad YAML",
            "regions:\n  r1: {network: cloud\n".into(),
            "line 3 column 1",
        ),
        ("empty file", String::new(), "missing field `regions`"),
        (
            "bad sharedIngressClass",
            REGION.replace("shared\n", "Not_A_Class\n"),
            "regions.r1.sharedIngressClass: must be a DNS subdomain",
        ),
        (
            "missing sharedIngressClass",
            REGION.replace("    sharedIngressClass: shared\n", ""),
            "regions.r1: missing field `sharedIngressClass`",
        ),
        (
            "bad domain",
            REGION.replace("kura.test", "-kura"),
            "regions.r1.domain",
        ),
        (
            "gateway.replicas zero",
            gateway("0"),
            "gateway.replicas: must be between 1 and 8",
        ),
        (
            "gateway.replicas too many",
            gateway("9"),
            "gateway.replicas: must be between 1 and 8",
        ),
        (
            "gateway.replicas not a number",
            gateway("two"),
            "gateway.replicas: invalid type",
        ),
        (
            "gateway.controller without a domain",
            gateway("1").replace("example.com/gw", "gw"),
            "gateway.controller",
        ),
        (
            "bad default CPU",
            region_with("defaultResources: {requests: {cpu: lots}}"),
            "regions.r1.defaultResources.requests.cpu",
        ),
    ];
    assert!(corpus.len() >= 8);
    let s = Scratch::new("corpus");
    for (what, yaml, expected) in &corpus {
        let config = s.file("config.yaml", yaml);
        let err = s.run_fails(&config, None, &[]);
        assert!(
            err.contains(&format!("operator config {}: ", config.display())),
            "{what}: names the file: {err}"
        );
        assert!(
            err.contains(expected),
            "{what}: expected {expected:?} in {err}"
        );
    }
}
