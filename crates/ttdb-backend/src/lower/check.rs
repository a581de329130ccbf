//! Checking a lowered kernel against the DAG's reference evaluator ([`ttdb_algo::ir::eval`]):
//! the same pseudo-random inputs go through the checked interpreter
//! ([`crate::loopnest::interp`]) and through `ir::eval`; outputs are compared.
use super::{param_tensors, WeightLayout};
use crate::loopnest::interp::{run, InterpOptions};
use crate::loopnest::verify::{kernel_output_error, Expected};
use crate::loopnest::{BufferData, BufferRole, Kernel};
use ttdb_algo::ir::eval::{evaluate, random_inputs, TensorData};
use ttdb_algo::ir::Dag;

/// Outcome of one comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Largest |kernel - reference| over all outputs.
    pub max_abs_err: f64,
    /// `max_abs_err / max(|reference|)` (the reference's largest magnitude, at least 1e-30).
    pub rel_err: f64,
    /// Interpreter steps executed.
    pub steps: u64,
}

/// Kernel arguments for `inputs` (placeholders in stage order): inputs converted to the
/// parameter types, outputs zeroed.
pub fn kernel_args(kernel: &Kernel, inputs: &[TensorData]) -> Result<Vec<BufferData>, String> {
    let mut next = 0;
    kernel
        .params
        .iter()
        .map(|p| {
            if p.role != BufferRole::Input {
                return Ok(BufferData::for_buffer(p));
            }
            let t = inputs
                .get(next)
                .ok_or("fewer inputs than input parameters")?;
            next += 1;
            if t.len() as i64 != p.num_elements() {
                return Err(format!(
                    "input {} has {} elements, parameter {} wants {}",
                    next - 1,
                    t.len(),
                    p.name,
                    p.num_elements()
                ));
            }
            let mut b = BufferData::zeros(p.dtype, t.len());
            match &mut b {
                BufferData::F32(v) => v.iter_mut().zip(&t.data).for_each(|(d, s)| *d = *s as f32),
                BufferData::F64(v) => v.copy_from_slice(&t.data),
                BufferData::I8(v) => v.iter_mut().zip(&t.data).for_each(|(d, s)| *d = *s as i8),
                BufferData::U8(v) => v.iter_mut().zip(&t.data).for_each(|(d, s)| *d = *s as u8),
                BufferData::I32(v) => v.iter_mut().zip(&t.data).for_each(|(d, s)| *d = *s as i32),
                BufferData::I64(v) => v.iter_mut().zip(&t.data).for_each(|(d, s)| *d = *s as i64),
            }
            Ok(b)
        })
        .collect()
}

/// Compares the kernel's output parameters (after a run) with the reference outputs, at
/// every element: `(max abs error, relative error)` (`crate::loopnest::verify`).
pub fn compare_outputs(
    kernel: &Kernel,
    args: &[BufferData],
    reference: &[TensorData],
) -> Result<(f64, f64), String> {
    let expected: Vec<Expected> = reference.iter().map(|t| Expected::all(&t.data)).collect();
    let e = kernel_output_error(kernel, args, &expected)?;
    Ok((e.max_abs, e.rel))
}

/// Runs `kernel` in the interpreter on the seeded inputs of `dag` and compares with
/// `ir::eval`. Errors: the interpreter failed (out-of-bounds access, step budget), or the
/// reference failed.
pub fn interpret_against_reference(
    dag: &Dag,
    kernel: &Kernel,
    seed: u64,
    step_budget: Option<u64>,
) -> Result<Comparison, String> {
    interpret_with_layout(dag, kernel, &WeightLayout::Original, seed, step_budget)
}

/// [`interpret_against_reference`] for a kernel whose weights have `layout` (see
/// [`super::Lowered::weight_layout`]): the seeded inputs are packed for the kernel, the
/// reference is computed on the original ones.
pub fn interpret_with_layout(
    dag: &Dag,
    kernel: &Kernel,
    layout: &WeightLayout,
    seed: u64,
    step_budget: Option<u64>,
) -> Result<Comparison, String> {
    if kernel.params.len() != param_tensors(dag).len() {
        return Err("the kernel's parameters do not match the DAG".into());
    }
    let inputs = random_inputs(dag, seed);
    let reference = evaluate(dag, &inputs).map_err(|e| format!("reference: {e}"))?;
    let mut args = match layout {
        WeightLayout::Original => kernel_args(kernel, &inputs)?,
        packed => kernel_args(kernel, &packed.pack_inputs(&inputs))?,
    };
    // (struct update: robust to options added later)
    #[allow(clippy::needless_update)]
    let opts = InterpOptions {
        step_budget,
        ..Default::default()
    };
    let steps = run(kernel, &mut args, opts).map_err(|e| format!("interpreter: {e}"))?;
    let (max_abs_err, rel_err) = compare_outputs(kernel, &args, &reference)?;
    Ok(Comparison {
        max_abs_err,
        rel_err,
        steps,
    })
}
