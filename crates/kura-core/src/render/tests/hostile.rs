//! Hostile input through validation into rendering: whatever `validate`
//! accepts renders only what the apiserver accepts, and nothing panics.
//! (Here rather than under `validate`: these tests render, and `render` is
//! the layer above `validate`.)

mod corpus;
mod fuzz;
