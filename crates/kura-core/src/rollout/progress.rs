//! Where a fleet change stands (`kura-operator rollout status`), read only
//! from what the operator reports: each instance's `status` (phase,
//! conditions, revisions, its rollout record) and whether that status is of
//! the spec in force (`metadata.generation` against
//! `status.observedGeneration`). Nothing here guesses from the children.
//!
//! The verdict over the instances in scope:
//!
//! - **Done** (exit 0): every instance runs its desired revision and is
//!   Ready. A paused instance is left out, as the budget leaves it out: it
//!   takes nothing until it is resumed, so waiting for it would never end;
//!   it is counted and named.
//! - **Halted** (exit 1): an instance failed (Stalled, or admitted and not
//!   Ready within the progress deadline), is invalid (a configuration can
//!   make an instance invalid, and it takes no revision until corrected), or
//!   waits on a halted rollout. The failed and invalid ones are named: they
//!   hold it.
//! - **In progress** (exit 2 when the wait is over: without `--watch`, or at
//!   `--timeout`): anything else.
//!
//! Everything here is pure.

use std::fmt::Write as _;

use jiff::Timestamp;

use crate::api::conditions::{self, READY, ROLLOUT_FAILED, ROLLOUT_HELD, STALLED, VALID};
use crate::api::{ConditionStatus, KuraInstanceStatus, Phase, RolloutState};

/// Where one instance stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Progress {
    /// Runs its desired revision and is Ready.
    Done,
    /// Its status is of an older spec (or it has none yet): whatever it
    /// says, the operator has not reported on this spec.
    NotObserved,
    /// Admitted to the rollout, or applying, activating, retrying.
    InProgress,
    /// Waiting for the fleet's rollout budget.
    WaitingForBudget,
    /// Waiting for its maintenance window to open.
    WaitingForWindow,
    Paused,
    /// Waiting on a rollout halted by another instance's failure.
    Held,
    /// Stalled, or admitted and not Ready within the progress deadline.
    Failed,
    /// Its spec or the configuration is invalid for it.
    Invalid,
}

impl Progress {
    /// How it is named in lists and counts.
    pub fn label(self) -> &'static str {
        match self {
            Progress::Done => "done",
            Progress::NotObserved => "not yet observed",
            Progress::InProgress => "in progress",
            Progress::WaitingForBudget => "waiting for the budget",
            Progress::WaitingForWindow => "waiting for a maintenance window",
            Progress::Paused => "paused",
            Progress::Held => "held",
            Progress::Failed => "failed",
            Progress::Invalid => "invalid",
        }
    }
}

/// One instance's place in the change, from its generation and its status.
pub fn classify(generation: Option<i64>, status: Option<&KuraInstanceStatus>) -> Progress {
    let Some(s) = status else {
        return Progress::NotObserved;
    };
    // A status older than the spec says nothing about the spec in force.
    // Without a generation (never from an apiserver) only the status can say.
    match (generation, s.observed_generation) {
        (Some(_), None) => return Progress::NotObserved,
        (Some(g), Some(seen)) if seen < g => return Progress::NotObserved,
        _ => {}
    }
    let is_true = |type_| conditions::is_true(&s.conditions, type_);
    if s.phase == Some(Phase::Paused) {
        return Progress::Paused;
    }
    let invalid =
        conditions::find(&s.conditions, VALID).is_some_and(|c| c.status == ConditionStatus::False);
    if s.phase == Some(Phase::Invalid) || invalid {
        return Progress::Invalid;
    }
    if s.phase == Some(Phase::Stalled) || is_true(STALLED) {
        return Progress::Failed;
    }
    if let Some(record) = &s.rollout {
        return match record.state {
            RolloutState::Admitted if is_true(ROLLOUT_FAILED) => Progress::Failed,
            // Until the operator clears the record, its pods serving again.
            RolloutState::Admitted => Progress::InProgress,
            RolloutState::Waiting => match conditions::find(&s.conditions, ROLLOUT_HELD) {
                Some(c) if c.reason == "RolloutHalted" => Progress::Held,
                Some(c) if c.reason == "WaitingForWindow" => Progress::WaitingForWindow,
                _ => Progress::WaitingForBudget,
            },
        };
    }
    let on_desired = s.desired_revision.is_some() && s.applied_revision == s.desired_revision;
    if on_desired && is_true(READY) {
        Progress::Done
    } else {
        Progress::InProgress
    }
}

