//! The image recipe, checked without a Docker engine: the Dockerfile's build
//! step is the very command CI runs (scripts/release-build.sh), and the runtime
//! stage is a nonroot distroless image whose entrypoint is `kura-operator run`.

use std::path::PathBuf;

const RELEASE_BUILD: &str = "cargo build --release --locked --bin kura-operator";

fn read(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lines that are not comments or blank.
fn instructions(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn dockerfile_builds_with_the_release_build_script_command() {
    let script = read("scripts/release-build.sh");
    let script_commands: Vec<&str> = instructions(&script)
        .into_iter()
        .filter(|l| l.starts_with("cargo "))
        .collect();
    assert_eq!(
        script_commands,
        [RELEASE_BUILD],
        "scripts/release-build.sh must run exactly the release build"
    );

    let dockerfile = read("Dockerfile");
    let runs: Vec<&str> = instructions(&dockerfile)
        .into_iter()
        .filter_map(|l| l.strip_prefix("RUN "))
        .collect();
    assert_eq!(
        runs,
        [script_commands[0]],
        "the Dockerfile's only RUN must be scripts/release-build.sh's command"
    );
    assert!(
        read(".ci/run").contains("scripts/release-build.sh"),
        "CI must run the release build"
    );
}

#[test]
fn dockerfile_runtime_stage_is_nonroot_distroless_running_the_operator() {
    let dockerfile = read("Dockerfile");
    let lines = instructions(&dockerfile);
    let froms: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "multi-stage: a builder and a runtime stage");
    assert!(
        froms[0].starts_with("FROM rust:") && froms[0].ends_with(" AS builder"),
        "{}",
        froms[0]
    );
    let runtime_stage = &lines[lines.iter().position(|l| *l == froms[1]).unwrap()..];
    assert!(
        froms[1].starts_with("FROM gcr.io/distroless/") && froms[1].ends_with(":nonroot"),
        "{}",
        froms[1]
    );
    assert!(
        runtime_stage.contains(&"USER 65532:65532"),
        "{runtime_stage:?}"
    );
    assert_eq!(
        runtime_stage.last(),
        Some(&r#"ENTRYPOINT ["/kura-operator", "run"]"#)
    );
    assert!(
        runtime_stage
            .contains(&"COPY --from=builder /src/target/release/kura-operator /kura-operator")
    );
}

#[test]
fn dockerignore_keeps_what_the_build_reads() {
    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = instructions(&ignore)
        .into_iter()
        .map(|l| l.trim_end_matches('/'))
        .collect();
    assert!(
        ignored.contains(&"target"),
        "the build context must not carry target/"
    );
    // Cargo.toml's targets (the bench and the test harness included: cargo
    // checks that their files exist) and the lockfile --locked needs.
    // The workspace's other crates: the core the operator depends on, and the
    // benchmark cargo reads as a member.
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "benches",
        "tests",
        "crates",
    ] {
        assert!(!ignored.contains(&needed), ".dockerignore drops {needed}");
    }
}
