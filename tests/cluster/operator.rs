//! Runs the real operator binary against the control plane, scoped to one test
//! namespace with a configuration of the test's own.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{TestNamespace, kubeconfig_path, wait_for};
use kura_operator::api::{KuraInstance, KuraInstanceStatus, Phase};

pub struct Operator {
    child: Option<Child>,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    namespace: String,
    extra_env: Vec<(String, String)>,
    extra_args: Vec<String>,
    /// The control plane to talk to (the shared one unless a test runs its own).
    pub kubeconfig: PathBuf,
}

impl Operator {
    pub fn start(namespace: &str, config_yaml: &str) -> Operator {
        Self::start_with_env(namespace, config_yaml, &[])
    }

    pub fn start_with_env(namespace: &str, config_yaml: &str, env: &[(&str, &str)]) -> Operator {
        Self::start_full(namespace, config_yaml, &[], env)
    }

    /// With extra `run` flags (they come last, so they override the defaults).
    pub fn start_full(
        namespace: &str,
        config_yaml: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let mut op = Self::prepare(namespace, config_yaml, args, env);
        op.spawn();
        op
    }

    fn prepare(
        namespace: &str,
        config_yaml: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let dir = std::env::temp_dir().join(format!("kura-op-{namespace}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config_yaml).unwrap();
        Operator {
            child: None,
            config_path,
            log_path: dir.join("operator.log"),
            namespace: namespace.to_string(),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            kubeconfig: kubeconfig_path(),
        }
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kura-operator"))
            .args([
                "run",
                "--namespace",
                &self.namespace,
                "--resync",
                "3s",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg("--config")
            .arg(&self.config_path)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(&self.extra_args)
            .env("KURA_LOG", "info,kura_operator::reconcile=trace")
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kura-operator");
        self.child = Some(child);
    }

    /// The same operator, against another control plane.
    pub fn start_on(
        kubeconfig: PathBuf,
        namespace: &str,
        config_yaml: &str,
        args: &[&str],
    ) -> Operator {
        let mut op = Self::prepare(
            namespace,
            config_yaml,
            args,
            &[("KURA_LOG", "info,kura_operator=debug,kube_runtime=debug")],
        );
        op.kubeconfig = kubeconfig;
        op.spawn();
        op
    }

    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Replace the configuration file, as a ConfigMap update would.
    pub fn set_config(&self, config_yaml: &str) {
        let tmp = self.config_path.with_extension("tmp");
        std::fs::write(&tmp, config_yaml).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Wait until the operator logged `n` more lines containing `needle` than now.
    pub async fn wait_for_log_count(&self, needle: &str, n: usize, timeout: Duration) {
        let base = self.log().matches(needle).count();
        wait_for(
            &format!("{n} more log lines with {needle:?}"),
            timeout,
            || async { (self.log().matches(needle).count() >= base + n).then_some(()) },
        )
        .await
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for the process to exit by itself (fault injection), with a timeout.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("running");
        wait_for("the operator to exit", timeout, || {
            let status = child.try_wait().ok().flatten();
            async move { status }
        })
        .await
    }

    pub fn restart(&mut self, env: &[(&str, &str)]) {
        self.kill();
        self.extra_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.spawn();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An operator configuration with one region, as the tests vary it.
pub fn config(namespace: &str, network: &str, gateway_controller: &str) -> String {
    format!(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: {gateway_controller}\n  replicas: 1\n\
         regions:\n  r1:\n    network: {network}\n    sharedIngressClass: shared-{namespace}\n    domain: kura.test\n"
    )
}

pub fn instance(name: &str, image: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kura.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": { "name": name },
        "spec": { "account": name, "region": "r1", "image": image, "storage": { "size": "1Gi" } },
    })
}

/// The region's shared ingress class `shared-<namespace>`, served by kura-sim
/// (which plays the region's ingress controller). Cluster-scoped: delete it at the end.
pub async fn shared_class(ns: &TestNamespace) -> Api<IngressClass> {
    // Served by kura-sim, which plays the region's ingress controller.
    let classes: Api<IngressClass> = Api::all(ns.client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": format!("shared-{}", ns.name)},
                "spec": {"controller": "kura.dev/sim-ingress"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    classes
}

pub async fn wait_ready(instances: &Api<KuraInstance>, name: &str) -> KuraInstanceStatus {
    wait_for(
        "the instance to be Ready",
        Duration::from_secs(90),
        || async {
            let s = instances.get(name).await.ok()?.status?;
            (s.phase == Some(Phase::Ready) && s.applied_revision == s.desired_revision).then_some(s)
        },
    )
    .await
}
