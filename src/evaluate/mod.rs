//! Evaluating a schedule on a workload: replay → lower → compile → verify → time.
//!
//! Every measured schedule is first verified against the naive reference (`ir::eval`) on
//! pseudo-random inputs; a kernel that fails is reported with TVM's error code and never
//! chosen. The reference is computed once per workload ([`Reference`]) and shared by all
//! candidates of that workload.
//!
//! Layout-free weights (conv2d NHWC, dense, batch_matmul, winograd bgemm) are pre-packed into
//! the layout each candidate's schedule derives, like Ansor's layout rewrite option 2
//! (`RewriteForPreTransformed`, spec §4.8), which is how TVM measured relay tasks on llvm:
//! the packing happens once per candidate, outside the timed region
//! ([`EvalOptions::prepack_weights`]). Verification is unchanged: the kernel's outputs are
//! compared with the reference of the original DAG on the original inputs.
use crate::ansor::Step;
use crate::codegen::{compile, CodegenError, CodegenOptions, CompiledKernel, RunOptions};
use crate::ir::eval::{evaluate_points, random_inputs, TensorData};
use crate::ir::Dag;
use crate::loopnest::verify::{kernel_output_error, Expected, OutputError, RTOL};
use crate::loopnest::{BufferData, Kernel};
use crate::lower::check::kernel_args;
use crate::lower::{
    lower_default, lower_steps_detailed, LowerOptions, WeightLayout, WeightLayoutMode,
};
use crate::measure::runner::{measure, MeasureOptions, Measurement};
use std::time::{Duration, Instant};

/// Output points checked per output tensor: all of them up to this size, else a spread
/// sample of this many (first and last elements included). The reference evaluator is
/// demand-driven, so a sample costs its receptive field only.
pub const SAMPLE_POINTS: usize = 1024;

/// Inputs and reference values of one workload's outputs at the checked points.
pub struct Reference {
    pub inputs: Vec<TensorData>,
    /// Per output: (flat positions, reference values there).
    pub expected: Vec<(Vec<usize>, Vec<f64>)>,
    pub eval_time: Duration,
}

/// Deterministic spread sample of `n` positions in `0..total`.
fn sample_points(total: usize, n: usize, seed: u64) -> Vec<usize> {
    if total <= n {
        return (0..total).collect();
    }
    let mut state = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut pts: Vec<usize> = (0..n - 2)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % total as u64) as usize
        })
        .collect();
    pts.push(0);
    pts.push(total - 1);
    pts.sort_unstable();
    pts.dedup();
    pts
}

impl Reference {
    pub fn new(dag: &Dag, seed: u64) -> Result<Reference, String> {
        let t = Instant::now();
        let inputs = random_inputs(dag, seed);
        let mut expected = Vec::new();
        for (i, out) in dag.outputs.iter().enumerate() {
            let total = dag.stage(*out).shape().iter().product::<i64>() as usize;
            let points = sample_points(total, SAMPLE_POINTS, seed);
            let values = evaluate_points(dag, &inputs, i, &points)
                .map_err(|e| format!("reference evaluation failed: {e}"))?;
            expected.push((points, values));
        }
        Ok(Reference {
            inputs,
            expected,
            eval_time: t.elapsed(),
        })
    }

    /// How far the kernel's outputs are from the reference at the checked points.
    pub fn output_error(
        &self,
        kernel: &Kernel,
        args: &[BufferData],
    ) -> Result<OutputError, String> {
        let expected: Vec<Expected> = self
            .expected
            .iter()
            .map(|(points, values)| Expected {
                points: Some(points),
                values,
            })
            .collect();
        kernel_output_error(kernel, args, &expected)
    }
}

#[derive(Clone, Debug)]
pub struct EvalOptions {
    pub measure: MeasureOptions,
    pub codegen: CodegenOptions,
    pub lower: LowerOptions,
    /// Skip timing (verify only).
    pub verify_only: bool,
    /// Pre-pack the layout-free weights into the layout the schedule derives (Ansor's layout
    /// rewrite option 2, packing outside the timed region) in [`evaluate_steps`]; on by
    /// default. Off: the weights keep their DAG layout (`lower.weight_layout` decides).
    /// DAGs without layout-free weights, schedules that read them through a cache_read or
    /// rfactor stage, and the naive default schedule are unaffected.
    pub prepack_weights: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            measure: MeasureOptions::default(),
            codegen: CodegenOptions::default(),
            lower: LowerOptions::default(),
            verify_only: false,
            prepack_weights: true,
        }
    }
}

/// Why an evaluation failed, as Ansor's `MeasureErrorNO` plus a message.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// 1 instantiation (replay/lowering), 2 compile, 4 runtime, 5 wrong answer, 7 timeout.
    pub error_no: u8,
    pub message: String,
}

/// The outcome of one schedule on one workload.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub lower_time: Duration,
    /// Codegen + JIT (LLVM) time.
    pub compile_time: Duration,
    /// Relative error against the reference, when the kernel ran.
    pub rel_error: Option<f64>,
    pub measurement: Option<Measurement>,
    pub failure: Option<Failure>,
    /// Layout of the weights the kernel ran with ([`WeightLayout::Original`] when nothing
    /// was packed, or when lowering failed).
    pub weight_layout: WeightLayout,
    /// Time spent packing the weights (outside the timed region).
    pub pack_time: Duration,
}

