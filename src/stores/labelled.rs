//! The children the caches hold, by the instance they are labelled as, kept
//! up to date per watch event. `observe` looks up an instance's labelled
//! children on every reconcile (what an interrupted apply created is found
//! that way, whatever the inventory says); scanning every cached child of
//! every kind for the label made each reconcile cost O(fleet), and a fleet's
//! reconciles O(fleet²): at 1000 instances that scan was most of the
//! operator's CPU time (docs/benchmarks.md, scale findings of 2026-12-01).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use super::cached::CachedObject;

use kura_core::keys::LABEL_INSTANCE;
use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

/// (namespace, the instance the label names).
type Owner = (String, String);

#[derive(Debug, Default)]
pub struct Labelled {
    inner: Mutex<Inner>,
}

/// Both maps share each id and each owner (`Arc`s): the index of a thousand
/// instances' seven thousand children stays near a megabyte.
#[derive(Debug, Default)]
struct Inner {
    /// A handful of children per instance: a list, searched in place.
    by_instance: HashMap<Arc<Owner>, Vec<Arc<ObjectId>>>,
    /// What each indexed object was labelled as, so that a relabelled or
    /// deleted object leaves its former instance's list.
    label_of: HashMap<Arc<ObjectId>, Arc<Owner>>,
}

/// The object's id and the instance it is labelled as, if it is.
fn labelled<C: CachedObject>(kind: ChildKind, object: &C) -> (ObjectId, Option<Owner>) {
    let namespace = object.namespace().map(|ns| ns.into_owned());
    let owner = namespace.as_ref().and_then(|ns| {
        let instance = object.label(LABEL_INSTANCE)?;
        Some((ns.clone(), instance.to_string()))
    });
    let id = ObjectId {
        kind,
        namespace,
        name: object.name().unwrap_or_default().into_owned(),
    };
    (id, owner)
}

impl Inner {
    fn remove(&mut self, id: &ObjectId) {
        if let Some(owner) = self.label_of.remove(id)
            && let Some(ids) = self.by_instance.get_mut(&owner)
        {
            ids.retain(|i| **i != *id);
            if ids.is_empty() {
                self.by_instance.remove(&owner);
            }
        }
    }

    fn put<C: CachedObject>(&mut self, kind: ChildKind, object: &C) {
        let (id, owner) = labelled(kind, object);
        if self.label_of.get(&id).map(|o| &**o) == owner.as_ref() {
            // Most events are status or spec changes: the label stays.
            return;
        }
        self.remove(&id);
        let Some(owner) = owner else {
            return;
        };
        let id = Arc::new(id);
        let owner = match self.by_instance.get_key_value(&owner) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(owner),
        };
        self.by_instance
            .entry(owner.clone())
            .or_default()
            .push(id.clone());
        self.label_of.insert(id, owner);
    }
}

impl Labelled {
    /// After the reflector of `kind` applied `event` to `store` (which holds
    /// the objects in the form its cache keeps them).
    pub fn event<K: CachedObject, C: CachedObject>(
        &self,
        kind: ChildKind,
        store: &Store<C>,
        event: &watcher::Event<K>,
    ) {
        match event {
            watcher::Event::Apply(o) => self.inner.lock().unwrap().put(kind, o),
            watcher::Event::Delete(o) => {
                let (id, _) = labelled(kind, o);
                self.inner.lock().unwrap().remove(&id);
            }
            // The store was replaced by a fresh list: so is this kind's part.
            watcher::Event::InitDone => self.reset(kind, store),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }

    /// Index every object of `kind` in `store` anew.
    pub fn reset<C: CachedObject>(&self, kind: ChildKind, store: &Store<C>) {
        let all = store.state();
        let mut inner = self.inner.lock().unwrap();
        let stale: Vec<Arc<ObjectId>> = inner
            .label_of
            .keys()
            .filter(|id| id.kind == kind)
            .cloned()
            .collect();
        for id in &stale {
            inner.remove(id);
        }
        for object in &all {
            inner.put(kind, &**object);
        }
    }

    /// Every indexed object labelled as the instance `name` of `namespace`.
    pub fn of(&self, namespace: &str, name: &str) -> Vec<ObjectId> {
        let key = (namespace.to_string(), name.to_string());
        self.inner
            .lock()
            .unwrap()
            .by_instance
            .get(&key)
            .map(|ids| ids.iter().map(|id| (**id).clone()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::Labelled;
    use kura_core::kind::ChildKind;

    fn config_map(name: &str, instance: Option<&str>) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.name = Some(name.into());
        cm.metadata.labels =
            instance.map(|i| [("kura.dev/instance".to_string(), i.to_string())].into());
        cm
    }

    fn names(index: &Labelled, instance: &str) -> Vec<String> {
        index
            .of("ns", instance)
            .into_iter()
            .map(|id| id.name)
            .collect()
    }

    #[test]
    fn follows_applies_relabels_deletes_and_relists() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let index = Labelled::default();
        let mut apply = |event: Event<ConfigMap>| {
            writer.apply_watcher_event(&event);
            index.event(ChildKind::ConfigMap, &store, &event);
        };
        apply(Event::Apply(config_map("a", Some("one"))));
        apply(Event::Apply(config_map("b", Some("one"))));
        apply(Event::Apply(config_map("unlabelled", None)));
        assert_eq!(names(&index, "one"), ["a", "b"]);
        // Relabelled: it leaves the first instance's set.
        apply(Event::Apply(config_map("b", Some("two"))));
        assert_eq!(names(&index, "one"), ["a"]);
        assert_eq!(names(&index, "two"), ["b"]);
        apply(Event::Delete(config_map("a", Some("one"))));
        assert!(names(&index, "one").is_empty());
        // Another namespace is another instance.
        assert!(index.of("elsewhere", "two").is_empty());
        // A relist replaces what the kind had: "b" is gone, "c" is new.
        apply(Event::Init);
        apply(Event::InitApply(config_map("c", Some("two"))));
        apply(Event::InitDone);
        assert_eq!(names(&index, "two"), ["c"]);
    }

    #[test]
    fn a_relist_of_one_kind_leaves_the_others() {
        let (cms, mut cm_writer) = reflector::store::<ConfigMap>();
        let index = Labelled::default();
        let cm = config_map("x", Some("one"));
        cm_writer.apply_watcher_event(&Event::Apply(cm.clone()));
        index.event(ChildKind::ConfigMap, &cms, &Event::Apply(cm.clone()));
        index.event(ChildKind::Service, &cms, &Event::Apply(cm));
        let (empty, _) = reflector::store::<ConfigMap>();
        index.reset(ChildKind::Service, &empty);
        let kinds: Vec<ChildKind> = index
            .of("ns", "one")
            .into_iter()
            .map(|id| id.kind)
            .collect();
        assert_eq!(kinds, [ChildKind::ConfigMap]);
    }
}
