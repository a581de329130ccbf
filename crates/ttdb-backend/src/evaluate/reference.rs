//! The reference a candidate is verified against: one workload's seeded inputs and its
//! outputs at sampled points, computed once by the naive evaluator (`ir::eval`) and shared
//! by every candidate of the workload.
use crate::loopnest::verify::{kernel_output_error, Expected, OutputError};
use crate::loopnest::{BufferData, Kernel};
use std::time::{Duration, Instant};
use ttdb_algo::ir::eval::{evaluate_points, random_inputs, TensorData};
use ttdb_algo::ir::Dag;

/// Output points checked per output tensor: all of them up to this size, else a spread
/// sample of this many (first and last elements included). The reference evaluator is
/// demand-driven, so a sample costs its receptive field only.
pub const SAMPLE_POINTS: usize = 1024;

/// One output's checked points: (flat positions, reference values there).
pub type ExpectedValues = (Vec<usize>, Vec<f64>);

/// Inputs and reference values of one workload's outputs at the checked points.
pub struct Reference {
    /// What [`Reference::new`] drew the inputs and checked points from: a measuring worker
    /// rebuilds the same reference from the DAG and this.
    pub seed: u64,
    pub inputs: Vec<TensorData>,
    /// Which of `inputs` are the kernel's weights ([`Dag::weight_inputs`]): the ones a
    /// model's kernel meets cold ([`crate::measure::runner::Caches::ColdWeights`]).
    pub weights: Vec<usize>,
    /// Per output: (flat positions, reference values there).
    pub expected: Vec<ExpectedValues>,
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
    /// The reference of `dag` from the inputs `seed` draws and values someone already
    /// computed with [`Reference::new`] (a measuring worker gets them from its parent, or
    /// from the queue's coordinator, instead of evaluating the DAG again: ~0.7 s per conv).
    /// They come from another process, so their shape is checked: one entry per output,
    /// as many values as points, every point inside its output.
    pub fn with_expected(
        dag: &Dag,
        seed: u64,
        expected: Vec<ExpectedValues>,
    ) -> Result<Reference, String> {
        let t = Instant::now();
        if expected.len() != dag.outputs.len() {
            return Err(format!(
                "reference values for {} output(s), the DAG has {}",
                expected.len(),
                dag.outputs.len()
            ));
        }
        for (i, ((points, values), out)) in expected.iter().zip(&dag.outputs).enumerate() {
            let total = dag.stage(*out).shape().iter().product::<i64>().max(0) as usize;
            if points.len() != values.len() || points.iter().any(|&p| p >= total) {
                return Err(format!(
                    "reference values of output {i}: {} points, {} values, for {total} elements",
                    points.len(),
                    values.len()
                ));
            }
        }
        Ok(Reference {
            seed,
            inputs: random_inputs(dag, seed),
            weights: dag.weight_inputs(),
            expected,
            eval_time: t.elapsed(),
        })
    }

    /// The reference values, where JSON can carry them (every value finite), to hand to
    /// [`Reference::with_expected`] in another process.
    pub fn shippable_expected(&self) -> Option<&[ExpectedValues]> {
        let finite = self
            .expected
            .iter()
            .all(|(_, v)| v.iter().all(|x| x.is_finite()));
        finite.then_some(&self.expected[..])
    }

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
            seed,
            inputs,
            weights: dag.weight_inputs(),
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
