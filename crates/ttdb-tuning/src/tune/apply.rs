//! `apply`: transfer-tuning a model. For every tuned kernel, the untuned default schedule is
//! measured, then the top-k matched candidates (exact first, then class by static estimate)
//! are replayed, compiled, verified and timed — the measure-all strategy of transfer-tuning,
//! bounded by k and a time budget — and the fastest verified one wins. The default is always
//! a candidate, so a kernel is never reported slower than untuned. With `droplet`, the chosen
//! transferred schedule is then refined on this machine (TT + Droplet, `super::refine`).
//! Every measurement goes to the sink as it is taken; Ctrl-C stops after the current run.
use super::progress::{Phase, Progress, Work};
use super::record::{CostModelUse, Sink};
use super::refine::{refine_schedules, RefineOptions};
use super::trials::{Provenance, TrialSink};
use crate::matcher::{kernel_flops, Candidate, ModelMatch, Tier};
use crate::search::cost_model::CostModel;
use crate::search::default_schedule::lowering_default;
use crate::search::droplet::Stop;
use crate::search::interrupt;
use crate::search::measurer::MeasureElsewhere;
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use ttdb_algo::ir::{dag_hash, Dag};
use ttdb_backend::evaluate::{
    evaluate_default, evaluate_steps, EvalOptions, Evaluation, Reference,
};
use ttdb_backend::measure::runner::MeasureOptions;
use ttdb_format::ansor::Step;
use ttdb_onnx::onnx::Kernel;
use ttdb_store::store::measurement::NewMeasurement;
use ttdb_store::store::StoreError;

#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Candidates measured per kernel (the default schedule comes on top).
    pub top_k: usize,
    /// Search time budget; once spent, remaining kernels keep their default schedule.
    pub budget: Duration,
    pub eval: EvalOptions,
    /// The naive default is slow by design: fewer repeats suffice for its time.
    pub default_eval: EvalOptions,
    /// Refine each kernel's chosen transferred schedule with Droplet search (None: no).
    pub droplet: Option<RefineOptions>,
    /// Search the kernels no transferred schedule sped up (None: no; `apply --tune N`).
    pub tune: Option<super::search::TuneOptions>,
    /// Vector lanes of the target: the default schedule's (`search::default_schedule`).
    pub lanes: i64,
    /// Measure the default and the candidates on the queue's workers instead of here
    /// (`apply --workers`; Droplet and the search take theirs from their own options).
    pub remote: Option<std::sync::Arc<dyn MeasureElsewhere>>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        let eval = EvalOptions::default();
        let default_eval = EvalOptions {
            measure: MeasureOptions {
                repeat: 3,
                min_repeat_ms: 50,
                ..eval.measure.clone()
            },
            ..eval.clone()
        };
        ApplyOptions {
            top_k: 3,
            budget: Duration::from_secs(600),
            eval,
            default_eval,
            droplet: None,
            tune: None,
            // TVM's `llvm` target without -mcpu; callers give their target's.
            lanes: 4,
            remote: None,
        }
    }
}

/// One measured candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub tier: Tier,
    pub source: String,
    pub verified: bool,
    pub median_ms: Option<f64>,
    pub error: Option<String>,
    pub compile_ms: f64,
}

/// The outcome for one kernel.
#[derive(Clone, Debug, Serialize)]
pub struct KernelResult {
    pub name: String,
    pub class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    pub multiplicity: usize,
    pub tier: Tier,
    /// The chosen schedule's source ("default" when no candidate beat it).
    pub chosen: String,
    pub chosen_tier: Option<Tier>,
    pub untuned_ms: Option<f64>,
    pub tuned_ms: Option<f64>,
    pub speedup: Option<f64>,
    pub verified: bool,
    pub gflops: Option<f64>,
    pub trials: Vec<Trial>,
    /// Why no candidate was measured, or not all of them, if so.
    pub note: Option<String>,
    /// The budget ran out before all its top-k candidates were measured.
    #[serde(skip)]
    pub candidates_cut: bool,
    /// The chosen schedule's median before Droplet refined it (with `droplet`).
    pub transferred_ms: Option<f64>,
    pub droplet: Option<DropletSummary>,
    /// `apply --tune`: the search of a kernel no transferred schedule sped up.
    pub search: Option<super::search::SearchSummary>,
}

