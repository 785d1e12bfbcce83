//! What a gateway reconcile did (`Outcome`), the status it leads to and the
//! Events it is worth, all pure; the write is `reconcile::status::write_status`,
//! shared with instances.

use jiff::Timestamp;
use kube::runtime::events::{Event, EventType};

use super::observe::Observed;
use super::plan::failures_for;
use crate::api::conditions::{self, FIELD_CONFLICT, READY, RECONCILING, STALLED, VALID, find};
use crate::api::{Condition, ConditionStatus, InventoryEntry, KuraGatewayStatus, RetryStatus};
use crate::keys::GATEWAY_FIELD_MANAGER;
use crate::kind::ChildKind;
use crate::reconcile::apply::{Failure, FailureClass};
use crate::reconcile::plan::{ApplyReason, RetryPolicy, conflict, inputs_key};
use crate::reconcile::status::failure_reason;
use crate::render::{Desired, hash::short};
use crate::validate::ValidationErrors;

/// Specific: whether the operator created the gateway (and so collects it).
pub const MANAGED: &str = "Managed";
/// Specific: who keeps the gateway.
pub const IN_USE: &str = "InUse";

#[derive(Debug)]
pub enum Outcome {
    Invalid(ValidationErrors),
    NameConflict(Vec<String>),
    Applied {
        reasons: Vec<ApplyReason>,
        sent: Vec<String>,
        /// Children moved from the instances' field manager to the gateway's.
        released: Vec<String>,
        inventory: Vec<InventoryEntry>,
    },
    ApplyFailed {
        reasons: Vec<ApplyReason>,
        failure: Failure,
    },
    /// A failing apply waits for its backoff or stall window.
    Waiting,
    /// Another writer keeps undoing ours; this window's take-backs are spent.
    ConflictHold {
        managers: Vec<String>,
    },
    Converged,
}

impl Outcome {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Invalid(_) => "invalid",
            Outcome::NameConflict(_) => "name-conflict",
            Outcome::Applied { .. } => "applied",
            Outcome::ApplyFailed { .. } => "apply-failed",
            Outcome::Waiting => "waiting",
            Outcome::ConflictHold { .. } => "conflict-hold",
            Outcome::Converged => "converged",
        }
    }

    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::ApplyFailed { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

pub struct StatusInputs<'a> {
    pub observed: &'a Observed,
    pub desired: Option<&'a Desired>,
    pub outcome: &'a Outcome,
    /// Who uses the gateway, if anything does.
    pub user: Option<&'a str>,
    pub policy: &'a RetryPolicy,
    pub now: Timestamp,
}

pub fn compute(i: &StatusInputs) -> KuraGatewayStatus {
    use ConditionStatus::{False, True};
    let prev = &i.observed.status;
    let mut s = prev.clone();
    if let Outcome::Waiting = i.outcome {
        return s; // nothing new to say until the retry
    }
    s.observed_generation = i.observed.generation;
    let c = |t: &str, st: ConditionStatus, reason: &str, msg: String| {
        let mut c = Condition::new(t, st, reason, msg);
        c.observed_generation = i.observed.generation;
        c
    };
    let mut fresh = vec![
        if i.observed.managed {
            c(
                MANAGED,
                True,
                "CreatedByOperator",
                "collected once no KuraInstance or Ingress of its namespace uses it".into(),
            )
        } else {
            c(MANAGED, False, "NotCreatedByOperator", "not created by kura-operator (labelled app.kubernetes.io/managed-by=kura-operator and applied by its field manager): served, never collected by the operator".into())
        },
        match i.user {
            Some(user) => c(IN_USE, True, "Used", format!("used by {user}")),
            None => c(
                IN_USE,
                False,
                "Unused",
                "no KuraInstance or Ingress of its namespace uses it".into(),
            ),
        },
    ];
    match i.outcome {
        Outcome::Invalid(errors) => {
            let msg = errors.to_string();
            fresh.push(c(VALID, False, "InvalidSpec", msg.clone()));
            fresh.push(c(
                READY,
                False,
                "InvalidSpec",
                format!("nothing applied: {msg}"),
            ));
            fresh.push(c(
                RECONCILING,
                False,
                "InvalidSpec",
                "waiting for a corrected spec".into(),
            ));
            fresh.push(c(STALLED, True, "InvalidSpec", msg));
        }
        Outcome::NameConflict(conflicts) => {
            let msg = format!(
                "nothing applied: {}; rename or remove it",
                conflicts.join("; ")
            );
            fresh.push(c(VALID, True, "Valid", String::new()));
            fresh.push(c(READY, False, "NameConflict", msg.clone()));
            fresh.push(c(RECONCILING, False, "NameConflict", String::new()));
            fresh.push(c(STALLED, True, "NameConflict", msg));
        }
        Outcome::ApplyFailed { failure, .. } => {
            fresh.push(c(VALID, True, "Valid", String::new()));
            let error = failure.to_string();
            fresh.push(c(READY, False, failure_reason(failure), error.clone()));
            if failure.is_transient() {
                fresh.push(c(STALLED, False, "TransientFailure", String::new()));
                fresh.push(c(RECONCILING, True, "TransientFailure", error));
            } else {
                let d = i.desired.expect("an apply needs a desired state");
                let key = inputs_key(&d.revision, None);
                let failures = failures_for(prev, &key).saturating_add(1);
                s.retry = Some(RetryStatus {
                    failures,
                    inputs_key: key,
                    last_error: error.clone(),
                    last_failure_time: i.now.to_string(),
                });
                let stalled = failures >= i64::from(i.policy.budget);
                let (st, reason) = if stalled {
                    (True, failure_reason(failure))
                } else {
                    (False, "Retrying")
                };
                fresh.push(c(
                    STALLED,
                    st,
                    reason,
                    if stalled {
                        error.clone()
                    } else {
                        String::new()
                    },
                ));
                fresh.push(c(
                    RECONCILING,
                    if stalled { False } else { True },
                    reason,
                    format!("attempt {failures} failed: {error}"),
                ));
            }
        }
        Outcome::Applied {
            reasons, inventory, ..
        } => {
            let d = i.desired.expect("an apply needs a desired state");
            s.applied_revision = Some(d.revision.clone());
            s.inventory = inventory.clone();
            s.conflict = conflict::after_apply(prev.conflict.as_ref(), reasons, i.now);
            serving(&mut s, &mut fresh, i, &c);
        }
        Outcome::Converged => {
            s.conflict = conflict::still_open(prev.conflict.as_ref(), i.now);
            serving(&mut s, &mut fresh, i, &c);
        }
        // Everything else stands; only the conflict is news.
        Outcome::ConflictHold { .. } => fresh.extend(
            prev.conditions
                .iter()
                .filter(|p| fresh.iter().all(|f| f.type_ != p.type_))
                .filter(|p| p.type_ != FIELD_CONFLICT)
                .cloned()
                .collect::<Vec<_>>(),
        ),
        Outcome::Waiting => unreachable!("returned above"),
    }
    // Said while the record calls for it, whatever else happened.
    if let Some(msg) = conflict::condition_message(s.conflict.as_ref(), i.now) {
        fresh.push(c(FIELD_CONFLICT, True, "ContestedFields", msg));
    }
    s.conditions = conditions::merge(&prev.conditions, fresh, &i.now.to_string());
    s
}

