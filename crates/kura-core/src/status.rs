//! The new status of an instance, computed from what a reconcile did (pure):
//! phase, conditions, revisions, inventory, retry and rollout records. Whether
//! it is worth a write is decided here too; the write is the operator's.

use jiff::Timestamp;

use crate::api::conditions::{
    self, ACTIVE, FIELD_CONFLICT, READY, RECONCILING, STALLED, STORAGE_CHANGE_PENDING, VALID,
};
use crate::api::{
    Condition, ConditionStatus, GatewayStatus, KuraGatewayStatus, KuraInstanceStatus, Phase,
    RetryStatus,
};
use crate::keys::ANNOTATION_ADOPT;
use crate::outcome::{Activation, Failure, FailureClass, Outcome, Stage, TransientStreak};
use crate::plan::{Observed, RetryPolicy, conflict, failures_for, inputs_key};
use crate::render::{Desired, hash::short};
use crate::storage::PendingStorage;
use crate::validate::ResolvedGateway;

mod rollout;
pub use rollout::RolloutInputs;

pub struct StatusInputs<'a> {
    pub observed: &'a Observed,
    pub desired: Option<&'a Desired>,
    pub gateway: Option<&'a ResolvedGateway>,
    pub outcome: &'a Outcome,
    pub activation: Option<&'a Activation>,
    /// Storage asked for and kept otherwise (see `reconcile::storage`).
    pub pending_storage: Option<&'a PendingStorage>,
    /// The rollout budget's side of it (see `crate::rollout`).
    pub rollout: RolloutInputs<'a>,
    /// `spec.pause`: who paused, why, until when.
    pub pause: Option<&'a crate::api::PauseSpec>,
    pub policy: &'a RetryPolicy,
    pub now: Timestamp,
}

/// The condition reason a failure is reported under.
pub fn failure_reason(failure: &Failure) -> &'static str {
    match (failure.class, failure.stage) {
        (FailureClass::NameConflict, _) => "NameConflict",
        (_, Stage::Apply) => "ApplyFailed",
        (_, Stage::Prune) => "PruneFailed",
    }
}

pub fn compute(i: &StatusInputs) -> KuraInstanceStatus {
    let prev = &i.observed.status;
    let mut s = prev.clone();
    record_inputs(&mut s, i);
    if let Outcome::Waiting { .. } = i.outcome {
        return s; // nothing new to say until the retry
    }
    let mut fresh = Vec::new();
    outcome_conditions(&mut s, &mut fresh, i);
    conflict_condition(&s, &mut fresh, i);
    rollout::update(&mut s, &mut fresh, i);
    storage_condition(&mut fresh, i);
    s.conditions = conditions::merge(&prev.conditions, fresh, &i.now.to_string());
    s
}

/// What this pass decided from: the generation, the desired revision, the gateway.
fn record_inputs(s: &mut KuraInstanceStatus, i: &StatusInputs) {
    s.observed_generation = i.observed.generation;
    if let Some(d) = i.desired {
        s.desired_revision = Some(d.revision.clone());
        s.desired_revision_short = Some(short(&d.revision));
    }
    if let Some(g) = i.gateway {
        s.gateway = Some(GatewayStatus {
            mode: g.mode,
            ingress_class_name: g.ingress_class_name.clone(),
            gateway_name: g.gateway_name.clone(),
        });
    }
}

/// The phase, records and conditions of the outcome itself.
fn outcome_conditions(s: &mut KuraInstanceStatus, fresh: &mut Vec<Condition>, i: &StatusInputs) {
    let prev = &i.observed.status;
    let c =
        |t: &str, st: ConditionStatus, reason: &str, msg: String| condition(t, st, reason, msg, i);
    match i.outcome {
        Outcome::Invalid(_)
        | Outcome::Paused
        | Outcome::NameConflict(_)
        | Outcome::HostConflict(_) => nothing_applied(s, fresh, i),
        Outcome::ChildTerminating(objects) => child_terminating(s, fresh, i, objects),
        Outcome::ApplyFailed {
            failure, streak, ..
        } => {
            let d = i.desired.expect("an apply needs a desired state");
            s.last_attempted_revision = Some(d.revision.clone());
            fresh.push(c(VALID, ConditionStatus::True, "Valid", String::new()));
            report_failure(s, fresh, i, failure, streak.as_ref());
        }
        Outcome::Waiting { .. } => {}
        // The budget's news is added by `rollout::update`; everything else stands.
        Outcome::Admitted => fresh.extend(prev.conditions.iter().cloned()),
        Outcome::Held(_) => {
            fresh.extend(prev.conditions.iter().cloned());
            held_workload_down(s, fresh, i, &c);
        }
        Outcome::Applied {
            inventory,
            held: Some(_),
            reasons,
            ..
        } => {
            // Part of the revision went (what restarts no pod, a repair of
            // the workload on its running template): the inventory says so,
            // but the revision is not applied until the rest goes.
            s.inventory = inventory.clone();
            s.conflict = conflict::after_apply(prev.conflict.as_ref(), reasons, i.now);
            fresh.extend(prev.conditions.iter().cloned());
            held_workload_down(s, fresh, i, &c);
        }
        Outcome::ConflictHold { .. } => {
            // Everything else stands; only the conflict is news.
            fresh.extend(
                prev.conditions
                    .iter()
                    .filter(|c| c.type_ != FIELD_CONFLICT)
                    .cloned(),
            );
        }
        Outcome::Applied { .. } => applied(s, fresh, i),
        Outcome::Converged => {
            s.retry = None;
            s.conflict = conflict::still_open(prev.conflict.as_ref(), i.now);
            activation_conditions(s, fresh, i, &c);
        }
    }
}

