//! The fleet budget for changes the operator originates.
//!
//! A new operator configuration or release can give every instance a new pod
//! template at the same moment; left alone, every StatefulSet of the fleet
//! would restart its pods within seconds (docs/incidents.md #4 at fleet scale). So
//! such changes roll through a budget, and nothing else waits:
//!
//! - **Origin.** A new desired revision is the user's when the spec's
//!   generation moved since the last apply, or a force token is new; otherwise
//!   it is the operator's (configuration or renderer).
//! - **What waits.** Only an operator-originated revision that changes the pod
//!   template of a running StatefulSet. A user change, a force token, a change
//!   that restarts no pod, and drift repair are never held.
//! - **The budget.** `rollout.maxUnavailable` (a count, or a percentage of the
//!   instances in scope, rounded down, at least 1) bounds the instances that
//!   served (every pod of its workload available) when admitted and whose
//!   workload is not available again on the admitted revision. An instance
//!   whose pods do not all serve takes the change at once and does not count:
//!   it cannot become less available, and the change may be its fix
//!   (docs/incidents.md #1). Serving is read from the StatefulSet, never from
//!   the Ready condition: an instance not Ready only because its Ingress has
//!   no address still serves from its pods.
//! - **Order.** An instance first joins the queue (its record says it
//!   waits, since when), then is admitted in a stable order: those with the
//!   canary label first, then by namespace and name. The queue is whatever
//!   waiting records the cache shows, so an instance reconciled later joins
//!   behind those already waiting that come before it.
//! - **Halt.** An instance admitted while it served and not Ready within
//!   `rollout.progressDeadline` stops further admissions of that operator
//!   revision; a newer one (a corrected configuration or release) ends the
//!   halt by itself. One that did not serve when admitted never halts anyone.
//! - **Maintenance windows.** Each instance may keep a weekly window
//!   (`crate::window`): outside it, its change waits for the opening (or the
//!   configuration's deadline) before it joins the queue; inside it, the
//!   budget decides as above. Only the admission waits: an instance admitted
//!   before its window closed rolls out to the end.
//! - **Out of it.** A paused instance, one being deleted, and one whose
//!   spec is invalid or whose host is another's hold no slot and halt
//!   nothing; their records are dropped.
//! - **Records are the operator's.** A record counts only when it is of the
//!   operator revision in force and the operator wrote it: status is anyone's
//!   to write, and the apiserver's managedFields say who wrote what
//!   (`crate::status_trust`).
//! - **No memory.** Every instance records its own state in
//!   `status.rollout` (waiting since, admitted at, whether it was Ready), and
//!   the budget is computed from those records in the cache: it holds across
//!   restarts, kill -9 and leader changes. An admission is written before the
//!   apply it allows, so a crash in between never under-counts.
//!
//! Everything here is pure.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::api::Origin;
use crate::api::{RolloutState, RolloutStatus};
use crate::time::{later, recorded_time};
pub use crate::window::{Gate, WindowWait};

/// `rollout.maxUnavailable`: a count, or a percentage such as `25%`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxUnavailable {
    Count(u32),
    Percent(String),
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable::Percent("25%".into())
    }
}

impl MaxUnavailable {
    /// The percentage, if this is one and well-formed (0 to 100).
    pub fn percent(&self) -> Option<u32> {
        match self {
            MaxUnavailable::Percent(p) => p
                .strip_suffix('%')
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n <= 100),
            MaxUnavailable::Count(_) => None,
        }
    }

    /// The bound for a fleet of `total` instances: a percentage rounds down,
    /// and it is never below one, so a small fleet still makes progress.
    pub fn resolve(&self, total: usize) -> usize {
        let n = match self {
            MaxUnavailable::Count(n) => *n as usize,
            MaxUnavailable::Percent(_) => {
                total.saturating_mul(self.percent().unwrap_or(25) as usize) / 100
            }
        };
        n.max(1)
    }
}

/// The operator configuration's `rollout` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutConfig {
    #[serde(default)]
    pub max_unavailable: MaxUnavailable,
    /// How long an admitted instance has to be Ready again, e.g. `10m`.
    #[serde(default = "default_deadline")]
    pub progress_deadline: String,
    /// Instances with this label set to `"true"` are admitted first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_label: Option<String>,
    /// A change waits for no maintenance window past this (`crate::window`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_deadline: Option<crate::window::WindowDeadline>,
}

fn default_deadline() -> String {
    "10m".into()
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            max_unavailable: MaxUnavailable::default(),
            progress_deadline: default_deadline(),
            canary_label: None,
            window_deadline: None,
        }
    }
}

impl RolloutConfig {
    pub fn deadline(&self) -> Duration {
        crate::time::parse_duration(&self.progress_deadline).unwrap_or(Duration::from_secs(600))
    }
}

/// What the budget needs to know about one instance, from the caches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub key: OrderKey,
    /// Its Ready condition: whether an admitted rollout failed.
    pub ready: bool,
    /// Its workload's pods all serve now (from the StatefulSet, not from the
    /// Ready condition: an instance whose Ingress has no address still
    /// serves from its pods, and a restart takes that away).
    pub serving: bool,
    /// Paused or being deleted: it holds no slot, waits in no queue and fails
    /// no rollout, whatever its record says.
    pub out: bool,
    /// Its record, if the operator wrote it (`status_trust`).
    pub rollout: Option<RolloutStatus>,
    /// Its maintenance window and deadline: closed, it is not in line.
    pub gate: Gate,
}