impl Evaluation {
    fn failed(
        error_no: u8,
        message: String,
        lower_time: Duration,
        compile_time: Duration,
    ) -> Evaluation {
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

    /// What to store for this evaluation: a ttdb-native record of `steps` on the workload
    /// `workload_key` (doing `flops` per run) plus its measurement row.
    pub fn to_measurement(
        &self,
        workload_key: String,
        steps: Vec<Step>,
        flops: f64,
        origin_record_id: Option<i64>,
        provenance: String,
    ) -> crate::store::measurement::NewMeasurement {
        let m = self.measurement.as_ref();
        crate::store::measurement::NewMeasurement {
            workload_key,
            steps,
            samples: if self.verified() {
                m.map(|m| m.samples.clone()).unwrap_or_default()
            } else {
                vec![]
            },
            // Verified but not timed (verify-only runs): TVM's "unknown" code, never chosen.
            error_no: self
                .failure
                .as_ref()
                .map_or(if m.is_some() { 0 } else { 8 }, |f| f.error_no),
            error: self.failure.as_ref().map(|f| f.message.clone()),
            verified: self.verified(),
            max_rel_error: self.rel_error,
            median_s: m.map(|m| m.median),
            min_s: m.map(|m| m.min),
            max_s: m.map(|m| m.max),
            gflops: self.gflops(flops),
            compile_ms: Some(self.total_compile_time().as_secs_f64() * 1e3),
            wall_s: self.total_compile_time().as_secs_f64()
                + m.map_or(0.0, |m| m.samples.iter().sum::<f64>() * m.number as f64),
            origin_record_id,
            provenance,
        }
    }
}

/// Replays `steps` on `dag`, lowers, compiles, verifies and times.
pub fn evaluate_steps(
    dag: &Dag,
    steps: &[Step],
    reference: &Reference,
    opts: &EvalOptions,
) -> Evaluation {
    let t = Instant::now();
    let mut lopts = opts.lower.clone();
    if opts.prepack_weights {
        lopts.weight_layout = WeightLayoutMode::PrePacked;
    }
    let lowered = lower_steps_detailed(dag, steps, &lopts);
    let lower_time = t.elapsed();
    match lowered {
        Ok(l) => evaluate_with_layout(&l.kernel, &l.weight_layout, reference, lower_time, opts),
        Err(e) => Evaluation::failed(1, format!("{}: {e}", e.kind()), lower_time, Duration::ZERO),
    }
}

/// The untuned default schedule of `dag` (every stage at root, no annotations).
pub fn evaluate_default(dag: &Dag, reference: &Reference, opts: &EvalOptions) -> Evaluation {
    let t = Instant::now();
    let kernel = lower_default(dag);
    let lower_time = t.elapsed();
    match kernel {
        Ok(k) => evaluate_kernel(&k, reference, lower_time, opts),
        Err(e) => Evaluation::failed(1, format!("{}: {e}", e.kind()), lower_time, Duration::ZERO),
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

/// Compiles, verifies and (unless `verify_only`) times a lowered kernel whose weights have
/// the DAG's layout.
pub fn evaluate_kernel(
    kernel: &Kernel,
    reference: &Reference,
    lower_time: Duration,
    opts: &EvalOptions,
) -> Evaluation {
    evaluate_with_layout(kernel, &WeightLayout::Original, reference, lower_time, opts)
}

/// [`evaluate_kernel`] for a kernel whose weights have `layout`
/// ([`crate::lower::Lowered::weight_layout`]): the reference inputs are packed once, before
/// the verification run and the timed runs; the outputs are checked against the reference.
pub fn evaluate_with_layout(
    kernel: &Kernel,
    layout: &WeightLayout,
    reference: &Reference,
    lower_time: Duration,
    opts: &EvalOptions,
) -> Evaluation {
    let t = Instant::now();
    let compiled = compile(kernel, &opts.codegen);
    let compile_time = t.elapsed();
    let compiled = match compiled {
        Ok(c) => c,
        Err(e) => {
            return Evaluation::failed(
                compile_error_no(&e),
                e.to_string(),
                lower_time,
                compile_time,
            )
        }
    };
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
    let mut args = match args {
        Ok(a) => a,
        Err(e) => return Evaluation::failed(4, e, lower_time, compile_time),
    };
    let run = RunOptions {
        threads: opts.measure.threads,
        timeout: opts.measure.timeout,
    };
    if let Err(e) = compiled.run(&mut args, &run) {
        let code = if e == crate::codegen::RunError::TimedOut {
            7
        } else {
            4
        };
        return Evaluation::failed(code, e.to_string(), lower_time, compile_time);
    }
    let rel_error = match check(&compiled, &args, reference) {
        Ok(r) => r,
        Err(f) => return Evaluation::failed(f.error_no, f.message, lower_time, compile_time),
    };
    let measurement = if opts.verify_only {
        None
    } else {
        match measure(&compiled, &mut args, &opts.measure) {
            Ok(m) => Some(m),
            Err(e) => {
                let code = if e == crate::codegen::RunError::TimedOut {
                    7
                } else {
                    4
                };
                return Evaluation::failed(code, e.to_string(), lower_time, compile_time);
            }
        }
    };
    Evaluation {
        lower_time,
        compile_time,
        rel_error: Some(rel_error),
        measurement,
        failure: None,
        weight_layout: layout.clone(),
        pack_time,
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
