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
//! The three schedules are then timed back to back, in one run (each built twice, 10
//! timings of >= 50 ms per build, interleaved, pooled: `time_pooled`), and compared as
//! ratios of medians; % of the machine's fp32 peak is given too. The bar: A at
//! least as fast as B on >= 80% of tasks, and geomean(B / A) >= 1.0. The summary also
//! counts the tasks where B is not significantly faster than A (Welch p <= 0.05 over the
//! pooled samples): two schedules within the timing's resolution of each other tie, and the
//! strict count decides those ties by noise.
//!
//! `cargo bench --bench droplet [-- resnet_50 mobilenet_v2]` (default: both); env
//! `TTDB_DROPLET_TRIALS`, `TTDB_DROPLET_TASKS` (at most this many tasks per network),
//! `TTDB_DROPLET_TILE_MOVES=0` (only +-1 moves), `TTDB_DROPLET_MODEL=0` (neighbours in
//! Droplet's own order, not ranked by the cost model), `TTDB_DROPLET_SLACK=X` (descend from
//! starts within X of the fastest), `TTDB_DROPLET_CONTINUE=0` (no continuation from the best
//! result), `TTDB_DROPLET_ONLY=a,b` (only tasks whose row label contains one of these),
//! `TTDB_DROPLET_TRACE` (print every trial: batch, change, median ms, accepted; the starts,
//! B and the first 300 records by structure).
//!
//! `TTDB_DROPLET_VS="continue=0"`: also refine each task with these settings
//! changed (keys `slack`, `continue`, `model`, `tile_moves`, `trials`, `pool` (ranked pool
//! factor), `starts` (descents at most), `combine`, `widen`; each variant with its
//! own cold model), as **A'**, timed side by side with the others; the summary adds A' >= B
//! and geomean A'/A (above 1: A is faster).
// The allocator of the ttdb binary (kernel builds are allocation-heavy).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/history.rs"]
mod history;
#[path = "common/stats.rs"]
mod stats;
use history::{conv_task, side_by_side_eval, tasks_of, Task};
use stats::geomean;
use std::time::Instant;
use ttdb::ansor::Step;
use ttdb::evaluate::{Evaluation, Reference};
use ttdb::measure::runner::MeasureOptions;
use ttdb::search::cost_model::CostModel;
use ttdb::search::measurer::{time_pooled, KernelMeasurer, Measurer};
use ttdb::search::stats::welch;
use ttdb::tune::record::Discard;
use ttdb::tune::refine::{refine_schedules, RefineOptions};
use ttdb::tune::trials::{Provenance, TrialSink};

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

/// One setting of the bench's Droplet (`TTDB_DROPLET_VS` keys).
fn set_option(o: &mut RefineOptions, key: &str, value: &str) {
    let on = value != "0" && value != "false";
    match key {
        "tile_moves" => o.droplet.tile_moves = on,
        "model" => o.rank_by_model = on,
        "continue" => o.restarts.continue_best = on,
        "slack" => o.restarts.start_slack = value.parse().expect("slack: a number or inf"),
        "trials" => o.droplet.max_trials = value.parse().expect("trials: a count"),
        "pool" => o.droplet.ranked_pool = value.parse().expect("pool: a factor"),
        "starts" => o.restarts.max_starts = value.parse().expect("starts: a count"),
        "combine" => o.droplet.combine = on,
        "widen" => o.droplet.widen = value.parse().expect("widen: a count"),
        _ => panic!(
            "unknown Droplet setting `{key}` (tile_moves, model, continue, slack, trials, \
             pool, starts, combine, widen)"
        ),
    }
}

