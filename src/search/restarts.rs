//! Droplet from several starts. Its knobs move tile sizes, unrolling and fuse groups, never
//! a compute location or a cache stage: a start of another structure (see
//! [`super::knobs::structure`]) is another basin, and so, often, is another good start of
//! the same structure. Given the start candidates timed here, fastest first, [`refine_from`]
//! descends from the fastest of each distinct structure, then from the next fastest starts,
//! in turn while the trial budget lasts (a descent that keeps improving may spend it all),
//! then times the first start and every descent's result side by side and keeps the fastest.
use super::droplet::{refine, DropletOptions, Measurer, Observer, Ranker, Refined, Stop, Trial};
use super::knobs::{structure, Space};
use crate::ansor::Step;
use std::time::Instant;

/// Passes trials on with the counts of earlier descents added.
struct Offset<'a> {
    inner: &'a mut dyn Observer,
    before: usize,
}

impl Observer for Offset<'_> {
    fn batch_done(&mut self, trials: &[Trial]) {
        self.inner.batch_done(trials)
    }
    fn progress(&mut self, trials: usize, best: f64) {
        self.inner.progress(self.before + trials, best)
    }
    fn interrupted(&self) -> bool {
        self.inner.interrupted()
    }
}

/// The order descents start from: the first (fastest) space of each distinct structure,
/// then the other spaces in their order (another basin of the same structure), at most
/// `max` in all.
pub fn start_order(spaces: Vec<Space>, starts: &[Vec<Step>], max: usize) -> Vec<Space> {
    let mut seen = Vec::new();
    let (firsts, rest): (Vec<_>, Vec<_>) = spaces.into_iter().zip(starts).partition(|(_, s)| {
        let k = structure(s);
        let new = !seen.contains(&k);
        if new {
            seen.push(k);
        }
        new
    });
    firsts
        .into_iter()
        .chain(rest)
        .map(|(sp, _)| sp)
        .take(max.max(1))
        .collect()
}

/// Droplet from each of `spaces` (their start points, fastest first), sharing
/// `opts.max_trials`; a later start needs at least one batch of budget. The result's
/// `start` is the first space's start and `best` the fastest of it and every descent's
/// result, timed side by side (so it is never slower than the first start). Errors when the
/// first start does not verify.
pub fn refine_from(
    spaces: &[Space],
    measurer: &mut dyn Measurer,
    ranker: &mut dyn Ranker,
    opts: &DropletOptions,
    observer: &mut dyn Observer,
) -> Result<Refined, String> {
    let t0 = Instant::now();
    let mut runs: Vec<Refined> = Vec::new();
    let mut used = 0;
    for (i, space) in spaces.iter().enumerate() {
        let left = opts.max_trials.saturating_sub(used);
        let elapsed = t0.elapsed();
        let out_of_time = opts.time_budget.is_some_and(|b| elapsed >= b);
        if i > 0 && (left < opts.batch.max(1) || observer.interrupted() || out_of_time) {
            break;
        }
        let o = DropletOptions {
            max_trials: left,
            time_budget: opts.time_budget.map(|b| b.saturating_sub(elapsed)),
            ..opts.clone()
        };
        let mut offset = Offset {
            inner: observer,
            before: used,
        };
        match refine(space, measurer, ranker, &o, &mut offset) {
            Ok(r) => {
                used += r.trials.len();
                runs.push(r);
            }
            // A later start that does not verify here is skipped; the first is required.
            Err(e) if i == 0 => return Err(e),
            Err(_) => {}
        }
        if runs.last().is_some_and(|r| r.stop == Stop::Interrupted) {
            break;
        }
    }
    let mut first = runs.remove(0);
    if runs.is_empty() {
        return Ok(first);
    }
    // Side by side: the first start, then each descent's result.
    let mut contenders: Vec<Vec<Step>> = vec![first.start_steps.clone()];
    for r in std::iter::once(&first).chain(&runs) {
        if !contenders.contains(&r.best_steps) {
            contenders.push(r.best_steps.clone());
        }
    }
    let mut timed = measurer.measure(&contenders, opts.max_timeout);
    // Medians: what every report shows, and robust to a stray slow timing.
    let medians: Vec<Option<f64>> = timed.iter().map(|e| e.as_ref()?.median()).collect();
    let winner = medians
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| (i, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    for r in runs {
        first.trials.extend(r.trials);
        first.batches += r.batches;
        first.invalid_points += r.invalid_points;
        first.stop = r.stop;
        first.descents += 1;
    }
    first.seconds = t0.elapsed().as_secs_f64();
    // Both sides from the one side-by-side timing, when the first start was timed in it.
    if let (Some((w, _)), Some(_)) = (winner, medians[0]) {
        first.start = timed[0].take().expect("timed start");
        first.best = if w == 0 {
            first.start.clone()
        } else {
            timed[w].take().expect("timed winner")
        };
        first.best_steps = contenders[w].clone();
        first.improved = w != 0;
    }
    Ok(first)
}
