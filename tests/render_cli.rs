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

/// `render ... | head`: a reader that stops early ends the output quietly,
/// with exit code 0, as `kubectl get ... | head` does. The output (200 copies
/// of the first example, far more than a pipe's 64 KiB buffer) is written
/// after the reader has gone, so a write fails with EPIPE: before the fix,
/// `println!` panicked ("failed printing to stdout", exit code 101).
#[test]
fn a_reader_that_stops_early_ends_the_output_quietly() {
    let examples = std::fs::read_to_string(repo().join("examples/instances.yaml")).unwrap();
    let first = examples.split("\n---\n").next().unwrap();
    let dir = std::env::temp_dir().join(format!("kura-render-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let many: Vec<String> = (0..200)
        .map(|i| first.replace("name: acme-eu", &format!("name: acme-eu-{i}")))
        .collect();
    let file = dir.join("many.yaml");
    std::fs::write(&file, many.join("\n---\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
        .current_dir(repo())
        .args(["render", "-f"])
        .arg(&file)
        .args(["--config", "examples/config.yaml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kura-operator render");
    // The reader goes away before reading anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success() && !stderr.contains("panicked"),
        "status {:?}, stderr: {stderr}",
        out.status
    );
}
