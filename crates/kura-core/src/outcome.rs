//! What a reconcile did, as values: the one place status, Events and metrics
//! read it from. The operator's I/O fills these in (a failed request becomes a
//! `Failure`, a prune a `PruneOutcome`); status computation reads them.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::api::InventoryEntry;
use crate::plan::ApplyReason;
use crate::render::ObjectId;
use crate::rollout::Admission;
use crate::validate::ValidationErrors;

/// Where a reconcile failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Apply,
    Prune,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Throttling, a server error (a webhook whose service is down answers
    /// 500), the apiserver out of reach: says nothing about the input.
    Transient,
    /// The apiserver, a webhook or an admission policy refused the request.
    Rejected,
    /// An object of the name exists and is not this instance's.
    NameConflict,
}

/// One failed request, with everything a user needs to act on it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{verb} {object}: {message}")]
pub struct Failure {
    pub stage: Stage,
    pub class: FailureClass,
    pub object: String,
    pub verb: &'static str,
    /// The HTTP status of the apiserver's answer, when it answered.
    pub code: Option<u16>,
    pub message: String,
}

impl Failure {
    pub fn is_transient(&self) -> bool {
        self.class == FailureClass::Transient
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    pub deleted: Vec<String>,
    /// Stale objects left in place on purpose, with why (not ours, still used).
    pub kept: Vec<String>,
    /// Stale objects still there because their deletion failed: they stay in
    /// the inventory until a later prune gets them.
    pub remaining: Vec<ObjectId>,
    /// The first failure, if any.
    pub failure: Option<Failure>,
}

/// Transient failures (throttling, a 5xx, the apiserver out of reach) of the
/// same inputs in a row. They are retried quickly and kept out of status until
/// the streak is old enough to be news.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransientStreak {
    pub inputs_key: String,
    pub failures: u32,
    /// When the first failure of the streak happened (wall clock, for status;
    /// the monotonic one decides).
    pub since: Timestamp,
    started: Instant,
}

impl TransientStreak {
    /// The first failure of a streak of `inputs_key`, at `now`.
    pub fn start(inputs_key: &str, now: Timestamp) -> TransientStreak {
        TransientStreak {
            inputs_key: inputs_key.to_string(),
            failures: 1,
            since: now,
            started: Instant::now(),
        }
    }

    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The reason of an activation whose workload is available on the revision
/// and whose Ingress has no address yet.
pub const INGRESS_NO_ADDRESS: &str = "IngressNoAddress";

/// The reason of an activation whose workload is available, whose Ingress
/// has an address, and whose endpoint does not answer there (`crate::endpoint`).
pub const ENDPOINT_NOT_ANSWERING: &str = "EndpointNotAnswering";

/// The reason of an activation like [`ENDPOINT_NOT_ANSWERING`]'s whose
/// endpoint has not been asked yet: its first check is still running (it
/// runs beside the reconcile, which does not wait for a slow one).
pub const ENDPOINT_CHECKING: &str = "EndpointChecking";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activation {
    Active {
        endpoint: String,
    },
    Waiting {
        reason: &'static str,
        message: String,
    },
}

impl Activation {
    /// The workload is available on the applied revision (whatever its
    /// Ingresses say): an operator-originated rollout of it is done.
    pub fn workload_available(&self) -> bool {
        match self {
            Activation::Active { .. } => true,
            Activation::Waiting { reason, .. } => [
                INGRESS_NO_ADDRESS,
                ENDPOINT_NOT_ANSWERING,
                ENDPOINT_CHECKING,
            ]
            .contains(reason),
        }
    }
}

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
