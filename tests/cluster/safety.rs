//! What the operator never takes and always cleans up: objects it did not
//! create stay untouched (`ownership`), deletion goes through owner
//! references and finalizers (`deletion`), garbage collection removes only
//! what it should (`gc_safety`), what a failed apply created is pruned
//! (`orphans`), and a status written by anyone is never trusted
//! (`hostile_status`).

mod deletion;
mod gc_safety;
mod hostile_status;
mod orphans;
mod ownership;
