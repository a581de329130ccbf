//! Buffer and loop-variable names of a lowered kernel, and its parameters.
//!
//! Parameters are the DAG's placeholders in stage order (the workload key's argument order)
//! followed by its outputs: the order of [`ttdb_algo::ir::Dag::io_shapes`].
use super::{convert, LowerError, WeightLayout};
use crate::loopnest::{Buffer, BufferRole};
use std::collections::HashSet;
use ttdb_algo::ir::{Dag, TensorId};
use ttdb_algo::schedule::te::{Loc, TSchedule};

/// Unique identifiers from arbitrary names.
#[derive(Default, Clone, Debug)]
pub struct NameGen {
    used: HashSet<String>,
}

impl NameGen {
    pub fn fresh(&mut self, base: &str) -> String {
        let mut clean: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if clean.is_empty() || clean.starts_with(|c: char| c.is_ascii_digit()) {
            clean.insert(0, 'v');
        }
        if clean.len() > 40 {
            clean.truncate(40);
        }
        let mut name = clean.clone();
        let mut k = 1;
        while !self.used.insert(name.clone()) {
            name = format!("{clean}_{k}");
            k += 1;
        }
        name
    }
}

/// Buffer of every stage (placeholders and outputs are parameters, others temporaries;
/// inlined stages have none) and the kernel parameters in ABI order.
#[derive(Clone, Debug)]
pub struct Naming {
    pub buffer: Vec<Option<String>>,
    pub params: Vec<Buffer>,
    /// Stage of each parameter.
    pub param_stage: Vec<usize>,
    pub vars: NameGen,
}

impl Naming {
    pub fn new(dag: &Dag, sch: &TSchedule, layout: &WeightLayout) -> Result<Naming, LowerError> {
        let mut gen = NameGen::default();
        let stage_of = |t: TensorId| {
            sch.stages
                .iter()
                .position(|s| s.op.dag_tensor == Some(t.0))
                .ok_or_else(|| {
                    LowerError::Mismatch(format!(
                        "no stage computes DAG tensor {} ({})",
                        t.0,
                        dag.stage(t).name
                    ))
                })
        };
        let mut buffer: Vec<Option<String>> = vec![None; sch.stages.len()];
        let mut params = Vec::new();
        let mut param_stage = Vec::new();
        for (role, tensors) in [
            (BufferRole::Input, dag.placeholders()),
            (BufferRole::Output, dag.outputs.clone()),
        ] {
            for t in tensors {
                let s = stage_of(t)?;
                let st = &sch.stages[s];
                if role == BufferRole::Output && st.loc != Loc::Root {
                    return Err(LowerError::InvalidSchedule(format!(
                        "output {} is not computed at root",
                        st.op.name
                    )));
                }
                if buffer[s].is_some() {
                    return Err(LowerError::Unsupported(format!(
                        "{} is both an input and an output",
                        st.op.name
                    )));
                }
                let name = gen.fresh(&st.op.name);
                let mut shape = match role {
                    BufferRole::Input => layout.param_shape(dag, t),
                    _ => st.op.shape()?,
                };
                if shape.is_empty() {
                    shape = vec![1];
                }
                params.push(Buffer::new(
                    &name,
                    convert::buffer_dtype(st.op.dtype)?,
                    &shape,
                    role,
                ));
                param_stage.push(s);
                buffer[s] = Some(name);
            }
        }
        for (s, st) in sch.stages.iter().enumerate() {
            if buffer[s].is_none() && !st.op.is_placeholder() && st.loc != Loc::Inline {
                buffer[s] = Some(gen.fresh(&st.op.name));
            }
        }
        Ok(Naming {
            buffer,
            params,
            param_stage,
            vars: gen,
        })
    }

    /// Gives the input parameters the shapes `layout` packs them into.
    pub fn reshape_inputs(
        &mut self,
        dag: &Dag,
        sch: &TSchedule,
        layout: &WeightLayout,
    ) -> Result<(), LowerError> {
        for (p, &s) in self.params.iter_mut().zip(&self.param_stage) {
            if p.role != BufferRole::Input {
                continue;
            }
            let t = sch.stages[s].op.dag_tensor.ok_or_else(|| {
                LowerError::Internal(format!("parameter {} has no DAG tensor", p.name))
            })?;
            let mut shape = layout.param_shape(dag, TensorId(t));
            if shape.is_empty() {
                shape = vec![1];
            }
            *p = Buffer::new(&p.name, p.dtype, &shape, BufferRole::Input);
        }
        Ok(())
    }
}
