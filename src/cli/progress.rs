//! What `apply`, `refine`, `tune` and `tune MODEL` share on the terminal: the progress bar
//! (one [`Progress`] for the four, drawn as the run's [`Work`] counts), this machine's peak
//! for the "% peak" column, and the tail: the report printed as a table or JSON, and exit
//! code 130 when Ctrl-C stopped the run.
use super::{CliError, CliResult};
use indicatif::ProgressBar;
use serde::Serialize;
use ttdb_tuning::tune::progress::{Phase, Progress, Work};

/// Runs long tuning work: Ctrl-C asks it to stop after the current measurement, and on a
/// terminal a bar follows it, cleared when it returns.
pub(super) fn track<R>(work: impl FnOnce(&mut dyn Progress) -> R) -> R {
    ttdb_tuning::search::interrupt::install();
    let mut bar = TuningBar::default();
    let out = work(&mut bar);
    if let Some(b) = bar.bar.take() {
        b.finish_and_clear();
    }
    out
}

/// Prints `report` (as JSON with `json`, else as `render` has it), then turns a run that
/// Ctrl-C stopped into exit code 130.
pub(super) fn print_report<R: Serialize>(
    report: &R,
    interrupted: bool,
    json: bool,
    render: impl FnOnce(&R) -> String,
) -> CliResult {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        print!("{}", render(report));
    }
    if interrupted {
        return Err(CliError {
            message: "interrupted".into(),
            code: 130,
        });
    }
    Ok(())
}

/// This machine's fp32 FMA peak in GFLOP/s, the denominator of "% peak" (None when it
/// cannot be measured).
pub(super) fn peak_gflops() -> Option<f64> {
    ttdb_backend::measure::peak::measure_peak(&super::machine().target, &Default::default())
        .ok()
        .map(|p| p.gflops_all)
}

/// The bar: over kernels (apply), over each kernel's trial budget (refine, tune; a kernel
/// that stops early counts whole, so the ETA does), or over a model's shared trials.
#[derive(Default)]
struct TuningBar {
    bar: Option<ProgressBar>,
    work: Option<Work>,
    /// The current kernel: its index, the kernel count, its label.
    kernel: usize,
    total: usize,
    label: String,
    phase: Option<Phase>,
    kernels_done: u64,
    /// When a [`Work::SharedTime`] run started.
    started: Option<std::time::Instant>,
}

impl TuningBar {
    fn set_message(&self, message: String) {
        if let Some(b) = &self.bar {
            b.set_message(message);
        }
    }
    fn set_position(&self, position: u64) {
        if let Some(b) = &self.bar {
            b.set_position(position);
        }
    }
    /// "kernel 2/5 conv2d_nhwc".
    fn kernel_line(&self) -> String {
        format!("kernel {}/{} {}", self.kernel + 1, self.total, self.label)
    }
}

impl Progress for TuningBar {
    fn start(&mut self, work: Work) {
        self.work = Some(work);
        self.bar = match work {
            Work::Kernels(n) => super::progress_bar(
                n as u64,
                "{spinner} [{bar:30}] {pos}/{len} kernels {elapsed} (ETA {eta}) {msg}",
            ),
            Work::KernelTrials {
                kernels,
                trials_per_kernel,
            } => trials_bar((trials_per_kernel * kernels) as u64),
            Work::SharedTrials(trials) => trials_bar(trials as u64),
            Work::SharedTime(budget) => {
                self.started = Some(std::time::Instant::now());
                super::progress_bar(
                    budget.as_secs().max(1),
                    "{spinner} [{bar:25}] {pos}/{len} s of the time budget {msg}",
                )
            }
        };
    }
    fn kernel(&mut self, index: usize, total: usize, label: &str) {
        (self.kernel, self.total, self.label) = (index, total, label.to_string());
        self.phase = None;
        if let Some(Work::Kernels(_)) = self.work {
            self.set_position(index as u64);
            self.set_message(label.to_string());
        }
    }
    fn phase(&mut self, phase: Phase) {
        self.phase = Some(phase);
        if let Some(Work::KernelTrials { .. }) = self.work {
            let doing = match phase {
                Phase::TimingStarts => "timing the stored schedules",
                Phase::Searching => "sampling",
                // The trials say it: the message changes with the first batch.
                Phase::Refining { .. } => return,
            };
            self.set_message(format!("{}: {doing}", self.kernel_line()));
        }
    }
    fn trials(&mut self, trials: usize, best_s: f64) {
        let best_ms = best_s * 1e3;
        match self.work {
            Some(Work::Kernels(_)) => {
                let what = match self.phase {
                    Some(Phase::Searching) => "search",
                    _ => "droplet",
                };
                self.set_message(format!(
                    "{}: {what} trial {trials}, best {best_ms:.3} ms",
                    self.label
                ));
            }
            Some(Work::KernelTrials {
                trials_per_kernel, ..
            }) => {
                let budget = trials_per_kernel as u64;
                self.set_position(self.kernels_done * budget + (trials as u64).min(budget));
                let over_start = match self.phase {
                    Some(Phase::Refining {
                        start_s: Some(start_s),
                    }) => format!(" ({:.2}x over the start)", start_s / best_s),
                    _ => String::new(),
                };
                self.set_message(format!(
                    "{}: best {best_ms:.3} ms{over_start}",
                    self.kernel_line()
                ));
            }
            Some(Work::SharedTrials(_)) => {
                self.set_position(trials as u64);
                self.set_message(if best_ms.is_finite() {
                    format!("kernel sum {best_ms:.3} ms")
                } else {
                    "warming up every kernel".into()
                });
            }
            Some(Work::SharedTime(_)) => {
                let elapsed = self.started.map_or(0, |t| t.elapsed().as_secs());
                self.set_position(elapsed);
                self.set_message(if best_ms.is_finite() {
                    format!("{trials} trials, kernel sum {best_ms:.3} ms")
                } else {
                    format!("{trials} trials, warming up every kernel")
                });
            }
            None => {}
        }
    }
    fn kernel_done(&mut self) {
        self.kernels_done += 1;
        match self.work {
            Some(Work::Kernels(_)) => self.set_position(self.kernels_done),
            Some(Work::KernelTrials {
                trials_per_kernel, ..
            }) => self.set_position(self.kernels_done * trials_per_kernel as u64),
            _ => {}
        }
    }
}

/// A bar over trials (refine, tune).
fn trials_bar(len: u64) -> Option<ProgressBar> {
    super::progress_bar(
        len,
        "{spinner} [{bar:25}] {pos}/{len} trials, {elapsed} (ETA {eta}) {msg}",
    )
}
