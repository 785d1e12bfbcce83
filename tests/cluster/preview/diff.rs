//! `kura-operator diff` against the real control plane: on a converged fleet it
//! exits 0; after a configuration edit it lists exactly what the operator then
//! writes (the audit log says what it wrote); it runs as an identity that may
//! only read; `--show-diff` shows the changed field and nothing of another
//! manager's.

mod fleet;
mod rbac;
mod show;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `kura-operator diff ARGS` with `kubeconfig`: exit code, stdout, stderr.
/// `kura-operator diff`. With `-n NS`, as an operator watching only `NS`
/// previews (the tests' operators run namespaced: `operator::Operator`).
pub fn diff(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let watched = args
        .iter()
        .position(|a| *a == "-n")
        .and_then(|at| args.get(at + 1));
    let mut args = args.to_vec();
    if let Some(ns) = watched {
        args.extend(["--watch-namespace", ns]);
    }
    diff_raw(kubeconfig, &args)
}

/// `kura-operator diff` with `args` as given: as an operator watching every
/// namespace previews, unless they say otherwise.
pub fn diff_raw(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kura-operator"));
    cmd.arg("diff").args(args);
    let out = cmd
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KURA_CONFIG")
        .output()
        .expect("run kura-operator diff");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}
