use std::collections::BTreeSet;

use super::ledger::{self, Entry};
use super::*;

/// FNV-1a 64's published vectors: the apiserver hashes the same bytes.
#[test]
fn the_hash_is_fnv1a_64() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn shard_i_owns_the_ith_of_n_equal_ranges() {
    let table: [(u32, u64, u32); 9] = [
        (1, 0, 0),
        (1, u64::MAX, 0),
        (2, 0x7fff_ffff_ffff_ffff, 0),
        (2, 0x8000_0000_0000_0000, 1),
        (4, 0x3fff_ffff_ffff_ffff, 0),
        (4, 0x4000_0000_0000_0000, 1),
        (4, u64::MAX, 3),
        // 3 does not divide 2^64: floor(2^64/3) = 0x5555555555555555.
        (3, 0x5555_5555_5555_5554, 0),
        (3, 0x5555_5555_5555_5555, 1),
    ];
    for (n, hash, shard) in table {
        assert_eq!(
            Shards::new(n).unwrap().of_hash(hash),
            shard,
            "{n} shards, {hash:#x}"
        );
    }
    assert_eq!(Shards::new(0), None);
    // Every hash lands in the range its shard's bounds say, for awkward counts.
    for n in [3u32, 5, 7, 10] {
        let s = Shards::new(n).unwrap();
        for hash in [0, 1, u64::MAX / 3, u64::MAX / 7 * 2, u64::MAX - 1, u64::MAX] {
            let i = s.of_hash(hash);
            assert!(s.start(i) <= u128::from(hash) && u128::from(hash) < s.start(i + 1));
        }
        assert_eq!(s.start(n), 1u128 << 64);
    }
}

#[test]
fn a_namespace_has_one_shard_and_namespaces_spread() {
    let s = Shards::new(4).unwrap();
    assert_eq!(s.of_namespace("team-a"), s.of_namespace("team-a"));
    let used: BTreeSet<u32> = (0..64)
        .map(|i| s.of_namespace(&format!("{i}-tenant")))
        .collect();
    assert_eq!(used.len(), 4);
    assert!((0..64).all(|i| Shards::ONE.of_namespace(&format!("ns-{i}")) == 0));
}

/// FNV-1a's last bytes barely reach the hash's top bits, which the ranges
/// split on: namespaces that differ only in a short suffix share a shard.
/// The apiserver's `shardRange` has the same property (it is its hash);
/// the chart README says so.
#[test]
fn namespaces_that_differ_in_a_short_suffix_share_a_shard() {
    let s = Shards::new(4).unwrap();
    let used: BTreeSet<u32> = (0..64)
        .map(|i| s.of_namespace(&format!("ns-{i}")))
        .collect();
    assert_eq!(used.len(), 1);
}

/// The KEP's syntax: single-quoted 0x literals, [start, end), OR-ed.
#[test]
fn the_selector_names_the_held_ranges_in_the_keps_syntax() {
    let s = Shards::new(4).unwrap();
    assert_eq!(
        s.selector(&[1, 3].into()).unwrap(),
        "shardRange(object.metadata.namespace, '0x4000000000000000', '0x8000000000000000') \
         || shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"
    );
    assert_eq!(
        s.selector(&[0].into()).unwrap(),
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000')",
        "every bound is 16 hex digits: the apiserver refuses '0x0'"
    );
    assert_eq!(
        Shards::new(3).unwrap().selector(&[0].into()).unwrap(),
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x5555555555555555')"
    );
    assert_eq!(s.selector(&[0, 1, 2, 3].into()), None);
    assert_eq!(Shards::ONE.selector(&[0].into()), None);
}

fn view(members: &[&str], holders: &[Option<&str>]) -> View {
    View {
        members: members.iter().map(|m| m.to_string()).collect(),
        holders: holders.iter().map(|h| h.map(str::to_string)).collect(),
    }
}

fn set(shards: &[u32]) -> BTreeSet<u32> {
    shards.iter().copied().collect()
}

