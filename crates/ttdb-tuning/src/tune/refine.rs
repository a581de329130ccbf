//! `ttdb refine`: Droplet search (`crate::search::droplet`) on this machine, for workloads
//! of the database. Each starts from its best schedule as re-measured here (the best
//! imported records by logged cost and the best ttdb measured, all timed again), not from a
//! logged cost taken on another machine. Every trial is stored as it is measured: a record
//! with the workload's TVM key on this host's target, provenance "droplet", so `ttdb export`
//! writes lines TVM reads and an interrupted run loses nothing.
use super::progress::{Phase, Progress, Work};
use super::record::{measurement_of, CostModelUse, Sink};
use super::trials::{Provenance, TrialSink};
use crate::search::cost_model::CostModel;
use crate::search::droplet::{DropletOptions, Ranker, Refined, Stop, Unranked};
use crate::search::interrupt;
use crate::search::knobs::Space;
use crate::search::measurer::{KernelMeasurer, MeasureElsewhere, Measurer};
use crate::search::model_ranker::ModelRanker;
use crate::search::restarts::{refine_from, RestartOptions};
use crate::search::sketch::HardwareParams;
use serde::Serialize;
use std::time::Instant;
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::evaluate::{EvalOptions, Evaluation, Reference};
use ttdb_backend::measure::runner::{Caches, MeasureOptions};
use ttdb_format::ansor::{Record, Step, WorkloadKey};
use ttdb_store::store::lookup::{self, RefinableWorkload, SourceRecord};
use ttdb_store::store::{Store, StoreError};

/// How to refine.
#[derive(Clone, Debug)]
pub struct RefineOptions {
    /// Droplet's budgets and test.
    pub droplet: DropletOptions,
    /// Timings per candidate (each at least `min_repeat_ms`): the samples of the t-test.
    pub samples: usize,
    pub min_repeat_ms: u64,
    /// What the caches hold when a candidate's timed run starts (warm by default).
    pub caches: Caches,
    /// Records re-measured per source (imported, ttdb's own) to find the starts.
    pub starts: usize,
    /// How descents from several starts share the budget (`crate::search::restarts`).
    pub restarts: RestartOptions,
    /// Pre-pack layout-free weights as TVM measured relay tasks.
    pub prepack: bool,
    /// Rank each batch's neighbours with the learned cost model
    /// (`crate::search::model_ranker`); off: Droplet's own frontier order.
    pub rank_by_model: bool,
    /// Where candidates are measured (a worker process keeps a faulting one from ending
    /// the run).
    pub isolation: ttdb_backend::evaluate::Isolation,
    /// The machine candidates are compiled for and measured on.
    pub target: ttdb_backend::target::Target,
    /// Measure elsewhere (the workers of a host class, through the database's queue:
    /// `crate::queue`) instead of here.
    pub remote: Option<std::sync::Arc<dyn MeasureElsewhere>>,
}

impl Default for RefineOptions {
    fn default() -> Self {
        RefineOptions {
            droplet: DropletOptions::default(),
            samples: 5,
            min_repeat_ms: 25,
            caches: Caches::Warm,
            starts: 5,
            restarts: RestartOptions::default(),
            prepack: true,
            rank_by_model: true,
            isolation: ttdb_backend::evaluate::Isolation::InProcess,
            target: ttdb_backend::target::Target::detect(),
            remote: None,
        }
    }
}

impl RefineOptions {
    /// The measurer of `dag`'s candidates: here, or on the queue's workers.
    pub fn measurer<'a>(
        &'a self,
        dag: &'a ttdb_algo::ir::Dag,
        reference: &'a Reference,
        eval: EvalOptions,
        interrupted: &'a (dyn Fn() -> bool + Sync),
    ) -> Box<dyn Measurer + 'a> {
        match &self.remote {
            Some(r) => r.measurer(dag, reference, eval, interrupted),
            None => Box::new(KernelMeasurer::new(dag, reference, eval, interrupted)),
        }
    }

    /// Evaluation options for candidates: `samples` timings of >= `min_repeat_ms` each.
    pub fn eval(&self) -> EvalOptions {
        EvalOptions {
            measure: MeasureOptions {
                warmup: 1,
                repeat: self.samples.max(3),
                min_repeat_ms: self.min_repeat_ms,
                caches: self.caches,
                timeout: Some(self.droplet.max_timeout),
                ..MeasureOptions::default()
            },
            prepack_weights: self.prepack,
            isolation: self.isolation.clone(),
            codegen: self.target.codegen_options(),
            profile: self.target.profile,
            ..EvalOptions::default()
        }
    }
}

