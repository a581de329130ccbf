//! Searching schedules on this machine. Today: Droplet search (coordinate descent with a
//! significance test, [`droplet`]) over the knobs of a step list ([`knobs`]).
pub mod droplet;
#[cfg(test)]
mod droplet_tests;
pub mod interrupt;
pub mod knobs;
pub mod stats;
