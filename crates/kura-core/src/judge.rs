//! The decision of a pass as a value: a pure function of a snapshot read
//! first (what the caches show, the claims index's and the budget's views,
//! what this process remembers, the status to decide from), the retry
//! policy, the clock and the mode, returning the verdict and the effects that
//! carry it out. The operator's executor carries the effects out; it is the
//! only part of a reconcile that writes.
//!
//! - an instance: [`instance::judge_instance`]
//! - a gateway: [`gateway::judge_gateway`]

pub mod gateway;
pub mod instance;

#[cfg(test)]
mod tests;

use std::fmt;

use crate::plan::ApplyOp;
use crate::render::ObjectId;

/// What the decision is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A pass of the operator: the plan with its waits.
    Operate,
    /// `kura-operator diff`: what will be written, whenever that is (the plan
    /// without its waits: backoff, stall, conflict hold, settling, the
    /// budget's turn).
    Preview,
}

/// One thing a decision asks the executor to do, in the order listed. An
/// effect that fails (an apply) or is refused (a slot, a host taken since the
/// decision) ends the list there, before [`Effect::WriteStatus`], which
/// reports what happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Input nobody can apply asks for no host: release the hosts it asked
    /// for, waking those waiting for them.
    StandDown,
    /// Take a slot of the fleet budget: the admission is decided again under
    /// the reservations' lock, since another pass may have taken the slot.
    ReserveSlot,
    /// Take the hosts the instance asks for before its objects are written
    /// (checked again under the reservations' lock).
    ClaimHosts,
    /// Server-side apply these objects, wave by wave (a wave with a failure
    /// ends the apply).
    Apply { waves: Vec<Wave> },
    /// Delete these stale objects (after a successful apply).
    Prune { objects: Vec<ObjectId> },
    /// Give up what the instances' field manager still holds of these objects
    /// (a gateway's children of an earlier release).
    Release { objects: Vec<ObjectId> },
    /// Delete the gateway: nothing of its namespace uses it.
    Collect,
    /// Compute the status of what happened and write it when worth a write,
    /// with the Events of the transition; a slot of the budget it frees wakes
    /// the next in line.
    WriteStatus,
}

/// The objects of one apply wave (`ChildKind::wave`).
#[derive(Clone, Debug, PartialEq)]
pub struct Wave {
    pub wave: u8,
    pub ops: Vec<ApplyOp>,
}

/// `ops` in their waves, the first wave first.
pub fn waves(ops: &[ApplyOp]) -> Vec<Wave> {
    let mut numbers: Vec<u8> = ops.iter().map(|op| op.id.kind.wave()).collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
        .into_iter()
        .map(|wave| Wave {
            wave,
            ops: ops
                .iter()
                .filter(|op| op.id.kind.wave() == wave)
                .cloned()
                .collect(),
        })
        .collect()
}

/// Every op of `waves`, the first wave first.
pub fn ops(waves: &[Wave]) -> Vec<ApplyOp> {
    waves.iter().flat_map(|w| w.ops.iter().cloned()).collect()
}

/// A short line per effect (`kura-operator diff` shows them).
impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |ids: &mut dyn Iterator<Item = &ObjectId>| {
            ids.map(ToString::to_string).collect::<Vec<_>>().join(", ")
        };
        match self {
            Effect::StandDown => write!(f, "stand down: release the hosts asked for"),
            Effect::ReserveSlot => write!(f, "reserve a slot of the rollout budget"),
            Effect::ClaimHosts => write!(f, "claim the hosts"),
            Effect::Apply { waves } => {
                let shown: Vec<String> = waves
                    .iter()
                    .map(|w| {
                        format!(
                            "wave {}: {}",
                            w.wave,
                            names(&mut w.ops.iter().map(|op| &op.id))
                        )
                    })
                    .collect();
                write!(f, "apply {}", shown.join("; "))
            }
            Effect::Prune { objects } => write!(f, "prune {}", names(&mut objects.iter())),
            Effect::Release { objects } => write!(f, "release {}", names(&mut objects.iter())),
            Effect::Collect => write!(f, "delete the gateway"),
            Effect::WriteStatus => write!(f, "write status and its Events"),
        }
    }
}