/// The admission order: canaries first, then namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OrderKey {
    /// `false` sorts first: a canary.
    pub not_canary: bool,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for OrderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The fleet as the budget sees it, for one operator revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fleet {
    /// Instances in scope.
    pub total: usize,
    /// Admitted while Ready, and not Ready again on the new revision (their
    /// records are cleared then): what the budget bounds.
    pub in_flight: Vec<OrderKey>,
    /// Waiting for the budget on this operator revision, Ready, in order.
    pub queue: Vec<OrderKey>,
    /// Admitted on this operator revision and not Ready within the deadline.
    pub failed: Vec<OrderKey>,
}

impl Fleet {
    /// Count `key` as admitted, though the cache may not show it yet: in
    /// flight, and no longer in line. Counted as both, it would take two slots
    /// and hold back the next in line (seen on the real plane: the third of a
    /// budget of three was kept waiting until the first two failed, and the
    /// halt then held it for good).
    pub fn count_admitted(&mut self, key: &OrderKey) {
        if !self.in_flight.contains(key) {
            self.in_flight.push(key.clone());
        }
        self.queue.retain(|k| k != key);
    }
}

/// Whether an admitted record's deadline has passed at `now`.
pub fn past_deadline(r: &RolloutStatus, deadline: Duration, now: Timestamp) -> bool {
    recorded_time(&r.since, now).is_some_and(|since| later(since, deadline) <= now)
}

pub fn fleet(
    members: impl IntoIterator<Item = Member>,
    fleet_revision: &str,
    deadline: Duration,
    now: Timestamp,
) -> Fleet {
    let mut f = Fleet::default();
    for m in members {
        f.total += 1;
        // A record of another operator revision is over: the instance's own
        // reconcile replaces it (and a forged one holds nobody).
        let Some(r) = m
            .rollout
            .as_ref()
            .filter(|r| r.fleet_revision == fleet_revision)
        else {
            continue;
        };
        if m.out {
            continue;
        }
        match r.state {
            // Counted from admission (before its pods restart) until its
            // record is cleared, its pods serving again on the admitted
            // revision; only an instance that served when admitted counts,
            // and only its failure halts the rollout: one that never served
            // says nothing about the change.
            RolloutState::Admitted if r.was_ready => {
                f.in_flight.push(m.key.clone());
                if !m.ready && past_deadline(r, deadline, now) {
                    f.failed.push(m.key);
                }
            }
            // Waiting for its window is not being in line: it would hold a
            // place before the others that it cannot take.
            RolloutState::Waiting if m.serving && !matches!(m.gate, Gate::Closed(_)) => {
                f.queue.push(m.key)
            }
            _ => {}
        }
    }
    f.in_flight.sort();
    f.queue.sort();
    f.failed.sort();
    f
}

/// The budget's answer for one instance that has an operator-originated
/// change of its pod template to take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Take it now. `counted`: the instance is Ready, so its rollout counts
    /// against the budget until it is Ready again.
    Admit { counted: bool },
    /// Wait for the budget: `ahead` instances go first, `in_flight` are
    /// rolling out of a budget of `budget`.
    Wait {
        ahead: usize,
        in_flight: Vec<OrderKey>,
        budget: usize,
    },
    /// The rollout of this operator revision failed on these instances.
    Halted { failed: Vec<OrderKey> },
    /// Outside the instance's maintenance window: it waits for the opening
    /// (or the deadline) before it joins the queue.
    Window(Box<WindowWait>),
}

pub fn admit(me: &Member, fleet: &Fleet, max_unavailable: &MaxUnavailable) -> Admission {
    // Only an instance whose pods do not all serve already may go first
    // uncounted: a restart cannot make it less available, and the change may
    // be its fix (docs/incidents.md #1).
    if !me.serving {
        return Admission::Admit { counted: false };
    }
    if let Gate::Closed(wait) = &me.gate {
        return Admission::Window(Box::new(wait.clone()));
    }
    if !fleet.failed.is_empty() {
        return Admission::Halted {
            failed: fleet.failed.clone(),
        };
    }
    let budget = max_unavailable.resolve(fleet.total);
    let slots = budget.saturating_sub(fleet.in_flight.len());
    // Those before me in order, whether or not my own record is in the queue yet.
    let ahead = fleet.queue.iter().filter(|k| **k < me.key).count();
    // Not in the queue yet: join it first (the others reconciled at the same
    // moment join too, so the order is the queue's, not the race's).
    let queued = fleet.queue.contains(&me.key);
    if queued && ahead < slots {
        Admission::Admit { counted: true }
    } else {
        Admission::Wait {
            ahead,
            in_flight: fleet.in_flight.clone(),
            budget,
        }
    }
}

/// The waiting instances that may go now (the first free slots of the queue):
/// woken when an instance leaves the budget.
pub fn next_in_line(fleet: &Fleet, max_unavailable: &MaxUnavailable) -> Vec<OrderKey> {
    if !fleet.failed.is_empty() {
        return Vec::new();
    }
    let slots = max_unavailable
        .resolve(fleet.total)
        .saturating_sub(fleet.in_flight.len());
    fleet.queue.iter().take(slots).cloned().collect()
}

/// A record for `state` of `revision` (of operator revision `fleet_revision`) from `now`.
pub fn record(
    state: RolloutState,
    fleet_revision: &str,
    revision: &str,
    was_ready: bool,
    now: Timestamp,
) -> RolloutStatus {
    RolloutStatus {
        state,
        fleet_revision: fleet_revision.to_string(),
        revision: revision.to_string(),
        since: now.to_string(),
        was_ready,
    }
}

pub mod progress;

#[cfg(test)]
mod tests;
