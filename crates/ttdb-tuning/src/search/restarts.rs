//! Droplet from several starts, sharing one trial budget. Its knobs move tile sizes,
//! unrolling and fuse groups, never a compute location or a cache stage: a start of another
//! structure (see [`super::knobs::structure`]) is another basin, and so, often, is another
//! good start of the same structure.
//!
//! [`refine_from`] times every start side by side (not trials) and descends from the
//! fastest of each distinct structure, then from the next fastest starts, in turn while the
//! budget lasts ([`RestartOptions`]).
//! A descent stops as Droplet does (one batch without a significant improvement); the
//! budget left then continues from the best result so far, batch after batch, never
//! measuring a step list twice. Last, the first start and every descent's result are timed
//! side by side and the fastest is kept.
use super::droplet::{refine_with, DropletOptions, Prior, Ranker, Refined, Stop, Trial};
use super::knobs::{structure, Point, Space};
use super::measurer::{time_pooled, Measurer, PICK_BUILDS};
use super::observer::Observer;
use std::collections::HashSet;
use std::time::Instant;
use ttdb_backend::evaluate::Evaluation;
use ttdb_format::ansor::Step;

/// How descents share the budget.
#[derive(Clone, Debug)]
pub struct RestartOptions {
    /// Descents from distinct starts at most.
    pub max_starts: usize,
    /// A start is descended from only when timed within this factor of the fastest start.
    /// No limit by default: at 1.5, two resnet_50 tasks that the unlimited setting won were
    /// lost in both of two runs of `benches/droplet.rs`, and the network's geomean did not
    /// move (unlimited/1.5: 0.988 and 1.016).
    pub start_slack: f64,
    /// After the descents, the budget left continues from the best result so far, past
    /// batches without an improvement, until the budget or the neighbourhood ends.
    pub continue_best: bool,
}

impl Default for RestartOptions {
    fn default() -> Self {
        RestartOptions {
            max_starts: 5,
            start_slack: f64::INFINITY,
            continue_best: true,
        }
    }
}

/// Passes trials on with the counts of earlier descents added.
struct Offset<'a> {
    inner: &'a mut dyn Observer<Trial>,
    before: usize,
}

impl Observer<Trial> for Offset<'_> {
    fn measured(&mut self, trials: &[Trial]) {
        self.inner.measured(trials)
    }
    fn progress(&mut self, trials: usize, best: f64) {
        self.inner.progress(self.before + trials, best)
    }
    fn interrupted(&self) -> bool {
        self.inner.interrupted()
    }
}

/// The starts to descend from, as indices into `starts`: those timed (`seconds`) within
/// `slack` of the fastest, fastest first, the first of each distinct structure before the
/// others (another basin of a structure already descended), at most `max`.
pub fn descent_order(
    starts: &[Vec<Step>],
    seconds: &[Option<f64>],
    slack: f64,
    max: usize,
) -> Vec<usize> {
    let mut timed: Vec<(usize, f64)> = seconds
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, (*s)?)))
        .collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(&(_, fastest)) = timed.first() else {
        return vec![];
    };
    let mut seen = Vec::new();
    let (firsts, rest): (Vec<_>, Vec<_>) = timed
        .into_iter()
        .filter(|&(_, s)| s <= slack * fastest)
        .map(|(i, _)| i)
        .partition(|&i| {
            let k = structure(&starts[i]);
            let new = !seen.contains(&k);
            if new {
                seen.push(k);
            }
            new
        });
    firsts.into_iter().chain(rest).take(max.max(1)).collect()
}

/// Droplet from the start points of `spaces` (see the module docs). The result's `start` is
/// the first space's start (the caller's reference) and `best` the fastest of it and every
/// descent's result, timed side by side, so it is never slower than the first start as
/// timed then. `best_point` is a point of the space of the descent that found it. Errors
/// when the first start does not verify.
pub fn refine_from(
    spaces: &[Space],
    measurer: &mut dyn Measurer,
    ranker: &mut dyn Ranker,
    opts: &DropletOptions,
    restarts: &RestartOptions,
    observer: &mut dyn Observer<Trial>,
) -> Result<Refined, String> {
    let t0 = Instant::now();
    let starts: Vec<Vec<Step>> = spaces
        .iter()
        .map(|sp| sp.steps_at(&sp.start))
        .collect::<Result<_, _>>()?;
    if starts.is_empty() {
        return Err("no start schedule".into());
    }
    let mut timed = measurer.measure(&starts, opts.max_timeout);
    if timed.first().is_none_or(Option::is_none) {
        return Err("interrupted before the start was timed".into());
    }
    for (s, e) in starts.iter().zip(&timed) {
        if let Some(e) = e {
            ranker.learn(s, e);
        }
    }
    let seconds: Vec<Option<f64>> = timed.iter().map(|e| e.as_ref()?.median()).collect();
    if seconds[0].is_none() {
        let why = timed[0]
            .as_ref()
            .and_then(|e| e.failure.as_ref())
            .map_or("not timed".to_string(), |f| f.message.clone());
        return Err(format!("the start schedule does not verify here: {why}"));
    }
    let order = descent_order(&starts, &seconds, restarts.start_slack, restarts.max_starts);
    let mut seen: HashSet<String> = HashSet::new();
    let mut runs: Vec<(usize, Refined)> = Vec::new();
    let mut used = 0;
    let left_after = |used: usize| opts.max_trials.saturating_sub(used);
    let time_left = |t0: Instant| opts.time_budget.map(|b| b.saturating_sub(t0.elapsed()));
    let room_for_more = |used: usize, runs: &[(usize, Refined)], observer: &dyn Observer<Trial>| {
        left_after(used) >= opts.batch.max(1)
            && !observer.interrupted()
            && time_left(t0).is_none_or(|t| !t.is_zero())
            && runs.last().is_none_or(|(_, r)| r.stop != Stop::Interrupted)
    };
    // Droplet's options with the budget left after `used` trials.
    let budget = |used: usize, patience: usize| DropletOptions {
        max_trials: left_after(used),
        time_budget: time_left(t0),
        patience,
        ..opts.clone()
    };
    for &i in &order {
        if !runs.is_empty() && !room_for_more(used, &runs, observer) {
            break;
        }
        let o = budget(used, opts.patience);
        let prior = Prior {
            start: timed[i].clone(),
            seen: &mut seen,
        };
        let r = descend(&spaces[i], measurer, ranker, &o, observer, used, prior)?;
        used += r.trials.len();
        runs.push((i, r));
    }
    // The budget left: on from the best result (by its own timing), past idle batches.
    if restarts.continue_best && room_for_more(used, &runs, observer) {
        let (i, best) = runs
            .iter()
            .min_by(|a, b| a.1.medians().1.total_cmp(&b.1.medians().1))
            .expect("one descent ran");
        let mut space = spaces[*i].clone();
        space.start = best.best_point.clone();
        let o = budget(used, usize::MAX);
        let prior = Prior {
            start: Some(best.best.clone()),
            seen: &mut seen,
        };
        let i = *i;
        let r = descend(&space, measurer, ranker, &o, observer, used, prior)?;
        runs.push((i, r));
    }
    let first = (
        &spaces[0],
        starts[0].as_slice(),
        timed[0].take().expect("timed"),
    );
    Ok(side_by_side(first, runs, measurer, opts, t0))
}

