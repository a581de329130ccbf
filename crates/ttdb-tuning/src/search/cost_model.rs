//! The learned cost model of the search (TVM's `XGBModel`, with ttdb's own GBDT): per-store
//! feature rows ([`super::features`]) of each measured program, label
//! `y = best seconds of its task / its seconds` (failed: 0), sample weight `max(y, 0.05)`,
//! pack-sum objective ([`super::gbdt`]). Retrained from scratch on all samples whenever they
//! grew by a fifth; until there are enough samples it predicts nothing and the caller ranks
//! by the draft estimate ([`super::draft`]).
//!
//! Warm start: [`CostModel::encode`] keeps the trees and the most recent
//! [`MAX_SAVED_PROGRAMS`] samples, so a later search on a like machine predicts from its first
//! round and retrains on old and new samples together.
use super::draft::draft_estimate;
use super::features::{store_infos, store_row, STORE_FEATURES};
use super::gbdt::{Gbdt, GbdtParams, Grouped};
use super::sketch::HardwareParams;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use ttdb_backend::loopnest::ir::Kernel;

/// Samples before the model is trained at all.
pub const MIN_TRAIN_PROGRAMS: usize = 48;
/// Samples kept by [`CostModel::encode`].
pub const MAX_SAVED_PROGRAMS: usize = 4096;
const FORMAT: u32 = 1;
const MAGIC: &[u8; 4] = b"TTCM";

/// What the search knows of a lowered candidate before measuring it.
#[derive(Clone, Debug)]
pub struct ProgramFeatures {
    /// One row per store statement.
    pub rows: Vec<Vec<f32>>,
    /// The draft estimate in seconds (lower is faster).
    pub draft_seconds: f64,
}