fn describe(o: &RefineOptions) -> String {
    format!(
        "{} trials, tile-size moves {}, neighbours ranked by a cost model {} (one cold model \
         per network, learning from every trial), starts within {}x of the fastest, \
         continuation from the best {}, combined improvements {}, widening moves {}",
        o.droplet.max_trials,
        o.droplet.tile_moves,
        o.rank_by_model,
        o.restarts.start_slack,
        o.restarts.continue_best,
        o.droplet.combine,
        o.droplet.widen
    )
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
    let only: Option<Vec<String>> = std::env::var("TTDB_DROPLET_ONLY")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let trace = std::env::var_os("TTDB_DROPLET_TRACE").is_some();
    let max_tasks: usize = std::env::var("TTDB_DROPLET_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let host = ttdb::target::Target::detect().host;
    let peak =
        ttdb::measure::measure_peak(&ttdb::target::Target::detect(), &MeasureOptions::default())
            .map(|p| p.gflops_all)
            .unwrap_or(f64::NAN);
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes); fp32 FMA peak {peak:.0} GFLOP/s",
        host.cpu_model,
        host.llvm_cpu,
        host.cores,
        host.f32_lanes()
    );
    let corpus = history::corpus();
    let mut opts = RefineOptions::default();
    opts.droplet.max_trials = trials;
    for (key, var) in [
        ("tile_moves", "TTDB_DROPLET_TILE_MOVES"),
        ("model", "TTDB_DROPLET_MODEL"),
        ("slack", "TTDB_DROPLET_SLACK"),
        ("continue", "TTDB_DROPLET_CONTINUE"),
    ] {
        if let Ok(v) = std::env::var(var) {
            set_option(&mut opts, key, &v);
        }
    }
    let vs: Option<RefineOptions> = std::env::var("TTDB_DROPLET_VS").ok().map(|spec| {
        let mut o = opts.clone();
        for kv in spec.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("TTDB_DROPLET_VS: `{kv}` is not key=value"));
            set_option(&mut o, k, v);
        }
        o
    });
    println!("Droplet (A): {}", describe(&opts));
    if let Some(o) = &vs {
        println!("Droplet (A'): {}", describe(o));
    }
    let final_eval = side_by_side_eval();
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
        let mut vs_model = CostModel::new();
        let (mut vs_ratios, mut vs_wins, mut vs_spent) = (vec![], 0, 0);
        let mut a_not_slower = 0;
        for task in tasks {
            if n >= max_tasks {
                break;
            }
            let Some((rec, hash)) = conv_task(&task.key) else {
                continue;
            };
            let class = rec.signature.op_class.clone();
            if only
                .as_ref()
                .is_some_and(|o| !o.iter().any(|x| hash.contains(x.as_str())))
            {
                continue;
            }
            n += 1;
            logged += task.total;
            let t0 = Instant::now();
            let reference = Reference::new(&rec.dag, 11).expect("reference");
            let interrupted = || false;
            let mut m = KernelMeasurer::new(&rec.dag, &reference, opts.eval(), &interrupted);
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
                // The structures of the first 300 valid records, cheapest (logged) first:
                // is B's among them, and how far down?
                let mut first: Vec<&(usize, f64, Vec<Step>)> =
                    task.records.iter().filter(|r| r.0 < 300).collect();
                first.sort_by(|a, b| a.1.total_cmp(&b.1));
                let mut by: Vec<(u32, usize, usize)> = vec![]; // (structure, best rank, records)
                for (rank, r) in first.iter().enumerate() {
                    let k = id(&r.2);
                    match by.iter_mut().find(|e| e.0 == k) {
                        Some(e) => e.2 += 1,
                        None => by.push((k, rank, 1)),
                    }
                }
                let list: Vec<String> = by
                    .iter()
                    .map(|(k, r, n)| format!("{k:08x}@{r}x{n}"))
                    .collect();
                println!(
                    "  first-300 structures (id@best rank x records): {}",
                    list.join(" ")
                );
            }
            let starts: Vec<Vec<Step>> = starts.into_iter().map(|(s, _)| s).collect();
            let droplet = |opts: &RefineOptions, model: &mut CostModel| {
                let provenance = Provenance::Droplet {
                    record: None,
                    start: "bench",
                };
                let mut discard = Discard;
                let mut trials =
                    TrialSink::new(&mut discard, &task.key, rec.dag.flop_ct(), provenance);
                refine_schedules(&rec.dag, &starts, &reference, opts, model, &mut trials)
            };
            let refined = droplet(&opts, &mut model);
            let summary = |refined: &Result<ttdb::search::droplet::Refined, String>| match refined {
                Ok(r) => (
                    r.best_steps.clone(),
                    r.trials.len(),
                    format!("{} ({} descent(s))", r.stop.as_str(), r.descents),
                ),
                Err(e) => (start.clone(), 0, format!("droplet failed: {e}")),
            };
            let (a_steps, trials_used, stop) = summary(&refined);
            let other = vs.as_ref().map(|o| summary(&droplet(o, &mut vs_model)));
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
            // Side by side, one run: first-300, A, B (and A').
            let mut fm =
                KernelMeasurer::new(&rec.dag, &reference, final_eval.clone(), &interrupted);
            let mut schedules = vec![start.clone(), a_steps, b_steps];
            schedules.extend(other.iter().map(|o| o.0.clone()));
            let runs = time_pooled(&mut fm, &schedules, 2, std::time::Duration::from_secs(10));
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
                // Within the timing's resolution: B's samples not significantly lower.
                let samples = |e: &Option<Evaluation>| {
                    e.as_ref()
                        .and_then(|e| e.measurement.as_ref())
                        .map(|m| m.samples.clone())
                        .unwrap_or_default()
                };
                let (sa, sb) = (samples(&runs[1]), samples(&runs[2]));
                let b_faster = welch(&sb, &sa).is_some_and(|w| w.t < 0.0 && w.p <= 0.05);
                a_not_slower += !b_faster as usize;
            }
            let vs_text = match &other {
                Some((_, trials2, stop2)) => {
                    let a2 = t[3];
                    if a2.is_finite() && a.is_finite() && b.is_finite() {
                        vs_ratios.push(a2 / a);
                        vs_wins += (a2 <= b) as usize;
                    }
                    vs_spent += trials2;
                    format!(
                        "  | A' {a2:.3} ms, A'/A {:.2}, {trials2} trials, {stop2}",
                        a2 / a
                    )
                }
                None => String::new(),
            };
            println!(
                "{hash:<22} {class:<26} {:>6} {:>5} {f300:>9.3} {a:>9.3} {b:>9.3} {:>6.2} {:>6.2} {:>7.1} {trials_used:>6} {:>7.1}  {stop}{vs_text}",
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
            "{net}: {} conv tasks; A at least as fast as B on {a_wins} ({:.0}%), B not significantly faster (Welch p <= 0.05, pooled samples) on {a_not_slower}; geomean B/A {:.3} (A vs the full search); geomean B/first-300 {:.3} (first-300 alone); {spent} Droplet trials ({:.0} per task, + 10 re-timed records) vs {:.0} logged trials per task; {:.0} s",
            ratios.len(),
            100.0 * a_wins as f64 / ratios.len() as f64,
            geomean(&ratios),
            geomean(&first_ratios),
            spent as f64 / ratios.len() as f64,
            logged as f64 / ratios.len() as f64,
            t_net.elapsed().as_secs_f64()
        );
        if vs.is_some() && !vs_ratios.is_empty() {
            println!(
                "{net}: A' at least as fast as B on {vs_wins} of {} ({:.0}%); geomean A'/A {:.3} (above 1: A is faster); {vs_spent} A' trials",
                vs_ratios.len(),
                100.0 * vs_wins as f64 / vs_ratios.len() as f64,
                geomean(&vs_ratios)
            );
        }
    }
}
