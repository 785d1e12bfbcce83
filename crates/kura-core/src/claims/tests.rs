//! Who holds a host, as a table over plain values; the hosts of an instance;
//! the index as the watches feed it.

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::index::Index;
use super::*;
use crate::config::OperatorConfig;

const CONFIG: &str = include_str!("../../../../examples/config.yaml");

fn config() -> OperatorConfig {
    OperatorConfig::parse(CONFIG).expect("the example configuration is valid")
}

fn at(secs: i64) -> Option<Timestamp> {
    Some(Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn who(namespace: &str, name: &str, created: Option<Timestamp>) -> Claimant {
    Claimant {
        namespace: namespace.into(),
        name: name.into(),
        uid: format!("uid-{namespace}-{name}"),
        created,
    }
}

fn standing(host: &str, c: &Claimant, hold: Hold) -> Standing {
    Standing {
        host: host.into(),
        claimant: c.clone(),
        hold,
    }
}

fn serves(since: i64) -> Hold {
    Hold::Serves {
        since: at(since),
        granted: false,
    }
}

/// The time decisions are taken at in these tables.
fn now() -> Timestamp {
    at(1000).unwrap()
}

fn claim(host: &str, field: &str) -> HostClaim {
    HostClaim {
        host: host.into(),
        field: field.into(),
    }
}

const H: &str = "acme.fra-metal.kura.example.net";

#[test]
fn who_holds_a_host() {
    let me = who("b", "acme", at(10));
    let older = who("a", "acme", at(0));
    let younger = who("c", "acme", at(20));
    let same_second_first = who("a", "zed", at(10));
    let same_second_after = who("c", "abc", at(10));
    let unknown = who("a", "unknown", None);
    let gone = who("a", "gone", at(0));
    let my_name_before = Claimant {
        uid: "uid-of-a-deleted-b-acme".into(),
        ..me.clone()
    };
    let mine = |hold| standing(H, &me, hold);
    let asks = |c: &Claimant| standing(H, c, Hold::Asks);
    let reserved = |c: &Claimant, until: i64| {
        standing(
            H,
            c,
            Hold::Reserved {
                since: at(1),
                until: at(until).unwrap(),
            },
        )
    };
    // (case, standings on H, the holder named, None when I hold H)
    let cases: Vec<(&str, Vec<Standing>, Option<&Claimant>)> = vec![
        ("alone", vec![], None),
        ("alone, serving", vec![mine(serves(50))], None),
        (
            // An Ingress's creationTimestamp has whole seconds: a grant of
            // this process later in the same second still goes first.
            "granted here, and another's Ingress from the same second",
            vec![
                mine(Hold::Serves {
                    since: Some(at(50).unwrap() + jiff::SignedDuration::from_millis(700)),
                    granted: true,
                }),
                standing(H, &older, serves(50)),
            ],
            None,
        ),
        (
            "an older claimant goes first",
            vec![asks(&older)],
            Some(&older),
        ),
        ("a younger claimant waits", vec![asks(&younger)], None),
        (
            "created in the same second: by namespace, then name",
            vec![asks(&same_second_first)],
            Some(&same_second_first),
        ),
        (
            "created in the same second, after me by namespace",
            vec![asks(&same_second_after)],
            None,
        ),
        (
            "a younger one that serves keeps it",
            vec![standing(H, &younger, serves(30))],
            Some(&younger),
        ),
        (
            "serving, I keep it from an older claimant",
            vec![mine(serves(50)), asks(&older)],
            None,
        ),
        (
            "both serve: the one serving first keeps it",
            vec![mine(serves(50)), standing(H, &younger, serves(40))],
            Some(&younger),
        ),
        (
            "both serve: a later Ingress of an older instance takes nothing (22.10)",
            vec![mine(serves(50)), standing(H, &older, serves(60))],
            None,
        ),
        (
            "both serve since the same second: by namespace, then name",
            vec![mine(serves(50)), standing(H, &older, serves(50))],
            Some(&older),
        ),
        (
            "serving since an unknown time: after every known one",
            vec![
                mine(serves(50)),
                standing(
                    H,
                    &older,
                    Hold::Serves {
                        since: None,
                        granted: false,
                    },
                ),
            ],
            None,
        ),
        ("no creation time: last", vec![asks(&unknown)], None),
        (
            "a standing on another host does not count",
            vec![standing("other.example", &older, serves(0))],
            None,
        ),
        (
            "reserved for a deleted holder: nobody else asking gets it",
            vec![reserved(&gone, 2000)],
            Some(&gone),
        ),
        (
            "reserved for a deleted holder: a server since later does not keep it",
            vec![mine(serves(50)), reserved(&gone, 2000)],
            Some(&gone),
        ),
        (
            "a reservation ended: the next asking gets it",
            vec![reserved(&gone, 1000), asks(&younger)],
            None,
        ),
        (
            "reserved for my namespace and name: recreated, I get it",
            vec![reserved(&my_name_before, 2000), asks(&older)],
            None,
        ),
        (
            "reserved for my namespace and name, with since: it goes before a later server",
            vec![
                reserved(&my_name_before, 2000),
                standing(H, &older, serves(5)),
            ],
            None,
        ),
    ];
    for (case, standings, holder) in cases {
        let result = check(&me, &[claim(H, "spec.host")], &standings, now());
        match holder {
            None => assert_eq!(result, Ok(()), "{case}"),
            Some(h) => {
                let lost = result.expect_err(case).0;
                assert_eq!(lost.len(), 1, "{case}");
                assert_eq!(&lost[0].holder, h, "{case}");
            }
        }
    }
}

#[test]
fn a_conflict_names_each_field_host_and_holder() {
    let me = who("b", "other", at(10));
    let holder = who("a", "acme", at(0));
    let hosts = [
        claim("other.example", "spec.host"),
        claim(H, "spec.aliases[0]"),
        claim("free.example", "spec.aliases[1]"),
    ];
    let conflict = check(&me, &hosts, &[standing(H, &holder, serves(0))], now()).unwrap_err();
    assert_eq!(
        conflict.to_string(),
        format!("spec.aliases[0]: host {H:?} is served by instance a/acme")
    );
    let waiting = check(&me, &hosts, &[standing(H, &holder, Hold::Asks)], now()).unwrap_err();
    assert_eq!(
        waiting.to_string(),
        format!(
            "spec.aliases[0]: host {H:?} is claimed first by instance a/acme (created {})",
            at(0).unwrap()
        )
    );
    let both = check(
        &me,
        &hosts,
        &[standing(H, &holder, serves(0)), standing(H, &me, serves(5))],
        now(),
    )
    .unwrap_err();
    assert!(
        both.to_string()
            .contains("this instance's Ingress for it is left in place")
    );
    let until = at(2000).unwrap();
    let reserved = check(
        &me,
        &hosts,
        &[standing(
            H,
            &holder,
            Hold::Reserved {
                since: at(0),
                until,
            },
        )],
        now(),
    )
    .unwrap_err();
    assert_eq!(
        reserved.to_string(),
        format!(
            "spec.aliases[0]: host {H:?} is reserved until {until} for instance a/acme, \
             deleted while it held it, in case it is recreated"
        )
    );
    assert_eq!(reserved.ask_again_at(), Some(until));
    assert_eq!(both.ask_again_at(), None);
}

fn inputs(host: Option<&str>, aliases: &[&str]) -> HostInputs {
    HostInputs {
        host: host.map(Into::into),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        account: "acme".into(),
        region: "fra-metal".into(),
        paused: false,
    }
}

#[test]
fn the_hosts_of_an_instance() {
    let named = |h: Vec<HostClaim>| -> Vec<(String, String)> {
        h.into_iter().map(|c| (c.host, c.field)).collect()
    };
    let domain = Some("kura.example.net");
    assert_eq!(
        named(hosts(&inputs(None, &["b.example", "a.example"]), domain)),
        [
            (
                H.to_string(),
                "spec.host (defaulted from spec.account and spec.region)".to_string()
            ),
            ("b.example".into(), "spec.aliases[0]".into()),
            ("a.example".into(), "spec.aliases[1]".into()),
        ]
    );
    assert_eq!(
        named(hosts(&inputs(Some("own.example"), &[]), domain)),
        [("own.example".to_string(), "spec.host".to_string())]
    );
    // Unknown region: no default host; hosts no Ingress could carry claim nothing.
    assert_eq!(
        named(hosts(
            &inputs(None, &["*.example", "ok.example", "ok.example"]),
            None
        )),
        [("ok.example".to_string(), "spec.aliases[1]".to_string())]
    );
}

/// The default host claims count is the host validation renders.
#[test]
fn the_default_host_is_the_rendered_one() {
    let config = config();
    let mut instance = instance("acme", "a", 0, None, &[]);
    instance.spec.region = "fra-metal".into();
    let validated = crate::validate::validate(&instance, &config).unwrap();
    let domain = config.regions.get("fra-metal").map(|r| r.domain.as_str());
    let claimed = hosts(&HostInputs::from(&instance.spec), domain);
    assert_eq!(claimed[0].host, validated.host);
}

fn instance(
    name: &str,
    namespace: &str,
    created: i64,
    host: Option<&str>,
    aliases: &[&str],
) -> KuraInstance {
    let mut i: KuraInstance = serde_json::from_value(json!({
        "apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}")},
        "spec": {"account": "acme", "region": "fra-metal", "image": "registry.example/kura:1.0.0",
                 "storage": {"size": "1Gi"}},
    }))
    .unwrap();
    i.metadata.creation_timestamp = at(created).map(Time);
    i.spec.host = host.map(Into::into);
    i.spec.aliases = aliases.iter().map(|a| a.to_string()).collect();
    i
}

