//! `status`: compute the new status from what happened (pure), and write it only
//! when it changed (I/O). The write never triggers another reconcile: the
//! instance watch passes only generation and annotation changes.

use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};

use super::apply::{Failure, FailureClass, Stage};
use super::plan::{ApplyReason, Observed, RetryPolicy, conflict, failures_for, inputs_key};
use super::probe::Activation;
use super::prune::PruneOutcome;
use super::storage::PendingStorage;
use crate::api::conditions::{
    self, ACTIVE, FIELD_CONFLICT, READY, RECONCILING, STALLED, STORAGE_CHANGE_PENDING, VALID,
};
use crate::api::{
    Condition, ConditionStatus, GatewayStatus, InventoryEntry, KuraGatewayStatus, KuraInstance,
    KuraInstanceStatus, Phase, RetryStatus,
};
use crate::keys::FIELD_MANAGER;
use crate::memory::TransientStreak;
use crate::render::{Desired, hash::short};
use crate::rollout::Admission;
use crate::validate::{ResolvedGateway, ValidationErrors};

/// What the reconcile did: the one place status, Events and metrics read it from.
#[derive(Debug)]
pub enum Outcome {
    Invalid(ValidationErrors),
    Paused,
    /// Objects of the desired names exist and are not this instance's.
    NameConflict(Vec<String>),
    /// Hosts this instance asks for are held by other instances.
    HostConflict(crate::claims::Conflict),
    /// Objects of the desired names are being deleted (held by finalizers):
    /// nothing applied until they are gone.
    ChildTerminating(Vec<String>),
    /// Everything chosen was applied; `pruned` says how the prune went (its
    /// failure, if any, is reported, and what it could not delete stays in
    /// `inventory`).
    Applied {
        reasons: Vec<ApplyReason>,
        /// The objects sent.
        sent: Vec<String>,
        inventory: Vec<InventoryEntry>,
        pruned: PruneOutcome,
        /// The transient streak of a prune failure being reported.
        streak: Option<TransientStreak>,
        /// The revision restarts pods and waits for the rollout budget: what
        /// went was the rest of it, so the revision is not applied yet.
        held: Option<Admission>,
    },
    /// Admitted to an operator-originated rollout: recorded before anything
    /// restarts.
    Admitted,
    /// The revision waits for the rollout budget; nothing else to send.
    Held(Admission),
    /// The apply failed: rejected (budgeted retries), an object of the name is
    /// not ours, or transient failures that went on long enough to report
    /// (`streak`; retried quickly, never Stalled).
    ApplyFailed {
        reasons: Vec<ApplyReason>,
        failure: Failure,
        streak: Option<TransientStreak>,
    },
    /// Another writer keeps undoing ours; this window's take-backs are spent.
    ConflictHold {
        managers: Vec<String>,
    },
    /// A failing apply waits for its backoff or stall window.
    Waiting {
        stalled: bool,
    },
    Converged,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Invalid(_) => "invalid",
            Outcome::Paused => "paused",
            Outcome::NameConflict(_) => "name-conflict",
            Outcome::HostConflict(_) => "host-conflict",
            Outcome::ChildTerminating(_) => "child-terminating",
            Outcome::Applied { .. } => "applied",
            Outcome::ApplyFailed { .. } => "apply-failed",
            Outcome::Waiting { .. } => "waiting",
            Outcome::ConflictHold { .. } => "conflict-hold",
            Outcome::Converged => "converged",
            Outcome::Admitted => "admitted",
            Outcome::Held(_) => "held",
        }
    }

    /// The failure this outcome reports, if any (an apply's, or a prune's
    /// after a good apply).
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::ApplyFailed { failure, .. } => Some(failure),
            Outcome::Applied { pruned, .. } => pruned.failure.as_ref(),
            _ => None,
        }
    }
}

