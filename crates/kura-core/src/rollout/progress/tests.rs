//! Statuses in, places in the change and verdicts out.

use super::*;
use crate::api::{Condition, RolloutStatus};

fn cond(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
    Condition::new(type_, status, reason, "")
}

fn ready() -> Condition {
    cond(READY, ConditionStatus::True, "Active")
}

fn not_ready() -> Condition {
    cond(READY, ConditionStatus::False, "Progressing")
}

fn record(state: RolloutState, fleet: &str, since: &str) -> RolloutStatus {
    RolloutStatus {
        state,
        fleet_revision: fleet.into(),
        revision: "r2".into(),
        since: since.into(),
        was_ready: true,
    }
}

/// Seen at generation 3, on `applied` of desired `r2`.
fn status(
    phase: Phase,
    applied: &str,
    conditions: Vec<Condition>,
    rollout: Option<RolloutStatus>,
) -> KuraInstanceStatus {
    KuraInstanceStatus {
        observed_generation: Some(3),
        phase: Some(phase),
        desired_revision: Some("r2".into()),
        applied_revision: Some(applied.into()),
        conditions,
        rollout,
        ..Default::default()
    }
}

const T0: &str = "2026-01-01T00:00:00Z";

fn waiting_on(reason: &str) -> KuraInstanceStatus {
    status(
        Phase::Ready,
        "r1",
        vec![ready(), cond(ROLLOUT_HELD, ConditionStatus::True, reason)],
        Some(record(RolloutState::Waiting, "f2", T0)),
    )
}

#[test]
fn every_state_of_one_instance() {
    use Progress::*;
    let admitted = || Some(record(RolloutState::Admitted, "f2", T0));
    let table: Vec<(&str, Option<i64>, Option<KuraInstanceStatus>, Progress)> = vec![
        (
            "on the desired revision and Ready",
            Some(3),
            Some(status(Phase::Ready, "r2", vec![ready()], None)),
            Done,
        ),
        (
            "no generation to compare (not from an apiserver): the status decides",
            None,
            Some(status(Phase::Ready, "r2", vec![ready()], None)),
            Done,
        ),
        ("no status yet", Some(1), None, NotObserved),
        (
            "a status of an older spec, however done it looks",
            Some(4),
            Some(status(Phase::Ready, "r2", vec![ready()], None)),
            NotObserved,
        ),
        (
            "a status that never observed a generation",
            Some(1),
            Some(KuraInstanceStatus {
                observed_generation: None,
                ..status(Phase::Ready, "r2", vec![ready()], None)
            }),
            NotObserved,
        ),
        (
            "on the desired revision, not Ready",
            Some(3),
            Some(status(Phase::Activating, "r2", vec![not_ready()], None)),
            InProgress,
        ),
        (
            "Ready on an older revision, no record (applying)",
            Some(3),
            Some(status(Phase::Applying, "r1", vec![ready()], None)),
            InProgress,
        ),
        (
            "no desired revision yet",
            Some(3),
            Some(KuraInstanceStatus {
                desired_revision: None,
                applied_revision: None,
                ..status(Phase::Applying, "r1", vec![], None)
            }),
            InProgress,
        ),
        (
            "retrying an apply (not stalled yet)",
            Some(3),
            Some(status(
                Phase::Retrying,
                "r1",
                vec![
                    ready(),
                    cond(STALLED, ConditionStatus::False, "ApplyFailed"),
                ],
                None,
            )),
            InProgress,
        ),
        (
            "admitted",
            Some(3),
            Some(status(
                Phase::Activating,
                "r2",
                vec![not_ready()],
                admitted(),
            )),
            InProgress,
        ),
        (
            "admitted and Ready again, its record not cleared yet",
            Some(3),
            Some(status(Phase::Ready, "r2", vec![ready()], admitted())),
            InProgress,
        ),
        (
            "admitted and not Ready within the deadline",
            Some(3),
            Some(status(
                Phase::Activating,
                "r2",
                vec![
                    not_ready(),
                    cond(
                        ROLLOUT_FAILED,
                        ConditionStatus::True,
                        "ProgressDeadlineExceeded",
                    ),
                ],
                admitted(),
            )),
            Failed,
        ),
        (
            "waiting for the budget",
            Some(3),
            Some(waiting_on("WaitingForBudget")),
            WaitingForBudget,
        ),
        (
            "a waiting record without its condition yet",
            Some(3),
            Some(status(
                Phase::Ready,
                "r1",
                vec![ready()],
                Some(record(RolloutState::Waiting, "f2", T0)),
            )),
            WaitingForBudget,
        ),
        (
            "waiting for its window",
            Some(3),
            Some(waiting_on("WaitingForWindow")),
            WaitingForWindow,
        ),
        (
            "held by a halted rollout",
            Some(3),
            Some(waiting_on("RolloutHalted")),
            Held,
        ),
        (
            "paused",
            Some(3),
            Some(status(
                Phase::Paused,
                "r1",
                vec![cond(STALLED, ConditionStatus::False, "Paused")],
                None,
            )),
            Paused,
        ),
        (
            "stalled (retry budget spent)",
            Some(3),
            Some(status(
                Phase::Stalled,
                "r1",
                vec![
                    not_ready(),
                    cond(STALLED, ConditionStatus::True, "ApplyFailed"),
                ],
                None,
            )),
            Failed,
        ),
        (
            "a Stalled condition on another phase",
            Some(3),
            Some(status(
                Phase::Retrying,
                "r1",
                vec![cond(STALLED, ConditionStatus::True, "ApplyFailed")],
                None,
            )),
            Failed,
        ),
        (
            "invalid (Stalled too, but invalid says more)",
            Some(3),
            Some(status(
                Phase::Invalid,
                "r1",
                vec![
                    cond(VALID, ConditionStatus::False, "InvalidSpec"),
                    cond(STALLED, ConditionStatus::True, "InvalidSpec"),
                ],
                None,
            )),
            Invalid,
        ),
        (
            "Valid False on another phase",
            Some(3),
            Some(status(
                Phase::Applying,
                "r1",
                vec![cond(VALID, ConditionStatus::False, "InvalidSpec")],
                None,
            )),
            Invalid,
        ),
    ];
    for (case, generation, status, want) in table {
        assert_eq!(classify(generation, status.as_ref()), want, "{case}");
    }
}

