//! Droplet search: refine one schedule on this machine by coordinate descent with a
//! significance test (Canesche et al., "The Droplet Search Algorithm for Kernel Scheduling",
//! TACO 2024; "Explore as a Storm, Exploit as a Raindrop", 2024; spec `search.md` §6).
//!
//! From the start point of a [`Space`], the neighbours at step size f are the points one knob
//! away by +-f (coordinates wrap) and, at f = 1, Ansor's tile-size moves (a prime factor
//! passed between two lengths of a split, or to or from its outer loop), then points two
//! knobs away; each batch takes the next unvisited ones, growing f while too few are left.
//! With a [`Ranker`] (the learned cost model, `super::model_ranker`), a batch is the ranker's
//! best of a pool of `ranked_pool` times as many unvisited neighbours, every fourth slot kept
//! in frontier order ([`choose`]); the ranker learns from every measurement. A batch is
//! built in parallel and run one candidate at a time (verify, then time), after a
//! fresh timing of the incumbent. The fastest candidate whose mean beats the incumbent's with
//! a Welch t-test p <= alpha becomes the incumbent, and its neighbours the frontier (f = 1);
//! the next batch first measures it combined with the batch's other significant
//! improvements on other knobs ([`combinations`]). The search stops after `patience` batches without such an improvement (1, as in
//! Droplet), at the trial or time budget, when no unvisited point is left, or when
//! interrupted. A last head-to-head timing (each on [`PICK_BUILDS`] builds) keeps the start
//! unless the result is faster: refining never returns a slower schedule.
//!
//! Beyond the artifacts (which move only the last 5 knobs and key visited points
//! non-injectively): every knob moves, points are the visited set's keys (distinct points
//! are distinct step lists, see [`Space`]), Welch's test replaces Student's, a cost
//! model may choose which neighbours to measure (as TVM's searches use theirs), and a batch's
//! improvements are combined (coordinate descent with a batch of 16 otherwise moves one
//! coordinate per batch, about 6 moves in 100 trials).
use super::knobs::{Point, Space};
use super::measurer::{time_pooled, Measurer, PICK_BUILDS};
use super::observer::{MeasuredTrial, Observer};
use super::rng::Rng;
use super::stats::{mean, welch};
use serde::Serialize;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};
use ttdb_backend::evaluate::Evaluation;
use ttdb_format::ansor::Step;

#[derive(Clone, Debug)]
pub struct DropletOptions {
    /// Candidates measured at most (the start and the incumbent's re-timings are not trials).
    pub max_trials: usize,
    /// Candidates per batch; Droplet's max(cores, 16).
    pub batch: usize,
    /// Significance level of the Welch test.
    pub alpha: f64,
    /// Batches in a row without a significant improvement before stopping (Droplet: 1).
    pub patience: usize,
    /// Wall-clock budget of the whole refinement.
    pub time_budget: Option<Duration>,
    /// Per-run timeout ceiling; a batch uses min(this, max(1 s, 50 x the incumbent)).
    pub max_timeout: Duration,
    /// Seed of the neighbour order.
    pub seed: u64,
    /// Ansor's tile-size moves ([`Space::factor_moves`]) join the +-1 moves around each
    /// incumbent.
    pub tile_moves: bool,
    /// With a [`Ranker`] that has an opinion, each batch is the best of this many times its
    /// size of unvisited neighbours (the rest stay in the frontier).
    pub ranked_pool: usize,
    /// When a batch holds several significant improvements on different knobs, the next
    /// batch first measures the winner combined with the others ([`combinations`]): one
    /// batch can then move several coordinates, not one.
    pub combine: bool,
    /// Around each incumbent whose vectorized loop is narrower than this host's vector, up
    /// to this many of [`Space::widening_moves`] are measured first (0: none).
    pub widen: usize,
}

impl Default for DropletOptions {
    fn default() -> Self {
        DropletOptions {
            max_trials: 100,
            batch: ttdb_format::host::available_cores().max(16),
            alpha: 0.05,
            patience: 1,
            time_budget: None,
            max_timeout: Duration::from_secs(10),
            seed: 0x5eed,
            tile_moves: true,
            ranked_pool: 4,
            combine: true,
            widen: 2,
        }
    }
}