/// The metrics of an outcome (kept by `crate::metrics`, which knows no reconcile).
impl crate::metrics::Metrics {
    pub fn record(&self, outcome: &Outcome, _phase: Option<crate::api::Phase>) {
        if let Outcome::Applied {
            reasons, pruned, ..
        } = outcome
        {
            for r in reasons {
                self.applies
                    .get_or_create(&crate::metrics::ReasonLabel { reason: r.label() })
                    .inc();
            }
            self.pruned.inc_by(pruned.deleted.len() as u64);
        }
        if let Some(failure) = outcome.failure() {
            self.record_failure(failure);
        }
        self.count(outcome.label());
    }

    pub fn record_failure(&self, failure: &Failure) {
        let class = match failure.class {
            FailureClass::Transient => "transient",
            FailureClass::Rejected => "rejected",
            FailureClass::NameConflict => "name-conflict",
        };
        let stage = match failure.stage {
            Stage::Apply => "apply",
            Stage::Prune => "prune",
        };
        self.failures
            .get_or_create(&crate::metrics::FailureLabels { stage, class })
            .inc();
    }
}

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
    let now = i.now.to_string();
    let mut s = prev.clone();
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
    let c =
        |t: &str, st: ConditionStatus, reason: &str, msg: String| condition(t, st, reason, msg, i);
    use ConditionStatus::{False, True};
    let mut fresh = Vec::new();
    match i.outcome {
        Outcome::Invalid(errors) => {
            s.phase = Some(Phase::Invalid);
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
        }
        Outcome::Paused => {
            s.phase = Some(Phase::Paused);
            fresh.push(c(VALID, True, "Valid", String::new()));
            fresh.push(c(READY, False, "Paused", paused_message(i.pause, &s)));
            fresh.push(c(RECONCILING, False, "Paused", String::new()));
            fresh.push(c(STALLED, False, "Paused", String::new()));
        }
        Outcome::NameConflict(conflicts) => {
            s.phase = Some(Phase::Stalled);
            let msg = format!(
                "nothing applied: {}; rename or remove it, or hand it over with the kura.dev/adopt annotation",
                conflicts.join("; ")
            );
            fresh.push(c(VALID, True, "Valid", String::new()));
            fresh.push(c(READY, False, "NameConflict", msg.clone()));
            fresh.push(c(RECONCILING, False, "NameConflict", String::new()));
            fresh.push(c(STALLED, True, "NameConflict", msg));
        }
        Outcome::ChildTerminating(objects) => {
            // Not a failure: the deletion goes on, and the objects are
            // created again once it is done. The workload may still serve.
            s.phase = Some(Phase::Applying);
            let msg = terminating_message(objects);
            fresh.push(c(VALID, True, "Valid", String::new()));
            fresh.push(c(READY, False, "ChildTerminating", msg.clone()));
            fresh.push(c(RECONCILING, True, "ChildTerminating", msg));
            fresh.push(c(STALLED, False, "ChildTerminating", String::new()));
            fresh.extend(conditions::find(&prev.conditions, ACTIVE).cloned());
        }
        Outcome::HostConflict(conflict) => {
            // Nothing to retry until the holder or this spec changes (the
            // holder's changes reconcile this instance at once).
            s.phase = Some(Phase::Stalled);
            let msg = format!(
                "nothing applied: {conflict}; a host is served to one instance only: \
                 choose another host here, or free it on the holder (another host, or delete it)"
            );
            fresh.push(c(VALID, True, "Valid", String::new()));
            fresh.push(c(READY, False, "HostConflict", msg.clone()));
            fresh.push(c(RECONCILING, False, "HostConflict", String::new()));
            fresh.push(c(STALLED, True, "HostConflict", msg));
        }
        Outcome::ApplyFailed {
            failure, streak, ..
        } => {
            let d = i.desired.expect("an apply needs a desired state");
            s.last_attempted_revision = Some(d.revision.clone());
            fresh.push(c(VALID, True, "Valid", String::new()));
            report_failure(&mut s, &mut fresh, i, failure, streak.as_ref());
        }
        Outcome::Waiting { .. } => return s, // nothing new to say until the retry
        // The budget's news is added below; everything else stands.
        Outcome::Admitted => fresh.extend(prev.conditions.iter().cloned()),
        Outcome::Held(_) => {
            fresh.extend(prev.conditions.iter().cloned());
            held_workload_down(&mut s, &mut fresh, i, &c);
        }
        Outcome::Applied {
            inventory,
            held: Some(_),
            ..
        } => {
            // Part of the revision went (what restarts no pod, a repair of
            // the workload on its running template): the inventory says so,
            // but the revision is not applied until the rest goes.
            s.inventory = inventory.clone();
            if let Outcome::Applied { reasons, .. } = i.outcome {
                s.conflict = conflict::after_apply(prev.conflict.as_ref(), reasons, i.now);
            }
            fresh.extend(prev.conditions.iter().cloned());
            held_workload_down(&mut s, &mut fresh, i, &c);
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
        Outcome::Applied {
            reasons,
            inventory,
            pruned,
            streak,
            ..
        } => {
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
                    fresh.push(c(VALID, True, "Valid", String::new()));
                    report_failure(&mut s, &mut fresh, i, failure, streak.as_ref());
                }
                None => {
                    s.retry = None;
                    activation_conditions(&mut s, &mut fresh, i, &c);
                }
            }
        }
        Outcome::Converged => {
            s.retry = None;
            s.conflict = conflict::still_open(prev.conflict.as_ref(), i.now);
            activation_conditions(&mut s, &mut fresh, i, &c);
        }
    }
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
    rollout::update(&mut s, &mut fresh, i);
    // Said on every outcome that renders; kept as it was on those that do not.
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
        (None, _) => {
            fresh.extend(conditions::find(&prev.conditions, STORAGE_CHANGE_PENDING).cloned())
        }
    }
    s.conditions = conditions::merge(&prev.conditions, fresh, &now);
    s
}

