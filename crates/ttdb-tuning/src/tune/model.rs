//! `ttdb tune MODEL.onnx`: search every tunable kernel of a model on this machine, one
//! measurement round at a time, with Ansor's task scheduler deciding which kernel gets the
//! next round (`crate::search::scheduler`; weights = how often the kernel occurs). The
//! schedules `apply` would transfer (exact and class matches of the database) seed each
//! kernel's first round. Every trial is stored as it is measured (provenance "search"), and
//! the curve of the best kernel times and the model's kernel sum is kept for `--curve`.
use super::apply::workload_key_of;
use super::progress::{Progress, Work};
use super::record::{CostModelUse, Sink};
use super::refine::{host_line, RefineOptions};
use super::search::{droplet_after_search, AFTER_SEARCH};
use super::trials::{Provenance, TrialSink};
use crate::matcher::ModelMatch;
use crate::search::cost_model::{CostModel, CostModelSummary};
use crate::search::interrupt;
use crate::search::measurer::Measurer;
use crate::search::policy::{Proposal, SearchOptions, TaskSearch};
use crate::search::scheduler::{schedule, ScheduleStop, SchedulerOptions, Tasks};
use rayon::prelude::*;
use serde::Serialize;
use std::time::{Duration, Instant};
use ttdb_algo::ir::{dag_hash, Dag};
use ttdb_algo::schedule::{replay, stage_inits_from_dag};
use ttdb_backend::evaluate::Reference;
use ttdb_format::ansor::Step;
use ttdb_store::store::StoreError;

#[derive(Clone, Debug)]
pub struct ModelTuneOptions {
    /// Measured trials over the whole model; None: as many as `time_budget` allows (which
    /// must then be given).
    pub trials: Option<usize>,
    pub time_budget: Option<Duration>,
    /// Per-task search options (`trials` and `batch` are the scheduler's business).
    pub search: SearchOptions,
    /// Timing options of candidates; Droplet's options when `droplet_trials > 0`.
    pub refine: RefineOptions,
    /// Droplet trials per kernel after the search.
    pub droplet_trials: usize,
    /// Transferred candidates per kernel that seed the search.
    pub seeds: usize,
    /// Each kernel's new best is offered to the model's other kernels of its class, adapted
    /// to their shapes (`TaskSearch::offer`): transfer-tuning inside the tune.
    pub share_bests: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelTunedKernel {
    pub name: String,
    pub class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    pub multiplicity: usize,
    pub sketches: usize,
    pub seeds: usize,
    pub rounds: usize,
    pub trials: usize,
    pub failed_trials: usize,
    pub best_ms: Option<f64>,
    pub gflops: Option<f64>,
    pub droplet_trials: usize,
    /// Where the best schedule came from: a seed's source ("exact FILE:LINE ..", "class
    /// ..", "default": the untuned schedule), "search", or "droplet" (the refinement after
    /// the search replaced the search's best).
    pub best_from: Option<String>,
    pub note: Option<String>,
}

/// One point of the tuning curve: after trial `trial` (over the model), at `wall_s`.
#[derive(Clone, Debug, Serialize)]
pub struct CurvePoint {
    pub trial: usize,
    pub wall_s: f64,
    /// The kernel that just ran a round, and its best.
    pub kernel: usize,
    pub kernel_best_ms: f64,
    /// Sum over searched kernels of best x multiplicity (NaN until each has a time).
    pub model_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelTuneReport {
    pub model: String,
    pub host: String,
    pub kernels: Vec<ModelTunedKernel>,
    /// Sum of best x multiplicity over the kernels that have a verified schedule.
    pub kernel_sum_ms: f64,
    /// Tunable kernels without any verified schedule (not in the sum).
    pub kernels_without_schedule: usize,
    pub trials: usize,
    pub seconds: f64,
    pub stop: ScheduleStop,
    pub curve: Vec<CurvePoint>,
    pub interrupted: bool,
    pub cost_model: CostModelSummary,
}

struct ModelTasks<'a, 's> {
    searches: Vec<TaskSearch<'a>>,
    dags: &'a [Dag],
    references: &'a [Reference],
    weights: Vec<f64>,
    eval: ttdb_backend::evaluate::EvalOptions,
    /// Where candidates are measured (here, or the queue's workers).
    refine: &'a RefineOptions,
    /// Where every task's trials go (the tasks take turns).
    store: TrialSink<'s>,
    /// Hears of each round, with the model's kernel sum.
    progress: &'s mut dyn Progress,
    cost: CostModel,
    t0: Instant,
    trials: usize,
    curve: Vec<CurvePoint>,
    /// Rounds started and not finished, by task.
    in_flight: std::collections::HashMap<usize, InFlight<'a>>,
    /// Each task's class, and its best already offered to the others of that class (None:
    /// no sharing).
    classes: Vec<String>,
    shared: Option<Vec<Option<f64>>>,
}

impl ModelTasks<'_, '_> {
    fn model_ms(&self) -> f64 {
        self.searches
            .iter()
            .zip(&self.weights)
            .map(|(s, w)| s.best_seconds().map_or(f64::NAN, |b| b * 1e3 * w))
            .sum()
    }
}

impl<'a> ModelTasks<'a, '_> {
    /// Task `i`'s measurer: here, or the queue's workers.
    fn measurer(&self, i: usize) -> Box<dyn Measurer + 'a> {
        let refine: &'a RefineOptions = self.refine;
        let dags: &'a [Dag] = self.dags;
        let references: &'a [Reference] = self.references;
        refine.measurer(
            &dags[i],
            &references[i],
            self.eval.clone(),
            &interrupt::requested,
        )
    }