/// Droplet on `dag` from `starts` (timed again side by side; the first is the reference the
/// result is compared with): from the fastest of each distinct structure, then on from the
/// best result, while the trial budget lasts (`crate::search::restarts`). Every trial goes to
/// `trials` as it is measured (which names the workload and the start in their provenance,
/// and follows the search's progress). `model` ranks the neighbours (when
/// `opts.rank_by_model`) and learns from every trial; one model for a whole run lets each
/// workload start from what the others taught it.
pub fn refine_schedules(
    dag: &Dag,
    starts: &[Vec<Step>],
    reference: &Reference,
    opts: &RefineOptions,
    model: &mut CostModel,
    trials: &mut TrialSink,
) -> Result<Refined, String> {
    let lanes = opts.target.lanes() as i64;
    let inits = stage_inits_from_dag(dag);
    let mut spaces = Vec::new();
    for (i, s) in starts.iter().enumerate() {
        match Space::new(&inits, s, lanes) {
            Ok(sp) => spaces.push(sp),
            Err(e) if i == 0 => return Err(e),
            Err(_) => {}
        }
    }
    let interrupted = || interrupt::requested();
    let mut measurer = opts.measurer(dag, reference, opts.eval(), &interrupted);
    let key = trials.key().to_string();
    let mut ranker = ModelRanker {
        dag,
        task: &key,
        hw: HardwareParams::of(&opts.target),
        model,
    };
    let ranker: &mut dyn Ranker = if opts.rank_by_model {
        &mut ranker
    } else {
        &mut Unranked
    };
    let refined = refine_from(
        &spaces,
        measurer.as_mut(),
        ranker,
        &opts.droplet,
        &opts.restarts,
        trials,
    )?;
    trials
        .finish()
        .map_err(|e| format!("storing the trials: {e}"))?;
    Ok(refined)
}

/// One workload to refine and the records it may start from.
#[derive(Clone, Debug)]
pub struct RefineJob {
    pub workload: RefinableWorkload,
    /// Cheapest first by stored cost, in runs: imported records, then ttdb's own
    /// measurements. Each run holds [`START_FALL_THROUGH`] more than are wanted.
    pub starts: Vec<Vec<SourceRecord>>,
}

/// How many more records per run `plan` fetches than the starts wanted, so records that do
/// not replay (corrupt, or hostile ones claiming a tiny cost) fall through to the next.
pub const START_FALL_THROUGH: usize = 16;

/// The schedules a refinement or search may start from ([`RefineJob::start_schedules`]).
pub struct StartSchedules<'a> {
    /// Distinct step lists that replay, with their records, cheapest first.
    pub schedules: Vec<(&'a SourceRecord, Vec<Step>)>,
    /// Records passed over because they do not parse or replay.
    pub refused: usize,
    /// The first layout rewrite option the kept records carry.
    pub layout_rewrite_option: Option<i64>,
}

impl RefineJob {
    /// Up to `per_run` distinct schedules of each run that replay on `dag`.
    pub fn start_schedules(&self, dag: &Dag, per_run: usize) -> StartSchedules<'_> {
        let inits = stage_inits_from_dag(dag);
        let mut out = StartSchedules {
            schedules: Vec::new(),
            refused: 0,
            layout_rewrite_option: None,
        };
        for run in &self.starts {
            let mut taken = 0;
            for s in run {
                if taken == per_run {
                    break;
                }
                let Ok(rec) = Record::parse(&s.raw) else {
                    out.refused += 1;
                    continue;
                };
                if out.schedules.iter().any(|(_, st)| *st == rec.steps) {
                    continue;
                }
                if ttdb_algo::schedule::replay(&inits, &rec.steps).is_err() {
                    out.refused += 1;
                    continue;
                }
                out.layout_rewrite_option =
                    out.layout_rewrite_option.or(rec.task.layout_rewrite_option);
                out.schedules.push((s, rec.steps));
                taken += 1;
            }
        }
        out
    }
}

/// Which workloads `plan` selects.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Only workloads whose signature starts with this hex prefix.
    pub signature_prefix: Option<String>,
    /// Only this op class (or class prefix chain).
    pub class: Option<String>,
    /// At most this many workloads (in signature order).
    pub limit: Option<usize>,
}

