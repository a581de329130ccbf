//! Searching schedules on this machine. Today: Droplet search (coordinate descent with a
//! significance test, [`droplet`]) over the knobs of a step list ([`knobs`]).
pub mod knobs;
pub mod stats;
