//! TE's dataflow rewrites (`schedule_dataflow_rewrite.cc`): cache_read, cache_write and
//! rfactor insert a stage and renumber the later ones; CHR, CHW and RF call these.
use super::op::{self, LAxis, LBody, LKind, LOp};
use super::{Loc, Rel, TSchedule, TStage, TeError};
use crate::ir::{self, Expr, TensorId};
use std::collections::HashMap;

impl TSchedule {
    /// After `count` stages were inserted at `at`: loads and attach targets move.
    fn shift(&mut self, at: usize, count: usize) {
        for st in &mut self.stages {
            st.op.shift_tensors(at, count);
            if let Loc::At { stage, .. } = &mut st.loc {
                if *stage >= at {
                    *stage += count;
                }
            }
        }
    }

    /// TE `cache_read`: a copy of stage `s` in `scope`, inserted after it, which the
    /// `readers` (ids before the insertion) read instead.
    pub(crate) fn cache_read(
        &mut self,
        s: usize,
        scope: &str,
        readers: &[u32],
    ) -> Result<(), TeError> {
        let src = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("CHR of stage {s}")))?;
        let mut base = src.op.name.clone();
        while self
            .stages
            .iter()
            .any(|st| st.op.name == format!("{base}.{scope}"))
        {
            base.push_str(".d");
        }
        let cache = op::cache_read(&src.op, s, format!("{base}.{scope}"))?;
        self.shift(s + 1, 1);
        self.stages.insert(s + 1, TStage::from_op(cache));
        for &r in readers {
            let reader = self.stage_mut(r + 1)?;
            reader
                .op
                .map_exprs(&|e| e.remap_tensors(&|t| if t.0 == s { TensorId(s + 1) } else { t }));
        }
        Ok(())
    }

    /// TE `cache_write`: stage `s` computes into a new stage in `scope`, inserted before it,
    /// and copies it out.
    pub(crate) fn cache_write(&mut self, s: usize, scope: &str) -> Result<(), TeError> {
        let st = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("CHW of stage {s}")))?;
        if !st.rels.is_empty() || st.loc != Loc::Root {
            return Err(TeError::Mismatch(format!(
                "CHW of {} after loop steps",
                st.op.name
            )));
        }
        let original = st.op.clone();
        self.shift(s, 1);
        let (cache, copy) = op::cache_write(&original, scope, s)?;
        self.stages[s] = TStage::from_op(copy);
        self.stages.insert(s, TStage::from_op(cache));
        Ok(())
    }

    /// TE `Schedule::rfactor` (spec §2.3): the partial reduction `<op>.rf` at `s`, the final
    /// `<op>.repl` at `s + 1` in the original's place.
    pub(crate) fn rfactor(
        &mut self,
        s: usize,
        iter: u32,
        factor_pos: usize,
    ) -> Result<(), TeError> {
        let st = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("RF of stage {s}")))?;
        let (rf, repl) = rfactor_ops(st, iter, factor_pos, s)?;
        let loc = match st.loc {
            Loc::At { stage, var } if stage >= s => Loc::At {
                stage: stage + 1,
                var,
            },
            other => other,
        };
        self.shift(s, 1);
        let mut repl = TStage::from_op(repl);
        repl.loc = loc;
        self.stages[s] = repl;
        self.stages.insert(s, TStage::from_op(rf));
        Ok(())
    }
}

