//! What the search's ranking buys, on this machine, in one run (issue: "cost model: ranking
//! quality on held-back measured trials; trials to the same quality with and without the
//! draft filter, and with and without the warm model"). `cargo bench --bench cost_model`.
//!
//! Part A, ranking quality: each workload is searched unranked (no draft filter, no model)
//! for `TTDB_CM_TRIALS` (192) trials; its verified trials, in the order measured, are split
//! into the first 75% (training) and the last 25% (held back, as a search meets them).
//! Reported: pairwise accuracy (pairs of held-back trials ordered like their times) and top-10%
//! recall, for the learned model trained on the task's own first 75%, on the *other*
//! workloads only (what a warm model knows of a new task), the draft estimate, and chance.
//!
//! Part B, trials to quality on the 3x3 conv: six searches of `TTDB_CM_SEARCH` (256) trials
//! per seed (`TTDB_CM_SEEDS`, 2): baseline unranked; draft only; cold model without and with
//! the draft filter; warm model with the draft filter, trained on Part A's *other*
//! workloads, or on the same conv's Part A trials (an earlier run). Reported: median best ms
//! at 32/64/128/256 trials, wall time, and the trials each seed needs to come within 10% of
//! the best any run found.
#[path = "common/stats.rs"]
mod stats;
#[path = "common/workloads.rs"]
mod workloads;
use stats::median;
use std::time::Instant;
use ttdb::evaluate::Reference;
use ttdb::ir::Dag;
use ttdb::lower::{lower_steps, LowerOptions};
use ttdb::search::cost_model::{pairwise_accuracy, program_features, CostModel, ProgramFeatures};
use ttdb::search::measurer::KernelMeasurer;
use ttdb::search::observer::Observer;
use ttdb::search::policy::{search_task, SearchOptions, SearchTrial, Searched};
use ttdb::search::sketch::HardwareParams;
use ttdb::tune::search::TuneOptions;
use workloads::{conv_nchwc as conv, matmul_512 as matmul};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Curve(Vec<(usize, f64, f64)>, Instant);
impl Observer<SearchTrial> for Curve {
    fn progress(&mut self, trials: usize, best: f64) {
        self.0
            .push((trials, self.1.elapsed().as_secs_f64(), best * 1e3));
    }
}

fn search(
    dag: &Dag,
    hw: HardwareParams,
    opts: &SearchOptions,
    model: &mut CostModel,
) -> (Searched, Curve) {
    let reference = Reference::new(dag, 7).expect("reference");
    let interrupted = || false;
    let mut measurer = KernelMeasurer::new(
        dag,
        &reference,
        TuneOptions::default().refine.eval(),
        &interrupted,
    );
    let mut curve = Curve(vec![], Instant::now());
    let out = search_task(dag, hw, &[], &mut measurer, opts, &mut curve, model).expect("search");
    (out, curve)
}

/// The verified trials of a search with their features, in the order measured.
fn featurized(dag: &Dag, out: &Searched, hw: &HardwareParams) -> Vec<(ProgramFeatures, f64)> {
    out.trials
        .iter()
        .filter_map(|t| {
            let s = t.evaluation.median()?;
            let k = lower_steps(dag, &t.steps, &LowerOptions::default()).ok()?;
            Some((program_features(&k, hw), s))
        })
        .collect()
}

fn trained(data: &[(&str, &[(ProgramFeatures, f64)])]) -> CostModel {
    let mut m = CostModel::new();
    for (task, samples) in data {
        for (f, s) in samples.iter() {
            m.add(task, f, Some(*s));
        }
    }
    m.retrain(&Default::default());
    m
}

/// Share of the truly fastest 10% that the score's top 10% contains.
fn top_recall(items: &[(u32, f64, f64)]) -> f64 {
    let k = (items.len() / 10).max(1);
    let mut by_time: Vec<usize> = (0..items.len()).collect();
    by_time.sort_by(|&a, &b| items[a].1.total_cmp(&items[b].1));
    let mut by_score: Vec<usize> = (0..items.len()).collect();
    by_score.sort_by(|&a, &b| items[b].2.total_cmp(&items[a].2));
    let top: Vec<usize> = by_time[..k].to_vec();
    by_score[..k].iter().filter(|i| top.contains(i)).count() as f64 / k as f64
}

