//! What the suite stands on and what users run it on: the control plane
//! itself (`control_plane`), `scripts/dev.sh test` (`dev_script`), the CRDs
//! and core reconciles on the oldest and newest Kubernetes minors
//! (`versions`), a real node (`node`) and the READMEs' commands run as
//! printed (`readme`, on the node).

pub(crate) mod control_plane;
mod dev_script;
pub(crate) mod node;
mod readme;
mod versions;