/// An Ingress of ours, as the operator's apply leaves it (created at second 0).
fn ingress(namespace: &str, name: &str, instance: &str, hosts: &[&str]) -> Ingress {
    let rules: Vec<_> = hosts.iter().map(|h| json!({"host": h})).collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": namespace,
            "creationTimestamp": at(0).unwrap().to_string(),
            "managedFields": [{"manager": "kura-operator", "operation": "Apply",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:rules": {}}}}],
            "labels": {"app.kubernetes.io/managed-by": "kura-operator", "kura.dev/instance": instance},
            "ownerReferences": [{"apiVersion": "kura.dev/v1alpha1", "kind": "KuraInstance",
                "name": instance, "uid": format!("uid-{namespace}-{instance}"), "controller": true}],
        },
        "spec": {"rules": rules},
    }))
    .unwrap()
}

fn wakes(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, i)| (n.to_string(), i.to_string()))
        .collect()
}

fn index() -> Index {
    let mut index = Index::new(RESERVATION);
    index.set_config(&config());
    index
}

const RESERVATION: std::time::Duration = std::time::Duration::from_secs(300);

/// The index at the tables' `now()`.
trait AtNow {
    fn upsert_instance_now(&mut self, i: &KuraInstance) -> Vec<(String, String)>;
    fn remove_instance_now(&mut self, i: &KuraInstance) -> Vec<(String, String)>;
}

