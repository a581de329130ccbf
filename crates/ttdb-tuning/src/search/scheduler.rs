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

#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Measured trials over all tasks.
    pub trials: usize,
    /// Trials per round: TVM's `min(64, trials / tasks)`.
    pub per_round: usize,
    pub time_budget: Option<Duration>,
}

impl SchedulerOptions {
    pub fn new(trials: usize, tasks: usize, time_budget: Option<Duration>) -> SchedulerOptions {
        SchedulerOptions {
            trials,
            per_round: (trials / tasks.max(1)).clamp(1, 64),
            time_budget,
        }
    }
}

/// The scheduler's view of the tasks: run one round of task `i` with at most `want`
/// trials, returning the trials measured (0: nothing new) and its best seconds after.
pub trait Tasks {
    fn len(&self) -> usize;
    fn weight(&self, i: usize) -> f64;
    fn round(&mut self, i: usize, want: usize) -> (usize, Option<f64>);
    fn interrupted(&self) -> bool {
        false
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
pub fn schedule(tasks: &mut dyn Tasks, opts: &SchedulerOptions) -> Scheduled {
    let t0 = Instant::now();
    let n = tasks.len();
    let mut best = vec![f64::INFINITY; n];
    let mut history: Vec<Vec<f64>> = vec![vec![]; n];
    let mut rounds = vec![0usize; n];
    let mut dead = vec![false; n];
    let mut trials = 0usize;
    let out = |trials, rounds, stop| Scheduled {
        trials,
        rounds,
        stop,
    };
    let mut order: Vec<usize> = (0..n).rev().collect();
    loop {
        if trials >= opts.trials {
            return out(trials, rounds, ScheduleStop::Trials);
        }
        if opts.time_budget.is_some_and(|b| t0.elapsed() >= b) {
            return out(trials, rounds, ScheduleStop::Time);
        }
        if tasks.interrupted() {
            return out(trials, rounds, ScheduleStop::Interrupted);
        }
        // Warm-up: each task once, in order; then by gradient.
        let next = match order.pop() {
            Some(i) => Some(i),
            None => pick(&best, &history, &rounds, &dead, tasks),
        };
        let Some(i) = next else {
            return out(trials, rounds, ScheduleStop::AllDead);
        };
        if dead[i] {
            continue;
        }
        let want = opts.per_round.min(opts.trials - trials);
        let (measured, b) = tasks.round(i, want);
        rounds[i] += 1;
        trials += measured;
        if measured == 0 {
            dead[i] = true;
        }
        if let Some(b) = b {
            best[i] = best[i].min(b);
        }
        history[i].push(best[i]);
    }
}

/// The live task with the most negative gradient (ties: the first).
fn pick(
    best: &[f64],
    history: &[Vec<f64>],
    rounds: &[usize],
    dead: &[bool],
    tasks: &dyn Tasks,
) -> Option<usize> {
    let mut choice: Option<(usize, f64)> = None;
    for i in 0..best.len() {
        if dead[i] {
            continue;
        }
        // A task that never verified anything: the largest possible gain.
        let g = if !best[i].is_finite() {
            f64::NEG_INFINITY
        } else {
            let t = rounds[i].max(1);
            let h = &history[i];
            let backward = if h.len() > BACKWARD_WINDOW {
                (h[h.len() - 1] - h[h.len() - 1 - BACKWARD_WINDOW]) / BACKWARD_WINDOW as f64
            } else {
                0.0
            };
            let forward = -best[i] / t as f64;
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
}
