//! `kura-operator diff`: what this binary, under a given configuration, would
//! write to the live cluster, instance by instance, before it does. The
//! decision is the operator's own (`kura_core::judge`, in `Mode::Preview`: the
//! plan without its waits, from a snapshot read by `crate::reconcile::snapshot`) over the same kind of caches (`live`), filled from
//! one list per kind. Read-only: `read` only gets and lists.
//!
//! The core here is pure; `read` is the I/O, `command` the wiring, `report`
//! the output.

pub mod command;
pub mod fields;
pub mod live;
pub mod read;
pub mod report;
pub mod show;

use serde::Serialize;

use crate::memory::Memory;
use crate::reconcile::prune::{gateway_user, kept_by_metadata};
use crate::reconcile::snapshot::{Inputs, decide_from};
use kura_core::accepted::Accepted;
use kura_core::api::KuraInstance;
use kura_core::config::OperatorConfig;
use kura_core::judge::Mode;
use kura_core::judge::instance::{InstanceDecision as Decision, Valid, Verdict};
use kura_core::kind::ChildKind;
use kura_core::plan::{ApplyOp, ApplyReason, Observed, Plan, RetryPolicy};
use kura_core::render::{Desired, ObjectId};
use kura_core::rollout::Admission;

pub use live::{Live, LiveBuilder};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Nothing would be written or deleted.
    Unchanged,
    /// Objects would be written or deleted.
    Changes,
    /// The instance does not validate: nothing would be applied or deleted.
    Invalid,
    /// `spec.paused`: nothing would be applied or deleted.
    Paused,
    /// Objects of its names exist and are not its own: nothing would be applied.
    NameConflict,
    /// A host it asks for is held by another instance: nothing would be
    /// applied or deleted.
    HostConflict,
    /// Objects of its names are being deleted (held by finalizers): nothing
    /// would be applied or deleted until they are gone.
    ChildTerminating,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    Create,
    Update,
    Prune,
}