impl AtNow for Index {
    fn upsert_instance_now(&mut self, i: &KuraInstance) -> Vec<(String, String)> {
        self.upsert_instance(i, now())
    }
    fn remove_instance_now(&mut self, i: &KuraInstance) -> Vec<(String, String)> {
        self.remove_instance(i, now())
    }
}

fn decide(index: &mut Index, i: &KuraInstance) -> Result<(), Conflict> {
    decide_at(index, i, now())
}

/// As `Claims::decide`, at `now`.
fn decide_at(index: &mut Index, i: &KuraInstance, now: Timestamp) -> Result<(), Conflict> {
    let me = Claimant::of(i).unwrap();
    let domain = config().regions[&i.spec.region].domain.clone();
    let wanted = hosts(&HostInputs::from(&i.spec), Some(&domain));
    let names: Vec<String> = wanted.iter().map(|h| h.host.clone()).collect();
    check(&me, &wanted, &index.standings(&names), now)?;
    index.grant(&me, &names, now);
    Ok(())
}

/// Once a reservation made at `now()` has ended.
fn after_reservation() -> Timestamp {
    now() + RESERVATION
}

#[test]
fn the_index_follows_instances_and_wakes_those_waiting() {
    let mut index = index();
    let first = instance("acme", "a", 0, None, &[]);
    let second = instance("acme", "b", 5, None, &[]);
    let alias = instance("other", "b", 9, Some("other.example"), &[H]);
    assert_eq!(index.upsert_instance_now(&first), []);
    // A newcomer on a taken host wakes the others asking for it (harmless:
    // they still hold it or still wait).
    assert_eq!(index.upsert_instance_now(&second), wakes(&[("a", "acme")]));
    assert_eq!(
        index.upsert_instance_now(&alias),
        wakes(&[("a", "acme"), ("b", "acme")])
    );
    assert_eq!(decide(&mut index, &first), Ok(()));
    let lost = decide(&mut index, &second).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "a/acme");
    let lost = decide(&mut index, &alias).unwrap_err();
    assert_eq!(lost.0[0].field, "spec.aliases[0]");
    // A status write (same hosts) wakes nobody.
    assert_eq!(index.upsert_instance_now(&first), []);
    // The holder deleted: both claimants are woken; the host is reserved for
    // a/acme, then the older wins.
    assert_eq!(
        index.remove_instance_now(&first),
        wakes(&[("b", "acme"), ("b", "other")])
    );
    let lost = decide(&mut index, &second).unwrap_err();
    assert_eq!(lost.ask_again_at(), Some(after_reservation()));
    assert_eq!(lost.0[0].holder.to_string(), "a/acme");
    assert_eq!(decide_at(&mut index, &second, after_reservation()), Ok(()));
    let lost = decide_at(&mut index, &alias, after_reservation()).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "b/acme");
    // The holder moves to another host: the waiting one is woken and wins.
    let mut moved = second.clone();
    moved.spec.host = Some("elsewhere.example".into());
    assert_eq!(index.upsert_instance_now(&moved), wakes(&[("b", "other")]));
    assert_eq!(decide_at(&mut index, &alias, after_reservation()), Ok(()));
}

