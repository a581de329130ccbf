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
use super::{time_on_deterministic_inputs, ModelRun, ModelRunOptions};
use crate::tune::export::measured_on_class;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;
use ttdb_backend::measure::runner::Measurement;
use ttdb_format::ansor::Record;
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
}

impl Default for InModelOptions {
    fn default() -> Self {
        InModelOptions {
            candidates: 3,
            within: 1.25,
            runs: 20,
            rounds: 3,
            min_gain: 0.03,
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
}

/// The choice for one workload.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadChoice {
    pub workload_key: String,
    /// The model's steps that run it.
    pub kernels: Vec<String>,
    /// Cheapest by tuned cost first.
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
}

/// A workload's candidates: distinct step lists, cheapest first.
fn candidates_of(
    store: &Store,
    record_id: i64,
    class: &str,
    o: &InModelOptions,
) -> Result<(i64, Vec<(i64, f64)>), String> {
    let db = |e: ttdb_store::store::StoreError| format!("the database: {e}");
    let Some(ran) = lookup::valid_record(store, record_id).map_err(db)? else {
        return Ok((0, Vec::new()));
    };
    let measured = measured_on_class(store, ran.workload_id, class).map_err(db)?;
    let Some(&(_, cheapest)) = measured.first() else {
        return Ok((ran.workload_id, Vec::new()));
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
    Ok((ran.workload_id, out))
}

/// Times the candidates of every tuned workload of the model at `path` inside it (run with
/// `opts`, on `store`'s records) and pins the fastest of each for this host's class.
pub fn choose_in_model(
    store: &Store,
    path: &Path,
    opts: &ModelRunOptions,
    o: &InModelOptions,
) -> Result<InModelReport, String> {
    let t0 = Instant::now();
    let class = opts.target.host.class();
    let base = ModelRun::load(path, opts, Some(store))?;
    // workload key -> (workload id, its steps, its candidates)
    let mut workloads: BTreeMap<String, Tried> = BTreeMap::new();
    for (i, p) in base.plan.iter().enumerate() {
        let Some(r) = &p.record else { continue };
        if let Some(w) = workloads.get_mut(&r.workload_key) {
            w.steps.push(i);
            continue;
        }
        let (workload_id, candidates) = candidates_of(store, r.record_id, &class, o)?;
        let tried = Tried {
            workload_id,
            steps: vec![i],
            candidates,
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
        runs.push(ModelRun::load(path, &variant, Some(store))?);
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
            let t = time_on_deterministic_inputs(run, o.runs, None)?;
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
    pin_records(store, &class, &model, &pins).map_err(|e| format!("the database: {e}"))?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}
