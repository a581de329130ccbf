//! The task scheduler over a model's kernels (TVM `task_scheduler.py`; `shared/spec/search.md`
//! §5): gradient allocation of measurement rounds. The objective is the weighted sum of the
//! tasks' best latencies, the weights their occurrence counts in the model. After a warm-up
//! round of every task, each round goes to the task whose next round promises the largest
//! drop of the objective: `weight x (alpha x backward + (1 - alpha) x forward)`, where
//! backward is the task's recent improvement per round (window 3) and forward the
//! optimistic `best / rounds` still to gain. A task dies when a round finds nothing new.
use std::time::{Duration, Instant};

/// TVM's defaults.
pub const ALPHA: f64 = 0.2;
pub const BACKWARD_WINDOW: usize = 3;

/// Rounds a task should be able to get. TVM's rounds of `min(64, trials / tasks)` assume
/// ~1000 trials a task; with 2000 over resnet50's 27 kernels every kernel got one round of
/// 64 and the warm-up spent 86% of the budget: no kernel bred from a measured state, and
/// the gradient had nothing to allocate.
pub const MIN_ROUNDS_PER_TASK: usize = 4;

#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Measured trials over all tasks.
    pub trials: usize,
    /// Trials per round: TVM's `min(64, trials / tasks)`, but small enough that every task
    /// can have [`MIN_ROUNDS_PER_TASK`] rounds, down to 16 ([`SchedulerOptions::new`]).
    pub per_round: usize,
    pub time_budget: Option<Duration>,
}

impl SchedulerOptions {
    pub fn new(trials: usize, tasks: usize, time_budget: Option<Duration>) -> SchedulerOptions {
        SchedulerOptions {
            trials,
            per_round: (trials / (tasks.max(1) * MIN_ROUNDS_PER_TASK))
                .clamp(16, 64)
                .min(trials / tasks.max(1))
                .max(1),
            time_budget,
        }
    }

    /// Trials for the next round. With a time budget alone (`trials` unbounded), the round
    /// size [`SchedulerOptions::new`] would give the trials the rest of the budget measures at
    /// the rate so far, at least `per_round`: rounds of 16 all along measured 6.2 trials/s on
    /// resnet34 (seeded apply, 373 trials in 60 s), rounds of 64 7.5 (a cold search, 512 in
    /// 68 s): a round's proposal costs about the same at any size.
    fn round_size(&self, measured: usize, elapsed: Duration, tasks: usize) -> usize {
        match self.time_budget {
            Some(budget) if self.trials == usize::MAX && measured > 0 => {
                let rate = measured as f64 / elapsed.as_secs_f64().max(1e-3);
                let left = budget.saturating_sub(elapsed).as_secs_f64();
                let size = (rate * left) as usize / (tasks.max(1) * MIN_ROUNDS_PER_TASK);
                size.clamp(self.per_round, self.per_round.max(64))
            }
            _ => self.per_round,
        }
    }
}

/// The scheduler's view of the tasks: run one round of task `i` with at most `want`
/// trials, returning the trials measured (0: nothing new) and its best seconds after.
pub trait Tasks {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn weight(&self, i: usize) -> f64;
    fn round(&mut self, i: usize, want: usize) -> (usize, Option<f64>);
    fn interrupted(&self) -> bool {
        false
    }
    /// How many rounds may be in flight at once. Above 1 (candidates measured elsewhere),
    /// the scheduler starts a round with [`Tasks::start`] and ends it with
    /// [`Tasks::finish`], so that the next task is searched while a round is measured.
    fn depth(&self) -> usize {
        1
    }
    /// Searches task `i`'s next round (at most `want` trials) and hands it over to be
    /// measured; false when there is nothing new (a round that measured 0).
    fn start(&mut self, i: usize, want: usize) -> bool {
        let _ = (i, want);
        unreachable!("start is only called when depth() > 1")
    }
    /// Waits for the round `start` began on task `i`: as `round` returns.
    fn finish(&mut self, i: usize) -> (usize, Option<f64>) {
        let _ = i;
        unreachable!("finish is only called when depth() > 1")
    }
}