/// What `summarize` needs of one instance.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// `namespace/name`.
    pub key: &'a str,
    pub generation: Option<i64>,
    pub status: Option<&'a KuraInstanceStatus>,
}

/// How many instances stand where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counts {
    pub total: usize,
    pub done: usize,
    /// In progress, and not yet observed.
    pub in_progress: usize,
    pub waiting_for_budget: usize,
    pub waiting_for_window: usize,
    pub paused: usize,
    pub held: usize,
    pub failed: usize,
    pub invalid: usize,
}

impl Counts {
    fn add(&mut self, p: Progress) {
        self.total += 1;
        *match p {
            Progress::Done => &mut self.done,
            Progress::NotObserved | Progress::InProgress => &mut self.in_progress,
            Progress::WaitingForBudget => &mut self.waiting_for_budget,
            Progress::WaitingForWindow => &mut self.waiting_for_window,
            Progress::Paused => &mut self.paused,
            Progress::Held => &mut self.held,
            Progress::Failed => &mut self.failed,
            Progress::Invalid => &mut self.invalid,
        } += 1;
    }

    /// The counts besides `done`, labelled, in a fixed order.
    fn others(&self) -> [(&'static str, usize); 7] {
        [
            ("in progress", self.in_progress),
            ("waiting for budget", self.waiting_for_budget),
            ("waiting for window", self.waiting_for_window),
            ("paused", self.paused),
            ("held", self.held),
            ("failed", self.failed),
            ("invalid", self.invalid),
        ]
    }
}

/// The fleet change over the instances in scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub counts: Counts,
    /// The operator revision of the newest rollout record: the one the
    /// operator writes records for now. None when no instance has a record
    /// (no change of the operator's is rolling, or it is over).
    pub fleet_revision: Option<String>,
    /// Every instance not done, sorted by key, with where it stands.
    pub not_done: Vec<(String, Progress)>,
}

/// Whether the change is over, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every instance is done (paused ones aside).
    Done,
    /// Failed or invalid instances hold the change: `holding` names them.
    /// When none is in scope, the held ones are named and `outside` says the
    /// failure that holds them is elsewhere.
    Halted {
        holding: Vec<(String, Progress)>,
        outside: bool,
    },
    /// Instances are still on their way.
    InProgress,
}

impl Verdict {
    /// The exit code of `rollout status` when the wait is over.
    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Done => 0,
            Verdict::Halted { .. } => 1,
            Verdict::InProgress => 2,
        }
    }
}

pub fn summarize<'a>(instances: impl IntoIterator<Item = Seen<'a>>) -> Summary {
    let mut summary = Summary::default();
    let mut newest: Option<(Timestamp, &str)> = None;
    for i in instances {
        let p = classify(i.generation, i.status);
        summary.counts.add(p);
        if p != Progress::Done {
            summary.not_done.push((i.key.to_string(), p));
        }
        let record = i.status.and_then(|s| s.rollout.as_ref());
        if let Some((r, since)) = record.and_then(|r| Some((r, r.since.parse::<Timestamp>().ok()?)))
            && newest.is_none_or(|(t, _)| since > t)
        {
            newest = Some((since, &r.fleet_revision));
        }
    }
    summary.not_done.sort();
    summary.fleet_revision = newest.map(|(_, f)| f.to_string());
    summary
}

impl Summary {
    pub fn verdict(&self) -> Verdict {
        let with = |wanted: &[Progress]| -> Vec<(String, Progress)> {
            self.not_done
                .iter()
                .filter(|(_, p)| wanted.contains(p))
                .cloned()
                .collect()
        };
        let holding = with(&[Progress::Failed, Progress::Invalid]);
        if !holding.is_empty() {
            return Verdict::Halted {
                holding,
                outside: false,
            };
        }
        let held = with(&[Progress::Held]);
        if !held.is_empty() {
            return Verdict::Halted {
                holding: held,
                outside: true,
            };
        }
        if self.not_done.iter().all(|(_, p)| *p == Progress::Paused) {
            Verdict::Done
        } else {
            Verdict::InProgress
        }
    }

