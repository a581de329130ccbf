//! GEMM proof: fp32 FMA peak (1 thread, all threads) and a 1024³ GEMM compiled from a loop-nest
//! kernel, reported as GFLOP/s and % of the measured peak, next to numpy (OpenBLAS) if present.
//!
//! `cargo bench --bench gemm` (env: TTDB_GEMM_N to change the size, TTDB_THREADS).

use std::process::Command;
use std::time::Instant;
use ttdb::codegen::{compile, CodegenOptions};
use ttdb::loopnest::{BufferData, DType};
use ttdb::measure::gemm::{gemm_flops, gemm_kernel, GemmSchedule};
use ttdb::measure::peak::measure_fma;
use ttdb::measure::{compare, measure, HostFingerprint, MeasureOptions};

fn numpy_gflops(n: i64, threads: usize) -> Option<f64> {
    let script = format!(
        "import numpy as np, time\n\
         a=np.random.rand({n},{n}).astype(np.float32); b=np.random.rand({n},{n}).astype(np.float32)\n\
         a@b\n\
         ts=[]\n\
         for _ in range(7):\n\
         \x20   t=time.perf_counter(); a@b; ts.append(time.perf_counter()-t)\n\
         ts.sort(); print(2*{n}**3/ts[len(ts)//2]/1e9)\n"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("OPENBLAS_NUM_THREADS", threads.to_string())
        .env("OMP_NUM_THREADS", threads.to_string())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn main() {
    let host = HostFingerprint::detect();
    let n: i64 = std::env::var("TTDB_GEMM_N").ok().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let threads: usize =
        std::env::var("TTDB_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(host.cores);
    println!("host: {} | {} cores | isa {:?} | llvm cpu {}", host.cpu_model, host.cores, host.isa_flags, host.llvm_cpu);
    let lanes = host.f32_lanes() as i64;
    let opts = MeasureOptions { repeat: 7, min_repeat_ms: 200, ..MeasureOptions::default() };
    let peak1 = measure_fma(lanes, 1, &opts).expect("peak 1t");
    let peakn = measure_fma(lanes, threads, &opts).expect("peak nt");
    println!("fp32 FMA peak ({lanes} lanes): 1 thread {peak1:.1} GFLOP/s, {threads} threads {peakn:.1} GFLOP/s");

    let env = |k: &str, d: i64| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let base = GemmSchedule::default();
    let sched = GemmSchedule {
        lanes,
        mr: env("TTDB_GEMM_MR", base.mr),
        nv: env("TTDB_GEMM_NV", base.nv),
        kc: env("TTDB_GEMM_KC", base.kc),
        row_splits: env("TTDB_GEMM_SPLITS", base.row_splits),
        pack_a: env("TTDB_GEMM_PACK_A", base.pack_a as i64) != 0,
    };
    println!("schedule: {sched:?}");
    let kern = gemm_kernel(n, n, n, &sched);
    let t = Instant::now();
    let compiled = compile(&kern, &CodegenOptions::default()).expect("compile");
    let ct = t.elapsed();
    let mut bufs = vec![
        BufferData::random(DType::F32, (n * n) as usize, 1),
        BufferData::random(DType::F32, (n * n) as usize, 2),
        BufferData::zeros(DType::F32, (n * n) as usize),
    ];
    let m = measure(&compiled, &mut bufs, &MeasureOptions { threads: Some(threads), ..opts.clone() })
        .expect("run");
    let g = m.gflops(gemm_flops(n, n, n));
    // correctness spot check against a straightforward f64 reference on a few rows
    let (a, b, c) = (bufs[0].as_f32().unwrap(), bufs[1].as_f32().unwrap(), bufs[2].as_f32().unwrap());
    let nu = n as usize;
    let mut want = vec![0f32; 4 * nu];
    for (r, row) in [0, 1, nu / 2, nu - 1].iter().enumerate() {
        for j in 0..nu {
            let mut s = 0f64;
            for kk in 0..nu {
                s += a[row * nu + kk] as f64 * b[kk * nu + j] as f64;
            }
            want[r * nu + j] = s as f32;
        }
    }
    let got: Vec<f32> = [0, 1, nu / 2, nu - 1].iter().flat_map(|&r| c[r * nu..(r + 1) * nu].to_vec()).collect();
    let ok = compare(&BufferData::F32(got), &BufferData::F32(want), 1e-4).is_ok();
    println!(
        "ttdb gemm {n}^3 fp32, {threads} threads: {g:.1} GFLOP/s (median) = {:.1}% of measured peak; \
         best {:.1} GFLOP/s = {:.1}% (median {:.2} ms, spread {:.1}%, compile {:.0} ms, verified: {ok})",
        100.0 * g / peakn,
        gemm_flops(n, n, n) / m.min / 1e9,
        100.0 * gemm_flops(n, n, n) / m.min / 1e9 / peakn,
        m.median * 1e3,
        m.spread * 100.0,
        ct.as_secs_f64() * 1e3
    );
    match numpy_gflops(n, threads) {
        Some(np) => println!("numpy (OpenBLAS) {n}^3 fp32, {threads} threads: {np:.1} GFLOP/s = {:.1}% of peak", 100.0 * np / peakn),
        None => println!("numpy unavailable (pip install numpy to compare)"),
    }
    let one = measure(&compiled, &mut bufs, &MeasureOptions { threads: Some(1), ..opts }).expect("run 1t");
    let g1 = one.gflops(gemm_flops(n, n, n));
    println!("ttdb gemm {n}^3 fp32, 1 thread: {g1:.1} GFLOP/s = {:.1}% of 1-thread peak", 100.0 * g1 / peak1);
}
