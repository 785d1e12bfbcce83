//! The preview: `kura-operator diff` on a live fleet (`diff`), and the
//! preview held to the truth of the audit log, for generated fleets and
//! edits and the cases where the two once differed (`preview_truth`).

pub(crate) mod diff;
pub(crate) mod preview_truth;
