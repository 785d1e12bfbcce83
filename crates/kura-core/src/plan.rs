//! `plan`: the whole decision of a reconcile, as a pure function of what was
//! observed, what is desired and the time. Nothing here touches the client.
//!
//! Re-apply happens on a missing applied revision, a revision change, image drift,
//! a missing child, a child carrying another revision, a field taken by another
//! manager, or a new force token — in every phase. Activation progress, retry
//! state or an in-flight wait never suppress it (docs/incidents.md #1, #3); they only
//! decide *when* a failing apply is retried (#2).
//!
//! Only what differs is sent: a force token (or a first apply) sends every
//! object; otherwise an object is sent when it is missing, carries another
//! revision, lost fields to another manager, or (the StatefulSet) runs another
//! image. Objects of this instance that the desired set lacks — in the last
//! inventory, or found by their labels after an apply that failed half-way —
//! are pruned. An object of the desired name that this instance did not create
//! is never sent: the instance reports the name conflict.

pub mod conflict;
pub mod drift;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::api::KuraInstanceStatus;
use crate::kind::ChildKind;
use crate::render::{Desired, ObjectId};
use crate::rollout::Admission;
use crate::validate::ValidationErrors;

pub use self::conflict::{CONFLICT_WINDOW, MAX_TAKE_BACKS};
pub use crate::retry::{MIN_STALL_WINDOW, RetryPolicy, TRANSIENT_BASE, TRANSIENT_MAX, Wait};
pub use crate::time::{later, recorded_time, until};

/// Who an object found under a desired (or inventoried) name belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Created by this instance (its controller owner reference), or a
    /// gateway created by this operator.
    Ours,
    /// Not ours, but handed over on purpose with `kura.dev/adopt: <instance>`.
    Adopt,
    /// Someone else's: never written, never deleted. Says whose.
    Foreign(String),
}

/// What the cluster says about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveChild {
    /// `kura.dev/revision` as found on the object.
    pub revision: Option<String>,
    /// Fingerprint of the fields this operator's field manager owns.
    pub owned_fields: Option<String>,
    /// Other field managers holding fields this operator renders of the
    /// object (`observe::rivals`): named when they take one.
    pub other_managers: Vec<String>,
    pub owner: Owner,
    /// An Ingress's class as it is now.
    pub ingress_class: Option<String>,
}

impl LiveChild {
    /// A child as this operator leaves it (for tests and examples).
    pub fn ours(revision: &str, owned_fields: &str) -> LiveChild {
        LiveChild {
            revision: Some(revision.to_string()),
            owned_fields: Some(owned_fields.to_string()),
            other_managers: Vec::new(),
            owner: Owner::Ours,
            ingress_class: None,
        }
    }
}

/// Everything `plan` needs from the cluster, already read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    pub generation: Option<i64>,
    pub status: KuraInstanceStatus,
    /// The `kura.dev/reapply-at` annotation.
    pub force_token: Option<String>,
    pub paused: bool,
    /// Live state of every desired object, every inventoried one, and every
    /// object the caches hold labelled as this instance's; absent = missing
    /// or being deleted.
    pub children: BTreeMap<ObjectId, LiveChild>,
    /// Desired objects the caches show being deleted (a deletionTimestamp),
    /// with the finalizers holding them: not sent until they are gone.
    pub terminating: BTreeMap<ObjectId, Vec<String>>,
    /// The image the workload runs (its pod template's), if the workload exists.
    pub running_image: Option<String>,
    /// The workload's pod-template hash (`kura.dev/pod-template-hash`), if it exists.
    pub running_pod_template_hash: Option<String>,
    /// Other field managers holding that image (`observe::rivals`).
    pub image_managers: Vec<String>,
    /// Inventory entries of the status read that cannot be this instance's
    /// (another namespace): dropped from `status`, reported.
    pub ignored_inventory: Vec<String>,
    /// This process applied these very inputs within the last [`SETTLE`]: the
    /// caches may not show that write yet.
    pub just_applied: bool,
    /// The fleet's rollout budget as it concerns this instance.
    pub budget: BudgetView,
    /// What the spec asks to be rendered (`render::hash::spec_hash`): another one
    /// than at the last apply makes the change the user's.
    pub spec_hash: Option<String>,
}

