//! What `diff` prints: per instance, the revision change and each object
//! written or deleted; a one-line summary; the exit code (as `kubectl diff`'s:
//! 0 nothing to change, 1 changes).

use std::fmt::Write as _;

use serde::Serialize;

use super::{Action, InstanceDiff, State};
use kura_core::render::hash::short;
use kura_core::rollout::RolloutConfig;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub instances: usize,
    /// Instances with objects to write or delete.
    pub changing: usize,
    /// Instances whose pods would restart.
    pub pod_restarts: usize,
    /// Objects created or updated.
    pub objects_written: usize,
    /// Of those, created.
    pub objects_created: usize,
    pub objects_pruned: usize,
    pub invalid: usize,
    pub name_conflicts: usize,
    pub host_conflicts: usize,
    pub paused: usize,
    /// Instances waiting for objects of theirs being deleted.
    pub terminating: usize,
    /// Of the pod restarts, those the fleet budget paces (`waitsForBudget`).
    pub waiting_for_budget: usize,
    /// How many of those may be in rollout at a time: `rollout.maxUnavailable`
    /// of the instances read (the operator counts those in its scope).
    pub budget: usize,
    /// The waves the budget makes of them, when each wave's instances become
    /// Ready again within the progress deadline. The rest restart at once.
    pub waves: usize,
    /// Of the pod restarts, those waiting for a maintenance window (`waitsForWindow`).
    #[serde(skip_serializing_if = "is_zero")]
    pub waiting_for_window: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub summary: Summary,
    pub instances: Vec<InstanceDiff>,
    /// What the preview could not see as the operator does (say, the fleet
    /// of other namespaces, when it may not list them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// Instances in (namespace, name) order.
    pub fn new(mut instances: Vec<InstanceDiff>) -> Report {
        instances.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let count = |state: State| instances.iter().filter(|i| i.state == state).count();
        let summary = Summary {
            instances: instances.len(),
            changing: count(State::Changes),
            pod_restarts: instances.iter().filter(|i| i.pod_restart).count(),
            objects_written: instances.iter().map(|i| i.written().count()).sum(),
            objects_created: instances
                .iter()
                .flat_map(|i| i.written())
                .filter(|o| o.action == Action::Create)
                .count(),
            objects_pruned: instances.iter().map(|i| i.pruned().count()).sum(),
            invalid: count(State::Invalid),
            name_conflicts: count(State::NameConflict),
            host_conflicts: count(State::HostConflict),
            paused: count(State::Paused),
            terminating: count(State::ChildTerminating),
            waiting_for_window: instances
                .iter()
                .filter(|i| i.waits_for_window.is_some())
                .count(),
            ..Summary::default()
        };
        Report {
            summary,
            instances,
            notes: Vec::new(),
        }
    }

    /// The budget's waves under `rollout`, for a fleet of `fleet` instances
    /// (every namespace's, as the operator counts them) at rest: the instances
    /// shown whose restart the budget paces go `budget` at a time, in its order.
    pub fn with_budget(mut self, rollout: &RolloutConfig, fleet: usize) -> Report {
        let s = &mut self.summary;
        if kura_core::budget::never_binds(&rollout.max_unavailable, fleet) {
            for i in &mut self.instances {
                i.waits_for_budget = false;
            }
        }
        s.waiting_for_budget = self.instances.iter().filter(|i| i.waits_for_budget).count();
        s.budget = rollout.max_unavailable.resolve(fleet);
        s.waves = s.waiting_for_budget.div_ceil(s.budget);
        self
    }

    /// 1 when something would change, or an instance would not be applied at
    /// all (invalid, a name conflict, objects being deleted): each needs a look
    /// before a rollout.
    /// A paused instance is the user's choice, not a difference.
    pub fn exit_code(&self) -> u8 {
        let s = &self.summary;
        u8::from(s.changing + s.invalid + s.name_conflicts + s.host_conflicts + s.terminating > 0)
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises") + "\n"
    }

    /// Every instance that is not unchanged, then the summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for i in self
            .instances
            .iter()
            .filter(|i| i.state != State::Unchanged)
        {
            instance_text(i, &mut out);
        }
        out.push_str(&self.summary_line());
        out.push('\n');
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }

    pub fn with_notes(mut self, notes: Vec<String>) -> Report {
        self.notes = notes;
        self
    }

    pub fn summary_line(&self) -> String {
        let s = &self.summary;
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut line = format!(
            "{}: {} changing, {}, {} written ({} created), {} pruned",
            plural(s.instances, "instance", "instances"),
            s.changing,
            plural(s.pod_restarts, "pod restart", "pod restarts"),
            plural(s.objects_written, "object", "objects"),
            s.objects_created,
            s.objects_pruned,
        );
        if s.waiting_for_budget > 0 {
            let _ = write!(
                line,
                "; {} paced by the fleet budget, {} at a time: {}",
                s.waiting_for_budget,
                s.budget,
                plural(s.waves, "wave", "waves"),
            );
        }
        for (n, what) in [
            (s.waiting_for_window, "waiting for a maintenance window"),
            (s.invalid, "invalid"),
            (s.name_conflicts, "with a name conflict"),
            (s.host_conflicts, "with a host conflict"),
            (s.paused, "paused"),
            (s.terminating, "waiting for objects being deleted"),
        ] {
            if n > 0 {
                let _ = write!(line, "; {n} {what}");
            }
        }
        line
    }
}

