//! Choosing a kernel's schedule by its time inside the model (`tune MODEL`, after the
//! search). A search ranks schedules by their time alone and warm; inside a model a kernel
//! meets its weights cold and its input where the kernel before left it, and near-equal
//! schedules do not keep their order there (resnet50: the second and third best records ran
//! some kernels faster in the model than the best; docs/measurements.md, nineteenth
//! session). So each workload's few best records measured on this host class are run in
//! the model, every workload's `v`-th candidate in variant `v`, the variants taking turns;
//! each step's time is its own, so one set of runs times every workload's candidates at
//! once. The fastest there is pinned for the workload (`record_pins`), over the cheapest by
//! cost; `run`, `build` and `export --model` then take it while the cheapest is unchanged.
//!
//! One candidate is made for the model rather than found by the search: an NCHWc conv's
//! cheapest record with its parallel loop over output rows instead of channel chunks
//! ([`rows_across_cores`]), which keeps each core on the rows the kernel before it wrote
//! and which a kernel timed alone cannot show. It is measured alone first (verified, and
//! stored as this host's record) when the database lacks it.
use super::{time_on_deterministic_inputs, ModelRun, ModelRunOptions};
use crate::search::interrupt;
use crate::search::observer::Observer;
use crate::search::partition::rows_across_cores;
use crate::search::policy::SearchTrial;
use crate::tune::export::measured_on_class;
use crate::tune::record::StoreSink;
use crate::tune::refine::RefineOptions;
use crate::tune::trials::{Provenance, TrialSink};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_backend::evaluate::Reference;
use ttdb_backend::measure::runner::Measurement;
use ttdb_format::ansor::{Record, Step, WorkloadKey};
use ttdb_store::store::lookup;
use ttdb_store::store::record_pins::{pin_records, NewPin};
use ttdb_store::store::Store;

#[derive(Clone, Debug)]
pub struct InModelOptions {
    /// Records tried per workload (the cheapest included).
    pub candidates: usize,
    /// Only records at most this many times the cheapest's cost.
    pub within: f64,
    /// Timed runs of each variant per round, and rounds (the variants take turns).
    pub runs: usize,
    pub rounds: usize,
    /// Another record is chosen only when it is this much faster in the model than the
    /// cheapest (a share: 0.03 is 3%), so that noise pins nothing.
    pub min_gain: f64,
    /// Try each NCHWc conv's cheapest record split over output rows across the cores as
    /// one of its candidates (the last).
    pub rows_across_cores: bool,
}

impl Default for InModelOptions {
    fn default() -> Self {
        InModelOptions {
            candidates: 3,
            within: 1.25,
            runs: 20,
            rounds: 3,
            min_gain: 0.03,
            rows_across_cores: true,
        }
    }
}

/// One record tried for a workload.
#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub record_id: i64,
    /// Its tuned cost (alone, per call).
    pub tuned_ms: f64,
    /// Its time in the model: the median over the runs of its steps' sum.
    pub model_ms: f64,
    /// The cheapest's schedule split over output rows across the cores
    /// ([`rows_across_cores`]), made for the model rather than found by a search.
    pub rows_across_cores: bool,
}

/// The choice for one workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadChoice {
    pub workload_key: String,
    /// The model's steps that run it.
    pub kernels: Vec<String>,
    /// Cheapest by tuned cost first, the rows variant (if any) last.
    pub candidates: Vec<Candidate>,
    pub chosen: i64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct InModelReport {
    pub workloads: Vec<WorkloadChoice>,
    /// Workloads whose chosen record is not the cheapest.
    pub changed: usize,
    /// The steps of the workloads tried, in the model: on the cheapest records, and on the
    /// chosen ones (ms per run).
    pub cheapest_ms: f64,
    pub chosen_ms: f64,
    pub variants: usize,
    pub seconds: f64,
}

/// A workload tried in the model: its steps (in the plan as first loaded) and candidates.
struct Tried {
    workload_id: i64,
    steps: Vec<usize>,
    /// (record id, tuned cost), cheapest first.
    candidates: Vec<(i64, f64)>,
    /// The candidate that is the cheapest's rows variant.
    rows_variant: Option<i64>,
}