/// A child being deleted: not a failure. The deletion goes on, and the
/// objects are created again once it is done; the workload may still serve.
fn child_terminating(
    s: &mut KuraInstanceStatus,
    fresh: &mut Vec<Condition>,
    i: &StatusInputs,
    objects: &[String],
) {
    let prev = &i.observed.status;
    let c =
        |t: &str, st: ConditionStatus, reason: &str, msg: String| condition(t, st, reason, msg, i);
    s.phase = Some(Phase::Applying);
    let msg = terminating_message(objects);
    fresh.push(c(VALID, ConditionStatus::True, "Valid", String::new()));
    fresh.push(c(
        READY,
        ConditionStatus::False,
        "ChildTerminating",
        msg.clone(),
    ));
    fresh.push(c(
        RECONCILING,
        ConditionStatus::True,
        "ChildTerminating",
        msg,
    ));
    fresh.push(c(
        STALLED,
        ConditionStatus::False,
        "ChildTerminating",
        String::new(),
    ));
    fresh.extend(conditions::find(&prev.conditions, ACTIVE).cloned());
}

/// Invalid input, a pause, a name or a host conflict: nothing is applied or
/// deleted, and the conditions say why.
fn nothing_applied(s: &mut KuraInstanceStatus, fresh: &mut Vec<Condition>, i: &StatusInputs) {
    use ConditionStatus::{False, True};
    let c =
        |t: &str, st: ConditionStatus, reason: &str, msg: String| condition(t, st, reason, msg, i);
    let (phase, reason, why) = match i.outcome {
        Outcome::Invalid(errors) => {
            s.retry = None;
            let msg = errors.to_string();
            fresh.push(c(VALID, False, "InvalidSpec", msg.clone()));
            fresh.push(c(READY, False, "InvalidSpec", msg.clone()));
            fresh.push(c(
                RECONCILING,
                False,
                "InvalidSpec",
                "waiting for a corrected spec or configuration".into(),
            ));
            fresh.push(c(STALLED, True, "InvalidSpec", msg));
            s.phase = Some(Phase::Invalid);
            return;
        }
        Outcome::Paused => (Phase::Paused, "Paused", paused_message(i.pause, s)),
        Outcome::NameConflict(conflicts) => (
            Phase::Stalled,
            "NameConflict",
            format!(
                "nothing applied: {}; rename or remove it, or hand it over with the kura.dev/adopt annotation",
                conflicts.join("; ")
            ),
        ),
        // Nothing to retry until the holder or this spec changes (the
        // holder's changes reconcile this instance at once).
        Outcome::HostConflict(conflict) => (
            Phase::Stalled,
            "HostConflict",
            format!(
                "nothing applied: {conflict}; a host is served to one instance only: \
                 choose another host here, or free it on the holder (another host, or delete it)"
            ),
        ),
        _ => return,
    };
    s.phase = Some(phase);
    let stalled = phase == Phase::Stalled;
    fresh.push(c(VALID, True, "Valid", String::new()));
    if phase == Phase::Paused {
        // No Ready verdict while paused: the operator neither acts nor
        // probes, so it cannot say. Without Ready, Reconciling and Stalled
        // both False read as settled to kstatus (Flux's health checks:
        // Current, not InProgress until a timeout), `kubectl wait
        // --for=condition=Ready` keeps waiting, and Argo CD's check says
        // Suspended (hack/argocd).
        fresh.push(c(RECONCILING, False, reason, why));
        fresh.push(c(STALLED, False, reason, String::new()));
        return;
    }
    fresh.push(c(READY, False, reason, why.clone()));
    fresh.push(c(RECONCILING, False, reason, String::new()));
    if stalled {
        fresh.push(c(STALLED, True, reason, why));
    } else {
        fresh.push(c(STALLED, False, reason, String::new()));
    }
}