    /// The instances that keep the change from being done (paused ones are
    /// left out), with where they stand.
    pub fn pending(&self) -> Vec<(String, Progress)> {
        self.not_done
            .iter()
            .filter(|(_, p)| *p != Progress::Paused)
            .cloned()
            .collect()
    }

    /// The paused instances.
    pub fn paused(&self) -> Vec<&str> {
        self.not_done
            .iter()
            .filter(|(_, p)| *p == Progress::Paused)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// One line with every count, e.g. `fleet revision 0123abcd: done 7/10,
    /// in progress 2, waiting for budget 1, ...`: what a pipe gets.
    pub fn line(&self) -> String {
        let c = &self.counts;
        let mut out = format!("{}: done {}/{}", self.revision_label(), c.done, c.total);
        for (label, n) in c.others() {
            let _ = write!(out, ", {label} {n}");
        }
        out
    }

    /// A progress bar of `width` cells and the counts that are not zero,
    /// e.g. `[######------] 5/10 done | in progress 3 | held 2 | fleet
    /// revision 0123abcd`: what a
    /// terminal shows, redrawn in place.
    pub fn bar(&self, width: usize) -> String {
        let c = &self.counts;
        // No instance: nothing left to do, a full bar.
        let filled = (c.done * width).checked_div(c.total).unwrap_or(width);
        let mut out = format!(
            "[{}{}] {}/{} done",
            "#".repeat(filled),
            "-".repeat(width - filled),
            c.done,
            c.total
        );
        for (label, n) in c.others().into_iter().filter(|(_, n)| *n > 0) {
            let _ = write!(out, " | {label} {n}");
        }
        let _ = write!(out, " | {}", self.revision_label());
        out
    }

    /// `-` when no instance carries a rollout record.
    fn revision_label(&self) -> String {
        format!(
            "fleet revision {}",
            self.fleet_revision.as_deref().unwrap_or("-")
        )
    }

    /// The last line: what the verdict means, naming who holds the change or
    /// (`timed_out`) who is not done yet.
    pub fn conclusion(&self, verdict: &Verdict, timed_out: bool) -> String {
        let c = &self.counts;
        let paused = self.paused();
        let left_out = if paused.is_empty() {
            String::new()
        } else {
            format!("; paused, left out: {}", names(paused.iter().copied()))
        };
        match verdict {
            Verdict::Done => format!(
                "rollout complete: {}/{} instances done{left_out}",
                c.done, c.total
            ),
            Verdict::Halted { holding, outside } => {
                let listed = names(holding.iter().map(|(k, p)| format!("{k} ({})", p.label())));
                if *outside {
                    format!(
                        "rollout halted: {listed} wait on instances that failed outside this scope"
                    )
                } else {
                    format!("rollout halted: held by {listed}")
                }
            }
            Verdict::InProgress => {
                let pending = self.pending();
                let listed = names(pending.iter().map(|(k, p)| format!("{k} ({})", p.label())));
                if timed_out {
                    format!("timed out: not done: {listed}")
                } else {
                    format!("rollout in progress: not done: {listed}")
                }
            }
        }
    }
}

/// At most this many names in a line; the rest are counted.
pub const NAMED: usize = 10;

/// `a, b, c`, or the first [`NAMED`] and `and N more`.
pub fn names<S: AsRef<str>>(all: impl IntoIterator<Item = S>) -> String {
    let mut shown = Vec::new();
    let mut more = 0usize;
    for n in all {
        if shown.len() < NAMED {
            shown.push(n.as_ref().to_string());
        } else {
            more += 1;
        }
    }
    let mut out = shown.join(", ");
    if more > 0 {
        let _ = write!(out, " and {more} more");
    }
    out
}

#[cfg(test)]
mod tests;
