//! What crash isolation costs: the search of `benches/search.rs`'s 3x3 conv (64->64 at 56x56,
//! bias and relu, NCHW[x]c with the host's lanes) with candidates measured in this process
//! and in a worker process (`ttdb measure-worker`), side by side in one run. The arms
//! alternate (in, worker, in, worker, ...; `TTDB_ISOLATION_ROUNDS` pairs, default 3), each a
//! fresh search of `TTDB_ISOLATION_TRIALS` trials (default 256) with the same seed; the
//! medians of the trials per second are compared as a ratio. `cargo bench --bench isolation`.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/workloads.rs"]
mod workloads;
use std::time::Duration;
use ttdb::evaluate::{Isolation, Reference, WorkerSpec};
use ttdb::search::measurer::KernelMeasurer;
use ttdb::search::observer::Observer;
use ttdb::search::policy::{search_task, SearchOptions, SearchTrial};
use ttdb::search::sketch::HardwareParams;
use ttdb::tune::search::TuneOptions;

struct Quiet;
impl Observer<SearchTrial> for Quiet {
    fn progress(&mut self, _trials: usize, _best: f64) {}
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let hw = HardwareParams::of(&ttdb::target::Target::detect());
    let host = ttdb::target::Target::detect().host;
    let trials = env("TTDB_ISOLATION_TRIALS", 256);
    let rounds = env("TTDB_ISOLATION_ROUNDS", 3);
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes); {rounds} x 2 searches of {trials} trials",
        host.cpu_model, host.llvm_cpu, hw.num_cores, hw.vector_lanes
    );
    let dag = workloads::conv_nchwc(hw.vector_lanes as i64, 64, 64, 56, 3);
    let reference = Reference::new(&dag, 11).expect("reference");
    let worker = Isolation::Worker(WorkerSpec {
        exe: env!("CARGO_BIN_EXE_ttdb").into(),
        args: vec!["measure-worker".into()],
        fault_candidate: None,
    });
    let mut rates: [Vec<f64>; 2] = [vec![], vec![]];
    let mut bests: [Vec<f64>; 2] = [vec![], vec![]];
    for round in 0..rounds {
        for (arm, isolation) in [Isolation::InProcess, worker.clone()]
            .into_iter()
            .enumerate()
        {
            let mut eval = TuneOptions::default().refine.eval();
            eval.isolation = isolation;
            let interrupted = || false;
            let mut measurer = KernelMeasurer::new(&dag, &reference, eval, &interrupted);
            let opts = SearchOptions {
                trials,
                max_timeout: Duration::from_secs(5),
                ..SearchOptions::default()
            };
            let out = search_task(
                &dag,
                hw,
                &[],
                &mut measurer,
                &opts,
                &mut Quiet,
                &mut ttdb::search::cost_model::CostModel::new(),
            )
            .expect("search");
            let rate = out.trials.len() as f64 / out.seconds;
            let best = out
                .trials
                .iter()
                .filter_map(|t| t.evaluation.median())
                .fold(f64::INFINITY, f64::min);
            println!(
                "round {round} {:<10} {:>4} trials in {:>6.1} s: {rate:>5.2} trials/s, best {:.3} ms",
                ["in-process", "worker"][arm],
                out.trials.len(),
                out.seconds,
                best * 1e3
            );
            rates[arm].push(rate);
            bests[arm].push(best);
        }
    }
    let (a, b) = (median(rates[0].clone()), median(rates[1].clone()));
    println!(
        "median trials/s: in-process {a:.2}, worker {b:.2}; worker/in-process {:.3} ({:+.1}% time per trial)",
        b / a,
        100.0 * (a / b - 1.0)
    );
    println!(
        "median best: in-process {:.3} ms, worker {:.3} ms",
        median(bests[0].clone()) * 1e3,
        median(bests[1].clone()) * 1e3
    );
}
