//! What host claims need from the caches, indexed by host and kept up to date
//! per watch event, so that a reconcile looks up its own few hosts instead of
//! going through every instance (the operator runs a thousand).
//!
//! Every change that can free or take a host for someone returns the
//! instances that ask for that host (but not the one that changed, which its
//! own watch already reconciles): those waiting on a holder are reconciled as
//! soon as it lets go (deleted, or another host), not at the next resync.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::few::Few;
use super::{Claimant, Hold, HostInputs, Standing, hosts};
use crate::api::KuraInstance;
use crate::config::OperatorConfig;
use crate::fields::{applied_by, rivals};
use crate::keys::{FIELD_MANAGER, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY_VALUE};

/// How long a deleted holder's hosts stay reserved for an instance of the
/// same namespace and name, unless `--host-reservation` says otherwise: long
/// enough to delete and recreate an instance by hand or by a pipeline.
pub const DEFAULT_RESERVATION: Duration = Duration::from_secs(5 * 60);

/// An instance to reconcile: namespace and name.
pub type Wake = (String, String);

#[derive(Debug)]
pub struct Index {
    /// How long a deleted holder's hosts stay reserved.
    reservation: Duration,
    /// Region → domain, for default hosts: those of the configuration last seen.
    domains: BTreeMap<String, String>,
    /// By uid.
    instances: HashMap<String, Entry>,
    /// Host → uids of the instances asking for it.
    claimed: HashMap<String, Few<String>>,
    /// Ingresses of ours by namespace/name, with the hosts they serve.
    ingresses: HashMap<(String, String), Served>,
    /// Host → the Ingresses of ours serving it.
    served: HashMap<String, Few<(String, String)>>,
    /// Host → the instance this process gave it to, and when it first did.
    grants: HashMap<String, (Claimant, Timestamp)>,
    /// Uid → the hosts granted to it.
    granted: HashMap<String, Few<String>>,
    /// Host → the deleted instance it is reserved for.
    reserved: HashMap<String, Reservation>,
}

#[derive(Debug)]
struct Entry {
    claimant: Claimant,
    inputs: HostInputs,
    hosts: Few<String>,
    /// Last found invalid (`stand_down`): it asks for nothing until it is
    /// decided again or its hosts change.
    stood_down: bool,
}

