//! Runs the real operator binary against the control plane, scoped to one test
//! namespace with a configuration of the test's own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::{TestNamespace, kubeconfig_path, wait_for};
use kura_core::api::{KuraInstance, KuraInstanceStatus, Phase};

pub struct Operator {
    child: Option<Child>,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    namespace: String,
    extra_env: Vec<(String, String)>,
    options: Options,
    /// `/metrics`, `/healthz` and `/readyz` on 127.0.0.1.
    pub metrics_port: u16,
}

/// How to run the operator, beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Extra `run` flags (they come last, so they override the defaults).
    pub args: Vec<String>,
    /// `--leader-elect`, the Lease in the test namespace, with this duration.
    pub lease_duration: Option<Duration>,
    /// Another kubeconfig than the plane's admin one (impersonation, a gate).
    pub kubeconfig: Option<PathBuf>,
    /// Names this operator's files when several run in one namespace.
    pub replica: Option<String>,
    /// Watch every namespace (no `--namespace`): only on a control plane of
    /// the test's own, where no other test's instances live.
    pub all_namespaces: bool,
    /// `--resync` (3s when absent: the tests' default).
    pub resync: Option<String>,
}

impl Operator {
    pub fn start(namespace: &str, config_yaml: &str) -> Operator {
        Self::start_with_env(namespace, config_yaml, &[])
    }

    pub fn start_with_env(namespace: &str, config_yaml: &str, env: &[(&str, &str)]) -> Operator {
        Self::start_full(namespace, config_yaml, &[], env)
    }

    /// Talking to the apiserver through another kubeconfig (impersonation, a gate).
    pub fn start_as(namespace: &str, config_yaml: &str, kubeconfig: PathBuf) -> Operator {
        let options = Options {
            kubeconfig: Some(kubeconfig),
            ..Options::default()
        };
        Self::start_with(namespace, config_yaml, &[], options)
    }

    /// With extra `run` flags (they come last, so they override the defaults).
    pub fn start_full(
        namespace: &str,
        config_yaml: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let options = Options {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Options::default()
        };
        Self::start_with(namespace, config_yaml, env, options)
    }

    /// The operator for `namespace` under `options`, with the configuration
    /// most tests run (`config(namespace, "host", "example.com/none")`).
    pub fn start_in(namespace: &str, options: Options) -> Operator {
        Operator::start_with(
            namespace,
            &config(namespace, "host", "example.com/none"),
            &[],
            options,
        )
    }

    pub fn start_with(
        namespace: &str,
        config_yaml: &str,
        env: &[(&str, &str)],
        options: Options,
    ) -> Operator {
        let replica = options
            .replica
            .as_deref()
            .map(|r| format!("-{r}"))
            .unwrap_or_default();
        // This process's own: another checkout's test of the same (fixed)
        // namespace, on a private plane, must not share its config file or log.
        let dir = std::env::temp_dir().join(format!(
            "kura-op-{namespace}{replica}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config_yaml).unwrap();
        // A fresh log per test run (restarts within it append).
        let _ = std::fs::remove_file(dir.join("operator.log"));
        let mut op = Operator {
            child: None,
            config_path,
            log_path: dir.join("operator.log"),
            namespace: namespace.to_string(),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            options,
            metrics_port: free_port(),
        };
        op.spawn();
        op
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let scope = if self.options.all_namespaces {
            Vec::new()
        } else {
            vec!["--namespace", self.namespace.as_str()]
        };
        let child = Command::new(operator_binary())
            .arg("run")
            .args(scope)
            .args([
                "--resync",
                self.options.resync.as_deref().unwrap_or("3s"),
                "--metrics-addr",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .args(self.options.lease_duration.iter().flat_map(|d| {
                [
                    "--leader-elect".to_string(),
                    format!("--lease-namespace={}", self.namespace),
                    format!("--lease-duration={}ms", d.as_millis()),
                ]
            }))
            .arg("--config")
            .arg(&self.config_path)
            .arg("--kubeconfig")
            .arg(
                self.options
                    .kubeconfig
                    .clone()
                    .unwrap_or_else(kubeconfig_path),
            )
            .args(&self.options.args)
            .env("KURA_LOG", "info,kura_operator::reconcile=trace")
            // Traces only where a test asks for them (tests/cluster/observability/traces.rs),
            // whatever the environment the tests run in.
            .env_clear_otel()
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kura-operator");
        self.child = Some(child);
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

    /// SIGTERM: the graceful shutdown a pod gets.
    pub fn terminate(&self) {
        let child = self.child.as_ref().expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// `GET path` on the metrics address: the status code and body, or None
    /// when nothing answers (yet).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port))
            .await
            .ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        conn.read_to_string(&mut response).await.ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n")?.1.to_string();
        Some((status, body))
    }

    /// One sample of `/metrics`, e.g. `kura_applies_total{reason="forced"}`;
    /// an absent series reads as 0 (a labelled counter appears on first use).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (status, body) = self.get("/metrics").await?;
        assert_eq!(status, 200, "{body}");
        Some(sample(&body, series).unwrap_or(0.0))
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to the running process: a
    /// stopped operator reads and writes nothing until it is continued.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// The operator process's id (its threads are under /proc/PID/task).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
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
        // A failing test says what its operator did last: CI keeps only the
        // test's output, not the log file.
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_FAILURE)..];
            eprintln!(
                "--- the last {} lines of the operator's log ({}):\n{}",
                tail.len(),
                self.log_path.display(),
                tail.join("\n")
            );
        }
    }
}

/// How much of the operator's log a failing test prints.
const LOG_TAIL_ON_FAILURE: usize = 30;

/// The value of `series` in a Prometheus text exposition.
/// The operator binary the tests run: this build's, or the one
/// `KURA_TEST_OPERATOR_BIN` names (another commit's build: the negative
/// control of a fix, run with the same tests).
pub fn operator_binary() -> PathBuf {
    std::env::var_os("KURA_TEST_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kura-operator")))
}

pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A port nothing listens on now (the operator binds it right after).
/// Removes the OpenTelemetry variables a command would inherit.
trait EnvClearOtel {
    fn env_clear_otel(&mut self) -> &mut Self;
}

impl EnvClearOtel for Command {
    fn env_clear_otel(&mut self) -> &mut Self {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OTEL_") {
                self.env_remove(key);
            }
        }
        self
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A region's endpoint check turned off (it is on by default): kura-sim, the
/// simulated ingress controller, publishes addresses where nothing answers.
pub const NO_ENDPOINT_CHECK: &str = "    endpointCheck: {enabled: false}\n";

/// An operator configuration with one region, as the tests vary it; no real
/// ingress controller serves it, so its endpoint check is off.
pub fn config(namespace: &str, network: &str, gateway_controller: &str) -> String {
    format!(
        "{}{NO_ENDPOINT_CHECK}",
        config_with_default_check(namespace, network, gateway_controller)
    )
}

/// The region's configuration (host networking, a class no controller
/// serves) with default pod resources (`memory`: a change of it changes every
/// pod template) and the rollout section `rollout`.
pub fn fleet_config(namespace: &str, memory: &str, rollout: &str) -> String {
    fleet_config_on(namespace, "host", "example.com/none", memory, rollout)
}

/// [`fleet_config`] on a region of another network and gateway controller.
pub fn fleet_config_on(
    namespace: &str,
    network: &str,
    gateway_controller: &str,
    memory: &str,
    rollout: &str,
) -> String {
    format!(
        "{}    defaultResources:\n      requests: {{memory: {memory}}}\nrollout:\n{rollout}",
        config(namespace, network, gateway_controller)
    )
}

/// The same region, saying nothing of the endpoint check: on, as the
/// operator defaults it (tests/cluster/observability/endpoint.rs).
pub fn config_with_default_check(
    namespace: &str,
    network: &str,
    gateway_controller: &str,
) -> String {
    format!(
        "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: {gateway_controller}\n  replicas: 1\n\
         regions:\n  r1:\n    network: {network}\n    sharedIngressClass: shared-{namespace}\n    domain: kura.test\n"
    )
}