#[test]
fn which_shards_a_replica_wants() {
    let (a, b, c) = (Some("a"), Some("b"), Some("c"));
    let table: Vec<(&str, View, &str, BTreeSet<u32>)> = vec![
        (
            "alone: every shard",
            view(&["a"], &[None; 4]),
            "a",
            set(&[0, 1, 2, 3]),
        ),
        (
            "balanced: keeps its own",
            view(&["a", "b"], &[a, b, a, b]),
            "a",
            set(&[0, 2]),
        ),
        (
            "balanced: the other keeps its own",
            view(&["a", "b"], &[a, b, a, b]),
            "b",
            set(&[1, 3]),
        ),
        (
            "a joiner: the holder keeps its share, the lowest",
            view(&["a", "b"], &[a, a, a, a]),
            "a",
            set(&[0, 1]),
        ),
        (
            "a joiner waits for the released ones",
            view(&["a", "b"], &[a, a, a, a]),
            "b",
            set(&[]),
        ),
        (
            "a joiner takes the released ones",
            view(&["a", "b"], &[a, a, None, None]),
            "b",
            set(&[2, 3]),
        ),
        (
            "the holder does not take back what it released",
            view(&["a", "b"], &[a, a, None, None]),
            "a",
            set(&[0, 1]),
        ),
        (
            "a dead member's shards: the survivor takes them",
            view(&["a"], &[a, None, a, None]),
            "a",
            set(&[0, 1, 2, 3]),
        ),
        (
            "three over four: 2, 1, 1 and nothing moves",
            view(&["a", "b", "c"], &[a, b, a, c]),
            "a",
            set(&[0, 2]),
        ),
        (
            "three over four: a third joins a 2/2 split",
            view(&["a", "b", "c"], &[a, b, a, b]),
            "a",
            set(&[0, 2]),
        ),
        (
            "three over four: the second of equals gives one up",
            view(&["a", "b", "c"], &[a, b, a, b]),
            "b",
            set(&[1]),
        ),
        (
            "three over four: the third gets it once free",
            view(&["a", "b", "c"], &[a, None, a, b]),
            "c",
            set(&[1]),
        ),
        (
            "a holder that is no member holds",
            view(&["a"], &[c, None]),
            "a",
            set(&[1]),
        ),
    ];
    for (case, view, me, wanted) in table {
        assert_eq!(plan(&view, me), wanted, "{case}");
    }
}

/// The shares add up to N and each member wants its share: where two
/// reach for the same free shard, the Lease gives it to one and the other
/// reaches for another in the next round.
#[test]
fn each_member_wants_its_share_and_the_shares_add_up() {
    let (a, b) = (Some("a"), Some("b"));
    let v = view(&["a", "b"], &[a, None, None, None, b, None]);
    assert_eq!(plan(&v, "a").len(), 3);
    assert!(plan(&v, "a").contains(&0) && plan(&v, "b").contains(&4));
    assert_eq!(plan(&v, "b").len(), 3);
    let quotas: Vec<usize> = v.quotas().into_iter().map(|(_, q)| q).collect();
    assert_eq!(quotas, [3, 3]);
}

fn entry(key: &str, uid: &str, at: &str) -> Entry {
    Entry {
        key: key.into(),
        uid: uid.into(),
        owner: None,
        at: at.into(),
        canary: false,
    }
}

#[test]
fn ledger_entries_count_for_their_ttl_only() {
    let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let entries = vec![
        entry("ns/a", "1", "2026-12-01T11:59:30Z"),
        entry("ns/b", "2", "2026-12-01T11:58:00Z"),
        entry("ns/c", "3", "2026-12-01T12:30:00Z"),
        entry("ns/d", "4", "not a time"),
    ];
    // Half an hour ahead: re-dated to the reader's clock, then a TTL from it.
    let live = ledger::live(ledger::redated(entries, now), now, ledger::TTL);
    assert_eq!(
        live,
        [
            entry("ns/a", "1", "2026-12-01T11:59:30Z"),
            entry("ns/c", "3", "2026-12-01T12:00:00Z"),
        ]
    );
    let text = ledger::render(&live);
    assert_eq!(ledger::parse(Some(&text)), live);
    assert_eq!(ledger::parse(Some("{not json")), []);
    assert_eq!(ledger::parse(None), []);
}

