//! scripts/images.sh builds the operator image without a Docker engine; the
//! Dockerfile's final stage stays the reference (what users build with Docker).
//! Checked without either: the image script's binary path, numeric user and
//! entrypoint must be the Dockerfile's, or an image from one would run
//! differently from the other (a chart's runAsNonRoot check, a probe of a
//! command that is not there). Without this test the two could drift silently.

use std::path::PathBuf;

fn read(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The instructions of the Dockerfile's last stage (after its last FROM).
fn final_stage(dockerfile: &str) -> Vec<String> {
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    lines[from + 1..].iter().map(|l| l.to_string()).collect()
}

/// `NAME=VALUE` at the start of a line of the script, without shell quotes.
fn script_var(script: &str, name: &str) -> String {
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("scripts/images.sh sets no {name}"));
    line.trim_matches('\'').trim_matches('"').to_string()
}

#[test]
fn image_script_matches_the_dockerfile_final_stage() {
    let stage = final_stage(&read("Dockerfile"));
    let script = read("scripts/images.sh");

    let copy = stage
        .iter()
        .find_map(|l| l.strip_prefix("COPY --from=builder "))
        .expect("the final stage copies the binary from the builder");
    let (source, dest) = copy.split_once(' ').expect("COPY SRC DEST");
    assert!(source.ends_with("/release/kura-operator"), "{source}");
    assert_eq!(script_var(&script, "operator_binary"), dest, "binary path");

    let user = stage
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER");
    assert_eq!(script_var(&script, "operator_user"), user, "user");
    assert!(
        user.split(':').all(|p| p.parse::<u32>().is_ok()),
        "numeric, so runAsNonRoot can verify it: {user}"
    );

    let entrypoint: Vec<String> = serde_json::from_str(
        stage
            .iter()
            .find_map(|l| l.strip_prefix("ENTRYPOINT "))
            .expect("ENTRYPOINT"),
    )
    .expect("exec form");
    let scripted: Vec<String> =
        serde_json::from_str(&script_var(&script, "operator_entrypoint")).expect("a JSON array");
    assert_eq!(scripted, entrypoint, "entrypoint");
    assert_eq!(entrypoint, [dest, "run"], "the binary, `run`");

    // The variables are what the script actually writes into the image.
    for used in [
        r#"-user "$operator_user""#,
        r#"-entrypoint "$operator_entrypoint""#,
        r#"=$operator_binary:0755"#,
    ] {
        assert!(script.contains(used), "scripts/images.sh must pass {used}");
    }
}