/// Why the descent stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// `patience` batches in a row without a significant improvement.
    NoImprovement,
    /// The trial budget is spent.
    Trials,
    /// The time budget is spent.
    Time,
    /// Every reachable point was visited.
    Exhausted,
    /// Interrupted (SIGINT): what was measured is kept.
    Interrupted,
}

impl Stop {
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::NoImprovement => "no significant improvement",
            Stop::Trials => "trial budget",
            Stop::Time => "time budget",
            Stop::Exhausted => "neighbourhood exhausted",
            Stop::Interrupted => "interrupted",
        }
    }
}

/// One measured candidate.
#[derive(Clone, Debug)]
pub struct Trial {
    /// 0-based batch.
    pub batch: usize,
    /// What it changes from the start (`SP@3[1] 8->16`).
    pub change: String,
    pub steps: Vec<Step>,
    pub evaluation: Evaluation,
    /// Became the incumbent.
    pub accepted: bool,
}

/// The outcome of one refinement.
#[derive(Clone, Debug)]
pub struct Refined {
    /// The start's steps and its timing here.
    pub start_steps: Vec<Step>,
    pub start: Evaluation,
    pub best_steps: Vec<Step>,
    /// The best schedule's point in the space refined (the start's when nothing better was
    /// found), to continue a descent from.
    pub best_point: Point,
    /// The best schedule's timing (the start's when nothing better was found).
    pub best: Evaluation,
    /// Did a candidate replace the start?
    pub improved: bool,
    pub trials: Vec<Trial>,
    pub batches: usize,
    pub knobs: usize,
    /// Points whose steps did not replay (never measured).
    pub invalid_points: usize,
    pub stop: Stop,
    pub seconds: f64,
    /// Descents run (one per start, see `super::restarts`).
    pub descents: usize,
}

impl Refined {
    /// Median seconds of the start and of the result.
    pub fn medians(&self) -> (f64, f64) {
        let m = |e: &Evaluation| e.measurement.as_ref().map_or(f64::NAN, |m| m.median);
        (m(&self.start), m(&self.best))
    }
}

impl MeasuredTrial for Trial {
    fn steps(&self) -> &[Step] {
        &self.steps
    }
    fn evaluation(&self) -> &Evaluation {
        &self.evaluation
    }
    fn how(&self) -> String {
        self.change.clone()
    }
}

/// Predicts which neighbours are worth a trial (a cost model), and learns from every
/// measurement. Ranking is free next to a trial: lowering a candidate takes about a
/// millisecond, timing it a few hundred.
pub trait Ranker {
    /// Has it an opinion yet (a trained model)? Without one, batches are not pooled.
    fn ready(&self) -> bool;
    /// A score per schedule, higher for faster; `None` without an opinion.
    fn scores(&mut self, schedules: &[Vec<Step>]) -> Option<Vec<f64>>;
    /// A measured schedule (failed ones included).
    fn learn(&mut self, steps: &[Step], evaluation: &Evaluation);
}

/// No ranking: the frontier's own order (Droplet as published).
pub struct Unranked;
impl Ranker for Unranked {
    fn ready(&self) -> bool {
        false
    }
    fn scores(&mut self, _: &[Vec<Step>]) -> Option<Vec<f64>> {
        None
    }
    fn learn(&mut self, _: &[Step], _: &Evaluation) {}
}

/// Of `pool` (in frontier order), the `want` to measure: the ranker's best, except that
/// every fourth slot takes the next in frontier order, so a misleading model cannot keep
/// the descent from every move it underrates. Returns (chosen, the rest in frontier order).
pub(super) fn choose<T>(pool: Vec<T>, want: usize, scores: Option<Vec<f64>>) -> (Vec<T>, Vec<T>) {
    let Some(scores) = scores.filter(|s| s.len() == pool.len() && pool.len() > want) else {
        let mut pool = pool;
        let rest = pool.split_off(want.min(pool.len()));
        return (pool, rest);
    };
    let mut by_score: Vec<usize> = (0..pool.len()).collect();
    by_score.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut taken = vec![false; pool.len()];
    let (mut ranked, mut in_order) = (by_score.into_iter(), 0..pool.len());
    for slot in 0..want {
        let next = if slot % 4 == 3 {
            in_order.find(|&i| !taken[i])
        } else {
            ranked.find(|&i| !taken[i])
        };
        if let Some(i) = next {
            taken[i] = true;
        }
    }
    let (mut chosen, mut rest) = (Vec::new(), Vec::new());
    for (i, x) in pool.into_iter().enumerate() {
        if taken[i] {
            chosen.push(x);
        } else {
            rest.push(x);
        }
    }
    (chosen, rest)
}

