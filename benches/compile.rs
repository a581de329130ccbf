//! Compile-time benchmark: validate + unroll + bounds proof + LLVM O3 + JIT per kernel.
//! (`lower` is not included: this measures the codegen layer on hand-scheduled kernels.)
//! `cargo bench --bench compile`

use std::time::Instant;
use ttdb::codegen::{compile, CodegenOptions};
use ttdb::loopnest::ir::Kernel;
use ttdb::measure::fixtures::{bias_relu_kernel, conv2d_nhwc_kernel};
use ttdb::measure::gemm::{gemm_kernel, GemmSchedule};
use ttdb::measure::verify_against_interpreter;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}
/// CPU time of this thread (less sensitive to other processes than wall time).
fn thread_cpu_ms() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID = 3 on Linux.
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 * 1e3 + ts.nsec as f64 / 1e6
}

fn bench(name: &str, k: &Kernel, reps: usize) {
    let opts = CodegenOptions::default();
    let _warm = compile(k, &opts).expect("compile");
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut last = None;
    for _ in 0..reps {
        let t = Instant::now();
        let c0 = thread_cpu_ms();
        let c = compile(k, &opts).expect("compile");
        cpu.push(thread_cpu_ms() - c0);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some(c);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    cpu.sort_by(|a, b| a.total_cmp(b));
    let c = last.unwrap();
    println!(
        "{name:<28} median {:7.1} ms  min {:7.1} ms  cpu median {:7.1} ms  (prepare {:.1} ms, translate {:.1} ms, O3 {:.1} ms, isel+emit {:.1} ms, jit {:.1} ms; vector loops {}, scalarized {})",
        times[times.len() / 2],
        times[0],
        cpu[cpu.len() / 2],
        c.stats.prepare_time.as_secs_f64() * 1e3,
        c.stats.translate_time.as_secs_f64() * 1e3,
        c.stats.optimize_time.as_secs_f64() * 1e3,
        c.stats.emit_time.as_secs_f64() * 1e3,
        c.stats.jit_time.as_secs_f64() * 1e3,
        c.stats.vector_loops,
        c.stats.scalarized_loops
    );
}

fn main() {
    let conv = conv2d_nhwc_kernel(56, 64);
    let small_conv = conv2d_nhwc_kernel(8, 16);
    let c = compile(&small_conv, &CodegenOptions::default()).expect("compile");
    verify_against_interpreter(&c, 3).expect("conv fixture verifies");
    bench("conv2d_nhwc 56x56x64 3x3", &conv, 9);
    bench(
        "gemm 1024^3 (packed)",
        &gemm_kernel(1024, 1024, 1024, &GemmSchedule::default()),
        9,
    );
    bench("bias_relu 1024x1024", &bias_relu_kernel(1024, 1024), 9);
}
