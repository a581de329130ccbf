//! Timing stability: the same schedule built several times and timed side by side (the
//! builds' timings interleaved in rounds, as Droplet and `verify` time a batch). For each conv
//! task of a network's full tuning history (`tvm_ansor_bench_full_nchwc/`), its best record
//! by logged cost is built `TTDB_STABILITY_BUILDS` (6) times in one batch; each build's median
//! of 10 timings of >= 50 ms is reported, and the spread max/min over the builds. A spread
//! far above 1 means that what a schedule measures depends on where its buffers and code
//! landed, not only on the schedule: every comparison of two schedules (Droplet's t-test,
//! its side-by-side picks, a bench's A against B) is then partly a comparison of luck.
//!
//! `cargo bench --bench stability [-- resnet_50]`; env `TTDB_STABILITY_BUILDS`,
//! `TTDB_STABILITY_TASKS` (at most this many tasks). Compare allocator settings side by side
//! by running it under each (`MALLOC_CONF=...`).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/history.rs"]
mod history;
#[path = "common/stats.rs"]
mod stats;
use history::{conv_task, side_by_side_eval, tasks_of};
use stats::{geomean, median};
use std::time::Duration;
use ttdb::ansor::Step;
use ttdb::evaluate::Reference;
use ttdb::search::measurer::{KernelMeasurer, Measurer};

fn main() {
    let nets: Vec<String> = {
        let a: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        if a.is_empty() {
            vec!["resnet_50".into()]
        } else {
            a
        }
    };
    let env_usize = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let builds = env_usize("TTDB_STABILITY_BUILDS", 6).max(2);
    let max_tasks = env_usize("TTDB_STABILITY_TASKS", usize::MAX);
    let host = ttdb::target::Target::detect().host;
    println!(
        "host: {} ({}, {} cores); MALLOC_CONF={}; {builds} builds of each schedule, 10 \
         interleaved timings of >= 50 ms each",
        host.cpu_model,
        host.llvm_cpu,
        host.cores,
        std::env::var("MALLOC_CONF").unwrap_or_default()
    );
    let corpus = history::corpus();
    let eval = side_by_side_eval();
    for net in nets {
        println!("\n== {net}");
        println!(
            "{:<22} {:>9} {:>9} {:>9} {:>7}  per-build medians (ms)",
            "task", "min ms", "median", "max ms", "spread"
        );
        let (mut spreads, mut over) = (vec![], 0);
        let mut n = 0;
        for task in tasks_of(&corpus.join(format!("{net}.json"))) {
            if n >= max_tasks {
                break;
            }
            let Some(steps) = task.best_logged().map(<[Step]>::to_vec) else {
                continue;
            };
            let Some((rec, label)) = conv_task(&task.key) else {
                continue;
            };
            n += 1;
            let reference = Reference::new(&rec.dag, 11).expect("reference");
            let interrupted = || false;
            let mut m = KernelMeasurer::new(&rec.dag, &reference, eval.clone(), &interrupted);
            let runs = m.measure(&vec![steps; builds], Duration::from_secs(10));
            let ms: Vec<f64> = runs
                .iter()
                .filter_map(|e| e.as_ref()?.median())
                .map(|s| s * 1e3)
                .collect();
            if ms.len() < 2 {
                println!("{label:<22} did not verify here");
                continue;
            }
            let (lo, hi) = ms
                .iter()
                .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            spreads.push(hi / lo);
            over += (hi / lo > 1.2) as usize;
            let each: Vec<String> = ms.iter().map(|x| format!("{x:.3}")).collect();
            println!(
                "{label:<22} {lo:>9.3} {:>9.3} {hi:>9.3} {:>7.2}  {}",
                median(&ms),
                hi / lo,
                each.join(" ")
            );
        }
        if !spreads.is_empty() {
            println!(
                "{net}: {} tasks; spread (max/min of the builds' medians) geomean {:.3}, \
                 median {:.3}, worst {:.2}; {over} tasks over 1.2",
                spreads.len(),
                geomean(&spreads),
                median(&spreads),
                spreads.iter().cloned().fold(0.0, f64::max)
            );
        }
    }
}
