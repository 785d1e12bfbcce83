//! The names of the objects the caches do not hold: those of the kinds the
//! operator caches by its label (`ChildKind::cached_by_label`) that do not
//! carry it. Someone else's object under a name the operator is about to
//! create is found here, before anything is written (`reconcile::apply`'s
//! name check), instead of by a read per name: at a thousand instances those
//! reads were seven thousand requests in a fleet's first apply.
//!
//! Kept from a metadata-only watch per kind that selects everything but the
//! operator's label, so it holds no object of the operator's; per object only
//! what decides whose it is (its controller and the hand-over annotation).
//! Until a kind has listed once, its names are unknown and are read instead.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use kura_core::api::{KuraGateway, KuraInstance};

use kura_core::keys::ANNOTATION_ADOPT;
use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

/// What decides whose an unlabelled object is (`observe::owner`).
#[derive(Clone, Debug, Default, PartialEq)]
struct Holder {
    controller: Option<OwnerReference>,
    adopt: Option<String>,
}

impl Holder {
    fn of(meta: &ObjectMeta) -> Holder {
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .cloned();
        let adopt = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_ADOPT))
            .cloned();
        Holder { controller, adopt }
    }

    /// The metadata `observe::owner` judges: only what it reads.
    fn meta(&self, id: &ObjectId) -> ObjectMeta {
        ObjectMeta {
            name: Some(id.name.clone()),
            namespace: id.namespace.clone(),
            owner_references: self.controller.clone().map(|r| vec![r]),
            annotations: self
                .adopt
                .clone()
                .map(|v| [(ANNOTATION_ADOPT.to_string(), v)].into()),
            ..ObjectMeta::default()
        }
    }
}

/// What the index knows of a name.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    /// The kind has not listed yet (or is not indexed): read the name.
    Unknown,
    /// No unlabelled object holds it, as of the last watch event.
    Free,
    /// An unlabelled object holds it; the metadata that says whose.
    Held(Box<ObjectMeta>),
}

#[derive(Debug, Default)]
pub struct ForeignNames {
    inner: RwLock<Inner>,
    /// Who waits for a name to be free (a name conflict's stall:
    /// `reconcile::name_wait`), woken when its watch says the name changed
    /// hands or was freed.
    waiters: Mutex<Waiters>,
}

/// One who waits for a name: an instance or a gateway, woken through its
/// controller's wake channel.
#[derive(Clone, Debug, PartialEq)]
pub enum Waiter {
    Instance(ObjectRef<KuraInstance>),
    Gateway(ObjectRef<KuraGateway>),
}

#[derive(Debug, Default)]
struct Waiters {
    by_name: HashMap<ObjectId, Vec<Waiter>>,
    instances: Option<UnboundedSender<ObjectRef<KuraInstance>>>,
    gateways: Option<UnboundedSender<ObjectRef<KuraGateway>>>,
}

#[derive(Debug, Default)]
struct Inner {
    names: HashMap<ObjectId, Holder>,
    /// Kinds that have listed at least once.
    listed: HashSet<ChildKind>,
    /// Every kind has listed once (said once, in the log).
    complete: bool,
    /// A relist in progress, per kind: swapped in when it is done, so that
    /// the names stay known while it runs.
    relisting: HashMap<ChildKind, Vec<(ObjectId, Holder)>>,
}

fn id_of(kind: ChildKind, meta: &ObjectMeta) -> ObjectId {
    ObjectId {
        kind,
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    }
}

impl ForeignNames {
    /// What is known of the name `id`.
    pub fn lookup(&self, id: &ObjectId) -> Lookup {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        if !inner.listed.contains(&id.kind) {
            return Lookup::Unknown;
        }
        match inner.names.get(id) {
            Some(holder) => Lookup::Held(Box::new(holder.meta(id))),
            None => Lookup::Free,
        }
    }

