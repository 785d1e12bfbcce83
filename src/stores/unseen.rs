//! The children this process wrote that its caches have not shown yet: an
//! apply's answer, kept until the watch of its kind says something at least
//! as new about the object (its answer's resourceVersion or later: a change
//! or its deletion), or a relist that started after the write has ended.
//!
//! Without it a pass that comes before the watch delivers the process's own
//! apply decides from the object as it was: missing, or at the revision
//! before, and sends it again. The settle rule of `plan` covers the usual
//! moments of that lag; a watch that lost events and relists (410 Gone,
//! backed off between tries) lags for seconds more, and a held instance
//! re-sent its parts that restart no pod (the perturbation harness,
//! `tests/cluster/faults/perturb.rs`, lost events). This index knows exactly
//! what was written, so no guess about time is needed: the cache wins as soon
//! as it has caught up, and a write nobody's watch ever reports (events lost
//! with no relist) is forgotten after [`FORGET_AFTER`], when the cache's view
//! is taken again as it is.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Lookup;
use kube::runtime::watcher;

use kura_core::kind::ChildKind;
use kura_core::render::ObjectId;

/// How long a write the caches never showed stands in for them.
pub const FORGET_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Unseen {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    written: HashMap<ObjectId, Written>,
    /// How many relists of each kind have started: a write made before the
    /// latest one started is in that list's answer.
    relists: HashMap<ChildKind, u64>,
}

#[derive(Debug)]
struct Written {
    meta: ObjectMeta,
    version: u64,
    at: Instant,
    /// `Inner::relists` of its kind when it was written.
    relists: u64,
}

/// A resourceVersion as the number etcd issued. Opaque by contract; where it
/// does not parse, nothing is known and the cache wins.
fn version(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

impl Unseen {
    /// The apply of `id` was answered with `meta` (compacted as its cache
    /// keeps objects: the caller's part).
    /// Only kinds whose watch reports to this index (`reflect::indexed`)
    /// are kept: for another, nothing would say when the cache has it.
    pub fn wrote(&self, id: &ObjectId, meta: ObjectMeta) {
        if !id.kind.watched_by_label() {
            return;
        }
        let Some(version) = version(meta.resource_version.as_deref()) else {
            return;
        };
        let mut inner = self.inner.lock().unwrap();
        let relists = inner.relists.get(&id.kind).copied().unwrap_or_default();
        let written = Written {
            meta,
            version,
            at: Instant::now(),
            relists,
        };
        inner.written.insert(id.clone(), written);
    }

    /// After the reflector of `kind` applied `event` to its cache.
    pub fn event<K: Lookup<DynamicType = ()>>(&self, kind: ChildKind, event: &watcher::Event<K>) {
        let mut inner = self.inner.lock().unwrap();
        match event {
            watcher::Event::Init => *inner.relists.entry(kind).or_default() += 1,
            watcher::Event::InitDone => {
                let relists = inner.relists.get(&kind).copied().unwrap_or_default();
                inner
                    .written
                    .retain(|id, w| id.kind != kind || w.relists >= relists);
            }
            // Most events are of objects nobody is waiting for: no id is built.
            _ if inner.written.is_empty() => {}
            // A deletion too: one from before the write (the object deleted,
            // then created again by this process) says nothing of it.
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                let id = id_of(kind, o);
                let seen = version(o.resource_version().as_deref());
                if let Some(w) = inner.written.get(&id)
                    && seen.is_none_or(|seen| seen >= w.version)
                {
                    inner.written.remove(&id);
                }
            }
        }
    }

    /// The fresher of the cache's metadata of `id` and this process's last
    /// write of it, if that write is not in the cache yet.
    pub fn fresher(&self, id: &ObjectId, cached: Option<ObjectMeta>) -> Option<ObjectMeta> {
        let mut inner = self.inner.lock().unwrap();
        if inner.written.is_empty() {
            return cached;
        }
        let Some(w) = inner.written.get(id) else {
            return cached;
        };
        if w.at.elapsed() >= FORGET_AFTER {
            inner.written.remove(id);
            return cached;
        }
        let cached_version = cached
            .as_ref()
            .map(|m| version(m.resource_version.as_deref()));
        match cached_version {
            Some(Some(seen)) if seen >= w.version => cached,
            // Not parsed: nothing is known, the cache wins.
            Some(None) => cached,
            _ => Some(w.meta.clone()),
        }
    }

    /// How many writes wait to be seen (for tests and the heap's accounts).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().written.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every write made `by` earlier (a test's clock).
    #[cfg(test)]
    fn backdate(&self, by: Duration) {
        for w in self.inner.lock().unwrap().written.values_mut() {
            w.at -= by;
        }
    }
}

fn id_of<K: Lookup<DynamicType = ()>>(kind: ChildKind, object: &K) -> ObjectId {
    ObjectId {
        kind,
        namespace: object.namespace().map(|ns| ns.into_owned()),
        name: object.name().unwrap_or_default().into_owned(),
    }
}

#[cfg(test)]
mod tests;