#[test]
fn a_grant_holds_until_the_holder_lets_go() {
    let mut index = index();
    // The younger one was reconciled before the older entered the cache.
    let younger = instance("young", "a", 5, Some("shop.example"), &[]);
    let older = instance("old", "a", 0, Some("shop.example"), &[]);
    index.upsert_instance_now(&younger);
    assert_eq!(decide(&mut index, &younger), Ok(()));
    index.upsert_instance_now(&older);
    // Its Ingress is not in the cache yet; the grant holds the host.
    let lost = decide(&mut index, &older).unwrap_err();
    assert!(lost.0[0].holder_serves, "{lost}");
    assert_eq!(decide(&mut index, &younger), Ok(()));
    // Asking for another host lets go of the grant.
    let mut moved = younger.clone();
    moved.spec.host = Some("else.example".into());
    index.upsert_instance_now(&moved);
    assert_eq!(decide(&mut index, &older), Ok(()));
    // So does deletion, once the reservation for a recreation has ended.
    let mut index = self::index();
    index.upsert_instance_now(&younger);
    decide(&mut index, &younger).unwrap();
    index.upsert_instance_now(&older);
    index.remove_instance_now(&younger);
    assert!(decide(&mut index, &older).is_err());
    assert_eq!(decide_at(&mut index, &older, after_reservation()), Ok(()));
}

