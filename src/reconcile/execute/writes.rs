//! The writes a pass sends, each a thin call of kube's write methods: the
//! one place in the reconciles (an instance's, a gateway's) that calls them
//! (`clippy.toml`, `disallowed-methods`; docs/architecture.md, "Who
//! writes"). What to write, and what an answer means, is decided by the
//! callers (the executor's steps: apply, prune, collect, migrate, the status
//! write); the client's write fence (`fence`) sits below every call.

// The executor's writes (docs/architecture.md, "Who writes").
#![allow(clippy::disallowed_methods)]

use std::fmt::Debug;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A patch of `name` (an apply, a merge).
pub async fn patch<K, P>(
    api: &Api<K>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    api.patch(name, params, patch).await
}

/// A patch of the status of `name`.
pub async fn patch_status<K, P>(
    api: &Api<K>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    api.patch_status(name, params, patch).await
}

/// The deletion of `name` (begun, or done).
pub async fn delete<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> kube::Result<()>
where
    K: Clone + DeserializeOwned + Debug,
{
    api.delete(name, params).await.map(|_| ())
}

/// A request built by hand (a status write answered with metadata only).
pub async fn request<T>(client: kube::Client, request: http::Request<Vec<u8>>) -> kube::Result<T>
where
    T: DeserializeOwned,
{
    client.request(request).await
}
