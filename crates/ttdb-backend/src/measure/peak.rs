//! Machine fp32 FMA peak, measured with a JIT kernel of independent vector FMA chains (built as
//! a loop-nest kernel and compiled by our own codegen). The denominator for every "% of peak".

use super::runner::{measure, MeasureOptions};
use crate::codegen::{compile, CodegenError, CodegenOptions};
use crate::loopnest::data::BufferData;
use crate::loopnest::ir::*;

/// Independent accumulator chains (enough to cover FMA latency × pipes on current x86).
pub const CHAINS: i64 = 12;

#[derive(Clone, Debug)]
pub struct Peak {
    pub lanes: u32,
    pub gflops_1t: f64,
    pub threads: usize,
    pub gflops_all: f64,
}

/// `threads` independent workers, each running `iters` × `CHAINS` vector FMAs of `lanes` lanes.
pub fn fma_kernel(lanes: i64, threads: i64, iters: i64) -> Kernel {
    let v = Expr::var;
    let acc = |c: i64| vec![Expr::int(c), v("l")];
    let out = |c: i64| vec![v("t"), Expr::add(Expr::int(c * lanes), v("l"))];
    let per_chain = |f: &dyn Fn(i64) -> Stmt| {
        Stmt::seq(
            (0..CHAINS)
                .map(|c| Stmt::loop_("l", lanes, ForKind::Vectorized, f(c)))
                .collect(),
        )
    };
    let init = per_chain(&|c| Stmt::store("acc", acc(c), Expr::load("O", out(c))));
    let step = per_chain(&|c| {
        Stmt::store(
            "acc",
            acc(c),
            Expr::add(
                Expr::mul(
                    Expr::load("acc", acc(c)),
                    Expr::load("X", vec![Expr::int(0)]),
                ),
                Expr::load("X", vec![Expr::int(1)]),
            ),
        )
    });
    let fini = per_chain(&|c| Stmt::store("O", out(c), Expr::load("acc", acc(c))));
    let body = Stmt::allocate(
        Buffer::new("acc", DType::F32, &[CHAINS, lanes], BufferRole::Temporary),
        Stmt::seq(vec![
            init,
            Stmt::loop_("it", iters, ForKind::Serial, step),
            fini,
        ]),
    );
    Kernel::new(
        "fma_peak",
        vec![
            Buffer::new("X", DType::F32, &[2], BufferRole::Input),
            Buffer::new(
                "O",
                DType::F32,
                &[threads, CHAINS * lanes],
                BufferRole::Output,
            ),
        ],
        Stmt::loop_("t", threads, ForKind::Parallel, body),
    )
}

/// Measure GFLOP/s of the FMA kernel with `threads` threads. Uses the *fastest* repeat, so
/// that interference from other processes lowers the peak less than it lowers a kernel's
/// median: "% of peak" figures stay conservative.
pub fn measure_fma(lanes: i64, threads: usize, opts: &MeasureOptions) -> Result<f64, CodegenError> {
    let iters = 1i64 << 21;
    let k = fma_kernel(lanes, threads as i64, iters);
    let c = compile(&k, &CodegenOptions::default())?;
    let mut bufs = vec![
        BufferData::F32(vec![0.999_999, 1e-6]),
        BufferData::zeros(DType::F32, (threads as i64 * CHAINS * lanes) as usize),
    ];
    let opts = MeasureOptions {
        threads: Some(threads),
        ..opts.clone()
    };
    let m = measure(&c, &mut bufs, &opts, &[]).map_err(|e| CodegenError::Llvm(e.to_string()))?;
    let flops = 2.0 * (lanes * CHAINS * iters) as f64 * threads as f64;
    Ok(flops / m.min / 1e9)
}

/// Peak of `target` with 1 thread and with all its cores.
pub fn measure_peak(
    target: &crate::target::Target,
    opts: &MeasureOptions,
) -> Result<Peak, CodegenError> {
    let lanes = target.lanes() as u32;
    let threads = target.cores();
    Ok(Peak {
        lanes,
        gflops_1t: measure_fma(lanes as i64, 1, opts)?,
        threads,
        gflops_all: measure_fma(lanes as i64, threads, opts)?,
    })
}