/// Seconds per run of a verified, timed evaluation: its samples.
fn samples(e: &Evaluation) -> Option<&[f64]> {
    e.median()?;
    e.measurement.as_ref().map(|m| m.samples.as_slice())
}

/// The points one knob away from `center` by +-f and the `extra` points (shuffled
/// together), then as many two knobs away (random pairs and signs). Coordinates wrap.
pub fn neighbours(
    center: &[u16],
    f: usize,
    sizes: &[usize],
    extra: Vec<Point>,
    rng_state: &mut u64,
) -> Vec<Point> {
    let mut rng = Rng(*rng_state | 1);
    let step = |p: &mut Point, i: usize, up: bool| {
        let n = sizes[i];
        let d = f % n;
        p[i] = (if up {
            p[i] as usize + d
        } else {
            p[i] as usize + n - d
        } % n) as u16;
    };
    let movable: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 1).collect();
    let mut singles = Vec::new();
    for &i in &movable {
        for up in [true, false] {
            let mut p = center.to_vec();
            step(&mut p, i, up);
            singles.push(p);
        }
    }
    singles.extend(extra);
    rng.shuffle(&mut singles);
    let mut out = singles;
    if movable.len() >= 2 {
        for _ in 0..movable.len() {
            let a = movable[rng.below(movable.len())];
            let b = movable[rng.below(movable.len())];
            if a == b {
                continue;
            }
            let mut p = center.to_vec();
            step(&mut p, a, rng.next_u64() & 1 == 0);
            step(&mut p, b, rng.next_u64() & 1 == 0);
            out.push(p);
        }
    }
    *rng_state = rng.0;
    out
}

/// The unvisited points around the incumbent, in the order they will be tried.
struct Frontier {
    center: Point,
    pending: VecDeque<Point>,
    f: usize,
    max_f: usize,
    sizes: Vec<usize>,
    rng: u64,
    tile_moves: bool,
    widen: usize,
    /// Combinations of the last batch's improvements ([`combinations`]) and widening moves
    /// ([`Space::widening_moves`]), measured first.
    urgent: Vec<Point>,
}

impl Frontier {
    fn new(space: &Space, opts: &DropletOptions) -> Frontier {
        let sizes = space.sizes();
        let mut fr = Frontier {
            max_f: sizes.iter().copied().max().unwrap_or(1),
            center: space.start.clone(),
            pending: VecDeque::new(),
            f: 1,
            sizes,
            rng: opts.seed | 1,
            tile_moves: opts.tile_moves,
            widen: opts.widen,
            urgent: Vec::new(),
        };
        fr.recenter(space.start.clone(), space);
        fr
    }

    /// Around `center`: its +-1 moves (and Ansor's tile-size moves) first.
    fn recenter(&mut self, center: Point, space: &Space) {
        self.f = 1;
        let extra = if self.tile_moves {
            space.factor_moves(&center)
        } else {
            vec![]
        };
        self.pending = neighbours(&center, 1, &self.sizes, extra, &mut self.rng).into();
        self.urgent = if self.widen > 0 {
            space.widening_moves(&center, self.widen)
        } else {
            vec![]
        };
        self.center = center;
    }

