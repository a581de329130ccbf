//! What the full-tile fast path buys (`CodegenOptions::full_tile_fast_path`: a lane-varying
//! `if` first tests whether every lane, or none, takes an arm, and runs full tiles unmasked).
//!
//! The schedules with masked tails are the ones Droplet's widening moves make: for each conv
//! task of a network's full tuning history, the best logged record's widening moves
//! (`Space::widening_moves`, at most 2) whose code has masked stores. Each is built twice,
//! fast path on and off, and the two builds are timed side by side in one batch (10
//! interleaved timings of >= 50 ms each, on rotating argument copies). Reported per
//! schedule: both medians and off/on (above 1: the fast path is faster); then the geomean.
//! `cargo bench --bench masked_tiles [-- resnet_50 mobilenet_v2]`; `TTDB_MASKED_TASKS` caps
//! the tasks per network.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[path = "common/history.rs"]
mod history;
#[path = "common/stats.rs"]
mod stats;
use history::{conv_task, side_by_side_eval, tasks_of};
use stats::{geomean, median};
use ttdb::evaluate::{build_steps, EvalOptions, Reference};
use ttdb::schedule::stage_inits_from_dag;
use ttdb::search::knobs::Space;

/// Whether `steps` on `dag` compile to a vector body with masked stores.
fn has_masked_tail(dag: &ttdb::ir::Dag, steps: &[ttdb::ansor::Step], eval: &EvalOptions) -> bool {
    let mut e = eval.clone();
    e.codegen.keep_ir = true;
    let b = build_steps(dag, steps, &e);
    match &b.result {
        Ok((k, _)) => k.ir.as_deref().is_some_and(|ir| {
            ir.contains("@llvm.masked.store") || ir.contains("@llvm.masked.scatter")
        }),
        Err(_) => false,
    }
}

fn main() {
    let nets: Vec<String> = {
        let a: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        if a.is_empty() {
            vec!["mobilenet_v2".into(), "resnet_50".into()]
        } else {
            a
        }
    };
    let max_tasks: usize = std::env::var("TTDB_MASKED_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let host = ttdb::target::Target::detect().host;
    let lanes = host.f32_lanes() as i64;
    println!(
        "host: {} ({}, {} cores, {lanes} fp32 lanes); the fast path on and off, built side by \
         side, 10 interleaved timings of >= 50 ms each",
        host.cpu_model, host.llvm_cpu, host.cores
    );
    let on = side_by_side_eval();
    let mut off = on.clone();
    off.codegen.full_tile_fast_path = false;
    let mut ratios = Vec::new();
    for net in nets {
        println!("\n== {net}");
        println!(
            "{:<24} {:>5} {:>10} {:>10} {:>8}",
            "task", "move", "off ms", "on ms", "off/on"
        );
        let mut n = 0;
        for task in tasks_of(&history::corpus().join(format!("{net}.json"))) {
            if n >= max_tasks {
                break;
            }
            let (Some(best), Some((rec, label))) = (task.best_logged(), conv_task(&task.key))
            else {
                continue;
            };
            let inits = stage_inits_from_dag(&rec.dag);
            let Ok(space) = Space::new(&inits, best, lanes) else {
                continue;
            };
            let moves: Vec<Vec<ttdb::ansor::Step>> = space
                .widening_moves(&space.start, 2)
                .iter()
                .filter_map(|p| space.steps_at(p).ok())
                .filter(|s| has_masked_tail(&rec.dag, s, &on))
                .collect();
            if moves.is_empty() {
                continue;
            }
            n += 1;
            let reference = Reference::new(&rec.dag, 11).expect("reference");
            for (m, steps) in moves.iter().enumerate() {
                let builds = [
                    build_steps(&rec.dag, steps, &off),
                    build_steps(&rec.dag, steps, &on),
                ];
                let mut prepared = Vec::new();
                for (b, e) in builds.iter().zip([&off, &on]) {
                    match b.prepare(&reference, e) {
                        Ok(p) => prepared.push(p),
                        Err(e) => {
                            println!("{label:<24} {m:>5} did not verify: {:?}", e.failure);
                            break;
                        }
                    }
                }
                if prepared.len() < 2 {
                    continue;
                }
                let one = ttdb::measure::runner::MeasureOptions {
                    repeat: 1,
                    ..on.measure.clone()
                };
                let mut samples = [vec![], vec![]];
                let mut number = [1, 1];
                for round in 0..on.measure.repeat.max(1) {
                    for (i, p) in prepared.iter_mut().enumerate() {
                        let t = if round == 0 {
                            p.time(&one)
                        } else {
                            p.time_again(number[i], &one)
                        }
                        .expect("timed");
                        number[i] = t.number;
                        samples[i].extend(t.samples);
                    }
                }
                let (a, b) = (median(&samples[0]) * 1e3, median(&samples[1]) * 1e3);
                ratios.push(a / b);
                println!("{label:<24} {m:>5} {a:>10.4} {b:>10.4} {:>8.3}", a / b);
            }
        }
    }
    if !ratios.is_empty() {
        println!(
            "\n{} schedules with masked tails: off/on geomean {:.3}, median {:.3}, range {:.3}-{:.3}",
            ratios.len(),
            geomean(&ratios),
            median(&ratios),
            ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            ratios.iter().cloned().fold(0.0, f64::max)
        );
    }
}
