//! Caches filtered by the apiserver to the shards this process holds:
//! server-side sharded list and watch (KEP-5866, the `ShardedListAndWatch`
//! gate, alpha in Kubernetes 1.36). A list or watch that carries
//! `shardSelector=shardRange(object.metadata.namespace, …)` is answered with
//! the objects of those namespaces' hash ranges only, the same hash and
//! ranges `shard` assigns, so a replica holding two of four shards caches
//! half of each such kind instead of all of it.
//!
//! Elsewhere (a server without the gate ignores the parameter and answers
//! with everything; `--shard-filter client`) every replica caches the whole
//! fleet and acts for its shards only: the label-free fallback.
//!
//! Which caches are filtered is `controller::streams::streams`' choice: the kinds read
//! only for an object of their own namespace (an instance's children, a
//! gateway's Deployment and RoleBinding, the names of others' objects). The
//! fleet-wide readers keep whole caches: the instances and Ingresses (host
//! claims are unique across the fleet), the StatefulSets (the fleet budget
//! counts the whole fleet), the gateways and their pods (an instance reads
//! the gateway serving its class, which can be in another namespace), and
//! the cluster-scoped kinds.
//!
//! A filtered cache follows what this process holds: when a shard is won or
//! given up its watch starts again with the new selector and lists anew, and
//! the [`Gate`] acts for a shard only once every filtered cache has listed
//! it (`Gate::filtered_cache`). A deletion is never inferred from a filtered
//! cache for a shard it has not listed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};

use super::Gate;
use kura_core::shard::Shards;

/// `--shard-filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Choice {
    /// The apiserver's where it serves it (probed at start), else the client's.
    Auto,
    /// Ask the apiserver for the held shards' objects only.
    Server,
    /// Cache the whole fleet, act for the held shards.
    Client,
}

/// Who filters the shard-local caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    Server,
    Client,
}

impl Filter {
    pub fn name(self) -> &'static str {
        match self {
            Filter::Server => "server",
            Filter::Client => "client",
        }
    }
}

/// What the probe saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// A list asked with a `shardSelector` came back saying it applied it
    /// (`metadata.shardInfo`).
    Served,
    /// A list came back without it: the server ignores the parameter.
    Ignored,
    /// The request failed (HTTP status, or 0 for no answer).
    Failed(u16),
}

/// The filter for `choice` given what the probe saw; one shard needs none.
pub fn filter_for(choice: Choice, shards: Shards, probe: Option<&Probe>) -> Filter {
    if shards.count() == 1 {
        return Filter::Client;
    }
    match (choice, probe) {
        (Choice::Server, _) => Filter::Server,
        (Choice::Client, _) => Filter::Client,
        (Choice::Auto, Some(Probe::Served)) => Filter::Server,
        (Choice::Auto, _) => Filter::Client,
    }
}

/// One list of at most one object at `url` (a built-in kind's collection:
/// a custom resource's list does not say whether it applied the selector)
/// with the selector of shard 0.
// A raw request, but a GET: no write (docs/architecture.md, "Who writes").
#[allow(clippy::disallowed_methods)]
pub async fn probe(client: &Client, shards: Shards, url: &str) -> Probe {
    let Some(selector) = shards.selector(&[0].into()) else {
        return Probe::Ignored;
    };
    let uri = format!("{url}?limit=1&{}", query(&selector));
    let Ok(request) = http::Request::get(uri).body(Vec::new()) else {
        return Probe::Failed(0);
    };
    match client.request_text(request).await {
        Ok(text) => {
            let shard_info = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.pointer("/metadata/shardInfo/selector").cloned());
            if shard_info.is_some() {
                Probe::Served
            } else {
                Probe::Ignored
            }
        }
        Err(kube::Error::Api(status)) => Probe::Failed(status.code),
        Err(_) => Probe::Failed(0),
    }
}

/// Probe when `choice` asks for it, choose, and say which filter is used.
pub async fn choose(choice: Choice, shards: Shards, client: &Client, url: &str) -> Filter {
    let probed = match (choice, shards.count()) {
        (Choice::Auto, n) if n > 1 => Some(probe(client, shards, url).await),
        _ => None,
    };
    let filter = filter_for(choice, shards, probed.as_ref());
    tracing::info!(filter = filter.name(), probe = ?probed, shards = shards.count(), "shard filter");
    filter
}

fn query(selector: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", selector)
        .finish()
}

/// `client`, each of whose requests carries `shardSelector=selector`. Only
/// lists and watches are sent through it.
// Forwards the requests of that read-only client: no write of its own
// (docs/architecture.md, "Who writes").
#[allow(clippy::disallowed_methods)]
fn selecting(client: &Client, selector: &str) -> Client {
    let base = client.clone();
    let query = query(selector);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let base = base.clone();
        let request = with_query(request, &query);
        async move { base.send(request).await }
    });
    Client::new(service, client.default_namespace())
}