/// One descent after `used` trials of earlier ones (the observer sees the trials counted on).
fn descend(
    space: &Space,
    measurer: &mut dyn Measurer,
    ranker: &mut dyn Ranker,
    opts: &DropletOptions,
    observer: &mut dyn Observer<Trial>,
    used: usize,
    prior: Prior<'_>,
) -> Result<Refined, String> {
    let mut offset = Offset {
        inner: observer,
        before: used,
    };
    refine_with(space, measurer, ranker, opts, &mut offset, prior)
}

/// One result from the descents: the first start and each descent's result timed side by
/// side on [`PICK_BUILDS`] builds each, the fastest kept (medians: what every report shows,
/// and robust to a stray slow timing). A lone descent from the first start has made that
/// comparison already.
fn side_by_side(
    first: (&Space, &[Step], Evaluation),
    runs: Vec<(usize, Refined)>,
    measurer: &mut dyn Measurer,
    opts: &DropletOptions,
    t0: Instant,
) -> Refined {
    let (space, first_steps, first_timing) = first;
    let mut contenders: Vec<(Vec<Step>, Point)> = vec![(first_steps.to_vec(), space.start.clone())];
    for (_, r) in &runs {
        if !contenders.iter().any(|(s, _)| *s == r.best_steps) {
            contenders.push((r.best_steps.clone(), r.best_point.clone()));
        }
    }
    // (start timing, index of the result among the contenders, its timing)
    let (start, w, best) = if runs.len() == 1 && runs[0].0 == 0 {
        let r = &runs[0].1;
        let w = contenders.iter().position(|(s, _)| *s == r.best_steps);
        (r.start.clone(), w.unwrap_or(0), r.best.clone())
    } else if contenders.len() == 1 {
        (first_timing.clone(), 0, first_timing)
    } else {
        let schedules: Vec<Vec<Step>> = contenders.iter().map(|(s, _)| s.clone()).collect();
        let mut timed = time_pooled(measurer, &schedules, PICK_BUILDS, opts.max_timeout);
        let medians: Vec<Option<f64>> = timed.iter().map(|e| e.as_ref()?.median()).collect();
        let fastest = medians
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, (*m)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match (fastest, medians[0]) {
            (Some((w, _)), Some(_)) => {
                let start = timed[0].take().expect("timed start");
                let best = if w == 0 {
                    start.clone()
                } else {
                    timed[w].take().expect("timed result")
                };
                (start, w, best)
            }
            // Not comparable now (interrupted): the descent whose own timing was fastest.
            _ => {
                let r = runs
                    .iter()
                    .map(|(_, r)| r)
                    .min_by(|a, b| a.medians().1.total_cmp(&b.medians().1))
                    .expect("one descent ran");
                let w = contenders.iter().position(|(s, _)| *s == r.best_steps);
                (first_timing, w.unwrap_or(0), r.best.clone())
            }
        }
    };
    let (best_steps, best_point) = contenders.swap_remove(w);
    let mut out = Refined {
        start_steps: first_steps.to_vec(),
        start,
        improved: w != 0,
        best_steps,
        best_point,
        best,
        trials: vec![],
        batches: 0,
        knobs: space.knobs.len(),
        invalid_points: 0,
        stop: Stop::NoImprovement,
        seconds: t0.elapsed().as_secs_f64(),
        descents: runs.len(),
    };
    for (_, r) in runs {
        out.trials.extend(r.trials);
        out.batches += r.batches;
        out.invalid_points += r.invalid_points;
        out.stop = r.stop;
    }
    out
}
