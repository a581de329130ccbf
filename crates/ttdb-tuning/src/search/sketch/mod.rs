//! Sketch generation for CPUs (TVM `sketch_policy.cc` `GenerateSketches` and the derivation
//! rules of `sketch_policy_rules.cc`; facts in `shared/spec/search.md` §1).
//!
//! A sketch is a list of ttdb's own transform steps (the same types replay and the record
//! writer use) whose tile sizes are still open: the SP steps listed in
//! [`Sketch::open_splits`] carry placeholder lengths of 1 until the initial population
//! ([`super::init`]) fills them. So every state the search makes is an Ansor record.
//!
//! Derivation is breadth-first over (state, stage id) from the last stage, trying the CPU
//! rules in TVM's order: AlwaysInline, SimplifyComputeWithConstTensor, AddRfactor,
//! AddCacheWrite, MultiLevelTilingWithFusion, MultiLevelTiling ("SSRSRS"), SkipStage. A
//! rule can skip, apply (and let the next rule try the same state) or apply and skip the
//! rest, as in TVM.
mod analysis;
mod rules;

pub use analysis::{is_tiled, stage_has_reduce_iter, Analysis};

use std::fmt;
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::{stage_inits_from_dag, State};
use ttdb_format::ansor::Step;

/// What the rules need to know about the machine. TVM hard-codes 64-byte vectors; ttdb
/// takes the host's lanes and cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HardwareParams {
    pub num_cores: usize,
    /// fp32 lanes of one vector register (8 on AVX2, 16 on AVX-512).
    pub vector_lanes: usize,
}

impl HardwareParams {
    /// The cores and vector width of `target`.
    pub fn of(target: &ttdb_backend::target::Target) -> HardwareParams {
        HardwareParams {
            num_cores: target.cores(),
            vector_lanes: target.lanes(),
        }
    }

    /// The longest inner loop (product of fused loops) vectorized by the initial population:
    /// two registers' worth (TVM's fixed 16 on AVX2, 32 on AVX-512).
    pub fn max_vectorize_size(&self) -> i64 {
        2 * self.vector_lanes.max(1) as i64
    }
}

/// A sketch: the steps of a partial schedule and the SP steps whose lengths are open.
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    pub steps: Vec<Step>,
    /// Indices into `steps` of the SP steps whose lengths the initial population fills.
    pub open_splits: Vec<usize>,
    /// Those of them that split their stage's innermost spatial loop (the one a vector
    /// will run along).
    pub vector_splits: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SketchError(pub String);

impl fmt::Display for SketchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for SketchError {}

/// How a rule applies to a (state, stage), TVM's `ConditionKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    Skip,
    Apply,
    ApplyAndSkipRest,
}

/// A state under derivation with its open splits.
#[derive(Clone)]
pub struct Partial {
    pub state: State,
    pub open_splits: Vec<usize>,
    pub vector_splits: Vec<usize>,
}

/// Every CPU sketch of `dag`, in TVM's order.
pub fn generate_sketches(dag: &Dag, hw: &HardwareParams) -> Result<Vec<Sketch>, SketchError> {
    let init = State::new(&stage_inits_from_dag(dag))
        .map_err(|e| SketchError(format!("the DAG has no valid initial state: {e}")))?;
    let start = init.stages().len() as i64 - 1;
    let mut now: Vec<(Partial, i64)> = vec![(
        Partial {
            state: init,
            open_splits: vec![],
            vector_splits: vec![],
        },
        start,
    )];
    let mut out = Vec::new();
    // Every rule application moves to an earlier stage or turns a stage into its cache
    // stage once, so derivation ends; the cap guards against a rule bug looping.
    for _level in 0..4 * (start + 2) + 8 {
        if now.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for (p, stage) in now {
            if stage < 0 {
                out.push(Sketch {
                    steps: p.state.transform_steps().to_vec(),
                    open_splits: p.open_splits,
                    vector_splits: p.vector_splits,
                });
                continue;
            }
            let s = stage as usize;
            let analysis = Analysis::new(dag, &p.state);
            for rule in rules::CPU_RULES {
                let cond = (rule.condition)(&analysis, &p.state, s, hw);
                if cond == Condition::Skip {
                    continue;
                }
                next.extend((rule.apply)(&analysis, &p, s));
                if cond == Condition::ApplyAndSkipRest {
                    break;
                }
            }
        }
        now = next;
    }
    if !now.is_empty() {
        return Err(SketchError(
            "sketch derivation did not terminate (a rule keeps revisiting a stage)".into(),
        ));
    }
    if out.is_empty() {
        return Err(SketchError("no rule produced a sketch".into()));
    }
    Ok(out)
}

#[cfg(test)]
pub mod tests;
