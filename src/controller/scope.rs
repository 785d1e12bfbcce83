//! Where the operator looks (every namespace, or one), and how each kind is
//! watched: the whole scope, or filtered by the apiserver to the shards this
//! process holds.

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::shards::select::{Listed, Selection};
use kura_core::keys::{LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY_VALUE};

/// Where the operator looks: every namespace, or one.
#[derive(Clone)]
pub struct Scope {
    pub client: Client,
    /// How every reflector lists (`list_strategy`).
    pub list: crate::list_strategy::ListStrategy,
    pub namespace: Option<String>,
    /// Server-side timeout of each watch request, in seconds.
    pub watch_timeout: u32,
    /// How long a deleted holder's hosts stay reserved (claims.rs).
    pub host_reservation: std::time::Duration,
    /// Where the apiserver filters the shard-local caches to the shards this
    /// process holds (`shards::select`); `None`: they hold the whole scope.
    pub select: Option<Selection>,
}

impl Scope {
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        api_in(self.client.clone(), self.namespace.as_deref())
    }

    /// The watch of a kind read only for objects of their own namespace (an
    /// instance's children, a gateway's own objects): filtered by the
    /// apiserver to the held shards where it does that, else the whole scope.
    pub(super) fn shard_local<K>(&self, wc: watcher::Config) -> Watch<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()> + Cacheable,
    {
        let namespace = self.namespace.clone();
        self.shard_local_with(move |client| api_in(client, namespace.as_deref()), wc)
    }

    /// [`Scope::shard_local`], of the Api `api` builds on the client it is given.
    pub(super) fn shard_local_with<K: Watchable>(
        &self,
        api: impl Fn(Client) -> Api<K> + Send + 'static,
        wc: watcher::Config,
    ) -> Watch<K> {
        match &self.select {
            Some(select) => {
                let filtered = select.watch(api, wc);
                Watch {
                    events: filtered.events,
                    listed: Some(filtered.listed),
                }
            }
            None => Watch::whole(api(self.client.clone()), wc),
        }
    }
}

pub(super) fn api_in<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    }
}

/// A watch's events and, for a shard-filtered one, what its cache tells the
/// gate once it has written a complete list.
pub struct Watch<K> {
    pub(super) events: futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    pub(super) listed: Option<Listed>,
}

/// What kube's watcher can watch.
pub trait Watchable:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
}
impl<K> Watchable for K where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
}

impl<K: Watchable> Watch<K> {
    /// Every object `api` reaches: fleet-wide readers, cluster-scoped kinds.
    pub(super) fn whole(api: Api<K>, wc: watcher::Config) -> Watch<K> {
        Watch {
            events: watcher(api, wc).boxed(),
            listed: None,
        }
    }
}

impl Scope {
    pub fn watch_config(&self) -> watcher::Config {
        self.list
            .apply(watcher::Config::default().timeout(self.watch_timeout))
    }

    /// Only objects this operator manages: the caches never hold anyone else's.
    pub(super) fn managed(&self) -> watcher::Config {
        self.watch_config()
            .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"))
    }

    /// The dedicated gateways' pods only (their Deployments' template labels):
    /// never an instance's pods, never anyone else's.
    pub(super) fn gateway_pods(&self) -> watcher::Config {
        self.watch_config().labels(&format!(
            "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_NAME}=kura-gateway"
        ))
    }
}

/// What a reflector can cache.
pub trait Cacheable: Watchable + Resource<DynamicType = ()> + Sync {}
impl<K> Cacheable for K where K: Watchable + Resource<DynamicType = ()> + Sync {}
