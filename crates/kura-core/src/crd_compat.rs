//! Whether an installed CustomResourceDefinition serves what this build reads
//! and writes. The apiserver prunes every field its CRD's schema does not
//! know, on every write and without an error: an operator running against an
//! older CRD loses fields of its own status writes, and users cannot set the
//! newer fields at all. So the installed CRD is compared with the one this
//! build generates (`api::crds`).
//!
//! **Compatible**: every property path of this build's schema (under `spec`
//! and `status`, into list items and map values) exists in the installed
//! CRD's served version of the same name, with the same type. A newer CRD
//! with more properties is compatible (its additions are kept by the
//! apiserver and ignored here); a missing path or a changed type is not.
//! A path under a node the installed schema keeps whole
//! (`x-kubernetes-preserve-unknown-fields`) counts as present. Validations
//! (patterns, enums, CEL rules) are not compared: they refuse a write
//! loudly, they never drop a field silently.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

// Beside the other keys, so that `api` (which stamps them) does not import
// this module, whose tests read `api`.
pub use crate::keys::{CRD_VERSION_ANNOTATION as VERSION_ANNOTATION, OPERATOR_VERSION as VERSION};

/// Why an installed CRD is not compatible; empty: compatible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No CRD of this name is installed.
    NotInstalled,
    /// Being deleted.
    Terminating,
    /// Not (yet) Established: its kind is not served.
    NotEstablished,
    /// The installed CRD does not serve this build's version.
    VersionNotServed(String),
    /// This build's path is not in the installed schema (it would be pruned).
    Missing(String),
    /// Same path, another type.
    TypeChanged {
        path: String,
        ours: String,
        installed: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NotInstalled => write!(f, "not installed"),
            Problem::Terminating => write!(f, "being deleted"),
            Problem::NotEstablished => write!(f, "not established"),
            Problem::VersionNotServed(v) => write!(f, "version {v} not served"),
            Problem::Missing(path) => write!(f, "{path} missing"),
            Problem::TypeChanged {
                path,
                ours,
                installed,
            } => write!(f, "{path} is {installed}, this operator's is {ours}"),
        }
    }
}

/// One line naming every problem, missing paths grouped:
/// `missing spec.pause, status.appliedSpecHash; spec.x is string, ...`.
pub fn describe(problems: &[Problem]) -> String {
    let missing: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::Missing(path) => Some(path.as_str()),
            _ => None,
        })
        .collect();
    let mut parts: Vec<String> = problems
        .iter()
        .filter(|p| !matches!(p, Problem::Missing(_)))
        .map(ToString::to_string)
        .collect();
    if !missing.is_empty() {
        parts.insert(0, format!("missing {}", missing.join(", ")));
    }
    parts.join("; ")
}

/// The version stamped on `crd` by the release that generated it, if any.
pub fn version_of(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()?
        .get(VERSION_ANNOTATION)
        .map(String::as_str)
}

/// What keeps `installed` from serving what `ours` (this build's CRD of the
/// same name) reads and writes; empty when compatible. `installed` is
/// `None` when no such CRD exists.
pub fn compare(
    ours: &CustomResourceDefinition,
    installed: Option<&CustomResourceDefinition>,
) -> Vec<Problem> {
    let Some(installed) = installed else {
        return vec![Problem::NotInstalled];
    };
    if installed.metadata.deletion_timestamp.is_some() {
        return vec![Problem::Terminating];
    }
    let established = installed
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
    if !established {
        return vec![Problem::NotEstablished];
    }
    let mut problems = Vec::new();
    for version in &ours.spec.versions {
        let Some(served) = installed
            .spec
            .versions
            .iter()
            .find(|v| v.name == version.name && v.served)
        else {
            problems.push(Problem::VersionNotServed(version.name.clone()));
            continue;
        };
        let (Some(our_schema), Some(their_schema)) = (schema_of(version), schema_of(served)) else {
            // Ours always has a schema; theirs must (CRDs v1 require one).
            problems.push(Problem::VersionNotServed(version.name.clone()));
            continue;
        };
        problems.extend(compare_schemas(our_schema, their_schema));
    }
    problems
}

fn schema_of(
    version: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion,
) -> Option<&JSONSchemaProps> {
    version.schema.as_ref()?.open_api_v3_schema.as_ref()
}

