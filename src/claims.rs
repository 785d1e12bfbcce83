//! Host claims: a host is served to one instance only, across every namespace
//! the operator watches (claims outside its scope are not seen).
//!
//! The hosts of an instance are `spec.host` (or the default
//! `<account>.<region>.<domain>`) and `spec.aliases`. Of the instances that
//! claim a host or serve it, the one that serves it keeps it; otherwise the
//! earliest created, then by namespace/name. Serving means an Ingress of ours
//! for the host, labelled as that instance's and controlled by it, or the host
//! granted to it by this process (its Ingress may not be in the caches yet).
//! So an edit elsewhere (another instance asking for the host, the holder's
//! Ingress deleted) never moves a claim. Deleting the holder frees its hosts at
//! once (its Ingresses are the garbage collector's to delete: waiting for that
//! would hold the next claimant's whole rollout back); giving it other hosts
//! frees the old ones once its Ingresses no longer serve them.
//!
//! An instance that loses a host gets nothing applied and nothing deleted, like
//! invalid input: a clear error naming the field, the host and the holder.
//!
//! `check` is the decision, on plain values; `index` keeps what it needs from
//! the caches, updated per watch event; `watch` joins them to the reconcile.

pub mod index;
pub mod watch;

use std::fmt;

use jiff::Timestamp;

use crate::api::{KuraInstance, KuraInstanceSpec};
use crate::validate::default_host;
use crate::validate::rules::{self, MAX_SUBDOMAIN};

pub use watch::Claims;

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

    /// Who goes first: the earliest created, then by namespace and name.
    fn precedence(&self) -> (bool, Option<Timestamp>, &str, &str, &str) {
        (
            self.created.is_none(),
            self.created,
            &self.namespace,
            &self.name,
            &self.uid,
        )
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
}

impl From<&KuraInstanceSpec> for HostInputs {
    fn from(spec: &KuraInstanceSpec) -> Self {
        HostInputs {
            host: spec.host.clone(),
            aliases: spec.aliases.clone(),
            account: spec.account.clone(),
            region: spec.region.clone(),
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
    /// It serves the host (see the module documentation); otherwise it only asks for it.
    pub serving: bool,
}

/// A host this instance asked for and another holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub field: String,
    pub host: String,
    pub holder: Claimant,
    pub holder_serves: bool,
    /// This instance serves the host too (two Ingresses of ours for one host,
    /// e.g. from before claims existed): its Ingress is left in place.
    pub also_served_here: bool,
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
        match (self.holder_serves, self.also_served_here, &holder.created) {
            (true, true, _) => write!(
                f,
                "is served by instance {holder} too, which goes first and keeps it; \
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

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

/// Who holds a host: one that serves it, then by precedence.
fn rank(serving: bool, c: &Claimant) -> (bool, (bool, Option<Timestamp>, &str, &str, &str)) {
    (!serving, c.precedence())
}

/// Whether `me` holds every one of `hosts`, given every other instance's
/// standing on them (`me`'s own standings say whether it serves a host).
pub fn check(me: &Claimant, hosts: &[HostClaim], standings: &[Standing]) -> Result<(), Conflict> {
    let mut lost = Vec::new();
    for claim in hosts {
        let on_host = || standings.iter().filter(|s| s.host == claim.host);
        let serves_here = on_host().any(|s| s.claimant.uid == me.uid && s.serving);
        let holder = on_host()
            .filter(|s| s.claimant.uid != me.uid)
            .min_by(|a, b| rank(a.serving, &a.claimant).cmp(&rank(b.serving, &b.claimant)));
        if let Some(h) = holder
            && rank(h.serving, &h.claimant) < rank(serves_here, me)
        {
            lost.push(Lost {
                field: claim.field.clone(),
                host: claim.host.clone(),
                holder: h.claimant.clone(),
                holder_serves: h.serving,
                also_served_here: serves_here,
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
