//! Measuring candidate schedules of one workload: the [`Measurer`] Droplet, the restarts
//! and the search call, ttdb's own [`KernelMeasurer`] (build in parallel, verify, time in
//! interleaved rounds), and timings pooled over several builds ([`time_pooled`]).
use rayon::prelude::*;
use std::time::{Duration, Instant};
use ttdb_algo::ir::Dag;
use ttdb_backend::codegen::RunError;
use ttdb_backend::evaluate::worker::{with_client, TaskRef};
use ttdb_backend::evaluate::{
    build_steps, Build, EvalOptions, Evaluation, Isolation, Reference, PLACEMENTS,
};
use ttdb_backend::measure::runner::{MeasureOptions, Measurement};
use ttdb_backend::target::Profile;
use ttdb_format::ansor::Step;

/// Builds and runs schedules of one workload.
pub trait Measurer {
    /// Builds every schedule (in parallel), then runs them one at a time: verify, then time
    /// with per-run `timeout`. None for a schedule left unrun (interrupted).
    fn measure(&mut self, schedules: &[Vec<Step>], timeout: Duration) -> Vec<Option<Evaluation>>;

    /// `measure` in two halves, for a measurer whose candidates run elsewhere (the queue's
    /// workers): `send` hands the batch over and returns at once, so that the caller can
    /// search another task meanwhile; [`Measurer::receive`] waits for the evaluations.
    /// Returns false, having done nothing, when this measurer measures here (the caller
    /// calls `measure`).
    fn send(&mut self, _schedules: &[Vec<Step>], _timeout: Duration) -> bool {
        false
    }

    /// The evaluations of the batch `send` handed over, in order (None: unrun).
    fn receive(&mut self) -> Vec<Option<Evaluation>> {
        Vec::new()
    }
}

/// Times `schedules` side by side, each on `builds` builds (one batch: every build's
/// timings interleaved in rounds), each schedule's samples pooled over its builds. Builds of
/// one schedule differ by a few percent (`benches/stability.rs`, max/min of 6 builds:
/// geomean 1.04 over resnet_50's conv tasks timed on one copy of the arguments, 1.02 on
/// three), as their code and buffers land elsewhere; a pick between close schedules on one
/// build each is partly a pick of that luck. A schedule keeps its first
/// build's evaluation with the pooled samples, or the failure of a build that failed; None
/// when interrupted.
pub fn time_pooled(
    measurer: &mut dyn Measurer,
    schedules: &[Vec<Step>],
    builds: usize,
    timeout: Duration,
) -> Vec<Option<Evaluation>> {
    let (k, builds) = (schedules.len(), builds.max(1));
    let all: Vec<Vec<Step>> = (0..builds)
        .flat_map(|_| schedules.iter().cloned())
        .collect();
    let mut runs = measurer.measure(&all, timeout);
    (0..k)
        .map(|i| {
            let mut first = runs[i].take()?;
            let Some(m) = first.measurement.clone() else {
                return Some(first);
            };
            let mut samples = m.samples;
            for b in 1..builds {
                let e = runs[b * k + i].take()?;
                match e.measurement {
                    Some(more) if e.failure.is_none() => samples.extend(more.samples),
                    _ => return Some(e),
                }
            }
            first.measurement = Some(Measurement::from_samples(samples, m.number));
            Some(first)
        })
        .collect()
}

/// Measures candidates somewhere other than this process and its measuring worker: the
/// work queue's workers on other machines (`crate::queue`, which comes after the pipelines
/// that take this as an option).
pub trait MeasureElsewhere: Send + Sync + std::fmt::Debug {
    /// A measurer of `dag`'s candidates there.
    fn measurer<'a>(
        &'a self,
        dag: &'a Dag,
        reference: &'a Reference,
        eval: EvalOptions,
        interrupted: &'a (dyn Fn() -> bool + Sync),
    ) -> Box<dyn Measurer + 'a>;
}

/// Builds per schedule when Droplet compares its result with its start, and the restarts
/// their results ([`time_pooled`]).
pub const PICK_BUILDS: usize = 2;

/// A kernel whose best timing over the argument copies is more than this many times its
/// batch's fastest is not timed again ([`hopeless_kernels`]): it can be neither the best
/// nor, having few samples, a significant Droplet move, and its repeats were most of a
/// batch's timing cost.
pub const HOPELESS: f64 = 2.0;