/// The whole revision went: it is the applied one now.
fn applied(s: &mut KuraInstanceStatus, fresh: &mut Vec<Condition>, i: &StatusInputs) {
    let Outcome::Applied {
        reasons,
        inventory,
        pruned,
        streak,
        ..
    } = i.outcome
    else {
        return;
    };
    let prev = &i.observed.status;
    let d = i.desired.expect("an apply needs a desired state");
    s.applied_revision = Some(d.revision.clone());
    s.applied_revision_short = Some(short(&d.revision));
    s.applied_image = Some(d.image.clone());
    s.last_attempted_revision = Some(d.revision.clone());
    // Handled only now that its apply went through: a force whose
    // apply fails stays unhandled, so it is retried and reported.
    s.last_handled_reapply_at = i
        .observed
        .force_token
        .clone()
        .or(prev.last_handled_reapply_at.clone());
    s.inventory = inventory.clone();
    s.applied_generation = i.observed.generation;
    s.applied_origin = Some(i.rollout.origin);
    s.applied_spec_hash = i.observed.spec_hash.clone();
    s.conflict = conflict::after_apply(prev.conflict.as_ref(), reasons, i.now);
    match &pruned.failure {
        Some(failure) => {
            fresh.push(condition(
                VALID,
                ConditionStatus::True,
                "Valid",
                String::new(),
                i,
            ));
            report_failure(s, fresh, i, failure, streak.as_ref());
        }
        None => {
            s.retry = None;
            let c = |t: &str, st: ConditionStatus, reason: &str, msg: String| {
                condition(t, st, reason, msg, i)
            };
            activation_conditions(s, fresh, i, &c);
        }
    }
}

/// FieldConflict, while another writer's take-backs are counted.
fn conflict_condition(s: &KuraInstanceStatus, fresh: &mut Vec<Condition>, i: &StatusInputs) {
    if let Some(msg) = conflict::condition_message(s.conflict.as_ref(), i.now) {
        fresh.retain(|f| f.type_ != FIELD_CONFLICT);
        fresh.push(condition(
            FIELD_CONFLICT,
            ConditionStatus::True,
            "ContestedFields",
            msg,
            i,
        ));
    } else if s.conflict.is_none() {
        fresh.retain(|f| f.type_ != FIELD_CONFLICT);
    }
}

/// StorageChangePending: said on every outcome that renders; kept as it was
/// on those that do not.
fn storage_condition(fresh: &mut Vec<Condition>, i: &StatusInputs) {
    fresh.retain(|f| f.type_ != STORAGE_CHANGE_PENDING);
    match (i.desired, i.pending_storage) {
        (Some(_), Some(pending)) => fresh.push(condition(
            STORAGE_CHANGE_PENDING,
            ConditionStatus::True,
            "ClaimTemplateKept",
            pending.to_string(),
            i,
        )),
        (Some(_), None) => {}
        (None, _) => fresh.extend(
            conditions::find(&i.observed.status.conditions, STORAGE_CHANGE_PENDING).cloned(),
        ),
    }
}

/// The message while paused: who paused, why, until when, and the change
/// that waits for the pause to end, if any.
pub fn paused_message(pause: Option<&crate::api::PauseSpec>, s: &KuraInstanceStatus) -> String {
    use std::fmt::Write;
    let mut m = "spec.paused is true".to_string();
    let p = pause.cloned().unwrap_or_default();
    if let Some(by) = &p.by {
        let _ = write!(m, ", paused by {by}");
    }
    if let Some(reason) = &p.reason {
        let _ = write!(m, " ({reason})");
    }
    m.push_str(": nothing is applied or deleted");
    match &p.until {
        Some(until) => {
            let _ = write!(m, " until {until}, when it resumes by itself");
        }
        None => m.push_str(" until spec.paused is false"),
    }
    if let (Some(desired), applied) = (&s.desired_revision, &s.applied_revision)
        && Some(desired) != applied.as_ref()
    {
        let _ = write!(
            m,
            "; a change waits: revision {} (applied: {})",
            short(desired),
            applied.as_deref().map_or_else(|| "none".to_string(), short)
        );
    }
    m
}

/// Ready's message while children are being deleted.
pub fn terminating_message(objects: &[String]) -> String {
    format!(
        "waiting for objects being deleted: {}. Nothing is applied until they are gone, then they are created again (a finalizer nobody removes holds them: see the controller that set it)",
        objects.join("; ")
    )
}

