//! The form the caches keep an instance's children in.
//!
//! The caches of the children whose content no decision reads (Services,
//! ConfigMaps, ServiceAccounts, PodDisruptionBudgets, NetworkPolicies: five
//! of an instance's seven) held them as `PartialObjectMeta`, and the
//! StatefulSets and Ingresses as typed objects, whose shape costs more than
//! what it holds: an `ObjectMeta` is about 400 bytes before
//! any field is set, a label or annotation map with two entries allocates a
//! B-tree leaf with room for eleven (about 540 bytes), each object carries
//! its `TypeMeta` strings, and kube's store keys copy the uid and the
//! resourceVersion of every object once more. [`CachedMeta`] keeps the same
//! metadata in boxed slices and strings of exactly their length, and
//! [`CachedObject::metadata`] gives it back as the very `ObjectMeta` it was
//! made of (`metadata_round_trips`); a [`CachedStatefulSet`] and a
//! [`CachedIngress`] keep beside it what the cache keeps of the rest, and
//! give the typed object back. Readers go through [`CachedObject`] and
//! `Stores`, so a decision never knows which form its cache holds.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::networking::v1::{Ingress, IngressSpec, IngressStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher::Event;

/// Labels or annotations, sorted by key as the map they came from.
type Pairs = Box<[(Box<str>, Box<str>)]>;

/// What a cache holds of one object, whatever its form: the typed object
/// itself, or [`CachedMeta`].
pub trait CachedObject: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static {
    /// The object's metadata, as the cache has it.
    fn metadata(&self) -> ObjectMeta;
    /// The value of one of its labels.
    fn label(&self, key: &str) -> Option<&str>;
}

impl<K> CachedObject for K
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    fn metadata(&self) -> ObjectMeta {
        self.meta().clone()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// An object of kind `K` as its cache keeps it: its metadata, compactly
/// (module documentation), and `body`, what the cache keeps of the rest.
pub struct Cached<K, B = ()> {
    name: Option<Box<str>>,
    namespace: Option<Box<str>>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    labels: Option<Pairs>,
    annotations: Option<Pairs>,
    owner_references: Option<Box<[OwnerReference]>>,
    managed_fields: Option<Box<[Manager]>>,
    /// The fields an object has only while it is deleted, or when made by
    /// hand: one pointer when absent, as they nearly always are.
    rare: Option<Box<Rare>>,
    body: B,
    kind: PhantomData<fn() -> K>,
}

/// The metadata of an object of kind `K`, and nothing else of it.
pub type CachedMeta<K> = Cached<K, ()>;

/// A `ManagedFieldsEntry`, its strings of exactly their length.
#[derive(Clone, Debug, PartialEq)]
struct Manager {
    api_version: Option<Box<str>>,
    fields_type: Option<Box<str>>,
    fields_v1: Option<FieldsV1>,
    manager: Option<Box<str>>,
    operation: Option<Box<str>>,
    subresource: Option<Box<str>>,
    time: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Rare {
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    self_link: Option<String>,
}

// Derives would ask `K: Clone` (and `Debug`) of the phantom kind.
impl<K, B: Clone> Clone for Cached<K, B> {
    fn clone(&self) -> Self {
        Cached {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            generation: self.generation,
            creation_timestamp: self.creation_timestamp.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            owner_references: self.owner_references.clone(),
            managed_fields: self.managed_fields.clone(),
            rare: self.rare.clone(),
            body: self.body.clone(),
            kind: PhantomData,
        }
    }
}

impl<K, B: std::fmt::Debug> std::fmt::Debug for Cached<K, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("metadata", &self.object_meta())
            .field("body", &self.body)
            .finish()
    }
}

fn boxed(s: Option<String>) -> Option<Box<str>> {
    s.map(String::into_boxed_str)
}

fn unboxed(s: &Option<Box<str>>) -> Option<String> {
    s.as_deref().map(str::to_string)
}

fn pairs(map: Option<BTreeMap<String, String>>) -> Option<Pairs> {
    map.map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect()
    })
}

