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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ansor::WorkloadKey;
    use crate::schedule::State;

    #[test]
    fn conv_dag_gives_the_oracle_initial_state_and_its_dataflow() {
        let key = WorkloadKey::parse(
            r#"["de7d1695278cf52778b038e6573d7626", 1, 14, 14, 1024, 1, 1, 1024, 512, 1, 1, 1, 512, 1, 7, 7, 512]"#,
        )
        .unwrap();
        let dag = crate::recognize::recognize(&key).unwrap().dag;
        let inits = stage_inits_from_dag(&dag);
        let st = State::new(&inits).unwrap();
        // `ansor_state_sim.py --dag KEY`
        assert_eq!(
            st.dump(),
            "0 placeholder placeholder [1,14,14,1024]
1 PaddedInput root unroll=0 : i0=1:S i1=14:S i2=14:S i3=1024:S
2 placeholder placeholder [1,1,1024,512]
3 Conv2dOutput root unroll=0 : nn=1:S yy=7:S xx=7:S ff=512:S ry=1:R rx=1:R rc=1024:R
4 placeholder placeholder [1,1,1,512]
5 T_add root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S
6 T_relu root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S"
        );
        let inputs: Vec<_> = inits.iter().map(|i| i.inputs.clone().unwrap()).collect();
        assert_eq!(
            inputs,
            [
                vec![],
                vec![0],
                vec![],
                vec![1, 2],
                vec![],
                vec![3, 4],
                vec![5]
            ]
        );
        assert_eq!(st.consumes(6, 1), Some(true));
        assert_eq!(st.consumes(5, 4), Some(true));
        assert_eq!(st.consumes(3, 4), Some(false));
    }
}
