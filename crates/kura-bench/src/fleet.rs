//! What the bench watches of a fleet (instances, StatefulSets, and the
//! metadata of every other child kind), and the conditions it waits for. Watches,
//! not polled lists: a list of 1000 instances every 100 ms would load the
//! apiserver being measured.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
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

use kura_core::api::conditions::{READY, is_true};
use kura_core::api::{KuraInstance, Phase};
use kura_core::config::OperatorConfig;
use kura_core::keys::{ANNOTATION_REVISION, LABEL_MANAGED_BY, MANAGED_BY_VALUE};

use crate::BenchResult;
use crate::cluster::Bench;

/// A child of a kind by (namespace, name): its `kura.dev/revision` stamp
/// (empty without one), or None when it does not exist.
type Stamp = Box<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

/// Changes (watch events adding or modifying an object, each a write to etcd)
/// seen since the watches started, by kind.
type Writes = Arc<Mutex<BTreeMap<String, u64>>>;

fn stamp_of(meta: &kube::api::ObjectMeta) -> String {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REVISION))
        .cloned()
        .unwrap_or_default()
}

pub struct Watched {
    /// The fleet's namespaces: one (watched in it), or many (watched across
    /// the cluster, and every count kept to them).
    namespaces: BTreeSet<String>,
    pub instances: Store<KuraInstance>,
    pub stateful_sets: Store<StatefulSet>,
    exists: BTreeMap<&'static str, Stamp>,
    writes: Writes,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A reflector of `api`, counting in `writes` the changes of objects in
/// `namespaces` (not those of the initial list).
fn spawn<K>(
    api: Api<K>,
    wc: watcher::Config,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    writes: &Writes,
    namespaces: &BTreeSet<String>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, wc).default_backoff());
    let (kind, writes, namespaces) = (K::kind(&()).to_string(), writes.clone(), namespaces.clone());
    tasks.push(tokio::spawn(stream.for_each(move |event| {
        if let Ok(watcher::Event::Apply(o)) = &event
            && o.meta()
                .namespace
                .as_ref()
                .is_some_and(|ns| namespaces.contains(ns))
        {
            *writes
                .lock()
                .expect("writes")
                .entry(kind.clone())
                .or_default() += 1;
        }
        async {}
    })));
    reader
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"))
}

/// A namespaced API in the one namespace of a fleet, else across the cluster.
fn api<K>(client: &Client, namespaces: &BTreeSet<String>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespaces.iter().next() {
        Some(ns) if namespaces.len() == 1 => Api::namespaced(client.clone(), ns),
        _ => Api::all(client.clone()),
    }
}

impl Watched {
    pub async fn start(client: &Client, namespaces: &[String]) -> BenchResult<Watched> {
        let namespaces: BTreeSet<String> = namespaces.iter().cloned().collect();
        let mut tasks = Vec::new();
        let writes = Writes::default();
        let instances = spawn(
            api(client, &namespaces),
            watcher::Config::default(),
            &mut tasks,
            &writes,
            &namespaces,
        );
        let stateful_sets = spawn(
            api(client, &namespaces),
            managed(),
            &mut tasks,
            &writes,
            &namespaces,
        );
        let mut w = Watched {
            namespaces,
            instances,
            stateful_sets,
            exists: BTreeMap::new(),
            writes,
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
        w.exists.insert(
            "StatefulSet",
            Box::new(move |ns, name| {
                sts.get(&ObjectRef::new(name).within(ns))
                    .map(|o| stamp_of(&o.metadata))
            }),
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
        let api: Api<PartialObjectMeta<K>> = api(client, &self.namespaces);
        let store = spawn(
            api,
            managed(),
            &mut self.tasks,
            &self.writes,
            &self.namespaces,
        );
        store.wait_until_ready().await?;
        self.exists.insert(
            static_kind(K::kind(&()).as_ref()),
            Box::new(move |ns, name| {
                store
                    .get(&ObjectRef::new(name).within(ns))
                    .map(|o| stamp_of(&o.metadata))
            }),
        );
        Ok(())
    }

    fn child_exists(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.stamp(kind, namespace, name).is_some()
    }

    /// A child's `kura.dev/revision` stamp; None when it does not exist.
    pub fn stamp(&self, kind: &str, namespace: &str, name: &str) -> Option<String> {
        self.exists.get(kind).and_then(|f| f(namespace, name))
    }

    /// The changes seen so far, by kind (`Writes`).
    pub fn writes(&self) -> BTreeMap<String, u64> {
        self.writes.lock().expect("writes").clone()
    }

    /// Instances all of whose children exist.
    pub fn children_exist(&self, expected: &[Expected]) -> usize {
        expected
            .iter()
            .filter(|e| {
                e.children
                    .iter()
                    .all(|(k, n)| self.child_exists(k, &e.namespace, n))
            })
            .count()
    }

    fn instance(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<KuraInstance>> {
        self.instances.get(&ObjectRef::new(name).within(namespace))
    }

    /// The fleet's own objects of a store (a cluster-wide watch sees others).
    fn ours<K: Resource + Clone>(&self, store: &Store<K>) -> Vec<std::sync::Arc<K>>
    where
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        store
            .state()
            .into_iter()
            .filter(|o| {
                o.meta()
                    .namespace
                    .as_ref()
                    .is_some_and(|ns| self.namespaces.contains(ns))
            })
            .collect()
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
                let Some(status) = self
                    .instance(&e.namespace, &e.name)
                    .and_then(|i| i.status.clone())
                else {
                    return false;
                };
                let applied = status.applied_revision.as_deref();
                applied.is_some()
                    && applied == status.desired_revision.as_deref()
                    && previous.is_none_or(|p| p.get(&e.name).map(String::as_str) != applied)
                    && e.children
                        .iter()
                        .all(|(k, n)| self.child_exists(k, &e.namespace, n))
            })
            .count()
    }

    /// By instance name (unique across the fleet's namespaces).
    pub fn applied_revisions(&self) -> HashMap<String, String> {
        self.ours(&self.instances)
            .iter()
            .filter_map(|i| {
                let rev = i.status.as_ref()?.applied_revision.clone()?;
                Some((i.metadata.name.clone()?, rev))
            })
            .collect()
    }

    pub fn ready_instances(&self) -> usize {
        self.ours(&self.instances)
            .iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
            .count()
    }

    /// Instances whose Ready condition is not True: what the fleet budget
    /// calls unavailable.
    pub fn unavailable_instances(&self) -> usize {
        self.ours(&self.instances)
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
        self.ours(&self.stateful_sets)
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
        self.ours(&self.stateful_sets)
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
    pub namespace: String,
    pub name: String,
    pub children: Vec<(String, String)>,
}

/// The children each of the N instances must have, from the operator's own
/// renderer (names do not depend on the configuration or the uid); instance
/// `i` is in `namespace_of(i)`.
pub fn expected(
    namespace_of: impl Fn(usize) -> String,
    n: usize,
    config: &OperatorConfig,
) -> BenchResult<Vec<Expected>> {
    (0..n)
        .map(|i| {
            let namespace = namespace_of(i);
            let instance: KuraInstance = serde_json::from_value(Bench::instance(&namespace, i))?;
            let valid = kura_core::validate::validate(&instance, config)
                .map_err(|e| format!("bench instance {i} is invalid: {e}"))?;
            let desired = kura_core::render::render(&valid, config);
            Ok(Expected {
                namespace,
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