/// The kernels of a batch not worth more samples: those whose best sample so far is more than
/// [`HOPELESS`] times the batch's fastest (hence than the best so far). Decided after one
/// sample on each copy of the arguments ([`PLACEMENTS`]): where the buffers land alone once
/// moved a schedule from 6 to 49 ms, so one sample on one copy can prune the fastest kernel.
pub fn hopeless_kernels(samples: &[Vec<f64>]) -> Vec<bool> {
    let best = |s: &Vec<f64>| s.iter().copied().fold(f64::INFINITY, f64::min);
    let fastest = samples.iter().map(best).fold(f64::INFINITY, f64::min);
    samples
        .iter()
        .map(|s| !s.is_empty() && best(s) > HOPELESS * fastest)
        .collect()
}

/// What a batch is doing, told to [`KernelMeasurer::on_phase`] before it happens (a measuring
/// worker forwards it, so that a crash is charged to the candidate that caused it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The parallel builds start.
    Building,
    /// Work on candidate `i` (its verification, or one timing) starts.
    Running(usize),
}

/// The real measurer: ttdb's build and run phases on `dag`, verified against `reference`,
/// in this process or in a worker process (`eval.isolation`).
pub struct KernelMeasurer<'a> {
    pub dag: &'a Dag,
    pub reference: &'a Reference,
    pub eval: EvalOptions,
    /// Checked between runs.
    pub interrupted: &'a (dyn Fn() -> bool + Sync),
    /// Hears each [`Phase`] before it happens.
    pub on_phase: &'a (dyn Fn(Phase) + Sync),
}

impl<'a> KernelMeasurer<'a> {
    pub fn new(
        dag: &'a Dag,
        reference: &'a Reference,
        eval: EvalOptions,
        interrupted: &'a (dyn Fn() -> bool + Sync),
    ) -> Self {
        KernelMeasurer {
            dag,
            reference,
            eval,
            interrupted,
            on_phase: &|_| {},
        }
    }
}

impl Measurer for KernelMeasurer<'_> {
    /// Builds in parallel; verifies one at a time; then times in rounds, one timing of every
    /// kernel per round, so that the machine's drift (another process, frequency changes)
    /// touches every kernel of the batch alike and the t-test's samples stay comparable.
    /// After one round per argument copy, kernels [`HOPELESS`]ly slower than the batch's
    /// fastest keep the timings they have. An interrupt drops the whole batch (nothing half-timed is reported).
    fn measure(&mut self, schedules: &[Vec<Step>], timeout: Duration) -> Vec<Option<Evaluation>> {
        if let Isolation::Worker(spec) = &self.eval.isolation {
            let task = TaskRef {
                dag: self.dag,
                reference_seed: self.reference.seed,
                eval: &self.eval,
                expected: self.reference.shippable_expected(),
            };
            return with_client(spec, |c| {
                c.batch(&task, schedules, timeout, self.interrupted)
            });
        }
        let profile = self.eval.profile != Profile::Off;
        // Profile::Builds: each build's steps when it starts, and its time when done (a
        // build that never ends is the last started without a done line).
        let each = self.eval.profile == Profile::Builds;
        let t_build = Instant::now();
        (self.on_phase)(Phase::Building);
        let builds: Vec<Build> = schedules
            .par_iter()
            .enumerate()
            .map(|(i, s)| {
                if each {
                    let text: Vec<String> = s.iter().map(|x| x.to_string()).collect();
                    eprintln!("profile: build {i} starts: [{}]", text.join(", "));
                }
                let b = build_steps(self.dag, s, &self.eval);
                if each {
                    let secs = (b.lower_time + b.compile_time).as_secs_f64();
                    eprintln!("profile: build {i} done in {secs:.2} s");
                }
                b
            })
            .collect();
        let build_wall = t_build.elapsed();
        let t_verify = Instant::now();
        let mut eval = self.eval.clone();
        eval.measure.timeout = Some(timeout);
        let none = || schedules.iter().map(|_| None).collect();
        let mut prepared = Vec::with_capacity(builds.len());
        for (i, b) in builds.iter().enumerate() {
            if (self.interrupted)() {
                return none();
            }
            (self.on_phase)(Phase::Running(i));
            prepared.push(b.prepare(self.reference, &eval));
        }
        if eval.verify_only {
            return prepared
                .into_iter()
                .map(|p| Some(p.map_or_else(|e| e, |p| p.finish(None))))
                .collect();
        }
        let verify_wall = t_verify.elapsed();
        let t_time = Instant::now();
        let one = MeasureOptions {
            repeat: 1,
            ..eval.measure.clone()
        };
        let mut samples = vec![Vec::new(); prepared.len()];
        let mut number = vec![1; prepared.len()];
        let mut errors: Vec<Option<RunError>> = vec![None; prepared.len()];
        let mut hopeless = vec![false; prepared.len()];
        for round in 0..eval.measure.repeat.max(1) {
            if round == PLACEMENTS {
                hopeless = hopeless_kernels(&samples);
            }
            for (i, p) in prepared.iter_mut().enumerate() {
                let Ok(p) = p else { continue };
                if errors[i].is_some() || hopeless[i] {
                    continue;
                }
                if (self.interrupted)() {
                    return none();
                }
                (self.on_phase)(Phase::Running(i));
                // The first timing calibrates the runs per sample (TVM's `number`); later
                // ones reuse it instead of growing it from 1 again.
                let timed = if round == 0 {
                    p.time(&one)
                } else {
                    p.time_again(number[i], &one)
                };
                match timed {
                    Ok(m) => {
                        samples[i].extend(m.samples);
                        number[i] = m.number;
                    }
                    Err(e) => errors[i] = Some(e),
                }
            }
        }
        if profile {
            profile_line(
                &builds,
                build_wall,
                verify_wall,
                t_time.elapsed(),
                &samples,
                &number,
            );
        }
        prepared
            .into_iter()
            .zip(samples.into_iter().zip(number).zip(errors))
            .map(|(p, ((s, n), e))| {
                Some(match (p, e) {
                    (Err(failed), _) => failed,
                    (Ok(p), Some(e)) => p.failed(&e),
                    (Ok(p), None) => p.finish(Some(Measurement::from_samples(s, n))),
                })
            })
            .collect()
    }
}

