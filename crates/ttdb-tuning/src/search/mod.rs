//! Searching schedules on this machine.
//! * From scratch, Ansor-style ([`policy`]): sketches ([`sketch`]), random initial states
//!   ([`init`]), mutations ([`mutate`]); each round's candidates ranked by the CPU draft
//!   estimate ([`draft`]) and a learned cost model ([`cost_model`]: per-store [`features`], a
//!   pack-sum [`gbdt`]); a model's kernels share rounds through the task [`scheduler`].
//! * Refinement: Droplet search (coordinate descent with a significance test, [`droplet`])
//!   over the knobs of a step list ([`knobs`]), from the fastest start of each distinct
//!   structure ([`restarts`]); its neighbours ranked by the same cost model
//!   ([`model_ranker`]).
//! * Both report their trials to one [`observer`].
pub mod contiguity;
pub mod cost_model;
pub mod default_schedule;
pub mod draft;
pub mod droplet;
#[cfg(test)]
mod droplet_tests;
pub mod features;
pub mod gbdt;
pub mod init;
pub mod interrupt;
pub mod knobs;
pub mod measurer;
pub mod model_ranker;
pub mod mutate;
pub mod observer;
pub mod partition;
pub mod policy;
#[cfg(test)]
mod policy_tests;
pub mod restarts;
pub mod rng;
pub mod scheduler;
pub mod sketch;
pub mod stats;
pub mod worker;
