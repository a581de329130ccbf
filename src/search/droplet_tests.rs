//! Droplet's algorithm against a synthetic measurer: a known cost per step list (so the
//! tests know the truth), timing noise, and injected faults; no LLVM.
use super::droplet::*;
use super::knobs::Space;
use crate::ansor::Step;
use crate::evaluate::{Evaluation, Failure};
use crate::lower::WeightLayout;
use crate::measure::runner::Measurement;
use crate::schedule::stage_inits_from_dag;
use std::collections::HashSet;
use std::time::Duration;

fn space() -> Space {
    let (dag, steps) = super::knobs::tests::conv_and_sketch();
    Space::new(&stage_inits_from_dag(&dag), &steps, 8).unwrap()
}

pub(super) fn timed(samples: Vec<f64>) -> Evaluation {
    Evaluation {
        lower_time: Duration::ZERO,
        compile_time: Duration::ZERO,
        rel_error: Some(0.0),
        measurement: Some(Measurement::from_samples(samples, 1)),
        failure: None,
        weight_layout: WeightLayout::Original,
        pack_time: Duration::ZERO,
    }
}

pub(super) fn failed(error_no: u8) -> Evaluation {
    Evaluation {
        lower_time: Duration::ZERO,
        compile_time: Duration::ZERO,
        rel_error: None,
        measurement: None,
        failure: Some(Failure {
            error_no,
            message: "injected".into(),
        }),
        weight_layout: WeightLayout::Original,
        pack_time: Duration::ZERO,
    }
}