impl Action {
    pub fn sign(self) -> char {
        match self {
            Action::Create => '+',
            Action::Update => '~',
            Action::Prune => '-',
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectChange {
    pub action: Action,
    #[serde(serialize_with = "kind_name")]
    pub kind: ChildKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// Why it is written or deleted.
    pub why: String,
    /// `--show-diff`: the live object's operator-owned fields against the
    /// desired manifest, as a unified diff of their YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl ObjectChange {
    pub fn id(&self) -> ObjectId {
        ObjectId {
            kind: self.kind,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

fn kind_name<S: serde::Serializer>(kind: &ChildKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.kind())
}

/// A restart waiting for a maintenance window, as `diff` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowPreview {
    /// `Saturday,Sunday 02:00 for 2h (Europe/Berlin)`.
    pub window: String,
    /// `spec.maintenanceWindow`, or the region's default.
    pub source: String,
    /// RFC 3339: the window's next opening.
    pub opens: String,
    /// RFC 3339: `rollout.windowDeadline` for this change, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// RFC 3339: when the change would go at the earliest (the opening, or
    /// the deadline if that comes first; the budget may pace it further).
    pub goes_at: String,
}

impl From<&kura_core::window::WindowWait> for WindowPreview {
    fn from(w: &kura_core::window::WindowWait) -> Self {
        WindowPreview {
            window: w.window.clone(),
            source: w.source.clone(),
            opens: w.opens.to_string(),
            deadline: w.deadline.map(|d| d.to_string()),
            goes_at: w.goes_at().to_string(),
        }
    }
}

/// A reason nothing is applied: a field that does not validate, or a name
/// taken by another object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceDiff {
    pub namespace: String,
    pub name: String,
    pub state: State,
    /// `status.appliedRevision`.
    pub applied_revision: Option<String>,
    /// The revision this binary renders under the configuration given.
    pub desired_revision: Option<String>,
    /// Why the operator would apply (as its Events and logs say it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// In the order the operator sends them, prunes last.
    pub objects: Vec<ObjectChange>,
    /// The StatefulSet's pod template changes: its pods roll.
    pub pod_restart: bool,
    /// The restart is the operator's (configuration or release, not the
    /// spec or a force) and the instance is Ready: it waits for the fleet
    /// budget (`rollout.maxUnavailable`) instead of rolling at once.
    pub waits_for_budget: bool,
    /// The restart is the operator's and waits for the instance's
    /// maintenance window: which window, and when the change would go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_for_window: Option<WindowPreview>,
    /// `spec.paused`: who paused, why, until when, and the change that waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// Objects the new revision no longer has that stay, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// Storage the configuration asks for that the live StatefulSet keeps otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_pending: Option<String>,
    /// A host conflict's holders (namespace, name): their own changes may
    /// free the host ([`follow_freed_hosts`]).
    #[serde(skip)]
    pub held_by: Vec<(String, String)>,
    /// What the operator would do, a short line per effect of its decision
    /// (`kura_core::judge::Effect`); none for an unchanged instance.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
}

impl InstanceDiff {
    pub fn written(&self) -> impl Iterator<Item = &ObjectChange> {
        self.objects.iter().filter(|o| o.action != Action::Prune)
    }

    pub fn pruned(&self) -> impl Iterator<Item = &ObjectChange> {
        self.objects.iter().filter(|o| o.action == Action::Prune)
    }

    /// Stale gateways this instance would delete: whether another user keeps
    /// them is [`keep_used_gateways`]' question, with the namespace's
    /// instances and Ingresses read live, as `prune` reads them.
    pub fn pruned_gateways(&self) -> impl Iterator<Item = &ObjectChange> {
        self.pruned().filter(|o| o.kind == ChildKind::KuraGateway)
    }

    /// `Changes` exactly when something would be written or deleted: an apply
    /// that only records status (an inventoried object already gone) is not one.
    fn settle(&mut self) {
        if matches!(self.state, State::Changes | State::Unchanged) {
            self.state = if self.objects.is_empty() {
                State::Unchanged
            } else {
                State::Changes
            };
        }
    }
}

/// What the operator, with this binary and `config`, would do for `instance`
/// given the `live` state: its reconcile's decision (`kura_core::judge`), without
/// the waits.
pub fn diff_instance(
    instance: &KuraInstance,
    config: &Accepted,
    live: &Live,
    show_diff: bool,
) -> InstanceDiff {
    let now = jiff::Timestamp::now();
    let memory = Memory::default();
    let inputs = Inputs {
        instance,
        config,
        stores: &live.stores,
        status: instance.status.clone(),
        recently_applied: None,
        memory: &memory,
        now,
    };
    let decision = decide_from(&inputs, &RetryPolicy::default(), Mode::Preview);
    let mut out = InstanceDiff {
        namespace: instance.metadata.namespace.clone().unwrap_or_default(),
        name: instance.metadata.name.clone().unwrap_or_default(),
        state: State::Unchanged,
        applied_revision: decision.observed.status.applied_revision.clone(),
        desired_revision: decision.revision().map(str::to_string),
        reasons: Vec::new(),
        objects: Vec::new(),
        pod_restart: false,
        waits_for_budget: false,
        waits_for_window: None,
        paused: None,
        problems: Vec::new(),
        kept: Vec::new(),
        storage_pending: decision.pending_storage.as_ref().map(|p| p.to_string()),
        held_by: Vec::new(),
        effects: Vec::new(),
    };
    match &decision.verdict {
        Verdict::Invalid(errors) => {
            // As the operator does: input nobody can apply asks for no host.
            live.stores.claims.stand_down(instance);
            out.state = State::Invalid;
            out.problems = errors
                .0
                .iter()
                .map(|e| Problem {
                    field: Some(e.path.clone()),
                    message: e.message.clone(),
                })
                .collect();
        }
        Verdict::Valid(valid) => {
            report_valid(&mut out, instance, &decision, valid, live, show_diff);
            if let (Plan::Apply { apply, .. }, None) = (&valid.plan, &valid.host_conflict) {
                // As the operator's apply does, before it writes: the hosts
                // are its from now on, for the instances previewed after it.
                let _ = live.stores.claims.claim(instance, config, now);
                // And as its write does: an Ingress moved to other hosts
                // serves the old ones no more.
                rewrite_ingress_hosts(apply, &valid.desired, live);
            }
        }
    }
    out.settle();
    if out.state != State::Unchanged {
        out.effects = decision.effects.iter().map(ToString::to_string).collect();
    }
    out
}

/// The hosts the Ingresses `apply` updates serve once written, in the claims
/// of `live`.
fn rewrite_ingress_hosts(apply: &[ApplyOp], desired: &Desired, live: &Live) {
    let updated = apply
        .iter()
        .filter(|op| op.id.kind == ChildKind::Ingress && !op.create);
    for op in updated {
        let Some(object) = desired.objects.iter().find(|o| o.id == op.id) else {
            continue;
        };
        let body = object.body();
        let hosts = body["spec"]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|rule| rule["host"].as_str().map(str::to_string));
        let namespace = op.id.namespace.as_deref().unwrap_or_default();
        live.stores
            .claims
            .rewrite_hosts(namespace, &op.id.name, hosts);
    }
}

/// Hosts freed by the changes previewed: an instance in a host conflict
/// whose holder's own change moves its Ingress off the host gets the host
/// once that is written (the operator reconciles those waiting on a host as
/// soon as it is free), so it is decided again after its holders, those
/// outside `shown` included (their changes are not shown, but made all the
/// same), until nothing changes. `diffs` are those of `shown`, in order.
pub fn follow_freed_hosts(
    shown: &[KuraInstance],
    diffs: &mut [InstanceDiff],
    config: &Accepted,
    live: &Live,
    show_diff: bool,
) {
    let mut decided: std::collections::BTreeSet<(String, String)> = diffs
        .iter()
        .map(|d| (d.namespace.clone(), d.name.clone()))
        .collect();
    // Each round frees hosts for at least one more instance, or ends.
    for _ in 0..=shown.len() {
        let holders: Vec<(String, String)> = diffs
            .iter()
            .flat_map(|d| d.held_by.iter().cloned())
            .filter(|h| decided.insert(h.clone()))
            .collect();
        for (namespace, name) in holders {
            let at = kube::runtime::reflector::ObjectRef::new(&name).within(&namespace);
            if let Some(holder) = live.stores.instances.get(&at) {
                diff_instance(&holder, config, live, false);
            }
        }
        let mut changed = false;
        for (instance, diff) in shown.iter().zip(diffs.iter_mut()) {
            if diff.state != State::HostConflict {
                continue;
            }
            let again = diff_instance(instance, config, live, show_diff);
            if again.state != State::HostConflict {
                *diff = again;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// The report of a valid instance's decision.
fn report_valid(
    out: &mut InstanceDiff,
    instance: &KuraInstance,
    decision: &Decision,
    valid: &Valid,
    live: &Live,
    show_diff: bool,
) {
    let problems = |messages: &[String]| -> Vec<Problem> {
        messages
            .iter()
            .map(|message| Problem {
                field: None,
                message: message.clone(),
            })
            .collect()
    };
    if let Some(conflict) = &valid.host_conflict {
        out.state = State::HostConflict;
        out.held_by = conflict
            .0
            .iter()
            .map(|l| (l.holder.namespace.clone(), l.holder.name.clone()))
            .collect();
        let lost: Vec<String> = conflict.0.iter().map(ToString::to_string).collect();
        out.problems = problems(&lost);
        return;
    }
    match &valid.plan {
        Plan::Paused => {
            out.state = State::Paused;
            let mut status = decision.observed.status.clone();
            status.desired_revision = out.desired_revision.clone();
            out.paused = Some(kura_core::status::paused_message(
                instance.spec.pause.as_ref(),
                &status,
            ));
        }
        Plan::NameConflict(conflicts) => {
            out.state = State::NameConflict;
            out.problems = problems(conflicts);
        }
        Plan::ChildTerminating(objects) => {
            out.state = State::ChildTerminating;
            out.problems = problems(objects);
        }
        Plan::Apply {
            reasons,
            apply,
            prune,
            ..
        } => {
            out.pod_restart = pods_restart(apply, reasons, &valid.desired, live);
            out.waits_for_budget = out.pod_restart && waits_for_budget(&decision.observed);
            out.waits_for_window = match &decision.observed.budget.admission {
                Some(Admission::Window(wait)) if out.pod_restart => Some(wait.as_ref().into()),
                _ => None,
            };
            out.objects = apply.iter().map(|op| written(op, reasons)).collect();
            pruned(out, prune, &valid.validated.uid, live);
            out.reasons = reasons.iter().map(ToString::to_string).collect();
            if show_diff {
                show_diffs(out, &valid.desired, live);
            }
        }
        // `Mode::Preview` never waits; an invalid instance has no `Valid`.
        Plan::Invalid(_)
        | Plan::Converged
        | Plan::Backoff { .. }
        | Plan::Stalled { .. }
        | Plan::ConflictHold { .. }
        | Plan::Settling
        | Plan::Admit
        | Plan::Held(_) => {}
    }
}

/// The budget paces this restart: the operator admits it when its turn comes
/// (now, if a slot is free), or holds it, as the decision's budget view says
/// for the fleet the caches hold.
fn waits_for_budget(observed: &Observed) -> bool {
    observed.budget.budgeted
        && matches!(
            observed.budget.admission,
            Some(
                Admission::Admit { counted: true }
                    | Admission::Wait { .. }
                    | Admission::Halted { .. }
            )
        )
}

fn written(op: &ApplyOp, reasons: &[ApplyReason]) -> ObjectChange {
    ObjectChange {
        action: if op.create {
            Action::Create
        } else {
            Action::Update
        },
        kind: op.id.kind,
        namespace: op.id.namespace.clone(),
        name: op.id.name.clone(),
        why: why(op, reasons),
        diff: None,
    }
}

/// The stale objects the operator would delete, and those it keeps (with why).
fn pruned(out: &mut InstanceDiff, prune: &[ObjectId], uid: &str, live: &Live) {
    for id in prune {
        // Not in the lists (every gateway, every other object labelled
        // as the operator's): gone, or no longer labelled, so kept.
        let Some(meta) = live.stores.meta(id) else {
            continue;
        };
        match kept_by_metadata(&meta, id, uid, &out.name) {
            Some(why) => out.kept.push(format!("{id}: {why}")),
            None => out.objects.push(ObjectChange {
                action: Action::Prune,
                kind: id.kind,
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                why: "no longer desired".into(),
                diff: None,
            }),
        }
    }
}

fn show_diffs(out: &mut InstanceDiff, desired: &Desired, live: &Live) {
    for change in &mut out.objects {
        let id = change.id();
        let want = desired.objects.iter().find(|o| o.id == id);
        change.diff = Some(show::unified(
            &id,
            live.owned.get(&id).map(String::as_str),
            want.map(|o| o.body()).as_ref(),
        ));
    }
}

/// The StatefulSet is sent and its pod template changes: a new template hash,
/// or an image someone else changed that the apply takes back. A StatefulSet
/// created now starts its pods; that is not a restart.
fn pods_restart(
    apply: &[ApplyOp],
    reasons: &[ApplyReason],
    desired: &Desired,
    live: &Live,
) -> bool {
    let image_drift = reasons
        .iter()
        .any(|r| matches!(r, ApplyReason::ImageDrift(_)));
    apply.iter().any(|op| {
        op.id.kind == ChildKind::StatefulSet
            && !op.create
            && (image_drift
                || live.pod_template_hashes.get(&op.id) != Some(&desired.pod_template_hash))
    })
}

/// Why `op` is sent, from the reasons `plan` gave.
fn why(op: &ApplyOp, reasons: &[ApplyReason]) -> String {
    let why = sent_because(op, reasons);
    if op.clear_address {
        // A status write of its own: the old class's controller wrote that address.
        format!("{why}; its address is cleared (new ingress class)")
    } else {
        why
    }
}

fn sent_because(op: &ApplyOp, reasons: &[ApplyReason]) -> String {
    let me = op.id.to_string();
    let own = reasons.iter().find_map(|r| match r {
        ApplyReason::ChildMissing(o) if *o == me => Some("missing".to_string()),
        ApplyReason::ChildRevision(o) if *o == me => Some("content changed".to_string()),
        ApplyReason::FieldDrift(o, managers) if *o == me => {
            Some(format!("fields taken by {}", managers.join(", ")))
        }
        ApplyReason::Adopted(o) if *o == me => Some(r.to_string()),
        _ => None,
    });
    if let Some(why) = own {
        return why;
    }
    let image = reasons
        .iter()
        .find(|r| matches!(r, ApplyReason::ImageDrift(_)));
    match image {
        Some(r) if op.id.kind == ChildKind::StatefulSet => r.to_string(),
        _ if reasons.contains(&ApplyReason::Forced) => "forced (kura.dev/reapply-at)".into(),
        _ if reasons.contains(&ApplyReason::Initial) => "first apply".into(),
        _ => "sent with the others".into(),
    }
}

/// The names `diff` creates, read as the operator finds them: it reads them
/// before its first write when it sends more than one object
/// (`apply::names_to_check`), and a lone create-only apply that the
/// apiserver refuses reads its name then. Either way a taken name is judged
/// before anything is written under it.
pub fn names_to_read(diff: &InstanceDiff) -> Vec<ObjectId> {
    if diff.state != State::Changes {
        return Vec::new();
    }
    diff.written()
        .filter(|o| o.action == Action::Create)
        .map(ObjectChange::id)
        .collect()
}

/// What the names read say (`read::taken_names`): objects under them that
/// are someone else's (worded as the operator reports them), and those that
/// are this instance's own or handed over to it with `kura.dev/adopt`.
#[derive(Debug, Default, PartialEq)]
pub struct NamesFound {
    pub taken: Vec<String>,
    /// Sent as an apply to the object there, not a create.
    pub existing: Vec<(ObjectId, String)>,
}

/// Applies what the name reads found: a name someone else's object holds
/// makes the apply a name conflict, and nothing would be written or deleted;
/// an object that is the instance's or handed over is updated, not created.
pub fn names_found(diff: &mut InstanceDiff, found: NamesFound) {
    for (id, why) in found.existing {
        if let Some(change) = diff.objects.iter_mut().find(|o| o.id() == id) {
            change.action = Action::Update;
            change.why = why;
        }
    }
    names_taken(diff, found.taken);
}

/// Names the operator would find taken by someone else's object when it reads
/// them before writing (`conflicts`, worded as it reports them): its apply is
/// a name conflict, and nothing would be written or deleted.
pub fn names_taken(diff: &mut InstanceDiff, conflicts: Vec<String>) {
    if conflicts.is_empty() {
        return;
    }
    diff.state = State::NameConflict;
    diff.objects.clear();
    diff.reasons.clear();
    diff.kept.clear();
    diff.pod_restart = false;
    diff.waits_for_budget = false;
    diff.problems = conflicts
        .into_iter()
        .map(|message| Problem {
            field: None,
            message,
        })
        .collect();
}

/// Keeps the stale gateways of `diff` that something else of the namespace
/// still uses, as `prune` would: `instances` are all of the namespace's,
/// `ingresses` its Ingresses as (name, class, `kura.dev/instance` label).
pub fn keep_used_gateways(
    diff: &mut InstanceDiff,
    instances: &[KuraInstance],
    ingresses: &[(String, String, Option<String>)],
    config: &OperatorConfig,
) {
    let others: Vec<(String, String)> = ingresses
        .iter()
        .filter(|(_, _, owner)| owner.as_deref() != Some(diff.name.as_str()))
        .map(|(name, class, _)| (name.clone(), class.clone()))
        .collect();
    let namespace = diff.namespace.clone();
    let name = diff.name.clone();
    let mut kept = Vec::new();
    diff.objects.retain(|o| {
        if o.action != Action::Prune || o.kind != ChildKind::KuraGateway {
            return true;
        }
        let class = kura_core::names::gateway_ingress_class(&namespace, &o.name);
        match gateway_user(
            &o.name, &class, &namespace, instances, &others, &name, config,
        ) {
            Some(user) => {
                kept.push(format!("{}: still used by {user}", o.id()));
                false
            }
            None => true,
        }
    });
    diff.kept.extend(kept);
    diff.settle();
}

#[cfg(test)]
mod tests;
