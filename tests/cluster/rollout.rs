//! Changes paced across a fleet: the fleet budget (`budget`, also under a
//! hostile tenant: `budget_hostile`), maintenance windows, deadlines and
//! pauses (`windows`), progress messages (`progress`) and `kura-operator
//! rollout status` following a change to its end (`rollout_status`).

pub(crate) mod budget;
mod budget_hostile;
mod progress;
mod rollout_status;
pub(crate) mod windows;