/// Variables connected to `start` through relations (TE's PassUp/PassDownBitMaskOr).
fn component(st: &TStage, start: usize) -> Vec<bool> {
    let mut touched = vec![false; st.vars.len()];
    touched[start] = true;
    loop {
        let mut changed = false;
        for r in &st.rels {
            let group: [usize; 3] = match *r {
                Rel::Split {
                    parent,
                    outer,
                    inner,
                    ..
                } => [parent, outer, inner],
                Rel::Fuse {
                    outer,
                    inner,
                    fused,
                } => [outer, inner, fused],
            };
            if group.iter().any(|&v| touched[v]) && !group.iter().all(|&v| touched[v]) {
                for v in group {
                    touched[v] = true;
                }
                changed = true;
            }
        }
        if !changed {
            return touched;
        }
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

/// The ops TE's rfactor builds from stage `st` (at index `s`) and its loop `iter`.
fn rfactor_ops(st: &TStage, iter: u32, factor_pos: usize, s: usize) -> Result<(LOp, LOp), TeError> {
    let LKind::Compute {
        axes,
        reduce_axes,
        body:
            LBody::Reduce {
                combiner,
                source,
                init,
                cond,
            },
    } = &st.op.kind
    else {
        return Err(TeError::Mismatch(format!(
            "RF of {}, which is not a reduction",
            st.op.name
        )));
    };
    let axis = st.leaf(iter)?;
    if factor_pos > axes.len() {
        return Err(TeError::Mismatch(format!(
            "RF factor position {factor_pos}"
        )));
    }
    let touched = component(st, axis);
    if (0..st.n_axes).any(|v| touched[v]) {
        return Err(TeError::Mismatch("RF axis touches a spatial axis".into()));
    }
    // domains of the touched variables (PassDownDomain with allow_missing: no tightening)
    let mut dom: Vec<Option<i64>> = vec![None; st.vars.len()];
    for (k, r) in reduce_axes.iter().enumerate() {
        if touched[st.n_axes + k] {
            let e = r.const_extent().ok_or_else(|| {
                TeError::Unsupported(format!("RF of the non-constant reduce axis {}", r.name))
            })?;
            dom[st.n_axes + k] = Some(e);
        }
    }
    for r in &st.rels {
        match *r {
            Rel::Split {
                parent,
                outer,
                inner,
                factor,
                nparts,
            } => {
                let Some(p) = dom[parent] else { continue };
                if let Some(f) = factor {
                    dom[inner] = Some(f);
                    dom[outer] = Some(ceil_div(p, f));
                } else if let Some(n) = nparts {
                    dom[outer] = Some(n);
                    dom[inner] = Some(ceil_div(p, n));
                }
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                if let (Some(a), Some(b)) = (dom[outer], dom[inner]) {
                    dom[fused] = Some(
                        a.checked_mul(b)
                            .ok_or_else(|| TeError::TooLarge("fused extent".into()))?,
                    );
                }
            }
        }
    }
    // values of the touched variables from the touched leaves (PassUpIndex)
    let mut value: Vec<Option<Expr>> = vec![None; st.vars.len()];
    let mut ranges = HashMap::new();
    for &l in &st.leaves {
        if touched[l] {
            let e =
                dom[l].ok_or_else(|| TeError::Internal("rfactor leaf without a domain".into()))?;
            value[l] = Some(if e == 1 {
                Expr::int(0)
            } else {
                Expr::var(st.vars[l].name.clone())
            });
            ranges.insert(st.vars[l].name.clone(), ir::bounds::Interval::range(e));
        }
    }
    let mut flag = vec![false; st.vars.len()];
    for r in st.rels.iter().rev() {
        match *r {
            Rel::Split {
                parent,
                outer,
                inner,
                ..
            } => {
                if let (Some(o), Some(i), Some(ie)) =
                    (value[outer].clone(), value[inner].clone(), dom[inner])
                {
                    value[parent] = Some(i + o * ie);
                }
                flag[parent] = flag[outer]
                    || flag[inner]
                    || dom[outer]
                        .zip(dom[inner])
                        .map(|(a, b)| a as i128 * b as i128)
                        != dom[parent].map(i128::from);
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                if let (Some(f), Some(ie)) = (value[fused].clone(), dom[inner]) {
                    value[outer] = Some(Expr::floordiv(f.clone(), ie));
                    value[inner] = Some(Expr::floormod(f, ie));
                }
                flag[outer] = flag[fused];
                flag[inner] = flag[fused];
            }
        }
    }
    // MakeBoundCheck over the touched variables
    let mut preds: Vec<Expr> = Vec::new();
    for v in 0..st.vars.len() {
        if !touched[v] || !flag[v] {
            continue;
        }
        let (Some(val), Some(e)) = (&value[v], dom[v]) else {
            continue;
        };
        let provable = ir::bounds::int_bounds(val, &ranges).is_some_and(|iv| iv.hi < e);
        if !provable {
            preds.push(Expr::lt(val.clone(), e));
        }
    }
    let mut vsub = HashMap::new();
    let mut rf_reduce = Vec::new();
    for (k, r) in reduce_axes.iter().enumerate() {
        let v = st.n_axes + k;
        if touched[v] {
            let val = value[v]
                .clone()
                .ok_or_else(|| TeError::Internal(format!("rfactor: no value for {}", r.name)))?;
            vsub.insert(r.name.clone(), val);
        } else {
            rf_reduce.push(r.clone());
        }
    }
    for &l in &st.leaves {
        if touched[l] && l != axis {
            rf_reduce.push(LAxis::new(st.vars[l].name.clone(), dom[l].unwrap_or(1)));
        }
    }
    let axis_ext =
        dom[axis].ok_or_else(|| TeError::Internal("rfactor axis without a domain".into()))?;
    let mut rf_axes = axes.clone();
    rf_axes.insert(factor_pos, LAxis::new(st.vars[axis].name.clone(), axis_ext));
    // the existing condition too: an rfactor of an rf stage meets the first one's predicates
    let mut conds: Vec<Expr> = cond.iter().map(|c| c.substitute(&vsub)).collect();
    conds.extend(preds.into_iter().map(|p| p.substitute(&vsub)));
    let rf = LOp {
        name: format!("{}.rf", st.op.name),
        dtype: st.op.dtype,
        kind: LKind::Compute {
            axes: rf_axes,
            reduce_axes: rf_reduce,
            body: LBody::Reduce {
                combiner: *combiner,
                source: source.substitute(&vsub),
                init: init.clone(),
                cond: Expr::all(conds),
            },
        },
        dag_tensor: None,
        attrs_of: None,
    };
    let repl_axes: Vec<LAxis> = axes
        .iter()
        .enumerate()
        .map(|(k, a)| LAxis {
            name: format!("ax{k}"),
            extent: a.extent.clone(),
        })
        .collect();
    let v_name = format!("{}.v", st.vars[axis].name);
    let mut idx: Vec<Expr> = repl_axes
        .iter()
        .map(|a| Expr::var(a.name.clone()))
        .collect();
    idx.insert(factor_pos, Expr::var(v_name.clone()));
    let repl = LOp {
        name: format!("{}.repl", st.op.name),
        dtype: st.op.dtype,
        kind: LKind::Compute {
            axes: repl_axes,
            reduce_axes: vec![LAxis::new(v_name, axis_ext)],
            body: LBody::Reduce {
                combiner: *combiner,
                source: Expr::Load {
                    tensor: TensorId(s),
                    indices: idx,
                    dtype: st.op.dtype,
                },
                init: init.clone(),
                cond: None,
            },
        },
        dag_tensor: st.op.dag_tensor,
        attrs_of: None,
    };
    Ok((rf, repl))
}
