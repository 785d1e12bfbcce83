//! The one Normal Event of a fleet rollout, on the operator's own Pod (a
//! module of its own: the context holds it, and `reconcile` uses both).

use kube::runtime::events::{Event, EventType};

/// The one Normal Event of a fleet rollout: a revision the operator
/// originated (its configuration or release) rolls out across the fleet with
/// no Normal Event per instance (`kura_core::events`), so this is where it is
/// said, through the fenced client as an instance's Events are. Once per process and
/// fleet revision (a replica that takes over, or a restart, says it again);
/// outside a pod (no downward API) in the log only.
pub struct FleetRollouts {
    target: Option<crate::crd_check::EventTarget>,
    said: std::sync::Mutex<Option<String>>,
}

impl FleetRollouts {
    pub fn new(target: Option<crate::crd_check::EventTarget>) -> FleetRollouts {
        FleetRollouts {
            target,
            said: std::sync::Mutex::new(None),
        }
    }

    /// Says that the fleet rolls out to `fleet_revision`, unless said already.
    pub fn announce(&self, fleet_revision: &str) {
        {
            let mut said = self
                .said
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if said.as_deref() == Some(fleet_revision) {
                return;
            }
            *said = Some(fleet_revision.to_string());
        }
        let revision = kura_core::render::hash::short(fleet_revision);
        tracing::info!(fleet_revision = %revision, "fleet rollout: the operator's configuration or release changed");
        let Some((client, reporter, pod)) = &self.target else {
            return;
        };
        let event = Event {
            type_: EventType::Normal,
            reason: "FleetRollout".into(),
            note: Some(format!(
                "fleet revision {revision}: the operator's configuration or release changed; \
                 every instance is rolled out to it as the budget and windows allow \
                 (`kura-operator rollout status -A` follows it)"
            )),
            action: "Rollout".into(),
            secondary: None,
        };
        crate::recorder::publish(client.clone(), reporter.clone(), pod.clone(), vec![event]);
    }
}
