//! Host claims: a host is served to one instance only, across every namespace
//! the operator watches (claims outside its scope are not seen).
//!
//! The hosts of an instance are `spec.host` (or the default
//! `<account>.<region>.<domain>`) and `spec.aliases`. A claim is made only by
//! the operator's own decision (`Claims::decide` grants the hosts of a valid,
//! unpaused instance that nobody holds), and a held host is never taken:
//!
//! - **Holders first, in the order they began to hold.** An instance holds a
//!   host it serves: an Ingress of ours for the host (labelled as the
//!   instance's, controlled by it, and its rules applied by the operator's
//!   field manager), or the host granted to it by this process (its Ingress
//!   may not be in the caches yet). It holds it since the earliest of that
//!   Ingress's `creationTimestamp` (set by the apiserver) and the grant. Of
//!   two holders the earlier keeps the host. Labels, owner references and
//!   field manager names are all written by whoever creates an Ingress, so an
//!   Ingress forged for a host someone already serves is younger than the
//!   holder's and takes nothing.
//! - **Then those asking, by creation** (earliest, then namespace/name). Only
//!   an instance that could be granted asks: a paused one, or one last found
//!   invalid, keeps what it holds and claims nothing new.
//! - **A deleted holder's hosts are reserved** for an instance of the same
//!   namespace and name for `--host-reservation` (5 minutes by default), so an
//!   owner that deletes and recreates its instance (immutable fields) keeps
//!   them; after that they go to the next in line. The reservation lives in
//!   this process (a restart ends it; the holder's Ingress, until the garbage
//!   collector deletes it, holds nothing: its instance is gone).
//!
//! So an edit elsewhere (another instance asking for the host, the holder's
//! Ingress deleted) never moves a claim; giving the holder other hosts frees
//! the old ones once its Ingresses no longer serve them.
//!
//! An instance that loses a host gets nothing applied and nothing deleted, like
//! invalid input: a clear error naming the field, the host and the holder.
//!
//! `check` is the decision, on plain values; `index` keeps what it needs from
//! the caches, updated per watch event; the operator's `claims::watch` joins
//! them to the reconcile.

mod few;
pub mod index;

use std::fmt;

use jiff::Timestamp;

use crate::api::{KuraInstance, KuraInstanceSpec};
use crate::validate::default_host;
use crate::validate::rules::{self, MAX_SUBDOMAIN};

/// An instance, as the precedence of claims sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimant {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `metadata.creationTimestamp` (always set by the apiserver; an object
    /// without one goes last).
    pub created: Option<Timestamp>,
}

impl Claimant {
    /// `None` for an object without namespace, name or uid (never from the apiserver).
    pub fn of(instance: &KuraInstance) -> Option<Claimant> {
        let m = &instance.metadata;
        Some(Claimant {
            namespace: m.namespace.clone()?,
            name: m.name.clone()?,
            uid: m.uid.clone()?,
            created: m.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

impl fmt::Display for Claimant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What decides an instance's hosts, copied out of its spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostInputs {
    pub host: Option<String>,
    pub aliases: Vec<String>,
    pub account: String,
    pub region: String,
    /// A paused instance asks for no host (it keeps those it holds); one
    /// paused until a time asks on, for the time it resumes.
    pub paused: bool,
}

impl From<&KuraInstanceSpec> for HostInputs {
    fn from(spec: &KuraInstanceSpec) -> Self {
        HostInputs {
            host: spec.host.clone(),
            aliases: spec.aliases.clone(),
            account: spec.account.clone(),
            region: spec.region.clone(),
            paused: spec.paused && !crate::window::pause_ends(spec),
        }
    }
}

impl HostInputs {
    /// Whether `spec` has these inputs (without copying them out).
    pub fn same_as(&self, spec: &KuraInstanceSpec) -> bool {
        self.host == spec.host
            && self.aliases == spec.aliases
            && self.account == spec.account
            && self.region == spec.region
            && self.paused == (spec.paused && !crate::window::pause_ends(spec))
    }
}

/// One host an instance asks for, and the field it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostClaim {
    pub host: String,
    pub field: String,
}

/// The hosts an instance asks for, given its region's domain (`None`: the
/// region is unknown, so is the default host). A host no Ingress could carry
/// claims nothing: validation reports it.
pub fn hosts(inputs: &HostInputs, domain: Option<&str>) -> Vec<HostClaim> {
    let primary = match (&inputs.host, domain) {
        (Some(host), _) => Some((host.clone(), "spec.host".to_string())),
        (None, Some(domain)) => Some((
            default_host(&inputs.account, &inputs.region, domain),
            "spec.host (defaulted from spec.account and spec.region)".to_string(),
        )),
        (None, None) => None,
    };
    let aliases = inputs
        .aliases
        .iter()
        .enumerate()
        .map(|(i, alias)| (alias.clone(), format!("spec.aliases[{i}]")));
    let mut out: Vec<HostClaim> = Vec::with_capacity(1 + inputs.aliases.len());
    for (host, field) in primary.into_iter().chain(aliases) {
        if rules::host(&host, MAX_SUBDOMAIN).is_ok() && out.iter().all(|h| h.host != host) {
            out.push(HostClaim { host, field });
        }
    }
    out
}

/// Some instance's standing on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    pub host: String,
    pub claimant: Claimant,
    pub hold: Hold,
}

/// How an instance stands on a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// It asks for the host and does not hold it.
    Asks,
    /// It serves the host (see the module documentation) since then (`None`:
    /// unknown, last among holders). `granted`: this process granted it the
    /// host (the operator's own decision, which wins a tie).
    Serves {
        since: Option<Timestamp>,
        granted: bool,
    },
    /// It was deleted while it held the host since `since`: the host is kept
    /// for an instance of the same namespace and name until `until`.
    Reserved {
        since: Option<Timestamp>,
        until: Timestamp,
    },
}