/// A failure in status: Ready False with the object, the verb and the
/// server's message. A rejected request (or a name conflict) counts against
/// the retry budget of these inputs and ends Stalled; transient failures are
/// reported once they have lasted, keep their fast retry and never stall.
fn report_failure(
    s: &mut KuraInstanceStatus,
    fresh: &mut Vec<Condition>,
    i: &StatusInputs,
    failure: &Failure,
    streak: Option<&TransientStreak>,
) {
    use ConditionStatus::{False, True};
    let c =
        |t: &str, st: ConditionStatus, reason: &str, msg: String| condition(t, st, reason, msg, i);
    let reason = failure_reason(failure);
    let error = failure.to_string();
    fresh.push(c(READY, False, reason, error.clone()));
    if failure.is_transient() {
        s.phase = Some(Phase::Retrying);
        let since = streak.map_or_else(|| i.now.to_string(), |st| st.since.to_string());
        fresh.push(c(STALLED, False, "TransientFailure", String::new()));
        fresh.push(c(
            RECONCILING,
            True,
            "TransientFailure",
            format!("failing since {since}, retried every minute at most: {error}"),
        ));
        return;
    }
    let d = i.desired.expect("a failure needs a desired state");
    let key = inputs_key(&d.revision, i.observed.force_token.as_deref());
    let mut failures = failures_for(&i.observed.status, &key).saturating_add(1);
    if failure.class == FailureClass::NameConflict {
        // Retrying cannot help until someone acts on the other object: stall
        // at once (retried after the stall window, or at once on new input,
        // e.g. a kura.dev/reapply-at token after handing it over).
        failures = failures.max(i64::from(i.policy.budget));
    }
    s.retry = Some(RetryStatus {
        failures,
        inputs_key: key,
        last_error: error.clone(),
        last_failure_time: i.now.to_string(),
    });
    if failures >= i64::from(i.policy.budget) {
        s.phase = Some(Phase::Stalled);
        let msg = if failure.class == FailureClass::NameConflict {
            format!(
                "next attempt as soon as those objects are deleted or handed over ({ANNOTATION_ADOPT}); in {}s at the latest, or at once on a change of spec, configuration or kura.dev/reapply-at; {error}",
                i.policy.stall_window().as_secs()
            )
        } else {
            format!(
                "{failures} attempts failed; next attempt in {}s (or at once on a change of spec, configuration or kura.dev/reapply-at); last error: {error}",
                i.policy.stall_window().as_secs()
            )
        };
        fresh.push(c(STALLED, True, reason, msg));
        fresh.push(c(RECONCILING, False, "RetryBudgetExhausted", String::new()));
    } else {
        s.phase = Some(Phase::Retrying);
        fresh.push(c(STALLED, False, "Retrying", String::new()));
        fresh.push(c(
            RECONCILING,
            True,
            "Retrying",
            format!("attempt {failures} failed: {error}"),
        ));
    }
}

/// A condition stamped with the generation it was computed for.
fn condition(
    t: &str,
    st: ConditionStatus,
    reason: &str,
    msg: String,
    i: &StatusInputs,
) -> Condition {
    let mut c = Condition::new(t, st, reason, msg);
    c.observed_generation = i.observed.generation;
    c
}

/// While its change waits for the budget, an instance reports what is live:
/// a workload that stopped serving (scaled to zero, pods failing) is not
/// Ready, whatever the last status said (`probe::held`).
fn held_workload_down(
    s: &mut KuraInstanceStatus,
    fresh: &mut Vec<Condition>,
    i: &StatusInputs,
    c: &dyn Fn(&str, ConditionStatus, &str, String) -> Condition,
) {
    let Some(Activation::Waiting { reason, message }) = i.activation else {
        return;
    };
    use ConditionStatus::{False, True};
    s.phase = Some(Phase::Activating);
    fresh.retain(|f| f.type_ != ACTIVE && f.type_ != READY && f.type_ != RECONCILING);
    fresh.push(c(ACTIVE, False, reason, message.clone()));
    fresh.push(c(READY, False, reason, message.clone()));
    fresh.push(c(RECONCILING, True, "Activating", message.clone()));
}

