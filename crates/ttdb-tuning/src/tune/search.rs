//! `ttdb tune`: search schedules on this machine for stored workloads
//! (`crate::search::policy`), then optionally refine the best with Droplet
//! (`super::refine`). Stored records of the workload (imported or transferred) seed the
//! first round. Every trial is stored as it is measured: a record under the workload's TVM
//! key on this host's target, provenance "search", so `ttdb export` writes lines TVM reads
//! and a second `tune` starts from them (they are seeds too).
use super::progress::{Phase, Progress, Work};
use super::record::{CostModelUse, Sink};
use super::refine::{host_line, recognized_workload, refine_schedules, RefineJob, RefineOptions};
use super::trials::{Provenance, TrialSink};
use crate::search::cost_model::{CostModel, CostModelSummary};
use crate::search::interrupt;
use crate::search::policy::{search_task, SearchOptions, SearchStop, SearchTrial, Searched};
use crate::search::sketch::HardwareParams;
use serde::Serialize;
use std::time::Instant;
use ttdb_backend::evaluate::Reference;
use ttdb_format::ansor::Step;
use ttdb_store::store::StoreError;

#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub search: SearchOptions,
    /// Droplet trials after the search (0: none); its options and the timing options of
    /// every candidate come from `refine`.
    pub droplet_trials: usize,
    pub refine: RefineOptions,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            search: SearchOptions::default(),
            droplet_trials: 0,
            refine: RefineOptions {
                // Ranking a population needs fewer samples than Droplet's t-test.
                samples: 3,
                min_repeat_ms: 10,
                ..RefineOptions::default()
            },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TunedKernel {
    pub signature: String,
    pub op_class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    pub sketches: usize,
    pub seeds: usize,
    pub trials: usize,
    pub failed_trials: usize,
    /// The fastest seed as timed here, if any verified.
    pub seed_ms: Option<f64>,
    /// The search's best, and after Droplet.
    pub searched_ms: Option<f64>,
    pub best_ms: Option<f64>,
    pub gflops: Option<f64>,
    pub droplet_trials: usize,
    pub stop: Option<SearchStop>,
    pub seconds: f64,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TuneReport {
    pub host: String,
    pub cost_model: CostModelSummary,
    pub kernels: Vec<TunedKernel>,
    pub trials: usize,
    pub seconds: f64,
    pub interrupted: bool,
}

/// The provenance of the Droplet trials that follow a search.
pub(super) const AFTER_SEARCH: Provenance<'static> = Provenance::Droplet {
    record: None,
    start: "the search's best",
};

/// Droplet with `budget` trials from the search's 10 fastest states (its restarts take
/// distinct structures first); every trial goes to `trials`.
pub(super) fn droplet_after_search(
    dag: &ttdb_algo::ir::Dag,
    reference: &Reference,
    searched: &Searched,
    budget: usize,
    refine: &RefineOptions,
    model: &mut CostModel,
    trials: &mut TrialSink,
) -> Result<crate::search::droplet::Refined, String> {
    let mut opts = refine.clone();
    opts.droplet.max_trials = budget;
    refine_schedules(dag, &searched.fastest(10), reference, &opts, model, trials)
}

/// What `apply --tune` did for one kernel.
#[derive(Clone, Debug, Serialize)]
pub struct SearchSummary {
    pub trials: usize,
    pub failed_trials: usize,
    pub best_ms: Option<f64>,
    pub seconds: f64,
    pub note: Option<String>,
}

