//! Plan fixtures: a small desired set and an instance converged on it, for
//! the plan's tables and the status tables here, and for the operator crate's tests
//! (feature `fixtures`).

use std::collections::BTreeMap;

use super::{LiveChild, Observed};
use crate::api::{KuraInstanceStatus, Phase};
use crate::keys::ANNOTATION_REVISION;
use crate::kind::ChildKind;
use crate::render::{Desired, Manifest, ObjectId, RenderedObject};

/// An object of `revision`: its content hash (and so its stamp) is
/// `<revision>-<name>`, so every object differs between two revisions.
pub fn object(kind: ChildKind, name: &str, revision: &str) -> RenderedObject {
    let hash = format!("{revision}-{name}");
    let mut manifest = Manifest::bare(kind, "ns", name);
    manifest.metadata.annotations = Some([(ANNOTATION_REVISION, hash.clone())].into());
    RenderedObject {
        id: ObjectId::of(&manifest),
        manifest,
        hash,
    }
}

/// A workload and a config map on `revision`.
pub fn desired(revision: &str, image: &str) -> Desired {
    let mut objects = vec![
        object(ChildKind::StatefulSet, "a", revision),
        object(ChildKind::ConfigMap, "a-config", revision),
    ];
    objects.sort_by(|a, b| a.id.cmp(&b.id));
    Desired {
        objects,
        revision: revision.into(),
        pod_template_hash: "p".into(),
        image: image.into(),
    }
}

/// An instance fully converged on `d`, in `phase`.
pub fn converged(d: &Desired, phase: Phase) -> Observed {
    let mut status = KuraInstanceStatus {
        applied_revision: Some(d.revision.clone()),
        phase: Some(phase),
        inventory: d.inventory(),
        ..Default::default()
    };
    for e in &mut status.inventory {
        e.owned_fields = Some("f1".into());
    }
    let children: BTreeMap<_, _> = d
        .objects
        .iter()
        .map(|o| (o.id.clone(), LiveChild::ours(&o.hash, "f1")))
        .collect();
    Observed {
        generation: Some(1),
        status,
        children,
        running_image: Some(d.image.clone()),
        ..Default::default()
    }
}
