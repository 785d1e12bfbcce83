//! The operator under test as a process of its own, and waiting for its fleet
//! to settle between phases (used by the operator and budget phases).

use clap::ValueEnum;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::Bench;
use crate::fleet::{Watched, wait_all};
use crate::{Args, BenchResult};

pub struct Process {
    child: Child,
    log: PathBuf,
    config: PathBuf,
}

/// Where an operator process acts: one namespace (the scale phases), or
/// every namespace as one of several replicas sharing the fleet's shards.
pub enum Scope<'a> {
    Namespace(&'a str),
    /// One namespace, as the user of another kubeconfig (the references run
    /// each client as its own user, so the audit log tells them apart).
    NamespaceAs(&'a str, &'a std::path::Path),
    /// Every namespace, as the user of another kubeconfig.
    ClusterAs(&'a std::path::Path),
    /// Every namespace, one replica (a fleet spread over namespaces).
    Cluster,
    Replica {
        /// Its files, its `POD_NAME` (the start of its Lease identity) and
        /// the user it impersonates (`replica-<name>`, in the audit log).
        name: &'a str,
        kubeconfig: &'a std::path::Path,
        lease_namespace: &'a str,
        lease_duration: Duration,
        shards: u32,
        shard_filter: kura_operator::shards::select::Choice,
    },
}

impl Process {
    /// The operator of the scale phases: in the fleet's one namespace, or
    /// across the cluster when the fleet is spread over several.
    pub fn spawn(args: &Args, bench: &Bench, config_yaml: &str) -> BenchResult<Process> {
        let scope = if bench.spread == 1 {
            Scope::Namespace(&bench.operator_ns)
        } else {
            Scope::Cluster
        };
        Process::spawn_in(args, bench, config_yaml, scope)
    }

    pub fn spawn_in(
        args: &Args,
        bench: &Bench,
        config_yaml: &str,
        scope: Scope<'_>,
    ) -> BenchResult<Process> {
        let suffix = match &scope {
            Scope::Namespace(_) | Scope::Cluster => String::new(),
            Scope::NamespaceAs(ns, _) => format!("-{ns}"),
            Scope::ClusterAs(_) => "-cluster".to_string(),
            Scope::Replica { name, .. } => format!("-{name}"),
        };
        let config = bench.workdir.join(format!("operator-config{suffix}.yaml"));
        std::fs::write(&config, config_yaml)?;
        let log = bench.workdir.join(format!("operator{suffix}.log"));
        let mut cmd = Command::new(args.operator_bin());
        cmd.arg("run");
        match &scope {
            Scope::Namespace(ns) => {
                cmd.args(["--namespace", *ns])
                    .arg("--kubeconfig")
                    .arg(&bench.kubeconfig);
            }
            Scope::NamespaceAs(ns, kubeconfig) => {
                cmd.args(["--namespace", *ns])
                    .arg("--kubeconfig")
                    .arg(kubeconfig);
            }
            Scope::ClusterAs(kubeconfig) => {
                cmd.arg("--kubeconfig").arg(kubeconfig);
            }
            Scope::Cluster => {
                cmd.arg("--kubeconfig").arg(&bench.kubeconfig);
            }
            Scope::Replica {
                name,
                kubeconfig,
                lease_namespace,
                lease_duration,
                shards,
                shard_filter,
            } => {
                let filter = shard_filter
                    .to_possible_value()
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default();
                cmd.arg("--leader-elect")
                    .arg(format!("--lease-namespace={lease_namespace}"))
                    .arg(format!("--lease-duration={}ms", lease_duration.as_millis()))
                    .arg(format!("--shards={shards}"))
                    .arg(format!("--shard-filter={filter}"))
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .env("POD_NAME", format!("bench-{name}"));
            }
        }
        let child = cmd
            .args(["--resync", &format!("{}ms", args.resync.as_millis())])
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .arg("--config")
            .arg(&config)
            // One debug line per reconcile ("reconciled", with its outcome) is how
            // the idle phase knows every instance was re-planned.
            .env("KURA_LOG", "info,kube=warn,kura_operator::reconcile=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| format!("{}: {e}", args.operator_bin().display()))?;
        Ok(Process { child, log, config })
    }

    /// kill -9: no Lease released, requests in flight cut off.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_count(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches(needle)
            .count()
    }

    /// When the operator logged its last line containing `needle` (the text
    /// format starts each line with an RFC 3339 time).
    pub fn logged_at(&self, needle: &str) -> Option<jiff::Timestamp> {
        self.last_line(needle)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// The operator's last log line containing `needle`.
    fn last_line(&self, needle: &str) -> Option<String> {
        let log = std::fs::read_to_string(&self.log).ok()?;
        log.lines()
            .rfind(|l| l.contains(needle))
            .map(str::to_string)
    }

    /// The value of `field` in the operator's last line containing `needle`
    /// (the text format writes `field=value`, a string quoted).
    pub fn logged_field(&self, needle: &str, field: &str) -> Option<String> {
        let line = self.last_line(needle)?;
        let key = format!("{field}=");
        let value = line.split_whitespace().find_map(|w| w.strip_prefix(&key))?;
        Some(value.trim_matches('"').to_string())
    }

    /// Replace the configuration file whole, as a ConfigMap update does.
    pub fn set_config(&self, yaml: &str) -> BenchResult<()> {
        let tmp = self.config.with_extension("tmp");
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, &self.config)?;
        Ok(())
    }

    /// Stop it as a rolling update does (SIGTERM: it lets go of its Lease) and
    /// wait until it exited.
    pub async fn stop(&mut self) -> BenchResult<()> {
        Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        let start = Instant::now();
        while self.child.try_wait()?.is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                return Err("the operator did not exit within 60s of SIGTERM".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub async fn wait_running(&mut self) -> BenchResult<()> {
        self.wait_logged("kura-operator running", Duration::from_secs(60))
            .await
    }

    /// Wait until the operator logged a line containing `needle`.
    pub async fn wait_logged(&mut self, needle: &str, limit: Duration) -> BenchResult<()> {
        let start = Instant::now();
        while self.log_count(needle) == 0 {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(format!("the operator exited ({status}):\n{log}").into());
            }
            if start.elapsed() > limit {
                return Err(format!("the operator did not log {needle:?} within {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const CONVERGED: &str = "outcome=\"converged\"";

/// Wait until every instance is Ready and every rollout finished, so that one
/// phase's tail (pods rolling, status turning Ready) is not counted in the next.
pub async fn settle(watched: &Watched, n: usize, timeout: Duration) -> BenchResult<()> {
    wait_all("operator: instances Ready", n, timeout, || {
        watched.ready_instances()
    })
    .await?;
    wait_all("operator: StatefulSet rollouts", n, timeout, || {
        watched.rolled_out()
    })
    .await?;
    Ok(())
}