/// Why the scheduler stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleStop {
    Trials,
    Time,
    AllDead,
    Interrupted,
}

#[derive(Clone, Debug)]
pub struct Scheduled {
    pub trials: usize,
    /// Rounds given to each task.
    pub rounds: Vec<usize>,
    pub stop: ScheduleStop,
}

/// Runs rounds until the trial or time budget is spent, every task is dead, or an interrupt.
/// With [`Tasks::depth`] above 1, up to that many rounds of different tasks are in flight:
/// their trials count against the budget when they start, and a round in flight is not
/// picked again until it finishes.
pub fn schedule(tasks: &mut dyn Tasks, opts: &SchedulerOptions) -> Scheduled {
    let t0 = Instant::now();
    let n = tasks.len();
    let depth = tasks.depth().max(1);
    let mut s = State {
        best: vec![f64::INFINITY; n],
        history: vec![vec![]; n],
        rounds: vec![0; n],
        dead: vec![false; n],
        busy: vec![false; n],
        trials: 0,
    };
    // (task, trials it may measure) of the rounds in flight, oldest first.
    let mut in_flight: std::collections::VecDeque<(usize, usize)> = Default::default();
    let mut order: Vec<usize> = (0..n).rev().collect();
    let mut stop = None;
    loop {
        // Start rounds while there is room, budget and a task to give one to.
        while stop.is_none() && in_flight.len() < depth {
            let committed = s.trials + in_flight.iter().map(|r| r.1).sum::<usize>();
            if committed >= opts.trials {
                stop = Some(ScheduleStop::Trials);
            } else if opts.time_budget.is_some_and(|b| t0.elapsed() >= b) {
                stop = Some(ScheduleStop::Time);
            } else if tasks.interrupted() {
                stop = Some(ScheduleStop::Interrupted);
            }
            if stop.is_some() {
                break;
            }
            // Warm-up: each task once, in order; then by gradient.
            let next = match order.pop() {
                Some(i) => Some(i),
                None => pick(&s, tasks),
            };
            let Some(i) = next else {
                if in_flight.is_empty() {
                    stop = Some(ScheduleStop::AllDead);
                }
                break;
            };
            if s.dead[i] || s.busy[i] {
                continue;
            }
            let want = opts
                .round_size(s.trials, t0.elapsed(), n)
                .min(opts.trials - committed);
            if depth == 1 {
                let (measured, b) = tasks.round(i, want);
                s.record(i, measured, b);
            } else if tasks.start(i, want) {
                s.busy[i] = true;
                in_flight.push_back((i, want));
            } else {
                s.record(i, 0, None);
            }
        }
        let Some((i, _)) = in_flight.pop_front() else {
            let stop = stop.expect("the loop stops only with a reason or a round in flight");
            return Scheduled {
                trials: s.trials,
                rounds: s.rounds,
                stop,
            };
        };
        let (measured, b) = tasks.finish(i);
        s.busy[i] = false;
        s.record(i, measured, b);
    }
}

/// What the scheduler knows of each task.
struct State {
    best: Vec<f64>,
    history: Vec<Vec<f64>>,
    rounds: Vec<usize>,
    dead: Vec<bool>,
    /// A round of the task is in flight.
    busy: Vec<bool>,
    trials: usize,
}

impl State {
    /// A round of task `i` measured `measured` trials (0: it found nothing new, and dies),
    /// its best then `b`.
    fn record(&mut self, i: usize, measured: usize, b: Option<f64>) {
        self.rounds[i] += 1;
        self.trials += measured;
        if measured == 0 {
            self.dead[i] = true;
        }
        if let Some(b) = b {
            self.best[i] = self.best[i].min(b);
        }
        self.history[i].push(self.best[i]);
    }
}