#[test]
fn ingresses_of_ours_serve_while_their_instance_lives() {
    let mut index = index();
    let holder = instance("acme", "a", 9, Some("shop.example"), &[]);
    let waiting = instance("first", "b", 0, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    index.upsert_instance_now(&waiting);
    let served = ingress("a", "acme", "acme", &["shop.example"]);
    // Its Ingress appearing wakes the other claimant, not the holder.
    assert_eq!(index.upsert_ingress(&served), wakes(&[("b", "first")]));
    // Serving beats being created first.
    assert!(decide(&mut index, &waiting).is_err());
    // An address written (hosts unchanged) wakes nobody.
    assert_eq!(index.upsert_ingress(&served), []);
    // The holder moves to another host: while its Ingress still serves the
    // old one, the host stays taken.
    let mut moved = holder.clone();
    moved.spec.host = Some("else.example".into());
    assert_eq!(index.upsert_instance_now(&moved), wakes(&[("b", "first")]));
    assert!(decide(&mut index, &waiting).is_err());
    // Its Ingress moved too: the waiting one is woken, and gets the host.
    let moved_ingress = ingress("a", "acme", "acme", &["else.example"]);
    assert_eq!(
        index.upsert_ingress(&moved_ingress),
        wakes(&[("b", "first")])
    );
    assert_eq!(decide(&mut index, &waiting), Ok(()));

    // The holder deleted: its Ingress, the garbage collector's now, holds
    // nothing; the reservation for a recreation does, until it ends.
    let mut index = self::index();
    index.upsert_instance_now(&holder);
    index.upsert_instance_now(&waiting);
    index.upsert_ingress(&served);
    assert!(decide(&mut index, &waiting).is_err());
    assert_eq!(index.remove_instance_now(&holder), wakes(&[("b", "first")]));
    assert!(decide(&mut index, &waiting).is_err());
    assert_eq!(decide_at(&mut index, &waiting, after_reservation()), Ok(()));
    assert_eq!(index.remove_ingress(&served), wakes(&[("b", "first")]));

    // Not ours: no label, or a label naming another instance than the controller.
    let mut index = self::index();
    index.upsert_instance_now(&waiting);
    let mut unlabelled = ingress("a", "x", "acme", &["shop.example"]);
    unlabelled.metadata.labels = None;
    let mut mislabelled = ingress("a", "y", "acme", &["shop.example"]);
    mislabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kura.dev/instance".into(), "other".into());
    for i in [&unlabelled, &mislabelled] {
        assert_eq!(index.upsert_ingress(i), []);
    }
    assert_eq!(decide(&mut index, &waiting), Ok(()));
}

/// A preview's stand-in for the write of the holder's Ingress: the hosts its
/// rules move off are free for those waiting, as after the watch event.
#[test]
fn rewriting_an_ingress_s_hosts_frees_what_it_moved_off() {
    let mut index = index();
    let holder = instance("acme", "a", 9, Some("shop.example"), &[]);
    let waiting = instance("first", "b", 0, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    index.upsert_instance_now(&waiting);
    index.upsert_ingress(&ingress("a", "acme", "acme", &["shop.example"]));
    let mut moved = holder.clone();
    moved.spec.host = Some("else.example".into());
    index.upsert_instance_now(&moved);
    assert!(decide(&mut index, &waiting).is_err());
    // Hosts unchanged: nobody woken, nothing freed.
    assert_eq!(
        index.rewrite_hosts("a", "acme", ["shop.example".to_string()]),
        []
    );
    assert!(decide(&mut index, &waiting).is_err());
    assert_eq!(
        index.rewrite_hosts("a", "acme", ["else.example".to_string()]),
        wakes(&[("b", "first")])
    );
    assert_eq!(decide(&mut index, &waiting), Ok(()));
    // An Ingress not indexed (one to be created) changes nothing.
    assert_eq!(
        index.rewrite_hosts("a", "new", ["shop.example".to_string()]),
        []
    );
}

#[test]
fn a_relist_replaces_everything_and_wakes_those_concerned() {
    let mut index = index();
    let holder = instance("acme", "a", 0, Some("shop.example"), &[]);
    let waiting = instance("next", "b", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    index.upsert_instance_now(&waiting);
    decide(&mut index, &holder).unwrap();
    let served = ingress("a", "acme", "acme", &["shop.example"]);
    index.upsert_ingress(&served);
    // The holder and its Ingress went while the watches were down.
    assert_eq!(
        index.reset_instances([&waiting], now()),
        wakes(&[("b", "next")])
    );
    assert_eq!(index.reset_ingresses([]), wakes(&[("b", "next")]));
    // Gone unseen is deleted all the same: reserved for a recreation.
    assert!(decide(&mut index, &waiting).is_err());
    assert_eq!(decide_at(&mut index, &waiting, after_reservation()), Ok(()));
}

#[test]
fn a_new_domain_moves_default_hosts() {
    let mut index = index();
    let defaulted = instance("acme", "a", 0, None, &[]);
    let own = instance("own", "b", 5, Some(H), &[]);
    index.upsert_instance_now(&defaulted);
    index.upsert_instance_now(&own);
    assert!(decide(&mut index, &own).is_err());
    let mut moved = config();
    moved.regions.get_mut("fra-metal").unwrap().domain = "elsewhere.example".into();
    assert!(index.set_config(&moved));
    assert!(!index.set_config(&moved), "unchanged");
    let me = Claimant::of(&own).unwrap();
    let wanted = hosts(&HostInputs::from(&own.spec), Some("elsewhere.example"));
    assert_eq!(
        check(&me, &wanted, &index.standings(&[H.to_string()]), now()),
        Ok(())
    );
}

/// Issue 22.10: an Ingress labelled as ours and controlled by an instance is
/// not a claim unless the operator applied its rules, and even then it takes
/// nothing from an instance that served the host before it was created.
#[test]
fn a_labelled_ingress_is_not_a_claim() {
    let mut index = index();
    // The forger's instance is the older: by creation it would go first.
    let forger = instance("aaa", "t", 0, Some("shop.example"), &[]);
    let holder = instance("holder", "a", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    decide_at(&mut index, &holder, at(10).unwrap()).unwrap();
    let mut theirs = ingress("a", "holder", "holder", &["shop.example"]);
    theirs.metadata.creation_timestamp = at(11).map(Time);
    index.upsert_ingress(&theirs);
    index.upsert_instance_now(&forger);

    // Created by the tenant (its own manager holds the rules): serves nothing.
    let mut forged = ingress("t", "forged", "aaa", &["shop.example"]);
    forged.metadata.creation_timestamp = at(20).map(Time);
    forged.metadata.managed_fields = serde_json::from_value(json!([
        {"manager": "kubectl-create", "operation": "Update",
         "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:rules": {}}}},
    ]))
    .unwrap();
    assert_eq!(index.upsert_ingress(&forged), []);
    let standings = index.standings(&["shop.example".to_string()]);
    assert!(
        standings
            .iter()
            .all(|s| s.claimant.name != "aaa" || s.hold == Hold::Asks),
        "{standings:?}"
    );
    // Applied under the operator's own manager name: it serves, since it was
    // created, after the holder; the holder keeps the host.
    let mut named_ours = ingress("t", "forged", "aaa", &["shop.example"]);
    named_ours.metadata.creation_timestamp = at(20).map(Time);
    index.upsert_ingress(&named_ours);
    assert_eq!(decide(&mut index, &holder), Ok(()));
    let lost = decide(&mut index, &forger).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "a/holder");
    assert!(lost.0[0].also_served_here);
    // After a restart (no grants), the holder's Ingress is still the earlier.
    let mut restarted = self::index();
    restarted.upsert_instance_now(&holder);
    restarted.upsert_instance_now(&forger);
    restarted.reset_ingresses([&named_ours, &theirs]);
    assert_eq!(decide(&mut restarted, &holder), Ok(()));
    assert!(decide(&mut restarted, &forger).is_err());
}

/// Of another manager, only what it holds alone takes the rules from us.
#[test]
fn rules_shared_with_another_manager_are_still_ours() {
    let mut index = index();
    let holder = instance("holder", "a", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    let mut shared = ingress("a", "holder", "holder", &["shop.example"]);
    shared.metadata.managed_fields.as_mut().unwrap().push(
        serde_json::from_value(json!(
            {"manager": "kubectl", "operation": "Update",
             "fieldsV1": {"f:spec": {"f:rules": {}}, "f:metadata": {"f:annotations": {}}}}
        ))
        .unwrap(),
    );
    index.upsert_ingress(&shared);
    let standings = index.standings(&["shop.example".to_string()]);
    assert_eq!(standings[0].hold, serves(0));
    // The same, compacted as the caches keep it.
    let mut cached = shared.clone();
    crate::compact::compact_child(&mut cached);
    let mut index = self::index();
    index.upsert_instance_now(&holder);
    index.upsert_ingress(&cached);
    assert_eq!(
        index.standings(&["shop.example".to_string()])[0].hold,
        serves(0)
    );
    // An entry of ours without the rules: another manager holds them alone.
    let mut taken = shared.clone();
    let entries = taken.metadata.managed_fields.as_mut().unwrap();
    entries[0].fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
        json!({"f:metadata": {"f:labels": {}}}),
    ));
    crate::compact::compact_child(&mut taken);
    let mut index = self::index();
    index.upsert_instance_now(&holder);
    index.upsert_ingress(&taken);
    assert_eq!(
        index.standings(&["shop.example".to_string()])[0].hold,
        Hold::Asks
    );
}