/// The ledger is anyone's to write, so an entry's date is not trusted: one
/// dated ahead counts from its date only within the clocks' skew, and holds
/// nothing beyond it (issue: one dated 59 s ahead held a slot for 118 s).
#[test]
fn a_ledger_entry_counts_for_its_ttl_from_no_later_than_now_plus_the_skew() {
    use ledger::{SKEW, TTL, age, counts, dated_ahead};
    use std::time::Duration;
    let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let at = |secs: i64| (now + jiff::SignedDuration::from_secs(secs)).to_string();
    assert_eq!(SKEW, Duration::from_secs(5));
    // Past, now, and its TTL's end: it counts while younger than the TTL.
    assert_eq!(age(&at(-30), now), Some(Duration::from_secs(30)));
    assert_eq!(age(&at(0), now), Some(Duration::ZERO));
    assert!(counts(&at(-30), now, TTL));
    assert!(counts(&at(0), now, TTL));
    assert!(counts(&at(-59), now, TTL));
    assert!(!counts(&at(-60), now, TTL), "at its TTL it has ended");
    assert!(!counts(&at(-3600), now, TTL));
    // Slightly ahead (a writer's clock a little fast): as if written now,
    // and it ends at its own date plus the TTL, within TTL + SKEW of now.
    assert_eq!(age(&at(3), now), Some(Duration::ZERO));
    assert_eq!(age(&at(5), now), Some(Duration::ZERO));
    assert!(counts(&at(5), now, TTL));
    let later = |secs: i64| now + jiff::SignedDuration::from_secs(secs);
    assert!(counts(&at(5), later(64), TTL));
    assert!(!counts(&at(5), later(65), TTL));
    // Further ahead than the skew: it counts as if written now, and is
    // re-dated to the reader's clock when the ledger is written (at once),
    // so it counts for a TTL from that read: never for longer, never lost.
    for ahead in [6, 30, 59, 60, 61, 3600] {
        assert_eq!(
            age(&at(ahead), now),
            Some(Duration::ZERO),
            "{ahead} s ahead"
        );
        assert!(counts(&at(ahead), now, TTL), "{ahead} s ahead");
        assert!(dated_ahead(&at(ahead), now), "{ahead} s ahead");
    }
    let entry = |at: String| ledger::Entry {
        key: "ns/i".into(),
        uid: "u".into(),
        owner: None,
        at,
        canary: false,
    };
    // The entry, 59 s ahead: read now, it counts until now + TTL,
    // not 119 s.
    let redated = ledger::redated(vec![entry(at(59)), entry(at(3)), entry(at(-10))], now);
    assert_eq!(redated[0].at, now.to_string());
    assert_eq!(redated[1].at, at(3), "within the skew: its own date");
    assert_eq!(redated[2].at, at(-10));
    assert!(counts(&redated[0].at, later(59), TTL));
    assert!(!counts(&redated[0].at, later(60), TTL));
    assert!(!dated_ahead(&at(5), now) && !dated_ahead(&at(-600), now));
    assert_eq!(age("not a time", now), None);
    assert!(!dated_ahead("not a time", now));
}

#[test]
fn a_ledger_entry_replaces_its_key_and_names_another_holder() {
    let entries = ledger::with(
        vec![entry("h.example", "1", "t0")],
        entry("h.example", "2", "t1"),
    );
    assert_eq!(entries, [entry("h.example", "2", "t1")]);
    assert!(ledger::held_by_another(&entries, "h.example", "2").is_none());
    assert_eq!(
        ledger::held_by_another(&entries, "h.example", "1").map(|e| e.uid.as_str()),
        Some("2")
    );
    let key = ledger::order_key(&entry("ns/a", "1", "t")).unwrap();
    assert_eq!(
        (key.namespace.as_str(), key.name.as_str(), key.not_canary),
        ("ns", "a", true)
    );
}

