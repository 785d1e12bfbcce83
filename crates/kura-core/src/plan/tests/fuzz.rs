//! `plan` over arbitrary statuses and live objects: anyone with access can write
//! any status, so no content of it may panic a reconcile, hold an instance back
//! longer than the policy's own waits, or make `plan` write to or delete an
//! object that is not this instance's.

use proptest::prelude::*;

use super::*;

fn any_time() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("9999-12-31T23:59:59Z".to_string()),
        Just("0001-01-01T00:00:00Z".to_string()),
        Just("-009999-01-01T00:00:00Z".to_string()),
        Just("2026-01-01T00:09:59Z".to_string()),
        Just("not a time".to_string()),
        Just(String::new()),
        any::<i64>().prop_map(|s| Timestamp::from_second(s % 250_000_000_000)
            .map(|t| t.to_string())
            .unwrap_or_default()),
    ]
}

fn any_owner() -> impl Strategy<Value = Owner> {
    prop_oneof![
        Just(Owner::Ours),
        Just(Owner::Adopt),
        ".{0,20}".prop_map(Owner::Foreign),
    ]
}

fn any_status() -> impl Strategy<Value = KuraInstanceStatus> {
    (
        proptest::option::of((
            any::<i64>(),
            prop_oneof![Just("r2/".to_string()), ".{0,8}"],
            any_time(),
        )),
        proptest::option::of((any::<i64>(), any_time())),
        proptest::option::of(prop_oneof![
            Just("r1".to_string()),
            Just("r2".to_string()),
            ".{0,4}"
        ]),
        proptest::collection::vec(
            ("[a-zA-Z/.0-9]{0,24}", "[A-Za-z]{0,20}", "[a-z.-]{0,12}"),
            0..4,
        ),
        proptest::option::of(".{0,6}"),
    )
        .prop_map(
            |(retry, conflict, applied, inventory, handled)| KuraInstanceStatus {
                retry: retry.map(|(failures, inputs_key, t)| RetryStatus {
                    failures,
                    inputs_key,
                    last_error: String::new(),
                    last_failure_time: t,
                }),
                conflict: conflict.map(|(take_backs, t)| ConflictStatus {
                    take_backs,
                    window_start: t,
                    managers: vec![],
                }),
                applied_revision: applied,
                inventory: inventory
                    .into_iter()
                    .map(|(api_version, kind, name)| InventoryEntry {
                        api_version,
                        kind,
                        name,
                        namespace: Some("ns".into()),
                        hash: String::new(),
                        owned_fields: None,
                    })
                    .collect(),
                last_handled_reapply_at: handled,
                ..Default::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_status_content_panics_holds_too_long_or_touches_what_is_not_ours(
        status in any_status(),
        owners in proptest::collection::vec(any_owner(), 2),
        extra_owner in any_owner(),
        force in proptest::option::of(".{0,6}"),
        image in prop_oneof![Just("img:1".to_string()), ".{0,12}"],
    ) {
        let d = desired("r2", "img:1");
        let mut o = converged(&d, Phase::Ready);
        o.status = status;
        o.force_token = force;
        o.running_image = Some(image);
        for (live, owner) in o.children.values_mut().zip(owners) {
            live.owner = owner;
        }
        let extra = ObjectId { kind: ChildKind::Ingress, namespace: Some("ns".into()), name: "extra".into() };
        let mut live = LiveChild::ours("r1", "f");
        live.owner = extra_owner;
        o.children.insert(extra, live);
        let policy = RetryPolicy::default();
        let longest = policy.stall_window().max(CONFLICT_WINDOW).max(policy.max_backoff);
        match plan(&o, Ok(&d), &policy, now()) {
            Plan::Backoff { at } | Plan::Stalled { at } | Plan::ConflictHold { at, .. } => {
                prop_assert!(at <= later(now(), longest), "held until {at}");
            }
            Plan::Apply { apply, prune, .. } => {
                for op in &apply {
                    let owner = o.children.get(&op.id).map(|l| &l.owner);
                    prop_assert!(!matches!(owner, Some(Owner::Foreign(_))), "sends {}", op.id);
                }
                for id in &prune {
                    let owner = o.children.get(id).map(|l| &l.owner);
                    prop_assert!(matches!(owner, None | Some(Owner::Ours)), "prunes {id}");
                }
            }
            _ => {}
        }
    }
}
