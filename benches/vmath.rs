//! What the vector f32 exp, sigmoid, tanh and erf of `codegen/vmath.rs` buy over the libm
//! path (`CodegenOptions::vector_math` off: `llvm.exp` scalarized into one `expf` call per
//! lane, sigmoid and tanh built on it, erf one `erff` call per lane).
//!
//! For each function, the kernel O[r, j] = f(X[r, j]) (rows parallel, 64 lanes vectorized)
//! is built both ways and timed in alternating rounds (the machine may be shared), each round
//! a batch of runs of at least 50 ms: on 32K floats (128 KB in, 128 KB out: cache-resident,
//! the compute cost) on one thread, and on 16M floats (64 MB each way) on all threads.
//! Inputs are uniform in [-10, 10]. Reported: each build's median ns per element and off/on
//! (above 1: the vector code is faster).
//!
//! `cargo bench --bench vmath` (TTDB_VMATH_ROUNDS, default 11).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/stats.rs"]
mod stats;
use stats::median;
use std::time::Instant;
use ttdb::codegen::{compile, CodegenOptions, CompiledKernel, RunOptions};
use ttdb::loopnest::ir::*;
use ttdb::loopnest::BufferData;

const ROW: i64 = 64;

fn map_kernel(f: Intrinsic, n: i64, vector_math: bool) -> CompiledKernel {
    let buf = |name, role| Buffer::new(name, DType::F32, &[n / ROW, ROW], role);
    let idx = || vec![Expr::var("r"), Expr::var("j")];
    let body = Stmt::store("O", idx(), Expr::call(f, vec![Expr::load("X", idx())]));
    let k = Kernel::new(
        "vmath_bench",
        vec![buf("X", BufferRole::Input), buf("O", BufferRole::Output)],
        Stmt::loop_(
            "r",
            n / ROW,
            ForKind::Parallel,
            Stmt::loop_("j", ROW, ForKind::Vectorized, body),
        ),
    );
    let opts = CodegenOptions {
        vector_math,
        ..CodegenOptions::default()
    };
    compile(&k, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// Seconds per run of `k`: runs repeated until a batch takes at least 50 ms.
fn time_batch(k: &CompiledKernel, bufs: &mut [BufferData], opts: &RunOptions) -> f64 {
    let mut runs = 1;
    loop {
        let t = Instant::now();
        for _ in 0..runs {
            k.run(bufs, opts).unwrap();
        }
        let s = t.elapsed().as_secs_f64();
        if s >= 0.05 {
            return s / runs as f64;
        }
        runs *= if s < 0.005 { 10 } else { 2 };
    }
}

fn main() {
    let rounds = std::env::var("TTDB_VMATH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(11);
    let host = ttdb::target::Target::detect().host;
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes); libm path (off) vs vector polynomials (on), \
         {rounds} alternating rounds of >= 50 ms batches",
        host.cpu_model,
        host.llvm_cpu,
        host.cores,
        host.f32_lanes()
    );
    println!(
        "{:<8} {:>9} {:>7} {:>11} {:>11} {:>8}",
        "fn", "floats", "threads", "off ns/el", "on ns/el", "off/on"
    );
    let all = host.cores.max(1);
    for (n, threads) in [(1i64 << 15, 1usize), (1 << 24, all)] {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let xs: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 20.0 - 10.0
            })
            .collect();
        let opts = RunOptions {
            threads: Some(threads),
            timeout: None,
        };
        for f in [
            Intrinsic::Exp,
            Intrinsic::Sigmoid,
            Intrinsic::Tanh,
            Intrinsic::Erf,
        ] {
            let builds = [map_kernel(f, n, false), map_kernel(f, n, true)];
            let mut bufs = vec![
                BufferData::F32(xs.clone()),
                BufferData::F32(vec![0.0; n as usize]),
            ];
            let mut samples = [vec![], vec![]];
            for _ in 0..rounds {
                for (k, out) in builds.iter().zip(samples.iter_mut()) {
                    out.push(time_batch(k, &mut bufs, &opts) * 1e9 / n as f64);
                }
            }
            let (off, on) = (median(&samples[0]), median(&samples[1]));
            println!(
                "{:<8} {:>9} {:>7} {:>11.3} {:>11.3} {:>8.2}",
                f.name(),
                n,
                threads,
                off,
                on,
                off / on
            );
        }
    }
}
