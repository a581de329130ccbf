//! Evaluating a schedule on a workload, in two phases:
//!
//! * **build** ([`build_steps`], [`build_default`], [`build_kernel`]): replay + lower +
//!   compile. Pure CPU work on the calling thread, with no shared state but LLVM's
//!   thread-local target machine: a batch of candidates builds in parallel (rayon).
//! * **run** ([`Build::run`]): pack the weights, run once, verify against the
//!   [`Reference`], then time. Runs use every core and must not overlap each other or a
//!   build, or the timings suffer: callers run one candidate at a time.
//!
//! Every timed schedule is first verified against the naive reference (`ir::eval`) on
//! pseudo-random inputs with ttdb's one output check (`crate::loopnest::verify`); a kernel
//! that fails is reported with TVM's error code and never chosen.
//!
//! Layout-free weights (conv2d NHWC, dense, batch_matmul, winograd bgemm) are pre-packed into
//! the layout each candidate's schedule derives, like Ansor's layout rewrite option 2
//! (`RewriteForPreTransformed`, spec §4.8), which is how TVM measured relay tasks on llvm:
//! the packing happens once per candidate, outside the timed region
//! ([`EvalOptions::prepack_weights`]). Verification is unchanged: the kernel's outputs are
//! compared with the reference of the original DAG on the original inputs.
mod reference;
pub mod worker;

pub use reference::{ExpectedValues, Reference, SAMPLE_POINTS};
pub use worker::{Isolation, WorkerSpec};

use crate::codegen::{compile, CodegenError, CodegenOptions, CompiledKernel, RunError, RunOptions};
use crate::loopnest::verify::RTOL;
use crate::loopnest::{BufferData, Kernel};
use crate::lower::check::kernel_args;
use crate::lower::{
    lower_default, lower_steps_detailed, LowerOptions, WeightLayout, WeightLayoutMode,
};
use crate::measure::runner::{measure, measure_again, MeasureOptions, Measurement};
use std::time::{Duration, Instant};
use ttdb_algo::ir::Dag;
use ttdb_format::ansor::Step;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EvalOptions {
    pub measure: MeasureOptions,
    pub codegen: CodegenOptions,
    pub lower: LowerOptions,
    /// Skip timing (verify only).
    pub verify_only: bool,
    /// Pre-pack the layout-free weights into the layout the schedule derives (Ansor's layout
    /// rewrite option 2, packing outside the timed region) in [`build_steps`]; on by
    /// default. Off: the weights keep their DAG layout (`lower.weight_layout` decides).
    /// DAGs without layout-free weights, schedules that read them through a cache_read or
    /// rfactor stage, and the naive default schedule are unaffected.
    pub prepack_weights: bool,
    /// Where candidates run: in this process, or in a worker process that a faulting
    /// candidate cannot take down with the caller ([`worker`]). Not sent to the worker.
    #[serde(skip)]
    pub isolation: Isolation,
    /// What measuring prints about where time goes (`Target::profile`).
    pub profile: crate::target::Profile,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            measure: MeasureOptions::default(),
            codegen: CodegenOptions::default(),
            lower: LowerOptions::default(),
            verify_only: false,
            prepack_weights: true,
            isolation: Isolation::InProcess,
            profile: crate::target::Profile::Off,
        }
    }
}

/// Why an evaluation failed, as Ansor's `MeasureErrorNO` plus a message.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// 1 instantiation (replay/lowering), 2 compile, 4 runtime, 5 wrong answer, 7 timeout.
    pub error_no: u8,
    pub message: String,
}

/// The outcome of one schedule on one workload.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Evaluation {
    pub lower_time: Duration,
    /// Codegen + JIT (LLVM) time.
    pub compile_time: Duration,
    /// Relative error against the reference, when the kernel ran.
    pub rel_error: Option<f64>,
    pub measurement: Option<Measurement>,
    pub failure: Option<Failure>,
    /// Layout of the weights the kernel ran with ([`WeightLayout::Original`] when nothing
    /// was packed, or when lowering failed). Not sent back by a measuring worker.
    #[serde(skip)]
    pub weight_layout: WeightLayout,
    /// Time spent packing the weights (outside the timed region).
    pub pack_time: Duration,
}

