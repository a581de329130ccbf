//! Searching schedules on this machine. Today: Droplet search (coordinate descent with a
//! significance test, [`droplet`]) over the knobs of a step list ([`knobs`]), from the
//! fastest start of each distinct structure ([`restarts`]).
pub mod cost_model;
pub mod draft;
pub mod droplet;
pub mod features;
pub mod gbdt;
pub mod init;
pub mod mutate;
pub mod policy;
pub mod sketch;
#[cfg(test)]
mod droplet_tests;
pub mod interrupt;
pub mod knobs;
pub mod restarts;
pub mod scheduler;
pub mod rng;
pub mod stats;
