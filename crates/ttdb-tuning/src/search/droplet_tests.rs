//! Droplet's algorithm against a synthetic measurer: a known cost per step list (so the
//! tests know the truth), timing noise, and injected faults; no LLVM.
use super::droplet::*;
use super::knobs::Space;
use super::measurer::{time_pooled, Measurer};
use super::observer::{Observer, Quiet};
use std::collections::HashSet;
use std::time::Duration;
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::evaluate::{Evaluation, Failure};
use ttdb_backend::lower::WeightLayout;
use ttdb_backend::measure::runner::Measurement;
use ttdb_format::ansor::Step;

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
    /// Instead of the distance to `target`: 1 ms everywhere (a plateau) but at these
    /// lengths, 0.5 ms.
    needle: Option<Vec<i64>>,
    noise: f64,
    rng: u64,
    fault: fn(&[i64]) -> Option<u8>,
    measured: Vec<Vec<Step>>,
}

impl Synthetic {
    fn new(target: Vec<i64>, noise: f64) -> Synthetic {
        Synthetic {
            target,
            needle: None,
            noise,
            rng: 0x1234_5678,
            fault: |_| None,
            measured: Vec::new(),
        }
    }

    fn truth(&self, steps: &[Step]) -> f64 {
        let l = split_lengths(steps);
        if let Some(needle) = &self.needle {
            return if l == *needle { 0.5e-3 } else { 1e-3 };
        }
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
    // (No widening moves: they would take the first trials of this descent.)
    let opts = DropletOptions {
        widen: 0,
        ..DropletOptions::default()
    };
    let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
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
impl Observer<Trial> for StopAfter {
    fn measured(&mut self, trials: &[Trial]) {
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

/// The schedule of [`restarts_from_another_structure_use_the_budget_left`]'s other
/// structure (the pad not inlined, the 8-extent split at [2, 2, 2]).
fn other_structure(steps: &[Step]) -> Vec<Step> {
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
    other
}

const FIRST: [i64; 15] = [1, 1, 1, 1, 2, 2, 2, 1, 2, 2, 2, 4, 3, 1, 4];
const OTHER: [i64; 15] = [1, 1, 1, 2, 2, 2, 2, 1, 2, 2, 2, 4, 3, 1, 4];

/// A second start of another structure nearer the optimum: the first descent stalls (every
/// move of it fails), the budget left goes to the second start, and the faster schedule
/// wins the side-by-side timing.
#[test]
fn restarts_from_another_structure_use_the_budget_left() {
    use super::restarts::{descent_order, refine_from, RestartOptions};
    let (dag, steps) = super::knobs::tests::conv_and_sketch();
    assert_eq!(split_lengths(&steps), FIRST);
    let inits = stage_inits_from_dag(&dag);
    let other = other_structure(&steps);
    assert_eq!(split_lengths(&other), OTHER);
    let starts = vec![steps.clone(), steps.clone(), other.clone()];
    // Fastest first; another structure before another start of the first one.
    let order = descent_order(&starts, &[Some(1.0), Some(1.1), Some(1.2)], 1.5, 2);
    assert_eq!(order, vec![0, 2]);
    // Too slow a start is not descended from; untimed ones neither.
    assert_eq!(
        descent_order(&starts, &[Some(1.0), None, Some(1.6)], 1.5, 5),
        vec![0]
    );
    assert_eq!(
        descent_order(&starts, &[Some(2.0), Some(1.0), None], 1.5, 5),
        vec![1]
    );
    let spaces: Vec<Space> = [&steps, &other]
        .iter()
        .map(|s| Space::new(&inits, s, 8).unwrap())
        .collect();
    // The first start is 2x the other's time (one length off by 2x).
    let run = |start_slack: f64| {
        let mut m = Synthetic::new(OTHER.to_vec(), 0.01);
        m.fault = |l| (l != FIRST && l != OTHER).then_some(2);
        let restarts = RestartOptions {
            continue_best: false,
            start_slack,
            ..RestartOptions::default()
        };
        refine_from(
            &spaces,
            &mut m,
            &mut Unranked,
            &DropletOptions::default(),
            &restarts,
            &mut Quiet,
        )
        .unwrap()
    };
    // Within the slack both starts are descended from; past it only the faster one.
    for (slack, descents) in [(3.0, 2), (1.5, 1)] {
        let r = run(slack);
        assert_eq!(r.descents, descents, "slack {slack}");
        assert!(r.improved);
        assert_eq!(r.best_steps, other);
        assert_eq!(r.start_steps, steps, "the first start is the reference");
        assert!(r.trials.len() <= DropletOptions::default().max_trials);
        let (a, b) = r.medians();
        assert!(b < a);
    }
}

/// [`super::restarts::refine_from`] from one space, unranked, with or without the
/// continuation.
fn refine_continued(
    sp: &Space,
    m: &mut Synthetic,
    opts: &DropletOptions,
    continue_best: bool,
) -> Refined {
    let restarts = super::restarts::RestartOptions {
        continue_best,
        ..Default::default()
    };
    super::restarts::refine_from(
        std::slice::from_ref(sp),
        m,
        &mut Unranked,
        opts,
        &restarts,
        &mut Quiet,
    )
    .unwrap()
}

/// The budget a stalled descent leaves goes on from its result: later batches measure new
/// points only (never one an earlier descent measured) and spend the whole budget.
#[test]
fn the_budget_left_continues_from_the_best_result() {
    let sp = space();
    let opts = DropletOptions {
        max_trials: 80,
        ..DropletOptions::default()
    };
    let run = |continue_best: bool| {
        let mut m = Synthetic::new(far_target(), 0.01);
        let r = refine_continued(&sp, &mut m, &opts, continue_best);
        (m.truth(&r.best_steps), r)
    };
    let (_, once) = run(false);
    assert_eq!(once.descents, 1);
    let (best, on) = run(true);
    // With 1% noise and a far target the plain descent may use the budget itself; the
    // continuation only ever adds trials, and never measures a step list twice.
    assert!(on.trials.len() >= once.trials.len());
    assert!(on.trials.len() <= 80);
    if once.trials.len() + opts.batch <= 80 {
        assert_eq!(on.descents, 2);
        assert!(on.trials.len() > once.trials.len());
    }
    let mut seen = HashSet::from([steps_key(&on.start_steps)]);
    for t in &on.trials {
        assert!(
            seen.insert(steps_key(&t.steps)),
            "measured twice: {}",
            t.change
        );
    }
    let start_truth = Synthetic::new(far_target(), 0.0).truth(&on.start_steps);
    assert!(best < start_truth);
}

/// On a plateau (every neighbour as fast as the start) with one faster neighbour the first
/// batch missed, a lone descent stops after that batch; the continuation measures the rest
/// of the neighbourhood and finds it.
#[test]
fn a_continuation_crosses_a_plateau_a_lone_descent_stops_at() {
    let sp = space();
    let opts = DropletOptions {
        max_trials: 96,
        ..DropletOptions::default()
    };
    let run = |continue_best: bool, needle: Option<Vec<i64>>| {
        let mut m = Synthetic::new(start_lengths(), 0.01);
        m.needle = needle;
        let r = refine_continued(&sp, &mut m, &opts, continue_best);
        (m.truth(&r.best_steps), r)
    };
    // The flat plateau: one batch, then Droplet's stop.
    let (_, flat) = run(false, Some(vec![]));
    assert_eq!((flat.stop, flat.batches), (Stop::NoImprovement, 1));
    let measured: Vec<Vec<i64>> = flat
        .trials
        .iter()
        .map(|t| split_lengths(&t.steps))
        .collect();
    // A one-knob neighbour of the start with other split lengths, not in that batch.
    let sizes = sp.sizes();
    let needle = (0..sizes.len())
        .filter(|&i| sizes[i] > 1)
        .filter_map(|i| {
            let mut p = sp.start.clone();
            p[i] = ((p[i] as usize + 1) % sizes[i]) as u16;
            let l = split_lengths(&sp.steps_at(&p).ok()?);
            (l != start_lengths() && !measured.contains(&l)).then_some(l)
        })
        .next()
        .expect("a neighbour the first batch did not measure");
    let (plain, plain_run) = run(false, Some(needle.clone()));
    assert_eq!(plain_run.batches, 1, "the same first batch misses it");
    assert_eq!(plain, 1e-3);
    let (cont, cont_run) = run(true, Some(needle));
    assert_eq!(cont, 0.5e-3, "{} trials", cont_run.trials.len());
    assert_eq!(cont_run.descents, 2);
    assert!(cont_run.improved);
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

/// Pooled timings: each schedule's samples over its builds (5 per build here), a failed
/// build's failure wins, and the schedules keep their order.
#[test]
fn pooled_timings_gather_every_builds_samples() {
    let sp = space();
    let start = sp.steps_at(&sp.start).unwrap();
    let mut m = Synthetic::new(start_lengths(), 0.01);
    let runs = time_pooled(
        &mut m,
        std::slice::from_ref(&start),
        3,
        Duration::from_secs(1),
    );
    let samples = &runs[0]
        .as_ref()
        .unwrap()
        .measurement
        .as_ref()
        .unwrap()
        .samples;
    assert_eq!(samples.len(), 15);
    assert_eq!(m.measured.len(), 3, "three builds of the one schedule");
    // A schedule that fails keeps its failure; the other is timed.
    let other = {
        let mut p = sp.start.clone();
        let i = sp.sizes().iter().position(|&n| n > 1).unwrap();
        p[i] = ((p[i] as usize + 1) % sp.sizes()[i]) as u16;
        sp.steps_at(&p).unwrap()
    };
    let mut m = Synthetic::new(start_lengths(), 0.01);
    let bad = split_lengths(&other);
    m.fault = |l| (l != FIRST).then_some(2);
    assert_ne!(bad, FIRST.to_vec());
    let runs = time_pooled(&mut m, &[start, other], 2, Duration::from_secs(1));
    assert!(runs[0].as_ref().unwrap().median().is_some());
    assert_eq!(
        runs[1]
            .as_ref()
            .unwrap()
            .failure
            .as_ref()
            .map(|f| f.error_no),
        Some(2)
    );
}

#[test]
fn combinations_join_the_improvements_on_other_coordinates_to_the_winner() {
    let center = vec![0u16, 0, 0, 0, 0];
    let winner = vec![1u16, 0, 0, 0, 0];
    let improvers = vec![
        vec![0u16, 2, 0, 0, 0], // another knob: joins
        vec![3u16, 0, 0, 0, 0], // the winner's knob: left out
        vec![0u16, 0, 0, 4, 5], // two other knobs (a tile move): joins
        vec![0u16, 6, 7, 0, 0], // overlaps the first on knob 1: alone only
    ];
    let c = combinations(&center, &winner, &improvers, 8);
    assert_eq!(
        c,
        vec![
            vec![1, 2, 0, 4, 5], // every one that fits, fastest first
            vec![1, 2, 0, 0, 0],
            vec![1, 0, 0, 4, 5],
            vec![1, 6, 7, 0, 0],
        ]
    );
    assert_eq!(combinations(&center, &winner, &improvers, 2).len(), 2);
    // One improver besides the winner: only the pair.
    assert_eq!(
        combinations(&center, &winner, &improvers[..1], 8),
        vec![vec![1, 2, 0, 0, 0]]
    );
    assert!(combinations(&center, &winner, &[], 8).is_empty());
}

/// On a separable cost, a batch holds improvements on several knobs at once; measuring
/// their combinations first gets further on the same budget than one move per batch.
#[test]
fn combining_a_batchs_improvements_gets_further_on_the_same_budget() {
    let sp = space();
    let run = |combine: bool| {
        let mut m = Synthetic::new(far_target(), 0.01);
        let opts = DropletOptions {
            max_trials: 64,
            combine,
            ..DropletOptions::default()
        };
        let r = refine(&sp, &mut m, &mut Unranked, &opts, &mut Quiet).unwrap();
        m.truth(&r.best_steps)
    };
    let (alone, joined) = (run(false), run(true));
    assert!(
        joined < alone,
        "combined {joined} vs one move per batch {alone}"
    );
}
