//! `probe`: is the applied revision active? The workload must be available and
//! every ingress must have an address. When it is not, the reason names the object
//! and the cause (docs/incidents.md #1: "class X has no controller", not a timeout).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::stores::Stores;
use kura_core::keys::ANNOTATION_REVISION;
use kura_core::kind::ChildKind;
use kura_core::render::Desired;
use kura_core::render::hash::short;

/// One reason for the whole way from an apply to available pods. Its message
/// names the step: the StatefulSet taking the revision, then its pods. A new
/// step is written at once; counts within a step ("0/3 replicas available"
/// becoming "1/3 …") at most every `status::MESSAGE_REFRESH`.
const PROGRESSING: &str = "WorkloadProgressing";

use kura_core::outcome::{Activation, INGRESS_NO_ADDRESS};

/// The workload of an instance whose change waits for the rollout budget:
/// `None` while it serves (its last report stands), otherwise why not, from
/// what is live (the StatefulSet runs the revision before the held one).
pub fn held(desired: &Desired, stores: &Stores) -> Option<Activation> {
    let id = &desired
        .objects
        .iter()
        .find(|o| o.id.kind == ChildKind::StatefulSet)?
        .id;
    let Some(sts) = stores.stateful_set(id) else {
        return Some(Activation::Waiting {
            reason: "WorkloadMissing",
            message: format!("StatefulSet {} does not exist", id.name),
        });
    };
    if kura_core::cached_sts::serving(&sts) {
        return None;
    }
    let (want, available) = kura_core::cached_sts::replicas(&sts);
    Some(Activation::Waiting {
        reason: "WorkloadUnavailable",
        message: format!(
            "StatefulSet {}: {available}/{want} replicas available (on the running revision; revision {} waits for the rollout budget)",
            id.name,
            short(&desired.revision)
        ),
    })
}

/// One rendered ingress with what the caches know about it and its class.
pub struct IngressFacts {
    pub name: String,
    pub host: String,
    pub class_name: String,
    pub live: Option<Arc<Ingress>>,
    pub class: Option<Arc<IngressClass>>,
    /// The class's gateway cannot serve it: a pod of it the scheduler cannot place.
    pub gateway_trouble: Option<String>,
}

/// Whether the applied revision is active, from the caches. `rolling_out`: see [`activation`].
pub fn probe(desired: &Desired, stores: &Stores, rolling_out: bool) -> Activation {
    let (sts, ingresses) = gather(desired, stores);
    activation(desired, sts.as_deref(), &ingresses, rolling_out)
}

pub fn gather(desired: &Desired, stores: &Stores) -> (Option<Arc<StatefulSet>>, Vec<IngressFacts>) {
    let mut sts = None;
    let mut ingresses = Vec::new();
    for o in &desired.objects {
        match o.id.kind {
            ChildKind::StatefulSet => sts = stores.stateful_set(&o.id),
            _ => {
                if let Some(spec) = o.manifest.ingress_spec() {
                    let class_name = spec.ingress_class_name.clone();
                    let class = stores.ingress_class(&class_name);
                    ingresses.push(IngressFacts {
                        gateway_trouble: class.as_deref().and_then(|c| stores.gateway_trouble(c)),
                        name: o.id.name.clone(),
                        host: spec
                            .rules
                            .first()
                            .map(|r| r.host.clone())
                            .unwrap_or_default(),
                        class,
                        class_name,
                        live: stores.ingress(&o.id),
                    });
                }
            }
        }
    }
    (sts, ingresses)
}

/// `rolling_out`: the applied revision has not been active yet (it was just
/// applied, or the instance has not been Ready since). Then any workload that
/// is not there yet is WorkloadProgressing; once it was active, a workload that
/// goes missing or down is named for what it is.
pub fn activation(
    desired: &Desired,
    sts: Option<&StatefulSet>,
    ingresses: &[IngressFacts],
    rolling_out: bool,
) -> Activation {
    match workload_waits(desired, sts, rolling_out) {
        Some(waiting) => waiting,
        None => ingresses_activation(ingresses),
    }
}

