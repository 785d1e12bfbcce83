//! The decision about an instance: plan what the snapshot shows, and the
//! effects that carry the plan out. The operator and `kura-operator diff`
//! both decide with [`judge_instance`]; what differs is how they read the
//! snapshot (the reflectors and memory, or lists) and what they do with the
//! effects (carry them out, or show them).

use jiff::Timestamp;

use super::{Effect, Mode, waves};
use crate::api::KuraInstance;
use crate::claims::Conflict;
use crate::config::OperatorConfig;
use crate::plan::{self, BudgetView, Observed, Plan, RetryPolicy, inputs_key};
use crate::render::{Desired, render};
use crate::storage::{self, LiveClaim, PendingStorage};
use crate::validate::{ResolvedGateway, ValidatedInstance, ValidationErrors, validate};

/// What an instance renders to. The snapshot's read renders first, since
/// what it observes are the objects the instance renders to.
#[derive(Debug)]
pub struct Rendered {
    pub validated: ValidatedInstance,
    pub desired: Desired,
    /// Storage the configuration asks for that the live StatefulSet keeps otherwise.
    pub pending_storage: Option<PendingStorage>,
}

/// Validates, pins the storage the live StatefulSet keeps (`live_claim`),
/// renders.
pub fn prepare(
    instance: &KuraInstance,
    config: &OperatorConfig,
    live_claim: Option<&LiveClaim>,
) -> Result<Rendered, ValidationErrors> {
    let mut validated = validate(instance, config)?;
    let pending_storage = storage::pin(&mut validated, live_claim);
    let desired = render(&validated, config);
    Ok(Rendered {
        validated,
        desired,
        pending_storage,
    })
}

/// Everything the decision about an instance reads, read before it starts.
#[derive(Debug)]
pub struct InstanceSnapshot {
    /// What the instance renders to, or why it does not validate.
    pub rendered: Result<Rendered, ValidationErrors>,
    /// What the caches show, with the status to decide from (the cache's, or
    /// the one this process wrote if the cache has not caught up with it).
    pub observed: Observed,
    /// The inputs key this process applied within `plan::SETTLE`, if any.
    pub recently_applied: Option<String>,
    /// Whether the pause the spec asks for still holds (its end not passed).
    pub paused: bool,
    /// The host claims' answer: whether the instance holds every host it asks
    /// for (read-only; the executor takes them).
    pub hosts: Result<(), Conflict>,
    /// The fleet budget's answer, counting the admissions this process made
    /// that the cache does not show yet (read-only; the executor takes a slot).
    pub budget: BudgetView,
}

/// The decision about one instance.
#[derive(Debug)]
pub struct InstanceDecision {
    /// What the cluster shows (with the fleet budget's view of it).
    pub observed: Observed,
    /// Storage the configuration asks for that the live StatefulSet keeps otherwise.
    pub pending_storage: Option<PendingStorage>,
    pub verdict: Verdict,
    /// What carries the verdict out, in order.
    pub effects: Vec<Effect>,
}

#[derive(Debug)]
pub enum Verdict {
    /// The spec or the configuration does not validate: nothing applied or deleted.
    Invalid(ValidationErrors),
    Valid(Box<Valid>),
}

/// The decision about a valid instance: what it renders to, and what to do.
#[derive(Debug)]
pub struct Valid {
    pub validated: ValidatedInstance,
    pub desired: Desired,
    /// The inputs key (revision and force token) failures and applies belong to.
    pub key: String,
    /// What to do. A host another instance holds overrides every other plan:
    /// like invalid input, nothing is applied and nothing deleted.
    pub plan: Plan,
    pub host_conflict: Option<Conflict>,
}

impl InstanceDecision {
    pub fn desired(&self) -> Option<&Desired> {
        match &self.verdict {
            Verdict::Valid(v) => Some(&v.desired),
            Verdict::Invalid(_) => None,
        }
    }

    pub fn gateway(&self) -> Option<&ResolvedGateway> {
        match &self.verdict {
            Verdict::Valid(v) => Some(&v.validated.gateway),
            Verdict::Invalid(_) => None,
        }
    }

    pub fn revision(&self) -> Option<&str> {
        self.desired().map(|d| d.revision.as_str())
    }

    pub fn valid(&self) -> Option<&Valid> {
        match &self.verdict {
            Verdict::Valid(v) => Some(v),
            Verdict::Invalid(_) => None,
        }
    }
}

/// The decision about the instance of `snapshot`: pure.
pub fn judge_instance(
    snapshot: InstanceSnapshot,
    policy: &RetryPolicy,
    now: Timestamp,
    mode: Mode,
) -> InstanceDecision {
    let InstanceSnapshot {
        rendered,
        mut observed,
        recently_applied,
        paused,
        hosts,
        budget,
    } = snapshot;
    let rendered = match rendered {
        Ok(r) => r,
        Err(errors) => {
            return InstanceDecision {
                observed,
                pending_storage: None,
                verdict: Verdict::Invalid(errors),
                // Input nobody can apply asks for no host, so it keeps nobody waiting.
                effects: vec![Effect::StandDown, Effect::WriteStatus],
            };
        }
    };
    let Rendered {
        validated,
        desired,
        pending_storage,
    } = rendered;
    let key = inputs_key(&desired.revision, observed.force_token.as_deref());
    observed.just_applied = recently_applied.as_deref() == Some(key.as_str());
    observed.paused = paused;
    // A paused instance asks for no host (and applies nothing anyway).
    let host_conflict = if paused { None } else { hosts.err() };
    // An instance that may apply nothing takes no slot of the budget.
    observed.budget = match host_conflict {
        Some(_) => BudgetView::default(),
        None => budget,
    };
    let plan = match mode {
        Mode::Operate => plan::plan(&observed, Ok(&desired), policy, now),
        Mode::Preview => plan::intent(&observed, Ok(&desired)),
    };
    let effects = match host_conflict {
        Some(_) => vec![Effect::WriteStatus],
        None => effects_of(&plan),
    };
    InstanceDecision {
        observed,
        pending_storage,
        verdict: Verdict::Valid(Box::new(Valid {
            validated,
            desired,
            key,
            plan,
            host_conflict,
        })),
        effects,
    }
}

/// What carries out `plan` of an instance that holds its hosts.
fn effects_of(plan: &Plan) -> Vec<Effect> {
    match plan {
        Plan::Admit => vec![Effect::ReserveSlot, Effect::WriteStatus],
        Plan::Apply { apply, prune, .. } => {
            let mut effects = vec![
                Effect::ClaimHosts,
                Effect::Apply {
                    waves: waves(apply),
                },
            ];
            if !prune.is_empty() {
                effects.push(Effect::Prune {
                    objects: prune.clone(),
                });
            }
            effects.push(Effect::WriteStatus);
            effects
        }
        Plan::Invalid(_)
        | Plan::Paused
        | Plan::NameConflict(_)
        | Plan::ChildTerminating(_)
        | Plan::Held(_)
        | Plan::Backoff { .. }
        | Plan::Stalled { .. }
        | Plan::ConflictHold { .. }
        | Plan::Converged
        | Plan::Settling => vec![Effect::WriteStatus],
    }
}
