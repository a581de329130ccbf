//! The initial stages of ttdb's own compute DAGs (`crate::ir::Dag`), with TE axis names
//! and the dataflow, so that replay checks consumers exactly.
use super::iterator::IterKind;
use super::state::{AxisInit, StageInit};
use crate::ir::{Dag, Operation};

/// One [`StageInit`] per DAG stage, in stage order.
pub fn stage_inits_from_dag(dag: &Dag) -> Vec<StageInit> {
    dag.stages
        .iter()
        .map(|st| match &st.op {
            Operation::Placeholder { shape } => StageInit {
                name: st.name.clone(),
                placeholder_shape: Some(shape.clone()),
                iters: Vec::new(),
                inputs: Some(Vec::new()),
            },
            Operation::Compute(c) => {
                let axis = |kind| {
                    move |a: &crate::ir::IterVar| AxisInit {
                        name: a.name.clone(),
                        extent: a.const_extent(),
                        kind,
                    }
                };
                let mut iters: Vec<AxisInit> = c.axes.iter().map(axis(IterKind::Spatial)).collect();
                iters.extend(c.reduce_axes.iter().map(axis(IterKind::Reduction)));
                let mut inputs: Vec<usize> = c.input_tensors().into_iter().map(|t| t.0).collect();
                inputs.sort_unstable();
                inputs.dedup();
                StageInit {
                    name: st.name.clone(),
                    placeholder_shape: None,
                    iters,
                    inputs: Some(inputs),
                }
            }
        })
        .collect()
}