/// What the workload still waits for, if anything.
fn workload_waits(
    desired: &Desired,
    sts: Option<&StatefulSet>,
    rolling_out: bool,
) -> Option<Activation> {
    let or_progressing = |reason| if rolling_out { PROGRESSING } else { reason };
    let name = desired
        .objects
        .iter()
        .find(|o| o.id.kind == ChildKind::StatefulSet)
        .map_or("", |o| o.id.name.as_str());
    let progress = |reason, available, updated, want| {
        Progress {
            name,
            desired,
            available,
            updated,
            want,
        }
        .waiting(reason)
    };
    let Some(sts) = sts else {
        return Some(if rolling_out {
            // As rendered (rare: only until the cache shows the new object).
            let want = desired
                .objects
                .iter()
                .find(|o| o.id.kind == ChildKind::StatefulSet)
                .and_then(|o| o.body()["spec"]["replicas"].as_i64())
                .unwrap_or(1);
            progress(PROGRESSING, 0, 0, want as i32)
        } else {
            Activation::Waiting {
                reason: "WorkloadMissing",
                message: format!("StatefulSet {name} does not exist"),
            }
        });
    };
    let stamp = sts
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REVISION));
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = sts.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    if stamp.map(String::as_str) != desired.stamp_of(ChildKind::StatefulSet)
        || status.observed_generation.unwrap_or(0) < sts.metadata.generation.unwrap_or(0)
    {
        return Some(progress(PROGRESSING, available, 0, want));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    (updated < want || available < want).then(|| {
        progress(
            or_progressing("WorkloadUnavailable"),
            available,
            updated,
            want,
        )
    })
}

/// From the apply until the pods are all available, one message whose words
/// stay true throughout and whose counts move: where its controller has not
/// taken the revision yet (the StatefulSet not there yet, not showing the
/// revision: right after an apply the cache may still hold the previous
/// StatefulSet, whose available old pods say nothing about this revision;
/// or not observed yet), none of its pods are updated. Counts alone wait for
/// the status refresh, so a rollout costs one status write when it starts
/// and one when it ends, however many steps it passes.
struct Progress<'a> {
    name: &'a str,
    desired: &'a Desired,
    available: i32,
    updated: i32,
    want: i32,
}

impl Progress<'_> {
    fn waiting(&self, reason: &'static str) -> Activation {
        let Progress {
            name,
            desired,
            available,
            updated,
            want,
        } = self;
        Activation::Waiting {
            reason,
            message: format!(
                "StatefulSet {name}: {available}/{want} replicas available, {updated}/{want} updated to revision {} (image {})",
                short(&desired.revision),
                desired.image
            ),
        }
    }
}

