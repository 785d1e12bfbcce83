//! The reads of `diff`, and nothing but reads (get and list): the instances in
//! scope, one paged list per kind of child (by the operator's label, in scope,
//! as the operator's caches are filled), the namespace's instances and
//! Ingresses where a gateway may be pruned, and the configuration from a
//! ConfigMap.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DynamicObject, ListParams, ObjectList};

use kube::{Client, Resource};
use kura_core::render::ObjectId;
use serde::de::DeserializeOwned;

use super::live::{Live, LiveBuilder};
use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::keys::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use kura_core::kind::ChildKind;

/// Objects per page: a bound on what one response holds in memory (a page of
/// 500 StatefulSets as JSON values took tens of MiB).
const PAGE: u32 = 200;

use kura_core::keys::CONFIG_MAP_KEY;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("list {what}: {}", said(source))]
    List {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("listed {what}: {source}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("ConfigMap {namespace}/{name}: {message}")]
    ConfigMap {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("read {what}: {}", said(source))]
    Get {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Config(#[from] kura_core::config::ConfigError),
}

/// Where to look: one namespace or all, and which instances.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// A label selector on the instances.
    pub selector: Option<String>,
}

impl Scope {
    /// Every instance of `namespace`.
    pub fn namespace(namespace: &str) -> Scope {
        Scope {
            namespace: Some(namespace.to_string()),
            selector: None,
        }
    }

    fn shown(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "in all namespaces".into(),
        }
    }
}

pub async fn instances(client: &Client, scope: &Scope) -> Result<Vec<KuraInstance>, ReadError> {
    let api: Api<KuraInstance> = match &scope.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut params = ListParams::default();
    if let Some(selector) = &scope.selector {
        params = params.labels(selector);
    }
    let mut out = Vec::new();
    pages(&api, params, |i| {
        out.push(i);
        Ok(())
    })
    .await
    .map_err(|e| e.named(format!("kurainstances {}", scope.shown())))?;
    Ok(out)
}

/// Where to read the caches from for instances shown in `scope`: the whole
/// cluster (every namespace, no selector), as the operator watches it. If
/// the user may not list instances cluster-wide, the namespace shown, said on
/// a note of the report: the budget and host claims are then that
/// namespace's alone, and an instance may be shown to go where the operator
/// holds it.
pub async fn fleet_scope(
    client: &Client,
    scope: &Scope,
) -> Result<(Scope, Option<String>), ReadError> {
    let everywhere = Scope {
        namespace: None,
        selector: None,
    };
    let api: Api<KuraInstance> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok((everywhere, None)),
        Err(kube::Error::Api(s)) if s.code == 403 && scope.namespace.is_some() => {
            let note = format!(
                "may not list kurainstances in all namespaces ({}): the fleet budget and host claims are previewed over {} only",
                s.message,
                scope.shown()
            );
            let namespace = Scope {
                namespace: scope.namespace.clone(),
                selector: None,
            };
            Ok((namespace, Some(note)))
        }
        Err(source) => Err(ReadError::List {
            what: "kurainstances in all namespaces".into(),
            source,
        }),
    }
}

/// Every child the operator's caches would hold, in scope.
pub async fn live(
    client: &Client,
    scope: &Scope,
    instances: &[KuraInstance],
    keep_owned: bool,
) -> Result<Live, ReadError> {
    let mut builder = LiveBuilder::new(keep_owned);
    // The kinds a reconcile of an instance observes, as its caches hold them.
    for kind in ChildKind::ALL.into_iter().filter(|k| k.of_instance()) {
        let by_label = kind.watched_by_label();
        let ar = kind.api_resource();
        let api: Api<DynamicObject> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let mut params = ListParams::default();
        if by_label {
            params = params.labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"));
        }
        pages(&api, params, |o| builder.add(kind, o))
            .await
            .map_err(|e| e.named(format!("{} {}", kind.plural(), scope.shown())))?;
    }
    Ok(builder.finish(instances))
}

