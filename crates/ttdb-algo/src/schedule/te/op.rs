//! The ops of a schedule after its dataflow rewrites (TE `schedule_dataflow_rewrite.cc`):
//! cache_write, cache_read and rfactor create stages whose bodies ttdb builds here, and
//! `compute_inline` substitutes bodies into their consumers (TE `InjectInline`).
//!
//! Bodies stay `ir::Expr` with TE axis variables; a load's tensor id is the *current* stage
//! index (stage insertions renumber them, like TVM's stage list).
use super::TeError;
use crate::ir::{self, Body, Combiner, Dag, Expr, Operation, TensorId};
use std::collections::HashMap;

/// One axis of an op: TE variable name and extent (constant, or an expression of the op's
/// spatial axes for windows of adaptive pooling and sparse rows).
#[derive(Clone, Debug, PartialEq)]
pub struct LAxis {
    pub name: String,
    pub extent: Expr,
}

impl LAxis {
    pub fn new(name: impl Into<String>, extent: i64) -> LAxis {
        LAxis {
            name: name.into(),
            extent: Expr::int(extent),
        }
    }

    pub fn const_extent(&self) -> Option<i64> {
        self.extent.as_int()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum LBody {
    Expr(Expr),
    /// `out[axes] = combine(init, source over the reduce axes where cond)`.
    Reduce {
        combiner: Combiner,
        source: Expr,
        init: Expr,
        cond: Option<Expr>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum LKind {
    Placeholder {
        shape: Vec<i64>,
    },
    Compute {
        axes: Vec<LAxis>,
        reduce_axes: Vec<LAxis>,
        body: LBody,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct LOp {
    pub name: String,
    pub dtype: ir::DType,
    pub kind: LKind,
    /// The DAG tensor this op's output stands for (the op consumers of that tensor read), if any.
    pub dag_tensor: Option<usize>,
    /// The DAG op whose compute attributes (`layout_free_placeholders`) this op carries: TE
    /// gives an op's attributes to both stages of its cache_write; cache_read and rfactor
    /// stages have none.
    pub attrs_of: Option<usize>,
}

impl LOp {
    pub fn axes(&self) -> &[LAxis] {
        match &self.kind {
            LKind::Compute { axes, .. } => axes,
            LKind::Placeholder { .. } => &[],
        }
    }

    pub fn reduce_axes(&self) -> &[LAxis] {
        match &self.kind {
            LKind::Compute { reduce_axes, .. } => reduce_axes,
            LKind::Placeholder { .. } => &[],
        }
    }

    pub fn is_placeholder(&self) -> bool {
        matches!(self.kind, LKind::Placeholder { .. })
    }

    /// Output shape (constant spatial extents).
    pub fn shape(&self) -> Result<Vec<i64>, TeError> {
        match &self.kind {
            LKind::Placeholder { shape } => Ok(shape.clone()),
            LKind::Compute { axes, .. } => axes
                .iter()
                .map(|a| {
                    a.const_extent().ok_or_else(|| {
                        TeError::Unsupported(format!("{}: non-constant axis {}", self.name, a.name))
                    })
                })
                .collect(),
        }
    }

    /// Every expression of the op (body, condition, reduce extents), for walks.
    pub fn exprs(&self) -> Vec<&Expr> {
        let mut v = Vec::new();
        if let LKind::Compute {
            reduce_axes, body, ..
        } = &self.kind
        {
            v.extend(reduce_axes.iter().map(|r| &r.extent));
            match body {
                LBody::Expr(e) => v.push(e),
                LBody::Reduce {
                    source, init, cond, ..
                } => {
                    v.push(source);
                    v.push(init);
                    v.extend(cond.iter());
                }
            }
        }
        v
    }

    /// Ids of the stages this op reads.
    pub fn inputs(&self) -> Vec<TensorId> {
        let mut out = Vec::new();
        for e in self.exprs() {
            e.input_tensors(&mut out);
        }
        out
    }

    /// Rewrites every expression of the op.
    pub fn map_exprs(&mut self, f: &dyn Fn(&Expr) -> Expr) {
        let _ = self.try_map_exprs(&mut |e| Ok(f(e)));
    }

    /// Rewrites every expression of the op; stops at the first error.
    pub fn try_map_exprs(
        &mut self,
        f: &mut dyn FnMut(&Expr) -> Result<Expr, TeError>,
    ) -> Result<(), TeError> {
        if let LKind::Compute {
            reduce_axes, body, ..
        } = &mut self.kind
        {
            for r in reduce_axes.iter_mut() {
                r.extent = f(&r.extent)?;
            }
            match body {
                LBody::Expr(e) => *e = f(e)?,
                LBody::Reduce {
                    source, init, cond, ..
                } => {
                    *source = f(source)?;
                    *init = f(init)?;
                    if let Some(c) = cond {
                        *c = f(c)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Renumbers loads after `count` stages were inserted at `at`.
    pub fn shift_tensors(&mut self, at: usize, count: usize) {
        self.map_exprs(&|e| {
            e.remap_tensors(&|t| if t.0 >= at { TensorId(t.0 + count) } else { t })
        });
    }
}

/// The initial ops: one per DAG stage.
pub fn ops_from_dag(dag: &Dag) -> Vec<LOp> {
    dag.stages
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let kind = match &st.op {
                Operation::Placeholder { shape } => LKind::Placeholder {
                    shape: shape.clone(),
                },
                Operation::Compute(c) => {
                    let axis = |a: &ir::IterVar| LAxis {
                        name: a.name.clone(),
                        extent: a.extent.clone(),
                    };
                    let body = match &c.body {
                        Body::Expr(e) => LBody::Expr(e.clone()),
                        Body::Reduce {
                            combiner,
                            source,
                            init,
                        } => LBody::Reduce {
                            combiner: *combiner,
                            source: source.clone(),
                            init: init.clone(),
                            cond: None,
                        },
                    };
                    LKind::Compute {
                        axes: c.axes.iter().map(axis).collect(),
                        reduce_axes: c.reduce_axes.iter().map(axis).collect(),
                        body,
                    }
                }
            };
            LOp {
                name: st.name.clone(),
                dtype: st.dtype,
                kind,
                dag_tensor: Some(i),
                attrs_of: Some(i),
            }
        })
        .collect()
}

fn rename_vars(e: &Expr, map: &HashMap<String, Expr>) -> Expr {
    e.substitute(map)
}

/// TE `cache_write` of a fresh stage: `(cache op, copy op)`. The cache computes the original
/// body on axes renamed `<axis>.c` (same reduce axes); the copy keeps the name and axes and
/// reads the cache, which will be at stage index `cache_index`.
pub fn cache_write(op: &LOp, scope: &str, cache_index: usize) -> Result<(LOp, LOp), TeError> {
    let LKind::Compute {
        axes,
        reduce_axes,
        body,
    } = &op.kind
    else {
        return Err(TeError::Internal(format!(
            "cache_write of placeholder {}",
            op.name
        )));
    };
    let renamed: HashMap<String, Expr> = axes
        .iter()
        .map(|a| (a.name.clone(), Expr::var(format!("{}.c", a.name))))
        .collect();
    let new_axes: Vec<LAxis> = axes
        .iter()
        .map(|a| LAxis {
            name: format!("{}.c", a.name),
            extent: a.extent.clone(),
        })
        .collect();
    let new_body = match body {
        LBody::Expr(e) => LBody::Expr(rename_vars(e, &renamed)),
        LBody::Reduce {
            combiner,
            source,
            init,
            cond,
        } => LBody::Reduce {
            combiner: *combiner,
            source: rename_vars(source, &renamed),
            init: rename_vars(init, &renamed),
            cond: cond.as_ref().map(|c| rename_vars(c, &renamed)),
        },
    };
    let new_reduce: Vec<LAxis> = reduce_axes
        .iter()
        .map(|r| LAxis {
            name: r.name.clone(),
            extent: rename_vars(&r.extent, &renamed),
        })
        .collect();
    let cache = LOp {
        name: format!("{}.{scope}", op.name),
        dtype: op.dtype,
        kind: LKind::Compute {
            axes: new_axes,
            reduce_axes: new_reduce,
            body: new_body,
        },
        dag_tensor: None,
        attrs_of: op.attrs_of,
    };
    let load = Expr::Load {
        tensor: TensorId(cache_index),
        indices: axes.iter().map(|a| Expr::var(a.name.clone())).collect(),
        dtype: op.dtype,
    };
    let copy = LOp {
        name: op.name.clone(),
        dtype: op.dtype,
        kind: LKind::Compute {
            axes: axes.clone(),
            reduce_axes: vec![],
            body: LBody::Expr(load),
        },
        dag_tensor: op.dag_tensor,
        attrs_of: op.attrs_of,
    };
    Ok((cache, copy))
}

/// TE `cache_read`: `compute(shape, λ ax: src[ax])` named `name`, reading stage `source`.
pub fn cache_read(src: &LOp, source: usize, name: String) -> Result<LOp, TeError> {
    let shape = src.shape()?;
    let axes: Vec<LAxis> = shape
        .iter()
        .enumerate()
        .map(|(i, &e)| LAxis::new(format!("ax{i}"), e))
        .collect();
    let load = Expr::Load {
        tensor: TensorId(source),
        indices: axes.iter().map(|a| Expr::var(a.name.clone())).collect(),
        dtype: src.dtype,
    };
    Ok(LOp {
        name,
        dtype: src.dtype,
        kind: LKind::Compute {
            axes,
            reduce_axes: vec![],
            body: LBody::Expr(load),
        },
        dag_tensor: None,
        attrs_of: None,
    })
}

/// Substitutes the bodies of inlined ops into their readers (TE `InjectInline`): returns the
/// ops with no load of an inlined stage left. `inlined[i]` says whether op `i` is inlined.
pub fn inject_inline(ops: &[LOp], inlined: &[bool]) -> Result<Vec<LOp>, TeError> {
    let mut out: Vec<LOp> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let mut op = op.clone();
        // inlined producers come before their readers and are already expanded in `out`
        op.try_map_exprs(&mut |e| {
            expand(e, &out, inlined)
                .map_err(|m| TeError::Internal(format!("inlining into stage {i}: {m}")))
        })?;
        out.push(op);
    }
    Ok(out)
}

fn expand(e: &Expr, done: &[LOp], inlined: &[bool]) -> Result<Expr, String> {
    let mut failure = None;
    let r = e.transform(&mut |x| match x {
        Expr::Load {
            tensor, indices, ..
        } if inlined.get(tensor.0) == Some(&true) => {
            let Some(src) = done.get(tensor.0) else {
                failure = Some(format!("stage {} is read before it is defined", tensor.0));
                return Some(x.clone());
            };
            let LKind::Compute {
                axes,
                reduce_axes,
                body: LBody::Expr(body),
            } = &src.kind
            else {
                failure = Some(format!(
                    "{} cannot be inlined (not an element-wise op)",
                    src.name
                ));
                return Some(x.clone());
            };
            if !reduce_axes.is_empty() {
                failure = Some(format!("{} cannot be inlined (a reduction)", src.name));
                return Some(x.clone());
            }
            let idx: Vec<Expr> = match indices
                .iter()
                .map(|i| expand(i, done, inlined))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(v) => v,
                Err(m) => {
                    failure = Some(m);
                    return Some(x.clone());
                }
            };
            let map: HashMap<String, Expr> = axes.iter().map(|a| a.name.clone()).zip(idx).collect();
            Some(body.substitute(&map))
        }
        _ => None,
    });
    match failure {
        Some(m) => Err(m),
        None => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_substitutes_indices() {
        // A placeholder; B[i] = A[i] * 2; C[j] = B[j + 1] + B[j]
        let a = LOp {
            name: "A".into(),
            dtype: ir::DType::F32,
            kind: LKind::Placeholder { shape: vec![5] },
            dag_tensor: Some(0),
            attrs_of: None,
        };
        let ld = |t: usize, i: Expr| Expr::Load {
            tensor: TensorId(t),
            indices: vec![i],
            dtype: ir::DType::F32,
        };
        let b = LOp {
            name: "B".into(),
            dtype: ir::DType::F32,
            kind: LKind::Compute {
                axes: vec![LAxis::new("i", 5)],
                reduce_axes: vec![],
                body: LBody::Expr(ld(0, Expr::var("i")) * Expr::f32(2.0)),
            },
            dag_tensor: Some(1),
            attrs_of: Some(1),
        };
        let c = LOp {
            name: "C".into(),
            dtype: ir::DType::F32,
            kind: LKind::Compute {
                axes: vec![LAxis::new("j", 4)],
                reduce_axes: vec![],
                body: LBody::Expr(ld(1, Expr::var("j") + 1) + ld(1, Expr::var("j"))),
            },
            dag_tensor: Some(2),
            attrs_of: Some(2),
        };
        let out = inject_inline(&[a, b, c], &[false, true, false]).unwrap();
        let LKind::Compute {
            body: LBody::Expr(e),
            ..
        } = &out[2].kind
        else {
            panic!()
        };
        assert_eq!(out[2].inputs(), vec![TensorId(0)]);
        assert_eq!(e.node_count(), 11, "{e:?}");
    }
}
