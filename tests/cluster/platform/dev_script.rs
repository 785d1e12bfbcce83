//! `scripts/dev.sh test` says what becomes of the control plane: it stops the
//! plane it started, also when the checks fail (`KURA_KEEP_PLANE=1` keeps it,
//! and says how to stop it), and leaves a plane that was running before it. A
//! plane with a node (the demo's) it refuses, and says how to stop it.
//!
//! The test plays cargo: a stub on PATH records its arguments, checks that the
//! plane answers while the suite "runs", and exits as it is told. The checks
//! and the suite are not what is under test here; the plane's lifecycle is,
//! on a plane of the test's own.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::{PrivatePlane, repo};

const FAKE_CARGO: &str = r#"#!/usr/bin/env bash
# Plays cargo for tests/cluster/platform/dev_script.rs.
if [ "$1" = test ]; then
  if kubectl get --raw /readyz >/dev/null 2>&1; then echo "test: plane up" >> "$FAKE_CARGO_LOG"
  else echo "test: plane down" >> "$FAKE_CARGO_LOG"; fi
fi
echo "cargo $*" >> "$FAKE_CARGO_LOG"
exit "${FAKE_CARGO_EXIT:-0}"
"#;

#[test]
fn dev_test_stops_the_plane_it_started_and_says_what_it_left() {
    let plane = PrivatePlane::new("devsh", 3);
    let stub = std::env::temp_dir().join(format!("kura-fake-cargo-{}", std::process::id()));
    std::fs::create_dir_all(&stub).unwrap();
    let cargo = stub.join("cargo");
    std::fs::write(&cargo, FAKE_CARGO).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = stub.join("calls.log");
    let path = format!(
        "{}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let dev_test = |env: &[(&str, &str)]| {
        let _ = std::fs::remove_file(&log);
        let out = Command::new(repo().join("scripts/dev.sh"))
            .arg("test")
            .env("PATH", &path)
            .env("FAKE_CARGO_LOG", &log)
            .env_remove("KURA_KEEP_PLANE")
            .envs(plane.env().iter().map(|(k, v)| (*k, v.as_str())))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        (out.status.success(), text, calls)
    };
    let running = || {
        Command::new(repo().join("scripts/control-plane.sh"))
            .arg("status")
            .envs(plane.env().iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(!running(), "the test's plane does not run yet");

    // Nothing ran before: the plane is started for the suite, then stopped.
    let (ok, out, calls) = dev_test(&[]);
    assert!(ok, "{out}");
    assert!(calls.contains("test: plane up"), "{calls}");
    assert!(!running(), "the plane this run started still runs:\n{out}");
    assert!(
        out.contains("stopped the control plane this run started"),
        "{out}"
    );

    // Failing checks: stopped all the same, and the failure is the exit status.
    let (ok, out, _) = dev_test(&[("FAKE_CARGO_EXIT", "1")]);
    assert!(!ok, "a failing check fails dev.sh test:\n{out}");
    assert!(!running(), "the plane still runs after a failure:\n{out}");

    // Kept on request, and the way to stop it is printed.
    let (ok, out, _) = dev_test(&[("KURA_KEEP_PLANE", "1")]);
    assert!(ok, "{out}");
    assert!(running(), "KURA_KEEP_PLANE=1 keeps the plane:\n{out}");
    let down = format!(
        "KURA_CP_STATE={} scripts/control-plane.sh down",
        plane.state.display()
    );
    assert!(
        out.contains("still running") && out.contains(&down),
        "says it runs and how to stop it ({down}):\n{out}"
    );

    // Running before: left running, and said so.
    let (ok, out, calls) = dev_test(&[]);
    assert!(ok, "{out}");
    assert!(calls.contains("test: plane up"), "{calls}");
    assert!(running(), "a plane that ran before is left running:\n{out}");
    assert!(
        out.contains("still running") && out.contains(&down),
        "{out}"
    );

    // A plane with a node (the demo's): refused before anything runs. The
    // marker is removed at once: `down` of a plane that has one undoes a node.
    plane.script(&["down"]);
    let marker = plane.state.join("node");
    std::fs::create_dir_all(&marker).unwrap();
    std::fs::write(marker.join("enabled"), "").unwrap();
    let (ok, out, calls) = dev_test(&[]);
    std::fs::remove_dir_all(&marker).unwrap();
    assert!(!ok, "dev.sh test ran on a plane with a node:\n{out}");
    assert!(
        out.contains("runs with a node") && out.contains(&down),
        "says why and how to stop it ({down}):\n{out}"
    );
    assert!(calls.is_empty(), "nothing ran: {calls}");
    assert!(!running(), "nothing started:\n{out}");
    let _ = std::fs::remove_dir_all(&stub);
}
