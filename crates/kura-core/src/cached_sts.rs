//! What the operator's cache keeps of a StatefulSet, and how it is read back.
//!
//! A cached StatefulSet keeps its metadata (compacted as every child's), the
//! replica count, the pod template's `kura.dev/pod-template-hash` and its
//! status. Of the pod template's spec and the claim templates, `observe` and
//! `storage::pin` read two facts: the image of the Kura container and the
//! class and size of the `data` claim template. As typed objects those were
//! the largest part of every cached StatefulSet (a `PodSpec` is 1.5 KB and a
//! `Container` 2.1 KB before any field is set, a claim template 1 KB: about
//! 5 MB of a thousand instances' cache; docs/benchmarks.md, scale). So the
//! cache keeps the two facts as annotations of the template's metadata,
//! under keys of its own that nothing writes to the cluster, and drops the
//! rest. Everything that reads them goes through [`image`] and [`data_claim`].

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::keys::{ANNOTATION_POD_TEMPLATE_HASH, KURA_CONTAINER};

/// The claim template of the live StatefulSet (its `data` template).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveClaim {
    pub class: Option<String>,
    pub size: Option<String>,
}

/// The Kura container's image, as the live template has it.
const IMAGE: &str = "cache.kura.dev/image";
/// Present when the live StatefulSet has a `data` claim template.
const DATA_CLAIM: &str = "cache.kura.dev/data-claim";
const DATA_CLAIM_CLASS: &str = "cache.kura.dev/data-claim-class";
const DATA_CLAIM_SIZE: &str = "cache.kura.dev/data-claim-size";

/// Every pod the StatefulSet wants is available now, whatever its revision:
/// the instance serves from its pods, so a restart would take that away
/// (the fleet budget counts it). None wanted serves nothing.
pub fn serving(sts: &StatefulSet) -> bool {
    serves(replicas(sts))
}

/// [`serving`], of the counts [`replicas`] gives.
pub fn serves((want, available): (i32, i32)) -> bool {
    want > 0 && available >= want
}

/// The replicas the StatefulSet wants, and how many are available.
pub fn replicas(sts: &StatefulSet) -> (i32, i32) {
    counts(
        sts.spec.as_ref().and_then(|s| s.replicas),
        sts.status.as_ref().and_then(|s| s.available_replicas),
    )
}

/// [`replicas`], of `spec.replicas` and `status.availableReplicas` (the
/// API's defaults for what is unset: one wanted, none available).
pub fn counts(want: Option<i32>, available: Option<i32>) -> (i32, i32) {
    (want.unwrap_or(1), available.unwrap_or(0))
}

/// Trims `sts` to what the cache keeps (module documentation).
pub fn compact(sts: &mut StatefulSet) {
    crate::compact::compact_child(sts);
    let Some(spec) = sts.spec.as_mut() else {
        return;
    };
    let mut kept = BTreeMap::new();
    let hash = spec
        .template
        .metadata
        .as_mut()
        .and_then(|m| m.annotations.as_mut()?.remove(ANNOTATION_POD_TEMPLATE_HASH));
    if let Some(hash) = hash {
        kept.insert(ANNOTATION_POD_TEMPLATE_HASH.to_string(), hash);
    }
    let image = spec.template.spec.as_mut().and_then(|pod| {
        pod.containers
            .iter_mut()
            .find(|c| c.name == KURA_CONTAINER)?
            .image
            .take()
    });
    if let Some(image) = image {
        kept.insert(IMAGE.to_string(), image);
    }
    let claim = spec.volume_claim_templates.as_mut().and_then(|templates| {
        templates
            .iter_mut()
            .find(|t| t.metadata.name.as_deref() == Some("data"))
    });
    if let Some(claim) = claim {
        kept.insert(DATA_CLAIM.to_string(), String::new());
        let spec = claim.spec.as_mut();
        if let Some(class) = spec.as_ref().and_then(|s| s.storage_class_name.clone()) {
            kept.insert(DATA_CLAIM_CLASS.to_string(), class);
        }
        let size = spec
            .and_then(|s| s.resources.as_mut()?.requests.as_mut()?.remove("storage"))
            .map(|q| q.0);
        if let Some(size) = size {
            kept.insert(DATA_CLAIM_SIZE.to_string(), size);
        }
    }
    *spec = StatefulSetSpec {
        replicas: spec.replicas,
        template: PodTemplateSpec {
            metadata: (!kept.is_empty()).then(|| ObjectMeta {
                annotations: Some(kept),
                ..Default::default()
            }),
            spec: None,
        },
        ..Default::default()
    };
}

