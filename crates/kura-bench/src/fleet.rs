//! What the bench watches in a namespace (instances, StatefulSets, and the
//! metadata of every other child kind), and the conditions it waits for. Watches,
//! not polled lists: a list of 1000 instances every 100 ms would load the
//! apiserver being measured.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use kura_operator::api::conditions::{READY, is_true};
use kura_operator::api::{KuraInstance, Phase};
use kura_operator::config::OperatorConfig;
use kura_operator::keys::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};

use crate::BenchResult;
use crate::cluster::Bench;

type Exists = Box<dyn Fn(&str) -> bool + Send + Sync>;

pub struct Watched {
    namespace: String,
    pub instances: Store<KuraInstance>,
    pub stateful_sets: Store<StatefulSet>,
    exists: BTreeMap<&'static str, Exists>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn spawn<K>(
    api: Api<K>,
    wc: watcher::Config,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, wc).default_backoff());
    tasks.push(tokio::spawn(stream.for_each(|_| async {})));
    reader
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"))
}

impl Watched {
    pub async fn start(client: &Client, namespace: &str) -> BenchResult<Watched> {
        let mut tasks = Vec::new();
        let instances = spawn(
            Api::namespaced(client.clone(), namespace),
            watcher::Config::default(),
            &mut tasks,
        );
        let stateful_sets = spawn(
            Api::namespaced(client.clone(), namespace),
            managed(),
            &mut tasks,
        );
        let mut w = Watched {
            namespace: namespace.to_string(),
            instances,
            stateful_sets,
            exists: BTreeMap::new(),
            tasks,
        };
        w.meta::<ServiceAccount>(client).await?;
        w.meta::<ConfigMap>(client).await?;
        w.meta::<Service>(client).await?;
        w.meta::<PodDisruptionBudget>(client).await?;
        w.meta::<NetworkPolicy>(client).await?;
        w.meta::<Ingress>(client).await?;
        w.instances.wait_until_ready().await?;
        w.stateful_sets.wait_until_ready().await?;
        let sts = w.stateful_sets.clone();
        let ns = w.namespace.clone();
        w.exists.insert(
            "StatefulSet",
            Box::new(move |name| sts.get(&ObjectRef::new(name).within(&ns)).is_some()),
        );
        Ok(w)
    }

    async fn meta<K>(&mut self, client: &Client) -> BenchResult<()>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
    {
        let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), &self.namespace);
        let store = spawn(api, managed(), &mut self.tasks);
        store.wait_until_ready().await?;
        let ns = self.namespace.clone();
        self.exists.insert(
            static_kind(K::kind(&()).as_ref()),
            Box::new(move |name| store.get(&ObjectRef::new(name).within(&ns)).is_some()),
        );
        Ok(())
    }

    fn child_exists(&self, kind: &str, name: &str) -> bool {
        self.exists.get(kind).is_some_and(|f| f(name))
    }

    fn instance(&self, name: &str) -> Option<std::sync::Arc<KuraInstance>> {
        self.instances
            .get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// Instances whose applied revision equals the desired one (and, when
    /// `previous` is given, differs from what it was then) and whose children all
    /// exist.
    pub fn converged(
        &self,
        expected: &[Expected],
        previous: Option<&HashMap<String, String>>,
    ) -> usize {
        expected
            .iter()
            .filter(|e| {
                let Some(status) = self.instance(&e.name).and_then(|i| i.status.clone()) else {
                    return false;
                };
                let applied = status.applied_revision.as_deref();
                applied.is_some()
                    && applied == status.desired_revision.as_deref()
                    && previous.is_none_or(|p| p.get(&e.name).map(String::as_str) != applied)
                    && e.children.iter().all(|(k, n)| self.child_exists(k, n))
            })
            .count()
    }

    pub fn applied_revisions(&self) -> HashMap<String, String> {
        self.instances
            .state()
            .iter()
            .filter_map(|i| {
                let rev = i.status.as_ref()?.applied_revision.clone()?;
                Some((i.metadata.name.clone()?, rev))
            })
            .collect()
    }

    pub fn ready_instances(&self) -> usize {
        self.instances
            .state()
            .iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
            .count()
    }

    /// Instances whose Ready condition is not True: what the fleet budget
    /// calls unavailable.
    pub fn unavailable_instances(&self) -> usize {
        self.instances
            .state()
            .iter()
            .filter(|i| {
                !i.status
                    .as_ref()
                    .is_some_and(|s| is_true(&s.conditions, READY))
            })
            .count()
    }

    /// StatefulSets with fewer ready replicas than they want: the pods' view
    /// of unavailability, ahead of the instances' conditions.
    pub fn stateful_sets_not_ready(&self) -> usize {
        self.stateful_sets
            .state()
            .iter()
            .filter(|s| {
                let want = s.spec.as_ref().and_then(|p| p.replicas).unwrap_or(1);
                s.status
                    .as_ref()
                    .and_then(|st| st.ready_replicas)
                    .unwrap_or(0)
                    < want
            })
            .count()
    }

    /// StatefulSets whose rollout finished: every replica updated and ready.
    pub fn rolled_out(&self) -> usize {
        self.stateful_sets
            .state()
            .iter()
            .filter(|s| {
                let want = s.spec.as_ref().and_then(|p| p.replicas).unwrap_or(1);
                let Some(st) = &s.status else { return false };
                st.observed_generation == s.metadata.generation
                    && st.replicas == want
                    && st.ready_replicas == Some(want)
                    && st.updated_replicas == Some(want)
                    && st.current_revision == st.update_revision
            })
            .count()
    }
}

/// `Resource::kind` is a `Cow`; the map is keyed by the few kind names the bench
/// watches, as `'static` strings.
fn static_kind(kind: &str) -> &'static str {
    [
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "Ingress",
    ]
    .into_iter()
    .find(|k| *k == kind)
    .expect("a child kind the bench watches")
}

/// An instance and the children (kind, name) its rendering has.
pub struct Expected {
    pub name: String,
    pub children: Vec<(String, String)>,
}

/// The children each of the N instances must have, from the operator's own
/// renderer (names do not depend on the configuration or the uid).
pub fn expected(namespace: &str, n: usize, config: &OperatorConfig) -> BenchResult<Vec<Expected>> {
    (0..n)
        .map(|i| {
            let instance: KuraInstance = serde_json::from_value(Bench::instance(namespace, i))?;
            let valid = kura_operator::validate::validate(&instance, config)
                .map_err(|e| format!("bench instance {i} is invalid: {e}"))?;
            let desired = kura_operator::render::render(&valid, config);
            Ok(Expected {
                name: valid.name.clone(),
                children: desired
                    .objects
                    .iter()
                    .map(|o| (o.id.kind.kind().to_string(), o.id.name.clone()))
                    .collect(),
            })
        })
        .collect()
}

/// Poll `done` (which returns how many of `total` are done) every 100 ms until all
/// are; prints progress every 10 s. Returns the instant the condition held.
pub async fn wait_all(
    what: &str,
    total: usize,
    timeout: Duration,
    mut done: impl FnMut() -> usize,
) -> BenchResult<Instant> {
    let start = Instant::now();
    let mut last_print = start;
    loop {
        let d = done();
        if d >= total {
            return Ok(Instant::now());
        }
        if start.elapsed() > timeout {
            return Err(format!("{what}: {d}/{total} after {timeout:?}").into());
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "kura-bench:   {what}: {d}/{total} after {:.0}s",
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
