//! The one decision about an instance, shared by the reconcile and by
//! `kura-operator diff`: validate → pin storage → render → observe → host
//! claims → fleet budget → plan. Its inputs are read first (the caches, this
//! process's memory of the instance, the clock), and it writes nothing: no
//! request, no grant, no admission. What the decision reserves in this
//! process (a host, a slot of the budget) is taken by the step that carries
//! it out (`reconcile::execute`), which checks again under the same lock.
//!
//! The preview runs exactly this, with [`Mode::Preview`]: the plan without
//! its waits (backoff, stall, conflict hold, settling, the budget's turn),
//! since a preview says what will be written, not when.

use jiff::Timestamp;

use crate::memory::Memory;
use crate::reconcile::{budget, observe};
use crate::stores::Stores;
use kura_core::api::{KuraInstance, KuraInstanceStatus};
use kura_core::claims::Conflict;
use kura_core::config::OperatorConfig;
use kura_core::plan::{self, BudgetView, Observed, Plan, RetryPolicy, inputs_key};
use kura_core::render::{Desired, render};
use kura_core::storage::{self, PendingStorage};
use kura_core::validate::{ResolvedGateway, ValidatedInstance, ValidationErrors, validate};

/// What the decision is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// This pass of the operator: the plan with its waits.
    Operate,
    /// `kura-operator diff`: what will be written, whenever that is.
    Preview,
}

/// Everything the decision reads, read before it starts.
pub struct Inputs<'a> {
    pub instance: &'a KuraInstance,
    pub config: &'a OperatorConfig,
    /// The caches (the operator's reflectors, or the preview's lists).
    pub stores: &'a Stores,
    /// The status to decide from: the cache's, or the one this process wrote
    /// if the cache has not caught up with it (`Memory::recall`).
    pub status: Option<KuraInstanceStatus>,
    /// The inputs key this process applied within `plan::SETTLE`, if any.
    pub recently_applied: Option<&'a str>,
    /// This process's memory: the budget's admissions not in the cache yet.
    pub memory: &'a Memory,
    pub policy: &'a RetryPolicy,
    pub now: Timestamp,
    pub mode: Mode,
}

/// The decision about one instance.
#[derive(Debug)]
pub struct Decision {
    /// What the cluster shows (with the fleet budget's view of it).
    pub observed: Observed,
    /// Storage the configuration asks for that the live StatefulSet keeps otherwise.
    pub pending_storage: Option<PendingStorage>,
    pub verdict: Verdict,
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

impl Decision {
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
}

pub fn decide(i: &Inputs) -> Decision {
    let mut validated = match validate(i.instance, i.config) {
        Ok(v) => v,
        Err(errors) => {
            // Input nobody can apply asks for no host, so it keeps nobody waiting.
            i.stores.claims.stand_down(i.instance);
            return Decision {
                observed: observe::observe(i.instance, i.status.clone(), None, i.stores),
                pending_storage: None,
                verdict: Verdict::Invalid(errors),
            };
        }
    };
    let live_claim = i.stores.live_claim(&validated.namespace, &validated.name);
    let pending_storage = storage::pin(&mut validated, live_claim.as_ref());
    let desired = render(&validated, i.config);
    let mut observed = observe::observe(i.instance, i.status.clone(), Some(&desired), i.stores);
    let key = inputs_key(&desired.revision, observed.force_token.as_deref());
    observed.just_applied = i.recently_applied == Some(key.as_str());
    // A pause whose end has passed is over.
    observed.paused = kura_core::window::paused(&i.instance.spec, i.now);
    // A paused instance asks for no host (and applies nothing anyway).
    let host_conflict = (!observed.paused)
        .then(|| i.stores.claims.check(i.instance, i.config, i.now).err())
        .flatten();
    observed.budget = match host_conflict {
        // An instance that may apply nothing takes no slot of the budget.
        Some(_) => BudgetView::default(),
        None => budget::view(
            i.instance, &observed, &desired, i.stores, i.memory, i.config, i.now,
        ),
    };
    let plan = match i.mode {
        Mode::Operate => plan::plan(&observed, Ok(&desired), i.policy, i.now),
        Mode::Preview => plan::intent(&observed, Ok(&desired)),
    };
    Decision {
        observed,
        pending_storage,
        verdict: Verdict::Valid(Box::new(Valid {
            validated,
            desired,
            key,
            plan,
            host_conflict,
        })),
    }
}
