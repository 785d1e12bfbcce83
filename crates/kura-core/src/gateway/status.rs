//! What a gateway reconcile did (`Outcome`), the status it leads to and the
//! Events it is worth, all pure; the operator writes the status (the same
//! write as an instance's) and publishes the Events.

use jiff::Timestamp;

use super::observed::Observed;
use super::plan::failures_for;
use crate::api::conditions::{self, FIELD_CONFLICT, READY, RECONCILING, STALLED, VALID, find};
use crate::api::{Condition, ConditionStatus, InventoryEntry, KuraGatewayStatus, RetryStatus};
use crate::events::{Note, NoteType};
use crate::keys::{GATEWAY_FIELD_MANAGER, LEGACY_GATEWAY_FINALIZER};
use crate::kind::ChildKind;
use crate::outcome::{Failure, FailureClass};
use crate::plan::{ApplyReason, RetryPolicy, conflict, inputs_key};
use crate::render::{Desired, hash::short};
use crate::status::failure_reason;
use crate::validate::ValidationErrors;

/// Specific: whether the operator created the gateway (and so collects it).
pub const MANAGED: &str = "Managed";
/// Specific: who keeps the gateway.
pub const IN_USE: &str = "InUse";
/// Ready's reason while a pod of the gateway cannot be scheduled.
pub const POD_UNSCHEDULABLE: &str = "PodUnschedulable";

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

impl StatusInputs<'_> {
    /// A condition of the generation observed.
    fn condition(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        msg: String,
    ) -> Condition {
        let mut c = Condition::new(type_, status, reason, msg);
        c.observed_generation = self.observed.generation;
        c
    }
}

pub fn compute(i: &StatusInputs) -> KuraGatewayStatus {
    let prev = &i.observed.status;
    let mut s = prev.clone();
    if let Outcome::Waiting = i.outcome {
        return s; // nothing new to say until the retry
    }
    s.observed_generation = i.observed.generation;
    let mut fresh = standing(i);
    match i.outcome {
        Outcome::Invalid(errors) => fresh.extend(invalid(i, errors)),
        Outcome::NameConflict(conflicts) => fresh.extend(name_conflict(i, conflicts)),
        Outcome::ApplyFailed { failure, .. } => fresh.extend(apply_failed(&mut s, i, failure)),
        Outcome::Applied {
            reasons, inventory, ..
        } => {
            if let Some(d) = i.desired {
                s.applied_revision = Some(d.revision.clone());
            }
            s.inventory = inventory.clone();
            s.conflict = conflict::after_apply(prev.conflict.as_ref(), reasons, i.now);
            fresh.extend(serving(&mut s, i));
        }
        Outcome::Converged => {
            s.conflict = conflict::still_open(prev.conflict.as_ref(), i.now);
            fresh.extend(serving(&mut s, i));
        }
        // Everything else stands; only the conflict is news.
        Outcome::ConflictHold { .. } => {
            let kept: Vec<Condition> = prev
                .conditions
                .iter()
                .filter(|p| fresh.iter().all(|f| f.type_ != p.type_))
                .filter(|p| p.type_ != FIELD_CONFLICT)
                .cloned()
                .collect();
            fresh.extend(kept);
        }
        Outcome::Waiting => unreachable!("returned above"),
    }
    // Said while the record calls for it, whatever else happened.
    if let Some(msg) = conflict::condition_message(s.conflict.as_ref(), i.now) {
        fresh.push(i.condition(
            FIELD_CONFLICT,
            ConditionStatus::True,
            "ContestedFields",
            msg,
        ));
    }
    s.conditions = conditions::merge(&prev.conditions, fresh, &i.now.to_string());
    s
}