/// [`compare`] of two versions' root schemas: this build's paths under
/// `spec` and `status` against the installed ones.
pub fn compare_schemas(ours: &JSONSchemaProps, installed: &JSONSchemaProps) -> Vec<Problem> {
    let ours = schema_paths(ours);
    let installed = schema_paths(installed);
    let mut problems = Vec::new();
    let mut missing: Vec<&str> = Vec::new();
    for (path, node) in &ours {
        let top = path.split(['.', '[', '{']).next().unwrap_or_default();
        if !(top == "spec" || top == "status") {
            continue;
        }
        // Under a missing node: that node names the whole subtree.
        if missing.iter().any(|m| under(path, m)) {
            continue;
        }
        match installed.get(path) {
            Some(theirs) if theirs.kind == node.kind || theirs.kind == ANY => {}
            Some(theirs) => problems.push(Problem::TypeChanged {
                path: path.clone(),
                ours: node.kind.clone(),
                installed: theirs.kind.clone(),
            }),
            None if kept_whole(&installed, path) => {}
            None => {
                missing.push(path);
                problems.push(Problem::Missing(path.clone()));
            }
        }
    }
    problems
}

/// Whether `path` is strictly below `ancestor`.
fn under(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.starts_with(['.', '[', '{']))
}

/// A type no check can fail: a node without `type` (kept as it comes).
const ANY: &str = "any";

/// One node of a schema: its type and whether it keeps unknown fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: String,
    pub keeps_unknown: bool,
}

/// Every property path of `schema` with its node: `spec.hosts` for a
/// property, `spec.hosts[]` for a list's items, `spec.labels{}` for a map's
/// values.
pub fn schema_paths(schema: &JSONSchemaProps) -> BTreeMap<String, Node> {
    let mut paths = BTreeMap::new();
    walk(schema, "", &mut paths);
    paths
}

fn walk(schema: &JSONSchemaProps, path: &str, out: &mut BTreeMap<String, Node>) {
    if !path.is_empty() {
        out.insert(
            path.to_string(),
            Node {
                kind: kind_of(schema),
                keeps_unknown: schema.x_kubernetes_preserve_unknown_fields == Some(true),
            },
        );
    }
    for (name, property) in schema.properties.iter().flatten() {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        walk(property, &child, out);
    }
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(items)) => walk(items, &format!("{path}[]"), out),
        Some(JSONSchemaPropsOrArray::Schemas(all)) => {
            for items in all {
                walk(items, &format!("{path}[]"), out);
            }
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &schema.additional_properties {
        walk(values, &format!("{path}{{}}"), out);
    }
}

fn kind_of(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "int-or-string".into();
    }
    schema.type_.clone().unwrap_or_else(|| ANY.into())
}

