//! The names someone else's objects hold (`stores::foreign`), from a
//! metadata-only watch of every object without the operator's label.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};

use kura_core::keys::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use kura_core::kind::ChildKind;

use super::scope::{Scope, Watch};
use crate::stores::foreign::ForeignNames;

/// Keeps `names` (`stores::foreign`) from one metadata-only watch per kind
/// the caches hold by the operator's label, of every object without that
/// label: the names someone else's objects hold. Each watch backs off on its
/// own errors; the future runs as long as the process.
pub fn follow_foreign_names(
    scope: &Scope,
    names: Arc<ForeignNames>,
) -> impl std::future::Future<Output = ()> + Send + 'static + use<> {
    let others = format!("{LABEL_MANAGED_BY}!={MANAGED_BY_VALUE}");
    let watches = ChildKind::ALL
        .into_iter()
        .filter(|kind| kind.cached_by_label())
        .map(|kind| {
            let ar = kind.api_resource();
            let namespace = scope.namespace.clone();
            let api = move |client| -> Api<PartialObjectMeta<DynamicObject>> {
                match &namespace {
                    Some(ns) => Api::namespaced_with(client, ns, &ar),
                    None => Api::all_with(client, &ar),
                }
            };
            let names = names.clone();
            // Read for an instance's own namespace only: shard-local.
            let Watch { events, listed } =
                scope.shard_local_with(api, scope.watch_config().labels(&others));
            events
                .default_backoff()
                .for_each(move |event| {
                    match event {
                        Ok(event) => {
                            let first = names.event(kind, &event);
                            if let (watcher::Event::InitDone, Some(listed)) = (&event, &listed) {
                                listed.done();
                            }
                            if first {
                                let held = names.len();
                                tracing::info!(held, "names of unlabelled objects listed: creates check them without reads");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(%kind, error = %e, "names watch failed; retrying with backoff")
                        }
                    }
                    std::future::ready(())
                })
        })
        .collect::<Vec<_>>();
    async move {
        futures::future::join_all(watches).await;
    }
}