impl Evaluation {
    fn failed(error_no: u8, message: String, lower_time: Duration, compile_time: Duration) -> Self {
        Evaluation {
            lower_time,
            compile_time,
            rel_error: None,
            measurement: None,
            failure: Some(Failure { error_no, message }),
            weight_layout: WeightLayout::Original,
            pack_time: Duration::ZERO,
        }
    }

    /// A candidate that failed before it was built (`error_no` as Ansor's).
    pub fn failure(error_no: u8, message: String) -> Self {
        Self::failed(error_no, message, Duration::ZERO, Duration::ZERO)
    }

    pub fn verified(&self) -> bool {
        self.failure.is_none() && self.rel_error.is_some()
    }

    /// Median seconds per run of a verified, timed kernel.
    pub fn median(&self) -> Option<f64> {
        if self.verified() {
            self.measurement.as_ref().map(|m| m.median)
        } else {
            None
        }
    }

    /// GFLOP/s of a verified, timed kernel doing `flops` per run (None when `flops` is 0).
    pub fn gflops(&self, flops: f64) -> Option<f64> {
        self.median()
            .filter(|_| flops > 0.0)
            .map(|s| flops / s / 1e9)
    }

    /// Lowering + codegen + JIT.
    pub fn total_compile_time(&self) -> Duration {
        self.lower_time + self.compile_time
    }
}

/// The build phase's product: a compiled kernel (with the weight layout its inputs need),
/// or why there is none.
pub struct Build {
    pub lower_time: Duration,
    /// Codegen + JIT (LLVM) time.
    pub compile_time: Duration,
    pub result: Result<(CompiledKernel, WeightLayout), Failure>,
}

/// Replays `steps` on `dag`, lowers and compiles (safe to call from several threads).
pub fn build_steps(dag: &Dag, steps: &[Step], opts: &EvalOptions) -> Build {
    let t = Instant::now();
    let mut lopts = opts.lower.clone();
    if opts.prepack_weights {
        lopts.weight_layout = WeightLayoutMode::PrePacked;
    }
    let lowered = lower_steps_detailed(dag, steps, &lopts);
    let lower_time = t.elapsed();
    match lowered {
        Ok(l) => build_kernel(&l.kernel, l.weight_layout, lower_time, opts),
        Err(e) => Build::failed(1, format!("{}: {e}", e.kind()), lower_time),
    }
}

/// The untuned default schedule of `dag` (every stage at root, no annotations).
pub fn build_default(dag: &Dag, opts: &EvalOptions) -> Build {
    let t = Instant::now();
    let kernel = lower_default(dag);
    let lower_time = t.elapsed();
    match kernel {
        Ok(k) => build_kernel(&k, WeightLayout::Original, lower_time, opts),
        Err(e) => Build::failed(1, format!("{}: {e}", e.kind()), lower_time),
    }
}

/// Compiles a lowered kernel whose weights have `layout` ([`crate::lower::Lowered`]).
pub fn build_kernel(
    kernel: &Kernel,
    layout: WeightLayout,
    lower_time: Duration,
    opts: &EvalOptions,
) -> Build {
    let t = Instant::now();
    let compiled = compile(kernel, &opts.codegen);
    let compile_time = t.elapsed();
    Build {
        lower_time,
        compile_time,
        result: compiled.map(|c| (c, layout)).map_err(|e| Failure {
            error_no: compile_error_no(&e),
            message: e.to_string(),
        }),
    }
}

fn compile_error_no(e: &CodegenError) -> u8 {
    match e {
        // Refused before compiling: the schedule itself is at fault.
        CodegenError::Unproven(_)
        | CodegenError::Cost(_)
        | CodegenError::Invalid(_)
        | CodegenError::Unroll(_) => 1,
        CodegenError::Llvm(_) => 2,
    }
}