/// Issue 22.11: a paused instance, or one last found invalid, asks for no
/// host; it keeps what it serves; pausing or unpausing wakes those waiting.
#[test]
fn paused_and_invalid_instances_ask_for_nothing() {
    let mut index = index();
    let mut squatter = instance("squatter", "t", 0, Some("shop.example"), &[]);
    squatter.spec.paused = true;
    let user = instance("user", "a", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&squatter);
    index.upsert_instance_now(&user);
    assert_eq!(decide(&mut index, &user), Ok(()));
    // Unpaused, it asks again (and wakes the others asking), and waits.
    let mut unpaused = squatter.clone();
    unpaused.spec.paused = false;
    assert_eq!(
        index.upsert_instance_now(&unpaused),
        wakes(&[("a", "user")])
    );
    let lost = decide(&mut index, &unpaused).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "a/user");

    // Invalid: stands down (waking those it went before) until decided again.
    let mut index = self::index();
    let older = instance("older", "t", 0, Some("shop.example"), &[]);
    index.upsert_instance_now(&older);
    index.upsert_instance_now(&user);
    assert!(decide(&mut index, &user).is_err());
    assert_eq!(index.stand_down("uid-t-older"), wakes(&[("a", "user")]));
    assert_eq!(index.stand_down("uid-t-older"), [], "once");
    assert_eq!(decide(&mut index, &user), Ok(()));
    // Valid again, it is decided: the host is served by then.
    assert!(decide(&mut index, &older).is_err());

    // A holder paused keeps what it serves.
    let mut index = self::index();
    let mut holder = instance("holder", "a", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    index.upsert_ingress(&ingress("a", "holder", "holder", &["shop.example"]));
    holder.spec.paused = true;
    index.upsert_instance_now(&holder);
    let lost = decide(&mut index, &older).unwrap_err();
    assert!(lost.0[0].holder_serves);
}