fn activation_conditions(
    s: &mut KuraInstanceStatus,
    fresh: &mut Vec<Condition>,
    i: &StatusInputs,
    c: &dyn Fn(&str, ConditionStatus, &str, String) -> Condition,
) {
    use ConditionStatus::{False, True};
    fresh.push(c(VALID, True, "Valid", String::new()));
    fresh.push(c(STALLED, False, "Progressing", String::new()));
    match i.activation {
        Some(Activation::Active { endpoint }) => {
            s.phase = Some(Phase::Ready);
            s.endpoint = Some(endpoint.clone()).filter(|e| !e.is_empty());
            fresh.push(c(ACTIVE, True, "Active", String::new()));
            fresh.push(c(
                READY,
                True,
                "Active",
                format!(
                    "revision {} is active",
                    s.applied_revision_short.clone().unwrap_or_default()
                ),
            ));
            fresh.push(c(RECONCILING, False, "Active", String::new()));
        }
        other => {
            let (reason, message) = match other {
                Some(Activation::Waiting { reason, message }) => (*reason, message.clone()),
                _ => ("Activating", String::new()),
            };
            s.phase = Some(Phase::Activating);
            fresh.push(c(ACTIVE, False, reason, message.clone()));
            fresh.push(c(READY, False, reason, message.clone()));
            fresh.push(c(RECONCILING, True, "Activating", message));
        }
    }
}

/// Progress alone, counts moving in a message (say "0/3 replicas available"
/// becoming "1/3 …"), is refreshed at most this often: at scale such writes
/// were most of the operator's status patches (docs/benchmarks.md, scale). A
/// change of phase, of any condition's status or reason, of a message's words
/// (a new step: the old message would say something no longer true), or of
/// anything else is written at once.
pub const MESSAGE_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

/// A status with conditions: an instance's or a gateway's.
pub trait WithConditions: PartialEq + Clone {
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

impl WithConditions for KuraInstanceStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl WithConditions for KuraGatewayStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// What a new status is worth over the last one written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worth {
    /// Nothing to write: the same status, or only counts moved since a write
    /// less than `MESSAGE_REFRESH` ago.
    Nothing,
    /// Only counts moved, and the last write is older than `MESSAGE_REFRESH`
    /// (or was not made by this process): a refresh. At fleet scale these
    /// are the most numerous writes and the least needed, so the operator
    /// sends them within a fleet-wide rate (its `refresh_budget`); one held
    /// back is looked at again by the next pass.
    Refresh,
    /// Anything else (phase, a condition's status, reason or words, a
    /// revision, a record): written at once.
    Write,
}

/// What `new` is worth over `prev`, given how long ago this operator last
/// wrote this object's status (`None`: not since it started). An instance
/// waiting on activation is looked at again within `ACTIVATION_RECHECK`, so a
/// message held back now is written then.
pub fn worth<S: WithConditions>(
    prev: &S,
    new: &S,
    since_last_write: Option<std::time::Duration>,
) -> Worth {
    if new == prev {
        return Worth::Nothing;
    }
    if !only_counts_differ(prev, new) {
        return Worth::Write;
    }
    if since_last_write.is_some_and(|d| d < MESSAGE_REFRESH) {
        Worth::Nothing
    } else {
        Worth::Refresh
    }
}

/// Whether `new` would be written over `prev` were every refresh allowed
/// ([`worth`] is not `Nothing`).
pub fn worth_writing<S: WithConditions>(
    prev: &S,
    new: &S,
    since_last_write: Option<std::time::Duration>,
) -> bool {
    worth(prev, new, since_last_write) != Worth::Nothing
}

/// What a status write changes, for the debug log: the top-level fields, and
/// conditions by type, e.g. `["appliedRevision", "Ready"]`.
pub fn changes(prev: &KuraInstanceStatus, new: &KuraInstanceStatus) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(prev), serde_json::to_value(new))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| *k != "conditions" && a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    out.dedup();
    for c in &new.conditions {
        if conditions::find(&prev.conditions, &c.type_) != Some(c) {
            out.push(c.type_.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

fn only_counts_differ<S: WithConditions>(prev: &S, new: &S) -> bool {
    let without_counts = |s: &S| {
        let mut s = s.clone();
        for c in s.conditions_mut() {
            c.message = without_counts(&c.message);
        }
        s
    };
    without_counts(prev) == without_counts(new)
}

/// A message with its counts (words `2/3`) masked: the step it describes.
pub fn without_counts(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        let (before, from) = rest.split_at(start);
        out.push_str(before);
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let n = digits(from);
        let m = from[n..].strip_prefix('/').map_or(0, digits);
        let word_start =
            out.is_empty() && before.is_empty() || before.ends_with(char::is_whitespace);
        if m > 0 && word_start {
            out.push_str("#/#");
            rest = &from[n + 1 + m..];
        } else {
            out.push_str(&from[..n]);
            rest = &from[n..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
