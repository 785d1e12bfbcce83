//! `kura-operator render --explain` speaks the user's words: the values of
//! the spec and the configuration as they were written, never Rust debug forms
//! (`Some("fast")`, `None`, `Cloud`, `Host`).

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README's own command, on the examples.
fn explain_examples() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .current_dir(repo())
        .args([
            "render",
            "-f",
            "examples/instances.yaml",
            "--config",
            "examples/config.yaml",
            "--explain",
        ])
        .output()
        .expect("run kura-operator render");
    assert!(
        out.status.success(),
        "render --explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The explanation: the comment lines after each instance's object hashes.
fn explanation(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|l| l.starts_with("#   ") && !l.contains(" hash "))
        .collect()
}

#[test]
fn explain_prints_no_rust_debug_forms() {
    let output = explain_examples();
    let lines = explanation(&output);
    assert!(
        lines.iter().any(|l| l.contains("resolved gateway")),
        "an explanation for each instance: {output}"
    );
    for line in &lines {
        for debug_form in ["Some(", "None", "\"", "Cloud", "Host"] {
            assert!(
                !line.contains(debug_form),
                "{debug_form:?} in the explanation: {line}"
            );
        }
    }
    // The values as the examples write them.
    for expected in [
        "network=cloud",
        "network=host",
        "class=fast",
        "storageClass=standard",
        "mode=Dedicated",
        "aliases=cache.globex.example.com",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(expected)),
            "{expected} in the explanation:\n{}",
            lines.join("\n")
        );
    }
    // What is not set says so, in words.
    assert!(
        lines.iter().any(|l| l.contains("class=(none)")),
        "an instance without a storage class: {}",
        lines.join("\n")
    );
}