fn run_error_no(e: &RunError) -> u8 {
    if *e == RunError::TimedOut {
        7
    } else {
        4
    }
}

impl Build {
    fn failed(error_no: u8, message: String, lower_time: Duration) -> Build {
        Build {
            lower_time,
            compile_time: Duration::ZERO,
            result: Err(Failure { error_no, message }),
        }
    }

    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }

    /// The run phase: packs the reference inputs into the kernel's weight layout (once,
    /// untimed), runs once and verifies the outputs, then (unless `verify_only`) times.
    pub fn run(&self, reference: &Reference, opts: &EvalOptions) -> Evaluation {
        let mut p = match self.prepare(reference, opts) {
            Ok(p) => p,
            Err(failed) => return failed,
        };
        if opts.verify_only {
            return p.finish(None);
        }
        match p.time(&opts.measure) {
            Ok(m) => p.finish(Some(m)),
            Err(e) => p.failed(&e),
        }
    }

    /// The run phase up to timing: packs the weights, runs once, verifies. Err: the failed
    /// evaluation (once per candidate, and what the caller reports: not worth a box).
    #[allow(clippy::result_large_err)]
    pub fn prepare(
        &self,
        reference: &Reference,
        opts: &EvalOptions,
    ) -> Result<Prepared<'_>, Evaluation> {
        let (lower_time, compile_time) = (self.lower_time, self.compile_time);
        let fail = |f: &Failure| {
            Evaluation::failed(f.error_no, f.message.clone(), lower_time, compile_time)
        };
        let (compiled, layout) = self.result.as_ref().map_err(fail)?;
        let t = Instant::now();
        let args = match layout {
            WeightLayout::Original => kernel_args(&compiled.kernel, &reference.inputs),
            packed => kernel_args(&compiled.kernel, &packed.pack_inputs(&reference.inputs)),
        };
        let pack_time = if *layout == WeightLayout::Original {
            Duration::ZERO
        } else {
            t.elapsed()
        };
        let mut args = args.map_err(|e| Evaluation::failed(4, e, lower_time, compile_time))?;
        let run = RunOptions {
            threads: opts.measure.threads,
            timeout: opts.measure.timeout,
        };
        compiled.run(&mut args, &run).map_err(|e| {
            Evaluation::failed(run_error_no(&e), e.to_string(), lower_time, compile_time)
        })?;
        let rel_error = check(compiled, &args, reference).map_err(|f| fail(&f))?;
        let weights = weight_args(&compiled.kernel, &reference.weights);
        Ok(Prepared {
            compiled,
            layout,
            args,
            weights,
            copies: Vec::new(),
            taken: 0,
            rel_error,
            pack_time,
            lower_time,
            compile_time,
        })
    }
}

/// The positions among `kernel`'s parameters of its inputs number `inputs` (the i-th input
/// parameter takes the i-th input, as [`kernel_args`] passes them).
fn weight_args(kernel: &Kernel, inputs: &[usize]) -> Vec<usize> {
    use crate::loopnest::ir::BufferRole;
    kernel
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| p.role == BufferRole::Input)
        .enumerate()
        .filter(|(input, _)| inputs.contains(input))
        .map(|(_, (param, _))| param)
        .collect()
}

/// How many copies of a kernel's arguments its samples are timed on, in turn.
///
/// What a kernel measures depends on where its buffers landed: resnet_50's e06217
/// 1x16x14x14x16 schedule, built once and given six copies of the same arguments, timed
/// 6-7 ms on two copies and 49 ms on the other four, each copy steady over ten interleaved
/// samples; at fixed offsets within a page it still did. A schedule timed on one placement
/// is timed on a lottery ticket; its median over several is what a user's allocation
/// will likely see, and a schedule that only one placement makes fast is not picked.
pub const PLACEMENTS: usize = 3;