impl Entry {
    /// Whether it asks for its hosts: only an instance that could be granted them.
    fn asks(&self) -> bool {
        !self.inputs.paused && !self.stood_down
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Served {
    /// The controlling instance (its `created` is unknown here: its entry has it).
    holder: Claimant,
    hosts: Few<String>,
    /// The Ingress's `creationTimestamp`: the apiserver's, nobody else's.
    since: Option<Timestamp>,
}

#[derive(Clone, Debug)]
struct Reservation {
    /// The deleted holder (its namespace and name are what count).
    holder: Claimant,
    since: Option<Timestamp>,
    until: Timestamp,
}

impl Default for Index {
    fn default() -> Self {
        Index::new(DEFAULT_RESERVATION)
    }
}

impl Index {
    pub fn new(reservation: Duration) -> Index {
        Index {
            reservation,
            domains: BTreeMap::new(),
            instances: HashMap::new(),
            claimed: HashMap::new(),
            ingresses: HashMap::new(),
            served: HashMap::new(),
            grants: HashMap::new(),
            granted: HashMap::new(),
            reserved: HashMap::new(),
        }
    }

    /// Follow the configuration's domains (default hosts). Returns whether
    /// they changed; every instance is reconciled on a change anyway.
    pub fn set_config(&mut self, config: &OperatorConfig) -> bool {
        let same = self.domains.len() == config.regions.len()
            && self
                .domains
                .iter()
                .zip(&config.regions)
                .all(|((r, d), (region, c))| r == region && *d == c.domain);
        if same {
            return false;
        }
        self.domains = config
            .regions
            .iter()
            .map(|(r, c)| (r.clone(), c.domain.clone()))
            .collect();
        let entries: Vec<(Claimant, HostInputs)> = self
            .instances
            .values()
            .map(|e| (e.claimant.clone(), e.inputs.clone()))
            .collect();
        for (claimant, inputs) in entries {
            self.put_instance(claimant, inputs);
        }
        true
    }

    /// An instance added or changed (a deleting one claims nothing more), at `now`.
    pub fn upsert_instance(&mut self, instance: &KuraInstance, now: Timestamp) -> Vec<Wake> {
        let Some(claimant) = Claimant::of(instance) else {
            return Vec::new();
        };
        if instance.metadata.deletion_timestamp.is_some() {
            return self.remove_instance(instance, now);
        }
        let uid = claimant.uid.clone();
        // Most events are status writes: nothing to do for them.
        if self
            .instances
            .get(&uid)
            .is_some_and(|e| e.inputs.same_as(&instance.spec))
        {
            return Vec::new();
        }
        let before = self
            .instances
            .get(&uid)
            .map(|e| (e.hosts.clone(), e.asks()));
        self.put_instance(claimant, HostInputs::from(&instance.spec));
        let after = &self.instances[&uid];
        let changed: BTreeSet<String> = match before {
            // Paused or unpaused: it stops or starts asking for all of them.
            Some((before, asked)) if asked != after.asks() => {
                before.union(&after.hosts).cloned().collect()
            }
            Some((before, _)) => before.symmetric_difference(&after.hosts).cloned().collect(),
            None => after.hosts.iter().cloned().collect(),
        };
        self.waiting_on(&changed, &[&uid])
    }

    /// An instance deleted at `now`: the hosts it held are reserved for its
    /// namespace and name.
    pub fn remove_instance(&mut self, instance: &KuraInstance, now: Timestamp) -> Vec<Wake> {
        let Some(uid) = instance.metadata.uid.as_deref() else {
            return Vec::new();
        };
        let Some(entry) = self.take_instance(uid, now) else {
            return Vec::new();
        };
        self.waiting_on(&entry.hosts, &[uid])
    }

    /// `uid` was found invalid: it asks for nothing until it is decided again
    /// (or its hosts change). Wakes those it went before.
    pub fn stand_down(&mut self, uid: &str) -> Vec<Wake> {
        let Some(entry) = self.instances.get_mut(uid).filter(|e| !e.stood_down) else {
            return Vec::new();
        };
        entry.stood_down = true;
        let hosts = entry.hosts.clone();
        self.waiting_on(&hosts, &[uid])
    }

    /// The cache listed anew (a watch restarted) at `now`: replace every instance.
    pub fn reset_instances<'a>(
        &mut self,
        all: impl IntoIterator<Item = &'a KuraInstance>,
        now: Timestamp,
    ) -> Vec<Wake> {
        let before = self.claimed.clone();
        let live: BTreeMap<String, (Claimant, HostInputs)> = all
            .into_iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
            .filter_map(|i| Some((Claimant::of(i)?, HostInputs::from(&i.spec))))
            .map(|(c, inputs)| (c.uid.clone(), (c, inputs)))
            .collect();
        // Those gone while the watch was down were deleted: they reserve
        // what they held, as on a delete event.
        let gone: Vec<String> = self
            .instances
            .keys()
            .filter(|uid| !live.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.take_instance(&uid, now);
        }
        for (_, (c, inputs)) in live {
            self.put_instance(c, inputs);
        }
        let changed: BTreeSet<String> = before
            .into_iter()
            .filter(|(host, uids)| self.claimed.get(host) != Some(uids))
            .map(|(host, _)| host)
            .collect();
        self.waiting_on(&changed, &[])
    }

    /// An Ingress of ours added or changed (one being deleted serves nothing).
    pub fn upsert_ingress(&mut self, ingress: &Ingress) -> Vec<Wake> {
        let Some(key) = ingress_key(ingress) else {
            return Vec::new();
        };
        let before = self.ingresses.remove(&key);
        if let Some(b) = &before {
            unindex(&mut self.served, &b.hosts, &key);
        }
        let after = served_by(ingress);
        if let Some(a) = &after {
            index(&mut self.served, &a.hosts, &key);
        }
        let changed = served_change(before.as_ref(), after.as_ref());
        let holders: Vec<String> = [&before, &after]
            .into_iter()
            .flatten()
            .map(|s| s.holder.uid.clone())
            .collect();
        if let Some(a) = after {
            self.ingresses.insert(key, a);
        }
        let holders: Vec<&str> = holders.iter().map(String::as_str).collect();
        self.waiting_on(&changed, &holders)
    }

    /// Our Ingress `namespace/name` serves `hosts` from now on: the rules an
    /// apply about to be sent gives it. A preview's stand-in for the watch
    /// event that follows the write, so that what the holder's own change
    /// frees is seen free by those waiting for it. An Ingress not indexed (to
    /// be created) changes nothing: the grant before the apply holds its hosts.
    pub fn rewrite_hosts(
        &mut self,
        namespace: &str,
        name: &str,
        hosts: impl IntoIterator<Item = String>,
    ) -> Vec<Wake> {
        let key = (namespace.to_string(), name.to_string());
        let Some(served) = self.ingresses.get_mut(&key) else {
            return Vec::new();
        };
        let hosts: Few<String> = hosts.into_iter().collect();
        let before = std::mem::replace(&mut served.hosts, hosts.clone());
        let holder = served.holder.uid.clone();
        unindex(&mut self.served, &before, &key);
        index(&mut self.served, &hosts, &key);
        let changed: Vec<String> = before.symmetric_difference(&hosts).cloned().collect();
        self.waiting_on(&changed, &[&holder])
    }

    pub fn remove_ingress(&mut self, ingress: &Ingress) -> Vec<Wake> {
        let Some(key) = ingress_key(ingress) else {
            return Vec::new();
        };
        let Some(before) = self.ingresses.remove(&key) else {
            return Vec::new();
        };
        unindex(&mut self.served, &before.hosts, &key);
        self.waiting_on(&before.hosts, &[&before.holder.uid])
    }

    /// The cache listed anew: replace every Ingress.
    pub fn reset_ingresses<'a>(&mut self, all: impl IntoIterator<Item = &'a Ingress>) -> Vec<Wake> {
        self.ingresses.clear();
        let served_before = std::mem::take(&mut self.served);
        for ingress in all {
            if let (Some(key), Some(s)) = (ingress_key(ingress), served_by(ingress)) {
                index(&mut self.served, &s.hosts, &key);
                self.ingresses.insert(key, s);
            }
        }
        let changed: BTreeSet<String> = served_before
            .keys()
            .chain(self.served.keys())
            .filter(|h| served_before.get(*h) != self.served.get(*h))
            .cloned()
            .collect();
        self.waiting_on(&changed, &[])
    }

