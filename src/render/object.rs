//! The rendered set: objects with identities, hashes and the revision.

use serde_json::Value;

use super::hash;
use crate::api::InventoryEntry;
use crate::keys::ANNOTATION_REVISION;

/// Identity of a rendered object; its order is the canonical order of the set.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectId {
    pub fn of(body: &Value) -> ObjectId {
        // Plain lookups: `Value::pointer` allocates to unescape every path segment.
        let s = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        let metadata = body.get("metadata").unwrap_or(&Value::Null);
        ObjectId {
            api_version: s(body, "apiVersion").unwrap_or_default(),
            kind: s(body, "kind").unwrap_or_default(),
            namespace: s(metadata, "namespace"),
            name: s(metadata, "name").unwrap_or_default(),
        }
    }

    pub fn from_inventory(entry: &InventoryEntry) -> ObjectId {
        ObjectId {
            api_version: entry.api_version.clone(),
            kind: entry.kind.clone(),
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
        }
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    pub id: ObjectId,
    /// The manifest, with the revision annotation stamped in.
    pub body: Value,
    /// sha256 of the canonical form before the revision stamp.
    pub hash: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// In canonical order (by [`ObjectId`]).
    pub objects: Vec<RenderedObject>,
    pub revision: String,
    pub pod_template_hash: String,
    pub image: String,
}

impl Desired {
    /// Hash every object, derive the revision from the ordered hashes, then stamp it.
    pub(crate) fn from_objects(
        bodies: Vec<Value>,
        pod_template_hash: String,
        image: String,
    ) -> Desired {
        let mut objects: Vec<RenderedObject> = bodies
            .into_iter()
            .map(|body| RenderedObject {
                id: ObjectId::of(&body),
                hash: hash::object_hash(&body),
                body,
            })
            .collect();
        objects.sort_by(|a, b| a.id.cmp(&b.id));
        let revision = hash::revision(objects.iter().map(|o| (&o.id, o.hash.as_str())));
        for object in &mut objects {
            // Disjoint fields: the stamp is borrowed, not copied before `stamp` copies it.
            stamp(
                &mut object.body,
                expected_stamp(&object.id, &object.hash, &revision),
            );
        }
        Desired {
            objects,
            revision,
            pod_template_hash,
            image,
        }
    }

    pub fn inventory(&self) -> Vec<InventoryEntry> {
        self.objects
            .iter()
            .map(|o| InventoryEntry {
                api_version: o.id.api_version.clone(),
                kind: o.id.kind.clone(),
                name: o.id.name.clone(),
                namespace: o.id.namespace.clone(),
                hash: o.hash.clone(),
                owned_fields: None,
            })
            .collect()
    }
}

/// The `kura.dev/revision` an object carries: the instance revision, except on a
/// shared KuraGateway, which carries its own content hash so that the instances
/// sharing it never fight over the annotation.
pub fn expected_stamp<'a>(id: &ObjectId, object_hash: &'a str, revision: &'a str) -> &'a str {
    if id.kind == "KuraGateway" {
        object_hash
    } else {
        revision
    }
}

fn stamp(body: &mut Value, revision: &str) {
    let metadata = body
        .as_object_mut()
        .and_then(|o| o.get_mut("metadata"))
        .and_then(Value::as_object_mut);
    if let Some(metadata) = metadata {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = annotations.as_object_mut() {
            map.insert(
                ANNOTATION_REVISION.to_string(),
                Value::String(revision.to_string()),
            );
        }
    }
}