/// The workload is available: active once every Ingress has an address.
fn ingresses_activation(ingresses: &[IngressFacts]) -> Activation {
    let mut endpoint = None;
    for ing in ingresses {
        let has_address = ing
            .live
            .as_ref()
            .and_then(|i| i.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
            .is_some_and(|lb| lb.iter().any(|a| a.ip.is_some() || a.hostname.is_some()));
        if !has_address {
            return Activation::Waiting {
                reason: INGRESS_NO_ADDRESS,
                message: format!(
                    "ingress {} has no address; {}",
                    ing.name,
                    no_address_cause(ing)
                ),
            };
        }
        endpoint.get_or_insert_with(|| format!("http://{}/", ing.host));
    }
    Activation::Active {
        endpoint: endpoint.unwrap_or_default(),
    }
}

/// Why an Ingress has no address, as far as the caches tell.
fn no_address_cause(ing: &IngressFacts) -> String {
    match (&ing.class, &ing.gateway_trouble) {
        (None, _) => format!(
            "ingress class {} does not exist (no controller serves it)",
            ing.class_name
        ),
        // The founding incident's cause, said (docs/incidents.md #1).
        (Some(_), Some(trouble)) => format!(
            "ingress class {} has no running controller: {trouble}",
            ing.class_name
        ),
        (Some(class), None) => format!(
            "ingress class {} (controller {}) has not given it an address: is that controller running?",
            ing.class_name,
            class
                .spec
                .as_ref()
                .and_then(|s| s.controller.clone())
                .unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use serde_json::json;

    use super::{Activation, activation};
    use kura_core::render::{Desired, Manifest};

    /// A desired StatefulSet stamped `stamp` (its content hash, as rendered).
    fn desired(stamp: &str) -> Desired {
        let sts = Manifest::bare(kura_core::kind::ChildKind::StatefulSet, "ns", "a");
        let mut d = Desired::from_objects(vec![sts], "pod".into(), "k:2".into());
        d.objects[0]
            .manifest
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(kura_core::keys::ANNOTATION_REVISION, stamp.into());
        d
    }

    fn sts(revision: &str, generation: i64, status: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "generation": generation,
                         "annotations": {"kura.dev/revision": revision}},
            "spec": {"replicas": 1, "selector": {}, "serviceName": "a", "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    fn reason(a: Activation) -> &'static str {
        match a {
            Activation::Waiting { reason, .. } => reason,
            Activation::Active { .. } => "Active",
        }
    }

    #[test]
    fn a_cached_statefulset_of_the_previous_revision_is_not_active() {
        let old = sts(
            "r1",
            1,
            json!({"replicas": 1, "observedGeneration": 1,
            "updatedReplicas": 1, "availableReplicas": 1,
            "currentRevision": "a-1", "updateRevision": "a-1"}),
        );
        assert_eq!(
            reason(activation(&desired("r1"), Some(&old), &[], false)),
            "Active"
        );
        assert_eq!(
            reason(activation(&desired("r2"), Some(&old), &[], true)),
            "WorkloadProgressing"
        );
    }

    /// From the apply until the pods are all available, one message whose
    /// words stay true: only its counts move, so it costs no status write.
    #[test]
    fn a_rollout_is_one_message_whose_counts_move() {
        let d = desired("r2");
        let old = sts(
            "r1",
            1,
            json!({"observedGeneration": 1, "availableReplicas": 1}),
        );
        let unobserved = sts("r2", 2, json!({"observedGeneration": 1}));
        let rolling = sts(
            "r2",
            2,
            json!({"replicas": 1, "observedGeneration": 2,
            "updatedReplicas": 1, "availableReplicas": 0}),
        );
        let messages: Vec<String> = [None, Some(&old), Some(&unobserved), Some(&rolling)]
            .into_iter()
            .map(|w| match activation(&d, w, &[], true) {
                Activation::Waiting { message, .. } => message,
                other => panic!("{other:?}"),
            })
            .collect();
        let masked: Vec<String> = messages
            .iter()
            .map(|m| kura_core::status::without_counts(m))
            .collect();
        assert!(masked.iter().all(|m| m == &masked[0]), "{messages:?}");
        // Until its controller takes the revision, none is updated to it,
        // whatever the previous StatefulSet's pods say.
        assert!(
            messages[1].contains("1/1 replicas available, 0/1 updated"),
            "{messages:?}"
        );
        assert!(
            messages[3].contains("0/1 replicas available, 1/1 updated"),
            "{messages:?}"
        );
    }

    #[test]
    fn a_rollout_progresses_and_a_workload_that_was_active_and_went_down_is_named() {
        let d = desired("r2");
        let unobserved = sts("r2", 2, json!({"observedGeneration": 1}));
        let down = sts(
            "r2",
            2,
            json!({"replicas": 1, "observedGeneration": 2,
            "updatedReplicas": 1, "availableReplicas": 0}),
        );
        for (workload, after_active) in [
            (Some(&unobserved), "WorkloadProgressing"),
            (Some(&down), "WorkloadUnavailable"),
            (None, "WorkloadMissing"),
        ] {
            assert_eq!(
                reason(activation(&d, workload, &[], true)),
                "WorkloadProgressing"
            );
            assert_eq!(reason(activation(&d, workload, &[], false)), after_active);
        }
    }
}