/// Creates (or sets back) the instance `acme` on `registry.example/kura:1.0.0`.
pub async fn apply_acme(instances: &Api<KuraInstance>) {
    crate::support::apply_json(
        instances,
        "test",
        instance("acme", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
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
    sim_class(&ns.client, &format!("shared-{}", ns.name)).await
}

/// Deletes the class [`shared_class`] made for `ns`, whatever the answer.
pub async fn delete_shared_class(classes: &Api<IngressClass>, ns: &TestNamespace) {
    let _ = classes
        .delete(&format!("shared-{}", ns.name), &Default::default())
        .await;
}

/// The IngressClass `name`, served by kura-sim, which plays the region's
/// ingress controller.
pub async fn sim_class(client: &kube::Client, name: &str) -> Api<IngressClass> {
    let classes: Api<IngressClass> = Api::all(client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
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
        Duration::from_secs(180),
        || async {
            let s = instances.get(name).await.ok()?.status?;
            (s.phase == Some(Phase::Ready) && s.applied_revision == s.desired_revision).then_some(s)
        },
    )
    .await
}

/// The common start of a scenario: a namespace of its own with the region's
/// shared class, and an operator on a host-network region (with `args`).
/// Fields drop in order: the operator stops before the namespace goes.
pub struct ReadyInstance {
    pub op: Operator,
    pub instances: Api<KuraInstance>,
    pub classes: Api<IngressClass>,
    pub ns: TestNamespace,
}

/// A scenario with no instance yet.
pub async fn scenario(prefix: &str, args: &[&str]) -> ReadyInstance {
    let ns = TestNamespace::new(prefix).await;
    let classes = shared_class(&ns).await;
    let op = Operator::start_full(
        &ns.name,
        &config(&ns.name, "host", "example.com/none"),
        args,
        &[],
    );
    let instances: Api<KuraInstance> = ns.api();
    ReadyInstance {
        op,
        instances,
        classes,
        ns,
    }
}

/// A scenario with instance `acme` Ready.
pub async fn ready_instance(prefix: &str) -> ReadyInstance {
    ready_instance_with(prefix, &[]).await
}

/// A scenario with instance `acme` Ready, the operator run with `args`.
pub async fn ready_instance_with(prefix: &str, args: &[&str]) -> ReadyInstance {
    let s = scenario(prefix, args).await;
    apply_acme(&s.instances).await;
    wait_ready(&s.instances, "acme").await;
    s
}

impl ReadyInstance {
    /// Delete the cluster-scoped shared class (the namespace goes on drop).
    pub async fn finish(self) {
        let class = format!("shared-{}", self.ns.name);
        let _ = self.classes.delete(&class, &Default::default()).await;
    }
}

/// Creates `n` instances named `{prefix}00`, `{prefix}01`, … on one image.
pub async fn create_fleet(instances: &Api<KuraInstance>, prefix: &str, n: usize) {
    for i in 0..n {
        let name = format!("{prefix}{i:02}");
        crate::support::apply_json(
            instances,
            "test",
            instance(&name, "registry.example/kura:1.0.0"),
        )
        .await
        .unwrap_or_else(|e| panic!("creating instance {name}: {e:?}"));
    }
}

/// Instances Ready with their desired revision applied, that revision other
/// than `not` when given (0 when the list fails).
pub async fn converged_count(instances: &Api<KuraInstance>, not: Option<&str>) -> usize {
    let Ok(list) = instances.list(&kube::api::ListParams::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                s.phase == Some(kura_core::api::Phase::Ready)
                    && s.applied_revision == s.desired_revision
                    && not.is_none_or(|old| s.applied_revision.as_deref() != Some(old))
            })
        })
        .count()
}

/// Every instance's status now, by name (none when the list fails).
pub async fn statuses(instances: &Api<KuraInstance>) -> BTreeMap<String, KuraInstanceStatus> {
    statuses_by(instances, |i| i.metadata.name.clone().unwrap_or_default()).await
}

/// Every instance's status now, by `key` (none when the list fails).
pub async fn statuses_by(
    instances: &Api<KuraInstance>,
    key: impl Fn(&KuraInstance) -> String,
) -> BTreeMap<String, KuraInstanceStatus> {
    let list = instances.list(&ListParams::default()).await;
    list.map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|i| (key(&i), i.status.unwrap_or_default()))
        .collect()
}

/// Waits until `op` reports `kura_leader` = `value` (1: a leader, 0: a
/// standby) and is ready.
pub async fn wait_role(op: &Operator, value: f64, timeout: Duration) {
    let role = if value == 1.0 {
        "a leader"
    } else {
        "a ready standby"
    };
    wait_for(role, timeout, || async {
        let leading = op.metric("kura_leader").await?;
        let ready = op.get("/readyz").await?.0 == 200;
        (leading == value && ready).then_some(())
    })
    .await
}
