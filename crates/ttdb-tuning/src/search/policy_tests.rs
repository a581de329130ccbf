//! The search loop against a synthetic measurer (no LLVM): a known cost per step list and
//! injected faults. Compile errors, timeouts and wrong answers become failed trials, the
//! search goes on to its budget, and the cost model learns from every trial.
use super::cost_model::CostModel;
use super::droplet_tests::{failed, split_lengths, timed};
use super::measurer::Measurer;
use super::observer::Quiet;
use super::policy::*;
use super::sketch::{tests::matmul, HardwareParams};
use std::collections::HashSet;
use std::time::Duration;
use ttdb_backend::evaluate::Evaluation;
use ttdb_format::ansor::Step;

/// Cost: 1 ms x (1 + Σ |log2(length / 4)|) over the split lengths (tiles of 4 are best);
/// every 5th schedule fails to compile (2), every 7th times out (7), every 11th is wrong (5).
struct Faulty {
    n: usize,
}

impl Measurer for Faulty {
    fn measure(&mut self, schedules: &[Vec<Step>], _timeout: Duration) -> Vec<Option<Evaluation>> {
        schedules
            .iter()
            .map(|s| {
                self.n += 1;
                for (every, code) in [(5, 2), (7, 7), (11, 5)] {
                    if self.n.is_multiple_of(every) {
                        return Some(failed(code));
                    }
                }
                let cost: f64 = split_lengths(s)
                    .iter()
                    .map(|&l| ((l as f64) / 4.0).log2().abs())
                    .sum();
                Some(timed(vec![1e-3 * (1.0 + cost); 3]))
            })
            .collect()
    }
}

#[test]
fn faults_are_failed_trials_and_the_search_goes_on() {
    let dag = matmul(64, 64, 64);
    let hw = HardwareParams {
        num_cores: 2,
        vector_lanes: 8,
    };
    let opts = SearchOptions {
        trials: 96,
        batch: 16,
        population: 64,
        ..SearchOptions::default()
    };
    let mut model = CostModel::new();
    let out = search_task(
        &dag,
        hw,
        &[],
        &mut Faulty { n: 0 },
        &opts,
        &mut Quiet,
        &mut model,
    )
    .unwrap();
    assert_eq!(out.stop, SearchStop::Trials);
    assert_eq!(out.trials.len(), 96);
    let codes: HashSet<u8> = out
        .trials
        .iter()
        .filter_map(|t| t.evaluation.failure.as_ref().map(|f| f.error_no))
        .collect();
    assert_eq!(codes, HashSet::from([2, 5, 7]));
    let best = out.best_trial().expect("a verified best");
    assert!(best.evaluation.verified());
    // Every trial, failed ones included (label 0), taught the model; it is trained.
    assert_eq!(model.programs(), 96);
    model.maybe_retrain();
    assert!(model.is_trained());
    // The search improved on its first round.
    let first_round_best = out
        .trials
        .iter()
        .filter(|t| t.round == 0)
        .filter_map(|t| t.evaluation.median())
        .fold(f64::INFINITY, f64::min);
    assert!(
        best.evaluation.median().unwrap() < first_round_best,
        "no progress after round 0"
    );
}

