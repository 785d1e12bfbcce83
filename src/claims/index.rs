//! What host claims need from the caches, indexed by host and kept up to date
//! per watch event, so that a reconcile looks up its own few hosts instead of
//! going through every instance (the operator runs a thousand).
//!
//! Every change that can free or take a host for someone returns the
//! instances that ask for that host (but not the one that changed, which its
//! own watch already reconciles): those waiting on a holder are reconciled as
//! soon as it lets go (deleted, or another host), not at the next resync.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::networking::v1::Ingress;

use super::{Claimant, HostInputs, Standing, hosts};
use crate::api::KuraInstance;
use crate::config::OperatorConfig;
use crate::keys::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY_VALUE};

/// An instance to reconcile: namespace and name.
pub type Wake = (String, String);

#[derive(Debug, Default)]
pub struct Index {
    /// Region → domain, for default hosts: those of the configuration last seen.
    domains: BTreeMap<String, String>,
    /// By uid.
    instances: HashMap<String, Entry>,
    /// Host → uids of the instances asking for it.
    claimed: HashMap<String, BTreeSet<String>>,
    /// Ingresses of ours by namespace/name, with the hosts they serve.
    ingresses: HashMap<(String, String), Served>,
    /// Host → the Ingresses of ours serving it.
    served: HashMap<String, BTreeSet<(String, String)>>,
    /// Host → the instance this process gave it to.
    grants: HashMap<String, Claimant>,
    /// Uid → the hosts granted to it.
    granted: HashMap<String, BTreeSet<String>>,
}

#[derive(Debug)]
struct Entry {
    claimant: Claimant,
    inputs: HostInputs,
    hosts: BTreeSet<String>,
}

#[derive(Debug, PartialEq, Eq)]
struct Served {
    /// The controlling instance (its `created` is unknown here: its entry has it).
    holder: Claimant,
    hosts: BTreeSet<String>,
}

impl Index {
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