/// The live task not in flight with the most negative gradient (ties: the first).
fn pick(s: &State, tasks: &dyn Tasks) -> Option<usize> {
    let mut choice: Option<(usize, f64)> = None;
    for i in 0..s.best.len() {
        if s.dead[i] || s.busy[i] {
            continue;
        }
        // A task that never verified anything: the largest possible gain.
        let g = if !s.best[i].is_finite() {
            f64::NEG_INFINITY
        } else {
            let t = s.rounds[i].max(1);
            let h = &s.history[i];
            let backward = if h.len() > BACKWARD_WINDOW {
                (h[h.len() - 1] - h[h.len() - 1 - BACKWARD_WINDOW]) / BACKWARD_WINDOW as f64
            } else {
                0.0
            };
            let forward = -s.best[i] / t as f64;
            tasks.weight(i) * (ALPHA * backward + (1.0 - ALPHA) * forward)
        };
        if choice.is_none_or(|(_, c)| g < c) {
            choice = Some((i, g));
        }
    }
    choice.map(|c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time budget alone: rounds as large as the rest of the budget affords at the rate so
    /// far (TVM's size for that many trials, at most 64), never below `per_round`.
    #[test]
    fn rounds_grow_with_the_time_left_when_only_time_bounds_the_search() {
        let timed = SchedulerOptions {
            trials: usize::MAX,
            per_round: 16,
            time_budget: Some(Duration::from_secs(600)),
        };
        let s = Duration::from_secs;
        // Nothing measured yet: no rate to go by.
        assert_eq!(timed.round_size(0, s(5), 18), 16);
        // 7 trials/s, 500 s left: 3500 trials over 18 tasks x 4 rounds.
        assert_eq!(timed.round_size(700, s(100), 18), 48);
        assert_eq!(timed.round_size(7000, s(100), 18), 64);
        // Near the end of the budget.
        assert_eq!(timed.round_size(4000, s(590), 18), 16);
        // A trial count keeps its size.
        let counted = SchedulerOptions::new(2000, 18, Some(Duration::from_secs(600)));
        assert_eq!(counted.round_size(700, s(100), 18), counted.per_round);
    }

    /// Synthetic tasks: latency falls as 1/rounds from `start`, each round measures
    /// `per_round` until `dies_after` rounds.
    struct Fake {
        start: Vec<f64>,
        weight: Vec<f64>,
        rounds: Vec<usize>,
        dies_after: usize,
    }
    impl Tasks for Fake {
        fn len(&self) -> usize {
            self.start.len()
        }
        fn weight(&self, i: usize) -> f64 {
            self.weight[i]
        }
        fn round(&mut self, i: usize, want: usize) -> (usize, Option<f64>) {
            self.rounds[i] += 1;
            if self.rounds[i] > self.dies_after {
                return (0, None);
            }
            (want, Some(self.start[i] / self.rounds[i] as f64))
        }
    }

    #[test]
    fn rounds_go_where_the_weighted_latency_is() {
        let mut f = Fake {
            start: vec![10.0, 1.0, 1.0],
            weight: vec![1.0, 1.0, 5.0],
            rounds: vec![0; 3],
            dies_after: 1000,
        };
        let s = schedule(&mut f, &SchedulerOptions::new(300, 3, None));
        assert_eq!(s.stop, ScheduleStop::Trials);
        assert!(s.trials >= 300);
        // Everyone warmed up; the slow task and the frequent one get more than the small one.
        assert!(s.rounds.iter().all(|&r| r >= 1), "{:?}", s.rounds);
        assert!(
            s.rounds[0] > s.rounds[1] && s.rounds[2] > s.rounds[1],
            "{:?}",
            s.rounds
        );
    }

    /// TVM's `min(64, trials / tasks)`, unless that leaves a task fewer than 4 rounds:
    /// then rounds of a quarter of a task's share, at least 16.
    #[test]
    fn rounds_leave_every_task_several() {
        let per_round = |trials, tasks| SchedulerOptions::new(trials, tasks, None).per_round;
        assert_eq!(per_round(2000, 27), 18, "resnet50's kernels");
        assert_eq!(per_round(2000, 60), 16);
        assert_eq!(per_round(300, 40), 7, "fewer trials than 16 a task");
        assert_eq!(per_round(1000, 1), 64);
        assert_eq!(per_round(256, 2), 32);
        assert_eq!(per_round(5, 0), 5);
    }

    #[test]
    fn dead_tasks_end_the_schedule() {
        let mut f = Fake {
            start: vec![1.0, 2.0],
            weight: vec![1.0, 1.0],
            rounds: vec![0; 2],
            dies_after: 3,
        };
        let s = schedule(&mut f, &SchedulerOptions::new(10_000, 2, None));
        assert_eq!(s.stop, ScheduleStop::AllDead);
        assert_eq!(s.rounds, vec![4, 4]);
    }

    /// Tasks measured elsewhere: `start` begins a round, `finish` ends it; checks that a
    /// task never has two rounds in flight and that at most `depth` are.
    struct Pipelined {
        inner: Fake,
        depth: usize,
        in_flight: Vec<(usize, usize)>,
        most_in_flight: usize,
    }
    impl Tasks for Pipelined {
        fn len(&self) -> usize {
            self.inner.len()
        }
        fn weight(&self, i: usize) -> f64 {
            self.inner.weight(i)
        }
        fn round(&mut self, _: usize, _: usize) -> (usize, Option<f64>) {
            unreachable!("a pipelined schedule starts and finishes rounds")
        }
        fn depth(&self) -> usize {
            self.depth
        }
        fn start(&mut self, i: usize, want: usize) -> bool {
            assert!(
                self.in_flight.iter().all(|r| r.0 != i),
                "task {i} started twice"
            );
            self.in_flight.push((i, want));
            self.most_in_flight = self.most_in_flight.max(self.in_flight.len());
            assert!(self.in_flight.len() <= self.depth);
            true
        }
        fn finish(&mut self, i: usize) -> (usize, Option<f64>) {
            let at = self.in_flight.iter().position(|r| r.0 == i).unwrap();
            let (_, want) = self.in_flight.remove(at);
            self.inner.round(i, want)
        }
    }

    #[test]
    fn rounds_in_flight_overlap_within_the_budget() {
        let mut p = Pipelined {
            inner: Fake {
                start: vec![10.0, 1.0, 1.0],
                weight: vec![1.0, 1.0, 5.0],
                rounds: vec![0; 3],
                dies_after: 1000,
            },
            depth: 2,
            in_flight: vec![],
            most_in_flight: 0,
        };
        let s = schedule(&mut p, &SchedulerOptions::new(300, 3, None));
        assert_eq!(s.stop, ScheduleStop::Trials);
        // Started rounds count against the budget: it is met, never passed.
        assert_eq!(s.trials, 300);
        assert_eq!(p.most_in_flight, 2);
        assert!(p.in_flight.is_empty(), "every round started was finished");
        assert!(
            s.rounds[0] > s.rounds[1] && s.rounds[2] > s.rounds[1],
            "{:?}",
            s.rounds
        );
    }

    #[test]
    fn pipelined_dead_tasks_end_the_schedule() {
        let mut p = Pipelined {
            inner: Fake {
                start: vec![1.0, 2.0, 3.0],
                weight: vec![1.0, 1.0, 1.0],
                rounds: vec![0; 3],
                dies_after: 3,
            },
            depth: 2,
            in_flight: vec![],
            most_in_flight: 0,
        };
        let s = schedule(&mut p, &SchedulerOptions::new(10_000, 3, None));
        assert_eq!(s.stop, ScheduleStop::AllDead);
        assert_eq!(s.rounds, vec![4, 4, 4]);
    }
}
