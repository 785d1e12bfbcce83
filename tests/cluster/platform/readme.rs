//! The READMEs' commands work as printed. Every command of the fenced `sh`
//! blocks of README.md, then of charts/kura-operator/README.md, runs in order
//! in one fresh shell: a clean environment (no KUBECONFIG, nothing of this
//! checkout or of the control plane's cache on PATH), from the checkout's root,
//! as a newcomer would type them one after the other. The control plane they
//! start is one of the test's own, so that the demo's operator (which watches
//! every namespace) stays out of the other tests' way. Where this host can run
//! a node (root), the demo is the README's default, the operator in its pod on
//! a real node; elsewhere it is the demo without a node (`KURA_DEMO_NODE=0`).
//!
//! A few commands cannot run inside this suite; they are listed below with the
//! reason, and a listed command no README prints any more fails the test, so
//! the list cannot go stale.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::operator::free_port;
use crate::platform::node::{NODE_LOCK, node_env, node_unsupported};
use crate::support::{PrivatePlane, repo};

const READMES: &[&str] = &["README.md", "charts/kura-operator/README.md"];

/// Commands that are not run here, and why.
const NOT_RUN: &[(&str, &str)] = &[
    ("scripts/dev.sh test", "runs this very suite"),
    (
        "scripts/bench-scale.sh",
        "the N=1000 benchmark takes most of an hour; crates/kura-bench/tests/smoke.rs runs it at N=5",
    ),
    (
        "cargo test --test cluster chart",
        "runs tests of this suite (the chart's)",
    ),
    (
        r#"kubectl -n NAMESPACE patch kuragateway NAME --type=json -p '[{"op": "remove", "path": "/metadata/finalizers"}]'"#,
        "a recovery step for a gateway of an earlier release, with placeholders; \
         tests/cluster/gateways/migration.rs covers what the operator does instead",
    ),
];

/// The commands of a Markdown file's fenced `sh` blocks: one per line, a
/// trailing backslash continuing it; blank and comment lines dropped.
pub fn sh_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in markdown.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (in_sh, fence) {
            (false, Some(lang)) => in_sh = lang.trim() == "sh",
            (false, None) => {}
            (true, Some(_)) => in_sh = false,
            (true, None) => {
                let line = line.trim();
                if pending.is_empty() && (line.is_empty() || line.starts_with('#')) {
                    continue;
                }
                match line.strip_suffix('\\') {
                    Some(head) => {
                        pending.push_str(head);
                    }
                    None => {
                        pending.push_str(line);
                        commands.push(std::mem::take(&mut pending));
                    }
                }
            }
        }
    }
    commands
}

#[test]
fn sh_commands_are_read_as_a_shell_reads_them() {
    let text = "intro\n```sh\n# a comment\nfirst --a \\\n  --b\n\nsecond # trailing\n```\n\
                ```\nnot sh\n```\n```yaml\nkey: value\n```\n```sh\nthird\n```\n";
    assert_eq!(
        sh_commands(text),
        ["first --a --b", "second # trailing", "third"]
    );
}

/// PATH without this checkout's build output (`bin_dir`) and the plane's
/// cached tools: what a fresh login shell has.
fn fresh_path(bin_dir: &Path) -> String {
    let cache_bin = crate::support::tool("kubectl")
        .parent()
        .unwrap()
        .to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|p| p != bin_dir && *p != cache_bin)
        .collect();
    std::env::join_paths(kept)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

#[test]
fn readme_commands_work_as_printed_in_a_fresh_shell() {
    let mut commands = Vec::new();
    for readme in READMES {
        let text = std::fs::read_to_string(repo().join(readme)).unwrap();
        commands.extend(sh_commands(&text).into_iter().map(|c| (*readme, c)));
    }
    for (skipped, why) in NOT_RUN {
        assert!(
            commands.iter().any(|(_, c)| c == skipped),
            "{skipped:?} is listed as not run ({why}) but no README prints it"
        );
    }

    // One shell runs them all in order; the first failure ends it, named.
    let mut script = String::from("exec 2>&1\nset -u\n");
    let mut run = Vec::new();
    for (i, (readme, command)) in commands.iter().enumerate() {
        if NOT_RUN.iter().any(|(c, _)| c == command) {
            continue;
        }
        run.push(command.clone());
        // `diff` exits 1 when it finds changes, as `kubectl diff` does: an answer.
        let worked = if command.starts_with("kura-operator diff") {
            "[ $rc -le 1 ]"
        } else {
            "[ $rc = 0 ]"
        };
        script.push_str(&format!(
            "printf '\\n>>> %s: %s\\n' '{readme}' {quoted}\n{command}\n\
             rc=$?; if ! {worked}; then echo \"<<< command {i} failed with exit code $rc\"; exit 1; fi\n",
            quoted = shell_quote(command),
        ));
    }
    eprintln!("running {} README commands: {run:#?}", run.len());

    // One node per machine: the node tests' turn, bridge and ranges.
    let node = node_unsupported().is_none();
    let _turn = node.then(|| NODE_LOCK.blocking_lock());
    let plane = PrivatePlane::with_env("readme", 2, if node { node_env() } else { Vec::new() });
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_kura-operator"));
    let built_by_the_tests = inode(&operator);
    let mut shell = Command::new("bash");
    shell
        .arg("-c")
        .arg(&script)
        .current_dir(repo())
        .env_clear()
        .env("PATH", fresh_path(operator.parent().unwrap()))
        // The demo stops its operator once every instance is Ready (tests only;
        // otherwise it runs until Ctrl-C), and serves metrics on a free port.
        .env("KURA_DEMO_EXIT", "1")
        .env("KURA_METRICS_ADDR", format!("127.0.0.1:{}", free_port()))
        // The plane of the test's own (state and ports).
        .envs(plane.env().iter().map(|(k, v)| (*k, v.as_str())));
    if !node {
        shell.env("KURA_DEMO_NODE", "0");
    }
    // The machine's own settings: a home, the toolchain and where caches live.
    for var in [
        "HOME",
        "USER",
        "LANG",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        // The build settings the tests' own build used: without them the
        // demo's `cargo build` is another build and replaces the binary.
        "CARGO_INCREMENTAL",
        "CARGO_PROFILE_DEV_DEBUG",
        "GOPATH",
        "GOCACHE",
        "GOMODCACHE",
        "XDG_CACHE_HOME",
        "KURA_CACHE_DIR",
    ] {
        if let Some(v) = std::env::var_os(var) {
            shell.env(var, v);
        }
    }
    let out = shell.output().expect("run bash");
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "README commands failed:\n{log}");
    eprintln!("{log}");

    // The demo runs the operator binary the tests built: its build found it
    // up to date (another build of it, or another binary, is another file).
    assert_eq!(
        inode(&operator),
        built_by_the_tests,
        "the demo's build replaced the operator binary the tests built ({}):\n{log}",
        operator.display()
    );
}

/// `s` as one single-quoted shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