/// The rollout budget as this reconcile sees it (set by the reconcile from
/// `reconcile::budget`; plan only reads it). See `crate::rollout`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetView {
    /// The desired revision is an operator-originated change of a running
    /// pod template.
    pub budgeted: bool,
    /// The budget's answer, when budgeted and not admitted for this revision yet.
    pub admission: Option<Admission>,
    /// The instance's maintenance window and deadline, when budgeted.
    pub gate: crate::window::Gate,
}

/// How long after an apply the caches are given to show it. A reconcile
/// triggered meanwhile (by the events of the other children of the same apply)
/// would otherwise see a child missing or stale and apply again.
pub const SETTLE: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApplyReason {
    /// Nothing was applied yet.
    Initial,
    /// The desired revision differs from the applied one.
    ManifestDrift,
    /// The workload runs another image than desired (named: whoever else owns
    /// the image field, if anyone).
    ImageDrift(Vec<String>),
    /// The force token changed.
    Forced,
    /// An object of the revision is missing.
    ChildMissing(String),
    /// An object carries another revision than it should.
    ChildRevision(String),
    /// Another field manager (named) took fields this operator renders.
    FieldDrift(String, Vec<String>),
    /// An object of this instance that the desired set no longer has (in the
    /// last inventory, or found by its labels) is still there.
    Stale(String),
    /// An existing object was handed over with `kura.dev/adopt`.
    Adopted(String),
}

impl ApplyReason {
    /// The metric label and the word used in Events.
    pub fn label(&self) -> &'static str {
        match self {
            ApplyReason::Initial => "initial",
            ApplyReason::ManifestDrift => "manifest",
            ApplyReason::ImageDrift(_) => "image",
            ApplyReason::Forced => "forced",
            ApplyReason::ChildMissing(_) => "missing",
            ApplyReason::ChildRevision(_) => "child-revision",
            ApplyReason::FieldDrift(..) => "field-drift",
            ApplyReason::Stale(_) => "stale",
            ApplyReason::Adopted(_) => "adopt",
        }
    }

    /// Another writer undid what this operator wrote: taking it back counts
    /// against the conflict window (no ping-pong, docs/incidents.md #4).
    pub fn is_contested(&self) -> bool {
        matches!(
            self,
            ApplyReason::FieldDrift(..) | ApplyReason::ImageDrift(_)
        )
    }

    /// What the caches can show for a while after this process's own apply.
    /// An object handed over with `kura.dev/adopt` is one: the apply that
    /// took it over made the instance its controller (and labelled it), and
    /// until the cache has seen that apply it still shows the object handed
    /// over (on a slow machine the next pass came first and sent the whole
    /// revision again).
    pub fn may_be_cache_lag(&self) -> bool {
        matches!(
            self,
            ApplyReason::ChildMissing(_)
                | ApplyReason::ChildRevision(_)
                | ApplyReason::FieldDrift(..)
                | ApplyReason::ImageDrift(_)
                | ApplyReason::Stale(_)
                | ApplyReason::Adopted(_)
        )
    }

    /// The other writers this reason names.
    pub fn managers(&self) -> &[String] {
        match self {
            ApplyReason::FieldDrift(_, m) | ApplyReason::ImageDrift(m) => m,
            _ => &[],
        }
    }
}

impl std::fmt::Display for ApplyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyReason::ChildMissing(o) => write!(f, "missing {o}"),
            ApplyReason::ChildRevision(o) => write!(f, "{o} carries another revision"),
            ApplyReason::FieldDrift(o, m) if m.is_empty() => write!(
                f,
                "fields of {o} changed on the cluster and no other field manager holds them (removed by an edit, or an admission webhook or policy?)"
            ),
            ApplyReason::FieldDrift(o, m) => write!(f, "fields of {o} taken by {}", m.join(", ")),
            ApplyReason::ImageDrift(m) if m.is_empty() => {
                f.write_str("image changed on the cluster (an admission webhook or policy?)")
            }
            ApplyReason::ImageDrift(m) => write!(f, "image taken by {}", m.join(", ")),
            ApplyReason::Stale(o) => write!(f, "{o} is no longer desired"),
            ApplyReason::Adopted(o) => write!(f, "{o} handed over with kura.dev/adopt"),
            other => f.write_str(other.label()),
        }
    }
}

