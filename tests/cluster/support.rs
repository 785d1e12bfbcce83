//! Test support for the real control plane (scripts/control-plane.sh): a client,
//! a namespace per test, waiting on conditions, impersonation.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The repository's root: this file is compiled into the operator's tests and
/// into the benchmark crate's (`crates/kura-bench`), two levels down.
pub fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("scripts/control-plane.sh").exists())
        .map(PathBuf::from)
        .unwrap_or(manifest)
}

pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("KURA_TEST_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".control-plane/kubeconfig"))
}

/// Whether the tests use a control plane someone else runs (KURA_TEST_KUBECONFIG):
/// then it is never started from here, because `up` in this checkout would start a
/// second plane on the same ports.
pub fn external_plane() -> bool {
    std::env::var_os("KURA_TEST_KUBECONFIG").is_some()
}

/// `kubectl` arguments that wait until the CRDs are Established (served).
pub const WAIT_CRDS: [&str; 5] = [
    "wait",
    "--for=condition=Established",
    "crd/kurainstances.kura.dev",
    "crd/kuragateways.kura.dev",
    "--timeout=60s",
];

/// Starts the control plane if it does not run (once per test binary) and
/// installs the CRDs from crds/.
fn ensure_plane() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        if !external_plane() {
            let status = std::process::Command::new(repo().join("scripts/control-plane.sh"))
                .arg("up")
                .status()
                .expect("run scripts/control-plane.sh up");
            assert!(status.success(), "scripts/control-plane.sh up failed");
        }
        let status = std::process::Command::new(kubectl())
            .args(["--kubeconfig"])
            .arg(kubeconfig_path())
            .args(["apply", "--server-side", "--force-conflicts", "-f"])
            .arg(repo().join("crds"))
            .stdout(std::process::Stdio::null())
            .status()
            .expect("kubectl apply crds");
        assert!(status.success(), "installing crds/ failed");
        let status = std::process::Command::new(kubectl())
            .args(["--kubeconfig"])
            .arg(kubeconfig_path())
            .args(WAIT_CRDS)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("kubectl wait crds");
        assert!(status.success(), "CRDs did not become established");
    });
}

/// The cached binaries of the control plane (kubectl, helm, ...).
pub fn tool(name: &str) -> PathBuf {
    let cache = std::env::var_os("KURA_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache")
                });
            base.join("kura-operator")
        });
    cache.join("bin/current").join(name)
}

pub fn kubectl() -> PathBuf {
    tool("kubectl")
}

pub async fn config() -> Config {
    ensure_plane();
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path()).expect("read kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig")
}

pub async fn client() -> Client {
    Client::try_from(config().await).expect("client")
}

/// A client that acts as a ServiceAccount (through impersonation), to test RBAC.
pub async fn client_as_service_account(namespace: &str, name: &str) -> Client {
    let mut config = config().await;
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    Client::try_from(config).expect("impersonating client")
}

/// A namespace of the test's own, deleted (without waiting) when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    pub async fn new(prefix: &str) -> TestNamespace {
        Self::with_labels(prefix, &[]).await
    }

    pub async fn with_labels(prefix: &str, labels: &[(&str, &str)]) -> TestNamespace {
        let client = client().await;
        let suffix: String = format!("{:x}", rand_u64()).chars().take(6).collect();
        let name = format!("{prefix}-{suffix}");
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": name, "labels": labels },
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        TestNamespace { name, client }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("KURA_TEST_KEEP_NAMESPACES").is_some() {
            return;
        }
        // Not through self.client: its connection lives on the test's runtime,
        // which is blocked in this drop.
        let _ = std::process::Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(kubeconfig_path())
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// Poll `check` until it returns `Some`, or fail with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `api` has no `name` (a failed read counts as not yet), or
/// fails with `what` after `timeout`.
pub async fn wait_gone<K>(what: &str, timeout: Duration, api: &Api<K>, name: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, timeout, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
}

/// Waits until `api` lists nothing (a failed list counts as not yet), or
/// fails with `what` after `timeout`.
pub async fn wait_empty<K>(what: &str, timeout: Duration, api: &Api<K>)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, timeout, || async {
        api.list(&kube::api::ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await
}

/// Waits until `client` may list `K` in `namespace`: bindings reach the
/// authorizer asynchronously.
pub async fn wait_granted<K>(client: &Client, namespace: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(
        "the grants to take effect",
        Duration::from_secs(30),
        || async {
            Api::<K>::namespaced(client.clone(), namespace)
                .list(&kube::api::ListParams::default())
                .await
                .ok()
        },
    )
    .await;
}

/// The first object `api` lists that has an owner reference to `owner_uid`,
/// once there is one (a failed list counts as none yet); fails with `what`
/// after `timeout`.
pub async fn wait_owned<K>(what: &str, timeout: Duration, api: &Api<K>, owner_uid: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, timeout, || async {
        let list = api.list(&kube::api::ListParams::default()).await.ok()?;
        list.items.into_iter().find(|o| {
            o.meta()
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == owner_uid)
        })
    })
    .await
}

