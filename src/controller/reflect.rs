//! The reflectors: each watch written to its cache (trimmed, or in the
//! compact form its cache keeps), shown to the indexes that follow it, then
//! passed on to the controllers; and the copies of a stream both controllers
//! trigger on.

use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use kura_core::compact::{compact_child, compact_managed_fields};
use kura_core::kind::ChildKind;

use super::scope::{Cacheable, Scope, Watch};
use crate::stores::cached::{self, CachedMeta, CachedObject};
use crate::stores::labelled::Labelled;
use crate::stores::unseen::Unseen;

/// A reflector's stream of touched objects; its errors never reach a controller.
pub type Shared<K> = futures::stream::BoxStream<'static, Result<K, watcher::Error>>;

pub(super) fn reflect<K: Cacheable>(watch: Watch<K>) -> (Store<K>, Shared<K>) {
    reflect_trimmed(watch, compact_managed_fields)
}

/// [`reflect`], keeping in the cache only what `trim` leaves of each object.
pub(super) fn reflect_trimmed<K: Cacheable>(
    watch: Watch<K>,
    trim: fn(&mut K),
) -> (Store<K>, Shared<K>) {
    reflect_observed(watch, trim, |_, _| {})
}

/// [`reflect_trimmed`], showing `observe` each event once the cache has it.
pub(super) fn reflect_observed<K: Cacheable>(
    watch: Watch<K>,
    trim: fn(&mut K),
    observe: impl FnMut(&Store<K>, &watcher::Event<K>) + Send + 'static,
) -> (Store<K>, Shared<K>) {
    reflect_into(
        watch,
        trim,
        |cache, event| cache.apply_watcher_event(event),
        observe,
    )
}

/// Every reflector: each object watched, trimmed by `trim`, is written to
/// the cache by `write` (as it is, or in the compact form its cache keeps,
/// `stores::cached`), then shown to `observe`, then passed on to the
/// controllers as it came. A shard-filtered cache tells the gate once it has
/// written a complete list (after `observe`, so that its indexes have it too).
pub(super) fn reflect_into<K: Cacheable, C: CachedObject>(
    watch: Watch<K>,
    trim: fn(&mut K),
    mut write: impl FnMut(&mut reflector::store::Writer<C>, &watcher::Event<K>) + Send + 'static,
    mut observe: impl FnMut(&Store<C>, &watcher::Event<K>) + Send + 'static,
) -> (Store<C>, Shared<K>) {
    let (reader, mut writer) = reflector::store();
    let cache = reader.clone();
    let kind = K::kind(&()).to_string();
    let Watch { events, listed } = watch;
    let watch = events.inspect(move |event| match event {
        Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying with backoff"),
        Ok(watcher::Event::Init) => tracing::debug!(%kind, "watch (re)listing"),
        Ok(watcher::Event::InitDone) => tracing::debug!(%kind, "watch listed"),
        Ok(_) => {}
    });
    let events = watch.default_backoff().modify(trim);
    // Errors end here: logged above and backed off for this watch alone. A
    // controller puts one backoff on all its trigger streams together, so an
    // error passed on (a 410 after an apiserver restart) would stop every watch
    // for up to 30 s, during which the others expire and fail in turn: the
    // instance controller went minutes without reconciling (tests/cluster/faults/plane_faults.rs).
    let stream = events
        .inspect(move |event| {
            if let Ok(event) = event {
                write(&mut writer, event);
                observe(&cache, event);
                if let (watcher::Event::InitDone, Some(listed)) = (event, &listed) {
                    listed.done();
                }
            }
        })
        .touched_objects()
        .filter(|event| std::future::ready(event.is_ok()))
        .boxed();
    (reader, stream)
}

/// The indexes every instance child's watch keeps up to date: its children
/// by the instance they are labelled as, and this process's writes the
/// cache has not shown yet.
#[derive(Clone, Default)]
pub(super) struct ChildIndexes {
    pub labelled: Arc<Labelled>,
    pub unseen: Arc<Unseen>,
}