/// Ready's message while paused: who paused, why, until when, and the
/// change that waits for the pause to end, if any.
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
        let msg = format!(
            "{failures} attempts failed; next attempt in {}s (or at once on a change of spec, configuration or kura.dev/reapply-at); last error: {error}",
            i.policy.stall_window().as_secs()
        );
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

/// Whether `new` must be written over `prev`, given how long ago this
/// operator last wrote this object's status (`None`: not since it started).
/// An instance waiting on activation is looked at again within
/// `ACTIVATION_RECHECK`, so a message held back now is written then.
pub fn worth_writing<S: WithConditions>(
    prev: &S,
    new: &S,
    since_last_write: Option<std::time::Duration>,
) -> bool {
    if new == prev {
        return false;
    }
    let recent = since_last_write.is_some_and(|d| d < MESSAGE_REFRESH);
    !(recent && only_counts_differ(prev, new))
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
pub(crate) fn without_counts(message: &str) -> String {
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

/// Returns the resourceVersion the instance has after the write.
pub async fn write(
    api: &Api<KuraInstance>,
    name: &str,
    status: &KuraInstanceStatus,
) -> Result<Option<String>, kube::Error> {
    write_status(api, name, status, FIELD_MANAGER).await
}

/// The status of any of the operator's kinds, under `manager`; returns the
/// object's resourceVersion after the write.
///
/// Status is the operator's report, and anyone who may write the status
/// subresource can put anything there. So the write replaces the whole
/// status: a merge patch that names every field the kind's schema knows,
/// with null for each the new status lacks, at every level of objects (lists
/// are replaced whole by a merge patch; fields the schema does not know are
/// pruned by the apiserver). What another writer left cannot survive it, and
/// cannot combine with it into something the schema rejects: with a
/// server-side apply, a record another manager co-owned was left half
/// removed and every later write failed with 422.
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    manager: &str,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource<DynamicType = ()>
        + kube::CustomResourceExt
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: serde::Serialize,
{
    let body = serde_json::json!({ "status": whole_status::<K>(status) });
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    };
    let written = api
        .patch_status(name, &params, &Patch::Merge(&body))
        .await?;
    Ok(written.meta().resource_version.clone())
}

/// `status` as a merge patch that replaces the whole status of a `K`.
pub fn whole_status<K: kube::CustomResourceExt>(
    status: &impl serde::Serialize,
) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    null_absent(&mut value, &status_schema::<K>());
    value
}