/// What decides whether a gateway of `namespace` is still used: all its
/// instances, and all its Ingresses (anyone's) as (name, class, instance label).
pub async fn gateway_users(
    client: &Client,
    namespace: &str,
) -> Result<(Vec<KuraInstance>, Vec<(String, String, Option<String>)>), ReadError> {
    let scope = Scope {
        namespace: Some(namespace.to_string()),
        selector: None,
    };
    let all = instances(client, &scope).await?;
    let api: Api<Ingress> = Api::namespaced(client.clone(), namespace);
    let mut ingresses = Vec::new();
    pages(&api, ListParams::default(), |i| {
        if let Some(class) = i.spec.as_ref().and_then(|s| s.ingress_class_name.clone()) {
            let owner = i
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_INSTANCE))
                .cloned();
            ingresses.push((i.metadata.name.unwrap_or_default(), class, owner));
        }
        Ok(())
    })
    .await
    .map_err(|e| e.named(format!("ingresses in namespace {namespace}")))?;
    Ok((all, ingresses))
}

/// What is under the names `ids` the operator would create for the instance
/// `uid`, `name`, judged as it judges them (`apply::check_names`): someone
/// else's object, or the instance's own or one handed over. One metadata read
/// per name, in parallel.
pub async fn taken_names(
    client: &Client,
    ids: &[ObjectId],
    uid: &str,
    name: &str,
) -> Result<super::NamesFound, ReadError> {
    use kura_core::plan::Owner;
    let reads = ids.iter().map(|id| async move {
        let api = crate::reconcile::apply::dynamic_api(client, id);
        (id, api.get_metadata_opt(&id.name).await)
    });
    let mut found = super::NamesFound::default();
    for (id, read) in futures::future::join_all(reads).await {
        let there = read.map_err(|source| ReadError::Get {
            what: id.to_string(),
            source,
        })?;
        let Some(there) = there else { continue };
        match crate::reconcile::observe::owner(&there.metadata, id.kind, uid, name) {
            Owner::Foreign(whose) => found.taken.push(format!("{id} exists and {whose}")),
            Owner::Adopt => found
                .existing
                .push((id.clone(), "exists: handed over with kura.dev/adopt".into())),
            Owner::Ours => found
                .existing
                .push((id.clone(), "exists: this instance's own".into())),
        }
    }
    Ok(found)
}

/// The operator configuration in a ConfigMap, under the chart's key.
pub async fn config_map(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<OperatorConfig, ReadError> {
    let fail = |message: String| ReadError::ConfigMap {
        namespace: namespace.to_string(),
        name: name.to_string(),
        message,
    };
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| fail(said(&e)))?;
    let text = map
        .data
        .as_ref()
        .and_then(|d| d.get(CONFIG_MAP_KEY))
        .ok_or_else(|| fail(format!("has no key {CONFIG_MAP_KEY}")))?;
    let source = format!("ConfigMap {namespace}/{name} key {CONFIG_MAP_KEY}");
    Ok(OperatorConfig::parse(text).map_err(|e| e.at(source))?)
}

/// What the apiserver said, without the debug form of its Status.
fn said(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// A list failure before its object is named.
enum PageError {
    Kube(kube::Error),
    Decode(serde_json::Error),
}

impl PageError {
    fn named(self, what: String) -> ReadError {
        match self {
            PageError::Kube(source) => ReadError::List { what, source },
            PageError::Decode(source) => ReadError::Decode { what, source },
        }
    }
}

/// Lists `api` a page at a time, handing each object to `each`.
async fn pages<K>(
    api: &Api<K>,
    params: ListParams,
    mut each: impl FnMut(K) -> Result<(), serde_json::Error>,
) -> Result<(), PageError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(PAGE);
    loop {
        let page: ObjectList<K> = api.list(&params).await.map_err(PageError::Kube)?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for object in page.items {
            each(object).map_err(PageError::Decode)?;
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}
