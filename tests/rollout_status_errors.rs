//! `kura-operator rollout status` failures, with the real binary and no
//! cluster: exit code 3 (0 to 2 are its answers), the problem named on stderr,
//! nothing on stdout.

use std::path::PathBuf;
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kura-rollout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `kura-operator rollout status ARGS` with no cluster configuration in the
/// environment.
fn run(home: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .args(["rollout", "status"])
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("run kura-operator rollout status")
}

fn fails_with_3(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "exit code; stderr: {stderr}");
    assert!(out.stdout.is_empty(), "no report on an error");
    stderr
}

#[test]
fn usage_errors_exit_3_naming_the_flag() {
    let home = scratch("usage");
    let stderr = fails_with_3(&run(&home, &["--watch", "--timeout", "soon"]));
    assert!(
        stderr.contains("--timeout") && stderr.contains("soon"),
        "{stderr}"
    );
    let stderr = fails_with_3(&run(&home, &["-n", "a", "-A"]));
    assert!(stderr.contains("--all-namespaces"), "{stderr}");
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn a_missing_kubeconfig_exits_3_in_one_line_naming_it() {
    let home = scratch("kubeconfig");
    let missing = home.join("no-such-kubeconfig");
    let stderr = fails_with_3(&run(
        &home,
        &["--kubeconfig", missing.to_str().unwrap(), "--watch"],
    ));
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(
        stderr.starts_with("kura-operator: ") && stderr.contains("no-such-kubeconfig"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(home);
}