/// The status schema of `K`'s CRD, generated once per kind.
fn status_schema<K: kube::CustomResourceExt>() -> std::sync::Arc<serde_json::Value> {
    type Schemas =
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<serde_json::Value>>>;
    static SCHEMAS: std::sync::OnceLock<Schemas> = std::sync::OnceLock::new();
    let mut schemas = SCHEMAS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    schemas
        .entry(K::crd_name().to_string())
        .or_insert_with(|| {
            let crd = K::crd();
            let schema = crd
                .spec
                .versions
                .first()
                .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref()?.get("status"))
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_default();
            std::sync::Arc::new(schema)
        })
        .clone()
}

/// Sets every property `schema` knows that `value` lacks to null, in every
/// nested object (not inside lists: a merge patch replaces a list whole).
fn null_absent(value: &mut serde_json::Value, schema: &serde_json::Value) {
    let (Some(object), Some(properties)) = (
        value.as_object_mut(),
        schema.get("properties").and_then(|p| p.as_object()),
    ) else {
        return;
    };
    for (key, property) in properties {
        match object.get_mut(key) {
            Some(present) => null_absent(present, property),
            None => {
                object.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

mod rollout;
pub use rollout::RolloutInputs;

#[cfg(test)]
mod tables;

#[cfg(test)]
mod tests {
    /// Outcomes are counted by `Metrics::record` (here, beside `Outcome`).
    #[test]
    fn outcomes_reasons_and_pruned_objects_are_counted() {
        use super::Outcome;
        use crate::metrics::{Metrics, tests::value};
        use crate::reconcile::plan::ApplyReason;
        use crate::reconcile::prune::PruneOutcome;

        let m = Metrics::default();
        m.record(
            &Outcome::Applied {
                reasons: vec![ApplyReason::Forced, ApplyReason::ChildMissing("cm".into())],
                inventory: vec![],
                sent: vec![],
                pruned: PruneOutcome {
                    deleted: vec!["a".into(), "b".into()],
                    ..PruneOutcome::default()
                },
                streak: None,
                held: None,
            },
            None,
        );
        m.record(&Outcome::Converged, None);
        m.record_error("status");
        let text = m.encode(&[]);
        for (series, expected) in [
            ("kura_reconciles_total{result=\"applied\"}", 1.0),
            ("kura_reconciles_total{result=\"converged\"}", 1.0),
            ("kura_reconciles_total{result=\"status\"}", 1.0),
            ("kura_applies_total{reason=\"forced\"}", 1.0),
            ("kura_applies_total{reason=\"missing\"}", 1.0),
            ("kura_objects_pruned_total", 2.0),
            ("kura_leader", 0.0),
        ] {
            assert_eq!(value(&text, series), Some(expected), "{series} in\n{text}");
        }
    }

    use std::time::Duration;

    /// Every field of the schema the new status lacks is sent as null, at
    /// every level, so a record another writer left cannot survive the write.
    #[test]
    fn a_status_write_names_every_field_it_lacks_as_null() {
        let status = KuraInstanceStatus {
            phase: Some(Phase::Ready),
            gateway: Some(crate::api::GatewayStatus {
                ingress_class_name: "shared".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let patch = super::whole_status::<crate::api::KuraInstance>(&status);
        assert_eq!(patch["phase"], "Ready");
        assert!(patch["conflict"].is_null() && patch.get("conflict").is_some());
        assert!(patch["rollout"].is_null() && patch.get("rollout").is_some());
        assert!(patch.get("inventory").is_some_and(|v| v.is_null()));
        assert!(
            patch["gateway"]
                .get("gatewayName")
                .is_some_and(|v| v.is_null())
        );
        assert_eq!(patch["gateway"]["ingressClassName"], "shared");
    }

    use super::{MESSAGE_REFRESH, worth_writing};
    use crate::api::conditions::READY;
    use crate::api::{Condition, ConditionStatus, KuraInstanceStatus, Phase};

    fn waiting(reason: &str, message: &str) -> KuraInstanceStatus {
        KuraInstanceStatus {
            phase: Some(Phase::Activating),
            conditions: vec![Condition::new(
                READY,
                ConditionStatus::False,
                reason,
                message,
            )],
            ..Default::default()
        }
    }

    #[test]
    fn a_progress_message_alone_waits_for_the_refresh_interval() {
        let prev = waiting("WorkloadUnavailable", "0/3 replicas available");
        let next = waiting("WorkloadUnavailable", "1/3 replicas available");
        let just_now = Some(Duration::from_secs(1));
        assert!(!worth_writing(&prev, &next, just_now));
        assert!(worth_writing(&prev, &next, Some(MESSAGE_REFRESH)));
        // Not written by this process yet: written.
        assert!(worth_writing(&prev, &next, None));
        // Nothing changed: never written.
        assert!(!worth_writing(&prev, &prev.clone(), None));
    }

    #[test]
    fn a_new_step_is_written_at_once_and_counts_wait() {
        let pods = |available: u32, updated: u32| {
            waiting(
                "WorkloadProgressing",
                &format!(
                    "StatefulSet a: {available}/3 replicas available, {updated}/3 updated to revision 1a2b3c4d5e6f (image k:1.2)"
                ),
            )
        };
        let just_now = Some(Duration::from_secs(1));
        // From the apply to the pods' turn only counts move: they wait.
        assert!(!worth_writing(&pods(3, 0), &pods(0, 3), just_now));
        assert!(!worth_writing(&pods(0, 0), &pods(2, 3), just_now));
        assert!(worth_writing(
            &pods(0, 3),
            &pods(2, 3),
            Some(MESSAGE_REFRESH)
        ));
        // Another revision or image is another step, digits and all.
        let other = waiting(
            "WorkloadProgressing",
            "StatefulSet a: 0/3 replicas available, 0/3 updated to revision 9a2b3c4d5e6f (image k:1.2)",
        );
        assert!(worth_writing(&pods(0, 0), &other, just_now));
        let image = waiting(
            "WorkloadProgressing",
            "StatefulSet a: 0/3 replicas available, 3/3 updated to revision 1a2b3c4d5e6f (image k:1.3)",
        );
        assert!(worth_writing(&pods(0, 3), &image, just_now));
        // Words of another step (the workload went missing): written at once.
        let missing = waiting("WorkloadProgressing", "StatefulSet a does not exist");
        assert!(worth_writing(&pods(0, 3), &missing, just_now));
    }

    #[test]
    fn counts_are_masked_and_nothing_else() {
        use super::without_counts;
        assert_eq!(
            without_counts("a: 10/3 up, 3/3 updated to k:1/2 v2/3 r12 @1/"),
            "a: #/# up, #/# updated to k:1/2 v2/3 r12 @1/"
        );
        assert_eq!(without_counts(""), "");
    }

    #[test]
    fn a_new_reason_status_or_phase_is_written_at_once() {
        let prev = waiting("WorkloadUnavailable", "0/3 replicas available");
        let just_now = Some(Duration::from_millis(10));
        let reason = waiting("IngressNoAddress", "0/3 replicas available");
        assert!(worth_writing(&prev, &reason, just_now));
        let mut ready = prev.clone();
        ready.conditions[0].status = ConditionStatus::True;
        assert!(worth_writing(&prev, &ready, just_now));
        let mut phase = prev.clone();
        phase.phase = Some(Phase::Ready);
        assert!(worth_writing(&prev, &phase, just_now));
        let mut revision = prev.clone();
        revision.applied_revision = Some("abc".into());
        assert!(worth_writing(&prev, &revision, just_now));
    }
}