pub(super) fn split_lengths(steps: &[Step]) -> Vec<i64> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Split(sp) => Some(sp.lengths.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Cost = 1 ms x (1 + sum over split lengths of |log2(length / target)|), with relative
/// timing noise; schedules for which `fault` says so fail with that error code.
struct Synthetic {
    target: Vec<i64>,
    noise: f64,
    rng: u64,
    fault: fn(&[i64]) -> Option<u8>,
    measured: Vec<Vec<Step>>,
}

impl Synthetic {
    fn new(target: Vec<i64>, noise: f64) -> Synthetic {
        Synthetic {
            target,
            noise,
            rng: 0x1234_5678,
            fault: |_| None,
            measured: Vec::new(),
        }
    }

    fn truth(&self, steps: &[Step]) -> f64 {
        let l = split_lengths(steps);
        1e-3 * (1.0
            + l.iter()
                .zip(&self.target)
                .map(|(&a, &b)| ((a as f64) / (b as f64)).log2().abs())
                .sum::<f64>())
    }
}

impl Measurer for Synthetic {
    fn measure(&mut self, schedules: &[Vec<Step>], _timeout: Duration) -> Vec<Option<Evaluation>> {
        schedules
            .iter()
            .map(|s| {
                self.measured.push(s.clone());
                if let Some(code) = (self.fault)(&split_lengths(s)) {
                    return Some(failed(code));
                }
                let t = self.truth(s);
                let samples = (0..5)
                    .map(|_| {
                        self.rng ^= self.rng << 13;
                        self.rng ^= self.rng >> 7;
                        self.rng ^= self.rng << 17;
                        let u = (self.rng % 2001) as f64 / 1000.0 - 1.0;
                        t * (1.0 + self.noise * u)
                    })
                    .collect();
                Some(timed(samples))
            })
            .collect()
    }
}

fn start_lengths() -> Vec<i64> {
    let (_, steps) = super::knobs::tests::conv_and_sketch();
    split_lengths(&steps)
}

/// A target the start is far from (every length 4x off where the extent allows).
fn far_target() -> Vec<i64> {
    start_lengths()
        .iter()
        .map(|&l| if l == 1 { 4 } else { 1 })
        .collect()
}

#[test]
fn the_neighbourhood_reaches_every_knob_both_ways() {
    let sp = space();
    let sizes = sp.sizes();
    let mut rng = 7;
    let ns = neighbours(&sp.start, 1, &sizes, vec![], &mut rng);
    for (i, &n) in sizes.iter().enumerate() {
        let moved: HashSet<u16> = ns
            .iter()
            .filter(|p| (0..sizes.len()).all(|j| j == i || p[j] == sp.start[j]))
            .map(|p| p[i])
            .collect();
        let up = ((sp.start[i] as usize + 1) % n) as u16;
        let down = ((sp.start[i] as usize + n - 1) % n) as u16;
        assert!(
            moved.contains(&up) && moved.contains(&down),
            "knob {} not reached",
            sp.knobs[i].label()
        );
    }
    // Two-knob moves come after the single ones.
    assert!(ns.len() > 2 * sizes.len());
}

#[test]
fn it_descends_and_never_measures_a_point_twice() {
    let sp = space();
    let mut m = Synthetic::new(far_target(), 0.01);
    let start_truth = m.truth(&sp.steps_at(&sp.start).unwrap());
    let opts = DropletOptions {
        max_trials: 200,
        ..DropletOptions::default()
    };
    let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
    assert!(r.improved, "{:?}", r.stop);
    let best_truth = m.truth(&r.best_steps);
    assert!(
        best_truth < start_truth * 0.7,
        "{best_truth} vs {start_truth}"
    );
    // Each trial is a distinct step list, never the start.
    let text = |s: &[Step]| {
        s.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut seen = HashSet::from([text(&sp.steps_at(&sp.start).unwrap())]);
    for t in &r.trials {
        assert!(seen.insert(text(&t.steps)), "measured twice: {}", t.change);
    }
    assert!(r.trials.len() <= 200);
    assert_eq!(
        r.trials.iter().filter(|t| t.accepted).count() > 0,
        r.improved
    );
}

#[test]
fn a_locally_best_start_is_kept_after_one_batch() {
    let sp = space();
    let mut m = Synthetic::new(start_lengths(), 0.01);
    let r = refine(
        &sp,
        &mut m,
        &mut Unranked,
        &DropletOptions::default(),
        &mut Quiet,
    )
    .unwrap();
    assert!(!r.improved);
    assert_eq!(r.stop, Stop::NoImprovement);
    assert_eq!(r.batches, 1);
    assert_eq!(r.trials.len(), DropletOptions::default().batch);
    assert_eq!(r.best_steps, sp.steps_at(&sp.start).unwrap());
}

/// With timing noise as large as the differences, no move is significant: nothing moves,
/// and the result is never slower than the start.
#[test]
fn noise_does_not_fool_the_test_and_the_result_is_never_slower() {
    let sp = space();
    for seed in 1..6u64 {
        let mut m = Synthetic::new(far_target(), 0.6);
        m.rng = seed * 0x9e37_79b9;
        let opts = DropletOptions {
            seed,
            ..DropletOptions::default()
        };
        let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
        let (start, best) = (
            m.truth(&sp.steps_at(&sp.start).unwrap()),
            m.truth(&r.best_steps),
        );
        assert!(best <= start, "seed {seed}: {best} > {start}");
        let (a, b) = r.medians();
        assert!(b <= a || !r.improved, "seed {seed}");
    }
}

#[test]
fn faults_are_failed_trials_and_the_descent_goes_on() {
    let sp = space();
    let mut m = Synthetic::new(far_target(), 0.01);
    // (The start's lengths are [1,1,1, 1,2,2, 2,1,2, 2,2,4, 3, 1, 4].) Any length of 16
    // fails to compile, of 8 times out; a second length of 2 in the first spatial split
    // gives a wrong answer.
    m.fault = |l| {
        if l.contains(&16) {
            Some(2)
        } else if l.contains(&8) {
            Some(7)
        } else if l[3] == 2 {
            Some(5)
        } else {
            None
        }
    };
    let r = refine(
        &sp,
        &mut m,
        &mut Unranked,
        &DropletOptions::default(),
        &mut Quiet,
    )
    .unwrap();
    let codes: HashSet<u8> = r
        .trials
        .iter()
        .filter_map(|t| t.evaluation.failure.as_ref().map(|f| f.error_no))
        .collect();
    assert!(
        codes.contains(&2) && codes.contains(&7) && codes.contains(&5),
        "{codes:?}"
    );
    assert!(r
        .trials
        .iter()
        .all(|t| !t.accepted || t.evaluation.failure.is_none()));
    assert!(r.improved, "a failed candidate must not end the descent");
}

#[test]
fn a_start_that_does_not_verify_is_an_error() {
    let sp = space();
    let mut m = Synthetic::new(far_target(), 0.01);
    m.fault = |_| Some(5);
    let e = refine(
        &sp,
        &mut m,
        &mut Unranked,
        &DropletOptions::default(),
        &mut Quiet,
    )
    .unwrap_err();
    assert!(e.contains("does not verify"), "{e}");
}

struct StopAfter {
    batches: usize,
    seen: usize,
}
impl Observer for StopAfter {
    fn batch_done(&mut self, trials: &[Trial]) {
        self.seen += trials.len();
        self.batches = self.batches.saturating_sub(1);
    }
    fn interrupted(&self) -> bool {
        self.batches == 0
    }
}

#[test]
fn an_interrupt_stops_cleanly_with_every_trial_reported() {
    let sp = space();
    let mut m = Synthetic::new(far_target(), 0.01);
    let mut obs = StopAfter {
        batches: 2,
        seen: 0,
    };
    let r = refine(
        &sp,
        &mut m,
        &mut Unranked,
        &DropletOptions::default(),
        &mut obs,
    )
    .unwrap();
    assert_eq!(r.stop, Stop::Interrupted);
    assert_eq!(r.batches, 2);
    assert_eq!(obs.seen, r.trials.len());
}

#[test]
fn budgets_bound_the_trials() {
    let sp = space();
    let mut m = Synthetic::new(far_target(), 0.01);
    let opts = DropletOptions {
        max_trials: 20,
        ..DropletOptions::default()
    };
    let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
    assert!(r.trials.len() <= 20);
    assert!(matches!(r.stop, Stop::Trials | Stop::NoImprovement));
    let opts = DropletOptions {
        time_budget: Some(Duration::ZERO),
        ..DropletOptions::default()
    };
    let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
    assert_eq!((r.stop, r.trials.len()), (Stop::Time, 0));
}

/// A second start of another structure (the pad not inlined) nearer the optimum: the first
/// descent stalls (every move of it fails), the budget left goes to the second start, and
/// the faster schedule wins the side-by-side timing.
#[test]
fn restarts_from_another_structure_use_the_budget_left() {
    use super::restarts::{refine_from, start_order};
    const FIRST: [i64; 15] = [1, 1, 1, 1, 2, 2, 2, 1, 2, 2, 2, 4, 3, 1, 4];
    const OTHER: [i64; 15] = [1, 1, 1, 2, 2, 2, 2, 1, 2, 2, 2, 4, 3, 1, 4];
    let (dag, steps) = super::knobs::tests::conv_and_sketch();
    assert_eq!(split_lengths(&steps), FIRST);
    let inits = stage_inits_from_dag(&dag);
    let mut other: Vec<Step> = steps
        .iter()
        .filter(|s| s.to_string() != r#"["CI", 1]"#)
        .cloned()
        .collect();
    if let Some(Step::Split(sp)) = other
        .iter_mut()
        .find(|s| matches!(s, Step::Split(sp) if sp.extent == 8))
    {
        sp.lengths = vec![2, 2, 2];
    }
    assert_eq!(split_lengths(&other), OTHER);
    let starts = vec![steps.clone(), steps.clone(), other.clone()];
    let spaces: Vec<Space> = starts
        .iter()
        .map(|s| Space::new(&inits, s, 8).unwrap())
        .collect();
    let spaces = start_order(spaces, &starts, 2);
    assert_eq!(spaces.len(), 2);
    assert_eq!(
        super::knobs::structure(&spaces[1].steps_at(&spaces[1].start).unwrap()),
        super::knobs::structure(&other),
        "another structure comes before another start of the first one"
    );
    let mut m = Synthetic::new(OTHER.to_vec(), 0.01);
    m.fault = |l| (l != FIRST && l != OTHER).then_some(2);
    let r = refine_from(
        &spaces,
        &mut m,
        &mut Unranked,
        &DropletOptions::default(),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(r.descents, 2);
    assert!(r.improved);
    assert_eq!(r.best_steps, other);
    assert!(r.trials.len() <= DropletOptions::default().max_trials);
    let (a, b) = r.medians();
    assert!(b < a);
}

#[test]
fn a_ranked_batch_is_the_rankers_best_with_every_fourth_slot_in_frontier_order() {
    let pool: Vec<usize> = (0..12).collect();
    // Scores rise with the index: the ranker prefers the end of the frontier.
    let scores: Vec<f64> = (0..12).map(|i| i as f64).collect();
    let (chosen, rest) = choose(pool.clone(), 8, Some(scores));
    assert_eq!(chosen.len(), 8);
    // Slots 0-2 and 4-6 by score (11, 10, 9, 8, 7, 6); slots 3 and 7 the frontier's first.
    assert_eq!(chosen, vec![0, 1, 6, 7, 8, 9, 10, 11]);
    assert_eq!(rest, vec![2, 3, 4, 5], "the rest keep their frontier order");
    // No opinion, or nothing to choose from: the frontier's order.
    assert_eq!(
        choose(pool.clone(), 8, None),
        (pool[..8].to_vec(), pool[8..].to_vec())
    );
    assert_eq!(
        choose(pool[..5].to_vec(), 8, Some(vec![0.0; 5])).0,
        pool[..5].to_vec()
    );
}

/// Ranks by a known cost: the oracle a learned model approximates.
struct Oracle {
    target: Vec<i64>,
    ready: bool,
    learned: usize,
}
impl Ranker for Oracle {
    fn ready(&self) -> bool {
        self.ready
    }
    fn scores(&mut self, schedules: &[Vec<Step>]) -> Option<Vec<f64>> {
        let m = Synthetic::new(self.target.clone(), 0.0);
        self.ready
            .then(|| schedules.iter().map(|s| -m.truth(s)).collect())
    }
    fn learn(&mut self, _: &[Step], _: &Evaluation) {
        self.learned += 1;
    }
}

#[test]
fn a_ranker_that_knows_the_costs_gets_further_on_the_same_budget() {
    let sp = space();
    let opts = DropletOptions {
        max_trials: 48,
        ..DropletOptions::default()
    };
    let run = |ranker: &mut dyn Ranker| {
        let mut m = Synthetic::new(far_target(), 0.01);
        let r = refine(&sp, &mut m, ranker, &opts, &mut Quiet).unwrap();
        (m.truth(&r.best_steps), r)
    };
    let (plain, plain_run) = run(&mut Unranked);
    let mut oracle = Oracle {
        target: far_target(),
        ready: true,
        learned: 0,
    };
    let (ranked, ranked_run) = run(&mut oracle);
    assert!(ranked < plain, "ranked {ranked} vs unranked {plain}");
    // It learned from the start and from every trial; no point was measured twice.
    assert_eq!(oracle.learned, 1 + ranked_run.trials.len());
    let mut seen = HashSet::new();
    assert!(ranked_run
        .trials
        .iter()
        .all(|t| seen.insert(format!("{:?}", t.steps))));
    // A ranker without an opinion changes nothing.
    let mut idle = Oracle {
        target: far_target(),
        ready: false,
        learned: 0,
    };
    let (_, idle_run) = run(&mut idle);
    let changes = |r: &Refined| {
        r.trials
            .iter()
            .map(|t| t.change.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(changes(&idle_run), changes(&plain_run));
}