fn revision(r: Option<&String>) -> String {
    r.map_or_else(|| "(none)".into(), |r| short(r))
}

fn instance_text(i: &InstanceDiff, out: &mut String) {
    let head = format!("{}/{}", i.namespace, i.name);
    let _ = match i.state {
        State::Changes => writeln!(
            out,
            "{head}: {} -> {}{}",
            revision(i.applied_revision.as_ref()),
            revision(i.desired_revision.as_ref()),
            match (&i.waits_for_window, i.pod_restart, i.waits_for_budget) {
                (Some(w), _, _) => format!(
                    ", pods restart at {} at the earliest (waits for the maintenance window {}, {}{})",
                    w.goes_at,
                    w.window,
                    w.source,
                    w.deadline
                        .as_ref()
                        .map(|d| format!("; deadline {d}"))
                        .unwrap_or_default()
                ),
                (None, true, true) => ", pods restart (paced by the fleet budget)".into(),
                (None, true, false) => ", pods restart".into(),
                _ => String::new(),
            }
        ),
        State::HostConflict => writeln!(out, "{head}: host conflict, nothing applied"),
        State::Invalid => writeln!(out, "{head}: invalid, nothing applied"),
        State::NameConflict => writeln!(out, "{head}: name conflict, nothing applied"),
        State::Paused => match &i.paused {
            Some(why) => writeln!(out, "{head}: paused, nothing applied: {why}"),
            None => writeln!(out, "{head}: paused, nothing applied"),
        },
        State::ChildTerminating => writeln!(
            out,
            "{head}: objects being deleted, nothing applied until they are gone"
        ),
        State::Unchanged => Ok(()),
    };
    for p in &i.problems {
        let _ = writeln!(out, "  {p}");
    }
    for o in &i.objects {
        let _ = writeln!(
            out,
            "  {} {} {}: {}",
            o.action.sign(),
            o.kind,
            o.name,
            o.why
        );
        if let Some(diff) = &o.diff {
            for line in diff.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    for k in &i.kept {
        let _ = writeln!(out, "  = kept {k}");
    }
    if let Some(s) = &i.storage_pending {
        let _ = writeln!(out, "  storage: {s}");
    }
    for e in &i.effects {
        let _ = writeln!(out, "  > {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::{ObjectChange, Problem};
    use kura_core::kind::ChildKind;

    fn instance(name: &str, state: State, objects: Vec<ObjectChange>) -> InstanceDiff {
        InstanceDiff {
            namespace: "ns".into(),
            name: name.into(),
            state,
            applied_revision: Some("a".repeat(64)),
            desired_revision: Some("b".repeat(64)),
            reasons: Vec::new(),
            objects,
            pod_restart: false,
            waits_for_budget: false,
            waits_for_window: None,
            paused: None,
            problems: Vec::new(),
            kept: Vec::new(),
            storage_pending: None,
            held_by: Vec::new(),
            effects: Vec::new(),
        }
    }

    fn change(action: Action, kind: ChildKind, name: &str) -> ObjectChange {
        ObjectChange {
            action,
            kind,
            namespace: Some("ns".into()),
            name: name.into(),
            why: "content changed".into(),
            diff: None,
        }
    }

    #[test]
    fn a_converged_fleet_prints_the_summary_only_and_exits_0() {
        let report = Report::new(vec![
            instance("b", State::Unchanged, vec![]),
            instance("a", State::Unchanged, vec![]),
        ]);
        assert_eq!(
            report.text(),
            "2 instances: 0 changing, 0 pod restarts, 0 objects written (0 created), 0 pruned\n"
        );
        assert_eq!(report.exit_code(), 0);
        // A paused instance is no difference either.
        let report = Report::new(vec![instance("p", State::Paused, vec![])]);
        assert_eq!(report.exit_code(), 0);
    }

    #[test]
    fn changes_are_counted_listed_and_exit_1() {
        let mut a = instance(
            "a",
            State::Changes,
            vec![
                change(Action::Update, ChildKind::StatefulSet, "a"),
                change(Action::Create, ChildKind::Ingress, "a-alias-0"),
                change(Action::Prune, ChildKind::KuraGateway, "gw-a"),
            ],
        );
        a.pod_restart = true;
        let mut bad = instance("bad", State::Invalid, vec![]);
        bad.problems.push(Problem {
            field: Some("spec.region".into()),
            message: "region \"mars\" is not configured".into(),
        });
        let report = Report::new(vec![bad, a, instance("c", State::Unchanged, vec![])]);
        assert_eq!(
            report.summary,
            Summary {
                instances: 3,
                changing: 1,
                pod_restarts: 1,
                objects_written: 2,
                objects_created: 1,
                objects_pruned: 1,
                invalid: 1,
                ..Summary::default()
            }
        );
        assert_eq!(report.exit_code(), 1);
        let text = report.text();
        assert_eq!(
            text,
            "ns/a: aaaaaaaaaaaa -> bbbbbbbbbbbb, pods restart\n\
             \x20 ~ StatefulSet a: content changed\n\
             \x20 + Ingress a-alias-0: content changed\n\
             \x20 - KuraGateway gw-a: content changed\n\
             ns/bad: invalid, nothing applied\n\
             \x20 spec.region: region \"mars\" is not configured\n\
             3 instances: 1 changing, 1 pod restart, 2 objects written (1 created), 1 pruned; 1 invalid\n"
        );
    }

    #[test]
    fn an_invalid_instance_alone_exits_1() {
        let report = Report::new(vec![instance("bad", State::Invalid, vec![])]);
        assert_eq!(report.exit_code(), 1);
    }

    #[test]
    fn the_json_names_every_field_in_camel_case() {
        let report = Report::new(vec![instance(
            "a",
            State::Changes,
            vec![change(Action::Update, ChildKind::ConfigMap, "a-config")],
        )]);
        let v: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(v["summary"]["objectsWritten"], 1);
        let i = &v["instances"][0];
        assert_eq!(i["state"], "changes");
        assert_eq!(i["appliedRevision"], "a".repeat(64));
        assert_eq!(i["podRestart"], false);
        assert_eq!(
            i["objects"][0],
            serde_json::json!({"action": "update", "kind": "ConfigMap", "namespace": "ns",
                "name": "a-config", "why": "content changed"})
        );
    }

    #[test]
    fn each_effect_is_a_line_of_the_instance() {
        let mut changed = instance(
            "a",
            State::Changes,
            vec![change(Action::Update, ChildKind::ConfigMap, "a-config")],
        );
        changed.effects = vec![
            "claim the hosts".into(),
            "write status and its Events".into(),
        ];
        let text = Report::new(vec![changed]).text();
        assert!(
            text.contains("  > claim the hosts\n  > write status and its Events\n"),
            "{text}"
        );
    }
}
