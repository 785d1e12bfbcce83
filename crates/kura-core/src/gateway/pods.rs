//! A gateway's pods as the scheduler left them: the one fact about them the
//! operator reports (docs/incidents.md #1: the dedicated gateway that could
//! never bind :80/:443 stayed Pending for hours and nothing said so). The
//! operator caches the gateways' pods by label, their metadata and status only;
//! this reads them.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// A pod of a gateway the scheduler cannot place, and its reason: the
/// message of the pod's `PodScheduled=False` condition, as the scheduler wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pod {} cannot be scheduled: {}", self.pod, self.reason)
    }
}

/// The pod, if the scheduler reports that it cannot place it (a pod being
/// deleted counts no more: the Deployment replaces it).
pub fn unschedulable(pod: &Pod) -> Option<Unschedulable> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let scheduled = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    (scheduled.status == "False").then(|| Unschedulable {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        reason: scheduled
            .message
            .clone()
            .or_else(|| scheduled.reason.clone())
            .unwrap_or_else(|| "no reason given".into()),
    })
}

/// What a cache needs to keep of a gateway's pod: its name, namespace and
/// labels, and its `PodScheduled` condition; nothing of its spec.
pub fn compact(pod: &mut Pod) {
    pod.spec = None;
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    if let Some(status) = pod.status.as_mut() {
        let scheduled = status
            .conditions
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ == "PodScheduled")
            .collect();
        *status = k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(scheduled),
            ..Default::default()
        };
    }
}

/// The gateway's report of its unschedulable pods: `None` when every pod is placed.
pub fn report(gateway: &str, pods: &[Unschedulable]) -> Option<String> {
    let first = pods.first()?;
    let more = match pods.len() {
        1 => String::new(),
        n => format!(" (and {} more of its pods)", n - 1),
    };
    Some(format!("gateway {gateway}: {first}{more}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "gw-a-0", "namespace": "ns", "labels": {"kura.dev/gateway": "gw-a"},
                         "annotations": {"x": "y"}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            "status": {"phase": "Pending", "conditions": conditions},
        }))
        .unwrap()
    }

    const NO_PORTS: &str =
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.";

    #[test]
    fn a_pod_the_scheduler_cannot_place_is_named_with_the_schedulers_message() {
        let p = pod(json!([{"type": "PodScheduled", "status": "False",
                            "reason": "Unschedulable", "message": NO_PORTS}]));
        let u = unschedulable(&p).unwrap();
        assert_eq!(u.pod, "gw-a-0");
        assert_eq!(u.reason, NO_PORTS);
        assert_eq!(
            report("gw-a", &[u.clone(), u]).unwrap(),
            format!(
                "gateway gw-a: pod gw-a-0 cannot be scheduled: {NO_PORTS} (and 1 more of its pods)"
            )
        );
    }

    #[test]
    fn a_placed_pod_a_pod_not_yet_seen_by_the_scheduler_or_one_being_deleted_is_not() {
        let placed = pod(json!([{"type": "PodScheduled", "status": "True"}]));
        assert_eq!(unschedulable(&placed), None);
        assert_eq!(unschedulable(&pod(json!([]))), None);
        let mut leaving =
            pod(json!([{"type": "PodScheduled", "status": "False", "message": NO_PORTS}]));
        leaving.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        assert_eq!(unschedulable(&leaving), None);
        assert_eq!(report("gw-a", &[]), None);
    }

    #[test]
    fn the_cache_keeps_the_scheduled_condition_and_no_spec() {
        let mut p = pod(json!([
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "False", "message": NO_PORTS},
        ]));
        let before = unschedulable(&p);
        compact(&mut p);
        assert!(p.spec.is_none() && p.metadata.annotations.is_none());
        assert_eq!(
            p.status
                .as_ref()
                .unwrap()
                .conditions
                .as_ref()
                .unwrap()
                .len(),
            1
        );
        assert!(
            p.metadata.labels.is_some(),
            "the labels map it to its gateway"
        );
        assert_eq!(unschedulable(&p), before);
    }
}
