//! What a gateway's decision needs from the reflector caches (read by the
//! operator's `gateway::observe`).

use std::collections::{BTreeMap, BTreeSet};

use super::pods::Unschedulable;
use crate::api::KuraGatewayStatus;
use crate::plan::LiveChild;
use crate::render::ObjectId;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The gateway's name, as its reports say it.
    pub name: String,
    pub generation: Option<i64>,
    /// The status to decide from (the cache's, or a fresher one this process wrote).
    pub status: KuraGatewayStatus,
    /// Created by the operator (labelled, and applied by the instances' field
    /// manager): collected once nothing uses it. Anyone else's is served only.
    pub managed: bool,
    /// Live state of every desired and inventoried child; absent = missing.
    pub children: BTreeMap<ObjectId, LiveChild>,
    /// Children an earlier release applied under the instances' field
    /// manager: moved to the gateway's own.
    pub old_manager: BTreeSet<ObjectId>,
    /// This process applied these very inputs within `plan::SETTLE`.
    pub just_applied: bool,
    /// Its pods the scheduler cannot place (from the operator's pod cache).
    pub unschedulable: Vec<Unschedulable>,
}