    /// An instance added or changed (a deleting one claims nothing more).
    pub fn upsert_instance(&mut self, instance: &KuraInstance) -> Vec<Wake> {
        let Some(claimant) = Claimant::of(instance) else {
            return Vec::new();
        };
        if instance.metadata.deletion_timestamp.is_some() {
            return self.remove_instance(instance);
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
        let before = self.instances.get(&uid).map(|e| e.hosts.clone());
        self.put_instance(claimant, HostInputs::from(&instance.spec));
        let after = &self.instances[&uid].hosts;
        let changed: BTreeSet<String> = match before {
            Some(before) => before.symmetric_difference(after).cloned().collect(),
            None => after.clone(),
        };
        self.waiting_on(&changed, &[&uid])
    }

    pub fn remove_instance(&mut self, instance: &KuraInstance) -> Vec<Wake> {
        let Some(uid) = instance.metadata.uid.as_deref() else {
            return Vec::new();
        };
        let Some(entry) = self.take_instance(uid) else {
            return Vec::new();
        };
        self.waiting_on(&entry.hosts, &[uid])
    }

    /// The cache listed anew (a watch restarted): replace every instance.
    pub fn reset_instances<'a>(
        &mut self,
        all: impl IntoIterator<Item = &'a KuraInstance>,
    ) -> Vec<Wake> {
        let before = self.claimed.clone();
        let old: Vec<String> = self.instances.keys().cloned().collect();
        for uid in old {
            let entry = self.instances.remove(&uid).expect("listed above");
            unindex(&mut self.claimed, &entry.hosts, &uid);
        }
        let mut live = BTreeSet::new();
        for instance in all {
            if let Some(c) = Claimant::of(instance)
                && instance.metadata.deletion_timestamp.is_none()
            {
                live.insert(c.uid.clone());
                self.put_instance(c, HostInputs::from(&instance.spec));
            }
        }
        let gone: Vec<String> = self
            .granted
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.drop_grants(&uid, &BTreeSet::new());
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
    /// serving one (also when they no longer ask for it), those granted one.
    /// Only instances in the cache count.
    pub fn standings(&self, hosts: &[String]) -> Vec<Standing> {
        let mut out = Vec::new();
        for host in hosts {
            let mut seen: BTreeMap<&str, Standing> = BTreeMap::new();
            for uid in self.claimed.get(host).into_iter().flatten() {
                let entry = &self.instances[uid];
                seen.insert(
                    uid,
                    Standing {
                        host: host.clone(),
                        claimant: entry.claimant.clone(),
                        serving: false,
                    },
                );
            }
            let servers = self
                .served
                .get(host)
                .into_iter()
                .flatten()
                .filter_map(|key| self.ingresses.get(key))
                .map(|s| &s.holder)
                .chain(self.grants.get(host));
            for holder in servers {
                // An Ingress of an instance gone from the cache (deleted) is
                // the garbage collector's: it holds nothing.
                let Some(entry) = self.instances.get(&holder.uid) else {
                    continue;
                };
                let claimant = entry.claimant.clone();
                seen.entry(holder.uid.as_str())
                    .or_insert_with(|| Standing {
                        host: host.clone(),
                        claimant,
                        serving: true,
                    })
                    .serving = true;
            }
            out.extend(seen.into_values());
        }
        out
    }

    /// `me` won `hosts`: it holds them from now on in this process, until it
    /// asks for other hosts or is deleted.
    pub fn grant(&mut self, me: &Claimant, hosts: &[String]) {
        let keep: BTreeSet<String> = hosts.iter().cloned().collect();
        self.drop_grants(&me.uid, &keep);
        for host in hosts {
            self.grants.insert(host.clone(), me.clone());
        }
        self.granted.insert(me.uid.clone(), keep);
    }

    fn put_instance(&mut self, claimant: Claimant, inputs: HostInputs) {
        let uid = claimant.uid.clone();
        if let Some(old) = self.instances.remove(&uid) {
            unindex(&mut self.claimed, &old.hosts, &uid);
        }
        let domain = self.domains.get(&inputs.region).map(String::as_str);
        let hosts: BTreeSet<String> = hosts(&inputs, domain).into_iter().map(|h| h.host).collect();
        index(&mut self.claimed, &hosts, &uid);
        // A host it no longer asks for is no longer its to keep.
        self.drop_grants(&uid, &hosts);
        self.instances.insert(
            uid,
            Entry {
                claimant,
                inputs,
                hosts,
            },
        );
    }

    fn take_instance(&mut self, uid: &str) -> Option<Entry> {
        let entry = self.instances.remove(uid)?;
        unindex(&mut self.claimed, &entry.hosts, uid);
        self.drop_grants(uid, &BTreeSet::new());
        Some(entry)
    }

    /// Drop the grants of `uid` except those of `keep`.
    fn drop_grants(&mut self, uid: &str, keep: &BTreeSet<String>) {
        let Some(granted) = self.granted.get_mut(uid) else {
            return;
        };
        for host in granted.iter().filter(|h| !keep.contains(*h)) {
            if self.grants.get(host).is_some_and(|c| c.uid == uid) {
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

fn index<K: Ord + Clone>(
    map: &mut HashMap<String, BTreeSet<K>>,
    hosts: &BTreeSet<String>,
    key: &K,
) {
    for host in hosts {
        map.entry(host.clone()).or_default().insert(key.clone());
    }
}

fn unindex<K: Ord + ?Sized, Q: Ord + std::borrow::Borrow<K>>(
    map: &mut HashMap<String, BTreeSet<Q>>,
    hosts: &BTreeSet<String>,
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
/// instance's, controlled by it) and not being deleted; `None` otherwise.
fn served_by(ingress: &Ingress) -> Option<Served> {
    let m = &ingress.metadata;
    if m.deletion_timestamp.is_some() {
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
    let hosts: BTreeSet<String> = ingress
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
    })
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