/// `request` with `query` appended to its URI's query.
fn with_query<B>(request: http::Request<B>, query: &str) -> http::Request<B> {
    let (mut parts, body) = request.into_parts();
    let uri = parts.uri.to_string();
    let joined = if uri.contains('?') {
        format!("{uri}&{query}")
    } else {
        format!("{uri}?{query}")
    };
    if let Ok(uri) = joined.parse() {
        parts.uri = uri;
    }
    http::Request::from_parts(parts, body)
}

/// Where the filtered caches' watches come from.
#[derive(Clone)]
pub struct Selection {
    pub gate: Arc<Gate>,
    pub client: Client,
}

/// A filtered watch's events, and what its cache reports once it has
/// written a complete list.
pub struct Filtered<K> {
    pub events: futures::stream::BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    pub listed: Listed,
}

/// What one filtered cache has listed, told to the gate.
#[derive(Clone)]
pub struct Listed {
    gate: Arc<Gate>,
    slot: usize,
    state: Arc<Mutex<ListState>>,
}

#[derive(Default)]
struct ListState {
    /// The shards the running watch asks for.
    selecting: BTreeSet<u32>,
    /// The shards the cache holds a complete list of.
    listed: BTreeSet<u32>,
}

impl Listed {
    /// The cache has written the running watch's list (its `InitDone`).
    pub fn done(&self) {
        let mut state = self.state.lock().unwrap();
        state.listed = state.selecting.clone();
        self.gate.set_listed(self.slot, state.listed.clone());
    }

    /// A watch for `selecting` starts: until it has listed, the cache is
    /// complete only for the shards both it and the last list hold.
    fn restart(&self, selecting: &BTreeSet<u32>) {
        let mut state = self.state.lock().unwrap();
        state.listed = state.listed.intersection(selecting).copied().collect();
        state.selecting = selecting.clone();
        self.gate.set_listed(self.slot, state.listed.clone());
    }
}

impl Selection {
    /// The watch of `api`'s kind (built on the client it is given) under
    /// `config`, for the shards this process holds, started again whenever
    /// they change. Holding none, the cache is emptied and nothing watched.
    pub fn watch<K>(
        &self,
        api: impl Fn(Client) -> Api<K> + Send + 'static,
        config: watcher::Config,
    ) -> Filtered<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let listed = Listed {
            gate: self.gate.clone(),
            slot: self.gate.filtered_cache(),
            state: Default::default(),
        };
        let shards = self.gate.shards();
        let base = self.client.clone();
        let restarts = listed.clone();
        let events = futures::stream::unfold(self.gate.holding(), move |mut held| {
            let wanted = held.borrow_and_update().clone();
            restarts.restart(&wanted);
            let mut next = held.clone();
            let changed = async move {
                if next.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let events = if wanted.is_empty() {
                // An empty list: the cache drops what it held.
                futures::stream::iter([Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)])
                    .chain(futures::stream::pending())
                    .boxed()
            } else {
                let client = match shards.selector(&wanted) {
                    Some(selector) => selecting(&base, &selector),
                    None => base.clone(),
                };
                watcher(api(client), config.clone()).boxed()
            };
            std::future::ready(Some((events.take_until(changed), held)))
        })
        .flatten()
        .boxed();
        Filtered { events, listed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_filters_only_where_it_said_it_applied_the_selector() {
        let four = Shards::new(4).unwrap();
        assert_eq!(
            filter_for(Choice::Auto, four, Some(&Probe::Served)),
            Filter::Server
        );
        // Without the gate the apiserver drops the parameter: a whole list.
        assert_eq!(
            filter_for(Choice::Auto, four, Some(&Probe::Ignored)),
            Filter::Client
        );
        assert_eq!(
            filter_for(Choice::Auto, four, Some(&Probe::Failed(400))),
            Filter::Client
        );
        assert_eq!(filter_for(Choice::Auto, four, None), Filter::Client);
        assert_eq!(
            filter_for(Choice::Server, four, Some(&Probe::Ignored)),
            Filter::Server
        );
        assert_eq!(
            filter_for(Choice::Client, four, Some(&Probe::Served)),
            Filter::Client
        );
        assert_eq!(
            filter_for(Choice::Server, Shards::ONE, None),
            Filter::Client,
            "one shard: nothing to filter"
        );
    }

    #[test]
    fn the_selector_is_appended_to_the_query_encoded() {
        let sel =
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')";
        let with = |uri: &str| {
            with_query(http::Request::get(uri).body(()).unwrap(), &query(sel))
                .uri()
                .to_string()
        };
        let encoded = "shardSelector=shardRange%28object.metadata.namespace%2C+%270x0000000000000000%27%2C+%270x8000000000000000%27%29";
        assert_eq!(
            with("/api/v1/services?watch=true&resourceVersion=5"),
            format!("/api/v1/services?watch=true&resourceVersion=5&{encoded}")
        );
        assert_eq!(
            with("/api/v1/services"),
            format!("/api/v1/services?{encoded}")
        );
    }
}