    /// Task `i`'s round measured `n` trials: the curve and the progress hear of it.
    fn after_round(&mut self, i: usize, n: usize) -> (usize, Option<f64>) {
        self.trials += n;
        let best = self.searches[i].best_seconds();
        self.share_best(i, best);
        let model_ms = self.model_ms();
        self.curve.push(CurvePoint {
            trial: self.trials,
            wall_s: self.t0.elapsed().as_secs_f64(),
            kernel: i,
            kernel_best_ms: best.map_or(f64::NAN, |b| b * 1e3),
            model_ms,
        });
        self.progress.trials(self.trials, model_ms / 1e3);
        (n, best)
    }
}

impl ModelTasks<'_, '_> {
    /// Offers task `i`'s best to the tasks of its class when it improved since last offered.
    fn share_best(&mut self, i: usize, best: Option<f64>) {
        let Some(shared) = self.shared.as_mut() else {
            return;
        };
        if !best.is_some_and(|b| shared[i].is_none_or(|s| b < s)) {
            return;
        }
        shared[i] = best;
        let Some(steps) = self.searches[i].out.best_trial().map(|t| t.steps.clone()) else {
            return;
        };
        for j in 0..self.searches.len() {
            if j != i && self.classes[j] == self.classes[i] {
                self.searches[j].offer(&steps);
            }
        }
    }
}

impl Tasks for ModelTasks<'_, '_> {
    fn len(&self) -> usize {
        self.searches.len()
    }
    fn weight(&self, i: usize) -> f64 {
        self.weights[i]
    }
    fn round(&mut self, i: usize, want: usize) -> (usize, Option<f64>) {
        let mut measurer = self.measurer(i);
        self.store
            .switch_workload(workload_key_of(&self.dags[i]), self.dags[i].flop_ct());
        let n = self.searches[i].round(want, measurer.as_mut(), &mut self.store, &mut self.cost);
        self.after_round(i, n)
    }
    fn interrupted(&self) -> bool {
        self.store.should_stop()
    }
    /// Measured on the queue's workers, the next task is searched while a round is
    /// measured (three rounds in flight), so that the workers do not wait on the search.
    fn depth(&self) -> usize {
        if self.refine.remote.is_some() {
            PIPELINE_DEPTH
        } else {
            1
        }
    }
    fn start(&mut self, i: usize, want: usize) -> bool {
        let Some(proposal) = self.searches[i].propose(want, &mut self.cost) else {
            return false;
        };
        let mut measurer = self.measurer(i);
        let evaluations = if measurer.send(&proposal.schedules, proposal.timeout) {
            None
        } else {
            Some(measurer.measure(&proposal.schedules, proposal.timeout))
        };
        self.in_flight.insert(
            i,
            InFlight {
                measurer,
                proposal,
                evaluations,
            },
        );
        true
    }
    fn finish(&mut self, i: usize) -> (usize, Option<f64>) {
        let mut round = self
            .in_flight
            .remove(&i)
            .expect("finish is called on a round that was started");
        let evaluations = match round.evaluations.take() {
            Some(e) => e,
            None => round.measurer.receive(),
        };
        self.store
            .switch_workload(workload_key_of(&self.dags[i]), self.dags[i].flop_ct());
        let n =
            self.searches[i].absorb(round.proposal, evaluations, &mut self.store, &mut self.cost);
        self.after_round(i, n)
    }
}

/// Rounds in flight at once when the queue's workers measure. With two, a worker that
/// finished its share of a round often found the other round's jobs all claimed and waited
/// (resnet18, 2 workers: 1.42x one worker's trials/s; with three, 1.6-1.9x).
const PIPELINE_DEPTH: usize = 3;