fn kept<'a>(sts: &'a StatefulSet, key: &str) -> Option<&'a String> {
    sts.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
}

/// The Kura container's image of a cached StatefulSet.
pub fn image(sts: &StatefulSet) -> Option<&str> {
    kept(sts, IMAGE).map(String::as_str)
}

/// The pod template's `kura.dev/pod-template-hash` of a cached StatefulSet.
pub fn pod_template_hash(sts: &StatefulSet) -> Option<&str> {
    kept(sts, ANNOTATION_POD_TEMPLATE_HASH).map(String::as_str)
}

/// The `data` claim template of a cached StatefulSet, if it has one.
pub fn data_claim(sts: &StatefulSet) -> Option<LiveClaim> {
    kept(sts, DATA_CLAIM)?;
    Some(LiveClaim {
        class: kept(sts, DATA_CLAIM_CLASS).cloned(),
        size: kept(sts, DATA_CLAIM_SIZE).cloned(),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use serde_json::json;

    use super::{LiveClaim, compact, data_claim, image, pod_template_hash};

    fn sts(claims: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "generation": 3},
            "spec": {
                "replicas": 3, "serviceName": "a", "selector": {"matchLabels": {"app": "a"}},
                "template": {
                    "metadata": {"labels": {"app": "a"}, "annotations": {"kura.dev/pod-template-hash": "p1", "other": "x"}},
                    "spec": {
                        "containers": [
                            {"name": "sidecar", "image": "s:1"},
                            {"name": "kura", "image": "k:1", "env": [{"name": "X", "value": "1"}]},
                        ],
                        "volumes": [{"name": "v", "emptyDir": {}}]}},
                "volumeClaimTemplates": claims,
            },
            "status": {"replicas": 3, "availableReplicas": 2, "updatedReplicas": 3, "observedGeneration": 3},
        }))
        .unwrap()
    }

    /// A trimmed StatefulSet still answers what observe, probe and the
    /// storage pin ask of it, and keeps nothing else of its templates.
    #[test]
    fn a_trimmed_stateful_set_answers_what_the_reconcile_reads() {
        let mut s = sts(json!([
            {"metadata": {"name": "other"}},
            {"metadata": {"name": "data"}, "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "5Gi"}}}},
        ]));
        let status = s.status.clone();
        compact(&mut s);
        assert_eq!(image(&s), Some("k:1"));
        assert_eq!(pod_template_hash(&s), Some("p1"));
        assert_eq!(
            data_claim(&s),
            Some(LiveClaim {
                class: Some("fast".into()),
                size: Some("5Gi".into())
            })
        );
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert!(spec.template.spec.is_none() && spec.volume_claim_templates.is_none());
        let annotations = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap();
        assert_eq!(
            annotations.len(),
            5,
            "hash, image, claim, class and size only: {annotations:?}"
        );
        assert_eq!(s.status, status);
        assert_eq!(s.metadata.generation, Some(3));
    }

    #[test]
    fn a_claim_template_without_class_or_size_is_still_a_claim() {
        let mut s = sts(json!([{"metadata": {"name": "data"}}]));
        compact(&mut s);
        assert_eq!(
            data_claim(&s),
            Some(LiveClaim {
                class: None,
                size: None
            })
        );
        let mut none = sts(json!([]));
        compact(&mut none);
        assert_eq!(data_claim(&none), None);
        assert_eq!(image(&none), Some("k:1"));
    }
}