/// `TTDB_PROFILE`: one stderr line per measured batch, where its wall time went (sums over
/// the batch of each build phase's thread time; walls of the build, verify and timing phases;
/// kernel runs done while timing).
fn profile_line(
    builds: &[Build],
    build_wall: Duration,
    verify_wall: Duration,
    time_wall: Duration,
    samples: &[Vec<f64>],
    number: &[usize],
) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut lower, mut prep, mut tr, mut opt, mut emit, mut jit) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for b in builds {
        lower += ms(b.lower_time);
        if let Ok((c, _)) = &b.result {
            prep += ms(c.stats.prepare_time);
            tr += ms(c.stats.translate_time);
            opt += ms(c.stats.optimize_time);
            emit += ms(c.stats.emit_time);
            jit += ms(c.stats.jit_time);
        }
    }
    let runs: usize = samples.iter().zip(number).map(|(s, n)| s.len() * n).sum();
    let kernel_ms: f64 = samples
        .iter()
        .zip(number)
        .map(|(s, n)| s.iter().sum::<f64>() * *n as f64 * 1e3)
        .sum();
    eprintln!(
        "profile: n={} build_wall={:.0} lower={lower:.0} prepare={prep:.0} translate={tr:.0} opt={opt:.0} \
         emit={emit:.0} jit={jit:.0} verify_wall={:.0} time_wall={:.0} timed_runs={runs} \
         timed_kernel_ms={kernel_ms:.0}",
        builds.len(),
        ms(build_wall),
        ms(verify_wall),
        ms(time_wall),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that landed badly on the first copy of its arguments (10 ms there, 1 ms on
    /// the others) is the batch's fastest: pruning on the best sample over the copies keeps
    /// it, where pruning on the first sample (as the search did before) dropped it.
    #[test]
    fn pruning_takes_the_best_sample_over_the_argument_copies() {
        assert_eq!(PLACEMENTS, 3);
        let samples = vec![
            vec![10e-3, 1e-3, 1e-3],
            vec![2e-3, 2.1e-3, 2e-3],
            vec![9e-3, 8e-3, 9e-3],
            vec![],
        ];
        assert_eq!(hopeless_kernels(&samples), vec![false, false, true, false]);
        let first_only: Vec<Vec<f64>> = samples
            .iter()
            .map(|s| s.iter().take(1).copied().collect())
            .collect();
        assert_eq!(
            hopeless_kernels(&first_only),
            vec![true, false, true, false]
        );
    }
}