/// A round handed over to be measured ([`Tasks::start`]).
struct InFlight<'a> {
    measurer: Box<dyn Measurer + 'a>,
    proposal: Proposal,
    /// Already measured (a measurer that measures here).
    evaluations: Option<Vec<Option<ttdb_backend::evaluate::Evaluation>>>,
}

/// Seeds for `dag` from the matched candidates: those whose steps replay on it, each with
/// where it came from ("exact FILE:LINE (workload ..)", "class ...").
fn seeds_for(
    dag: &Dag,
    candidates: &[crate::matcher::Candidate],
    n: usize,
) -> (Vec<Vec<Step>>, Vec<String>) {
    let inits = stage_inits_from_dag(dag);
    let hash = dag_hash(dag);
    let (mut out, mut labels): (Vec<Vec<Step>>, Vec<String>) = Default::default();
    for c in candidates.iter().take(n) {
        let fits = dag_hash(&c.dag) == hash || replay(&inits, &c.steps).is_ok();
        if fits && !out.contains(&c.steps) {
            out.push(c.steps.clone());
            labels.push(format!("{} {}", c.tier.as_str(), c.source.label()));
        }
    }
    (out, labels)
}

/// Where a task's best came from: the seed's label, or "search".
fn best_from(search: &TaskSearch, seeds: &[Vec<Step>], labels: &[String]) -> Option<String> {
    let best = search.out.best_trial()?;
    if best.origin != "seed" {
        return Some("search".into());
    }
    let i = seeds.iter().position(|s| *s == best.steps)?;
    Some(labels.get(i).cloned().unwrap_or_else(|| "default".into()))
}

/// Adds the schedule `ttdb run` gives `dag` when nothing is stored (the first default that
/// lowers) to the seeds: a search that starts from it never stores a best worse than what
/// the kernel would run untuned. Measured before (mobilenet_v2, 2000 trials, the
/// `tophub` plan): the tuned model ran 7.56 ms, the untuned one 7.21.
pub(crate) fn with_default_seed(dag: &Dag, lanes: i64, seeds: &mut Vec<Vec<Step>>) {
    if let Some(steps) = crate::search::default_schedule::lowering_default(dag, lanes) {
        if !seeds.contains(&steps) {
            seeds.push(steps);
        }
    }
}

