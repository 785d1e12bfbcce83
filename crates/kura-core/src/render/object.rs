//! The rendered set: objects with identities, hashes and the revision.

use serde_json::Value;

use super::hash;
use super::manifest::Manifest;
use crate::api::InventoryEntry;
use crate::keys::ANNOTATION_REVISION;
use crate::kind::ChildKind;

/// Identity of a rendered object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub kind: ChildKind,
    pub namespace: Option<String>,
    pub name: String,
}

/// The canonical order of the set, which the revision hashes over: by
/// (apiVersion, kind, namespace, name) as strings.
impl Ord for ObjectId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |id: &ObjectId| (id.kind.api_version(), id.kind.kind());
        key(self)
            .cmp(&key(other))
            .then_with(|| self.namespace.cmp(&other.namespace))
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for ObjectId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ObjectId {
    pub fn of(manifest: &Manifest) -> ObjectId {
        ObjectId {
            kind: manifest.kind,
            namespace: manifest.metadata.namespace.clone(),
            name: manifest.metadata.name.clone(),
        }
    }

    /// The object an inventory entry names, if it is of a kind the operator
    /// manages (an inventory is status, which anyone with access can write).
    pub fn from_inventory(entry: &InventoryEntry) -> Option<ObjectId> {
        Some(ObjectId {
            kind: ChildKind::parse(&entry.api_version, &entry.kind)?,
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
        })
    }

    pub fn inventory_entry(&self, hash: String, owned_fields: Option<String>) -> InventoryEntry {
        InventoryEntry {
            api_version: self.kind.api_version().to_string(),
            kind: self.kind.kind().to_string(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            hash,
            owned_fields,
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
    /// Hash every object, derive the revision from the ordered hashes, then
    /// stamp each object with its own hash.
    pub fn from_objects(
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
            let stamp = object.hash.clone();
            object
                .manifest
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(ANNOTATION_REVISION, stamp);
        }
        Desired {
            objects,
            revision,
            pod_template_hash,
            image,
        }
    }

    /// The stamp of the first object of `kind` (the StatefulSet's, say).
    pub fn stamp_of(&self, kind: ChildKind) -> Option<&str> {
        self.objects.iter().find(|o| o.id.kind == kind)?.stamp()
    }

    pub fn inventory(&self) -> Vec<InventoryEntry> {
        self.objects
            .iter()
            .map(|o| o.id.inventory_entry(o.hash.clone(), None))
            .collect()
    }
}
