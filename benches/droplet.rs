//! Droplet against a long search ("Explore as a Storm, Exploit as a Raindrop"), on this
//! machine, from the full Ansor tuning histories of `tvm_ansor_bench_full_nchwc/` (every
//! record of every task in measurement order, tuned on a 24-core machine).
//!
//! For every conv task of a network:
//! * **first-300**: the 10 best of the task's first 300 records by logged cost, timed here,
//!   the fastest kept (what a short Ansor run gives, re-measured on this machine);
//! * **A**: first-300 refined with at most `TTDB_DROPLET_TRIALS` (100) Droplet trials (from
//!   the fastest of each distinct structure among those 10, fastest first, while the budget
//!   lasts: `ttdb refine`'s own procedure);
//! * **B**: the 10 best of *all* the task's records by logged cost, timed here, the fastest
//!   kept (what the full 1000-trials-per-task search gives).
//!
//! The three schedules are then timed back to back, in one run (10 timings of >= 50 ms
//! each), and compared as ratios; % of the machine's fp32 peak is given too. The bar: A at
//! least as fast as B on >= 80% of tasks, and geomean(B / A) >= 1.0.
//!
//! `cargo bench --bench droplet [-- resnet_50 mobilenet_v2]` (default: both); env
//! `TTDB_DROPLET_TRIALS`, `TTDB_DROPLET_TASKS` (at most this many tasks per network),
//! `TTDB_DROPLET_TILE_MOVES=0` (only +-1 moves), `TTDB_DROPLET_MODEL=0` (neighbours in
//! Droplet's own order, not ranked by the cost model), `TTDB_DROPLET_ONLY` (only tasks whose row label contains this), `TTDB_DROPLET_TRACE`
//! (print every trial: batch, change, median ms, accepted).
// The allocator of the ttdb binary (kernel builds are allocation-heavy).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/stats.rs"]
mod stats;
use stats::geomean;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use ttdb::ansor::{Record, Step, WorkloadKey};
use ttdb::evaluate::{EvalOptions, Evaluation, Reference};
use ttdb::measure::runner::MeasureOptions;
use ttdb::search::cost_model::CostModel;
use ttdb::search::droplet::{KernelMeasurer, Measurer};
use ttdb::tune::record::Discard;
use ttdb::tune::refine::{refine_schedules, RefineOptions};

struct Task {
    key: String,
    /// (position in the task's history, logged mean cost, steps) of the valid records.
    records: Vec<(usize, f64, Vec<Step>)>,
    /// Records of the task in the log, failed ones included.
    total: usize,
}

fn tasks_of(path: &Path) -> Vec<Task> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (the shared corpus is needed)", path.display()));
    let mut order: Vec<String> = Vec::new();
    let mut by_key: BTreeMap<String, Task> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let r = Record::parse(line).expect("corpus records parse");
        let key = r.task.workload_key.clone();
        let t = by_key.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Task {
                key,
                records: vec![],
                total: 0,
            }
        });
        if r.result.error_no.0 == 0 {
            let cost = r.result.costs.iter().sum::<f64>() / r.result.costs.len().max(1) as f64;
            t.records.push((t.total, cost, r.steps));
        }
        t.total += 1;
    }
    order
        .into_iter()
        .filter_map(|k| by_key.remove(&k))
        .collect()
}

fn ms(e: &Evaluation) -> Option<f64> {
    e.median().map(|s| s * 1e3)
}