/// What Droplet did to one kernel's chosen schedule.
#[derive(Clone, Debug, Serialize)]
pub struct DropletSummary {
    pub trials: usize,
    pub failed_trials: usize,
    pub batches: usize,
    pub knobs: usize,
    pub stop: Option<Stop>,
    /// The transferred schedule timed again at the start, and the result.
    pub start_ms: Option<f64>,
    pub refined_ms: Option<f64>,
    pub seconds: f64,
    /// Why it did not run or failed, if so.
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ApplyReport {
    pub model: String,
    pub layout: String,
    pub kernels: Vec<KernelResult>,
    /// Σ latency × multiplicity over the tuned kernels, default schedules.
    pub untuned_total_ms: f64,
    /// The same with the chosen schedules (after Droplet, with `droplet`).
    pub tuned_total_ms: f64,
    /// The chosen transferred schedules before Droplet (with `droplet`).
    pub transferred_total_ms: Option<f64>,
    /// Seconds spent in Droplet (included in `search_seconds`).
    pub droplet_seconds: f64,
    /// Droplet trials in all.
    pub droplet_trials: usize,
    /// Stopped by Ctrl-C: kernels after it keep their default schedule.
    pub interrupted: bool,
    pub speedup: f64,
    pub search_seconds: f64,
    pub budget_exhausted: bool,
    /// Kernels of the model not timed (layout transforms, concat, plain element-wise).
    pub untimed_kernels: usize,
}

/// The TVM workload key of a DAG: md5 of its PrintDAG text and its io shapes.
pub fn workload_key_of(dag: &Dag) -> String {
    let mut items = vec![serde_json::json!(dag_hash(dag))];
    items.extend(dag.io_shapes().into_iter().map(|s| serde_json::json!(s)));
    serde_json::to_string(&items)
        .expect("json")
        .replace(',', ", ")
}

fn ms(e: &Evaluation) -> Option<f64> {
    e.median().map(|s| s * 1e3)
}

fn measurement(
    e: &Evaluation,
    dag: &Dag,
    steps: Vec<ttdb_format::ansor::Step>,
    origin: Option<i64>,
    provenance: String,
) -> NewMeasurement {
    super::record::measurement_of(
        e,
        workload_key_of(dag),
        steps,
        dag.flop_ct(),
        origin,
        provenance,
    )
}

fn provenance(c: &Candidate) -> String {
    let what = match c.tier {
        Tier::Exact => "exact match of",
        _ => "transferred from",
    };
    format!(
        "{what} workload {} (record {}) of file {}",
        c.source.signature, c.source.record_id, c.source.source_path
    )
}

/// Measures the default and the top-k candidates of every tuned kernel of `m`, within the
/// budget, then refines the chosen ones (with `droplet`); every measurement goes to `sink` as
/// it is taken. `progress` hears of every kernel and of every Droplet batch or search round.
pub fn apply(
    m: &ModelMatch,
    opts: &ApplyOptions,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<ApplyReport, StoreError> {
    let start = Instant::now();
    // Spend the budget where it matters: biggest kernels (FLOPs x multiplicity) first.
    // (Each weight builds the kernel's DAG: computed once per kernel, not per comparison.)
    let weights: Vec<f64> = m
        .matches
        .iter()
        .map(|km| {
            let k = &m.list.kernels[km.kernel];
            kernel_flops(k) * k.multiplicity() as f64
        })
        .collect();
    let mut order: Vec<usize> = (0..m.matches.len()).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]));
    let mut results: Vec<Option<KernelResult>> = vec![None; m.matches.len()];
    let mut exhausted = false;
    let mut failed = None;
    // `--tune` and `--droplet`: one cost model for the run's searches and refinements,
    // loaded and kept once (as the search uses it when searching, else as Droplet does).
    let model_use = match (&opts.tune, &opts.droplet) {
        (Some(t), _) => Some(CostModelUse::of_search(&t.search)),
        (None, Some(d)) => Some(CostModelUse::of_refine(d)),
        (None, None) => None,
    };
    let mut cost = model_use.map(|u| u.start(sink));
    // None: a budget past what an Instant can hold, never reached.
    let deadline = start.checked_add(opts.budget);
    progress.start(Work::Kernels(order.len()));
    for (n, &i) in order.iter().enumerate() {
        let km = &m.matches[i];
        let k = &m.list.kernels[km.kernel];
        progress.kernel(n, order.len(), &k.name);
        let over = start.elapsed() >= opts.budget;
        exhausted |= over;
        let stop = over || interrupt::requested();
        match apply_kernel(k, km, opts, stop, deadline, cost.as_mut(), sink, progress) {
            Ok(r) => {
                exhausted |= r.candidates_cut;
                results[i] = Some(r);
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        progress.kernel_done();
    }
    // Once per run, even when storing a measurement failed.
    if let (Some(u), Some(c)) = (model_use, cost.as_mut()) {
        u.finish(sink, c)?;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let kernels: Vec<KernelResult> = results.into_iter().flatten().collect();
    let total = |f: &dyn Fn(&KernelResult) -> Option<f64>| {
        kernels
            .iter()
            .map(|r| f(r).unwrap_or(0.0) * r.multiplicity as f64)
            .sum::<f64>()
    };
    let untuned = total(&|r| r.untuned_ms);
    let tuned = total(&|r| r.tuned_ms.or(r.untuned_ms));
    let refined: Vec<&DropletSummary> = kernels.iter().filter_map(|k| k.droplet.as_ref()).collect();
    Ok(ApplyReport {
        transferred_total_ms: opts
            .droplet
            .is_some()
            .then(|| total(&|r| r.transferred_ms.or(r.tuned_ms).or(r.untuned_ms))),
        droplet_seconds: refined.iter().map(|d| d.seconds).sum(),
        droplet_trials: refined.iter().map(|d| d.trials).sum(),
        interrupted: interrupt::requested(),
        model: m.list.model.clone(),
        layout: m.list.layout.clone(),
        untimed_kernels: m.list.kernels.iter().filter(|k| !k.is_tuned()).count(),
        kernels,
        untuned_total_ms: untuned,
        tuned_total_ms: tuned,
        speedup: if tuned > 0.0 {
            untuned / tuned
        } else {
            f64::NAN
        },
        search_seconds: start.elapsed().as_secs_f64(),
        budget_exhausted: exhausted,
    })
}

/// Reference values per distinct DAG text: candidates of one era and operand order share
/// one (and its inputs), others get their own.
#[derive(Default)]
struct References(HashMap<String, Result<Reference, String>>);

impl References {
    fn get(&mut self, dag: &Dag) -> Result<&Reference, String> {
        self.0
            .entry(dag_hash(dag))
            .or_insert_with(|| Reference::new(dag, 17))
            .as_ref()
            .map_err(|e| e.clone())
    }
}

#[allow(clippy::too_many_arguments)]
fn apply_kernel(
    k: &Kernel,
    km: &crate::matcher::KernelMatch,
    opts: &ApplyOptions,
    stop: bool,
    deadline: Option<Instant>,
    cost: Option<&mut CostModel>,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<KernelResult, StoreError> {
    let mut r = KernelResult {
        name: k.name.clone(),
        class: k.class.clone(),
        inputs: k.inputs.clone(),
        output: k.output.clone(),
        multiplicity: k.multiplicity(),
        tier: km.tier,
        chosen: "default".into(),
        chosen_tier: None,
        untuned_ms: None,
        tuned_ms: None,
        speedup: None,
        verified: false,
        gflops: None,
        trials: vec![],
        note: None,
        candidates_cut: false,
        transferred_ms: None,
        droplet: None,
        search: None,
    };
    let Some(spec) = &k.spec else {
        r.note = Some("no workload spec".into());
        return Ok(r);
    };
    let default_dag = match spec.build(ttdb_algo::ops::Era::V010, &k.inputs) {
        Ok(d) => d,
        Err(e) => {
            r.note = Some(format!("cannot build the kernel: {e}"));
            return Ok(r);
        }
    };
    let mut references = References::default();
    // The baseline is what `ttdb run` runs without a stored schedule: the first default
    // schedule that lowers, timed like a candidate. Only when none lowers, the naive loop
    // nest (its record, empty steps, would then be what run replays).
    let default_steps = lowering_default(&default_dag, opts.lanes);
    // Timed like a candidate when candidates follow; past the budget (`stop`: the default is
    // kept, its time only reported) or as the naive loop nest, with fewer repeats.
    let default_eval = match default_steps {
        Some(_) if !stop => &opts.eval,
        _ => &opts.default_eval,
    };
    let default = match references.get(&default_dag) {
        Ok(reference) => match (&opts.remote, &default_steps) {
            (Some(remote), steps) => evaluate_remotely(
                remote.as_ref(),
                &default_dag,
                &[steps.clone().unwrap_or_default()],
                reference,
                default_eval,
            )
            .remove(0),
            (None, Some(steps)) => evaluate_steps(&default_dag, steps, reference, default_eval),
            (None, None) => evaluate_default(&default_dag, reference, default_eval),
        },
        Err(e) => {
            r.note = Some(e);
            return Ok(r);
        }
    };
    r.untuned_ms = ms(&default);
    r.verified = default.verified();
    let naive = measurement(
        &default,
        &default_dag,
        default_steps.clone().unwrap_or_default(),
        None,
        match default_steps {
            Some(_) => "default schedule".into(),
            None => "naive default schedule".into(),
        },
    );
    sink.keep("default", &[naive])?;
    // (median ms, candidate index, GFLOP/s) of the fastest verified candidate.
    let mut best: Option<(f64, usize, Option<f64>)> = None;
    if stop {
        r.note = Some(if interrupt::requested() {
            "interrupted: default schedule kept".into()
        } else {
            "search budget exhausted: default schedule kept".into()
        });
    } else if km.candidates.is_empty() {
        r.note = Some("no candidate (tier none)".into());
    }
    let candidates = if stop {
        &[][..]
    } else {
        &km.candidates[..km.candidates.len().min(opts.top_k)]
    };
    let mut measured = Vec::new();
    // (median ms, candidate index) of every verified candidate.
    let mut verified: Vec<(f64, usize)> = Vec::new();
    let remote_evaluations = match &opts.remote {
        Some(remote) => {
            evaluate_candidates_remotely(remote.as_ref(), candidates, &mut references, &opts.eval)
        }
        None => vec![None; candidates.len()],
    };
    for (c, remote_evaluation) in candidates.iter().zip(remote_evaluations) {
        // The budget is checked between candidates too: a kernel's top-k candidates take
        // seconds each, and a budget is what the user gave.
        if remote_evaluation.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
            r.note = Some(format!(
                "search budget exhausted after {} of {} candidates",
                r.trials.len(),
                candidates.len()
            ));
            r.candidates_cut = true;
            break;
        }
        let e = match (remote_evaluation, references.get(&c.dag)) {
            (Some(e), _) => e,
            (None, Ok(reference)) => evaluate_steps(&c.dag, &c.steps, reference, &opts.eval),
            (None, Err(msg)) => {
                r.trials.push(Trial {
                    tier: c.tier,
                    source: c.source.label(),
                    verified: false,
                    median_ms: None,
                    error: Some(msg),
                    compile_ms: 0.0,
                });
                continue;
            }
        };
        let t = ms(&e);
        r.trials.push(Trial {
            tier: c.tier,
            source: c.source.label(),
            verified: e.verified(),
            median_ms: t,
            error: e.failure.as_ref().map(|f| f.message.clone()),
            compile_ms: e.total_compile_time().as_secs_f64() * 1e3,
        });
        if let Some(t) = t {
            verified.push((t, r.trials.len() - 1));
            if best.is_none_or(|(b, _, _)| t < b) {
                best = Some((t, r.trials.len() - 1, e.gflops(c.dag.flop_ct())));
            }
        }
        measured.push(measurement(
            &e,
            &c.dag,
            c.steps.clone(),
            Some(c.source.record_id),
            provenance(c),
        ));
    }
    sink.keep("apply", &measured)?;
    // The default is a candidate too: a transferred schedule must beat it to be chosen.
    match (best, r.untuned_ms) {
        (Some((t, i, gflops)), u) if u.is_none_or(|u| t < u) => {
            let c = &candidates[i];
            r.tuned_ms = Some(t);
            r.chosen = c.source.label();
            r.chosen_tier = Some(c.tier);
            r.verified = true;
            r.gflops = gflops;
            if let (Some(dopts), Some(cost)) = (&opts.droplet, cost) {
                let reference = references.get(&c.dag).expect("measured above");
                // The other verified candidates of the same DAG, fastest first.
                let mut others: Vec<(f64, usize)> = verified
                    .iter()
                    .copied()
                    .filter(|&(_, j)| j != i && dag_hash(&candidates[j].dag) == dag_hash(&c.dag))
                    .collect();
                others.sort_by(|a, b| a.0.total_cmp(&b.0));
                let others: Vec<Vec<Step>> = others
                    .iter()
                    .map(|&(_, j)| candidates[j].steps.clone())
                    .collect();
                progress.phase(Phase::Refining { start_s: None });
                refine_chosen(&mut r, c, &others, reference, dopts, cost, sink, progress);
            }
        }
        _ => {
            r.tuned_ms = r.untuned_ms;
            r.gflops = default.gflops(default_dag.flop_ct());
            if opts.droplet.is_some() && opts.tune.is_none() {
                r.droplet = Some(DropletSummary::skipped(
                    "no transferred schedule beat the default (Droplet starts from a transferred one)",
                ));
            }
            if let (Some(topts), Some(cost), false) =
                (&opts.tune, cost, stop || interrupt::requested())
            {
                if let Ok(reference) = references.get(&default_dag) {
                    progress.phase(Phase::Searching);
                    search_default(&mut r, &default_dag, reference, topts, cost, sink, progress)?;
                }
            }
        }
    }
    if let (Some(u), Some(t)) = (r.untuned_ms, r.tuned_ms) {
        r.speedup = Some(u / t);
    }
    Ok(r)
}

/// Evaluations of `schedules` of `dag` on the queue's workers, as one batch; a schedule left
/// unrun (Ctrl-C) is a failed trial.
fn evaluate_remotely(
    remote: &dyn MeasureElsewhere,
    dag: &Dag,
    schedules: &[Vec<Step>],
    reference: &Reference,
    eval: &EvalOptions,
) -> Vec<Evaluation> {
    let mut measurer = remote.measurer(dag, reference, eval.clone(), &interrupt::requested);
    // The per-run timeout is the worker's (time waiting in the queue never counts).
    let timeout = eval.measure.timeout.unwrap_or(Duration::from_secs(10));
    measurer
        .measure(schedules, timeout)
        .into_iter()
        .map(|e| e.unwrap_or_else(|| Evaluation::failure(7, "not measured: interrupted".into())))
        .collect()
}

/// The candidates' evaluations on the queue's workers: one batch per distinct DAG (the
/// candidates of one era and operand order share a reference), in the candidates' order;
/// None for a candidate whose reference could not be built (the caller reports it).
fn evaluate_candidates_remotely(
    remote: &dyn MeasureElsewhere,
    candidates: &[Candidate],
    references: &mut References,
    eval: &EvalOptions,
) -> Vec<Option<Evaluation>> {
    let mut out: Vec<Option<Evaluation>> = vec![None; candidates.len()];
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let h = dag_hash(&c.dag);
        match groups.iter_mut().find(|g| g.0 == h) {
            Some(g) => g.1.push(i),
            None => groups.push((h, vec![i])),
        }
    }
    for (_, members) in groups {
        let dag = &candidates[members[0]].dag;
        let Ok(reference) = references.get(dag) else {
            continue;
        };
        let schedules: Vec<Vec<Step>> = members
            .iter()
            .map(|&i| candidates[i].steps.clone())
            .collect();
        let evaluations = evaluate_remotely(remote, dag, &schedules, reference, eval);
        for (i, e) in members.into_iter().zip(evaluations) {
            out[i] = Some(e);
        }
    }
    out
}

/// `apply --tune`: no transferred schedule beat the default, so search the kernel; the
/// searched schedule is chosen if it beats the default.
fn search_default(
    r: &mut KernelResult,
    dag: &Dag,
    reference: &Reference,
    opts: &super::search::TuneOptions,
    cost: &mut CostModel,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) -> Result<(), StoreError> {
    let (summary, best) = super::search::search_kernel(
        dag,
        reference,
        &workload_key_of(dag),
        &[],
        opts,
        cost,
        sink,
        progress,
    )?;
    if let (Some(b), Some(ms)) = (best, summary.best_ms) {
        if r.untuned_ms.is_none_or(|u| ms < u) {
            r.tuned_ms = Some(ms);
            r.chosen = format!("search ({} trials)", summary.trials);
            r.verified = true;
            r.gflops = b.evaluation.gflops(dag.flop_ct());
        }
    }
    r.search = Some(summary);
    Ok(())
}

impl DropletSummary {
    fn skipped(why: &str) -> DropletSummary {
        DropletSummary {
            trials: 0,
            failed_trials: 0,
            batches: 0,
            knobs: 0,
            stop: None,
            start_ms: None,
            refined_ms: None,
            seconds: 0.0,
            note: Some(why.into()),
        }
    }
}

/// TT + Droplet: refines the chosen candidate `c` on this machine (with the other verified
/// candidates of its DAG, `others`, fastest first, as further starts); the kernel's time
/// becomes the refined schedule's.
#[allow(clippy::too_many_arguments)]
fn refine_chosen(
    r: &mut KernelResult,
    c: &Candidate,
    others: &[Vec<Step>],
    reference: &Reference,
    opts: &RefineOptions,
    model: &mut CostModel,
    sink: &mut dyn Sink,
    progress: &mut dyn Progress,
) {
    if interrupt::requested() {
        r.droplet = Some(DropletSummary::skipped("interrupted"));
        return;
    }
    let t0 = Instant::now();
    let what = provenance(c);
    let key = workload_key_of(&c.dag);
    let starts: Vec<Vec<Step>> = std::iter::once(c.steps.clone())
        .chain(others.iter().cloned())
        .collect();
    let provenance = Provenance::Droplet {
        record: Some(c.source.record_id),
        start: &what,
    };
    let mut trials =
        TrialSink::new(sink, &key, c.dag.flop_ct(), provenance).reporting_to(progress, 0);
    let refined = refine_schedules(&c.dag, &starts, reference, opts, model, &mut trials);
    r.droplet = Some(match refined {
        Ok(x) => {
            // Droplet times its start and its best in the same conditions; the model's
            // totals compare with the untuned times taken earlier, so the chosen schedule
            // keeps apply's time and an improvement scales it by Droplet's ratio (re-timing
            // on a loaded machine must not make an unchanged schedule look slower).
            let (start_ms, refined_ms) = (ms(&x.start), ms(&x.best));
            if let (Some(a), Some(b)) = (start_ms, refined_ms) {
                let before = r.tuned_ms.unwrap_or(a);
                r.transferred_ms = Some(before);
                if x.improved {
                    let after = before * b / a;
                    r.tuned_ms = Some(after);
                    r.gflops = Some(c.dag.flop_ct() / (after * 1e-3) / 1e9);
                }
            }
            if x.improved {
                r.chosen = format!("{} + droplet", r.chosen);
            }
            DropletSummary {
                trials: x.trials.len(),
                failed_trials: x.trials.iter().filter(|t| !t.evaluation.verified()).count(),
                batches: x.batches,
                knobs: x.knobs,
                stop: Some(x.stop),
                start_ms,
                refined_ms,
                seconds: t0.elapsed().as_secs_f64(),
                note: None,
            }
        }
        Err(e) => DropletSummary {
            seconds: t0.elapsed().as_secs_f64(),
            ..DropletSummary::skipped(e.as_str())
        },
    });
}