/// Server-side apply of a JSON manifest with the given field manager.
pub async fn apply_json<K>(
    api: &Api<K>,
    manager: &str,
    body: serde_json::Value,
) -> Result<K, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = body["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&body),
    )
    .await
}

/// The apiserver's audit log (scripts/control-plane.sh audits every mutating
/// request at Metadata level), next to the kubeconfig.
pub fn audit_log() -> PathBuf {
    kubeconfig_path().with_file_name("audit.log")
}

/// Mutating requests the audit log recorded in `namespace` at or after `since`
/// (RFC 3339), as `verb resource[/subresource] name` strings, excluding Events
/// and the control plane's own controllers.
/// The text of the audit log at `path` and of the backups the apiserver
/// rotated it into (`audit-<time>.log` beside it, oldest first): a long
/// suite writes more than one file's worth (`--audit-log-maxsize`), and a
/// test's window can straddle a rotation.
///
/// A rotation while the files are read (the log renamed to its backup's
/// name, a new one opened) would lose what the renamed file held: the
/// backups are listed again after reading, and everything is read again
/// if they changed (seen: a test's window read as empty, 0 writes, in the
/// moment the apiserver rotated a 200 MB log).
pub fn audit_text(path: &std::path::Path) -> String {
    let mut rotated = audit_backups(path);
    loop {
        let mut text = String::new();
        for file in rotated.iter().chain([&path.to_path_buf()]) {
            text.push_str(&std::fs::read_to_string(file).unwrap_or_default());
        }
        let after = audit_backups(path);
        if after == rotated {
            return text;
        }
        rotated = after;
    }
}

/// The backups the apiserver rotated the audit log at `path` into, oldest first.
fn audit_backups(path: &std::path::Path) -> Vec<PathBuf> {
    let dir = path.parent().expect("the audit log's directory");
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
        })
        .collect();
    // Their names carry the time of the rotation.
    rotated.sort();
    rotated
}

