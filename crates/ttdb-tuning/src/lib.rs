//! ttdb tuning: matching, search (sketches, evolution, cost model, Droplet), the tune
//! pipelines, and running a whole model with the kernels chosen.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod layout_plan;
pub mod matcher;
pub mod queue;
pub mod run;
pub mod search;
pub mod tune;
