//! The rendered set: objects with identities, hashes and the revision.

use serde_json::Value;

use super::hash;
use super::manifest::Manifest;
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
    pub fn of(manifest: &Manifest) -> ObjectId {
        ObjectId {
            api_version: manifest.api_version.to_string(),
            kind: manifest.kind.to_string(),
            namespace: manifest.metadata.namespace.clone(),
            name: manifest.metadata.name.clone(),
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
    pub manifest: Manifest,
    /// sha256 of the canonical form before the revision stamp.
    pub hash: String,
}

impl RenderedObject {
    /// The `kura.dev/revision` stamped into the manifest.
    pub fn stamp(&self) -> Option<&str> {
        let annotations = self.manifest.metadata.annotations.as_ref()?;
        annotations.get(ANNOTATION_REVISION).map(String::as_str)
    }

    /// The manifest as a JSON value, for printing and inspection; the operator
    /// applies [`RenderedObject::manifest`] itself.
    pub fn body(&self) -> Value {
        serde_json::to_value(&self.manifest).expect("a manifest serialises")
    }
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
        manifests: Vec<Manifest>,
        pod_template_hash: String,
        image: String,
    ) -> Desired {
        let mut objects: Vec<RenderedObject> = manifests
            .into_iter()
            .map(|manifest| RenderedObject {
                id: ObjectId::of(&manifest),
                hash: hash::manifest_hash(&manifest),
                manifest,
            })
            .collect();
        objects.sort_by(|a, b| a.id.cmp(&b.id));
        let revision = hash::revision(objects.iter().map(|o| (&o.id, o.hash.as_str())));
        for object in &mut objects {
            let stamp = expected_stamp(&object.id, &object.hash, &revision);
            object
                .manifest
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(ANNOTATION_REVISION, stamp.to_string());
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
