//! The search from scratch against onnxruntime, on this machine, side by side in one run
//! (issue: "single-op quality against onnxruntime"):
//! * ResNet-50's 3x3 conv 64->64 at 56x56 with bias and relu, NCHW[x]c with the host's
//!   lanes as the channel block;
//! * a 512x512x512 matmul (ttdb: dense, A x B^T; onnxruntime: MatMul; same FLOPs).
//!
//! Each is searched with `TTDB_SEARCH_TRIALS` (1000) measured trials, `TTDB_SEARCH_BATCH`
//! per round (tune's default), no seeds and no database (the cost model starts cold),
//! printing the curve (best ms at 64, 128, 256, ... trials, with wall time), the
//! trials per second, and the best against onnxruntime's median for the same op
//! (`benches/ort_op.py`, same thread count) and the machine's peak. `cargo bench --bench search`.
/// What the `ttdb` binary allocates with (src/main.rs).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/onnxruntime.rs"]
mod onnxruntime;
#[path = "common/workloads.rs"]
mod workloads;
use std::time::{Duration, Instant};
use ttdb::ansor::Step;
use ttdb::evaluate::{Evaluation, Reference};
use ttdb::search::measurer::{KernelMeasurer, Measurer};
use ttdb::search::observer::Observer;
use ttdb::search::policy::{search_task, SearchOptions, SearchTrial};
use ttdb::search::sketch::HardwareParams;
use ttdb::tune::search::TuneOptions;

struct Curve {
    t0: Instant,
    points: Vec<(usize, f64, f64)>,
}
impl Observer<SearchTrial> for Curve {
    fn progress(&mut self, trials: usize, best: f64) {
        self.points
            .push((trials, self.t0.elapsed().as_secs_f64(), best * 1e3));
    }
}

/// Times the measurer's calls, so that the rest of the wall time (sampling, mutation,
/// lowering to deduplicate) shows as the difference.
struct Timed<'a> {
    inner: &'a mut dyn Measurer,
    seconds: f64,
}
impl Measurer for Timed<'_> {
    fn measure(&mut self, schedules: &[Vec<Step>], timeout: Duration) -> Vec<Option<Evaluation>> {
        let t = Instant::now();
        let out = self.inner.measure(schedules, timeout);
        self.seconds += t.elapsed().as_secs_f64();
        out
    }
}

fn onnxruntime_ms(op: &str, threads: usize) -> Option<f64> {
    onnxruntime::script_ms("ort_op.py", &[op, &threads.to_string()])
}

fn main() {
    let hw = HardwareParams::of(&ttdb::target::Target::detect());
    let host = ttdb::target::Target::detect().host;
    let peak =
        ttdb::measure::peak::measure_peak(&ttdb::target::Target::detect(), &Default::default())
            .map(|p| p.gflops_all)
            .unwrap_or(f64::NAN);
    let trials: usize = std::env::var("TTDB_SEARCH_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes); fp32 FMA peak {peak:.0} GFLOP/s",
        host.cpu_model, host.llvm_cpu, hw.num_cores, hw.vector_lanes
    );
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, op, dag) in [
        (
            "conv3x3 64->64 @56 +bias+relu",
            "conv",
            workloads::conv_nchwc(hw.vector_lanes as i64, 64, 64, 56, 3),
        ),
        ("matmul 512^3", "matmul", workloads::matmul_512()),
    ] {
        if !only.is_empty() && !only.iter().any(|o| o == op) {
            continue;
        }
        let ort = onnxruntime_ms(op, hw.num_cores);
        let reference = Reference::new(&dag, 11).expect("reference");
        let interrupted = || false;
        let mut measurer = KernelMeasurer::new(
            &dag,
            &reference,
            TuneOptions::default().refine.eval(),
            &interrupted,
        );
        let opts = SearchOptions {
            trials,
            // TTDB_SEARCH_BATCH: candidates per round (default: tune's).
            batch: std::env::var("TTDB_SEARCH_BATCH")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(SearchOptions::default().batch),
            max_timeout: Duration::from_secs(5),
            ..SearchOptions::default()
        };
        let mut curve = Curve {
            t0: Instant::now(),
            points: vec![],
        };
        let mut timed = Timed {
            inner: &mut measurer,
            seconds: 0.0,
        };
        let out = search_task(
            &dag,
            hw,
            &[],
            &mut timed,
            &opts,
            &mut curve,
            &mut ttdb::search::cost_model::CostModel::new(),
        )
        .expect("search");
        let measuring = timed.seconds;
        let flops = dag.flop_ct();
        println!(
            "\n== {name}: {} sketches, {} trials, stop: {}",
            out.sketches,
            out.trials.len(),
            out.stop.as_str()
        );
        println!(
            "{:>7} {:>9} {:>9} {:>9} {:>7} {:>10}",
            "trials", "wall s", "best ms", "GFLOP/s", "%peak", "vs onnxrt"
        );
        let marks = [32usize, 64, 128, 256, 512, 1000, 2000];
        for &(n, wall, best) in &curve.points {
            let last = curve.points.last().map(|p| p.0) == Some(n);
            if !marks.iter().any(|&m| n >= m && n - m < opts.batch) && !last {
                continue;
            }
            let g = flops / (best * 1e-3) / 1e9;
            println!(
                "{n:>7} {wall:>9.1} {best:>9.3} {g:>9.1} {:>7.1} {:>10}",
                100.0 * g / peak,
                ort.map_or("-".into(), |o| format!("{:.2}x", o / best))
            );
        }
        println!(
            "{:.1} measured trials/s ({} failed, {} invalid, {} duplicates of {} generated); onnxruntime {} ms",
            out.trials.len() as f64 / out.seconds,
            out.trials.iter().filter(|t| !t.evaluation.verified()).count(),
            out.invalid,
            out.duplicates,
            out.generated,
            ort.map_or("-".into(), |o| format!("{o:.3}")),
        );
        println!(
            "wall {:.1} s: {measuring:.1} s building and measuring, {:.1} s generating and deduplicating candidates",
            out.seconds,
            out.seconds - measuring
        );
    }
}
