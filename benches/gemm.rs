//! GEMM proof: fp32 FMA peak (1 thread, all threads) and a 1024³ GEMM compiled from a loop-nest
//! kernel, reported as GFLOP/s and % of the measured peak, next to numpy (OpenBLAS) if present.
//!
//! The machine may be shared, so peak and GEMM are measured in alternating rounds; the report
//! gives per-round ratios and best-of figures (best GEMM / best peak).
//!
//! `cargo bench --bench gemm` (env: TTDB_GEMM_N, TTDB_THREADS, TTDB_ROUNDS, TTDB_GEMM_MR/NV/KC/
//! SPLITS/PACK_A to try other schedules).

use std::process::Command;
use std::time::Instant;
use ttdb::codegen::{compile, CodegenOptions, CompiledKernel};
use ttdb::loopnest::verify::{output_error, Expected};
use ttdb::loopnest::{BufferData, DType};
use ttdb::measure::gemm::{gemm_flops, gemm_kernel, GemmSchedule};
use ttdb::measure::peak::measure_fma;
use ttdb::measure::{measure, MeasureOptions, Measurement};

fn numpy_gflops(n: i64, threads: usize) -> Option<f64> {
    let script = format!(
        "import numpy as np, time\n\
         a=np.random.rand({n},{n}).astype(np.float32); b=np.random.rand({n},{n}).astype(np.float32)\n\
         a@b\n\
         ts=[]\n\
         for _ in range(15):\n\
         \x20   t=time.perf_counter(); a@b; ts.append(time.perf_counter()-t)\n\
         ts.sort(); print(2*{n}**3/ts[len(ts)//2]/1e9, 2*{n}**3/ts[0]/1e9)\n"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("OPENBLAS_NUM_THREADS", threads.to_string())
        .env("OMP_NUM_THREADS", threads.to_string())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next()?.parse().ok()
}

fn env(k: &str, d: i64) -> i64 {
    std::env::var(k)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(d)
}

fn verify(bufs: &[BufferData], n: usize) -> bool {
    let (a, b, c) = (
        bufs[0].as_f32().unwrap(),
        bufs[1].as_f32().unwrap(),
        bufs[2].as_f32().unwrap(),
    );
    // Four rows of C against an f64 reference, with ttdb's one output check.
    let rows = [0, 1, n / 2, n - 1];
    let mut points = Vec::new();
    let mut want = Vec::new();
    for &row in &rows {
        for j in 0..n {
            let mut s = 0f64;
            for kk in 0..n {
                s += a[row * n + kk] as f64 * b[kk * n + j] as f64;
            }
            points.push(row * n + j);
            want.push(s);
        }
    }
    let expected = Expected {
        points: Some(&points),
        values: &want,
    };
    output_error(&[&BufferData::F32(c.to_vec())], &[expected]).is_ok_and(|e| e.within_tolerance())
}

fn run(
    c: &CompiledKernel,
    bufs: &mut [BufferData],
    threads: usize,
    opts: &MeasureOptions,
) -> Measurement {
    measure(
        c,
        bufs,
        &MeasureOptions {
            threads: Some(threads),
            ..opts.clone()
        },
        &[],
    )
    .expect("run")
}

/// TTDB_SWEEP=1: rank a few schedules by GFLOP/s (TTDB_THREADS threads), measured alternately.
fn sweep(n: i64, lanes: i64, threads: usize) {
    let mut variants = Vec::new();
    for kc in [256, 512] {
        for pack_a in [false, true] {
            for row_splits in [2, 4, 8] {
                variants.push(GemmSchedule {
                    mr: 4,
                    nv: 3,
                    lanes,
                    kc,
                    pack_a,
                    row_splits,
                });
            }
        }
    }
    let compiled: Vec<CompiledKernel> = variants
        .iter()
        .map(|s| compile(&gemm_kernel(n, n, n, s), &CodegenOptions::default()).expect("compile"))
        .collect();
    let mut bufs = vec![
        BufferData::random(DType::F32, (n * n) as usize, 1),
        BufferData::random(DType::F32, (n * n) as usize, 2),
        BufferData::zeros(DType::F32, (n * n) as usize),
    ];
    let opts = MeasureOptions {
        repeat: 3,
        min_repeat_ms: 100,
        ..MeasureOptions::default()
    };
    let mut best = vec![0f64; variants.len()];
    for _ in 0..3 {
        for (i, c) in compiled.iter().enumerate() {
            let m = run(c, &mut bufs, threads, &opts);
            best[i] = best[i].max(gemm_flops(n, n, n) / m.min / 1e9);
        }
    }
    let mut order: Vec<usize> = (0..variants.len()).collect();
    order.sort_by(|&a, &b| best[b].total_cmp(&best[a]));
    for i in order {
        println!("{:6.1} GFLOP/s  {:?}", best[i], variants[i]);
    }
}

fn main() {
    let host = ttdb::target::Target::detect().host;
    if std::env::var("TTDB_SWEEP").is_ok() {
        sweep(
            env("TTDB_GEMM_N", 1024),
            host.f32_lanes() as i64,
            env("TTDB_THREADS", 1) as usize,
        );
        return;
    }
    let n = env("TTDB_GEMM_N", 1024);
    let threads = env("TTDB_THREADS", host.cores as i64) as usize;
    let rounds = env("TTDB_ROUNDS", 3) as usize;
    println!(
        "host: {} | {} cores | isa {:?} | llvm cpu {} | ttdb {}",
        host.cpu_model, host.cores, host.isa_flags, host.llvm_cpu, host.ttdb_version
    );
    let lanes = host.f32_lanes() as i64;
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
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut bufs = vec![
        BufferData::random(DType::F32, (n * n) as usize, 1),
        BufferData::random(DType::F32, (n * n) as usize, 2),
        BufferData::zeros(DType::F32, (n * n) as usize),
    ];
    let flops = gemm_flops(n, n, n);
    let opts = MeasureOptions {
        repeat: 5,
        min_repeat_ms: 200,
        ..MeasureOptions::default()
    };
    let (mut best_p1, mut best_pn, mut best_g1, mut best_gn, mut med_gn) =
        (0f64, 0f64, 0f64, 0f64, 0f64);
    for r in 0..rounds {
        let p1 = measure_fma(lanes, 1, &opts).expect("peak 1t");
        let pn = measure_fma(lanes, threads, &opts).expect("peak nt");
        let gn = run(&compiled, &mut bufs, threads, &opts);
        let g1 = run(&compiled, &mut bufs, 1, &opts);
        let (gn_best, g1_best) = (flops / gn.min / 1e9, flops / g1.min / 1e9);
        println!(
            "round {r}: peak 1t {p1:.1} / {threads}t {pn:.1} GFLOP/s | gemm {threads}t median {:.1} best {gn_best:.1} \
             ({:.0}% of peak, spread {:.0}%) | gemm 1t best {g1_best:.1} ({:.0}%)",
            gn.gflops(flops),
            100.0 * gn_best / pn,
            100.0 * gn.spread,
            100.0 * g1_best / p1
        );
        best_p1 = best_p1.max(p1);
        best_pn = best_pn.max(pn);
        best_g1 = best_g1.max(g1_best);
        best_gn = best_gn.max(gn_best);
        med_gn = med_gn.max(gn.gflops(flops));
    }
    let ok = verify(&bufs, n as usize);
    println!("fp32 FMA peak ({lanes} lanes): 1 thread {best_p1:.1} GFLOP/s, {threads} threads {best_pn:.1} GFLOP/s");
    println!(
        "ttdb gemm {n}^3 fp32, {threads} threads: best {best_gn:.1} GFLOP/s = {:.1}% of peak \
         (best round median {med_gn:.1}); compile {compile_ms:.0} ms; verified: {ok}",
        100.0 * best_gn / best_pn
    );
    println!(
        "ttdb gemm {n}^3 fp32, 1 thread: best {best_g1:.1} GFLOP/s = {:.1}% of 1-thread peak",
        100.0 * best_g1 / best_p1
    );
    match numpy_gflops(n, threads) {
        Some(np) => println!(
            "numpy (OpenBLAS) {n}^3 fp32, {threads} threads: {np:.1} GFLOP/s (median) = {:.1}% of peak",
            100.0 * np / best_pn
        ),
        None => println!("numpy unavailable (pip install numpy to compare)"),
    }
    if let Some(np1) = numpy_gflops(n, 1) {
        println!(
            "numpy (OpenBLAS) {n}^3 fp32, 1 thread: {np1:.1} GFLOP/s = {:.1}% of 1-thread peak",
            100.0 * np1 / best_p1
        );
    }
}
