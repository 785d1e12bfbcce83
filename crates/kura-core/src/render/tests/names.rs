//! Generated names over generated identities: every name is valid for its kind
//! (`kube_rules`), and two instances of a namespace never render an object of the
//! same kind and name, except the dedicated gateway an account and region share.
//! Identities are drawn from a small alphabet and from the names of the other
//! instance's own objects, where the reported collisions lived.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::kube_rules::violations;
use super::*;
use crate::config::RegionConfig;
use crate::names;

#[derive(Clone, Debug)]
struct Identity {
    namespace: String,
    name: String,
    account: String,
    region: String,
    aliases: Vec<String>,
}

/// Short names from few letters (so that they meet), and the longest ones.
fn label(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        "[ab][ab1-]{0,4}[ab1]".prop_map(String::from),
        "[a-z][a-z0-9-]{0,60}[a-z0-9]".prop_map(move |s: String| s[..s.len().min(max)].to_string()),
        Just("a".repeat(max)),
    ]
}

fn identity() -> impl Strategy<Value = Identity> {
    (
        prop_oneof![Just("ns".to_string()), Just("n".repeat(63))],
        label(40),
        label(40),
        label(32),
        proptest::collection::btree_set("[ab]{1,3}\\.example", 0..3),
    )
        .prop_map(|(namespace, name, account, region, aliases)| Identity {
            namespace,
            name: name.trim_end_matches('-').to_string(),
            account,
            region,
            aliases: aliases.into_iter().collect(),
        })
}

/// A second identity, often named after one of the first one's objects (as the
/// reported collisions were) or sharing its account and region text.
fn neighbour(first: &Identity) -> impl Strategy<Value = Identity> + use<> {
    let first = first.clone();
    (identity(), 0..6u8).prop_map(move |(mut other, how)| {
        let alias = first.aliases.first().map_or("a.example", String::as_str);
        match how {
            0 => other.name = format!("{}-config", first.name),
            1 => other.name = format!("{}-{}", first.name, names::short_hash(alias, 8)),
            2 => other.name = names::alias_ingress(&first.name, alias),
            3 => other.name = names::gateway(&first.account, &first.region),
            4 => {
                // `a-b`/`c` against `a`/`b-c`: the same text joined another way.
                let joined = format!("{}-{}", first.account, first.region);
                if let Some((account, region)) = joined.split_once('-')
                    && !account.is_empty()
                    && !region.is_empty()
                {
                    (other.account, other.region) = (account.into(), region.into());
                }
            }
            _ => {}
        }
        other.namespace = first.namespace.clone();
        other
    })
}

/// The example configuration with a cloud region of each name (dedicated gateways).
fn config_for(identities: &[&Identity]) -> OperatorConfig {
    let mut config = config();
    let cloud: RegionConfig = config.regions["eu-west-1"].clone();
    for identity in identities {
        config
            .regions
            .insert(identity.region.clone(), cloud.clone());
    }
    config
}

/// The identity rendered, or None when validation refuses it (that is its job).
fn rendered(identity: &Identity, config: &OperatorConfig) -> Option<Desired> {
    let mut instance = example("acme-eu");
    instance.metadata.name = Some(identity.name.clone());
    instance.metadata.namespace = Some(identity.namespace.clone());
    instance.metadata.uid = Some("u".into());
    instance.spec.account = identity.account.clone();
    instance.spec.region = identity.region.clone();
    instance.spec.aliases = identity.aliases.clone();
    instance.spec.host = Some("primary.example".into());
    let valid = validate(&instance, config).ok()?;
    Some(render(&valid, config))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_generated_name_is_valid_for_its_kind(identity in identity()) {
        let config = config_for(&[&identity]);
        if let Some(desired) = rendered(&identity, &config) {
            let found = violations(&desired);
            prop_assert!(found.is_empty(), "{:#?}", found);
        }
    }

    #[test]
    fn two_instances_never_render_the_same_object_but_a_shared_gateway(
        (first, second) in identity().prop_flat_map(|first| (Just(first.clone()), neighbour(&first))),
    ) {
        prop_assume!(first.name != second.name);
        let config = config_for(&[&first, &second]);
        let (Some(a), Some(b)) = (rendered(&first, &config), rendered(&second, &config)) else {
            return Ok(());
        };
        let ids = |d: &Desired| -> BTreeMap<ObjectId, String> {
            d.objects.iter().map(|o| (o.id.clone(), o.hash.clone())).collect()
        };
        let (a_ids, b_ids) = (ids(&a), ids(&b));
        let same_gateway = (&first.account, &first.region) == (&second.account, &second.region);
        for (id, hash) in &a_ids {
            if let Some(other) = b_ids.get(id) {
                prop_assert!(
                    id.kind == crate::kind::ChildKind::KuraGateway && same_gateway && hash == other,
                    "{:?} and {:?} both render {}", first, second, id
                );
            }
        }
    }
}

/// The three reported collisions, pinned.
#[test]
fn the_reported_collisions_cannot_happen() {
    let config = config_for(&[]);
    let mut instance = example("acme-eu");
    instance.metadata.name = Some(names::gateway("acme", "eu-west-1"));
    assert!(
        validate(&instance, &config).is_err(),
        "an instance named like a gateway"
    );

    let mut one = example("acme-eu");
    one.spec.aliases = vec!["cache.acme.example".into()];
    let alias = find(&render_with(&one, &config), "Ingress")
        .iter()
        .map(|o| o.id.name.clone())
        .find(|n| n != "acme-eu")
        .unwrap();
    let mut two = example("acme-eu");
    two.metadata.name = Some(alias.clone());
    assert!(
        validate(&two, &config).is_err(),
        "an instance named {alias}"
    );

    assert_ne!(names::gateway("a-b", "c"), names::gateway("a", "b-c"));
}
