//! What a long run (`apply`, `refine`, `tune`, `tune MODEL`) tells its caller as it goes:
//! one interface for the four, so the CLI draws them with one progress bar.

/// The work a run has ahead, as its progress counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Kernels, each measured a bounded number of times (`apply`).
    Kernels(usize),
    /// Kernels with a trial budget each (`refine`, `tune`); a kernel that stops early leaves
    /// the rest of its budget unspent.
    KernelTrials {
        kernels: usize,
        trials_per_kernel: usize,
    },
    /// A trial budget that the kernels of a model share (`tune MODEL`).
    SharedTrials(usize),
    /// A wall-clock budget that the kernels of a model share, with no trial cap (the
    /// search of `apply` after its transfer); `trials` reports as for `SharedTrials`.
    SharedTime(std::time::Duration),
}

/// What the current kernel is doing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Timing the stored schedules it may start from.
    TimingStarts,
    /// The search from scratch.
    Searching,
    /// Droplet, from a start timed here at `start_s` seconds when the caller has one to
    /// compare with.
    Refining { start_s: Option<f64> },
}

/// Hears how a run goes; every event has a default that ignores it.
pub trait Progress {
    /// The run begins with this much work.
    fn start(&mut self, _work: Work) {}
    /// Kernel `index` of `total` begins; `label` names it.
    fn kernel(&mut self, _index: usize, _total: usize, _label: &str) {}
    /// The current kernel moves on to `phase`.
    fn phase(&mut self, _phase: Phase) {}
    /// Trials measured so far and the best seconds so far: of the current kernel, or with
    /// [`Work::SharedTrials`] or [`Work::SharedTime`], of the whole run and the model's kernel sum (NaN until every
    /// kernel has a time).
    fn trials(&mut self, _trials: usize, _best_s: f64) {}
    /// The current kernel is done.
    fn kernel_done(&mut self) {}
}

/// Hears nothing.
pub struct Silent;
impl Progress for Silent {}