/// The selected CPU workloads with their candidate start records.
pub fn plan(
    store: &Store,
    selection: &Selection,
    opts: &RefineOptions,
) -> Result<Vec<RefineJob>, StoreError> {
    let compat = "llvm/cpu";
    lookup::refinable_workloads(
        store,
        compat,
        selection.signature_prefix.as_deref(),
        selection.class.as_deref(),
        selection.limit,
    )?
    .into_iter()
    .map(|w| {
        let starts = lookup::refine_starts(store, w.id, compat, opts.starts + START_FALL_THROUGH)?;
        Ok(RefineJob {
            workload: w,
            starts,
        })
    })
    .collect()
}

/// The outcome for one workload.
#[derive(Clone, Debug, Serialize)]
pub struct RefinedKernel {
    pub signature: String,
    pub op_class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    /// The record the refinement started from (fastest here of the candidates).
    pub start_record: Option<i64>,
    pub start_source: Option<String>,
    /// Its cost where it was logged.
    pub logged_ms: Option<f64>,
    /// Its median here, and the refined schedule's.
    pub start_ms: Option<f64>,
    pub refined_ms: Option<f64>,
    pub speedup: Option<f64>,
    pub gflops: Option<f64>,
    /// Start candidates timed, trials measured (failed ones included), batches, knobs.
    pub candidates_timed: usize,
    pub trials: usize,
    pub failed_trials: usize,
    pub batches: usize,
    pub knobs: usize,
    pub stop: Option<Stop>,
    pub seconds: f64,
    /// Why the workload was not refined, if so.
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RefineReport {
    pub host: String,
    pub kernels: Vec<RefinedKernel>,
    pub trials: usize,
    pub seconds: f64,
    pub interrupted: bool,
}

/// Refines every job: start = the fastest verified candidate record timed here, then
/// Droplet with `opts`. Trials (and the start candidates' timings) go to `sink` as measured.
pub fn refine_jobs(
    jobs: &[RefineJob],
    opts: &RefineOptions,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<RefineReport, StoreError> {
    let t0 = Instant::now();
    let mut kernels = Vec::new();
    // One model for the run, from the one stored for this host class; kept at the end with
    // what this run taught it (the search's next run starts from it too).
    let model_use = CostModelUse::of_refine(opts);
    let mut model = model_use.start(sink);
    progress.start(Work::KernelTrials {
        kernels: jobs.len(),
        trials_per_kernel: opts.droplet.max_trials,
    });
    let mut failed = None;
    for (i, job) in jobs.iter().enumerate() {
        if interrupt::requested() {
            break;
        }
        progress.kernel(i, jobs.len(), &job.workload.op_class);
        progress.phase(Phase::TimingStarts);
        match refine_job(job, opts, &mut model, sink, progress) {
            Ok(k) => {
                progress.kernel_done();
                kernels.push(k);
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    model_use.finish(sink, &mut model)?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(RefineReport {
        host: host_line(&opts.target),
        trials: kernels.iter().map(|k| k.trials).sum(),
        kernels,
        seconds: t0.elapsed().as_secs_f64(),
        interrupted: interrupt::requested(),
    })
}

/// How a report names the machine: its CPU, LLVM's name for it, its cores.
pub(super) fn host_line(target: &ttdb_backend::target::Target) -> String {
    let host = &target.host;
    format!(
        "{} ({}, {} cores)",
        host.cpu_model, host.llvm_cpu, host.cores
    )
}

/// The DAG of a stored workload, recognized from its TVM key, and its reference outputs;
/// or why not, as a report row's note.
pub(super) fn recognized_workload(
    key: &str,
) -> Result<(ttdb_algo::recognize::Recognized, Reference), String> {
    let k = WorkloadKey::parse(key).map_err(|e| format!("not recognized: {e}"))?;
    let r = ttdb_algo::recognize::recognize(&k).map_err(|e| format!("not recognized: {e}"))?;
    let reference = Reference::new(&r.dag, 11)?;
    Ok((r, reference))
}

fn ms(e: &Evaluation) -> Option<f64> {
    e.median().map(|s| s * 1e3)
}

fn refine_job(
    job: &RefineJob,
    opts: &RefineOptions,
    model: &mut CostModel,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<RefinedKernel, StoreError> {
    let t0 = Instant::now();
    let w = &job.workload;
    let mut row = RefinedKernel {
        signature: w.signature.clone(),
        op_class: w.op_class.clone(),
        inputs: vec![],
        output: vec![],
        start_record: None,
        start_source: None,
        logged_ms: None,
        start_ms: None,
        refined_ms: None,
        speedup: None,
        gflops: None,
        candidates_timed: 0,
        trials: 0,
        failed_trials: 0,
        batches: 0,
        knobs: 0,
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
    // The candidates, one per distinct step list that replays.
    let starts = job.start_schedules(&r.dag, opts.starts);
    let (cands, refused) = (&starts.schedules, starts.refused);
    if cands.is_empty() {
        row.note = Some(format!(
            "no stored record replays on the workload ({refused} refused)"
        ));
        return Ok(row);
    }
    let rewrite_option = starts.layout_rewrite_option;
    // Weights pre-packed as TVM measured relay tasks (layout rewrite option 2; records
    // before v0.5 carry no option: relay keys meant 2, registered ones 1).
    let registered = r.recognized_by == ttdb_algo::recognize::RecognizedBy::Registered;
    let opts = &RefineOptions {
        prepack: opts.prepack && rewrite_option.unwrap_or(if registered { 1 } else { 2 }) == 2,
        ..opts.clone()
    };
    let eval = opts.eval();
    let interrupted = || interrupt::requested();
    let mut measurer = opts.measurer(&r.dag, &reference, eval.clone(), &interrupted);
    let schedules: Vec<Vec<Step>> = cands.iter().map(|(_, s)| s.clone()).collect();
    let timed = measurer.measure(&schedules, opts.droplet.max_timeout);
    row.candidates_timed = timed.iter().flatten().count();
    let flops = r.dag.flop_ct();
    let items: Vec<_> = cands
        .iter()
        .zip(&timed)
        .filter_map(|((s, steps), e)| {
            let e = e.as_ref()?;
            Some(measurement_of(
                e,
                w.key.clone(),
                steps.clone(),
                flops,
                Some(s.record_id),
                format!("refine start candidate: record {}", s.record_id),
            ))
        })
        .collect();
    sink.keep("verify", &items)?;
    // The verified candidates, fastest first: the starts.
    let mut ranked: Vec<(&SourceRecord, &Vec<Step>, f64)> = cands
        .iter()
        .zip(&timed)
        .filter_map(|((s, steps), e)| Some((*s, steps, e.as_ref()?.median()?)))
        .collect();
    ranked.sort_by(|a, b| a.2.total_cmp(&b.2));
    let Some(&(source, _, start_s)) = ranked.first() else {
        let why = timed
            .iter()
            .flatten()
            .find_map(|e| e.failure.as_ref().map(|f| f.message.clone()))
            .unwrap_or_else(|| "interrupted".into());
        row.note = Some(format!(
            "no stored schedule verifies here ({} tried): {why}",
            cands.len()
        ));
        return Ok(row);
    };
    row.start_record = Some(source.record_id);
    row.start_source = Some(source.label());
    row.logged_ms = Some(source.mean_cost * 1e3);
    let what = format!("record {} ({})", source.record_id, source.label());
    let starts: Vec<Vec<Step>> = ranked.iter().map(|(_, s, _)| (*s).clone()).collect();
    progress.phase(Phase::Refining {
        start_s: Some(start_s),
    });
    let provenance = Provenance::Droplet {
        record: Some(source.record_id),
        start: &what,
    };
    let mut trials = TrialSink::new(sink, &w.key, flops, provenance).reporting_to(progress, 0);
    match refine_schedules(&r.dag, &starts, &reference, opts, model, &mut trials) {
        Ok(x) => {
            row.start_ms = ms(&x.start);
            row.refined_ms = ms(&x.best);
            row.speedup = row.start_ms.zip(row.refined_ms).map(|(a, b)| a / b);
            row.gflops = x.best.gflops(flops);
            row.trials = x.trials.len();
            row.failed_trials = x.trials.iter().filter(|t| !t.evaluation.verified()).count();
            row.batches = x.batches;
            row.knobs = x.knobs;
            row.stop = Some(x.stop);
        }
        Err(e) => row.note = Some(e),
    }
    row.seconds = t0.elapsed().as_secs_f64();
    Ok(row)
}