    /// Up to `n` unvisited points whose steps replay; grows f while the frontier is thin.
    fn take(
        &mut self,
        n: usize,
        visited: &mut HashSet<Point>,
        seen: &HashSet<String>,
        space: &Space,
        invalid: &mut usize,
    ) -> Vec<(Point, Vec<Step>)> {
        let mut out = Vec::new();
        loop {
            while let Some(p) = self.pending.pop_front() {
                out.extend(admit(p, visited, seen, space, invalid));
                if out.len() == n {
                    return out;
                }
            }
            if self.f >= self.max_f {
                return out;
            }
            self.f += 1;
            let more = neighbours(&self.center, self.f, &self.sizes, vec![], &mut self.rng);
            self.pending.extend(more);
        }
    }

    /// Up to `n` of the points queued by the last recentering (measured before any ranked
    /// choice); the rest are dropped.
    fn take_urgent(
        &mut self,
        n: usize,
        visited: &mut HashSet<Point>,
        seen: &HashSet<String>,
        space: &Space,
        invalid: &mut usize,
    ) -> Vec<(Point, Vec<Step>)> {
        let mut out = Vec::new();
        for p in std::mem::take(&mut self.urgent) {
            if out.len() < n {
                out.extend(admit(p, visited, seen, space, invalid));
            }
        }
        out
    }
}

/// `p` with its steps when it is unvisited (it is then visited), replays, and its step list
/// was never measured; counts the points that do not replay.
fn admit(
    p: Point,
    visited: &mut HashSet<Point>,
    seen: &HashSet<String>,
    space: &Space,
    invalid: &mut usize,
) -> Option<(Point, Vec<Step>)> {
    if !visited.insert(p.clone()) {
        return None;
    }
    match space.steps_at(&p) {
        Ok(steps) if seen.contains(&steps_key(&steps)) => None,
        Ok(steps) => Some((p, steps)),
        Err(_) => {
            *invalid += 1;
            None
        }
    }
}

/// The winner of a batch combined with the batch's other significant improvements
/// (`improvers`, fastest first, without the winner): first all of them whose changed
/// coordinates (against `center`) fit together, applied greedily to `winner`, then each
/// alone; an improver that changes a coordinate the winner changed is left out. At most
/// `max` points.
pub fn combinations(center: &[u16], winner: &[u16], improvers: &[Point], max: usize) -> Vec<Point> {
    let changed =
        |p: &[u16]| -> Vec<usize> { (0..center.len()).filter(|&i| p[i] != center[i]).collect() };
    let apply = |to: &mut Point, from: &[u16], coords: &[usize]| {
        for &i in coords {
            to[i] = from[i];
        }
    };
    let by_winner = changed(winner);
    let mut out = Vec::new();
    let (mut all, mut taken, mut merged) = (winner.to_vec(), by_winner.clone(), 0);
    for p in improvers {
        let c = changed(p);
        if !c.is_empty() && !c.iter().any(|i| taken.contains(i)) {
            apply(&mut all, p, &c);
            taken.extend(c);
            merged += 1;
        }
    }
    if merged >= 2 {
        out.push(all);
    }
    for p in improvers {
        let c = changed(p);
        if c.is_empty() || c.iter().any(|i| by_winner.contains(i)) {
            continue;
        }
        let mut q = winner.to_vec();
        apply(&mut q, p, &c);
        if !out.contains(&q) {
            out.push(q);
        }
    }
    out.truncate(max);
    out
}

impl Frontier {
    /// Points taken but not measured go back to the front, in their order, unvisited.
    fn put_back(&mut self, points: Vec<(Point, Vec<Step>)>, visited: &mut HashSet<Point>) {
        for (p, _) in points.into_iter().rev() {
            visited.remove(&p);
            self.pending.push_front(p);
        }
    }
}

fn timeout_for(incumbent_s: f64, opts: &DropletOptions) -> Duration {
    Duration::from_secs_f64((incumbent_s * 50.0).max(1.0)).min(opts.max_timeout)
}

/// The identity of a step list across knob spaces (two spaces may hold one schedule at
/// different points): its record text.
pub fn steps_key(steps: &[Step]) -> String {
    let parts: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    parts.join(",")
}

/// What a descent knows before it starts ([`refine_with`]).
pub struct Prior<'a> {
    /// The start's timing, when taken already (else the descent times it).
    pub start: Option<Evaluation>,
    /// Step lists measured already (by earlier descents): never measured again. The
    /// descent adds its start and every candidate it measures.
    pub seen: &'a mut HashSet<String>,
}

