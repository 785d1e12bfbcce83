//! What the reflector caches keep of an object: the operator reads a few of its
//! labels, its own annotations and who holds which of its fields, and nothing
//! else; the rest is dropped as the object enters the cache.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::Resource;

use crate::api::KuraInstance;
use crate::fields::{fingerprint, rivals};
use crate::keys::{LABEL_INSTANCE, LABEL_MANAGED_BY};

/// The prefix of the operator's own annotations.
const KURA_ANNOTATIONS: &str = "kura.dev/";

/// Of an object's managedFields the caches keep what `observe::live_child` reads:
/// the fingerprint of the operator's own apply entries (of the instances' and
/// the gateways' field managers) and, of each other manager of spec and
/// metadata (the scale subresource's too), only the fields it holds that the
/// operator's entry does not (`observe::rivals`), usually none. As
/// `serde_json::Value` trees, managedFields were the largest part of every
/// cached object (a StatefulSet's own entry alone is ~2.4 KB of JSON, many
/// times that in memory; docs/benchmarks.md, scale).
pub fn compact_managed_fields<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let ours = entries
        .iter()
        .find(|m| rivals::is_own_entry(m))
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| &f.0);
    let compact = entries
        .iter()
        .filter_map(|m| {
            let fields_v1 = if rivals::is_own_entry(m) {
                m.fields_v1
                    .as_ref()
                    .and_then(fingerprint)
                    .map(serde_json::Value::String)
            } else if rivals::is_rival(m) {
                // A manager holding nothing of ours can never be named: dropped.
                Some(rivals::exclusive(&m.fields_v1.as_ref()?.0, ours)?)
            } else {
                return None;
            };
            Some(ManagedFieldsEntry {
                fields_v1: fields_v1.map(FieldsV1),
                manager: m.manager.clone(),
                operation: m.operation.clone(),
                subresource: m.subresource.clone(),
                ..Default::default()
            })
        })
        .collect();
    meta.managed_fields = Some(compact);
}

/// The labels the operator reads of an instance's child (ownership, pruning,
/// the label index); no decision reads the others.
const READ_LABELS: [&str; 2] = [LABEL_MANAGED_BY, LABEL_INSTANCE];

/// A cached child of an instance keeps compacted managedFields (above), the
/// labels in [`READ_LABELS`] and the operator's own `kura.dev/` annotations:
/// drift is told by each object's stamp and by who holds its fields, never by
/// comparing labels. (Labels and annotations of seven thousand children were
/// a sixth of the caches at N=1000; docs/benchmarks.md, scale.)
pub fn compact_child<K: Resource>(object: &mut K) {
    compact_managed_fields(object);
    let meta = object.meta_mut();
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| READ_LABELS.contains(&k.as_str()));
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k.starts_with(KURA_ANNOTATIONS));
    }
}

/// A cached instance keeps of its managedFields only which top-level status
/// fields another manager wrote (`status_trust`): the operator writes only
/// an instance's status, never its spec, so no decision depends on who holds
/// which field of the spec. (A client's create entry holds the whole spec:
/// as a value tree, 2.6 MB of a thousand instances' cache; docs/benchmarks.md.)
pub fn compact_instance(instance: &mut KuraInstance) {
    crate::status_trust::compact(&mut instance.metadata);
}
