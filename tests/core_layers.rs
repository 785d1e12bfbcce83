//! The layers the compiler checks: `kura-core` (types, configuration,
//! validation, rendering, the plan and the budget's and host claims' rules)
//! depends on no Kubernetes client and no async runtime, so nothing in it can
//! reach the apiserver or wait on one. Read from `cargo tree`.

use std::process::Command;

/// Crates that mean a client, a runtime or a transport.
const BANNED: [&str; 7] = [
    "kube-client",
    "kube-runtime",
    "hyper",
    "tokio",
    "tower",
    "rustls",
    "futures",
];

/// The names of every crate `package` depends on (normal dependencies, the
/// whole tree), from `cargo tree`.
fn dependencies(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn banned_in(package: &str) -> Vec<String> {
    let mut found: Vec<String> = dependencies(package)
        .into_iter()
        .filter(|name| {
            BANNED
                .iter()
                .any(|b| name == b || name.starts_with(&format!("{b}-")))
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_core_crate_depends_on_no_kubernetes_client_and_no_async_runtime() {
    let found = banned_in("kura-core");
    assert!(
        found.is_empty(),
        "kura-core depends on {found:?}: move what needs them into the operator crate"
    );
}

/// The check sees these crates where they are: the operator's own tree has them.
#[test]
fn the_operator_crate_is_where_the_client_and_runtime_are() {
    let found = banned_in("kura-operator");
    for expected in ["kube-client", "kube-runtime", "tokio", "hyper"] {
        assert!(
            found.iter().any(|f| f == expected),
            "cargo tree -p kura-operator lacks {expected}: the check reads nothing ({found:?})"
        );
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The core is imported by its name where it is used: no module of the
/// operator crate re-exports it (`pub use kura_core::…`), so a path says
/// which crate the code is in (`kura_core::status::compute`, never a local
/// alias for it).
#[test]
fn the_operator_crate_re_exports_nothing_of_the_core() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("pub use kura_core") || code.starts_with("pub(crate) use kura_core")
            {
                found.push(format!("{}:{}: {code}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "re-exports of the core:\n{}",
        found.join("\n")
    );
}