/// Refines the start point of `space` (see the module docs). Errors when the start schedule
/// does not replay or does not verify here.
pub fn refine(
    space: &Space,
    measurer: &mut dyn Measurer,
    ranker: &mut dyn Ranker,
    opts: &DropletOptions,
    observer: &mut dyn Observer<Trial>,
) -> Result<Refined, String> {
    let mut seen = HashSet::new();
    let prior = Prior {
        start: None,
        seen: &mut seen,
    };
    refine_with(space, measurer, ranker, opts, observer, prior)
}

/// [`refine`], after earlier descents: with the start's timing when known, and never
/// measuring a step list of `prior.seen` again.
pub fn refine_with(
    space: &Space,
    measurer: &mut dyn Measurer,
    ranker: &mut dyn Ranker,
    opts: &DropletOptions,
    observer: &mut dyn Observer<Trial>,
    prior: Prior<'_>,
) -> Result<Refined, String> {
    let t0 = Instant::now();
    let start_steps = space.steps_at(&space.start)?;
    let seen = prior.seen;
    seen.insert(steps_key(&start_steps));
    let start = match prior.start {
        Some(e) => e,
        None => {
            let e = measurer
                .measure(std::slice::from_ref(&start_steps), opts.max_timeout)
                .pop()
                .flatten()
                .ok_or("interrupted before the start was timed")?;
            ranker.learn(&start_steps, &e);
            e
        }
    };
    let Some(start_samples) = samples(&start).map(<[f64]>::to_vec) else {
        let why = start
            .failure
            .as_ref()
            .map_or("not timed".to_string(), |f| f.message.clone());
        return Err(format!("the start schedule does not verify here: {why}"));
    };
    let mut inc = (
        space.start.clone(),
        start_steps.clone(),
        start.clone(),
        start_samples,
    );
    let mut visited: HashSet<Point> = HashSet::from([space.start.clone()]);
    let mut frontier = Frontier::new(space, opts);
    let (mut trials, mut invalid, mut batches, mut idle) = (Vec::new(), 0, 0, 0);
    let stop = loop {
        if observer.interrupted() {
            break Stop::Interrupted;
        }
        if trials.len() >= opts.max_trials {
            break Stop::Trials;
        }
        if opts.time_budget.is_some_and(|b| t0.elapsed() >= b) {
            break Stop::Time;
        }
        let want = opts.batch.max(1).min(opts.max_trials - trials.len());
        let mut batch = frontier.take_urgent(want, &mut visited, seen, space, &mut invalid);
        let want = want - batch.len();
        let pooled = if ranker.ready() {
            want * opts.ranked_pool.max(1)
        } else {
            want
        };
        let pool = frontier.take(pooled, &mut visited, seen, space, &mut invalid);
        let scores = if pool.len() > want {
            let steps: Vec<Vec<Step>> = pool.iter().map(|(_, s)| s.clone()).collect();
            ranker.scores(&steps)
        } else {
            None
        };
        let (chosen, rest) = choose(pool, want, scores);
        frontier.put_back(rest, &mut visited);
        batch.extend(chosen);
        if batch.is_empty() {
            break Stop::Exhausted;
        }
        seen.extend(batch.iter().map(|(_, s)| steps_key(s)));
        // The incumbent is timed again first: both sides of each test see the same machine.
        let mut schedules = vec![inc.1.clone()];
        schedules.extend(batch.iter().map(|(_, s)| s.clone()));
        let mut runs = measurer.measure(&schedules, timeout_for(mean(&inc.3), opts));
        // (An incumbent the batch beat HOPELESSly has one fresh sample: the test keeps its
        // earlier ones.)
        if let Some(fresh) = runs[0].as_ref().and_then(samples).filter(|s| s.len() >= 2) {
            inc.3 = fresh.to_vec();
        }
        let base = mean(&inc.3);
        let mut winner: Option<(usize, f64)> = None;
        let mut improvers: Vec<(usize, f64)> = Vec::new();
        let mut done = Vec::new();
        for (k, ((point, steps), run)) in batch.into_iter().zip(runs.drain(1..)).enumerate() {
            let Some(evaluation) = run else { continue };
            ranker.learn(&steps, &evaluation);
            if let Some(s) = samples(&evaluation) {
                let m = mean(s);
                let significant = welch(s, &inc.3).is_some_and(|w| w.p <= opts.alpha);
                if m < base && significant {
                    improvers.push((k, m));
                    if winner.is_none_or(|(_, w)| m < w) {
                        winner = Some((k, m));
                    }
                }
            }
            let change = space.describe(&point);
            done.push((
                k,
                point,
                Trial {
                    batch: batches,
                    change,
                    steps,
                    evaluation,
                    accepted: false,
                },
            ));
        }
        let cut_short = done.len() < schedules.len() - 1;
        if let Some((k, _)) = winner {
            let (_, point, trial) = done
                .iter_mut()
                .find(|(j, ..)| *j == k)
                .expect("winner measured");
            trial.accepted = true;
            let s = samples(&trial.evaluation).expect("winner timed").to_vec();
            let center = std::mem::replace(&mut inc.0, point.clone());
            inc.1 = trial.steps.clone();
            inc.2 = trial.evaluation.clone();
            inc.3 = s;
            frontier.recenter(inc.0.clone(), space);
            if opts.combine {
                improvers.sort_by(|a, b| a.1.total_cmp(&b.1));
                let others: Vec<Point> = improvers
                    .iter()
                    .filter(|&&(j, _)| j != k)
                    .filter_map(|&(j, _)| done.iter().find(|(i, ..)| *i == j))
                    .map(|(_, p, _)| p.clone())
                    .collect();
                let mut first = combinations(&center, &inc.0, &others, opts.batch / 2);
                first.append(&mut frontier.urgent);
                frontier.urgent = first;
            }
            idle = 0;
        } else {
            idle += 1;
        }
        let new: Vec<Trial> = done.into_iter().map(|(_, _, t)| t).collect();
        observer.measured(&new);
        trials.extend(new);
        batches += 1;
        observer.progress(trials.len(), mean(&inc.3));
        if cut_short {
            break Stop::Interrupted;
        }
        if idle >= opts.patience.max(1) {
            break Stop::NoImprovement;
        }
    };
    let improved = inc.0 != space.start;
    let (start, best_steps, best, improved) = if improved {
        final_check(measurer, &start_steps, start, inc.1, inc.2, opts)
    } else {
        (start.clone(), start_steps.clone(), start, false)
    };
    let best_point = if improved { inc.0 } else { space.start.clone() };
    Ok(Refined {
        start_steps,
        start,
        best_steps,
        best_point,
        best,
        improved,
        trials,
        batches,
        knobs: space.knobs.len(),
        invalid_points: invalid,
        stop,
        seconds: t0.elapsed().as_secs_f64(),
        descents: 1,
    })
}

/// The result against the start, timed back to back ([`time_pooled`]): the start stays
/// unless the result is faster now too (the incumbent chain compared each step with a fresh
/// timing, not with the start's). Returns (start timing, steps, timing, improved), from this side-by-side timing
/// when it ran.
fn final_check(
    measurer: &mut dyn Measurer,
    start_steps: &[Step],
    start: Evaluation,
    best_steps: Vec<Step>,
    best: Evaluation,
    opts: &DropletOptions,
) -> (Evaluation, Vec<Step>, Evaluation, bool) {
    let pair = [start_steps.to_vec(), best_steps.clone()];
    let mut runs = time_pooled(measurer, &pair, PICK_BUILDS, opts.max_timeout);
    // Medians, as every report shows them.
    let median = |r: &Option<Evaluation>| r.as_ref().and_then(|e| e.median());
    match (median(&runs[0]), median(&runs[1])) {
        (Some(a), Some(b)) => {
            let (s, r) = (
                runs[0].take().expect("timed"),
                runs[1].take().expect("timed"),
            );
            if b >= a {
                (s.clone(), start_steps.to_vec(), s, false)
            } else {
                (s, best_steps, r, true)
            }
        }
        _ => (start, best_steps, best, true),
    }
}