    /// Every instance's standing on `hosts`: those asking for one, those
    /// serving one (also when they no longer ask for it), those granted one,
    /// the deleted ones it is reserved for. Only instances in the cache hold
    /// or ask.
    pub fn standings(&self, hosts: &[String]) -> Vec<Standing> {
        let mut out = Vec::new();
        for host in hosts {
            let mut seen: BTreeMap<&str, Standing> = BTreeMap::new();
            for (uid, since, granted) in self.holders(host) {
                // An Ingress of an instance gone from the cache (deleted) is
                // the garbage collector's: it holds nothing.
                let Some(entry) = self.instances.get(uid) else {
                    continue;
                };
                let held = seen.entry(uid).or_insert_with(|| Standing {
                    host: host.clone(),
                    claimant: entry.claimant.clone(),
                    hold: Hold::Serves { since, granted },
                });
                if let Hold::Serves {
                    since: earliest,
                    granted: by_us,
                } = &mut held.hold
                {
                    *earliest = earliest_of(*earliest, since);
                    *by_us |= granted;
                }
            }
            for uid in self.claimed.get(host).into_iter().flatten() {
                let entry = &self.instances[uid];
                if entry.asks() && !seen.contains_key(uid.as_str()) {
                    seen.insert(
                        uid,
                        Standing {
                            host: host.clone(),
                            claimant: entry.claimant.clone(),
                            hold: Hold::Asks,
                        },
                    );
                }
            }
            out.extend(seen.into_values());
            if let Some(r) = self.reserved.get(host) {
                out.push(Standing {
                    host: host.clone(),
                    claimant: r.holder.clone(),
                    hold: Hold::Reserved {
                        since: r.since,
                        until: r.until,
                    },
                });
            }
        }
        out
    }