/// Issue 22.11: a deleted holder's hosts are reserved for an instance of the
/// same namespace and name, which takes them back when recreated.
#[test]
fn a_recreated_holder_takes_its_hosts_back() {
    let mut index = index();
    let holder = instance("holder", "a", 0, Some("shop.example"), &["alias.example"]);
    let next = instance("next", "b", 5, Some("shop.example"), &[]);
    index.upsert_instance_now(&holder);
    index.upsert_instance_now(&next);
    decide(&mut index, &holder).unwrap();
    index.upsert_ingress(&ingress("a", "holder", "holder", &["shop.example"]));
    assert_eq!(index.remove_instance_now(&holder), wakes(&[("b", "next")]));
    let lost = decide(&mut index, &next).unwrap_err();
    assert_eq!(lost.0[0].reserved_until, Some(after_reservation()));
    // Recreated: another uid, created later; the same namespace and name.
    let mut again = instance("holder", "a", 600, Some("shop.example"), &["alias.example"]);
    again.metadata.uid = Some("uid-recreated".into());
    index.upsert_instance_now(&again);
    assert_eq!(decide(&mut index, &again), Ok(()));
    // The reservation is used up: the recreated instance holds by its grant.
    let lost = decide_at(&mut index, &next, after_reservation()).unwrap_err();
    assert_eq!(lost.0[0].holder.uid, "uid-recreated");
    assert_eq!(lost.0[0].reserved_until, None);
    // Another instance of that name in another namespace gets nothing.
    let mut index = self::index();
    index.upsert_instance_now(&holder);
    decide(&mut index, &holder).unwrap();
    index.remove_instance_now(&holder);
    let namesake = instance("holder", "b", 600, Some("shop.example"), &[]);
    index.upsert_instance_now(&namesake);
    assert!(decide(&mut index, &namesake).is_err());
}
