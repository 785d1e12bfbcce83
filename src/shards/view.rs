//! What the planner sees in the Leases of a sharded fleet: who is live, who
//! holds each shard. Ages are this process's own observations (how long it
//! has seen a Lease unchanged), never the holders' timestamps, as in
//! `leader.rs`, so clock skew between nodes does not matter.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

use kura_core::shard::View;

/// The Lease names of one fleet.
#[derive(Clone, Debug)]
pub struct Names {
    pub base: String,
}

impl Names {
    pub fn shard(&self, i: u32) -> String {
        format!("{}-shard-{i}", self.base)
    }

    fn member_prefix(&self) -> String {
        format!("{}-member-", self.base)
    }

    /// A replica's membership Lease: its identity made a valid name.
    pub fn member(&self, identity: &str) -> String {
        let id: String = identity
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mut name = format!("{}{}", self.member_prefix(), id.trim_matches('-'));
        name.truncate(253);
        name.trim_end_matches('-').to_string()
    }
}

/// When this process first saw each Lease at its current resourceVersion.
#[derive(Default)]
pub struct Seen(BTreeMap<String, (String, Instant)>);

impl Seen {
    /// How long `lease` has been seen unchanged, as of `now`.
    fn unchanged_for(&mut self, lease: &Lease, now: Instant) -> Duration {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let entry = self.0.entry(name).or_insert_with(|| (rv.clone(), now));
        if entry.0 != rv {
            *entry = (rv, now);
        }
        now.saturating_duration_since(entry.1)
    }
}

/// The view, and the membership Leases nobody has renewed for long (left by
/// replicas that died; any replica may delete them).
pub fn view_of(
    leases: &[std::sync::Arc<Lease>],
    seen: &mut Seen,
    names: &Names,
    shards: u32,
    me: &str,
    duration: Duration,
    now: Instant,
) -> (View, Vec<String>) {
    let mut view = View {
        members: [me.to_string()].into(),
        holders: vec![None; shards as usize],
    };
    let mut stale = Vec::new();
    let shard_names: BTreeMap<String, usize> =
        (0..shards).map(|i| (names.shard(i), i as usize)).collect();
    for lease in leases {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let age = seen.unchanged_for(lease, now);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.filter(|h| !h.is_empty());
        let lasts = spec
            .lease_duration_seconds
            .map_or(duration, |s| Duration::from_secs(s.max(1) as u64));
        if let Some(i) = shard_names.get(name) {
            view.holders[*i] = holder.filter(|_| age < lasts);
        } else if name.starts_with(&names.member_prefix()) {
            // Live for two thirds of the duration only: a dead member leaves
            // the view before its shards' Leases expire, so its share is
            // free for the survivors when the shards are.
            match holder {
                Some(h) if age < lasts * 2 / 3 => {
                    view.members.insert(h);
                }
                _ if age > lasts * 4 => stale.push(name.to_string()),
                _ => {}
            }
        }
    }
    (view, stale)
}

/// The shard counts of the other live replicas of this fleet that differ
/// from `shards`: a member whose Lease is renewed, or a holder of the single
/// Lease of an unsharded replica (`base`). A Lease without the count label
/// (a release before it) says nothing. Call after [`view_of`] with the same
/// `now`, which has seen every Lease.
pub fn other_counts(
    leases: &[std::sync::Arc<Lease>],
    seen: &mut Seen,
    names: &Names,
    shards: u32,
    me: &str,
    duration: Duration,
    now: Instant,
) -> BTreeSet<u32> {
    let mut others = BTreeSet::new();
    for lease in leases {
        let name = lease.metadata.name.as_deref().unwrap_or_default();
        let count = lease
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(kura_core::keys::LABEL_SHARD_COUNT))
            .and_then(|c| c.parse::<u32>().ok());
        let Some(count) = count.filter(|c| *c != shards) else {
            continue;
        };
        let age = seen.unchanged_for(lease, now);
        let spec = lease.spec.clone().unwrap_or_default();
        let lasts = spec
            .lease_duration_seconds
            .map_or(duration, |s| Duration::from_secs(s.max(1) as u64));
        let live = spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty() && h != me)
            && age < lasts;
        let of_fleet = name == names.base || name.starts_with(&names.member_prefix());
        if live && of_fleet {
            others.insert(count);
        }
    }
    others
}
