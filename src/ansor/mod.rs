//! Ansor (TVM auto-scheduler) measure records: types, parser and writer for every
//! generation of the format (v0.2 .. v0.6). Spec: `shared/spec/ansor-format.md` §1-2.
pub mod key;
pub use key::{KeyArg, KeyForm, WorkloadKey};