/// Whether the operator created the gateway, and who uses it: said on every pass.
fn standing(i: &StatusInputs) -> Vec<Condition> {
    use ConditionStatus::{False, True};
    let managed = if i.observed.managed {
        i.condition(
            MANAGED,
            True,
            "CreatedByOperator",
            "collected once no KuraInstance or Ingress of its namespace uses it".into(),
        )
    } else {
        i.condition(MANAGED, False, "NotCreatedByOperator", "not created by kura-operator (labelled app.kubernetes.io/managed-by=kura-operator and applied by its field manager): served, never collected by the operator".into())
    };
    let in_use = match i.user {
        Some(user) => i.condition(IN_USE, True, "Used", format!("used by {user}")),
        None => i.condition(
            IN_USE,
            False,
            "Unused",
            "no KuraInstance or Ingress of its namespace uses it".into(),
        ),
    };
    vec![managed, in_use]
}

fn invalid(i: &StatusInputs, errors: &ValidationErrors) -> Vec<Condition> {
    use ConditionStatus::{False, True};
    let msg = errors.to_string();
    vec![
        i.condition(VALID, False, "InvalidSpec", msg.clone()),
        i.condition(
            READY,
            False,
            "InvalidSpec",
            format!("nothing applied: {msg}"),
        ),
        i.condition(
            RECONCILING,
            False,
            "InvalidSpec",
            "waiting for a corrected spec".into(),
        ),
        i.condition(STALLED, True, "InvalidSpec", msg),
    ]
}

fn name_conflict(i: &StatusInputs, conflicts: &[String]) -> Vec<Condition> {
    use ConditionStatus::{False, True};
    let msg = format!(
        "nothing applied: {}; rename or remove it",
        conflicts.join("; ")
    );
    vec![
        i.condition(VALID, True, "Valid", String::new()),
        i.condition(READY, False, "NameConflict", msg.clone()),
        i.condition(RECONCILING, False, "NameConflict", String::new()),
        i.condition(STALLED, True, "NameConflict", msg),
    ]
}

/// A transient failure retries quietly; any other is counted against the
/// inputs' retry budget, and Stalled once it is spent.
fn apply_failed(s: &mut KuraGatewayStatus, i: &StatusInputs, failure: &Failure) -> Vec<Condition> {
    use ConditionStatus::{False, True};
    let error = failure.to_string();
    let mut fresh = vec![
        i.condition(VALID, True, "Valid", String::new()),
        i.condition(READY, False, failure_reason(failure), error.clone()),
    ];
    if failure.is_transient() {
        fresh.push(i.condition(STALLED, False, "TransientFailure", String::new()));
        fresh.push(i.condition(RECONCILING, True, "TransientFailure", error));
        return fresh;
    }
    let key = inputs_key(i.desired.map_or("", |d| d.revision.as_str()), None);
    let mut failures = failures_for(&i.observed.status, &key).saturating_add(1);
    if failure.class == FailureClass::NameConflict {
        // As an instance's: retrying cannot help until someone acts on the
        // other object, so it stalls at once (until its names are free, the
        // stall window ends, or the input changes).
        failures = failures.max(i64::from(i.policy.budget));
    }
    s.retry = Some(RetryStatus {
        failures,
        inputs_key: key,
        last_error: error.clone(),
        last_failure_time: i.now.to_string(),
    });
    let stalled = failures >= i64::from(i.policy.budget);
    let (status, reason, message) = if stalled {
        (True, failure_reason(failure), error.clone())
    } else {
        (False, "Retrying", String::new())
    };
    fresh.push(i.condition(STALLED, status, reason, message));
    fresh.push(i.condition(
        RECONCILING,
        if stalled { False } else { True },
        reason,
        format!("attempt {failures} failed: {error}"),
    ));
    fresh
}

