//! The run's own objects: two fresh namespaces, the region's shared IngressClass
//! (served by kura-sim), the operator configuration and the instance manifests.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use crate::{Args, BenchResult};

/// The one region of the bench configuration: host networking, so every instance
/// uses the shared class and no KuraGateway is involved.
pub const REGION: &str = "bench";

pub struct Bench {
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// The direct fleet's namespace, or the base of its names when spread.
    pub direct_ns: String,
    /// The operator's fleet's namespace, or the base of its names when spread.
    pub operator_ns: String,
    /// Namespaces each fleet is spread over (`--namespaces`, default 1).
    pub spread: usize,
    pub class: String,
    /// The user the kubeconfig authenticates as: the bench's requests and the
    /// operator's carry it in the audit log.
    pub user: String,
    /// Configuration files, rendered manifests and the operator's log.
    pub workdir: PathBuf,
    /// Whether the configuration names `endpointCheck` (see
    /// `Args::without_endpoint_check_setting`).
    pub endpoint_check_setting: bool,
}

pub async fn client(kubeconfig: &std::path::Path) -> BenchResult<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

impl Bench {
    pub async fn setup(args: &Args) -> BenchResult<Bench> {
        let client = client(&args.kubeconfig).await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for name in ["kurainstances.kura.dev", "kuragateways.kura.dev"] {
            if crds.get_opt(name).await?.is_none() {
                return Err(format!(
                    "CRD {name} is not installed: kubectl apply --server-side -f crds/"
                )
                .into());
            }
        }
        let review: SelfSubjectReview = Api::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(json!({}))?)
            .await?;
        let user = review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_default();
        // Unique per process too: two runs started in the same millisecond
        // (the smoke tests run side by side) must not share a class or a
        // namespace, nor clean up each other's.
        let suffix = format!(
            "{}-{}",
            jiff::Timestamp::now().as_millisecond() % 1_000_000_000,
            std::process::id()
        );
        let bench = Bench {
            client,
            kubeconfig: args.kubeconfig.clone(),
            direct_ns: format!("kura-bench-direct-{suffix}"),
            operator_ns: format!("kura-bench-op-{suffix}"),
            // The shards proof spreads its own fleet (src/shards.rs).
            spread: if args.shards_proof {
                1
            } else {
                args.namespaces.unwrap_or(1).max(1)
            },
            class: format!("kura-bench-{suffix}"),
            user,
            workdir: std::env::temp_dir().join(format!("kura-bench-{suffix}")),
            endpoint_check_setting: !args.without_endpoint_check_setting,
        };
        std::fs::create_dir_all(&bench.workdir)?;
        // A class of that name that is not this run's is left alone.
        bench.create_class().await?;
        if let Err(e) = bench.create_namespaces().await {
            bench.cleanup().await;
            return Err(e);
        }
        eprintln!(
            "kura-bench: namespaces {} and {} ({} each), class {}, files in {}",
            bench.direct_ns,
            bench.operator_ns,
            bench.spread,
            bench.class,
            bench.workdir.display()
        );
        Ok(bench)
    }

    async fn create_class(&self) -> BenchResult<()> {
        let classes: Api<IngressClass> = Api::all(self.client.clone());
        let class = serde_json::from_value(json!({
            "metadata": {"name": self.class},
            "spec": {"controller": "kura.dev/sim-ingress"},
        }))?;
        classes.create(&PostParams::default(), &class).await?;
        Ok(())
    }

    async fn create_namespaces(&self) -> BenchResult<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in self.all_namespaces() {
            let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
            namespaces.create(&PostParams::default(), &ns).await?;
        }
        Ok(())
    }

    /// A namespace of a references run (removed by the run itself).
    pub async fn create_namespace(&self, name: &str) -> BenchResult<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
        Ok(())
    }

    /// The namespaces of the fleet based at `base` (`direct_ns` or
    /// `operator_ns`): that one, or `<base>-0` … when spread.
    pub fn namespaces_of(&self, base: &str) -> Vec<String> {
        (0..self.spread)
            .map(|k| self.namespace_at(base, k))
            .collect()
    }

    /// Instance `i`'s namespace in the fleet based at `base`: the instances
    /// are dealt over the namespaces in turn.
    pub fn namespace_of(&self, base: &str, i: usize) -> String {
        self.namespace_at(base, i % self.spread)
    }

    fn namespace_at(&self, base: &str, k: usize) -> String {
        if self.spread == 1 {
            base.to_string()
        } else {
            format!("{base}-{k}")
        }
    }

    /// Every namespace of both fleets.
    pub fn all_namespaces(&self) -> Vec<String> {
        let mut all = self.namespaces_of(&self.direct_ns);
        all.extend(self.namespaces_of(&self.operator_ns));
        all
    }

    /// The operator configuration of the create, change and preview phases;
    /// `version` picks the region's domain, so that changing it changes every
    /// host, and with it every instance's revision and pod template.
    ///
    /// `maxUnavailable: 100%`: the fleet budget (`kura_core::rollout`)
    /// would otherwise pace the change phase's restarts (its default
    /// is 25%), and its time would measure the budget, not the operator's apply
    /// path, and no longer compare with the direct client or with the runs
    /// recorded before the budget existed. The budget phase measures the budget.
    pub fn config(&self, version: u32) -> String {
        self.config_with_budget(version, "100%")
    }

    /// The configuration with `rollout.maxUnavailable` set to `max_unavailable`.
    /// The endpoint check is off: kura-sim serves the region's class, at an
    /// address where nothing answers.
    pub fn config_with_budget(&self, version: u32, max_unavailable: &str) -> String {
        let endpoint_check = if self.endpoint_check_setting {
            "    endpointCheck: {enabled: false}\n"
        } else {
            ""
        };
        format!(
            "gateway:\n  image: registry.example/gateway:1.0.0\n  controller: kura.dev/sim-ingress\n  replicas: 1\n\
             regions:\n  {REGION}:\n    network: host\n    sharedIngressClass: {}\n    domain: v{version}.bench.kura.test\n\
             {endpoint_check}\
             rollout:\n  maxUnavailable: \"{max_unavailable}\"\n",
            self.class
        )
    }

    pub fn instance_name(i: usize) -> String {
        format!("kb-{i:05}")
    }

    pub fn instance(namespace: &str, i: usize) -> serde_json::Value {
        let name = Self::instance_name(i);
        json!({
            "apiVersion": "kura.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "account": name,
                "region": REGION,
                "image": "registry.example/kura:1.0.0",
                "storage": {"size": "1Gi"},
            },
        })
    }

    /// The bench's kubeconfig impersonating `user` with the bench user's
    /// powers (system:masters on the local plane): the audit log then names
    /// `user` as the impersonated user of every request made with it.
    pub fn kubeconfig_as(&self, user: &str) -> BenchResult<PathBuf> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        let mut kc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let users = kc["users"]
            .as_sequence_mut()
            .ok_or("the kubeconfig has no users")?;
        for u in users {
            u["user"]["as"] = user.into();
            u["user"]["as-groups"] = serde_yaml::to_value(["system:masters"])?;
        }
        let path = self.workdir.join(format!("{user}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&kc)?)?;
        Ok(path)
    }

    /// Delete what setup created and wait (bounded) until the namespaces are gone,
    /// so the garbage collection of a run does not load the next one.
    pub async fn cleanup(&self) {
        let classes: Api<IngressClass> = Api::all(self.client.clone());
        self.delete_namespaces(&self.all_namespaces()).await;
        let _ = classes.delete(&self.class, &DeleteParams::default()).await;
        self.wait_gone(&self.all_namespaces(), Duration::from_secs(600))
            .await;
    }

    /// Delete `names` (their objects go with them, by the namespace controller).
    pub async fn delete_namespaces(&self, names: &[String]) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in names {
            let _ = namespaces.delete(name, &DeleteParams::background()).await;
        }
    }

    /// Until the namespaces `names` are gone (at most `limit`): whether they are.
    pub async fn wait_gone(&self, names: &[String], limit: Duration) -> bool {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let start = Instant::now();
        loop {
            let mut left = Vec::new();
            for name in names {
                if !matches!(namespaces.get_opt(name).await, Ok(None)) {
                    left.push(name.as_str());
                }
            }
            if left.is_empty() {
                eprintln!(
                    "kura-bench: cleaned up in {:.0}s",
                    start.elapsed().as_secs_f64()
                );
                return true;
            }
            if start.elapsed() > limit {
                eprintln!(
                    "kura-bench: namespaces {left:?} still terminating after {limit:?}; left to the namespace controller"
                );
                return false;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}