    /// Where to wake those who wait for a name (the controllers' wake channels).
    pub fn wake_through(
        &self,
        instances: Option<UnboundedSender<ObjectRef<KuraInstance>>>,
        gateways: Option<UnboundedSender<ObjectRef<KuraGateway>>>,
    ) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if instances.is_some() {
            waiters.instances = instances;
        }
        if gateways.is_some() {
            waiters.gateways = gateways;
        }
    }

    /// `waiter` waits for the names `ids` (those its apply found held): it is
    /// woken once, the first time the watch says one of them was deleted or
    /// changed (handed over, relabelled).
    pub fn wait_for(&self, ids: impl IntoIterator<Item = ObjectId>, waiter: &Waiter) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            let list = waiters.by_name.entry(id).or_default();
            if !list.contains(waiter) {
                list.push(waiter.clone());
            }
        }
    }

    /// The name `id` was deleted or changed: its waiters are woken (each
    /// decides from its caches whether the stall is over).
    fn changed(&self, id: &ObjectId) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if waiters.by_name.is_empty() {
            return;
        }
        let Some(woken) = waiters.by_name.remove(id) else {
            return;
        };
        for waiter in woken {
            // A controller that stopped no longer needs waking.
            match (waiter, &waiters.instances, &waiters.gateways) {
                (Waiter::Instance(r), Some(tx), _) => drop(tx.send(r)),
                (Waiter::Gateway(r), _, Some(tx)) => drop(tx.send(r)),
                _ => {}
            }
        }
    }

    /// Applies one event of `kind`'s watch; true when it completed the first
    /// listing of every kind the index keeps.
    pub fn event<K: Resource>(&self, kind: ChildKind, event: &watcher::Event<K>) -> bool {
        if let watcher::Event::Apply(o) | watcher::Event::Delete(o) = event {
            self.changed(&id_of(kind, o.meta()));
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(o) => {
                inner
                    .names
                    .insert(id_of(kind, o.meta()), Holder::of(o.meta()));
            }
            watcher::Event::Delete(o) => {
                inner.names.remove(&id_of(kind, o.meta()));
            }
            watcher::Event::Init => {
                inner.relisting.insert(kind, Vec::new());
            }
            watcher::Event::InitApply(o) => {
                let entry = (id_of(kind, o.meta()), Holder::of(o.meta()));
                inner.relisting.entry(kind).or_default().push(entry);
            }
            watcher::Event::InitDone => {
                let listed = inner.relisting.remove(&kind).unwrap_or_default();
                inner.names.retain(|id, _| id.kind != kind);
                inner.names.extend(listed);
                inner.listed.insert(kind);
                let every = ChildKind::ALL.into_iter().filter(|k| k.cached_by_label());
                if !inner.complete && every.clone().all(|k| inner.listed.contains(&k)) {
                    inner.complete = true;
                    return true;
                }
            }
        }
        false
    }

    /// How many names are held (for the memory figures).
    pub fn len(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Service = kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Service>;

    fn meta(name: &str, extra: serde_json::Value) -> Service {
        let mut m = json!({"name": name, "namespace": "t"});
        if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
            m.extend(extra.clone());
        }
        Service {
            metadata: serde_json::from_value(m).unwrap(),
            ..Service::default()
        }
    }

    fn id(name: &str) -> ObjectId {
        ObjectId {
            kind: ChildKind::Service,
            namespace: Some("t".into()),
            name: name.into(),
        }
    }

    fn listed(names: &ForeignNames, metas: &[Service]) {
        names.event(ChildKind::Service, &watcher::Event::<Service>::Init);
        for m in metas {
            names.event(ChildKind::Service, &watcher::Event::InitApply(m.clone()));
        }
        names.event(ChildKind::Service, &watcher::Event::<Service>::InitDone);
    }

    #[test]
    fn names_are_unknown_until_their_kind_listed() {
        let names = ForeignNames::default();
        assert_eq!(names.lookup(&id("a")), Lookup::Unknown);
        names.event(ChildKind::Service, &watcher::Event::<Service>::Init);
        names.event(
            ChildKind::Service,
            &watcher::Event::InitApply(meta("a", json!({}))),
        );
        assert_eq!(names.lookup(&id("a")), Lookup::Unknown, "still listing");
        names.event(ChildKind::Service, &watcher::Event::<Service>::InitDone);
        assert!(matches!(names.lookup(&id("a")), Lookup::Held(_)));
        assert_eq!(names.lookup(&id("b")), Lookup::Free);
        let other_kind = ObjectId {
            kind: ChildKind::ConfigMap,
            ..id("a")
        };
        assert_eq!(names.lookup(&other_kind), Lookup::Unknown);
    }

    #[test]
    fn a_held_name_keeps_what_says_whose_it_is() {
        let names = ForeignNames::default();
        let owned = meta(
            "a",
            json!({
                "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "x",
                                     "uid": "u1", "controller": true}],
                "annotations": {ANNOTATION_ADOPT: "acme", "big": "not kept"},
                "labels": {"app": "not kept"},
            }),
        );
        listed(&names, &[owned]);
        let Lookup::Held(held) = names.lookup(&id("a")) else {
            panic!("held")
        };
        assert_eq!(held.owner_references.unwrap()[0].uid, "u1");
        let annotations = held.annotations.unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations[ANNOTATION_ADOPT], "acme");
        assert!(held.labels.is_none());
    }

    #[test]
    fn watch_events_add_and_remove_names_and_a_relist_replaces_them() {
        let names = ForeignNames::default();
        listed(&names, &[meta("a", json!({}))]);
        names.event(
            ChildKind::Service,
            &watcher::Event::Apply(meta("b", json!({}))),
        );
        names.event(
            ChildKind::Service,
            &watcher::Event::Delete(meta("a", json!({}))),
        );
        assert_eq!(names.lookup(&id("a")), Lookup::Free);
        assert!(matches!(names.lookup(&id("b")), Lookup::Held(_)));
        // A relist (after the watch expired) drops what it no longer finds,
        // and the names stay known while it runs.
        names.event(ChildKind::Service, &watcher::Event::<Service>::Init);
        assert!(matches!(names.lookup(&id("b")), Lookup::Held(_)));
        names.event(
            ChildKind::Service,
            &watcher::Event::InitApply(meta("c", json!({}))),
        );
        names.event(ChildKind::Service, &watcher::Event::<Service>::InitDone);
        assert_eq!(names.lookup(&id("b")), Lookup::Free);
        assert!(matches!(names.lookup(&id("c")), Lookup::Held(_)));
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn those_waiting_for_a_name_are_woken_once_when_it_is_deleted_or_changed() {
        let names = ForeignNames::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        names.wake_through(Some(tx), None);
        listed(&names, &[meta("a", json!({})), meta("b", json!({}))]);
        let foo = ObjectRef::<KuraInstance>::new("foo").within("t");
        names.wait_for([id("a")], &Waiter::Instance(foo.clone()));
        // Another name changes: nobody is woken.
        names.event(
            ChildKind::Service,
            &watcher::Event::Delete(meta("b", json!({}))),
        );
        assert!(rx.try_recv().is_err());
        // Handed over (an annotation), then deleted: woken once.
        let handed = meta("a", json!({"annotations": {ANNOTATION_ADOPT: "foo"}}));
        names.event(ChildKind::Service, &watcher::Event::Apply(handed));
        assert_eq!(rx.try_recv().unwrap(), foo);
        names.event(
            ChildKind::Service,
            &watcher::Event::Delete(meta("a", json!({}))),
        );
        assert!(rx.try_recv().is_err(), "a waiter is woken once");
        // A gateway waits alike, woken through its own controller's channel.
        let (gtx, mut grx) = tokio::sync::mpsc::unbounded_channel();
        names.wake_through(None, Some(gtx));
        let gw = ObjectRef::<KuraGateway>::new("gw").within("t");
        names.wait_for([id("c")], &Waiter::Gateway(gw.clone()));
        names.event(
            ChildKind::Service,
            &watcher::Event::Delete(meta("c", json!({}))),
        );
        assert_eq!(grx.try_recv().unwrap(), gw);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn the_first_listing_of_every_kind_is_reported_once() {
        let names = ForeignNames::default();
        let kinds: Vec<ChildKind> = ChildKind::ALL
            .into_iter()
            .filter(|k| k.cached_by_label())
            .collect();
        let (last, first) = kinds.split_last().unwrap();
        for kind in first {
            names.event(*kind, &watcher::Event::<Service>::Init);
            assert!(!names.event(*kind, &watcher::Event::<Service>::InitDone));
        }
        names.event(*last, &watcher::Event::<Service>::Init);
        assert!(names.event(*last, &watcher::Event::<Service>::InitDone));
        // A relist later is not news.
        names.event(*last, &watcher::Event::<Service>::Init);
        assert!(!names.event(*last, &watcher::Event::<Service>::InitDone));
    }
}