/// Arguments larger than this are timed on one placement.
const COPY_MAX_BYTES: usize = 16 << 20;

/// A built kernel whose outputs were verified, with its packed arguments, ready to be timed
/// (as often as wanted: callers can interleave the timings of several kernels).
pub struct Prepared<'a> {
    compiled: &'a CompiledKernel,
    layout: &'a WeightLayout,
    args: Vec<BufferData>,
    /// Which of `args` are the weights ([`Reference::weights`]).
    weights: Vec<usize>,
    /// Further copies of `args` ([`PLACEMENTS`]), made by the first timing.
    copies: Vec<Vec<BufferData>>,
    /// Samples taken so far (they cycle through `args` and `copies`).
    taken: usize,
    rel_error: f64,
    pack_time: Duration,
    lower_time: Duration,
    compile_time: Duration,
}

impl Prepared<'_> {
    /// Times the kernel with `opts` (warm-up, repeats): the first sample calibrates the runs
    /// per sample, each sample runs on the next copy of the arguments ([`PLACEMENTS`]).
    pub fn time(&mut self, opts: &MeasureOptions) -> Result<Measurement, RunError> {
        let one = MeasureOptions {
            repeat: 1,
            ..opts.clone()
        };
        let cold = opts.caches.evicted(&self.args, &self.weights);
        let first = measure(self.compiled, self.next_args(), &one, &cold)?;
        let mut samples = first.samples;
        for _ in 1..opts.repeat.max(1) {
            samples.extend(self.time_again(first.number, opts)?.samples);
        }
        Ok(Measurement::from_samples(samples, first.number))
    }

    /// One more sample with `number` runs, as calibrated by an earlier [`Prepared::time`]
    /// ([`crate::measure::runner::measure_again`]), on the next copy of the arguments.
    pub fn time_again(
        &mut self,
        number: usize,
        opts: &MeasureOptions,
    ) -> Result<Measurement, RunError> {
        let cold = opts.caches.evicted(&self.args, &self.weights);
        let compiled = self.compiled;
        measure_again(compiled, self.next_args(), number, opts, &cold)
    }

    fn next_args(&mut self) -> &mut [BufferData] {
        // The copies, once, at the first sample. (Copies of very large arguments would cost
        // more memory than a batch should take; their buffers span so many pages that one
        // placement is as good as several.)
        if self.taken == 0 {
            let bytes: usize = self.args.iter().map(|b| b.len() * b.dtype().bytes()).sum();
            if bytes <= COPY_MAX_BYTES {
                self.copies = (1..PLACEMENTS).map(|_| self.args.clone()).collect();
            }
        }
        let k = self.taken % (self.copies.len() + 1);
        self.taken += 1;
        if k == 0 {
            &mut self.args
        } else {
            &mut self.copies[k - 1]
        }
    }

    /// The evaluation: verified, timed by `measurement` (None: verify only).
    pub fn finish(self, measurement: Option<Measurement>) -> Evaluation {
        Evaluation {
            lower_time: self.lower_time,
            compile_time: self.compile_time,
            rel_error: Some(self.rel_error),
            measurement,
            failure: None,
            weight_layout: self.layout.clone(),
            pack_time: self.pack_time,
        }
    }

    /// The evaluation of a kernel that verified but failed while timed.
    pub fn failed(self, e: &RunError) -> Evaluation {
        Evaluation::failed(
            run_error_no(e),
            e.to_string(),
            self.lower_time,
            self.compile_time,
        )
    }
}

fn check(
    compiled: &CompiledKernel,
    args: &[BufferData],
    reference: &Reference,
) -> Result<f64, Failure> {
    let wrong = |message: String| Failure {
        error_no: 5,
        message: format!("wrong answer: {message}"),
    };
    let e = reference
        .output_error(&compiled.kernel, args)
        .map_err(wrong)?;
    if !e.within_tolerance() {
        return Err(wrong(format!("relative error {:.2e} > {RTOL:.0e}", e.rel)));
    }
    Ok(e.rel)
}

