//! An instance's life from admission to a quiet fleet: what the apiserver
//! admits (`admission`, `acceptance`), applies that touch only what changed
//! and are all or nothing (`minimal_apply`, `apply_edges`, `storage`), drift
//! and contested fields taken back at a bounded pace (`drift`, `image_drift`,
//! `conflict`), the founding incident replayed (`founding_incident`), and an
//! idle fleet that writes nothing (`idle`).

pub(crate) mod acceptance;
pub(crate) mod admission;
mod apply_edges;
mod conflict;
mod drift;
mod founding_incident;
mod idle;
mod image_drift;
mod minimal_apply;
mod storage;