/// Tunes every tunable kernel of `m` (see the module docs).
pub fn tune_model(
    m: &ModelMatch,
    opts: &ModelTuneOptions,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<ModelTuneReport, StoreError> {
    let t0 = Instant::now();
    let hw = crate::search::sketch::HardwareParams::of(&opts.refine.target);
    let mut rows = Vec::new();
    let mut dags = Vec::new();
    let mut references = Vec::new();
    let mut seeds = Vec::new();
    let mut seed_labels = Vec::new();
    let mut weights = Vec::new();
    let mut classes = Vec::new();
    // (row index) of each task.
    let mut task_rows = Vec::new();
    // Each kernel's DAG, reference (its interpreter run is most of a tune's start: ~0.7 s
    // per resnet18 conv), sketches and seeds, the kernels in parallel.
    type Prepared = (Dag, Reference, usize, (Vec<Vec<Step>>, Vec<String>));
    let prepared: Vec<Result<Prepared, String>> = m
        .matches
        .par_iter()
        .map(|km| {
            let k = &m.list.kernels[km.kernel];
            let spec = k
                .spec
                .as_ref()
                .ok_or_else(|| "no workload spec".to_string())?;
            let dag = spec
                .build(ttdb_algo::ops::Era::V010, &k.inputs)
                .map_err(|e| e.to_string())?;
            let reference = Reference::new(&dag, 11)?;
            let sketches = crate::search::sketch::generate_sketches(&dag, &hw)
                .map_err(|e| format!("no search: {e}"))?
                .len();
            let (mut seeds, labels) = seeds_for(&dag, &km.candidates, opts.seeds);
            if opts.seeds > 0 {
                with_default_seed(&dag, opts.refine.target.lanes() as i64, &mut seeds);
            }
            Ok((dag, reference, sketches, (seeds, labels)))
        })
        .collect();
    for (km, built) in m.matches.iter().zip(prepared) {
        let k = &m.list.kernels[km.kernel];
        let mut row = ModelTunedKernel {
            name: k.name.clone(),
            class: k.class.clone(),
            inputs: k.inputs.clone(),
            output: k.output.clone(),
            multiplicity: k.multiplicity(),
            sketches: 0,
            seeds: 0,
            rounds: 0,
            trials: 0,
            failed_trials: 0,
            best_ms: None,
            gflops: None,
            droplet_trials: 0,
            best_from: None,
            note: None,
        };
        match built {
            Ok((dag, reference, n_sketches, (s, labels))) => {
                row.sketches = n_sketches;
                row.seeds = s.len();
                seeds.push(s);
                seed_labels.push(labels);
                classes.push(k.class.clone());
                dags.push(dag);
                references.push(reference);
                weights.push(k.multiplicity() as f64);
                task_rows.push(rows.len());
            }
            Err(e) => row.note = Some(e),
        }
        rows.push(row);
    }
    let searches = dags
        .iter()
        .enumerate()
        .map(|(t, dag)| {
            let o = SearchOptions {
                seed: opts.search.seed.wrapping_add(t as u64),
                ..opts.search.clone()
            };
            TaskSearch::new(dag, hw, &seeds[t], &o).expect("sketches generated above")
        })
        .collect();
    let model_use = CostModelUse::of_search(&opts.search);
    let cost = model_use.start(sink);
    let (scheduler, work) = match (opts.trials, opts.time_budget) {
        (Some(n), _) => (
            SchedulerOptions::new(n, dags.len(), opts.time_budget),
            Work::SharedTrials(n),
        ),
        // Time only: rounds of 16 trials, so that every kernel has its first round early in
        // the budget (a trial count spreads its rounds by itself).
        (None, Some(t)) => (
            SchedulerOptions {
                trials: usize::MAX,
                per_round: 16,
                time_budget: Some(t),
            },
            Work::SharedTime(t),
        ),
        (None, None) => {
            return Err(StoreError::Other(
                "tune_model: neither a trial count nor a time budget bounds the search".into(),
            ))
        }
    };
    progress.start(work);
    let mut tasks = ModelTasks {
        searches,
        dags: &dags,
        references: &references,
        weights,
        cost,
        eval: opts.refine.eval(),
        refine: &opts.refine,
        store: TrialSink::new(&mut *sink, "", 0.0, Provenance::Search),
        progress,
        t0,
        trials: 0,
        curve: vec![],
        in_flight: Default::default(),
        shared: opts.share_bests.then(|| vec![None; classes.len()]),
        classes,
    };
    let sched = schedule(&mut tasks, &scheduler);
    let ModelTasks {
        searches,
        mut store,
        mut cost,
        trials,
        curve,
        ..
    } = tasks;
    let stored = store.finish();
    // Once per run: the model learned from what was measured, even when storing a trial
    // failed.
    model_use.finish(sink, &mut cost)?;
    stored?;
    for (t, s) in searches.iter().enumerate() {
        let row = &mut rows[task_rows[t]];
        row.rounds = sched.rounds[t];
        row.trials = s.out.trials.len();
        row.failed_trials = s
            .out
            .trials
            .iter()
            .filter(|t| !t.evaluation.verified())
            .count();
        if let Some(b) = s.out.best_trial() {
            row.best_ms = b.evaluation.median().map(|x| x * 1e3);
            row.gflops = b.evaluation.gflops(dags[t].flop_ct());
            row.best_from = best_from(s, &seeds[t], &seed_labels[t]);
        } else if row.note.is_none() {
            row.note = Some(if row.rounds == 0 {
                "no round within the budget".into()
            } else {
                "no candidate verified".into()
            });
        }
    }
    if opts.droplet_trials > 0 {
        for (t, s) in searches.iter().enumerate() {
            if interrupt::requested() {
                break;
            }
            if s.out.best.is_none() {
                continue;
            }
            let row = &mut rows[task_rows[t]];
            let key = workload_key_of(&dags[t]);
            let mut trials = TrialSink::new(sink, &key, dags[t].flop_ct(), AFTER_SEARCH);
            let refined = droplet_after_search(
                &dags[t],
                &references[t],
                &s.out,
                opts.droplet_trials,
                &opts.refine,
                &mut cost,
                &mut trials,
            );
            match refined {
                Ok(x) => {
                    row.droplet_trials = x.trials.len();
                    if let Some(b) = x.best.median() {
                        row.best_ms = Some(b * 1e3);
                        row.gflops = x.best.gflops(dags[t].flop_ct());
                    }
                    if x.improved {
                        row.best_from = Some("droplet".into());
                    }
                }
                Err(e) => row.note = Some(format!("droplet: {e}")),
            }
        }
    }
    let kernel_sum_ms = rows
        .iter()
        .filter_map(|r| r.best_ms.map(|b| b * r.multiplicity as f64))
        .sum();
    Ok(ModelTuneReport {
        model: m.list.model.clone(),
        host: host_line(&opts.refine.target),
        kernels_without_schedule: rows.iter().filter(|r| r.best_ms.is_none()).count(),
        trials: trials + rows.iter().map(|r| r.droplet_trials).sum::<usize>(),
        kernels: rows,
        kernel_sum_ms,
        seconds: t0.elapsed().as_secs_f64(),
        stop: sched.stop,
        curve,
        interrupted: interrupt::requested(),
        cost_model: cost.summary(),
    })
}