/// A forged or stale entry: one for an instance replaced by another of its
/// name holds nothing; one for an instance no cache shows holds nothing once
/// a watch would have shown it; one for a cached instance stands.
#[test]
fn an_entry_whose_instance_is_gone_holds_nothing() {
    use ledger::{Seen, stands};
    let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let fresh = entry("ns/a", "1", "2026-12-01T11:59:58Z");
    let older = entry("ns/a", "1", "2026-12-01T11:59:40Z");
    assert!(stands(&fresh, Seen::Instance, now));
    assert!(stands(&older, Seen::Instance, now));
    assert!(!stands(&fresh, Seen::Replaced, now));
    // Not in the cache yet: it may lag a moment behind another replica's.
    assert!(stands(&fresh, Seen::Nothing, now));
    assert!(!stands(&older, Seen::Nothing, now));
    assert!(!stands(&entry("ns/a", "1", "never"), Seen::Nothing, now));
    // Dated ahead (a hand, or a clock): as if written now, for one unseen
    // (re-dated to the reader's clock when the ledger is written).
    for at in [
        "2026-12-01T12:00:04Z",
        "2026-12-01T12:00:08Z",
        "2026-12-01T12:00:50Z",
    ] {
        assert!(stands(&entry("ns/a", "1", at), Seen::Nothing, now), "{at}");
    }
    // Its instance paused or being deleted (`Seen::Out`): nothing, however
    // fresh.
    assert!(!stands(&fresh, Seen::Out, now));
    assert!(!stands(
        &entry("ns/a", "1", "2026-12-01T12:00:00Z"),
        Seen::Out,
        now
    ));
    let mut host = entry("h.example", "1", "t");
    host.owner = Some("ns/b".into());
    assert_eq!(ledger::instance_of(&host), "ns/b");
    assert_eq!(ledger::instance_of(&fresh), "ns/a");
}

fn reservation(uid: &str, hosts: &[&str]) -> ledger::HostReservation {
    ledger::HostReservation {
        uid: uid.into(),
        owner: format!("ns/{uid}"),
        wanted: hosts
            .iter()
            .enumerate()
            .map(|(i, h)| crate::claims::HostClaim {
                host: (*h).into(),
                field: format!("spec.hosts[{i}]"),
            })
            .collect(),
        at: "2026-12-01T12:00:00Z".parse().unwrap(),
    }
}

/// A batch of reservations written at once is decided as if each had been
/// written alone, in order: a later one for a host an earlier one took is
/// that host's conflict, and writes nothing (not even its other hosts).
#[test]
fn a_batch_of_host_reservations_is_decided_in_order() {
    let held = vec![ledger::Entry {
        owner: Some("ns/old".into()),
        ..entry("taken.example", "old", "2026-12-01T11:59:50Z")
    }];
    let batch = [
        reservation("a", &["a.example", "shared.example"]),
        reservation("b", &["b.example", "shared.example"]),
        reservation("c", &["taken.example"]),
        reservation("d", &["d.example"]),
    ];
    let (answers, new) = ledger::reserve_hosts_in_order(&batch, &held);
    let lost = |i: usize| {
        answers[i]
            .as_ref()
            .map(|c| (c.0[0].host.clone(), c.0[0].holder.uid.clone()))
    };
    assert_eq!(lost(0), None);
    assert_eq!(lost(1), Some(("shared.example".into(), "a".into())));
    assert_eq!(lost(2), Some(("taken.example".into(), "old".into())));
    assert_eq!(lost(3), None);
    let written: Vec<(&str, &str)> = new
        .iter()
        .map(|e| (e.key.as_str(), e.uid.as_str()))
        .collect();
    assert_eq!(
        written,
        [
            ("a.example", "a"),
            ("shared.example", "a"),
            ("d.example", "d")
        ]
    );
    // One reservation alone is the same decision.
    let (alone, mine) = ledger::reserve_hosts(&batch[3], &held);
    assert!(alone.is_none());
    assert_eq!(mine, new[2..]);
}
