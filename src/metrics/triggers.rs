//! The work queue's triggers: each wraps a controller's trigger stream or
//! mapper, passing it on unchanged, and tells [`RuntimeMetrics::queued`] of
//! every object it names.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::runtime::RuntimeMetrics;

/// Follows one controller's triggers into [`RuntimeMetrics::queued`]: each
/// wraps a trigger stream or mapper and passes it on unchanged.
#[derive(Clone)]
pub struct Triggers {
    pub metrics: Arc<RuntimeMetrics>,
    pub controller: &'static str,
}

impl Triggers {
    fn queued(&self, namespace: Option<&str>, name: &str) {
        self.metrics.queued(self.controller, namespace, name);
    }

    /// The controller's own objects (`for_stream`).
    pub fn objects<K, E, S>(
        &self,
        stream: S,
    ) -> impl Stream<Item = Result<K, E>> + Send + use<K, E, S>
    where
        K: Resource,
        S: Stream<Item = Result<K, E>> + Send,
    {
        let this = self.clone();
        stream.inspect(move |r| {
            if let Ok(o) = r {
                this.queued(o.meta().namespace.as_deref(), &o.name_any());
            }
        })
    }

    /// Children (`owns_stream`): their owners of kind `Owner`.
    pub fn owned<Owner, K, E, S>(
        &self,
        stream: S,
    ) -> impl Stream<Item = Result<K, E>> + Send + use<Owner, K, E, S>
    where
        Owner: Resource<DynamicType = ()>,
        K: Resource,
        S: Stream<Item = Result<K, E>> + Send,
    {
        let this = self.clone();
        stream.inspect(move |r| {
            let Ok(child) = r else { return };
            let meta = child.meta();
            for owner in meta.owner_references.iter().flatten() {
                if owner.kind == Owner::kind(&()) && owner.api_version == Owner::api_version(&()) {
                    this.queued(meta.namespace.as_deref(), &owner.name);
                }
            }
        })
    }

    /// A mapper (`watches_stream`): the objects it names.
    pub fn mapped<T, K>(
        &self,
        mapper: impl Fn(T) -> Vec<ObjectRef<K>> + Send + Sync + 'static,
    ) -> impl Fn(T) -> Vec<ObjectRef<K>> + Send + Sync + 'static
    where
        K: Resource,
    {
        let this = self.clone();
        move |object| {
            let refs = mapper(object);
            for r in &refs {
                this.queued(r.namespace.as_deref(), &r.name);
            }
            refs
        }
    }

    /// Objects named directly (`reconcile_on`).
    pub fn refs<K, S>(&self, stream: S) -> impl Stream<Item = ObjectRef<K>> + Send + use<K, S>
    where
        K: Resource,
        S: Stream<Item = ObjectRef<K>> + Send,
    {
        let this = self.clone();
        stream.inspect(move |r| this.queued(r.namespace.as_deref(), &r.name))
    }

    /// Every object of `store` (`reconcile_all_on`).
    pub fn all<K, S>(&self, stream: S, store: Store<K>) -> impl Stream<Item = ()> + Send + use<K, S>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
        S: Stream<Item = ()> + Send,
    {
        let this = self.clone();
        stream.inspect(move |()| {
            for o in store.state() {
                this.queued(o.meta().namespace.as_deref(), &o.name_any());
            }
        })
    }
}