/// The metadata-only cache of a child kind, each object kept as
/// [`CachedMeta`], indexed by the instance it is labelled as.
pub(super) fn reflect_child<K>(
    scope: &Scope,
    indexes: &ChildIndexes,
    kind: ChildKind,
) -> (Store<CachedMeta<K>>, Shared<PartialObjectMeta<K>>)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    reflect_into(
        scope.shard_local::<PartialObjectMeta<K>>(scope.managed()),
        compact_child,
        |cache, event| cache.apply_watcher_event(&cached::event(event, cached::meta_of)),
        indexed(indexes, kind),
    )
}

/// Keeps the child indexes up to date with a reflector's events.
pub(super) fn indexed<K: CachedObject, C: CachedObject>(
    indexes: &ChildIndexes,
    kind: ChildKind,
) -> impl FnMut(&Store<C>, &watcher::Event<K>) + Send + 'static {
    let ChildIndexes { labelled, unseen } = indexes.clone();
    move |store, event| {
        labelled.event(kind, store, event);
        unseen.event(kind, event);
    }
}

/// `N` copies of a reflector's stream, each delivering every touched object
/// (after the cache has it), so that both controllers trigger on one watch and
/// one cache. A task drives the source; it ends when every copy is dropped.
pub(super) fn fan_out<K: Clone + Send + 'static, const N: usize>(
    mut source: Shared<K>,
) -> [Shared<K>; N] {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..N)
        .map(|_| futures::channel::mpsc::unbounded::<Result<K, watcher::Error>>())
        .unzip();
    tokio::spawn(async move {
        while let Some(item) = source.next().await {
            // Errors never get here: `reflect` keeps them to its own watch.
            let Ok(object) = item else { continue };
            let mut delivered = false;
            for tx in &senders {
                delivered |= tx.unbounded_send(Ok(object.clone())).is_ok();
            }
            if !delivered {
                return;
            }
        }
    });
    let copies: Vec<Shared<K>> = receivers.into_iter().map(|rx| rx.boxed()).collect();
    copies
        .try_into()
        .unwrap_or_else(|_| unreachable!("one receiver per copy"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use serde_json::json;

    use super::compact_managed_fields;
    use crate::reconcile::observe::{live_child, live_child_as};
    use kura_core::kind::ChildKind;
    use kura_core::plan::Owner;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        field: &str,
    ) -> serde_json::Value {
        json!({
            "manager": manager, "operation": operation, "subresource": subresource,
            "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {format!("f:{field}"): {}}},
        })
    }

    /// The example acme-eu's StatefulSet as the operator renders it.
    fn rendered_stateful_set() -> kura_core::render::Manifest {
        let config =
            kura_core::config::OperatorConfig::parse(include_str!("../../examples/config.yaml"))
                .unwrap();
        let instance: kura_core::api::KuraInstance = serde_yaml::from_str(
            include_str!("../../examples/instances.yaml")
                .split("\n---\n")
                .next()
                .unwrap(),
        )
        .unwrap();
        let validated = kura_core::validate::validate(&instance, &config).unwrap();
        let desired = kura_core::render::render(&validated, &config);
        let sts = desired
            .objects
            .into_iter()
            .find(|o| o.id.kind == ChildKind::StatefulSet);
        sts.unwrap().manifest
    }

    /// Compacting keeps exactly what drift and conflict detection read, and
    /// of other managers only what they hold that the operator's entry does not.
    #[test]
    fn compacted_cache_objects_observe_the_same() {
        let rendered = rendered_stateful_set();
        let mut sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "a", "managedFields": [
                entry("kube-controller-manager", "Update", Some("status"), "replicas"),
                entry("kura-operator", "Apply", None, "template"),
                entry("kura-operator", "Apply", Some("status"), "x"),
                entry("kubectl", "Update", None, "replicas"),
                entry("kubectl", "Update", Some("scale"), "replicas"),
                entry("gitops", "Apply", None, "template"),
                entry("annotator", "Update", None, "minReadySeconds"),
            ]},
        }))
        .unwrap();
        let before = live_child(&sts.metadata, Owner::Ours, Some(&rendered));
        assert!(before.owned_fields.is_some());
        assert_eq!(
            before.other_managers,
            ["kubectl", "kubectl (scale subresource)"]
        );
        compact_managed_fields(&mut sts);
        assert_eq!(
            live_child(&sts.metadata, Owner::Ours, Some(&rendered)),
            before
        );
        let kept: Vec<(Option<String>, Option<String>)> = sts
            .metadata
            .managed_fields
            .unwrap()
            .into_iter()
            .map(|m| (m.manager, m.subresource))
            .collect();
        let some = |s: &str| Some(s.to_string());
        // Status writers are gone; gitops shares what it holds with us.
        assert_eq!(
            kept,
            [
                (some("kura-operator"), None),
                (some("kubectl"), None),
                (some("kubectl"), some("scale")),
                (some("annotator"), None),
            ]
        );

        let mut foreign: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "b", "managedFields": [entry("kubectl", "Update", None, "replicas")]},
        }))
        .unwrap();
        let before = live_child(&foreign.metadata, Owner::Ours, Some(&rendered));
        compact_managed_fields(&mut foreign);
        assert_eq!(
            live_child(&foreign.metadata, Owner::Ours, Some(&rendered)),
            before
        );
        assert_eq!(before.owned_fields, None);
        assert_eq!(before.other_managers, ["kubectl"]);
    }

    /// A gateway's children are applied by a field manager of their own: its
    /// fingerprint survives compaction too.
    /// A cached child keeps the labels ownership, pruning and the label index
    /// read, and the operator's annotations; another writer's are dropped.
    #[test]
    fn a_cached_child_keeps_the_labels_and_annotations_the_operator_reads() {
        let mut cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns",
                "labels": {"app.kubernetes.io/managed-by": "kura-operator", "kura.dev/instance": "a",
                           "app.kubernetes.io/name": "kura", "kura.dev/account": "acme", "team": "x"},
                "annotations": {"kura.dev/revision": "r1", "kura.dev/adopt": "a", "note": "hello"}},
        }))
        .unwrap();
        super::compact_child(&mut cm);
        let keys = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.as_ref().unwrap().keys().cloned().collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&cm.metadata.labels),
            ["app.kubernetes.io/managed-by", "kura.dev/instance"]
        );
        assert_eq!(
            keys(&cm.metadata.annotations),
            ["kura.dev/adopt", "kura.dev/revision"]
        );
    }

    #[test]
    fn compacting_keeps_the_gateway_managers_fingerprint() {
        let rendered = rendered_stateful_set();
        let mut deployment: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "g", "managedFields": [
                entry("kura-operator-gateway", "Apply", None, "template"),
                entry("scaler", "Update", None, "replicas"),
            ]},
        }))
        .unwrap();
        let observe = |d: &StatefulSet| {
            live_child_as(
                &d.metadata,
                Owner::Ours,
                "kura-operator-gateway",
                Some(&rendered),
            )
        };
        let before = observe(&deployment);
        assert!(before.owned_fields.is_some());
        assert_eq!(before.other_managers, ["scaler"]);
        compact_managed_fields(&mut deployment);
        assert_eq!(observe(&deployment), before);
    }

    /// Each copy of a stream gets every object, in order.
    #[tokio::test]
    async fn every_copy_of_a_fanned_out_stream_gets_every_object() {
        use futures::StreamExt;
        let source: super::Shared<u32> = futures::stream::iter([1, 2, 3].map(Ok)).boxed();
        let [a, b] = super::fan_out(source);
        let got =
            |s: super::Shared<u32>| s.filter_map(|r| async move { r.ok() }).collect::<Vec<_>>();
        assert_eq!(got(a).await, [1, 2, 3]);
        assert_eq!(got(b).await, [1, 2, 3]);
    }
}
