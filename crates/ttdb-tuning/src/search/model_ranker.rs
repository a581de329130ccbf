//! Droplet's neighbours ranked by the search's learned cost model ([`super::cost_model`]).
//! Each candidate is lowered and featurized (about a millisecond, against a few hundred to
//! time it), and the model learns from every measurement Droplet makes: this workload's
//! and, when one model serves a whole run, the workloads' before it. It is retrained as its
//! samples grow by a fifth; until it is first trained, Droplet keeps its frontier order.
//!
//! Why: a neighbour one knob away is often many times slower than the incumbent (a split
//! that breaks the vectorized tile, a vectorized loop of extent 3), and without a model such
//! candidates took up to half of a descent's trials.
use super::cost_model::{program_features, CostModel, ProgramFeatures};
use super::droplet::Ranker;
use super::sketch::HardwareParams;
use rayon::prelude::*;
use ttdb_algo::ir::Dag;
use ttdb_backend::evaluate::Evaluation;
use ttdb_backend::lower::{lower_steps, LowerOptions};
use ttdb_format::ansor::Step;

pub struct ModelRanker<'a> {
    pub dag: &'a Dag,
    /// The workload key: the model's labels are relative to each task's fastest program.
    pub task: &'a str,
    pub hw: HardwareParams,
    pub model: &'a mut CostModel,
}

fn features(dag: &Dag, steps: &[Step], hw: &HardwareParams) -> Option<ProgramFeatures> {
    let k = lower_steps(dag, steps, &LowerOptions::default()).ok()?;
    Some(program_features(&k, hw))
}

impl Ranker for ModelRanker<'_> {
    fn ready(&self) -> bool {
        self.model.is_trained()
    }

    /// A schedule that does not lower scores lowest (it would fail its trial).
    fn scores(&mut self, schedules: &[Vec<Step>]) -> Option<Vec<f64>> {
        if !self.ready() {
            return None;
        }
        let (dag, hw) = (self.dag, &self.hw);
        let rows: Vec<Option<ProgramFeatures>> =
            schedules.par_iter().map(|s| features(dag, s, hw)).collect();
        let model = &*self.model;
        Some(
            rows.iter()
                .map(|f| {
                    f.as_ref()
                        .and_then(|f| model.predict(f))
                        .unwrap_or(f64::MIN)
                })
                .collect(),
        )
    }

    fn learn(&mut self, steps: &[Step], evaluation: &Evaluation) {
        let Some(f) = features(self.dag, steps, &self.hw) else {
            return;
        };
        self.model.add(self.task, &f, evaluation.median());
        self.model.maybe_retrain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::cost_model::MIN_TRAIN_PROGRAMS;
    use crate::search::droplet_tests::{failed, timed};
    use crate::search::knobs::Space;
    use ttdb_algo::schedule::stage_inits_from_dag;

    /// Untrained, it has no opinion; once it has learned enough measured schedules it
    /// scores every candidate, and learns that a faster schedule is faster.
    #[test]
    fn it_ranks_once_trained_on_measurements() {
        let (dag, steps) = crate::search::knobs::tests::conv_and_sketch();
        let hw = HardwareParams {
            num_cores: 2,
            vector_lanes: 8,
        };
        let sp = Space::new(&stage_inits_from_dag(&dag), &steps, 8).unwrap();
        // Schedules around the sketch: every knob's values in turn.
        let mut schedules = Vec::new();
        for (i, &n) in sp.sizes().iter().enumerate() {
            for v in 0..n {
                let mut p = sp.start.clone();
                p[i] = v as u16;
                if let Ok(s) = sp.steps_at(&p) {
                    if !schedules.contains(&s) {
                        schedules.push(s);
                    }
                }
            }
        }
        assert!(schedules.len() > MIN_TRAIN_PROGRAMS, "{}", schedules.len());
        let mut model = CostModel::new();
        let mut r = ModelRanker {
            dag: &dag,
            task: "conv",
            hw,
            model: &mut model,
        };
        assert!(!r.ready());
        assert!(r.scores(&schedules).is_none());
        // A known cost: the larger the innermost lengths of the splits, the faster; one
        // schedule in ten fails.
        let inner = |s: &[Step]| -> f64 {
            s.iter()
                .filter_map(|x| match x {
                    Step::Split(sp) => sp.lengths.last().copied(),
                    _ => None,
                })
                .sum::<i64>() as f64
        };
        for (i, s) in schedules.iter().enumerate() {
            let e = if i % 10 == 9 {
                failed(2)
            } else {
                timed(vec![1e-3 / inner(s); 3])
            };
            r.learn(s, &e);
        }
        assert!(r.ready());
        let scores = r.scores(&schedules).unwrap();
        assert_eq!(scores.len(), schedules.len());
        // Mean score of the faster half and of the slower half.
        let mut sorted: Vec<f64> = schedules.iter().map(|s| inner(s)).collect();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let mean_where = |keep: &dyn Fn(f64) -> bool| {
            let v: Vec<f64> = schedules
                .iter()
                .zip(&scores)
                .filter(|(s, _)| keep(inner(s)))
                .map(|(_, &sc)| sc)
                .collect();
            assert!(!v.is_empty());
            v.iter().sum::<f64>() / v.len() as f64
        };
        let (fast, slow) = (mean_where(&|l| l > median), mean_where(&|l| l < median));
        assert!(fast > slow, "{fast} vs {slow}");
    }
}