fn summary(instances: &[(&str, Option<KuraInstanceStatus>)]) -> Summary {
    summarize(instances.iter().map(|(key, s)| Seen {
        key,
        generation: Some(3),
        status: s.as_ref(),
    }))
}

fn done() -> Option<KuraInstanceStatus> {
    Some(status(Phase::Ready, "r2", vec![ready()], None))
}

fn paused() -> Option<KuraInstanceStatus> {
    Some(status(Phase::Paused, "r1", vec![], None))
}

fn failed() -> Option<KuraInstanceStatus> {
    Some(status(
        Phase::Stalled,
        "r1",
        vec![cond(STALLED, ConditionStatus::True, "ApplyFailed")],
        None,
    ))
}

fn invalid() -> Option<KuraInstanceStatus> {
    Some(status(
        Phase::Invalid,
        "r1",
        vec![cond(VALID, ConditionStatus::False, "InvalidSpec")],
        None,
    ))
}

fn key(s: &str) -> String {
    s.to_string()
}

#[test]
fn verdicts_and_their_exit_codes() {
    type Case<'a> = (
        &'a str,
        Vec<(&'a str, Option<KuraInstanceStatus>)>,
        Verdict,
        u8,
    );
    let table: Vec<Case> = vec![
        ("no instance: nothing to wait for", vec![], Verdict::Done, 0),
        (
            "every instance done",
            vec![("ns/a", done()), ("ns/b", done())],
            Verdict::Done,
            0,
        ),
        (
            "done but one paused: it is left out",
            vec![("ns/a", done()), ("ns/p", paused())],
            Verdict::Done,
            0,
        ),
        (
            "one not observed",
            vec![("ns/a", done()), ("ns/b", None)],
            Verdict::InProgress,
            2,
        ),
        (
            "one waiting for the budget",
            vec![
                ("ns/a", done()),
                ("ns/b", Some(waiting_on("WaitingForBudget"))),
            ],
            Verdict::InProgress,
            2,
        ),
        (
            "one waiting for its window",
            vec![("ns/b", Some(waiting_on("WaitingForWindow")))],
            Verdict::InProgress,
            2,
        ),
        (
            "failed and held: the failed one holds it",
            vec![
                ("ns/h", Some(waiting_on("RolloutHalted"))),
                ("ns/f", failed()),
                ("ns/a", done()),
            ],
            Verdict::Halted {
                holding: vec![(key("ns/f"), Progress::Failed)],
                outside: false,
            },
            1,
        ),
        (
            "invalid holds it too, named with the failed, in order",
            vec![("ns/z", failed()), ("ns/i", invalid()), ("ns/a", done())],
            Verdict::Halted {
                holding: vec![
                    (key("ns/i"), Progress::Invalid),
                    (key("ns/z"), Progress::Failed),
                ],
                outside: false,
            },
            1,
        ),
        (
            "held, the failure outside the scope",
            vec![
                ("ns/h", Some(waiting_on("RolloutHalted"))),
                ("ns/a", done()),
            ],
            Verdict::Halted {
                holding: vec![(key("ns/h"), Progress::Held)],
                outside: true,
            },
            1,
        ),
    ];
    for (case, instances, want, code) in table {
        let verdict = summary(&instances).verdict();
        assert_eq!(verdict, want, "{case}");
        assert_eq!(verdict.exit_code(), code, "{case}");
    }
}

