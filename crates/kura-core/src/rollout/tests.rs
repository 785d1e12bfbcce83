//! The budget as a table: fleets in, admissions out.

use super::*;

const FLEET: &str = "f2";
const DEADLINE: Duration = Duration::from_secs(600);

fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> String {
    (now() - jiff::SignedDuration::from_secs(secs)).to_string()
}

fn key(name: &str) -> OrderKey {
    OrderKey {
        not_canary: true,
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn member(name: &str, ready: bool, rollout: Option<RolloutStatus>) -> Member {
    Member {
        key: key(name),
        ready,
        serving: ready,
        out: false,
        rollout,
        gate: Gate::Open,
    }
}

fn waiting(fleet: &str) -> Option<RolloutStatus> {
    Some(RolloutStatus {
        state: RolloutState::Waiting,
        fleet_revision: fleet.into(),
        revision: "r".into(),
        since: ago(5),
        was_ready: true,
    })
}

fn admitted(fleet: &str, was_ready: bool, secs_ago: i64) -> Option<RolloutStatus> {
    Some(RolloutStatus {
        state: RolloutState::Admitted,
        fleet_revision: fleet.into(),
        revision: "r".into(),
        since: ago(secs_ago),
        was_ready,
    })
}

fn count(n: u32) -> MaxUnavailable {
    MaxUnavailable::Count(n)
}

#[test]
fn percentages_round_down_and_never_below_one() {
    let p = |s: &str| MaxUnavailable::Percent(s.into());
    assert_eq!(p("25%").resolve(30), 7);
    assert_eq!(p("10%").resolve(1000), 100);
    assert_eq!(p("10%").resolve(5), 1);
    assert_eq!(p("100%").resolve(30), 30);
    assert_eq!(count(3).resolve(30), 3);
    assert_eq!(count(0).resolve(30), 1);
    assert_eq!(p("abc").percent(), None);
    assert_eq!(p("101%").percent(), None);
}

#[test]
fn the_budget_counts_instances_admitted_while_ready_until_their_record_is_cleared() {
    let f = fleet(
        [
            member("a", false, admitted(FLEET, true, 30)), // counts
            member("b", true, admitted(FLEET, true, 30)), // admitted, pods not restarted yet: counts
            member("c", false, admitted(FLEET, false, 30)), // was not Ready: never counts
            // A record of another operator revision holds nobody: the
            // instance's own reconcile replaces it, and a forged one (status
            // is anyone's to write) must not hold the fleet.
            member("d", false, admitted("f1", true, 30)),
            member("e", true, None),
        ],
        FLEET,
        DEADLINE,
        now(),
    );
    assert_eq!(f.total, 5);
    assert_eq!(f.in_flight, [key("a"), key("b")]);
    assert!(f.failed.is_empty());
}

#[test]
fn a_paused_or_deleted_instance_holds_no_slot_and_fails_nothing() {
    let mut paused = member("p", false, admitted(FLEET, true, 700));
    paused.out = true;
    let mut queued = member("q", true, waiting(FLEET));
    queued.out = true;
    let f = fleet([paused, queued], FLEET, DEADLINE, now());
    assert_eq!(f.total, 2);
    assert!(f.in_flight.is_empty() && f.queue.is_empty() && f.failed.is_empty());
}

#[test]
fn one_that_did_not_serve_when_admitted_never_halts_the_fleet() {
    let f = fleet(
        [member("a", false, admitted(FLEET, false, 700))],
        FLEET,
        DEADLINE,
        now(),
    );
    assert!(f.failed.is_empty(), "{f:?}");
}

#[test]
fn serving_not_ready_is_counted_and_only_a_workload_down_goes_uncounted() {
    // Not Ready (its Ingress has no address) but its pods serve: it is in
    // the queue and counted like any other.
    let mut serving = member("a", false, waiting(FLEET));
    serving.serving = true;
    let f = fleet(
        [serving.clone(), member("b", true, waiting(FLEET))],
        FLEET,
        DEADLINE,
        now(),
    );
    assert_eq!(f.queue, [key("a"), key("b")]);
    assert_eq!(
        admit(&serving, &f, &count(1)),
        Admission::Admit { counted: true }
    );
    assert!(matches!(
        admit(&member("b", true, waiting(FLEET)), &f, &count(1)),
        Admission::Wait { .. }
    ));
    // Its pods down: it goes at once, uncounted.
    let mut down = member("c", true, waiting(FLEET));
    down.serving = false;
    assert_eq!(
        admit(&down, &f, &count(1)),
        Admission::Admit { counted: false }
    );
}

#[test]
fn waiting_instances_are_admitted_in_order_within_the_budget() {
    let members: Vec<Member> = (0..6)
        .map(|i| member(&format!("i{i}"), true, waiting(FLEET)))
        .chain([member("x", false, admitted(FLEET, true, 10))])
        .collect();
    let f = fleet(members.clone(), FLEET, DEADLINE, now());
    // Budget 3, one in flight: the first two waiting go, the rest wait.
    let decisions: Vec<Admission> = members[..6]
        .iter()
        .map(|m| admit(m, &f, &count(3)))
        .collect();
    assert_eq!(decisions[0], Admission::Admit { counted: true });
    assert_eq!(decisions[1], Admission::Admit { counted: true });
    assert!(matches!(decisions[2], Admission::Wait { ahead: 2, .. }));
    assert!(matches!(decisions[5], Admission::Wait { ahead: 5, .. }));
    assert_eq!(next_in_line(&f, &count(3)), [key("i0"), key("i1")]);
}

#[test]
fn an_instance_joins_the_queue_before_it_is_admitted() {
    // Nobody waits yet (the first pass after a change): everyone joins first,
    // so instances reconciled at the same moment never all take the slots.
    let empty = fleet([], FLEET, DEADLINE, now());
    assert!(matches!(
        admit(&member("a0", true, None), &empty, &count(3)),
        Admission::Wait { ahead: 0, .. }
    ));
    // Once in the queue, the first in order goes; one joining later is
    // ordered among those waiting.
    let f = fleet(
        [
            member("a0", true, waiting(FLEET)),
            member("a2", true, waiting(FLEET)),
        ],
        FLEET,
        DEADLINE,
        now(),
    );
    assert_eq!(
        admit(&member("a0", true, waiting(FLEET)), &f, &count(1)),
        Admission::Admit { counted: true }
    );
    assert!(matches!(
        admit(&member("a1", true, None), &f, &count(1)),
        Admission::Wait { ahead: 1, .. }
    ));
}

#[test]
fn canaries_go_first() {
    let mut canary = member("zz", true, waiting(FLEET));
    canary.key.not_canary = false;
    let f = fleet(
        [member("aa", true, waiting(FLEET)), canary.clone()],
        FLEET,
        DEADLINE,
        now(),
    );
    assert_eq!(
        admit(&canary, &f, &count(1)),
        Admission::Admit { counted: true }
    );
    assert!(matches!(
        admit(&member("aa", true, waiting(FLEET)), &f, &count(1)),
        Admission::Wait { .. }
    ));
}

#[test]
fn an_instance_that_is_not_ready_goes_at_once_and_does_not_count() {
    let f = fleet(
        [
            member("a", false, admitted(FLEET, true, 10)),
            member("b", false, admitted(FLEET, true, 10)),
            member("c", false, admitted(FLEET, true, 700)),
        ],
        FLEET,
        DEADLINE,
        now(),
    );
    // Budget spent and halted: still, a not-Ready instance takes the change.
    assert_eq!(
        admit(&member("d", false, None), &f, &count(1)),
        Admission::Admit { counted: false }
    );
}

#[test]
fn a_failed_admission_halts_this_revision_and_a_newer_one_ends_the_halt() {
    let members = [
        member("a", false, admitted("f1", true, 700)), // past the deadline
        member("b", true, waiting("f1")),
    ];
    let f1 = fleet(members.clone(), "f1", DEADLINE, now());
    assert_eq!(f1.failed, [key("a")]);
    assert_eq!(
        admit(&members[1], &f1, &count(3)),
        Admission::Halted {
            failed: vec![key("a")]
        }
    );
    assert!(next_in_line(&f1, &count(3)).is_empty());
    // A corrected configuration: operator revision f2. The failed one does
    // not serve, so it goes at once (uncounted); the others follow in the
    // budget. The record of f1 holds nothing under f2.
    let joined = [members[0].clone(), member("b", true, waiting("f2"))];
    let f2 = fleet(joined, "f2", DEADLINE, now());
    assert!(f2.failed.is_empty());
    assert!(f2.in_flight.is_empty());
    assert_eq!(
        admit(&members[0], &f2, &count(3)),
        Admission::Admit { counted: false }
    );
    assert_eq!(
        admit(&member("b", true, waiting("f2")), &f2, &count(3)),
        Admission::Admit { counted: true }
    );
}

#[test]
fn deadlines_read_from_status_are_never_trusted_into_the_future() {
    let mut r = admitted(FLEET, true, 0).unwrap();
    r.since = "9999-12-30T00:00:00Z".into();
    // A time in the future counts as now: not past the deadline yet.
    assert!(!past_deadline(&r, DEADLINE, now()));
    r.since = "garbage".into();
    assert!(!past_deadline(&r, DEADLINE, now()));
    r.since = ago(601);
    assert!(past_deadline(&r, DEADLINE, now()));
}

#[test]
fn admissions_the_cache_does_not_show_yet_take_one_slot_each_not_two() {
    // The cache still shows a and b waiting; this process admitted them.
    let members = ["a", "b", "c", "d"].map(|n| member(n, true, waiting(FLEET)));
    let mut f = fleet(members, FLEET, DEADLINE, now());
    let c = member("c", true, waiting(FLEET));
    let before = admit(&c, &f, &count(3));
    assert_eq!(before, Admission::Admit { counted: true });
    f.count_admitted(&key("a"));
    f.count_admitted(&key("b"));
    f.count_admitted(&key("b"));
    assert_eq!(f.in_flight, [key("a"), key("b")]);
    assert_eq!(
        admit(&c, &f, &count(3)),
        Admission::Admit { counted: true },
        "a and b hold two slots of three; c is first in line"
    );
    let d = member("d", true, waiting(FLEET));
    assert!(matches!(
        admit(&d, &f, &count(3)),
        Admission::Wait { ahead: 1, .. }
    ));
}

fn closed_window() -> Gate {
    Gate::Closed(WindowWait {
        window: "Monday 02:00 for 2h (UTC)".into(),
        source: "spec.maintenanceWindow".into(),
        opens: now() + jiff::SignedDuration::from_hours(3),
        deadline: None,
    })
}

/// Outside its window a serving instance waits for the opening, whatever
/// the budget has free; an instance that does not serve goes at once, as
/// with the budget (the change may be its fix).
#[test]
fn outside_its_window_an_instance_waits_for_the_opening_not_for_a_slot() {
    let mut me = member("a", true, waiting(FLEET));
    me.gate = closed_window();
    let fleet = fleet([me.clone()], FLEET, DEADLINE, now());
    assert!(fleet.queue.is_empty(), "not in line: {fleet:?}");
    assert!(matches!(
        admit(&me, &fleet, &count(5)),
        Admission::Window(w) if w.opens == now() + jiff::SignedDuration::from_hours(3)
    ));
    me.serving = false;
    assert_eq!(
        admit(&me, &fleet, &count(5)),
        Admission::Admit { counted: false }
    );
}

/// One waiting for its window holds no place before the others: with a
/// budget of one, `b` (after `a` in order) is admitted while `a` waits.
#[test]
fn an_instance_waiting_for_its_window_keeps_no_one_else_waiting() {
    let mut a = member("a", true, waiting(FLEET));
    a.gate = closed_window();
    let b = member("b", true, waiting(FLEET));
    let f = fleet([a, b.clone()], FLEET, DEADLINE, now());
    assert_eq!(admit(&b, &f, &count(1)), Admission::Admit { counted: true });
    assert_eq!(next_in_line(&f, &count(1)), vec![key("b")]);
}

/// Admitted inside its window, an instance counts against the budget until
/// it is Ready again, even once its window closed (no rollout is cut in
/// half, and the budget still bounds it).
#[test]
fn admitted_before_the_window_closed_it_still_counts_in_flight() {
    let mut a = member("a", false, admitted(FLEET, true, 30));
    a.gate = closed_window();
    let b = member("b", true, waiting(FLEET));
    let f = fleet([a, b.clone()], FLEET, DEADLINE, now());
    assert_eq!(f.in_flight, vec![key("a")]);
    assert!(matches!(admit(&b, &f, &count(1)), Admission::Wait { .. }));
}

/// Past its deadline the window no longer counts: the budget decides.
#[test]
fn past_its_deadline_the_budget_alone_decides() {
    let mut me = member("a", true, waiting(FLEET));
    me.gate = Gate::PastDeadline(now());
    let f = fleet([me.clone()], FLEET, DEADLINE, now());
    assert_eq!(
        admit(&me, &f, &count(1)),
        Admission::Admit { counted: true }
    );
}