/// Build and run in one go (one candidate, no batch).
pub fn evaluate_steps(
    dag: &Dag,
    steps: &[Step],
    reference: &Reference,
    opts: &EvalOptions,
) -> Evaluation {
    match &opts.isolation {
        Isolation::InProcess => build_steps(dag, steps, opts).run(reference, opts),
        Isolation::Worker(spec) => in_worker(spec, dag, Some(steps), reference, opts),
    }
}

/// Build and run the untuned default schedule.
pub fn evaluate_default(dag: &Dag, reference: &Reference, opts: &EvalOptions) -> Evaluation {
    match &opts.isolation {
        Isolation::InProcess => build_default(dag, opts).run(reference, opts),
        Isolation::Worker(spec) => in_worker(spec, dag, None, reference, opts),
    }
}

/// [`evaluate_steps`] (or the default schedule) in a worker process.
fn in_worker(
    spec: &WorkerSpec,
    dag: &Dag,
    steps: Option<&[Step]>,
    reference: &Reference,
    opts: &EvalOptions,
) -> Evaluation {
    let task = worker::TaskRef {
        dag,
        reference_seed: reference.seed,
        eval: opts,
        expected: reference.shippable_expected(),
    };
    worker::with_client(spec, |c| c.one(&task, steps, &|| false)).unwrap_or_else(|| {
        Evaluation::failed(7, "interrupted".into(), Duration::ZERO, Duration::ZERO)
    })
}