/// A sibling task's best (a 128³ matmul's, tiles of 32) offered to a 48³ matmul: adapted to
/// its extents (every split divides 48), measured in the next round as a "transfer" trial,
/// taken once; a schedule of another DAG structure does not apply.
#[test]
fn offered_sibling_bests_are_adapted_and_measured_once() {
    let hw = HardwareParams {
        num_cores: 2,
        vector_lanes: 8,
    };
    let opts = SearchOptions {
        trials: 64,
        batch: 8,
        population: 16,
        ..SearchOptions::default()
    };
    let sibling = matmul(128, 128, 128);
    let mut model = CostModel::new();
    let mut big = TaskSearch::new(&sibling, hw, &[], &opts).unwrap();
    big.round(8, &mut Faulty { n: 0 }, &mut Quiet, &mut model);
    let best = big.out.best_trial().expect("a verified best").steps.clone();

    let dag = matmul(48, 48, 48);
    let mut task = TaskSearch::new(&dag, hw, &[], &opts).unwrap();
    task.round(8, &mut Faulty { n: 0 }, &mut Quiet, &mut model);
    assert!(task.offer(&best));
    assert!(!task.offer(&best), "offered twice");
    // a row sum has one spatial loop, not two: the matmul's steps do not replay on it
    let rows = {
        use ttdb_algo::ir::{Combiner, ComputeAttrs, DType, DagBuilder, IterVar};
        let mut b = DagBuilder::new();
        let a = b.placeholder("A", &[48, 48], DType::F32);
        let out = b.reduce(
            "C",
            "",
            vec![IterVar::new("i", 48)],
            vec![IterVar::new("k", 48)],
            Combiner::Sum,
            ComputeAttrs::default(),
            |v, r| a.at(vec![v[0].clone(), r[0].clone()]),
        );
        b.finish(&[&out])
    };
    assert!(!TaskSearch::new(&rows, hw, &[], &opts).unwrap().offer(&best));
    task.round(8, &mut Faulty { n: 0 }, &mut Quiet, &mut model);
    let transferred: Vec<_> = task
        .out
        .trials
        .iter()
        .filter(|t| t.origin == "transfer")
        .collect();
    assert_eq!(transferred.len(), 1);
    assert!(
        split_lengths(&transferred[0].steps)
            .iter()
            .all(|&l| 48 % l == 0),
        "{:?}",
        transferred[0].steps
    );
}

/// `seeds_alone_first` (apply's transfer): the first round is the seeds and nothing else,
/// the second a sampled population as a cold first round (nothing bred from the seeds
/// alone), the third breeds from both. Without it the seeds join a first round of samples.
#[test]
fn seeds_alone_make_the_first_round_and_a_population_the_second() {
    let hw = HardwareParams {
        num_cores: 2,
        vector_lanes: 8,
    };
    let dag = matmul(64, 64, 64);
    let base = SearchOptions {
        trials: 64,
        batch: 8,
        population: 16,
        ..SearchOptions::default()
    };
    // Two seeds: the first rounds' samples of an unseeded search.
    let mut model = CostModel::new();
    let mut scout = TaskSearch::new(&dag, hw, &[], &base).unwrap();
    scout.round(8, &mut Faulty { n: 1 }, &mut Quiet, &mut model);
    let seeds: Vec<Vec<Step>> = scout.out.trials[..2]
        .iter()
        .map(|t| t.steps.clone())
        .collect();
    let origins = |task: &TaskSearch, round: usize| -> Vec<String> {
        let of_round = task.out.trials.iter().filter(|t| t.round == round);
        of_round.map(|t| t.origin.clone()).collect()
    };
    let alone = SearchOptions {
        seeds_alone_first: true,
        ..base.clone()
    };
    let mut task = TaskSearch::new(&dag, hw, &seeds, &alone).unwrap();
    for _ in 0..3 {
        task.round(8, &mut Faulty { n: 1 }, &mut Quiet, &mut model);
    }
    assert_eq!(origins(&task, 0), vec!["seed", "seed"]);
    let second = origins(&task, 1);
    assert_eq!(second.len(), 8);
    assert!(second.iter().all(|o| o == "sample"), "{second:?}");
    let third = origins(&task, 2);
    assert!(third.iter().any(|o| o.starts_with("mutation")), "{third:?}");
    // Without the option: the seeds and samples share the first round.
    let mut mixed = TaskSearch::new(&dag, hw, &seeds, &base).unwrap();
    mixed.round(8, &mut Faulty { n: 1 }, &mut Quiet, &mut model);
    let first = origins(&mixed, 0);
    assert_eq!(first.len(), 8);
    assert_eq!(
        first.iter().filter(|o| *o == "seed").count(),
        2,
        "{first:?}"
    );
}