/// Whether an ancestor of `path` keeps unknown fields (or is a map whose
/// values are open): the apiserver keeps whatever is under it.
fn kept_whole(installed: &BTreeMap<String, Node>, path: &str) -> bool {
    let mut at = path;
    while let Some(cut) = at.rfind(['.', '[', '{']) {
        at = &at[..cut];
        if installed.get(at).is_some_and(|n| n.keeps_unknown) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{crds, stamped};

    fn instance_crd() -> CustomResourceDefinition {
        let mut crd = crds().remove(0);
        assert_eq!(crd.metadata.name.as_deref(), Some("kurainstances.kura.dev"));
        established(&mut crd);
        crd
    }

    fn established(crd: &mut CustomResourceDefinition) {
        let status: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionStatus =
            serde_json::from_value(serde_json::json!({
                "conditions": [{"type": "Established", "status": "True"}]
            }))
            .unwrap();
        crd.status = Some(status);
    }

    fn root(crd: &mut CustomResourceDefinition) -> &mut JSONSchemaProps {
        crd.spec.versions[0]
            .schema
            .as_mut()
            .unwrap()
            .open_api_v3_schema
            .as_mut()
            .unwrap()
    }

    /// The node at `path` (dot-separated properties) of `schema`.
    fn at<'a>(schema: &'a mut JSONSchemaProps, path: &str) -> &'a mut JSONSchemaProps {
        path.split('.').fold(schema, |s, name| {
            s.properties.as_mut().unwrap().get_mut(name).unwrap()
        })
    }

    fn remove(crd: &mut CustomResourceDefinition, parent: &str, name: &str) {
        at(root(crd), parent)
            .properties
            .as_mut()
            .unwrap()
            .remove(name)
            .unwrap_or_else(|| panic!("{parent}.{name} exists"));
    }

    #[test]
    fn the_crd_this_build_generates_is_compatible_with_itself() {
        for mut crd in crds() {
            established(&mut crd);
            assert_eq!(compare(&crd, Some(&crd)), [], "{:?}", crd.metadata.name);
        }
    }

    #[test]
    fn paths_go_into_properties_list_items_and_map_values() {
        let schema: JSONSchemaProps = serde_json::from_value(serde_json::json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "hosts": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"}}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "port": {"x-kubernetes-int-or-string": true}
                }}
            }
        }))
        .unwrap();
        let kinds: Vec<(String, String)> = schema_paths(&schema)
            .into_iter()
            .map(|(p, n)| (p, n.kind))
            .collect();
        let expect = |p: &str, k: &str| (p.to_string(), k.to_string());
        assert_eq!(
            kinds,
            [
                expect("spec", "object"),
                expect("spec.hosts", "array"),
                expect("spec.hosts[]", "object"),
                expect("spec.hosts[].name", "string"),
                expect("spec.labels", "object"),
                expect("spec.labels{}", "string"),
                expect("spec.port", "int-or-string"),
            ]
        );
    }

    /// The measured case: a CRD of an earlier release, before
    /// `spec.pause` and `status.appliedSpecHash`.
    #[test]
    fn an_older_crd_lacking_paths_is_incompatible_naming_each() {
        let ours = instance_crd();
        let mut old = ours.clone();
        remove(&mut old, "spec", "pause");
        remove(&mut old, "status", "appliedSpecHash");
        let problems = compare(&ours, Some(&old));
        assert!(problems.contains(&Problem::Missing("spec.pause".into())));
        assert!(problems.contains(&Problem::Missing("status.appliedSpecHash".into())));
        // The subtree of a missing object is not listed path by path.
        assert!(
            !problems
                .iter()
                .any(|p| matches!(p, Problem::Missing(path) if path.starts_with("spec.pause."))),
            "{problems:?}"
        );
        let line = describe(&problems);
        assert!(
            line.starts_with("missing ")
                && line.contains("spec.pause")
                && line.contains("status.appliedSpecHash"),
            "{line}"
        );
    }

    #[test]
    fn a_newer_crd_with_more_properties_is_compatible() {
        let ours = instance_crd();
        let mut newer = ours.clone();
        let extra: JSONSchemaProps =
            serde_json::from_value(serde_json::json!({"type": "string"})).unwrap();
        for parent in ["spec", "status"] {
            at(root(&mut newer), parent)
                .properties
                .as_mut()
                .unwrap()
                .insert("addedLater".into(), extra.clone());
        }
        assert_eq!(compare(&ours, Some(&newer)), []);
    }

    #[test]
    fn a_changed_type_is_incompatible() {
        let ours = instance_crd();
        let mut other = ours.clone();
        at(root(&mut other), "status.appliedSpecHash").type_ = Some("integer".into());
        assert_eq!(
            compare(&ours, Some(&other)),
            [Problem::TypeChanged {
                path: "status.appliedSpecHash".into(),
                ours: "string".into(),
                installed: "integer".into(),
            }]
        );
    }

    #[test]
    fn a_subtree_the_installed_schema_keeps_whole_counts_as_present() {
        let ours = instance_crd();
        let mut open = ours.clone();
        let status = at(root(&mut open), "status");
        status.properties = None;
        status.x_kubernetes_preserve_unknown_fields = Some(true);
        assert_eq!(compare(&ours, Some(&open)), []);
    }

    #[test]
    fn absent_terminating_unestablished_or_unserved_crds_are_incompatible() {
        let ours = instance_crd();
        assert_eq!(compare(&ours, None), [Problem::NotInstalled]);

        let mut gone = ours.clone();
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert_eq!(compare(&ours, Some(&gone)), [Problem::Terminating]);

        let mut fresh = ours.clone();
        fresh.status = None;
        assert_eq!(compare(&ours, Some(&fresh)), [Problem::NotEstablished]);

        let mut unserved = ours.clone();
        unserved.spec.versions[0].served = false;
        assert_eq!(
            compare(&ours, Some(&unserved)),
            [Problem::VersionNotServed("v1alpha1".into())]
        );
    }

    #[test]
    fn the_generated_crds_name_this_release() {
        for crd in crds() {
            assert_eq!(version_of(&crd), Some(VERSION));
        }
        let mut bare = instance_crd();
        bare.metadata.annotations = None;
        assert_eq!(version_of(&bare), None);
        assert_eq!(version_of(&stamped(bare)), Some(VERSION));
    }
}
