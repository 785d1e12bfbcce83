//! Shards: how several replicas share one fleet (issue 24.4).
//!
//! An instance belongs to the shard of its namespace: a 64-bit FNV-1a hash of
//! the namespace, split into `N` equal ranges, shard `i` owning
//! `[i·2^64/N, (i+1)·2^64/N)`. That is the hash and the field of KEP-5866's
//! server-side sharded list and watch (`shardRange(object.metadata.namespace,
//! …)`), so an apiserver with `ShardedListAndWatch` can filter by the same
//! ranges; and an instance, its children and its gateway share a namespace,
//! so they share a shard without a label.
//!
//! Which shards a replica tries to hold ([`plan`]) is decided from what every
//! replica sees (the live members, the holder of each shard's Lease); the
//! Leases themselves decide who holds one, so two views that differ for a
//! moment can cost a shard a handover, never two holders.

pub mod ledger;

use std::collections::BTreeSet;

/// The field the shard hash is taken over (KEP-5866's name for it).
pub const HASH_FIELD: &str = "object.metadata.namespace";

/// 64-bit FNV-1a (the KEP's hash), over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The configured number of shards (at least one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shards(u32);

impl Shards {
    /// One shard: the whole fleet, today's behaviour.
    pub const ONE: Shards = Shards(1);

    pub fn new(count: u32) -> Option<Shards> {
        (count >= 1).then_some(Shards(count))
    }

    pub fn count(self) -> u32 {
        self.0
    }

    /// The first hash of shard `i` (`i = N` gives 2^64, the end of the last).
    pub fn start(self, i: u32) -> u128 {
        (u128::from(i) << 64) / u128::from(self.0)
    }

    /// The shard whose range holds `hash`.
    pub fn of_hash(self, hash: u64) -> u32 {
        let h = u128::from(hash);
        // The estimate is off by at most one where N does not divide 2^64.
        let mut i = ((h * u128::from(self.0)) >> 64) as u32;
        if h < self.start(i) {
            i -= 1;
        } else if i + 1 < self.0 && h >= self.start(i + 1) {
            i += 1;
        }
        i
    }

    /// The shard of every object in `namespace`.
    pub fn of_namespace(self, namespace: &str) -> u32 {
        self.of_hash(fnv1a64(namespace.as_bytes()))
    }

    /// KEP-5866's `shardSelector` for `shards` (ranges OR-ed); `None` for
    /// all of them, where no selector is needed. The apiserver takes a bound
    /// only as 16 hex digits (`0x0000000000000000`), or `0x10000000000000000`
    /// for 2^64, the end of the last shard; `0x0` is refused.
    pub fn selector(self, shards: &BTreeSet<u32>) -> Option<String> {
        if shards.len() as u32 >= self.0 {
            return None;
        }
        let ranges: Vec<String> = shards
            .iter()
            .map(|i| {
                format!(
                    "shardRange({HASH_FIELD}, '0x{:016x}', '0x{:016x}')",
                    self.start(*i),
                    self.start(i + 1)
                )
            })
            .collect();
        Some(ranges.join(" || "))
    }
}

/// What a replica sees of the others: the live members (by their membership
/// Leases, this replica among them) and the holder of each shard's Lease
/// (`None`: free, or its holder let it expire).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub members: BTreeSet<String>,
    pub holders: Vec<Option<String>>,
}

impl View {
    fn held_by(&self, member: &str) -> Vec<u32> {
        (0..self.holders.len() as u32)
            .filter(|i| self.holders[*i as usize].as_deref() == Some(member))
            .collect()
    }

    /// Each live member's fair share: `N / M`, one more for the first `N % M`
    /// of them in order of what they hold now (most first, then by name), so
    /// that a balanced fleet moves nothing and every view agrees.
    pub fn quotas(&self) -> Vec<(String, usize)> {
        let n = self.holders.len();
        let m = self.members.len().max(1);
        let mut order: Vec<(usize, &String)> = self
            .members
            .iter()
            .map(|id| (self.held_by(id).len(), id))
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        order
            .into_iter()
            .enumerate()
            .map(|(k, (_, id))| (id.clone(), n / m + usize::from(k < n % m)))
            .collect()
    }
}

/// The shards `me` should hold, from `view`: those it holds up to its fair
/// share (a surplus is released, the highest first, once the others are live
/// to take it), then free ones up to the share, in an order of its own so
/// that replicas do not all reach for the same one. The shares add up to `N`,
/// so every free shard is in some live member's share; a dead member must
/// therefore leave the view before its shards' Leases expire (the operator
/// counts a member live for two thirds of the lease duration only).
pub fn plan(view: &View, me: &str) -> BTreeSet<u32> {
    let quota = view
        .quotas()
        .into_iter()
        .find(|(m, _)| m == me)
        .map_or(0, |(_, q)| q);
    let mut wanted: BTreeSet<u32> = view.held_by(me).into_iter().take(quota).collect();
    let mut free: Vec<u32> = (0..view.holders.len() as u32)
        .filter(|i| view.holders[*i as usize].is_none())
        .collect();
    free.sort_by_key(|i| preference(me, *i));
    let missing = quota.saturating_sub(wanted.len());
    wanted.extend(free.into_iter().take(missing));
    wanted
}

/// A member's own order of the shards (rendezvous hashing).
fn preference(member: &str, shard: u32) -> u64 {
    let mut bytes = member.as_bytes().to_vec();
    bytes.extend(shard.to_be_bytes());
    fnv1a64(&bytes)
}

#[cfg(test)]
mod tests;