/// Everything applied: Ready, naming the class served.
fn serving(
    s: &mut KuraGatewayStatus,
    fresh: &mut Vec<Condition>,
    i: &StatusInputs,
    c: &dyn Fn(&str, ConditionStatus, &str, String) -> Condition,
) {
    use ConditionStatus::{False, True};
    s.retry = None;
    let class = i
        .desired
        .and_then(|d| {
            d.objects
                .iter()
                .find(|o| o.id.kind == ChildKind::IngressClass)
        })
        .map(|o| o.id.name.clone())
        .unwrap_or_default();
    let revision = short(s.applied_revision.as_deref().unwrap_or_default());
    fresh.push(c(VALID, True, "Valid", String::new()));
    fresh.push(c(
        READY,
        True,
        "Applied",
        format!("revision {revision} serves ingress class {class}"),
    ));
    fresh.push(c(RECONCILING, False, "Applied", String::new()));
    fresh.push(c(STALLED, False, "Applied", String::new()));
}

fn event(type_: EventType, reason: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    }
}

/// Events on transitions: an apply or repair (with its reasons), a take-back
/// of a field another manager held (naming it), a move to the gateway's field
/// manager, an invalid spec, a name conflict or failure when
/// Ready starts to say it.
pub fn events_for(
    prev: &KuraGatewayStatus,
    new: &KuraGatewayStatus,
    outcome: &Outcome,
) -> Vec<Event> {
    let mut out = Vec::new();
    let ready_news = || {
        let reason_and_message = |s: &KuraGatewayStatus| {
            find(&s.conditions, READY).map(|c| (c.reason.clone(), c.message.clone()))
        };
        reason_and_message(prev) != reason_and_message(new)
    };
    match outcome {
        Outcome::Applied {
            reasons,
            sent,
            released,
            ..
        } => {
            let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            let rev = short(new.applied_revision.as_deref().unwrap_or_default());
            out.push(event(
                EventType::Normal,
                "Applied",
                format!(
                    "applied revision {rev} ({}): {}",
                    sent.join(", "),
                    why.join(", ")
                ),
            ));
            if let Some(note) = conflict::took_back(reasons) {
                out.push(event(EventType::Warning, "FieldConflict", note));
            }
            if !released.is_empty() {
                out.push(event(
                    EventType::Normal,
                    "FieldManagerMigrated",
                    format!(
                        "{} now applied by field manager {GATEWAY_FIELD_MANAGER} alone",
                        released.join(", ")
                    ),
                ));
            }
        }
        Outcome::Invalid(errors) => {
            let changed = find(&prev.conditions, VALID).is_none_or(|c| {
                c.status != ConditionStatus::False || c.message != errors.to_string()
            });
            if changed {
                out.push(event(EventType::Warning, "InvalidSpec", errors.to_string()));
            }
        }
        Outcome::NameConflict(_) if ready_news() => {
            let msg = find(&new.conditions, READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            out.push(event(EventType::Warning, "NameConflict", msg));
        }
        Outcome::ApplyFailed { failure, .. } if ready_news() => {
            let reason = match failure.class {
                FailureClass::NameConflict => "NameConflict",
                _ => failure_reason(failure),
            };
            out.push(event(EventType::Warning, reason, failure.to_string()));
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests;
