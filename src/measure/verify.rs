//! Output verification: compare buffers within a relative error (default 1e-4).

use crate::codegen::{CompiledKernel, RunOptions};
use crate::loopnest::data::BufferData;
use crate::loopnest::interp::{run as interp, InterpOptions};
use crate::loopnest::ir::BufferRole;

pub const DEFAULT_RTOL: f64 = 1e-4;

#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    pub index: usize,
    pub got: f64,
    pub want: f64,
    /// Number of mismatching elements.
    pub count: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} mismatching element(s); first at {}: got {} want {}",
            self.count, self.index, self.got, self.want
        )
    }
}

/// `|got - want| ≤ rtol · max(|got|, |want|, 1)` element-wise (NaN matches NaN).
pub fn compare(got: &BufferData, want: &BufferData, rtol: f64) -> Result<(), Mismatch> {
    if got.len() != want.len() {
        return Err(Mismatch {
            index: 0,
            got: got.len() as f64,
            want: want.len() as f64,
            count: 1,
        });
    }
    let mut first: Option<Mismatch> = None;
    let mut count = 0;
    for i in 0..got.len() {
        let (g, w) = (got.get_f64(i), want.get_f64(i));
        if g.is_nan() && w.is_nan() {
            continue;
        }
        let ok = (g - w).abs() <= rtol * g.abs().max(w.abs()).max(1.0);
        if !ok {
            count += 1;
            first.get_or_insert(Mismatch {
                index: i,
                got: g,
                want: w,
                count: 0,
            });
        }
    }
    match first {
        None => Ok(()),
        Some(m) => Err(Mismatch { count, ..m }),
    }
}

/// Run `compiled` and the interpreter on the same random inputs and compare every output.
pub fn verify_against_interpreter(
    compiled: &CompiledKernel,
    seed: u64,
    rtol: f64,
) -> Result<(), String> {
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
    for (n, p) in k.params.iter().enumerate() {
        if p.role == BufferRole::Output {
            compare(&a[n], &b[n], rtol).map_err(|m| format!("buffer `{}`: {m}", p.name))?;
        }
    }
    Ok(())
}