fn map(pairs: &Option<Pairs>) -> Option<BTreeMap<String, String>> {
    pairs.as_ref().map(|p| {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

impl Manager {
    fn new(m: ManagedFieldsEntry) -> Manager {
        Manager {
            api_version: boxed(m.api_version),
            fields_type: boxed(m.fields_type),
            fields_v1: m.fields_v1,
            manager: boxed(m.manager),
            operation: boxed(m.operation),
            subresource: boxed(m.subresource),
            time: m.time,
        }
    }

    fn entry(&self) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: unboxed(&self.api_version),
            fields_type: unboxed(&self.fields_type),
            fields_v1: self.fields_v1.clone(),
            manager: unboxed(&self.manager),
            operation: unboxed(&self.operation),
            subresource: unboxed(&self.subresource),
            time: self.time.clone(),
        }
    }
}

impl<K> CachedMeta<K> {
    /// The cached form of `meta` (already trimmed as the kind's cache keeps it).
    pub fn new(meta: ObjectMeta) -> CachedMeta<K> {
        Cached::with(meta, ())
    }
}

impl<K, B> Cached<K, B> {
    /// `meta` (already trimmed as the kind's cache keeps it) and `body`.
    fn with(meta: ObjectMeta, body: B) -> Cached<K, B> {
        let rare = Rare {
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            generate_name: meta.generate_name,
            self_link: meta.self_link,
        };
        Cached {
            name: boxed(meta.name),
            namespace: boxed(meta.namespace),
            uid: boxed(meta.uid),
            resource_version: boxed(meta.resource_version),
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp,
            labels: pairs(meta.labels),
            annotations: pairs(meta.annotations),
            owner_references: meta.owner_references.map(Vec::into_boxed_slice),
            managed_fields: meta
                .managed_fields
                .map(|entries| entries.into_iter().map(Manager::new).collect()),
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
            body,
            kind: PhantomData,
        }
    }

    /// The metadata it was made of.
    fn object_meta(&self) -> ObjectMeta {
        let rare = self.rare.as_deref().cloned().unwrap_or_default();
        ObjectMeta {
            annotations: map(&self.annotations),
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_grace_period_seconds: rare.deletion_grace_period_seconds,
            deletion_timestamp: rare.deletion_timestamp,
            finalizers: rare.finalizers,
            generate_name: rare.generate_name,
            generation: self.generation,
            labels: map(&self.labels),
            managed_fields: self
                .managed_fields
                .as_ref()
                .map(|m| m.iter().map(Manager::entry).collect()),
            name: unboxed(&self.name),
            namespace: unboxed(&self.namespace),
            owner_references: self.owner_references.as_ref().map(|r| r.to_vec()),
            resource_version: unboxed(&self.resource_version),
            self_link: rare.self_link,
            uid: unboxed(&self.uid),
        }
    }
}

/// A watch event of `K`, its objects as `cached` makes them for the cache.
pub fn event<K, C>(event: &Event<K>, cached: impl Fn(&K) -> C) -> Event<C> {
    match event {
        Event::Apply(o) => Event::Apply(cached(o)),
        Event::Delete(o) => Event::Delete(cached(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(cached(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// The cached form of a metadata-only object.
pub fn meta_of<K>(object: &PartialObjectMeta<K>) -> CachedMeta<K> {
    CachedMeta::new(object.metadata.clone())
}

/// A StatefulSet as its cache keeps it: what `cached_sts::compact` leaves of
/// it (its metadata, the replica count, the kept annotations of its pod
/// template and its status). The typed object it was made of is 2.6 KB before
/// any field is set, most of it the empty pod template.
pub type CachedStatefulSet = Cached<StatefulSet, Workload>;

/// What a [`CachedStatefulSet`] keeps besides its metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    spec: Option<WorkloadSpec>,
    status: Option<StatefulSetStatus>,
}

#[derive(Clone, Debug, PartialEq)]
struct WorkloadSpec {
    replicas: Option<i32>,
    /// The pod template's annotations, when it has metadata.
    template: Option<Pairs>,
}

impl CachedStatefulSet {
    /// The cached form of `sts`, as `cached_sts::compact` trimmed it.
    pub fn of(sts: &StatefulSet) -> CachedStatefulSet {
        let spec = sts.spec.as_ref().map(|spec| WorkloadSpec {
            replicas: spec.replicas,
            template: spec
                .template
                .metadata
                .as_ref()
                .map(|m| pairs(m.annotations.clone()).unwrap_or_default()),
        });
        let body = Workload {
            spec,
            status: sts.status.clone(),
        };
        Cached::with(sts.metadata.clone(), body)
    }

    /// `cached_sts::replicas` of it, without making the StatefulSet again
    /// (the fleet budget asks this of every instance).
    pub fn replicas(&self) -> (i32, i32) {
        kura_core::cached_sts::counts(
            self.body.spec.as_ref().and_then(|s| s.replicas),
            self.body.status.as_ref().and_then(|s| s.available_replicas),
        )
    }

    /// The trimmed StatefulSet it was made of.
    pub fn stateful_set(&self) -> StatefulSet {
        let spec = self.body.spec.as_ref().map(|spec| StatefulSetSpec {
            replicas: spec.replicas,
            template: PodTemplateSpec {
                metadata: spec.template.as_ref().map(|a| ObjectMeta {
                    annotations: map(&Some(a.clone())),
                    ..Default::default()
                }),
                spec: None,
            },
            ..Default::default()
        });
        StatefulSet {
            metadata: self.object_meta(),
            spec,
            status: self.body.status.clone(),
        }
    }
}

/// An Ingress as its cache keeps it: its metadata, compactly, and its spec
/// and status as they are (the host index and the probe read both).
pub type CachedIngress = Cached<Ingress, Routes>;

/// What a [`CachedIngress`] keeps besides its metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    spec: Option<IngressSpec>,
    status: Option<IngressStatus>,
}

impl CachedIngress {
    /// The cached form of `ingress`, as `compact::compact_child` trimmed it.
    pub fn of(ingress: &Ingress) -> CachedIngress {
        let body = Routes {
            spec: ingress.spec.clone(),
            status: ingress.status.clone(),
        };
        Cached::with(ingress.metadata.clone(), body)
    }

    /// Its `spec.ingressClassName`.
    pub fn class_name(&self) -> Option<&str> {
        self.body.spec.as_ref()?.ingress_class_name.as_deref()
    }

    /// The trimmed Ingress it was made of.
    pub fn ingress(&self) -> Ingress {
        Ingress {
            metadata: self.object_meta(),
            spec: self.body.spec.clone(),
            status: self.body.status.clone(),
        }
    }
}

/// Every Ingress of `store`, as the typed objects it was made of.
pub fn ingresses(store: &kube::runtime::reflector::Store<CachedIngress>) -> Vec<Ingress> {
    store.state().iter().map(|i| i.ingress()).collect()
}

impl<K, B> CachedObject for Cached<K, B>
where
    K: Resource<DynamicType = ()> + 'static,
    B: Clone + Send + Sync + 'static,
{
    fn metadata(&self) -> ObjectMeta {
        self.object_meta()
    }

    fn label(&self, key: &str) -> Option<&str> {
        let labels = self.labels.as_ref()?;
        let at = labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&labels[at].1)
    }
}

impl<K, B> Lookup for Cached<K, B>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        self.name.as_deref().map(Cow::Borrowed)
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }

    // The store copies these two into every key (`ObjectRef::extra`), where
    // neither its lookups nor its equality read them: they would be second
    // copies of strings the value holds. Read them from `metadata()`.
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::Ingress;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
    };
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher::Event;

    use super::{CachedIngress, CachedMeta, CachedObject, CachedStatefulSet};

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn labels(pairs: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// Every field of `ObjectMeta` set.
    fn full() -> ObjectMeta {
        ObjectMeta {
            annotations: labels(&[("kura.dev/revision", "abc"), ("kura.dev/x", "")]),
            creation_timestamp: Some(time("2026-12-03T08:00:00Z")),
            deletion_grace_period_seconds: Some(30),
            deletion_timestamp: Some(time("2026-12-03T09:00:00Z")),
            finalizers: Some(vec!["example.com/hold".into()]),
            generate_name: Some("acme-".into()),
            generation: Some(4),
            labels: labels(&[
                ("app.kubernetes.io/managed-by", "kura"),
                ("kura.dev/instance", "acme"),
            ]),
            managed_fields: Some(vec![ManagedFieldsEntry {
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(serde_json::json!("fingerprint"))),
                manager: Some("kura-operator".into()),
                operation: Some("Apply".into()),
                subresource: Some("status".into()),
                time: Some(time("2026-12-03T08:30:00Z")),
            }]),
            name: Some("acme".into()),
            namespace: Some("tenants".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "kura.dev/v1alpha1".into(),
                block_owner_deletion: Some(true),
                controller: Some(true),
                kind: "KuraInstance".into(),
                name: "acme".into(),
                uid: "0b5e".into(),
            }]),
            resource_version: Some("12345".into()),
            self_link: Some("/api/v1/namespaces/tenants/services/acme".into()),
            uid: Some("1c2d".into()),
        }
    }

    #[test]
    fn metadata_round_trips() {
        let live = ObjectMeta {
            name: Some("acme".into()),
            namespace: Some("tenants".into()),
            labels: Some(Default::default()),
            ..Default::default()
        };
        for meta in [full(), ObjectMeta::default(), live] {
            let cached = CachedMeta::<Service>::new(meta.clone());
            assert_eq!(cached.metadata(), meta);
        }
    }

    #[test]
    fn labels_are_found_by_key() {
        let cached = CachedMeta::<Service>::new(full());
        assert_eq!(cached.label("kura.dev/instance"), Some("acme"));
        assert_eq!(cached.label("app.kubernetes.io/managed-by"), Some("kura"));
        assert_eq!(cached.label("kura.dev/other"), None);
        assert_eq!(
            CachedMeta::<Service>::new(ObjectMeta::default()).label("a"),
            None
        );
    }

    #[test]
    fn is_smaller_than_the_metadata_it_keeps() {
        assert!(
            std::mem::size_of::<CachedMeta<Service>>() * 2 <= std::mem::size_of::<ObjectMeta>()
        );
    }

    /// What the reconcile reads of a StatefulSet comes back from its cache
    /// as `cached_sts::compact` left it.
    #[test]
    fn a_trimmed_stateful_set_round_trips() {
        let mut sts: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "t", "generation": 3,
                "labels": {"kura.dev/instance": "a"}, "annotations": {"kura.dev/revision": "r1"}},
            "spec": {
                "replicas": 3, "serviceName": "a", "selector": {"matchLabels": {"app": "a"}},
                "template": {
                    "metadata": {"annotations": {"kura.dev/pod-template-hash": "p1"}},
                    "spec": {"containers": [{"name": "kura", "image": "k:1"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "5Gi"}}}}],
            },
            "status": {"replicas": 3, "availableReplicas": 2, "observedGeneration": 3,
                "updateRevision": "a-1", "currentRevision": "a-0"},
        }))
        .unwrap();
        kura_core::cached_sts::compact(&mut sts);
        let cached = CachedStatefulSet::of(&sts);
        assert_eq!(cached.stateful_set(), sts);
        assert_eq!(
            kura_core::cached_sts::image(&cached.stateful_set()),
            Some("k:1")
        );
        assert_eq!(cached.replicas(), kura_core::cached_sts::replicas(&sts));
        assert_eq!(
            CachedStatefulSet::of(&StatefulSet::default()).replicas(),
            (1, 0)
        );
        assert_eq!(cached.label("kura.dev/instance"), Some("a"));
        let bare = StatefulSet::default();
        assert_eq!(CachedStatefulSet::of(&bare).stateful_set(), bare);
        assert!(std::mem::size_of::<CachedStatefulSet>() * 4 < std::mem::size_of::<StatefulSet>());
    }

    #[test]
    fn an_ingress_round_trips() {
        let ingress: Ingress = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "t", "labels": {"kura.dev/instance": "a"}},
            "spec": {"ingressClassName": "traefik", "rules": [{"host": "a.example.com"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}},
        }))
        .unwrap();
        let cached = CachedIngress::of(&ingress);
        assert_eq!(cached.ingress(), ingress);
        assert_eq!(cached.class_name(), Some("traefik"));
        assert_eq!(
            CachedIngress::of(&Ingress::default()).ingress(),
            Ingress::default()
        );
    }

    #[test]
    fn a_store_finds_cached_objects_by_name_and_namespace() {
        let (store, mut writer) = reflector::store::<CachedMeta<Service>>();
        writer.apply_watcher_event(&Event::Apply(CachedMeta::new(full())));
        let found = store
            .get(&ObjectRef::new("acme").within("tenants"))
            .expect("cached by its name and namespace");
        assert_eq!(found.metadata(), full());
        writer.apply_watcher_event(&Event::Delete(CachedMeta::new(full())));
        assert!(
            store
                .get(&ObjectRef::new("acme").within("tenants"))
                .is_none()
        );
    }
}