/// Everything applied: Ready, naming the class served.
fn serving(s: &mut KuraGatewayStatus, i: &StatusInputs) -> Vec<Condition> {
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
    // Applied is not serving while the scheduler cannot place a pod: the
    // founding incident's gateway (docs/incidents.md #1) was applied, and
    // Pending for hours.
    let ready = match super::pods::report(&i.observed.name, &i.observed.unschedulable) {
        Some(why) => i.condition(
            READY,
            False,
            POD_UNSCHEDULABLE,
            format!("revision {revision} applied for ingress class {class}; {why}"),
        ),
        None => i.condition(
            READY,
            True,
            "Applied",
            format!("revision {revision} serves ingress class {class}"),
        ),
    };
    vec![
        i.condition(VALID, True, "Valid", String::new()),
        ready,
        i.condition(RECONCILING, False, "Applied", String::new()),
        i.condition(STALLED, False, "Applied", String::new()),
    ]
}

/// Events on transitions: an apply or repair (with its reasons), a take-back
/// of a field another manager held (naming it), a move to the gateway's field
/// manager, an invalid spec, a name conflict or failure when
/// Ready starts to say it.
pub fn notes_for(
    prev: &KuraGatewayStatus,
    new: &KuraGatewayStatus,
    outcome: &Outcome,
) -> Vec<Note> {
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
            let mut notes = applied_notes(new, reasons, sent, released);
            notes.extend(unschedulable_note(new).filter(|_| ready_news()));
            notes
        }
        Outcome::Invalid(errors) => {
            let changed = find(&prev.conditions, VALID).is_none_or(|c| {
                c.status != ConditionStatus::False || c.message != errors.to_string()
            });
            changed
                .then(|| Note::new(NoteType::Warning, "InvalidSpec", errors.to_string()))
                .into_iter()
                .collect()
        }
        Outcome::NameConflict(_) if ready_news() => {
            let msg = find(&new.conditions, READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            vec![Note::new(NoteType::Warning, "NameConflict", msg)]
        }
        Outcome::ApplyFailed { failure, .. } if ready_news() => {
            let reason = match failure.class {
                FailureClass::NameConflict => "NameConflict",
                _ => failure_reason(failure),
            };
            vec![Note::new(NoteType::Warning, reason, failure.to_string())]
        }
        Outcome::Converged if ready_news() => unschedulable_note(new).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A Warning when Ready starts to name a pod the scheduler cannot place
/// (or another one, or another reason).
fn unschedulable_note(new: &KuraGatewayStatus) -> Option<Note> {
    let ready = find(&new.conditions, READY).filter(|c| c.reason == POD_UNSCHEDULABLE)?;
    Some(Note::new(
        NoteType::Warning,
        POD_UNSCHEDULABLE,
        ready.message.clone(),
    ))
}

fn applied_notes(
    new: &KuraGatewayStatus,
    reasons: &[ApplyReason],
    sent: &[String],
    released: &[String],
) -> Vec<Note> {
    let why: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    let rev = short(new.applied_revision.as_deref().unwrap_or_default());
    let mut out = vec![Note::new(
        NoteType::Normal,
        "Applied",
        format!(
            "applied revision {rev} ({}): {}",
            sent.join(", "),
            why.join(", ")
        ),
    )];
    if let Some(note) = conflict::took_back(reasons) {
        out.push(Note::new(NoteType::Warning, "FieldConflict", note));
    }
    if !released.is_empty() {
        out.push(Note::new(
            NoteType::Normal,
            "FieldManagerMigrated",
            format!(
                "{} now applied by field manager {GATEWAY_FIELD_MANAGER} alone",
                released.join(", ")
            ),
        ));
    }
    out
}

/// An earlier release's finalizer removed from the gateway.
pub fn finalizer_removed() -> Note {
    Note::new(
        NoteType::Normal,
        "FinalizerRemoved",
        format!(
            "removed {LEGACY_GATEWAY_FINALIZER} (of an earlier release): deleting a namespace no longer waits for the operator"
        ),
    )
}

/// The gateway is about to be deleted: nothing of `namespace` uses it.
pub fn collected(namespace: &str) -> Note {
    Note::new(
        NoteType::Normal,
        "Collected",
        format!("no KuraInstance or Ingress of {namespace} uses it: deleting it"),
    )
}

#[cfg(test)]
mod tests;