pub fn mutations_since(namespace: &str, since: &str) -> Vec<String> {
    let since: jiff::Timestamp = since.parse().expect("RFC 3339");
    let text = audit_text(&audit_log());
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["objectRef"]["namespace"] == namespace)
        .filter(|e| e["objectRef"]["resource"] != "events")
        // The control plane's own controllers (e.g. the disruption controller
        // refreshing a PodDisruptionBudget's status) are not the operator.
        .filter(|e| {
            !e["user"]["username"]
                .as_str()
                .unwrap_or("")
                .starts_with("system:")
        })
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= since)
        })
        .map(|e| {
            let r = &e["objectRef"];
            let sub = r["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            format!(
                "{} {}{} {} by {}",
                e["verb"].as_str().unwrap_or(""),
                r["resource"].as_str().unwrap_or(""),
                sub,
                r["name"].as_str().unwrap_or(""),
                e["user"]["username"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Creates the namespace `name` on a plane of a test's own.
pub async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

/// Creates the IngressClass `name` served by the plane's kura-sim, which plays
/// the region's ingress controller.
pub async fn create_sim_class(client: &Client, name: &str) {
    let class = serde_json::json!({
        "metadata": {"name": name},
        "spec": {"controller": "kura.dev/sim-ingress"},
    });
    Api::<k8s_openapi::api::networking::v1::IngressClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(class).unwrap(),
        )
        .await
        .unwrap();
}

/// A control plane of a test's own (other ports, other state), for faults that
/// would disturb every other test on the shared one: restarts, SIGSTOP.
pub struct PrivatePlane {
    pub state: PathBuf,
    env: Vec<(&'static str, String)>,
}

/// Added to every private plane's ports, so that two checkouts on one machine
/// can run private planes at once: give each its own (e.g. 300).
pub const PORT_BASE_VAR: &str = "KURA_PRIVATE_PORT_BASE";

/// The ports of private plane number `port_offset`: `(variable, port)` for
/// scripts/control-plane.sh.
/// Runs `cmd`; it must succeed (else the test fails with its command line and stderr).
pub fn must_succeed(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn private_ports(port_offset: u16) -> Vec<(&'static str, String)> {
    let base: u16 = match std::env::var(PORT_BASE_VAR) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{PORT_BASE_VAR}={v:?}: {e}")),
        Err(_) => 0,
    };
    let port = |first: u16| {
        first
            .checked_add(base)
            .and_then(|p| p.checked_add(port_offset))
            .unwrap_or_else(|| panic!("{PORT_BASE_VAR}={base} puts a port past 65535"))
            .to_string()
    };
    vec![
        ("KURA_ETCD_PORT", port(24790)),
        ("KURA_ETCD_PEER_PORT", port(24900)),
        ("KURA_API_PORT", port(17443)),
        ("KURA_KCM_PORT", port(21257)),
    ]
}

impl PrivatePlane {
    /// Not started yet: [`PrivatePlane::up`] starts it; dropping it stops it
    /// and removes its state either way.
    pub fn new(name: &str, port_offset: u16) -> PrivatePlane {
        PrivatePlane::with_env(name, port_offset, Vec::new())
    }

    /// [`PrivatePlane::new`], with more variables for scripts/control-plane.sh
    /// (a node plane's bridge and ranges).
    pub fn with_env(
        name: &str,
        port_offset: u16,
        extra: Vec<(&'static str, String)>,
    ) -> PrivatePlane {
        let state = std::env::temp_dir().join(format!("kura-plane-{name}-{}", std::process::id()));
        let mut env = vec![("KURA_CP_STATE", state.display().to_string())];
        env.extend(private_ports(port_offset));
        env.extend(extra);
        PrivatePlane { state, env }
    }

    /// Started, with the CRDs installed and served.
    pub fn up(name: &str, port_offset: u16) -> PrivatePlane {
        let plane = PrivatePlane::new(name, port_offset);
        plane.script(&["up"]);
        plane.install_crds();
        plane
    }

    /// The CRDs installed and, as on the shared plane (ensure_plane), served:
    /// a CRD is served once Established.
    pub fn install_crds(&self) {
        let crds = repo().join("crds").display().to_string();
        self.kubectl(&["apply", "--server-side", "-f", &crds]);
        self.kubectl(&WAIT_CRDS);
    }

    /// kubectl against this plane; it must succeed.
    pub fn kubectl(&self, args: &[&str]) {
        must_succeed(
            std::process::Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(self.kubeconfig())
                .args(args),
        );
    }

    /// The variables that point scripts/control-plane.sh at this plane.
    pub fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    /// scripts/control-plane.sh with `args` on this plane; it must succeed.
    pub fn script(&self, args: &[&str]) {
        must_succeed(self.on_this_plane(
            std::process::Command::new(repo().join("scripts/control-plane.sh")).args(args),
        ));
    }

    /// `cmd` with the variables that point the scripts at this plane.
    pub fn on_this_plane<'a>(
        &self,
        cmd: &'a mut std::process::Command,
    ) -> &'a mut std::process::Command {
        cmd.envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    pub async fn client(&self) -> kube::Client {
        let kc = Kubeconfig::read_from(self.kubeconfig()).unwrap();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    fn pid(&self, component: &str) -> String {
        std::fs::read_to_string(self.state.join(format!("{component}.pid")))
            .unwrap()
            .trim()
            .to_string()
    }

    fn signal(&self, component: &str, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.pid(component)])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILL a component, then `up` starts it again (and waits until it serves).
    pub fn crash_and_restart(&self, component: &str) {
        self.signal(component, "-KILL");
        let stat = format!("/proc/{}/stat", self.pid(component));
        let dead =
            || std::fs::read_to_string(&stat).map_or(true, |s| s.split(' ').nth(2) == Some("Z"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !dead() {
            assert!(
                std::time::Instant::now() < deadline,
                "{component} did not die"
            );
            std::thread::yield_now();
        }
        self.script(&["up"]);
    }

    pub fn pause(&self, component: &str) {
        self.signal(component, "-STOP");
    }

    pub fn resume(&self, component: &str) {
        self.signal(component, "-CONT");
    }
}

impl Drop for PrivatePlane {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo().join("scripts/control-plane.sh"))
            .arg("down")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The StatefulSets `sts` lists whose pods are not all Ready and updated now,
/// by name; `None` when the list fails.
pub async fn unavailable(
    sts: &Api<k8s_openapi::api::apps::v1::StatefulSet>,
) -> Option<Vec<String>> {
    let list = sts.list(&kube::api::ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|s| {
                let want = s.spec.as_ref().and_then(|x| x.replicas).unwrap_or(1);
                let status = s.status.clone().unwrap_or_default();
                status.ready_replicas.unwrap_or(0) < want
                    || status.updated_replicas.unwrap_or(0) < want
            })
            .filter_map(|s| s.metadata.name)
            .collect(),
    )
}

/// Samples [`unavailable`] every 200 ms until finished; keeps the highest
/// count seen (only among `watched`, when given).
pub struct MostUnavailable {
    max: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl MostUnavailable {
    pub fn start(
        sts: Api<k8s_openapi::api::apps::v1::StatefulSet>,
        watched: Option<Vec<String>>,
    ) -> MostUnavailable {
        use std::sync::atomic::Ordering;
        let max = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (m, s) = (max.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(names) = unavailable(&sts).await {
                    let n = names
                        .iter()
                        .filter(|n| watched.as_ref().is_none_or(|w| w.contains(n)))
                        .count();
                    m.fetch_max(n, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await; // the sampling period
            }
        });
        MostUnavailable { max, stop, task }
    }

    /// The highest count seen, once the sampling has stopped.
    pub async fn finish(self) -> usize {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.max.load(Ordering::Relaxed)
    }
}

/// Runs `cmd` with `input` on its standard input (closed once written) and
/// waits for it to exit; `what` says what failed to start.
pub fn run_with_input(
    cmd: &mut std::process::Command,
    input: &[u8],
    what: &str,
) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd.stdin(std::process::Stdio::piped()).spawn().expect(what);
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The plane's admin kubeconfig as YAML, to derive variants from.
pub fn admin_kubeconfig() -> serde_yaml::Value {
    let text = std::fs::read_to_string(kubeconfig_path()).expect("read kubeconfig");
    serde_yaml::from_str(&text).expect("kubeconfig is YAML")
}

/// Writes `kubeconfig` to `dir/name` and returns its path.
pub fn write_kubeconfig(
    dir: &std::path::Path,
    name: &str,
    kubeconfig: &serde_yaml::Value,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, serde_yaml::to_string(kubeconfig).unwrap()).unwrap();
    path
}

/// A kubeconfig acting as `system:serviceaccount:NS:SA` (the kubeconfig `as:`
/// field: the admin user impersonates it), as the operator's pod would be.
pub fn impersonating_kubeconfig(dir: &std::path::Path, namespace: &str, sa: &str) -> PathBuf {
    let mut kc = admin_kubeconfig();
    kc["users"][0]["user"]["as"] = format!("system:serviceaccount:{namespace}:{sa}").into();
    write_kubeconfig(dir, "kubeconfig-as-sa", &kc)
}

/// A directory of the test's own (under the system's temporary directory)
/// for the files it writes: kubeconfigs, configurations.
pub fn scratch_dir(ns: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kura-ops-{ns}"))
}