    /// Who serves `host` (by uid), and since when: its Ingresses of ours
    /// and the grant of this process.
    /// Who holds `host`, since when, and whether by this process's grant.
    fn holders<'a>(
        &'a self,
        host: &str,
    ) -> impl Iterator<Item = (&'a str, Option<Timestamp>, bool)> {
        let ingresses = self
            .served
            .get(host)
            .into_iter()
            .flatten()
            .filter_map(|key| self.ingresses.get(key))
            .map(|s| (s.holder.uid.as_str(), s.since, false));
        let grant = self
            .grants
            .get(host)
            .map(|(c, at)| (c.uid.as_str(), Some(*at), true));
        ingresses.chain(grant)
    }

    /// `me` won `hosts` at `now`: it holds them from now on in this process,
    /// until it asks for other hosts or is deleted. A host granted before
    /// keeps its first grant's time (the order of holders), and a
    /// reservation for `me`'s namespace and name is used up.
    pub fn grant(&mut self, me: &Claimant, hosts: &[String], now: Timestamp) {
        let keep: Few<String> = hosts.iter().cloned().collect();
        self.drop_grants(&me.uid, &keep);
        for host in hosts {
            let since = match self.grants.get(host) {
                Some((c, at)) if c.uid == me.uid => *at,
                _ => now,
            };
            self.grants.insert(host.clone(), (me.clone(), since));
            if self
                .reserved
                .get(host)
                .is_some_and(|r| r.holder.namespace == me.namespace && r.holder.name == me.name)
            {
                self.reserved.remove(host);
            }
        }
        self.granted.insert(me.uid.clone(), keep);
        if let Some(entry) = self.instances.get_mut(&me.uid) {
            entry.stood_down = false;
        }
    }

    fn put_instance(&mut self, claimant: Claimant, inputs: HostInputs) {
        let uid = claimant.uid.clone();
        if let Some(old) = self.instances.remove(&uid) {
            unindex(&mut self.claimed, &old.hosts, &uid);
        }
        let domain = self.domains.get(&inputs.region).map(String::as_str);
        let hosts: Few<String> = hosts(&inputs, domain).into_iter().map(|h| h.host).collect();
        index(&mut self.claimed, &hosts, &uid);
        // A host it no longer asks for is no longer its to keep.
        self.drop_grants(&uid, &hosts);
        self.instances.insert(
            uid,
            Entry {
                claimant,
                inputs,
                hosts,
                stood_down: false,
            },
        );
    }

    /// An instance gone at `now`: what it held is reserved for its namespace
    /// and name.
    fn take_instance(&mut self, uid: &str, now: Timestamp) -> Option<Entry> {
        self.reserved.retain(|_, r| now < r.until);
        let held = self.held_by(uid);
        let entry = self.instances.remove(uid)?;
        unindex(&mut self.claimed, &entry.hosts, uid);
        self.drop_grants(uid, &Few::new());
        let until = now + self.reservation;
        for (host, since) in held {
            let holder = entry.claimant.clone();
            self.reserved.insert(
                host,
                Reservation {
                    holder,
                    since,
                    until,
                },
            );
        }
        Some(entry)
    }

    /// The hosts `uid` holds (serves or was granted), each since when: only
    /// those it goes first on, so that a reservation never outranks a holder
    /// that went before it.
    fn held_by(&self, uid: &str) -> Vec<(String, Option<Timestamp>)> {
        let Some(me) = self.instances.get(uid) else {
            return Vec::new();
        };
        let mut hosts: BTreeSet<&String> = self.granted.get(uid).into_iter().flatten().collect();
        hosts.extend(
            self.ingresses
                .values()
                .filter(|s| s.holder.uid == uid)
                .flat_map(|s| &s.hosts),
        );
        let mut out = Vec::new();
        for host in hosts {
            let standings = self.standings(std::slice::from_ref(host));
            let first = standings
                .iter()
                .filter(|s| s.hold != Hold::Asks)
                .min_by(|a, b| a.rank().cmp(&b.rank()));
            if let Some(s) = first.filter(|s| s.claimant.uid == me.claimant.uid)
                && let Hold::Serves { since, .. } = s.hold
            {
                out.push((host.clone(), since));
            }
        }
        out
    }

    /// Drop the grants of `uid` except those of `keep`.
    fn drop_grants(&mut self, uid: &str, keep: &Few<String>) {
        let Some(granted) = self.granted.get_mut(uid) else {
            return;
        };
        for host in granted.iter().filter(|h| !keep.contains(*h)) {
            if self.grants.get(host).is_some_and(|(c, _)| c.uid == uid) {
                self.grants.remove(host);
            }
        }
        granted.retain(|h| keep.contains(h));
        if granted.is_empty() {
            self.granted.remove(uid);
        }
    }

    /// The instances asking for any of `hosts`, except `except` (uids).
    fn waiting_on<'a>(
        &self,
        hosts: impl IntoIterator<Item = &'a String>,
        except: &[&str],
    ) -> Vec<Wake> {
        let mut out: BTreeSet<Wake> = BTreeSet::new();
        for host in hosts {
            for uid in self.claimed.get(host).into_iter().flatten() {
                if !except.contains(&uid.as_str()) {
                    let c = &self.instances[uid].claimant;
                    out.insert((c.namespace.clone(), c.name.clone()));
                }
            }
        }
        out.into_iter().collect()
    }
}

