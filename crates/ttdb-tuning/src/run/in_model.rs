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
//! ([`crate::search::partition::rows_across_cores`]), which keeps each core on the rows the kernel before it wrote
//! and which a kernel timed alone cannot show. It is measured alone first (verified, and
//! stored as this host's record) when the database lacks it.
use super::{time_on_deterministic_inputs, ModelRun, ModelRunOptions};
use crate::tune::refine::RefineOptions;
use candidates::{candidates_of, Measuring, Tried};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;
use ttdb_backend::measure::runner::Measurement;
use ttdb_store::store::record_pins::{pin_records, NewPin};
use ttdb_store::store::Store;

mod candidates;

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
    /// The "rows" configuration takes every rows variant that ran at most this much slower
    /// than the cheapest (a share) with every other rows variant: it may pay a little for
    /// what the conv after it gains.
    pub rows_tolerance: f64,
    /// Rounds of the configurations timed end to end, taking turns, and how much faster
    /// than the cheapest records one must be (a share) to be taken.
    pub confirm_rounds: usize,
    pub min_model_gain: f64,
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
            rows_tolerance: 0.10,
            confirm_rounds: 5,
            min_model_gain: 0.01,
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
    /// ([`crate::search::partition::rows_across_cores`]), made for the model rather than found by a search.
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
    /// The whole model on each configuration weighed (distinct ones), and the one taken.
    pub configurations: Vec<Configuration>,
    pub taken: &'static str,
    pub seconds: f64,
}

/// One way to choose every workload's record, timed end to end.
#[derive(Clone, Debug, Serialize)]
pub struct Configuration {
    pub name: &'static str,
    /// Workloads on another record than their cheapest.
    pub changed: usize,
    /// The model's median run (ms): the median over the rounds of each round's median.
    pub model_ms: f64,
    #[serde(skip)]
    records: HashMap<String, i64>,
    #[serde(skip)]
    pick: usize,
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
    // Each workload's candidates with their times, and its pick in each configuration.
    let weighed: Vec<(&String, &Tried, Vec<Candidate>, [usize; 3])> = (workloads.iter())
        .map(|(key, w)| {
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
            let picks = picks(&candidates, o);
            (key, w, candidates, picks)
        })
        .collect();
    // The whole model decides among the configurations, end to end: the per-kernel
    // times above miss what one kernel's choice does to the next (and pick the minimum of
    // noisy timings).
    drop(runs.drain(1..));
    let mut configurations: Vec<Configuration> = Vec::new();
    let mut loaded: Vec<ModelRun> = Vec::new();
    for (c, name) in CONFIGURATIONS.iter().enumerate() {
        let records: HashMap<String, i64> = (weighed.iter())
            .map(|(key, _, cands, p)| ((*key).clone(), cands[p[c]].record_id))
            .collect();
        let changed = weighed.iter().filter(|x| x.3[c] != 0).count();
        if configurations.iter().any(|k| k.records == records) {
            continue;
        }
        if c > 0 {
            let variant = ModelRunOptions {
                records: records.clone(),
                ..opts.clone()
            };
            let run =
                ModelRun::load(path, &variant, Some(store)).map_err(ChoiceError::NotRunnable)?;
            loaded.push(run);
        }
        configurations.push(Configuration {
            name,
            changed,
            model_ms: f64::NAN,
            records,
            pick: c,
        });
    }
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); configurations.len()];
    if configurations.len() > 1 {
        for _ in 0..o.confirm_rounds.max(1) {
            for (k, run) in runs.iter().chain(loaded.iter()).enumerate() {
                let t = time_on_deterministic_inputs(run, o.runs, None)
                    .map_err(ChoiceError::NotRunnable)?;
                medians[k].push(t.median_ms);
            }
        }
    }
    for (k, m) in medians.into_iter().enumerate() {
        configurations[k].model_ms = Measurement::from_samples(m, 1).median;
    }
    let cheapest_ms = configurations[0].model_ms;
    let taken = (configurations.iter())
        .filter(|k| k.model_ms < cheapest_ms * (1.0 - o.min_model_gain))
        .min_by(|a, b| a.model_ms.total_cmp(&b.model_ms))
        .map_or(0, |k| k.pick);
    report.taken = CONFIGURATIONS[taken];
    let mut pins = Vec::new();
    for (key, w, candidates, picks) in weighed {
        let cheapest = &candidates[0];
        let chosen = &candidates[picks[taken]];
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
    report.configurations = configurations;
    let model = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    pin_records(store, &class, &model, &pins).map_err(db)?;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// The configurations the whole model weighs, in the order of [`picks`]' indices.
const CONFIGURATIONS: [&str; 3] = ["cheapest", "per kernel", "rows"];

/// A workload's candidate in each configuration: the cheapest; the fastest in the model
/// when `o.min_gain` faster than the cheapest; that, or the rows variant when it ran within
/// `o.rows_tolerance` of the cheapest in the run of every rows variant at once.
fn picks(candidates: &[Candidate], o: &InModelOptions) -> [usize; 3] {
    let cheapest = &candidates[0];
    let fastest = (0..candidates.len())
        .min_by(|&a, &b| candidates[a].model_ms.total_cmp(&candidates[b].model_ms))
        .unwrap_or(0);
    let per_kernel = if candidates[fastest].model_ms < cheapest.model_ms * (1.0 - o.min_gain) {
        fastest
    } else {
        0
    };
    let rows = (candidates.iter())
        .position(|c| {
            c.rows_across_cores && c.model_ms <= cheapest.model_ms * (1.0 + o.rows_tolerance)
        })
        .unwrap_or(per_kernel);
    [0, per_kernel, rows]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(record_id: i64, model_ms: f64, rows: bool) -> Candidate {
        Candidate {
            record_id,
            tuned_ms: 1.0,
            model_ms,
            rows_across_cores: rows,
        }
    }

    #[test]
    fn each_configuration_picks_its_candidate() {
        let o = InModelOptions::default();
        // The second is 5% faster in the model; the rows variant 8% slower than the
        // cheapest, within the tolerance.
        let c = [
            candidate(1, 1.00, false),
            candidate(2, 0.95, false),
            candidate(3, 1.08, true),
        ];
        assert_eq!(picks(&c, &o), [0, 1, 2]);
        // 2% faster is noise: the cheapest stays; the rows variant 20% slower is left.
        let c = [
            candidate(1, 1.00, false),
            candidate(2, 0.98, false),
            candidate(3, 1.20, true),
        ];
        assert_eq!(picks(&c, &o), [0, 0, 0]);
        // The rows variant fastest of all: taken per kernel and in the rows configuration.
        let c = [candidate(1, 1.00, false), candidate(3, 0.80, true)];
        assert_eq!(picks(&c, &o), [0, 1, 1]);
        // A candidate with no time (it did not lower) is never picked.
        let c = [candidate(1, 1.00, false), candidate(2, f64::NAN, false)];
        assert_eq!(picks(&c, &o), [0, 0, 0]);
    }
}
