//! A rendered manifest as typed values.
//!
//! Every type here, and in [`super::kinds`], declares its fields in the byte
//! order of their JSON names and keeps maps in `BTreeMap`s, so serde_json's
//! compact output of a manifest *is* its canonical form (see [`super::hash`]): a
//! render builds no JSON maps and sorts nothing, and hashing writes each object
//! once. Rendering runs on every reconcile of every instance, and building
//! `serde_json::Value` maps was most of its cost (docs/benchmarks.md). The test
//! `typed_manifests_serialize_canonically` holds every kind to that order.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::ser::{Serialize, SerializeStruct, Serializer};
use serde_json::value::RawValue;

use super::kinds::Spec;
use crate::kind::ChildKind;

/// Label keys are constants; their values come from the instance.
pub type Labels = BTreeMap<&'static str, String>;

/// One child of an instance or a gateway.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Its `apiVersion` and `kind`.
    pub kind: ChildKind,
    pub metadata: ObjectMeta,
    pub content: Content,
}

/// What a manifest holds besides its type and metadata. Most kinds have a
/// `spec`; a ServiceAccount, a ConfigMap and a (Cluster)RoleBinding have
/// top-level fields instead.
#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    ServiceAccount {
        automount_service_account_token: bool,
    },
    ConfigMap {
        data: ConfigData,
    },
    Binding(Binding),
    Spec(Spec),
}

/// A RoleBinding's or ClusterRoleBinding's `roleRef` and `subjects`: always a
/// ClusterRole granted to one ServiceAccount.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub cluster_role: String,
    pub service_account: String,
    pub namespace: String,
}

/// `roleRef` (keys in byte order).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RoleRef<'a> {
    api_group: &'static str,
    kind: &'static str,
    name: &'a str,
}

/// One of `subjects` (keys in byte order).
#[derive(serde::Serialize)]
struct Subject<'a> {
    kind: &'static str,
    name: &'a str,
    namespace: &'a str,
}

/// A ConfigMap's `data`: the one file the pods mount.
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct ConfigData {
    #[serde(rename = "kura.json")]
    pub kura_json: String,
}

impl Manifest {
    /// The spec of an Ingress.
    pub fn ingress_spec(&self) -> Option<&super::kinds::IngressSpec> {
        match &self.content {
            Content::Spec(Spec::Ingress(spec)) => Some(spec),
            _ => None,
        }
    }

    /// A manifest with an identity and nothing else, for tests of what consumes one.
    #[cfg(any(test, feature = "fixtures"))]
    pub fn bare(kind: ChildKind, namespace: &str, name: &str) -> Self {
        Manifest {
            kind,
            metadata: ObjectMeta {
                annotations: None,
                labels: Labels::new(),
                name: name.to_string(),
                namespace: Some(namespace.to_string()),
                owner_references: Vec::new(),
            },
            content: Content::ServiceAccount {
                automount_service_account_token: false,
            },
        }
    }
}

impl Serialize for Manifest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Keys in byte order: apiVersion < automountServiceAccountToken < data <
        // kind < metadata < roleRef < spec < subjects.
        let mut object = serializer.serialize_struct("Manifest", 5)?;
        object.serialize_field("apiVersion", self.kind.api_version())?;
        match &self.content {
            Content::ServiceAccount {
                automount_service_account_token,
            } => object.serialize_field(
                "automountServiceAccountToken",
                automount_service_account_token,
            )?,
            Content::ConfigMap { data } => object.serialize_field("data", data)?,
            Content::Binding(_) | Content::Spec(_) => {}
        }
        object.serialize_field("kind", self.kind.kind())?;
        object.serialize_field("metadata", &self.metadata)?;
        match &self.content {
            Content::Spec(spec) => object.serialize_field("spec", spec)?,
            Content::Binding(binding) => {
                let role_ref = RoleRef {
                    api_group: "rbac.authorization.k8s.io",
                    kind: "ClusterRole",
                    name: &binding.cluster_role,
                };
                let subject = Subject {
                    kind: "ServiceAccount",
                    name: &binding.service_account,
                    namespace: &binding.namespace,
                };
                object.serialize_field("roleRef", &role_ref)?;
                object.serialize_field("subjects", &[subject])?;
            }
            Content::ServiceAccount { .. } | Content::ConfigMap { .. } => {}
        }
        object.end()
    }
}

#[derive(serde::Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<&'static str, String>>,
    pub labels: Labels,
    pub name: String,
    /// None for a cluster-scoped object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

#[derive(serde::Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: &'static str,
    pub block_owner_deletion: bool,
    pub controller: bool,
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
}

/// The metadata of a template inside a manifest (pods, volume claims).
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct TemplateMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<&'static str, String>>,
    pub labels: Labels,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'static str>,
}

/// A part of a manifest that is the same for every instance (a probe, a security
/// context), put in canonical form once for the process and then copied as bytes.
#[derive(Clone, Copy)]
pub struct Constant(&'static RawValue);

impl Constant {
    /// From a lazily built JSON value; call it as `Constant::of(&STATIC)`.
    pub fn of(cell: &'static LazyLock<Box<RawValue>>) -> Constant {
        Constant(cell)
    }

    /// The canonical form of a JSON value, for a `LazyLock` behind [`Constant::of`].
    pub fn canonical(value: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(super::hash::canonical_string(&value))
            .expect("canonical JSON is JSON")
    }
}

impl PartialEq for Constant {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl std::fmt::Debug for Constant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.get())
    }
}

impl Serialize for Constant {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Declare constant manifest parts: `constants! { NAME = { ...json... }, ... }`.
macro_rules! constants {
    ($($name:ident = $json:tt),* $(,)?) => {
        $(
            static $name: std::sync::LazyLock<Box<serde_json::value::RawValue>> =
                std::sync::LazyLock::new(|| {
                    $crate::render::manifest::Constant::canonical(serde_json::json!($json))
                });
        )*
    };
}
pub(crate) use constants;