/// Where the choice may measure a candidate the database lacks (this host's searches'
/// options), and how many cores share a kernel in the model.
struct Measuring<'a> {
    refine: &'a RefineOptions,
    threads: usize,
}

/// A workload's candidates (its steps left empty): distinct step lists, cheapest first, and
/// the rows variant of the cheapest when `o.rows_across_cores` and it is within `o.within`
/// alone (last, unless it is among the best alone).
fn candidates_of(
    store: &mut Store,
    record_id: i64,
    class: &str,
    o: &InModelOptions,
    measuring: Option<&Measuring>,
) -> Result<Tried, ChoiceError> {
    let none = |workload_id| Tried {
        workload_id,
        steps: Vec::new(),
        candidates: Vec::new(),
        rows_variant: None,
    };
    let Some(ran) = lookup::valid_record(store, record_id).map_err(db)? else {
        return Ok(none(0));
    };
    let first = measured_on_class(store, ran.workload_id, class).map_err(db)?;
    let Some(&(cheapest_id, _)) = first.first() else {
        return Ok(none(ran.workload_id));
    };
    let variant = match measuring.filter(|_| o.rows_across_cores) {
        Some(m) => rows_variant(store, cheapest_id, m)?,
        None => None,
    };
    // The variant, measured just now, may be the cheapest alone: it then comes first, as
    // the record the pins are made over.
    let measured = match &variant {
        Some(steps) if steps_of(store, &first, steps)?.is_none() => {
            measured_on_class(store, ran.workload_id, class).map_err(db)?
        }
        _ => first,
    };
    let cheapest = measured[0].1;
    let variant = match &variant {
        Some(steps) => steps_of(store, &measured, steps)?.filter(|v| v.1 <= cheapest * o.within),
        None => None,
    };
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (id, cost) in measured {
        if out.len() >= o.candidates || cost > cheapest * o.within {
            break;
        }
        let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
            continue;
        };
        let Ok(parsed) = Record::parse(&r.raw) else {
            continue;
        };
        let steps = format!("{:?}", parsed.steps);
        if !seen.contains(&steps) {
            seen.push(steps);
            out.push((id, cost));
        }
    }
    // Not among the best alone: it takes the last place.
    if let Some(v) = variant.filter(|v| !out.contains(v)) {
        if out.len() >= o.candidates.max(2) {
            out.pop();
        }
        out.push(v);
    }
    Ok(Tried {
        candidates: out,
        rows_variant: variant.map(|v| v.0),
        ..none(ran.workload_id)
    })
}

/// Why the choice was not made.
#[derive(Clone, Debug, PartialEq)]
pub enum ChoiceError {
    /// The model does not load or run here (as `ttdb run` would say).
    NotRunnable(String),
    /// Reading or writing the database failed.
    Database(String),
}

impl std::fmt::Display for ChoiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChoiceError::NotRunnable(why) => write!(f, "`ttdb run` cannot run it: {why}"),
            ChoiceError::Database(why) => write!(f, "the database: {why}"),
        }
    }
}

fn db(e: ttdb_store::store::StoreError) -> ChoiceError {
    ChoiceError::Database(e.to_string())
}

/// The record among `measured` whose steps are `steps`.
fn steps_of(
    store: &Store,
    measured: &[(i64, f64)],
    steps: &[Step],
) -> Result<Option<(i64, f64)>, ChoiceError> {
    for &(id, cost) in measured {
        let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
            continue;
        };
        if Record::parse(&r.raw).is_ok_and(|p| p.steps == steps) {
            return Ok(Some((id, cost)));
        }
    }
    Ok(None)
}

