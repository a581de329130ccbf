//! ttdb storage: the schedule database (SQLite or PostgreSQL) and schedule bundles.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod bundle;
pub mod store;