/// Build and run a lowered kernel whose weights have the DAG's layout.
pub fn evaluate_kernel(
    kernel: &Kernel,
    reference: &Reference,
    lower_time: Duration,
    opts: &EvalOptions,
) -> Evaluation {
    build_kernel(kernel, WeightLayout::Original, lower_time, opts).run(reference, opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::runner::Caches;
    use ttdb_algo::ops::{Anchor, EpilogueOp, Era, Window2d, WorkloadSpec};

    /// A 3x3 NHWC conv with a ReLU, small enough for the interpreter.
    fn small_conv() -> ttdb_algo::ir::Dag {
        let spec = WorkloadSpec::new(
            Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
            vec![EpilogueOp::Relu],
        );
        spec.build(Era::V010, &[vec![1, 6, 6, 4], vec![3, 3, 4, 8]])
            .expect("a conv")
    }

    /// A reference rebuilt from shipped values is the same reference, and values of the
    /// wrong shape (they come from another process) are refused, never indexed.
    #[test]
    fn a_reference_from_shipped_values_equals_the_evaluated_one() {
        let dag = small_conv();
        let evaluated = Reference::new(&dag, 9).expect("reference");
        let shipped = evaluated
            .shippable_expected()
            .expect("finite values")
            .to_vec();
        let json = serde_json::to_string(&shipped).unwrap();
        let rebuilt =
            Reference::with_expected(&dag, 9, serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(rebuilt.expected, evaluated.expected);
        assert!(rebuilt.inputs == evaluated.inputs);
        let bad = |f: &dyn Fn(&mut Vec<ExpectedValues>)| {
            let mut e = shipped.clone();
            f(&mut e);
            Reference::with_expected(&dag, 9, e).err().expect("refused")
        };
        let total = dag.stage(dag.outputs[0]).shape().iter().product::<i64>() as usize;
        assert!(bad(&|e| e[0].0[3] = total).contains("elements"));
        assert!(bad(&|e| {
            e[0].1.pop();
        })
        .contains("values"));
        assert!(bad(&|e| e.push(e[0].clone())).contains("output(s)"));
        let mut nan = Reference::new(&dag, 9).unwrap();
        nan.expected[0].1[0] = f64::NAN;
        assert!(nan.shippable_expected().is_none());
    }

    #[test]
    fn samples_run_on_each_copy_of_the_arguments_in_turn() {
        let dag = small_conv();
        let reference = Reference::new(&dag, 5).expect("reference");
        let opts = EvalOptions {
            measure: MeasureOptions {
                warmup: 0,
                repeat: PLACEMENTS,
                min_repeat_ms: 0,
                ..MeasureOptions::default()
            },
            ..EvalOptions::default()
        };
        let build = build_steps(&dag, &[], &opts);
        let Ok(mut p) = build.prepare(&reference, &opts) else {
            panic!("the naive schedule verifies");
        };
        let m = p.time(&opts.measure).expect("timed");
        assert_eq!(m.samples.len(), PLACEMENTS);
        assert_eq!(p.copies.len(), PLACEMENTS - 1);
        // The output (the last argument) wiped in every copy comes back in every copy.
        let out = p.args.last().expect("an output").clone();
        assert!((0..out.len()).any(|i| out.get_f64(i) != 0.0));
        let wipe = |b: &mut BufferData| *b = BufferData::zeros(b.dtype(), b.len());
        wipe(p.args.last_mut().expect("output"));
        for c in &mut p.copies {
            wipe(c.last_mut().expect("output"));
        }
        for _ in 0..PLACEMENTS {
            p.time_again(m.number, &opts.measure).expect("timed");
        }
        assert_eq!(p.args.last(), Some(&out));
        for c in &p.copies {
            assert_eq!(c.last(), Some(&out));
        }
    }

    #[test]
    fn flushed_samples_time_runs_one_by_one_and_keep_the_arguments() {
        let dag = small_conv();
        let reference = Reference::new(&dag, 5).expect("reference");
        let opts = EvalOptions {
            measure: MeasureOptions {
                warmup: 0,
                repeat: 4,
                min_repeat_ms: 1,
                caches: Caches::ColdButFirst,
                ..MeasureOptions::default()
            },
            ..EvalOptions::default()
        };
        let build = build_steps(&dag, &[], &opts);
        let Ok(mut p) = build.prepare(&reference, &opts) else {
            panic!("the naive schedule verifies");
        };
        let inputs: Vec<BufferData> = p.args[..p.args.len() - 1].to_vec();
        let out = p.args.last().expect("an output").clone();
        let m = p.time(&opts.measure).expect("timed");
        assert_eq!(m.samples.len(), 4);
        assert_eq!(m.number, 1, "a flushed run is timed alone");
        assert!(m.samples.iter().all(|s| *s > 0.0 && s.is_finite()));
        // Evicting lines from the caches changes no byte of any argument.
        assert_eq!(&p.args[..p.args.len() - 1], &inputs[..]);
        assert_eq!(p.args.last(), Some(&out));
    }

    #[test]
    fn cold_weights_are_the_conv_kernel_and_only_when_they_are_large_enough() {
        let dag = small_conv();
        let reference = Reference::new(&dag, 5).expect("reference");
        assert_eq!(reference.weights, vec![1], "data, then the conv's kernel");
        let opts = |min_bytes| EvalOptions {
            measure: MeasureOptions {
                warmup: 0,
                repeat: 3,
                min_repeat_ms: 5,
                caches: Caches::ColdWeights { min_bytes },
                ..MeasureOptions::default()
            },
            ..EvalOptions::default()
        };
        let build = build_steps(&dag, &[], &opts(1));
        let Ok(mut p) = build.prepare(&reference, &opts(1)) else {
            panic!("the naive schedule verifies");
        };
        assert_eq!(p.weights, vec![1]);
        let weight_bytes = p.args[1].len() * 4;
        let big = opts(weight_bytes).measure;
        assert_eq!(big.caches.evicted(&p.args, &p.weights), vec![1]);
        assert_eq!(p.time(&big).expect("timed").number, 1, "cold: timed alone");
        let small = opts(weight_bytes + 1).measure;
        assert!(small.caches.evicted(&p.args, &p.weights).is_empty());
        let warm = p.time(&small).expect("timed");
        assert!(warm.number > 1, "warm: runs back to back ({})", warm.number);
    }
}