/// The `n` best records by logged cost (of those at history positions below `within`),
/// timed here: the verified ones, fastest first, with their median ms.
fn timed_best(
    m: &mut dyn Measurer,
    records: &[(usize, f64, Vec<Step>)],
    within: usize,
    n: usize,
) -> Vec<(Vec<Step>, f64)> {
    let mut sorted: Vec<&(usize, f64, Vec<Step>)> =
        records.iter().filter(|r| r.0 < within).collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut cands: Vec<Vec<Step>> = Vec::new();
    for (_, _, s) in sorted {
        if !cands.contains(s) {
            cands.push(s.clone());
        }
        if cands.len() == n {
            break;
        }
    }
    let runs = m.measure(&cands, std::time::Duration::from_secs(10));
    let mut out: Vec<(Vec<Step>, f64)> = cands
        .into_iter()
        .zip(runs)
        .filter_map(|(s, e)| Some((s, ms(e.as_ref()?)?)))
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let nets: Vec<String> = if args.is_empty() {
        vec!["resnet_50".into(), "mobilenet_v2".into()]
    } else {
        args
    };
    let trials: usize = std::env::var("TTDB_DROPLET_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let only = std::env::var("TTDB_DROPLET_ONLY").ok();
    let trace = std::env::var_os("TTDB_DROPLET_TRACE").is_some();
    let max_tasks: usize = std::env::var("TTDB_DROPLET_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let host = ttdb::measure::detect_host();
    let peak = ttdb::measure::measure_peak(&MeasureOptions::default())
        .map(|p| p.gflops_all)
        .unwrap_or(f64::NAN);
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes); fp32 FMA peak {peak:.0} GFLOP/s",
        host.cpu_model,
        host.llvm_cpu,
        host.cores,
        host.f32_lanes()
    );
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus/ansor/tvm_ansor_bench_full_nchwc");
    let mut opts = RefineOptions::default();
    opts.droplet.max_trials = trials;
    opts.droplet.tile_moves = std::env::var("TTDB_DROPLET_TILE_MOVES").map_or(true, |v| v != "0");
    opts.rank_by_model = std::env::var("TTDB_DROPLET_MODEL").map_or(true, |v| v != "0");
    println!(
        "Droplet: {trials} trials, tile-size moves {}, neighbours ranked by a cost model {} \
         (one cold model per network, learning from every trial)",
        opts.droplet.tile_moves, opts.rank_by_model
    );
    let final_eval = EvalOptions {
        measure: MeasureOptions {
            warmup: 1,
            repeat: 10,
            min_repeat_ms: 50,
            ..MeasureOptions::default()
        },
        ..EvalOptions::default()
    };
    for net in nets {
        let t_net = Instant::now();
        let tasks: Vec<Task> = tasks_of(&corpus.join(format!("{net}.json")));
        println!("\n== {net}: {} tasks in the log", tasks.len());
        println!(
            "{:<22} {:<26} {:>6} {:>5} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>6} {:>7}  stop",
            "task",
            "class",
            "valid",
            "v<300",
            "first300",
            "A ms",
            "B ms",
            "B/A",
            "B/300",
            "%peak A",
            "trials",
            "secs"
        );
        let (mut ratios, mut first_ratios, mut a_wins, mut spent, mut n) =
            (vec![], vec![], 0, 0, 0);
        let mut logged = 0;
        let mut model = CostModel::new();
        for task in tasks {
            if n >= max_tasks {
                break;
            }
            let Ok(key) = WorkloadKey::parse(&task.key) else {
                continue;
            };
            let Ok(rec) = ttdb::recognize::recognize(&key) else {
                continue;
            };
            let class = rec.signature.op_class.clone();
            if !class.contains("conv") {
                continue;
            }
            let out: Vec<String> = rec.signature.output.iter().map(|d| d.to_string()).collect();
            let hash = format!("{}:{}", &task.key[2..8], out.join("x"));
            if only.as_ref().is_some_and(|o| !hash.contains(o.as_str())) {
                continue;
            }
            n += 1;
            logged += task.total;
            let t0 = Instant::now();
            let reference = Reference::new(&rec.dag, 11).expect("reference");
            let interrupted = || false;
            let mut m = KernelMeasurer {
                dag: &rec.dag,
                reference: &reference,
                eval: opts.eval(),
                interrupted: &interrupted,
            };
            // The first 300 records of the task's history (the valid ones among them).
            let first = task.records.iter().filter(|r| r.0 < 300).count();
            let starts = timed_best(&mut m, &task.records, 300, 10);
            let Some((start, _)) = starts.first().cloned() else {
                println!("{hash:<22} {class:<26} no valid schedule in the first 300 verifies here");
                continue;
            };
            let Some((b_steps, _)) = timed_best(&mut m, &task.records, usize::MAX, 10)
                .into_iter()
                .next()
            else {
                println!("{hash:<22} {class:<26} no schedule verifies here");
                continue;
            };
            if trace {
                // Starts and B by structure (a short hash of `knobs::structure`).
                let id = |s: &[Step]| {
                    let k = ttdb::search::knobs::structure(s);
                    k.bytes()
                        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
                };
                for (s, t) in &starts {
                    println!("  start {t:.4} ms  structure {:08x}", id(s));
                }
                println!("  B structure {:08x}", id(&b_steps));
            }
            let starts: Vec<Vec<Step>> = starts.into_iter().map(|(s, _)| s).collect();
            let refined = refine_schedules(
                &rec.dag,
                &starts,
                &reference,
                &task.key,
                None,
                "bench",
                &opts,
                &mut model,
                &mut Discard,
                &mut |_, _| {},
            );
            let (a_steps, trials_used, stop) = match &refined {
                Ok(r) => (
                    r.best_steps.clone(),
                    r.trials.len(),
                    format!("{} ({} descent(s))", r.stop.as_str(), r.descents),
                ),
                Err(e) => {
                    println!("{hash:<22} {class:<26} droplet failed: {e}");
                    (start.clone(), 0, "failed".to_string())
                }
            };
            spent += trials_used;
            if let (true, Ok(r)) = (trace, &refined) {
                for t in &r.trials {
                    let m = ms(&t.evaluation).map_or("failed".into(), |v| format!("{v:.4}"));
                    let acc = if t.accepted { " accepted" } else { "" };
                    println!("  batch {:>2} {:>9} ms  {}{acc}", t.batch, m, t.change);
                }
            }
            if trace {
                let text = |s: &[Step]| {
                    s.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!("  A: {}\n  B: {}", text(&a_steps), text(&b_steps));
            }
            // Side by side, one run: first-300, A, B.
            let mut fm = KernelMeasurer {
                dag: &rec.dag,
                reference: &reference,
                eval: final_eval.clone(),
                interrupted: &interrupted,
            };
            let runs = fm.measure(
                &[start.clone(), a_steps, b_steps],
                std::time::Duration::from_secs(10),
            );
            let t: Vec<f64> = runs
                .iter()
                .map(|e| e.as_ref().and_then(ms).unwrap_or(f64::NAN))
                .collect();
            let (f300, a, b) = (t[0], t[1], t[2]);
            let gflops = rec.dag.flop_ct() / (a * 1e-3) / 1e9;
            if a.is_finite() && b.is_finite() {
                ratios.push(b / a);
                first_ratios.push(b / f300);
                a_wins += (a <= b) as usize;
            }
            println!(
                "{hash:<22} {class:<26} {:>6} {:>5} {f300:>9.3} {a:>9.3} {b:>9.3} {:>6.2} {:>6.2} {:>7.1} {trials_used:>6} {:>7.1}  {stop}",
                task.records.len(),
                first,
                b / a,
                b / f300,
                100.0 * gflops / peak,
                t0.elapsed().as_secs_f64()
            );
        }
        if ratios.is_empty() {
            continue;
        }
        println!(
            "{net}: {} conv tasks; A at least as fast as B on {a_wins} ({:.0}%); geomean B/A {:.3} (A vs the full search); geomean B/first-300 {:.3} (first-300 alone); {spent} Droplet trials ({:.0} per task, + 10 re-timed records) vs {:.0} logged trials per task; {:.0} s",
            ratios.len(),
            100.0 * a_wins as f64 / ratios.len() as f64,
            geomean(&ratios),
            geomean(&first_ratios),
            spent as f64 / ratios.len() as f64,
            logged as f64 / ratios.len() as f64,
            t_net.elapsed().as_secs_f64()
        );
    }
}
