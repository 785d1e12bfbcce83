//! Who holds a host, as a table over plain values; the hosts of an instance;
//! the index as the watches feed it.

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::index::Index;
use super::*;
use crate::config::OperatorConfig;

const CONFIG: &str = include_str!("../../examples/config.yaml");

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

fn standing(host: &str, c: &Claimant, serving: bool) -> Standing {
    Standing {
        host: host.into(),
        claimant: c.clone(),
        serving,
    }
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
    let mine = |serving| standing(H, &me, serving);
    // (case, standings on H besides me, whether I hold H, the holder named)
    let cases: Vec<(&str, Vec<Standing>, Option<&Claimant>)> = vec![
        ("alone", vec![], None),
        ("alone, serving", vec![mine(true)], None),
        (
            "an older claimant goes first",
            vec![standing(H, &older, false)],
            Some(&older),
        ),
        (
            "a younger claimant waits",
            vec![standing(H, &younger, false)],
            None,
        ),
        (
            "created in the same second: by namespace, then name",
            vec![standing(H, &same_second_first, false)],
            Some(&same_second_first),
        ),
        (
            "created in the same second, after me by namespace",
            vec![standing(H, &same_second_after, false)],
            None,
        ),
        (
            "a younger one that serves keeps it",
            vec![standing(H, &younger, true)],
            Some(&younger),
        ),
        (
            "serving, I keep it from an older claimant",
            vec![mine(true), standing(H, &older, false)],
            None,
        ),
        (
            "both serve: the older keeps it",
            vec![mine(true), standing(H, &older, true)],
            Some(&older),
        ),
        (
            "both serve: a younger one does not take it",
            vec![mine(true), standing(H, &younger, true)],
            None,
        ),
        (
            "no creation time: last",
            vec![standing(H, &unknown, false)],
            None,
        ),
        (
            "a standing on another host does not count",
            vec![standing("other.example", &older, true)],
            None,
        ),
    ];
    for (case, standings, holder) in cases {
        let result = check(&me, &[claim(H, "spec.host")], &standings);
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
    let conflict = check(&me, &hosts, &[standing(H, &holder, true)]).unwrap_err();
    assert_eq!(
        conflict.to_string(),
        format!("spec.aliases[0]: host {H:?} is served by instance a/acme")
    );
    let waiting = check(&me, &hosts, &[standing(H, &holder, false)]).unwrap_err();
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
        &[standing(H, &holder, true), standing(H, &me, true)],
    )
    .unwrap_err();
    assert!(
        both.to_string()
            .contains("this instance's Ingress for it is left in place")
    );
}