/// The rows variant of record `id` (`search::partition`), measured alone and stored first
/// when no record of this host has its steps yet; None when the record has no such variant
/// or it did not verify.
fn rows_variant(
    store: &mut Store,
    id: i64,
    m: &Measuring,
) -> Result<Option<Vec<Step>>, ChoiceError> {
    let Some(r) = lookup::valid_record(store, id).map_err(db)? else {
        return Ok(None);
    };
    let Ok(parsed) = Record::parse(&r.raw) else {
        return Ok(None);
    };
    let key = parsed.task.workload_key;
    let Some(dag) = WorkloadKey::parse(&key)
        .ok()
        .and_then(|k| ttdb_algo::recognize::recognize(&k).ok())
        .map(|r| r.dag)
    else {
        return Ok(None);
    };
    let Some(steps) = rows_across_cores(&stage_inits_from_dag(&dag), &parsed.steps, m.threads)
    else {
        return Ok(None);
    };
    let class = m.refine.target.host.class();
    let workload = r.workload_id;
    if steps_of(
        store,
        &measured_on_class(store, workload, &class).map_err(db)?,
        &steps,
    )?
    .is_some()
    {
        return Ok(Some(steps));
    }
    // Without a reference output the variant could not be verified: not tried.
    let Ok(reference) = Reference::new(&dag, 11) else {
        return Ok(None);
    };
    let interrupted = || interrupt::requested();
    let mut measurer = (m.refine).measurer(&dag, &reference, m.refine.eval(), &interrupted);
    let timeout = m.refine.droplet.max_timeout;
    let Some(evaluation) = measurer
        .measure(std::slice::from_ref(&steps), timeout)
        .pop()
        .flatten()
    else {
        return Ok(None);
    };
    drop(measurer);
    let mut sink = StoreSink {
        store,
        host: m.refine.target.host.clone(),
    };
    let how = Provenance::Variant {
        record: id,
        how: "rows across cores",
    };
    let mut trials = TrialSink::new(&mut sink, &key, dag.flop_ct(), how);
    let trial = SearchTrial {
        round: 0,
        origin: "rows across cores".into(),
        steps: steps.clone(),
        evaluation,
    };
    trials.measured(&[trial]);
    trials.finish().map_err(db)?;
    Ok(Some(steps))
}