fn index<K: Ord + Clone>(map: &mut HashMap<String, Few<K>>, hosts: &Few<String>, key: &K) {
    for host in hosts {
        map.entry(host.clone()).or_default().insert(key.clone());
    }
}

fn unindex<K: Ord + ?Sized, Q: Ord + std::borrow::Borrow<K>>(
    map: &mut HashMap<String, Few<Q>>,
    hosts: &Few<String>,
    key: &K,
) {
    for host in hosts {
        if let Some(keys) = map.get_mut(host) {
            keys.remove(key);
            if keys.is_empty() {
                map.remove(host);
            }
        }
    }
}

fn ingress_key(ingress: &Ingress) -> Option<(String, String)> {
    Some((
        ingress.metadata.namespace.clone()?,
        ingress.metadata.name.clone()?,
    ))
}

/// The hosts an Ingress serves for an instance: one of ours (labelled as the
/// instance's, controlled by it, its rules applied by the operator), not
/// being deleted; `None` otherwise.
fn served_by(ingress: &Ingress) -> Option<Served> {
    let m = &ingress.metadata;
    if m.deletion_timestamp.is_some() || !rules_applied_by_us(m) {
        return None;
    }
    let labels = m.labels.as_ref()?;
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    let controller = m
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))?;
    if controller.kind != "KuraInstance"
        || !controller.api_version.starts_with("kura.dev/")
        || labels.get(LABEL_INSTANCE) != Some(&controller.name)
    {
        return None;
    }
    let hosts: Few<String> = ingress
        .spec
        .iter()
        .flat_map(|s| s.rules.iter().flatten())
        .filter_map(|r| r.host.clone())
        .collect();
    Some(Served {
        holder: Claimant {
            namespace: m.namespace.clone()?,
            name: controller.name.clone(),
            uid: controller.uid.clone(),
            created: None,
        },
        hosts,
        since: m.creation_timestamp.as_ref().map(|t| t.0),
    })
}

/// Whether the operator's field manager applied the Ingress's rules: its
/// apply entry is there and no other manager holds `spec.rules` (the caches
/// keep of other managers just what they hold alone, compact.rs, so this
/// reads the same of a cached Ingress as of one fresh from the apiserver).
/// A tenant's own Ingress, labelled as ours, is not ours. Manager names are
/// the client's choice, though: the order of holders is the real guard.
fn rules_applied_by_us(m: &ObjectMeta) -> bool {
    let entries = m.managed_fields.as_deref().unwrap_or_default();
    let Some(ours) = entries.iter().find(|e| applied_by(e, FIELD_MANAGER)) else {
        return false;
    };
    let ours = ours.fields_v1.as_ref().map(|f| &f.0);
    !entries.iter().filter(|e| rivals::is_rival(e)).any(|e| {
        e.fields_v1
            .as_ref()
            .and_then(|theirs| rivals::exclusive(&theirs.0, ours))
            .is_some_and(|alone| alone.get("f:spec").and_then(|s| s.get("f:rules")).is_some())
    })
}

fn earliest_of(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The hosts whose servers an Ingress change moved.
fn served_change(before: Option<&Served>, after: Option<&Served>) -> BTreeSet<String> {
    match (before, after) {
        (Some(b), Some(a)) if b.holder == a.holder => {
            b.hosts.symmetric_difference(&a.hosts).cloned().collect()
        }
        _ => before
            .into_iter()
            .chain(after)
            .flat_map(|s| s.hosts.iter().cloned())
            .collect(),
    }
}