#[test]
fn counts_put_each_instance_in_one_bucket() {
    let s = summary(&[
        ("ns/a", done()),
        ("ns/b", done()),
        ("ns/n", None),
        (
            "ns/r",
            Some(status(
                Phase::Activating,
                "r2",
                vec![not_ready()],
                Some(record(RolloutState::Admitted, "f2", T0)),
            )),
        ),
        ("ns/w", Some(waiting_on("WaitingForBudget"))),
        ("ns/m", Some(waiting_on("WaitingForWindow"))),
        ("ns/p", paused()),
        ("ns/h", Some(waiting_on("RolloutHalted"))),
        ("ns/f", failed()),
        ("ns/i", invalid()),
    ]);
    assert_eq!(
        s.counts,
        Counts {
            total: 10,
            done: 2,
            in_progress: 2,
            waiting_for_budget: 1,
            waiting_for_window: 1,
            paused: 1,
            held: 1,
            failed: 1,
            invalid: 1,
        }
    );
    assert_eq!(
        s.line(),
        "fleet revision f2: done 2/10, in progress 2, waiting for budget 1, waiting for window 1, paused 1, held 1, failed 1, invalid 1"
    );
}

#[test]
fn the_fleet_revision_is_that_of_the_newest_record() {
    let older = status(
        Phase::Activating,
        "r2",
        vec![],
        Some(record(RolloutState::Admitted, "f1", "2026-01-01T00:00:00Z")),
    );
    let newer = status(
        Phase::Ready,
        "r1",
        vec![],
        Some(record(RolloutState::Waiting, "f2", "2026-01-01T00:05:00Z")),
    );
    let unreadable = status(
        Phase::Ready,
        "r1",
        vec![],
        Some(record(RolloutState::Waiting, "forged", "yesterday")),
    );
    let s = summary(&[
        ("ns/a", Some(older)),
        ("ns/b", Some(newer)),
        ("ns/c", Some(unreadable)),
    ]);
    assert_eq!(s.fleet_revision.as_deref(), Some("f2"));
    assert_eq!(summary(&[("ns/a", done())]).fleet_revision, None);
    assert!(
        summary(&[("ns/a", done())])
            .line()
            .starts_with("fleet revision -: done 1/1")
    );
}

#[test]
fn the_bar_shows_the_done_share_and_what_is_not_zero() {
    let s = summary(&[
        ("ns/a", done()),
        ("ns/b", Some(waiting_on("WaitingForBudget"))),
        ("ns/c", Some(waiting_on("WaitingForBudget"))),
        ("ns/d", None),
    ]);
    assert_eq!(
        s.bar(8),
        "[##------] 1/4 done | in progress 1 | waiting for budget 2 | fleet revision f2"
    );
    assert!(summary(&[]).bar(4).starts_with("[####] 0/0 done"));
}

#[test]
fn conclusions_name_who_holds_it_and_who_is_not_done() {
    let halted = summary(&[
        ("ns/h", Some(waiting_on("RolloutHalted"))),
        ("ns/f", failed()),
    ]);
    assert_eq!(
        halted.conclusion(&halted.verdict(), false),
        "rollout halted: held by ns/f (failed)"
    );
    let outside = summary(&[("ns/h", Some(waiting_on("RolloutHalted")))]);
    assert_eq!(
        outside.conclusion(&outside.verdict(), false),
        "rollout halted: ns/h (held) wait on instances that failed outside this scope"
    );
    let going = summary(&[
        ("ns/a", done()),
        ("ns/p", paused()),
        ("ns/w", Some(waiting_on("WaitingForWindow"))),
        ("ns/n", None),
    ]);
    assert_eq!(
        going.conclusion(&going.verdict(), true),
        "timed out: not done: ns/n (not yet observed), ns/w (waiting for a maintenance window)"
    );
    assert_eq!(
        going.conclusion(&going.verdict(), false),
        "rollout in progress: not done: ns/n (not yet observed), ns/w (waiting for a maintenance window)"
    );
    let complete = summary(&[("ns/a", done()), ("ns/p", paused())]);
    assert_eq!(
        complete.conclusion(&complete.verdict(), false),
        "rollout complete: 1/2 instances done; paused, left out: ns/p"
    );
}

#[test]
fn at_most_ten_names_then_how_many_more() {
    assert_eq!(names(["a", "b"]), "a, b");
    let many: Vec<String> = (0..13).map(|i| format!("i{i:02}")).collect();
    assert_eq!(
        names(&many),
        "i00, i01, i02, i03, i04, i05, i06, i07, i08, i09 and 3 more"
    );
    assert_eq!(
        names(&many[..10]),
        "i00, i01, i02, i03, i04, i05, i06, i07, i08, i09"
    );
}