/// One object to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyOp {
    pub id: ObjectId,
    /// The caches show no such object: create it, and only if the name is
    /// free (an existing object is never taken over by a create).
    pub create: bool,
    /// An Ingress moving to another class: the address its old controller
    /// wrote says nothing about the new one, so it is cleared.
    pub clear_address: bool,
    /// The workload's change waits for the rollout budget, but another
    /// writer took fields of it (`kubectl scale`): it is sent with the pod
    /// template and revision stamp it runs now, so the drift is repaired
    /// without the restart the budget holds back.
    pub keep_live_template: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Invalid spec or configuration: apply nothing, delete nothing, report.
    Invalid(ValidationErrors),
    /// `spec.paused`: observe and report only.
    Paused,
    /// Objects of the desired names exist and are not this instance's: apply
    /// nothing (a partial rollout around a foreign object helps nobody),
    /// delete nothing, report each one.
    NameConflict(Vec<String>),
    /// Desired objects are being deleted, held by finalizers: apply nothing
    /// (an apply would write to an object on its way out, and again on every
    /// pass while it hangs), delete nothing, report each one and look again
    /// soon; once gone, they are missing and created again.
    ChildTerminating(Vec<String>),
    /// Send `apply` (in waves), then delete `prune`. `held`: the revision
    /// restarts pods and waits for the rollout budget, so the objects the pods
    /// depend on (`ChildKind::restarts_pods`) are not among `apply`; the rest
    /// of the change goes now.
    Apply {
        reasons: Vec<ApplyReason>,
        apply: Vec<ApplyOp>,
        prune: Vec<ObjectId>,
        held: Option<Admission>,
    },
    /// The budget admits this instance to an operator-originated rollout:
    /// record that (a status write) before anything restarts.
    Admit,
    /// Everything that may go now went; the rest waits for the budget.
    Held(Admission),
    /// The same inputs failed recently: retry at `at`, not before.
    Backoff { at: Timestamp },
    /// The retry budget of these inputs is spent: retry at `at` (after the stall window).
    Stalled { at: Timestamp },
    /// Another writer keeps undoing ours: the take-backs of this window are
    /// spent; hold until `at` and report (no ping-pong).
    ConflictHold {
        at: Timestamp,
        managers: Vec<String>,
    },
    /// Everything matches: only probe activation.
    Converged,
    /// What differs is what the caches have not shown yet of this process's own
    /// apply of these very inputs: look again after [`SETTLE`].
    Settling,
}

/// The key a retry budget belongs to: a change of revision (spec, config,
/// renderer) or force token starts a fresh budget.
pub fn inputs_key(desired_revision: &str, force_token: Option<&str>) -> String {
    format!("{desired_revision}/{}", force_token.unwrap_or(""))
}

/// Failures recorded for these inputs (see [`crate::retry::failures_in`]).
pub fn failures_for(status: &KuraInstanceStatus, key: &str) -> i64 {
    crate::retry::failures_in(status.retry.as_ref(), key)
}

impl From<Wait> for Plan {
    fn from(wait: Wait) -> Plan {
        match wait {
            Wait::Backoff { at } => Plan::Backoff { at },
            Wait::Stalled { at } => Plan::Stalled { at },
        }
    }
}

