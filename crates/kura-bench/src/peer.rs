//! kura-peer (hack/kura-peer), the controller-runtime peer, as a process of
//! its own: its template is `kura-operator render` of a template instance
//! under the bench configuration, and a new template is its fleet-wide change
//! (it polls the file, as the operator polls its configuration).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::{Bench, REGION};
use crate::report::repo;
use crate::{Args, BenchResult};

pub struct Peer {
    child: Child,
    log: PathBuf,
    template: PathBuf,
}

/// The peer's binary: `--peer-bin`, else built (or reused) by
/// `scripts/control-plane.sh kura-peer`.
pub fn binary(args: &Args) -> BenchResult<PathBuf> {
    if let Some(bin) = &args.peer_bin {
        return Ok(bin.clone());
    }
    let out = Command::new(repo().join("scripts/control-plane.sh"))
        .arg("kura-peer")
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err("scripts/control-plane.sh kura-peer failed".into());
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(Path::new(&dir).join("kura-peer"))
}

/// `kura-operator render` of the template instance under configuration `version`.
pub fn template(args: &Args, bench: &Bench, version: u32) -> BenchResult<String> {
    let config = bench.workdir.join(format!("peer-config-v{version}.yaml"));
    std::fs::write(&config, bench.config(version))?;
    let instance = bench.workdir.join("peer-template-instance.yaml");
    let spec = &Bench::instance("kuratplns", 0)["spec"];
    let template = json!({
        "apiVersion": "kura.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": "kuratplname", "namespace": "kuratplns"},
        "spec": {
            "account": "kuratplaccount",
            "region": spec["region"],
            "image": spec["image"],
            "storage": spec["storage"],
        },
    });
    std::fs::write(&instance, serde_yaml::to_string(&template)?)?;
    let output = Command::new(args.operator_bin())
        .arg("render")
        .arg("-f")
        .arg(&instance)
        .arg("--config")
        .arg(&config)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "kura-operator render (the peer's template) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

impl Peer {
    /// Start the peer in `namespaces` with `in_flight` workers, as the user of
    /// `kubeconfig`, and wait until its workers started.
    pub async fn start(
        bin: &Path,
        bench: &Bench,
        namespaces: &[String],
        in_flight: u16,
        kubeconfig: &Path,
        kura_events: bool,
        template: &str,
    ) -> BenchResult<Peer> {
        let first = &namespaces[0];
        let path = bench.workdir.join(format!("peer-template-{first}.yaml"));
        std::fs::write(&path, template)?;
        let log = bench.workdir.join(format!("peer-{first}.log"));
        let spec = &Bench::instance(first, 0)["spec"];
        let child = Command::new(bin)
            .arg(format!("--namespace={}", namespaces.join(",")))
            .arg(format!("--template={}", path.display()))
            .arg(format!("--region={REGION}"))
            .arg(format!("--image={}", spec["image"].as_str().unwrap_or("")))
            .arg(format!(
                "--storage={}",
                spec["storage"]["size"].as_str().unwrap_or("")
            ))
            .arg(format!("--concurrency={in_flight}"))
            .arg(format!("--kura-events={kura_events}"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut peer = Peer {
            child,
            log,
            template: path,
        };
        peer.wait_logged("Starting workers", Duration::from_secs(60))
            .await?;
        Ok(peer)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Replace the template whole: every instance is re-rendered.
    pub fn set_template(&self, text: &str) -> BenchResult<()> {
        let tmp = self.template.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.template)?;
        Ok(())
    }

    async fn wait_logged(&mut self, needle: &str, limit: Duration) -> BenchResult<()> {
        let start = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(needle) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("kura-peer exited ({status}):\n{log}").into());
            }
            if start.elapsed() > limit {
                return Err(format!("kura-peer did not log {needle:?} within {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