/// Times the candidates of every tuned workload of the model at `path` inside it (run with
/// `opts`, on `store`'s records) and pins the fastest of each for this host's class.
/// With `measuring` (the options of this host's searches), a rows variant the database lacks
/// is measured alone and stored first; without, only stored records are tried.
pub fn choose_in_model(
    store: &mut Store,
    path: &Path,
    opts: &ModelRunOptions,
    o: &InModelOptions,
    measuring: Option<&RefineOptions>,
) -> Result<InModelReport, ChoiceError> {
    let t0 = Instant::now();
    // `run`'s pool: a thread per core.
    let measuring = measuring.map(|refine| Measuring {
        refine,
        threads: opts.target.host.cores,
    });
    let class = opts.target.host.class();
    let base = ModelRun::load(path, opts, Some(store)).map_err(ChoiceError::NotRunnable)?;
    // workload key -> (workload id, its steps, its candidates)
    let mut workloads: BTreeMap<String, Tried> = BTreeMap::new();
    for (i, p) in base.plan.iter().enumerate() {
        let Some(r) = &p.record else { continue };
        if let Some(w) = workloads.get_mut(&r.workload_key) {
            w.steps.push(i);
            continue;
        }
        let tried = Tried {
            steps: vec![i],
            ..candidates_of(store, r.record_id, &class, o, measuring.as_ref())?
        };
        workloads.insert(r.workload_key.clone(), tried);
    }
    workloads.retain(|_, w| w.candidates.len() > 1);
    let variants = (workloads.values())
        .map(|w| w.candidates.len())
        .max()
        .unwrap_or(0);
    let mut report = InModelReport {
        variants,
        ..InModelReport::default()
    };
    if variants == 0 {
        report.seconds = t0.elapsed().as_secs_f64();
        return Ok(report);
    }
    let base_names: Vec<String> = base.plan.iter().map(|p| p.name.clone()).collect();
    let pick = |cands: &[(i64, f64)], v: usize| cands[v.min(cands.len() - 1)].0;
    // The model as loaded runs variant 0 unless an earlier pin moved a kernel off its
    // cheapest record: then it is loaded again (a load compiles every kernel).
    let ran_cheapest = base.plan.iter().all(|p| {
        p.record.as_ref().is_none_or(|r| {
            workloads
                .get(&r.workload_key)
                .is_none_or(|w| pick(&w.candidates, 0) == r.record_id)
        })
    });
    let mut runs = Vec::with_capacity(variants);
    if ran_cheapest {
        runs.push(base);
    } else {
        drop(base);
    }
    for v in runs.len()..variants {
        let records: HashMap<String, i64> = workloads
            .iter()
            .map(|(key, w)| (key.clone(), pick(&w.candidates, v)))
            .collect();
        let variant = ModelRunOptions {
            records,
            ..opts.clone()
        };
        runs.push(ModelRun::load(path, &variant, Some(store)).map_err(ChoiceError::NotRunnable)?);
    }
    // Each variant's steps of each workload, by its own plan: a schedule that reads an
    // operand packed at run time brings a packing step of its own (`layout_rewrite`).
    let steps_in = |run: &ModelRun, key: &str| -> Vec<usize> {
        let names: Vec<&str> = (run.plan.iter())
            .filter(|p| p.record.as_ref().is_some_and(|r| r.workload_key == key))
            .map(|p| p.name.as_str())
            .collect();
        (0..run.plan.len())
            .filter(|&i| {
                let p = &run.plan[i];
                p.record.as_ref().is_some_and(|r| r.workload_key == key)
                    || (p.class == "layout_rewrite" && names.contains(&p.name.as_str()))
            })
            .collect()
    };
    let steps_of: Vec<HashMap<&str, Vec<usize>>> = runs
        .iter()
        .map(|run| {
            (workloads.keys())
                .map(|k| (k.as_str(), steps_in(run, k)))
                .collect()
        })
        .collect();
    // per record: its steps' summed medians, one per variant run that ran it
    let mut times: HashMap<i64, Vec<f64>> = HashMap::new();
    for _ in 0..o.rounds.max(1) {
        for (v, run) in runs.iter().enumerate() {
            let t = time_on_deterministic_inputs(run, o.runs, None)
                .map_err(ChoiceError::NotRunnable)?;
            for (key, w) in &workloads {
                let ran = &steps_of[v][key.as_str()];
                let kernels = ran.iter().filter(|&&i| run.plan[i].record.is_some());
                // A record that did not lower here ran the default schedule: no time for it.
                if kernels.count() != w.steps.len() {
                    continue;
                }
                let sum: f64 = ran.iter().map(|&i| t.kernels[i].median_ms).sum();
                times.entry(pick(&w.candidates, v)).or_default().push(sum);
            }
        }
    }
    let mut pins = Vec::new();
    for (key, w) in &workloads {
        let candidates: Vec<Candidate> = (w.candidates.iter())
            .map(|&(record_id, cost)| Candidate {
                record_id,
                tuned_ms: cost * 1e3,
                model_ms: Measurement::from_samples(
                    times.get(&record_id).cloned().unwrap_or_default(),
                    1,
                )
                .median,
                rows_across_cores: w.rows_variant == Some(record_id),
            })
            .collect();
        let cheapest = &candidates[0];
        let fastest = candidates
            .iter()
            .min_by(|a, b| a.model_ms.total_cmp(&b.model_ms))
            .unwrap_or(cheapest);
        let chosen = if fastest.model_ms < cheapest.model_ms * (1.0 - o.min_gain) {
            fastest
        } else {
            cheapest
        };
        if cheapest.model_ms.is_finite() && chosen.model_ms.is_finite() {
            report.cheapest_ms += cheapest.model_ms;
            report.chosen_ms += chosen.model_ms;
        }
        report.changed += usize::from(chosen.record_id != cheapest.record_id);
        pins.push(NewPin {
            workload_id: w.workload_id,
            record_id: chosen.record_id,
            over_record_id: cheapest.record_id,
            model_ms: chosen.model_ms / w.steps.len() as f64,
        });
        report.workloads.push(WorkloadChoice {
            workload_key: key.clone(),
            kernels: w.steps.iter().map(|&i| base_names[i].clone()).collect(),
            chosen: chosen.record_id,
            candidates,
        });
    }
    let model = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    pin_records(store, &class, &model, &pins).map_err(db)?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}