/// Searches one kernel (`apply --tune`): `opts.search.trials` trials seeded with `seeds`,
/// ranked by and teaching `model` (the caller loads and keeps it once per run), every trial
/// stored under `key`. Returns the summary and the fastest verified trial.
#[allow(clippy::too_many_arguments)]
pub fn search_kernel(
    dag: &ttdb_algo::ir::Dag,
    reference: &Reference,
    key: &str,
    seeds: &[Vec<Step>],
    opts: &TuneOptions,
    model: &mut CostModel,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<(SearchSummary, Option<SearchTrial>), StoreError> {
    let t0 = Instant::now();
    let interrupted = || interrupt::requested();
    let mut measurer = opts
        .refine
        .measurer(dag, reference, opts.refine.eval(), &interrupted);
    let mut trials =
        TrialSink::new(sink, key, dag.flop_ct(), Provenance::Search).reporting_to(progress, 0);
    let searched = search_task(
        dag,
        HardwareParams::of(&opts.refine.target),
        seeds,
        measurer.as_mut(),
        &opts.search,
        &mut trials,
        model,
    );
    trials.finish()?;
    Ok(match searched {
        Ok(s) => {
            let best = s.best_trial().cloned();
            (
                SearchSummary {
                    trials: s.trials.len(),
                    failed_trials: s.trials.iter().filter(|t| !t.evaluation.verified()).count(),
                    best_ms: best
                        .as_ref()
                        .and_then(|b| b.evaluation.median())
                        .map(|m| m * 1e3),
                    seconds: t0.elapsed().as_secs_f64(),
                    note: best.is_none().then(|| "no candidate verified".into()),
                },
                best,
            )
        }
        Err(e) => (
            SearchSummary {
                trials: 0,
                failed_trials: 0,
                best_ms: None,
                seconds: t0.elapsed().as_secs_f64(),
                note: Some(format!("no search: {e}")),
            },
            None,
        ),
    })
}

/// Tunes every job (see the module docs).
pub fn tune_jobs(
    jobs: &[RefineJob],
    opts: &TuneOptions,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<TuneReport, StoreError> {
    let t0 = Instant::now();
    let mut kernels = Vec::new();
    let model_use = CostModelUse::of_search(&opts.search);
    let mut model = model_use.start(sink);
    progress.start(Work::KernelTrials {
        kernels: jobs.len(),
        trials_per_kernel: opts.search.trials + opts.droplet_trials,
    });
    let mut failed = None;
    for (i, job) in jobs.iter().enumerate() {
        if interrupt::requested() {
            break;
        }
        progress.kernel(i, jobs.len(), &job.workload.op_class);
        progress.phase(Phase::Searching);
        let k = tune_job(job, opts, sink, progress, &mut model);
        progress.kernel_done();
        match k {
            Ok(k) => kernels.push(k),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    // Once per run: the model learned from what was measured, even when storing a trial
    // failed.
    model_use.finish(sink, &mut model)?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(TuneReport {
        host: host_line(&opts.refine.target),
        cost_model: model.summary(),
        trials: kernels.iter().map(|k| k.trials + k.droplet_trials).sum(),
        kernels,
        seconds: t0.elapsed().as_secs_f64(),
        interrupted: interrupt::requested(),
    })
}

fn tune_job(
    job: &RefineJob,
    opts: &TuneOptions,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
    model: &mut CostModel,
) -> Result<TunedKernel, StoreError> {
    let t0 = Instant::now();
    let w = &job.workload;
    let mut row = TunedKernel {
        signature: w.signature.clone(),
        op_class: w.op_class.clone(),
        inputs: vec![],
        output: vec![],
        sketches: 0,
        seeds: 0,
        trials: 0,
        failed_trials: 0,
        seed_ms: None,
        searched_ms: None,
        best_ms: None,
        gflops: None,
        droplet_trials: 0,
        stop: None,
        seconds: 0.0,
        note: None,
    };
    let (r, reference) = match recognized_workload(&w.key) {
        Ok(x) => x,
        Err(e) => {
            row.note = Some(e);
            return Ok(row);
        }
    };
    row.inputs = r.signature.inputs.clone();
    row.output = r.signature.output.clone();
    let mut seeds: Vec<Vec<Step>> = job
        .start_schedules(&r.dag, opts.refine.starts)
        .schedules
        .into_iter()
        .map(|(_, steps)| steps)
        .collect();
    super::model::with_default_seed(&r.dag, opts.refine.target.lanes() as i64, &mut seeds);
    row.seeds = seeds.len();
    let flops = r.dag.flop_ct();
    let eval = opts.refine.eval();
    let interrupted = || interrupt::requested();
    let mut measurer = opts.refine.measurer(&r.dag, &reference, eval, &interrupted);
    let mut trials = TrialSink::new(&mut *sink, &w.key, flops, Provenance::Search)
        .reporting_to(&mut *progress, 0);
    let searched = search_task(
        &r.dag,
        HardwareParams::of(&opts.refine.target),
        &seeds,
        measurer.as_mut(),
        &opts.search,
        &mut trials,
        model,
    );
    trials.finish()?;
    let searched = match searched {
        Ok(s) => s,
        Err(e) => {
            row.note = Some(format!("no search: {e}"));
            return Ok(row);
        }
    };
    row.sketches = searched.sketches;
    row.trials = searched.trials.len();
    row.failed_trials = searched
        .trials
        .iter()
        .filter(|t| !t.evaluation.verified())
        .count();
    row.stop = Some(searched.stop);
    row.seed_ms = searched
        .trials
        .iter()
        .filter(|t| t.origin == "seed")
        .filter_map(|t| t.evaluation.median())
        .min_by(f64::total_cmp)
        .map(|s| s * 1e3);
    let Some(best) = searched.best_trial() else {
        row.note = Some("no candidate verified".into());
        row.seconds = t0.elapsed().as_secs_f64();
        return Ok(row);
    };
    row.searched_ms = best.evaluation.median().map(|s| s * 1e3);
    row.best_ms = row.searched_ms;
    row.gflops = best.evaluation.gflops(flops);
    if opts.droplet_trials > 0 && !interrupt::requested() {
        progress.phase(Phase::Refining { start_s: None });
        let mut trials =
            TrialSink::new(sink, &w.key, flops, AFTER_SEARCH).reporting_to(progress, row.trials);
        match droplet_after_search(
            &r.dag,
            &reference,
            &searched,
            opts.droplet_trials,
            &opts.refine,
            model,
            &mut trials,
        ) {
            Ok(x) => {
                row.droplet_trials = x.trials.len();
                if let Some(m) = x.best.median() {
                    row.best_ms = Some(m * 1e3);
                    row.gflops = x.best.gflops(flops);
                }
            }
            Err(e) => row.note = Some(format!("droplet: {e}")),
        }
    }
    row.seconds = t0.elapsed().as_secs_f64();
    Ok(row)
}