/// Whether `running` is the image `desired` names. A policy that pins a tag to
/// its digest (`repo:tag` running as `repo:tag@sha256:…`) runs the same image;
/// two references with the same repository and digest are the same image.
pub fn same_image(desired: &str, running: &str) -> bool {
    if desired == running {
        return true;
    }
    fn digest(r: &str) -> Option<(&str, &str)> {
        r.split_once("@sha256:")
            .filter(|(_, d)| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
    }
    let repository = |name: &str| {
        // `host:port/path:tag` → `host:port/path`: a tag follows the last '/'.
        match name.rsplit_once('/') {
            Some((head, last)) => format!("{head}/{}", last.split(':').next().unwrap_or(last)),
            None => name.split(':').next().unwrap_or(name).to_string(),
        }
    };
    match (digest(desired), digest(running)) {
        (None, Some((name, _))) => name == desired,
        (Some((dn, dd)), Some((rn, rd))) => dd == rd && repository(dn) == repository(rn),
        _ => false,
    }
}

pub fn plan(
    observed: &Observed,
    desired: Result<&Desired, &ValidationErrors>,
    policy: &RetryPolicy,
    now: Timestamp,
) -> Plan {
    let (mut apply, prune, mut reasons, desired) = match (intent(observed, desired), desired) {
        (
            Plan::Apply {
                apply,
                prune,
                reasons,
                ..
            },
            Ok(desired),
        ) => (apply, prune, reasons, desired),
        (intended, _) => return intended,
    };
    if observed.just_applied && reasons.iter().all(ApplyReason::may_be_cache_lag) {
        return Plan::Settling;
    }
    // Only contested values to take back, and this window's take-backs are spent.
    if let Some((at, managers)) = conflict::hold(&reasons, observed.status.conflict.as_ref(), now) {
        return Plan::ConflictHold { at, managers };
    }
    // A failure recorded for these same inputs decides when to try again.
    let key = inputs_key(&desired.revision, observed.force_token.as_deref());
    if let Some(wait) = policy.wait_for(observed.status.retry.as_ref(), &key, now) {
        return wait.into();
    }
    let held = match budget_decision(observed, desired) {
        BudgetDecision::Proceed => None,
        BudgetDecision::Admit => return Plan::Admit,
        BudgetDecision::Hold(admission) => {
            // Drift repair is never held: a workload whose fields another
            // writer took is repaired on the template it runs (its stamp is
            // the old revision's, so its drift is read here, not in `reasons`),
            // as many times per window as any take-back.
            let spent = conflict::open(observed.status.conflict.as_ref(), now)
                .is_some_and(|(c, _)| c.take_backs >= MAX_TAKE_BACKS);
            if let Some((workload, managers)) = held_workload_taken(observed, desired)
                && !spent
                && let Some(op) = apply.iter_mut().find(|op| op.id == workload.id)
            {
                op.keep_live_template = true;
                reasons.push(ApplyReason::FieldDrift(workload.id.to_string(), managers));
            }
            apply.retain(|op| op.keep_live_template || !op.id.kind.restarts_pods());
            if apply.is_empty() && prune.is_empty() || settling_while_held(observed, &reasons) {
                return Plan::Held(admission);
            }
            Some(admission)
        }
    };
    Plan::Apply {
        apply,
        prune,
        reasons,
        held,
    }
}

/// Whether a held instance's part that restarts no pod was sent by this
/// process within the settle time and what remains to send may be the
/// cache not having seen it yet. The settle rule of `plan` cannot see this:
/// the hold keeps its own reason (the status's applied revision is the old
/// one) for as long as it holds.
fn settling_while_held(observed: &Observed, reasons: &[ApplyReason]) -> bool {
    observed.just_applied
        && reasons
            .iter()
            .filter(|r| **r != ApplyReason::ManifestDrift)
            .all(ApplyReason::may_be_cache_lag)
}

/// What a reconcile would do with these inputs when nothing holds it back (no
/// backoff, stall, conflict hold, settling or fleet budget: those decide only
/// *when*): one of `Invalid`, `Paused`, `NameConflict`, `ChildTerminating`,
/// `Converged` or `Apply`.
/// `plan` is this, then the waits; `kura-operator diff` previews with it.
pub fn intent(observed: &Observed, desired: Result<&Desired, &ValidationErrors>) -> Plan {
    let desired = match desired {
        Ok(d) => d,
        Err(errors) => return Plan::Invalid(errors.clone()),
    };
    if observed.paused {
        return Plan::Paused;
    }
    let conflicts = drift::name_conflicts(&desired.objects, &observed.children);
    if !conflicts.is_empty() {
        return Plan::NameConflict(conflicts);
    }
    let terminating = drift::terminating(&desired.objects, &observed.terminating);
    if !terminating.is_empty() {
        return Plan::ChildTerminating(terminating);
    }
    let reasons = apply_reasons(observed, desired);
    if reasons.is_empty() {
        return Plan::Converged;
    }
    Plan::Apply {
        apply: objects_to_send(observed, desired, &reasons),
        prune: stale_objects(observed, desired),
        reasons,
        held: None,
    }
}

enum BudgetDecision {
    Proceed,
    Admit,
    Hold(Admission),
}

/// Whether the fleet budget lets this revision restart pods now. Not
/// budgeted (a user change, a force, no pod restart, drift repair), or
/// already admitted to this very revision: go on.
fn budget_decision(observed: &Observed, desired: &Desired) -> BudgetDecision {
    let admitted = observed.status.rollout.as_ref().is_some_and(|r| {
        r.state == crate::api::RolloutState::Admitted && r.revision == desired.revision
    });
    if !observed.budget.budgeted || admitted {
        return BudgetDecision::Proceed;
    }
    match &observed.budget.admission {
        Some(Admission::Admit { counted: true }) => BudgetDecision::Admit,
        Some(Admission::Admit { counted: false }) | None => BudgetDecision::Proceed,
        Some(held) => BudgetDecision::Hold(held.clone()),
    }
}

fn apply_reasons(observed: &Observed, desired: &Desired) -> Vec<ApplyReason> {
    let status = &observed.status;
    let mut reasons = Vec::new();
    match &status.applied_revision {
        None => reasons.push(ApplyReason::Initial),
        Some(applied) if *applied != desired.revision => reasons.push(ApplyReason::ManifestDrift),
        Some(_) => {}
    }
    if let Some(running) = &observed.running_image
        && !same_image(&desired.image, running)
        && !still_rolling_out_ours(status, desired, running)
    {
        reasons.push(ApplyReason::ImageDrift(observed.image_managers.clone()));
    }
    if observed.force_token.is_some() && observed.force_token != status.last_handled_reapply_at {
        reasons.push(ApplyReason::Forced);
    }
    reasons.extend(drift::child_reasons(
        &desired.objects,
        &observed.children,
        &status.inventory,
    ));
    for id in stale_objects(observed, desired) {
        reasons.push(ApplyReason::Stale(id.to_string()));
    }
    // Before the first apply every child is "missing": Initial says it all.
    if reasons.first() == Some(&ApplyReason::Initial) {
        reasons.retain(|r| !matches!(r, ApplyReason::ChildMissing(_)));
    }
    reasons
}

/// The workload runs the image this operator applied last, and a new one is
/// desired (a spec change): not yet rolled out, not taken by anyone. The new
/// revision's apply sends it; no conflict to count or report.
fn still_rolling_out_ours(status: &KuraInstanceStatus, desired: &Desired, running: &str) -> bool {
    status
        .applied_image
        .as_deref()
        .is_some_and(|applied| !same_image(&desired.image, applied) && same_image(applied, running))
}

fn objects_to_send(
    observed: &Observed,
    desired: &Desired,
    reasons: &[ApplyReason],
) -> Vec<ApplyOp> {
    let everything = reasons
        .iter()
        .any(|r| matches!(r, ApplyReason::Initial | ApplyReason::Forced));
    let image_drift = reasons
        .iter()
        .any(|r| matches!(r, ApplyReason::ImageDrift(_)));
    desired
        .objects
        .iter()
        .filter(|o| {
            let live = observed.children.get(&o.id);
            everything
                || drift::differs(o, live, &observed.status.inventory)
                || (image_drift && o.id.kind == ChildKind::StatefulSet)
        })
        .map(|o| drift::op(o, observed.children.get(&o.id)))
        .collect()
}

/// The live workload, when another manager took fields of it since the last
/// apply (and who, as far as managedFields say).
fn held_workload_taken<'d>(
    observed: &Observed,
    desired: &'d Desired,
) -> Option<(&'d crate::render::RenderedObject, Vec<String>)> {
    let workload = desired
        .objects
        .iter()
        .find(|o| o.id.kind == ChildKind::StatefulSet)?;
    let live = observed.children.get(&workload.id)?;
    (live.owner == Owner::Ours && drift::fields_taken(&observed.status.inventory, workload, live))
        .then(|| (workload, live.other_managers.clone()))
}

/// Objects of this instance that the desired set no longer has: those of the
/// last inventory, and those the caches show created by this instance (an
/// apply that failed half-way, or a status write that never happened, left
/// them out of any inventory). Objects of other owners are never candidates.
pub fn stale_objects(observed: &Observed, desired: &Desired) -> Vec<ObjectId> {
    let desired_ids: BTreeSet<&ObjectId> = desired.objects.iter().map(|o| &o.id).collect();
    let inventoried = observed
        .status
        .inventory
        .iter()
        .filter_map(ObjectId::from_inventory);
    let created_by_us = observed
        .children
        .iter()
        .filter(|(_, live)| live.owner == Owner::Ours)
        .map(|(id, _)| id.clone());
    let candidates: BTreeSet<ObjectId> = inventoried.chain(created_by_us).collect();
    candidates
        .into_iter()
        .filter(|id| !desired_ids.contains(id))
        // Inventoried but gone, or there and someone else's: nothing to delete.
        .filter(|id| {
            observed
                .children
                .get(id)
                .is_none_or(|live| live.owner == Owner::Ours)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