fn inputs(host: Option<&str>, aliases: &[&str]) -> HostInputs {
    HostInputs {
        host: host.map(Into::into),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        account: "acme".into(),
        region: "fra-metal".into(),
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

fn ingress(namespace: &str, name: &str, instance: &str, hosts: &[&str]) -> Ingress {
    let rules: Vec<_> = hosts.iter().map(|h| json!({"host": h})).collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": namespace,
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
    let mut index = Index::default();
    index.set_config(&config());
    index
}

fn decide(index: &mut Index, i: &KuraInstance) -> Result<(), Conflict> {
    let me = Claimant::of(i).unwrap();
    let domain = config().regions[&i.spec.region].domain.clone();
    let wanted = hosts(&HostInputs::from(&i.spec), Some(&domain));
    let names: Vec<String> = wanted.iter().map(|h| h.host.clone()).collect();
    check(&me, &wanted, &index.standings(&names))?;
    index.grant(&me, &names);
    Ok(())
}

#[test]
fn the_index_follows_instances_and_wakes_those_waiting() {
    let mut index = index();
    let first = instance("acme", "a", 0, None, &[]);
    let second = instance("acme", "b", 5, None, &[]);
    let alias = instance("other", "b", 9, Some("other.example"), &[H]);
    assert_eq!(index.upsert_instance(&first), []);
    // A newcomer on a taken host wakes the others asking for it (harmless:
    // they still hold it or still wait).
    assert_eq!(index.upsert_instance(&second), wakes(&[("a", "acme")]));
    assert_eq!(
        index.upsert_instance(&alias),
        wakes(&[("a", "acme"), ("b", "acme")])
    );
    assert_eq!(decide(&mut index, &first), Ok(()));
    let lost = decide(&mut index, &second).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "a/acme");
    let lost = decide(&mut index, &alias).unwrap_err();
    assert_eq!(lost.0[0].field, "spec.aliases[0]");
    // A status write (same hosts) wakes nobody.
    assert_eq!(index.upsert_instance(&first), []);
    // The holder deleted: both claimants are woken; the older wins.
    assert_eq!(
        index.remove_instance(&first),
        wakes(&[("b", "acme"), ("b", "other")])
    );
    assert_eq!(decide(&mut index, &second), Ok(()));
    let lost = decide(&mut index, &alias).unwrap_err();
    assert_eq!(lost.0[0].holder.to_string(), "b/acme");
    // The holder moves to another host: the waiting one is woken and wins.
    let mut moved = second.clone();
    moved.spec.host = Some("elsewhere.example".into());
    assert_eq!(index.upsert_instance(&moved), wakes(&[("b", "other")]));
    assert_eq!(decide(&mut index, &alias), Ok(()));
}

#[test]
fn a_grant_holds_until_the_holder_lets_go() {
    let mut index = index();
    // The younger one was reconciled before the older entered the cache.
    let younger = instance("young", "a", 5, Some("shop.example"), &[]);
    let older = instance("old", "a", 0, Some("shop.example"), &[]);
    index.upsert_instance(&younger);
    assert_eq!(decide(&mut index, &younger), Ok(()));
    index.upsert_instance(&older);
    // Its Ingress is not in the cache yet; the grant holds the host.
    let lost = decide(&mut index, &older).unwrap_err();
    assert!(lost.0[0].holder_serves, "{lost}");
    assert_eq!(decide(&mut index, &younger), Ok(()));
    // Asking for another host lets go of the grant.
    let mut moved = younger.clone();
    moved.spec.host = Some("else.example".into());
    index.upsert_instance(&moved);
    assert_eq!(decide(&mut index, &older), Ok(()));
    // So does deletion.
    let mut index = self::index();
    index.upsert_instance(&younger);
    decide(&mut index, &younger).unwrap();
    index.upsert_instance(&older);
    index.remove_instance(&younger);
    assert_eq!(decide(&mut index, &older), Ok(()));
}

#[test]
fn ingresses_of_ours_serve_while_their_instance_lives() {
    let mut index = index();
    let holder = instance("acme", "a", 9, Some("shop.example"), &[]);
    let waiting = instance("first", "b", 0, Some("shop.example"), &[]);
    index.upsert_instance(&holder);
    index.upsert_instance(&waiting);
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
    assert_eq!(index.upsert_instance(&moved), wakes(&[("b", "first")]));
    assert!(decide(&mut index, &waiting).is_err());
    // Its Ingress moved too: the waiting one is woken, and gets the host.
    let moved_ingress = ingress("a", "acme", "acme", &["else.example"]);
    assert_eq!(
        index.upsert_ingress(&moved_ingress),
        wakes(&[("b", "first")])
    );
    assert_eq!(decide(&mut index, &waiting), Ok(()));

    // The holder deleted: its Ingress, the garbage collector's now, holds nothing.
    let mut index = self::index();
    index.upsert_instance(&holder);
    index.upsert_instance(&waiting);
    index.upsert_ingress(&served);
    assert!(decide(&mut index, &waiting).is_err());
    assert_eq!(index.remove_instance(&holder), wakes(&[("b", "first")]));
    assert_eq!(decide(&mut index, &waiting), Ok(()));
    assert_eq!(index.remove_ingress(&served), wakes(&[("b", "first")]));

    // Not ours: no label, or a label naming another instance than the controller.
    let mut index = self::index();
    index.upsert_instance(&waiting);
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

#[test]
fn a_relist_replaces_everything_and_wakes_those_concerned() {
    let mut index = index();
    let holder = instance("acme", "a", 0, Some("shop.example"), &[]);
    let waiting = instance("next", "b", 5, Some("shop.example"), &[]);
    index.upsert_instance(&holder);
    index.upsert_instance(&waiting);
    decide(&mut index, &holder).unwrap();
    let served = ingress("a", "acme", "acme", &["shop.example"]);
    index.upsert_ingress(&served);
    // The holder and its Ingress went while the watches were down.
    assert_eq!(index.reset_instances([&waiting]), wakes(&[("b", "next")]));
    assert_eq!(index.reset_ingresses([]), wakes(&[("b", "next")]));
    assert_eq!(decide(&mut index, &waiting), Ok(()));
}

#[test]
fn a_new_domain_moves_default_hosts() {
    let mut index = index();
    let defaulted = instance("acme", "a", 0, None, &[]);
    let own = instance("own", "b", 5, Some(H), &[]);
    index.upsert_instance(&defaulted);
    index.upsert_instance(&own);
    assert!(decide(&mut index, &own).is_err());
    let mut moved = config();
    moved.regions.get_mut("fra-metal").unwrap().domain = "elsewhere.example".into();
    assert!(index.set_config(&moved));
    assert!(!index.set_config(&moved), "unchanged");
    let me = Claimant::of(&own).unwrap();
    let wanted = hosts(&HostInputs::from(&own.spec), Some("elsewhere.example"));
    assert_eq!(
        check(&me, &wanted, &index.standings(&[H.to_string()])),
        Ok(())
    );
}
