//! "Only the writer modules write" is a clippy check (`clippy.toml`,
//! `disallowed-methods`; docs/architecture.md, "Who writes"). Clippy proves a
//! planted write fails; what it does not check is kept honest here, with no
//! cluster and no build:
//! - every path in `clippy.toml` names a function of the locked kube (clippy
//!   only warns, even under `-D warnings`, when one does not resolve, and then
//!   checks nothing for it);
//! - every write call of kube's `Api` and every raw request of its `Client` is
//!   in the list (a kube upgrade that adds one fails here);
//! - the files that allow the lint again are exactly those the architecture
//!   document lists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const LINT: &str = "clippy::disallowed_methods";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `path = "..."` of each `disallowed-methods` entry.
fn disallowed() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("clippy.toml")).unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split("path = \"").nth(1))
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect()
}

/// The locked packages (`cargo metadata`, offline), read once.
fn metadata() -> &'static serde_json::Value {
    static METADATA: OnceLock<serde_json::Value> = OnceLock::new();
    METADATA.get_or_init(|| {
        let host = String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
            .expect("rustc -vV names the host");
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .args(["--filter-platform", &host])
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    })
}

/// The source directory of a locked package.
fn package_dir(name: &str) -> PathBuf {
    let manifest = metadata()["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in the lock file"))["manifest_path"]
        .as_str()
        .unwrap()
        .to_string();
    Path::new(&manifest).parent().unwrap().to_path_buf()
}

/// `pub async fn` and `pub fn` names in the `.rs` files of `dir`, each with its
/// signature (up to its body) and whether `cfg(feature = "ws")` gates it (the
/// operator builds kube without `ws`).
fn functions(dir: &Path) -> Vec<(String, String, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let l = line.trim_start();
            let Some(rest) = l
                .strip_prefix("pub async fn ")
                .or(l.strip_prefix("pub fn "))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let signature: String = lines[i..]
                .iter()
                .take_while(|l| !l.trim_end().ends_with('{'))
                .chain(lines[i..].iter().find(|l| l.trim_end().ends_with('{')))
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            let ws = lines[i.saturating_sub(3)..i]
                .iter()
                .any(|l| l.contains("cfg(feature = \"ws\")"));
            found.push((name, signature, ws));
        }
    }
    found
}

#[test]
fn every_disallowed_path_names_a_function_of_the_locked_kube() {
    let client = package_dir("kube-client").join("src");
    let runtime = package_dir("kube-runtime").join("src");
    let api: BTreeSet<String> = functions(&client.join("api"))
        .into_iter()
        .map(|f| f.0)
        .collect();
    let raw: BTreeSet<String> = functions(&client.join("client"))
        .into_iter()
        .map(|f| f.0)
        .collect();
    let events: BTreeSet<String> = functions(&runtime).into_iter().map(|f| f.0).collect();
    let paths = disallowed();
    assert!(!paths.is_empty(), "clippy.toml lists no disallowed methods");
    for path in &paths {
        let (owner, method) = path.rsplit_once("::").unwrap();
        let known = match owner {
            "kube::api::Api" => api.contains(method),
            "kube::Client" => raw.contains(method),
            "kube::runtime::events::Recorder" => events.contains(method),
            other => panic!("{path}: no check for functions of {other}; add one here"),
        };
        assert!(
            known,
            "{path} (clippy.toml) is not a function of the locked kube"
        );
    }
}

#[test]
fn every_write_call_of_kube_is_disallowed() {
    let client = package_dir("kube-client").join("src");
    let paths = disallowed();
    let writes = ["create", "patch", "replace", "delete", "evict"];
    let mut missing = Vec::new();
    for (name, _, ws) in functions(&client.join("api")) {
        if !ws
            && writes.iter().any(|w| name.starts_with(w))
            && !paths.contains(&format!("kube::api::Api::{name}"))
        {
            missing.push(format!("kube::api::Api::{name}"));
        }
    }
    // A raw request can carry any verb.
    for (name, signature, ws) in functions(&client.join("client")) {
        if !ws
            && signature.contains("Request<")
            && signature.contains("&self")
            && !paths.contains(&format!("kube::Client::{name}"))
        {
            missing.push(format!("kube::Client::{name}"));
        }
    }
    if !paths.contains("kube::runtime::events::Recorder::publish") {
        missing.push("kube::runtime::events::Recorder::publish".into());
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "write calls clippy.toml does not disallow: {missing:?}"
    );
}

/// Files under `dir` (recursively) with an attribute that allows the lint.
fn allowing(dir: &Path, found: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            allowing(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            if text
                .lines()
                .any(|l| l.trim_start().starts_with('#') && l.contains(LINT))
            {
                let relative = path.strip_prefix(repo()).unwrap();
                found.insert(relative.to_string_lossy().into_owned());
            }
        }
    }
}

#[test]
fn the_files_allowed_to_write_are_those_the_architecture_lists() {
    let mut allowed = BTreeSet::new();
    for dir in ["src", "crates", "tests", "benches"] {
        allowing(&repo().join(dir), &mut allowed);
    }
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## Who writes\n")
        .nth(1)
        .expect("docs/architecture.md has a section \"Who writes\"")
        .split("\n## ")
        .next()
        .unwrap();
    let listed: BTreeSet<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && s.contains('/'))
        .filter(|s| *s != "tests/write_lint.rs")
        .map(str::to_string)
        .collect();
    assert_eq!(
        allowed, listed,
        "files that allow {LINT} (left) and the files docs/architecture.md, \"Who writes\", lists (right)"
    );
}
