//! A `KuraGateway`'s pure part, as an instance's is: its validation, what
//! the caches showed of it (`Observed`), the decision (`plan`), and the status
//! and Events a reconcile's outcome leads to (`status`). The operator crate's
//! `gateway` module reads the caches, applies, collects and writes.

pub mod observed;
pub mod plan;
pub mod pods;
pub mod status;
pub mod validate;
