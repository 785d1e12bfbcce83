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