pub fn program_features(k: &Kernel, hw: &HardwareParams) -> ProgramFeatures {
    let stores = store_infos(k);
    let (draft_seconds, terms) = draft_estimate(&stores, hw);
    ProgramFeatures {
        rows: stores
            .iter()
            .zip(&terms)
            .map(|(s, t)| store_row(s, t))
            .collect(),
        draft_seconds,
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SampleMeta {
    task: u32,
    /// Median seconds; `None` for a failed trial.
    seconds: Option<f64>,
    rows: u32,
}

#[derive(Clone, Debug, Default)]
pub struct CostModel {
    /// Task keys (workload keys); samples refer to them by index.
    tasks: Vec<String>,
    metas: Vec<SampleMeta>,
    /// All rows, in sample order.
    rows: Vec<Vec<f32>>,
    model: Gbdt,
    trained_on: usize,
    /// Samples that came from a stored model (not measured in this process).
    pub warm_programs: usize,
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: u32,
    features: u32,
    tasks: Vec<String>,
    metas: Vec<SampleMeta>,
    model: Gbdt,
    trained_on: usize,
}

impl CostModel {
    pub fn new() -> CostModel {
        CostModel::default()
    }

    pub fn programs(&self) -> usize {
        self.metas.len()
    }

    pub fn is_trained(&self) -> bool {
        !self.model.is_empty()
    }

    /// Adds a measured program of `task` (`seconds` None when it failed).
    pub fn add(&mut self, task: &str, features: &ProgramFeatures, seconds: Option<f64>) {
        if features.rows.is_empty() {
            return;
        }
        let t = match self.tasks.iter().position(|k| k == task) {
            Some(t) => t,
            None => {
                self.tasks.push(task.to_string());
                self.tasks.len() - 1
            }
        };
        self.metas.push(SampleMeta {
            task: t as u32,
            seconds: seconds.filter(|s| s.is_finite() && *s > 0.0),
            rows: features.rows.len() as u32,
        });
        self.rows.extend(features.rows.iter().cloned());
    }

    /// Retrains when there are enough samples and they grew by a fifth since the last
    /// training (TVM's rule). Returns whether it trained.
    pub fn maybe_retrain(&mut self) -> bool {
        let n = self.metas.len();
        if n < MIN_TRAIN_PROGRAMS
            || (self.is_trained() && (n as f64) < self.trained_on as f64 * 1.2)
        {
            return false;
        }
        self.retrain(&GbdtParams::default());
        true
    }

    pub fn retrain(&mut self, params: &GbdtParams) {
        let (group, label, weight) = self.labels();
        let data = Grouped {
            rows: &self.rows,
            group: &group,
            label: &label,
            weight: &weight,
        };
        self.model = Gbdt::train(&data, params);
        self.trained_on = self.metas.len();
    }

    /// Row → program, and per program its label and weight.
    fn labels(&self) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
        let mut best: HashMap<u32, f64> = HashMap::new();
        for m in &self.metas {
            if let Some(s) = m.seconds {
                let b = best.entry(m.task).or_insert(s);
                *b = b.min(s);
            }
        }
        let mut group = Vec::with_capacity(self.rows.len());
        let mut label = Vec::with_capacity(self.metas.len());
        for (p, m) in self.metas.iter().enumerate() {
            group.extend(std::iter::repeat_n(p, m.rows as usize));
            label.push(match (m.seconds, best.get(&m.task)) {
                (Some(s), Some(b)) => b / s,
                _ => 0.0,
            });
        }
        let weight = label.iter().map(|y| y.max(0.05)).collect();
        (group, label, weight)
    }

    /// The predicted score (higher is faster) of a program, or `None` before training.
    pub fn predict(&self, features: &ProgramFeatures) -> Option<f64> {
        self.is_trained()
            .then(|| self.model.predict_program(&features.rows))
    }

    /// Bytes to store: the trees and the most recent samples.
    pub fn encode(&self) -> Vec<u8> {
        let keep_from = self.metas.len().saturating_sub(MAX_SAVED_PROGRAMS);
        let skip_rows: usize = self.metas[..keep_from]
            .iter()
            .map(|m| m.rows as usize)
            .sum();
        let header = Header {
            format: FORMAT,
            features: STORE_FEATURES as u32,
            tasks: self.tasks.clone(),
            metas: self.metas[keep_from..].to_vec(),
            model: self.model.clone(),
            trained_on: self.trained_on.min(self.metas.len() - keep_from),
        };
        let json = serde_json::to_vec(&header).expect("serializable");
        let mut out = Vec::with_capacity(
            12 + json.len() + (self.rows.len() - skip_rows) * STORE_FEATURES * 4,
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        for r in &self.rows[skip_rows..] {
            for v in r {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Reads bytes written by [`Self::encode`]; errors on anything else, including a model
    /// with another feature layout (an older ttdb: the caller starts cold).
    pub fn decode(bytes: &[u8]) -> Result<CostModel, String> {
        let rest = bytes.strip_prefix(MAGIC).ok_or("not a ttdb cost model")?;
        let (len, rest) = rest.split_at_checked(8).ok_or("truncated cost model")?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let (json, payload) = rest.split_at_checked(len).ok_or("truncated cost model")?;
        let h: Header =
            serde_json::from_slice(json).map_err(|e| format!("cost model header: {e}"))?;
        if h.format != FORMAT || h.features != STORE_FEATURES as u32 {
            return Err(format!(
                "cost model format {} with {} features; this ttdb writes format {FORMAT} with {STORE_FEATURES}",
                h.format, h.features
            ));
        }
        let n_rows: usize = h.metas.iter().map(|m| m.rows as usize).sum();
        if payload.len() != n_rows * STORE_FEATURES * 4 {
            return Err("cost model samples do not match their header".into());
        }
        if h.metas
            .iter()
            .any(|m| m.task as usize >= h.tasks.len() || m.rows == 0)
        {
            return Err("cost model sample refers to no task".into());
        }
        let rows = payload
            .chunks_exact(STORE_FEATURES * 4)
            .map(|r| {
                r.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .collect()
            })
            .collect();
        Ok(CostModel {
            warm_programs: h.metas.len(),
            tasks: h.tasks,
            trained_on: h.trained_on.min(h.metas.len()),
            metas: h.metas,
            rows,
            model: h.model,
        })
    }
}

/// What a run reports of its cost model.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct CostModelSummary {
    /// Measured programs it started with (from the database).
    pub warm_programs: usize,
    /// Measured programs it holds now.
    pub programs: usize,
    pub trees: usize,
}

impl CostModel {
    pub fn summary(&self) -> CostModelSummary {
        CostModelSummary {
            warm_programs: self.warm_programs,
            programs: self.programs(),
            trees: self.model.trees(),
        }
    }
}

/// The model a search starts from: the stored one when `warm`, else a cold one.
pub fn starting_model(warm: bool, load: impl FnOnce() -> CostModel) -> CostModel {
    if warm {
        load()
    } else {
        CostModel::new()
    }
}

/// Pairwise ranking accuracy: of the pairs of programs of one task with different measured
/// times, the share `score` orders like the times (higher score = faster).
pub fn pairwise_accuracy(items: &[(u32, f64, f64)]) -> Option<f64> {
    let (mut right, mut total) = (0u64, 0u64);
    for (i, a) in items.iter().enumerate() {
        for b in &items[i + 1..] {
            if a.0 != b.0 || a.1 == b.1 {
                continue;
            }
            total += 1;
            if (a.1 < b.1) == (a.2 > b.2) {
                right += 1;
            }
        }
    }
    (total > 0).then(|| right as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::rng::Rng;

    /// A program as lowering gives them: an init store (the same in every program) and an
    /// update store whose first features explain the time; the rest constant, as many are.
    fn program(rng: &mut Rng) -> (ProgramFeatures, f64) {
        let init = vec![0.0f32; STORE_FEATURES];
        let update: Vec<f32> = (0..STORE_FEATURES)
            .map(|i| if i < 8 { rng.unit() as f32 } else { 1.0 })
            .collect();
        let seconds = 1e-3 * (1.0 + 2.0 * update[0] as f64 + update[1] as f64);
        (
            ProgramFeatures {
                rows: vec![init, update],
                draft_seconds: 1.0,
            },
            seconds,
        )
    }

    #[test]
    fn learns_to_rank_and_round_trips_through_its_encoding() {
        let mut rng = Rng::new(5);
        let mut m = CostModel::new();
        for i in 0..200 {
            let (f, s) = program(&mut rng);
            m.add(if i % 2 == 0 { "a" } else { "b" }, &f, Some(s));
        }
        m.add("a", &program(&mut rng).0, None);
        assert!(m.maybe_retrain());
        assert!(!m.maybe_retrain(), "no new samples: no retraining");
        let held: Vec<(ProgramFeatures, f64)> = (0..100).map(|_| program(&mut rng)).collect();
        let items: Vec<(u32, f64, f64)> = held
            .iter()
            .map(|(f, s)| (0, *s, m.predict(f).unwrap()))
            .collect();
        let acc = pairwise_accuracy(&items).unwrap();
        assert!(acc > 0.9, "pairwise accuracy {acc}");

        let back = CostModel::decode(&m.encode()).unwrap();
        assert_eq!(back.programs(), 201);
        assert_eq!(back.warm_programs, 201);
        for (f, _) in &held[..10] {
            assert_eq!(back.predict(f), m.predict(f));
        }
    }

    #[test]
    fn keeps_only_the_most_recent_samples() {
        let mut rng = Rng::new(9);
        let mut m = CostModel::new();
        for _ in 0..MAX_SAVED_PROGRAMS + 10 {
            let (f, s) = program(&mut rng);
            m.add("t", &f, Some(s));
        }
        assert_eq!(
            CostModel::decode(&m.encode()).unwrap().programs(),
            MAX_SAVED_PROGRAMS
        );
    }

    #[test]
    fn refuses_what_it_did_not_write() {
        let mut rng = Rng::new(1);
        let mut m = CostModel::new();
        let (f, s) = program(&mut rng);
        m.add("t", &f, Some(s));
        let bytes = m.encode();
        assert!(CostModel::decode(b"garbage").is_err());
        assert!(CostModel::decode(&bytes[..bytes.len() - 3]).is_err());
        assert!(CostModel::decode(&bytes[..10]).is_err());
        let mut other = bytes.clone();
        let text = String::from_utf8_lossy(&other).replace("\"format\":1", "\"format\":7");
        other = text.into_bytes();
        assert!(CostModel::decode(&other).is_err());
    }
}
