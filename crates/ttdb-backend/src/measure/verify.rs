//! A compiled kernel checked against the checked interpreter running the same loop nest on
//! the same random inputs (codegen tests and benchmarks), with ttdb's one output check
//! (`crate::loopnest::verify`).
use crate::codegen::{CompiledKernel, RunOptions};
use crate::loopnest::data::BufferData;
use crate::loopnest::interp::{run as interp, InterpOptions};
use crate::loopnest::ir::BufferRole;
use crate::loopnest::verify::{kernel_output_error, Expected, RTOL};

/// Runs `compiled` and the interpreter on the same seeded inputs; every output must be
/// within the tolerance of the interpreter's.
pub fn verify_against_interpreter(compiled: &CompiledKernel, seed: u64) -> Result<(), String> {
    let k = &compiled.kernel;
    let mut a: Vec<BufferData> = k
        .params
        .iter()
        .enumerate()
        .map(|(n, p)| match p.role {
            BufferRole::Input => {
                BufferData::random(p.dtype, p.num_elements() as usize, seed + n as u64)
            }
            _ => BufferData::for_buffer(p),
        })
        .collect();
    let mut b = a.clone();
    compiled
        .run(&mut a, &RunOptions::default())
        .map_err(|e| e.to_string())?;
    interp(k, &mut b, InterpOptions::default()).map_err(|e| e.to_string())?;
    let want: Vec<Vec<f64>> = k
        .params
        .iter()
        .zip(&b)
        .filter(|(p, _)| p.role == BufferRole::Output)
        .map(|(_, buf)| (0..buf.len()).map(|i| buf.get_f64(i)).collect())
        .collect();
    let expected: Vec<Expected> = want.iter().map(|v| Expected::all(v)).collect();
    let e = kernel_output_error(k, &a, &expected)?;
    if !e.within_tolerance() {
        return Err(format!(
            "relative error {:.2e} > {RTOL:.0e} (max abs {:.3e})",
            e.rel, e.max_abs
        ));
    }
    Ok(())
}