impl Standing {
    /// Whether this standing is `me`'s own: its own, or a reservation for its
    /// namespace and name (a recreated instance has another uid).
    fn is_of(&self, me: &Claimant) -> bool {
        self.claimant.uid == me.uid
            || matches!(self.hold, Hold::Reserved { .. })
                && self.claimant.namespace == me.namespace
                && self.claimant.name == me.name
    }

    /// Still in force at `now` (a reservation ends).
    fn in_force(&self, now: Timestamp) -> bool {
        match self.hold {
            Hold::Reserved { until, .. } => now < until,
            _ => true,
        }
    }

    /// Who goes first: holders before those asking, holders by since when
    /// they hold, those asking by creation; then by namespace, name and uid.
    ///
    /// Times are compared in whole seconds: an Ingress's creationTimestamp
    /// has no more, and a grant's exact time would otherwise beat an
    /// Ingress created later in the same second. Within a second, the
    /// holder this process granted the host to goes first.
    fn rank(&self) -> Rank<'_> {
        let (asks, at, granted) = match self.hold {
            Hold::Asks => (true, self.claimant.created, false),
            Hold::Serves { since, granted } => (false, since, granted),
            Hold::Reserved { since, .. } => (false, since, false),
        };
        let c = &self.claimant;
        let second = at.map(|t| t.as_second());
        (
            asks,
            at.is_none(),
            second,
            !granted,
            &c.namespace,
            &c.name,
            &c.uid,
        )
    }
}

type Rank<'a> = (bool, bool, Option<i64>, bool, &'a str, &'a str, &'a str);

/// A host this instance asked for and another holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub field: String,
    pub host: String,
    pub holder: Claimant,
    pub holder_serves: bool,
    /// This instance serves the host too (two Ingresses of ours for one host,
    /// e.g. from before claims existed, or one forged): its Ingress is left in place.
    pub also_served_here: bool,
    /// The holder was deleted: the host is reserved for its namespace and
    /// name until then, when this instance asks again.
    pub reserved_until: Option<Timestamp>,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Lost {
            field,
            host,
            holder,
            ..
        } = self;
        write!(f, "{field}: host {host:?} ")?;
        if let Some(until) = self.reserved_until {
            return write!(
                f,
                "is reserved until {until} for instance {holder}, deleted while it held it, \
                 in case it is recreated"
            );
        }
        match (self.holder_serves, self.also_served_here, &holder.created) {
            (true, true, _) => write!(
                f,
                "is served by instance {holder} too, which served it first and keeps it; \
                 this instance's Ingress for it is left in place"
            ),
            (true, false, _) => write!(f, "is served by instance {holder}"),
            (false, _, Some(created)) => write!(
                f,
                "is claimed first by instance {holder} (created {created})"
            ),
            (false, _, None) => write!(f, "is claimed first by instance {holder}"),
        }
    }
}

/// Every host an instance lost, in the order of its fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Conflict(pub Vec<Lost>);

impl Conflict {
    /// When a reservation that keeps a host from this instance ends: it asks
    /// again then (nothing else wakes it).
    pub fn ask_again_at(&self) -> Option<Timestamp> {
        self.0.iter().filter_map(|l| l.reserved_until).min()
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

/// The hosts of `hosts` that `me` does not serve by an Ingress of its own
/// yet (a grant of this process is no Ingress): what a sharded fleet reserves
/// in its shared ledger before it applies, since another replica's caches
/// cannot show this process's grant.
pub fn not_served(me: &Claimant, hosts: &[HostClaim], standings: &[Standing]) -> Vec<HostClaim> {
    hosts
        .iter()
        .filter(|claim| {
            !standings.iter().any(|s| {
                s.host == claim.host
                    && s.claimant.uid == me.uid
                    && matches!(s.hold, Hold::Serves { granted: false, .. })
            })
        })
        .cloned()
        .collect()
}

/// Whether `me` holds every one of `hosts` at `now`, given every instance's
/// standing on them (`me`'s own say whether it holds a host already).
pub fn check(
    me: &Claimant,
    hosts: &[HostClaim],
    standings: &[Standing],
    now: Timestamp,
) -> Result<(), Conflict> {
    let mut lost = Vec::new();
    for claim in hosts {
        let on_host = || {
            standings
                .iter()
                .filter(|s| s.host == claim.host && s.in_force(now))
        };
        let asking = Standing {
            host: claim.host.clone(),
            claimant: me.clone(),
            hold: Hold::Asks,
        };
        // My best standing: one I hold by, else asking.
        let mine = on_host()
            .filter(|s| s.is_of(me))
            .chain([&asking])
            .min_by(|a, b| a.rank().cmp(&b.rank()))
            .expect("asking is one");
        let holder = on_host()
            .filter(|s| !s.is_of(me))
            .min_by(|a, b| a.rank().cmp(&b.rank()));
        if let Some(h) = holder
            && h.rank() < mine.rank()
        {
            lost.push(Lost {
                field: claim.field.clone(),
                host: claim.host.clone(),
                holder: h.claimant.clone(),
                holder_serves: !matches!(h.hold, Hold::Asks),
                also_served_here: matches!(mine.hold, Hold::Serves { .. }),
                reserved_until: match h.hold {
                    Hold::Reserved { until, .. } => Some(until),
                    _ => None,
                },
            });
        }
    }
    if lost.is_empty() {
        Ok(())
    } else {
        Err(Conflict(lost))
    }
}

#[cfg(test)]
mod tests;