fn main() {
    let hw = HardwareParams::of(&ttdb::target::Target::detect());
    let host = ttdb::target::Target::detect().host;
    let lanes = hw.vector_lanes as i64;
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes)",
        host.cpu_model, host.llvm_cpu, hw.num_cores, hw.vector_lanes
    );
    let trials = env("TTDB_CM_TRIALS", 192);
    let workloads = [
        ("conv3x3 64->64 @56", conv(lanes, 64, 64, 56, 3)),
        ("matmul 512^3", matmul()),
        ("conv1x1 256->64 @56", conv(lanes, 256, 64, 56, 1)),
    ];
    let unranked = SearchOptions {
        trials,
        draft_filter: false,
        learned_model: false,
        ..SearchOptions::default()
    };
    // Part A: collect unranked trials per workload.
    let mut data: Vec<Vec<(ProgramFeatures, f64)>> = Vec::new();
    for (name, dag) in &workloads {
        let t = Instant::now();
        let (out, _) = search(dag, hw, &unranked, &mut CostModel::new());
        let d = featurized(dag, &out, &hw);
        println!(
            "collected {name}: {} verified of {} trials in {:.0} s",
            d.len(),
            out.trials.len(),
            t.elapsed().as_secs_f64()
        );
        data.push(d);
    }
    // TTDB_CM_DUMP=file.csv: every collected program's store rows, for offline analysis.
    if let Ok(path) = std::env::var("TTDB_CM_DUMP") {
        let mut out = String::new();
        for (w, d) in data.iter().enumerate() {
            for (p, (f, s)) in d.iter().enumerate() {
                for (r, row) in f.rows.iter().enumerate() {
                    let vals: Vec<String> = row.iter().map(|v| v.to_string()).collect();
                    out.push_str(&format!(
                        "{w},{p},{r},{s},{},{}\n",
                        f.draft_seconds,
                        vals.join(",")
                    ));
                }
            }
        }
        std::fs::write(&path, out).expect("write the dump");
        println!("dumped the programs' rows to {path}");
    }
    println!("\nPart A: ranking of held-back trials (the last 25% measured)");
    println!(
        "{:<22} {:>6} | {:>22} | {:>22} | {:>14} | chance",
        "workload", "held", "model (own first 75%)", "model (other tasks)", "draft estimate"
    );
    for (w, (name, _)) in workloads.iter().enumerate() {
        let d = &data[w];
        let split = d.len() * 3 / 4;
        let (train, held) = d.split_at(split);
        let own = trained(&[(name, train)]);
        let others: Vec<(&str, &[(ProgramFeatures, f64)])> = workloads
            .iter()
            .enumerate()
            .filter(|(o, _)| *o != w)
            .map(|(o, (n, _))| (*n, data[o].as_slice()))
            .collect();
        let other = trained(&others);
        let score = |f: &dyn Fn(&ProgramFeatures) -> f64| -> Vec<(u32, f64, f64)> {
            held.iter().map(|(x, s)| (0, *s, f(x))).collect()
        };
        let own_items = score(&|x| own.predict(x).unwrap_or(0.0));
        let other_items = score(&|x| other.predict(x).unwrap_or(0.0));
        let draft_items = score(&|x| -x.draft_seconds);
        let draft_all: Vec<(u32, f64, f64)> =
            d.iter().map(|(x, s)| (0, *s, -x.draft_seconds)).collect();
        let fmt = |items: &[(u32, f64, f64)]| {
            format!(
                "{:.3} pairs, {:.2} top10%",
                pairwise_accuracy(items).unwrap_or(f64::NAN),
                top_recall(items)
            )
        };
        println!(
            "{:<22} {:>6} | {:>22} | {:>22} | {:>14} | 0.500 pairs, 0.10 top10%",
            name,
            held.len(),
            fmt(&own_items),
            fmt(&other_items),
            format!(
                "{:.3} pairs",
                pairwise_accuracy(&draft_items).unwrap_or(f64::NAN)
            ),
        );
        println!(
            "{:<22} draft estimate over all {} trials (random samples included): {:.3} pairs",
            "",
            d.len(),
            pairwise_accuracy(&draft_all).unwrap_or(f64::NAN)
        );
    }

    // Part B: trials to quality on the 3x3 conv.
    let budget = env("TTDB_CM_SEARCH", 256);
    let (name, dag) = &workloads[0];
    let warm_data: Vec<(&str, &[(ProgramFeatures, f64)])> = vec![
        (workloads[1].0, data[1].as_slice()),
        (workloads[2].0, data[2].as_slice()),
    ];
    // (label, draft filter, learned model, warm start: 0 cold, 1 other tasks, 2 same task)
    let configs: [(&str, bool, bool, u8); 6] = [
        ("baseline (unranked)", false, false, 0),
        ("draft filter only", true, false, 0),
        ("cold model, no draft", false, true, 0),
        ("cold model + draft", true, true, 0),
        ("warm (other tasks)", true, true, 1),
        ("warm (same task)", true, true, 2),
    ];
    let seeds = env("TTDB_CM_SEEDS", 2);
    let same_task: Vec<(&str, &[(ProgramFeatures, f64)])> =
        vec![(workloads[0].0, data[0].as_slice())];
    let mut runs = Vec::new();
    // TTDB_CM_CONFIGS=1,3: only these configs (0-based), to save time.
    let wanted: Option<Vec<usize>> = std::env::var("TTDB_CM_CONFIGS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    let configs: Vec<(&str, bool, bool, u8)> = configs
        .iter()
        .enumerate()
        .filter(|(i, _)| wanted.as_ref().is_none_or(|w| w.contains(i)))
        .map(|(_, c)| *c)
        .collect();
    for seed in 0..seeds as u64 {
        for &(label, draft, learned, warm) in &configs {
            let opts = SearchOptions {
                trials: budget,
                draft_filter: draft,
                learned_model: learned,
                seed: 0x5eed + 101 * seed,
                ..SearchOptions::default()
            };
            let mut model = match warm {
                1 => trained(&warm_data),
                2 => trained(&same_task),
                _ => CostModel::new(),
            };
            let t = Instant::now();
            let (out, curve) = search(dag, hw, &opts, &mut model);
            runs.push((label, curve.0, t.elapsed().as_secs_f64(), out.trials.len()));
        }
    }
    let best_overall = runs
        .iter()
        .flat_map(|r| r.1.iter().map(|p| p.2))
        .filter(|x| x.is_finite())
        .fold(f64::INFINITY, f64::min);
    let target = best_overall * 1.10;
    println!("\nPart B: {name}, {budget} trials each; target = 1.10 x best found ({best_overall:.3} ms) = {target:.3} ms");
    println!("(medians over {seeds} seeds; trials to target: each seed's, '-' = not reached)");
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>8} {:>18}",
        "config", "@32 ms", "@64 ms", "@128 ms", "@256 ms", "wall s", "trials to target"
    );
    for &(label, ..) in &configs {
        let mine: Vec<_> = runs.iter().filter(|r| r.0 == label).collect();
        let at = |t: usize| {
            let best: Vec<f64> = mine
                .iter()
                .filter_map(|r| r.1.iter().rfind(|p| p.0 <= t).map(|p| p.2))
                .collect();
            median(&best)
        };
        let reach: Vec<String> = mine
            .iter()
            .map(|r| {
                r.1.iter()
                    .find(|p| p.2 <= target)
                    .map_or("-".to_string(), |p| p.0.to_string())
            })
            .collect();
        let wall = median(&mine.iter().map(|r| r.2).collect::<Vec<_>>());
        println!(
            "{:<22} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.0} {:>18}",
            label,
            at(32),
            at(64),
            at(128),
            at(budget),
            wall,
            reach.join(" ")
        );
    }
}
