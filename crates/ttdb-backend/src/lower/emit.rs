//! Loop-nest emission (TE `MakeComputeStmt`, `MakeLoopNest`, `ScheduleOps`' attach
//! injection and realize scopes).
//!
//! * Loops: one per leaf variable of extent > 1 (extent-1 loops bind their variable to 0),
//!   kind from the annotation; an `auto_unroll_max_step` pragma wraps the loop it was put on
//!   (TE emits the pragma `AttrStmt` before the `For` of that leaf).
//! * A stage computed at a loop is emitted first in that loop's body, inside an `Allocate`
//!   of its region, in stage order when several share the loop.
//! * Reductions: the init sits just outside the first loop that touches a reduce axis, in
//!   its own nest over the remaining spatial loops (`x.init` variables); the update is
//!   innermost. Bound checks wrap the store as nested `if (likely(..))`.
use super::bound::{pass_up, split_checks, Bounds, StageLoops};
use super::convert::{self, Converter};
use super::layout;
use super::names::Naming;
use super::{LowerError, WeightLayout};
use crate::loopnest::{
    simplify_expr, Attr, BinOp, Buffer, BufferRole, CmpOp, DType, Expr, ForKind, Kernel, Stmt,
};
use std::collections::{HashMap, HashSet};
use ttdb_algo::ir::{Combiner, Dag, TensorId};
use ttdb_algo::schedule::te::{LBody, LKind, Loc, Rel, TSchedule, TStage};
use ttdb_format::ansor::Annotation;

pub struct Emitter<'a> {
    pub dag: &'a Dag,
    pub sch: &'a TSchedule,
    pub b: &'a Bounds,
    pub names: &'a mut Naming,
    pub layout: &'a WeightLayout,
    ranges: HashMap<String, (i128, i128)>,
    attached: HashMap<(usize, usize), Vec<usize>>,
    /// Accesses to guard explicitly: `(buffer, printed simplified index, is_store)`.
    guarded: HashSet<(String, Vec<String>, bool)>,
}

/// Key of an access in [`Emitter::guarded`].
pub fn access_key(buf: &str, index: &[Expr], is_store: bool) -> (String, Vec<String>, bool) {
    (
        buf.to_string(),
        index
            .iter()
            .map(|i| crate::loopnest::printer::expr_to_string(&simplify_expr(i)))
            .collect(),
        is_store,
    )
}

/// `0 <= idx[d] < shape[d]` for every dimension.
fn in_bounds(idx: &[Expr], shape: &[i64]) -> Expr {
    let conds: Vec<Expr> = idx
        .iter()
        .zip(shape)
        .flat_map(|(i, &e)| {
            [
                Expr::cmp(CmpOp::Ge, i.clone(), Expr::int(0)),
                Expr::lt(i.clone(), Expr::int(e)),
            ]
        })
        .collect();
    conds
        .into_iter()
        .reduce(|a, b| Expr::And(Box::new(a), Box::new(b)))
        .unwrap_or(Expr::Int(1, DType::Bool))
}

fn guard(preds: &[Expr], body: Stmt) -> Stmt {
    preds.iter().rev().fold(body, |acc, p| {
        Stmt::if_(Expr::likely(convert::canon(p)), acc, None)
    })
}

fn loop_kind(ann: Annotation, constant: bool) -> Result<ForKind, LowerError> {
    Ok(match ann {
        Annotation::None => ForKind::Serial,
        Annotation::Unroll if constant => ForKind::Unrolled,
        Annotation::Unroll => {
            return Err(LowerError::Unsupported(
                "unroll of a loop with a non-constant extent".into(),
            ))
        }
        Annotation::Vectorize => ForKind::Vectorized,
        Annotation::Parallel => ForKind::Parallel,
        other => {
            return Err(LowerError::Unsupported(format!(
                "`{}` loops (GPU/tensorize annotations) on a CPU",
                other.name()
            )))
        }
    })
}

impl<'a> Emitter<'a> {
    pub fn new(
        dag: &'a Dag,
        sch: &'a TSchedule,
        b: &'a Bounds,
        names: &'a mut Naming,
        layout: &'a WeightLayout,
        guarded: HashSet<(String, Vec<String>, bool)>,
    ) -> Result<Emitter<'a>, LowerError> {
        let mut attached: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        for (s, st) in sch.stages.iter().enumerate() {
            if let Loc::At { stage, var } = st.loc {
                let pos = sch.stages[stage].leaves.iter().position(|&v| v == var);
                let pos =
                    pos.ok_or_else(|| LowerError::Internal("attach loop is not a leaf".into()))?;
                attached.entry((stage, pos)).or_default().push(s);
            }
        }
        Ok(Emitter {
            dag,
            sch,
            b,
            names,
            layout,
            ranges: b.ranges.clone(),
            attached,
            guarded,
        })
    }

    fn loops(&self, s: usize) -> Result<&'a StageLoops, LowerError> {
        self.b.stages[s]
            .as_ref()
            .ok_or_else(|| LowerError::Internal(format!("no loops for stage {s}")))
    }

    fn buffer(&self, s: usize) -> Result<String, LowerError> {
        self.names.buffer[s]
            .clone()
            .ok_or_else(|| LowerError::Internal(format!("stage {s} has no buffer")))
    }

    /// A load of stage `t` at global indices.
    fn load(&self, t: TensorId, idx: Vec<Expr>) -> Result<Expr, LowerError> {
        let st = self
            .sch
            .stages
            .get(t.0)
            .ok_or_else(|| LowerError::Internal("load of a missing stage".into()))?;
        let buf = self.buffer(t.0)?;
        let idx = match &st.op.kind {
            LKind::Placeholder { .. } => match st.op.dag_tensor {
                // a pre-packed weight: `(idx / div) % extent` per packed dimension, folded
                // with the loop ranges as TVM's simplifier does
                Some(d) if self.layout.is_packed(TensorId(d)) => self
                    .layout
                    .rewrite_index(self.dag, TensorId(d), idx)
                    .iter()
                    .map(|e| layout::fold_index(e, &self.ranges))
                    .collect(),
                Some(d) => self.layout.rewrite_index(self.dag, TensorId(d), idx),
                None => idx,
            },
            LKind::Compute { .. } => {
                if st.loc == Loc::Inline {
                    return Err(LowerError::Internal(format!(
                        "load of the inlined stage {}",
                        st.op.name
                    )));
                }
                let l = self.loops(t.0)?;
                idx.into_iter()
                    .zip(&l.root_min)
                    .map(|(i, m)| {
                        if m.as_int() == Some(0) {
                            i
                        } else {
                            Expr::sub(i, m.clone())
                        }
                    })
                    .collect()
            }
        };
        let idx: Vec<Expr> = if idx.is_empty() {
            vec![Expr::int(0)]
        } else {
            idx.iter().map(convert::simplify_index).collect()
        };
        // An index that depends on a loop of non-constant extent (adaptive pooling windows)
        // cannot be proven in bounds statically: guard the load itself (a no-op for every
        // in-bounds access, so for every input the DAG is defined on). One that depends on
        // data is left to the checker, which takes a loaded integer as its type's full range:
        // a clipped index (`take`, `gather_elements`) is proven, anything else is unproven
        // and guarded in the second emission. Guarded up front, `take`'s loads were masked
        // per lane in vector loops (vit_b_16's q, k, v slices: 0.19 ms each for 600 KB).
        let dynamic = |e: &Expr| convert::uses_var_where(e, &|v| self.b.dynamic.contains(v));
        if idx.iter().any(dynamic) || self.guarded.contains(&access_key(&buf, &idx, false)) {
            let (shape, dtype) = self.shape_of(t.0)?;
            let zero = if dtype.is_float() {
                Expr::Float(0.0, dtype)
            } else {
                Expr::Int(0, dtype)
            };
            return Ok(Expr::select(
                in_bounds(&idx, &shape),
                Expr::load(&buf, idx),
                zero,
            ));
        }
        Ok(Expr::load(&buf, idx))
    }

    /// A store, guarded when the bounds checker could not prove it.
    fn store(&self, s: usize, buf: &str, idx: Vec<Expr>, value: Expr) -> Result<Stmt, LowerError> {
        if self.guarded.contains(&access_key(buf, &idx, true)) {
            let (shape, _) = self.shape_of(s)?;
            let cond = in_bounds(&idx, &shape);
            return Ok(Stmt::if_(cond, Stmt::store(buf, idx, value), None));
        }
        Ok(Stmt::store(buf, idx, value))
    }

    /// Shape and element type of stage `s`'s buffer.
    fn shape_of(&self, s: usize) -> Result<(Vec<i64>, DType), LowerError> {
        let buf = self.buffer(s)?;
        if let Some(p) = self.names.params.iter().find(|p| p.name == buf) {
            return Ok((p.shape.clone(), p.dtype));
        }
        let b = self.temp_buffer(s)?;
        Ok((b.shape, b.dtype))
    }

    /// The whole kernel body: root stages in order, temporaries allocated around the rest.
    pub fn kernel(mut self, name: &str) -> Result<Kernel, LowerError> {
        let roots: Vec<usize> = (0..self.sch.stages.len())
            .filter(|&s| {
                !self.sch.stages[s].op.is_placeholder() && self.sch.stages[s].loc == Loc::Root
            })
            .collect();
        let mut body = Stmt::nop();
        for &s in roots.iter().rev() {
            let stmt = self.stage(s)?;
            body = if self.names.param_stage.contains(&s) {
                Stmt::seq(vec![stmt, body])
            } else {
                Stmt::allocate(self.temp_buffer(s)?, Stmt::seq(vec![stmt, body]))
            };
        }
        Ok(Kernel::new(name, self.names.params.clone(), body))
    }

    fn temp_buffer(&self, s: usize) -> Result<Buffer, LowerError> {
        let st = &self.sch.stages[s];
        let mut shape = self.loops(s)?.shape.clone();
        if shape.is_empty() {
            shape = vec![1];
        }
        Ok(Buffer::new(
            &self.buffer(s)?,
            convert::buffer_dtype(st.op.dtype)?,
            &shape,
            BufferRole::Temporary,
        ))
    }

    /// Stage `s`'s loop nest with everything attached to it.
    fn stage(&mut self, s: usize) -> Result<Stmt, LowerError> {
        let sch = self.sch;
        let st = &sch.stages[s];
        let l = self.loops(s)?;
        let buf = self.buffer(s)?;
        let bt = convert::buffer_dtype(st.op.dtype)?;
        let LKind::Compute {
            axes,
            reduce_axes,
            body,
        } = &st.op.kind
        else {
            return Err(LowerError::Internal("emit of a placeholder".into()));
        };
        let mut vars: HashMap<String, Expr> = HashMap::new();
        for (a, g) in axes.iter().chain(reduce_axes).zip(&l.global) {
            vars.insert(a.name.clone(), g.clone());
        }
        let store_idx = |vals: &[Option<Expr>]| -> Result<Vec<Expr>, LowerError> {
            if st.n_axes == 0 {
                return Ok(vec![Expr::int(0)]);
            }
            vals[..st.n_axes]
                .iter()
                .cloned()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| LowerError::Internal("axis without a value".into()))
        };
        let idx: Vec<Expr> = store_idx(&l.local)?
            .iter()
            .map(convert::simplify_index)
            .collect();
        let n = st.leaves.len();
        let this = &*self;
        let load = |t: TensorId, i: Vec<Expr>| this.load(t, i);
        let conv = Converter {
            vars: &vars,
            load: &load,
        };
        match body {
            LBody::Expr(e) => {
                let provide = self.store(
                    s,
                    &buf,
                    idx,
                    convert::store_value(convert::canon(&conv.expr(e)?), bt),
                )?;
                let inner = guard(&l.preds, provide);
                self.nest(s, 0, n, inner)
            }
            LBody::Reduce {
                combiner,
                source,
                init,
                cond,
            } => {
                // which loops touch spatial (1) and reduce (2) axes (PassDownBitMaskOr)
                let mut us = vec![0u8; st.vars.len()];
                us[..st.n_axes].fill(1);
                us[st.n_axes..st.n_root].fill(2);
                for rel in &st.rels {
                    match *rel {
                        Rel::Split {
                            parent,
                            outer,
                            inner,
                            ..
                        } => {
                            us[outer] |= us[parent];
                            us[inner] |= us[parent];
                        }
                        Rel::Fuse {
                            outer,
                            inner,
                            fused,
                        } => us[fused] = us[outer] | us[inner],
                    }
                }
                let begin = st.leaves.iter().position(|&v| us[v] & 2 != 0).unwrap_or(n);
                let mut cur = Expr::load(&buf, idx.clone());
                if bt.is_int() {
                    cur = Expr::cast(DType::I64, cur);
                }
                let src = convert::canon(&conv.expr(source)?);
                let value = match combiner {
                    Combiner::Sum => Expr::add(cur, src),
                    Combiner::Max => Expr::bin(BinOp::Max, cur, src),
                    Combiner::Min => Expr::bin(BinOp::Min, cur, src),
                };
                let mut update = self.store(s, &buf, idx, convert::store_value(value, bt))?;
                if let Some(c) = cond {
                    update = Stmt::if_(convert::canon(&conv.expr(c)?), update, None);
                }
                let update = guard(&l.preds, update);
                let init_value = convert::store_value(conv.expr(init)?, bt);
                let init = self.init_nest(s, begin, &us, &buf, init_value)?;
                let reduce = self.nest(s, begin, n, update)?;
                self.nest(s, 0, begin, Stmt::seq(vec![init, reduce]))
            }
        }
    }

    /// Wraps `inner` in the loops at positions `from..to` of stage `s`.
    fn nest(&mut self, s: usize, from: usize, to: usize, inner: Stmt) -> Result<Stmt, LowerError> {
        let mut body = inner;
        for p in (from..to).rev() {
            body = self.level(s, p, body)?;
        }
        Ok(body)
    }

    fn for_loop(
        &self,
        st: &TStage,
        l: &StageLoops,
        p: usize,
        var: &str,
        body: Stmt,
    ) -> Result<Stmt, LowerError> {
        let v = st.leaves[p];
        let ext = l.ext[v]
            .as_ref()
            .ok_or_else(|| LowerError::Internal("loop without an extent".into()))?;
        let kind = loop_kind(st.vars[v].ann, ext.as_const().is_some())?;
        let stmt = Stmt::for_(var, Expr::int(0), ext.e.clone(), kind, body);
        Ok(self.with_pragma(st, v, stmt))
    }

    fn with_pragma(&self, st: &TStage, v: usize, stmt: Stmt) -> Stmt {
        match st.pragma {
            Some((pv, max_step)) if pv == v => Stmt::attr(
                Attr::AutoUnroll {
                    max_step,
                    explicit: true,
                },
                stmt,
            ),
            _ => stmt,
        }
    }

    /// One loop level: the stages attached there, then `body`, inside the loop.
    fn level(&mut self, s: usize, p: usize, body: Stmt) -> Result<Stmt, LowerError> {
        let mut content = body;
        if let Some(list) = self.attached.get(&(s, p)).cloned() {
            for &a in list.iter().rev() {
                let stmt = self.stage(a)?;
                content = Stmt::allocate(self.temp_buffer(a)?, Stmt::seq(vec![stmt, content]));
            }
        }
        let st = &self.sch.stages[s];
        let l = self.loops(s)?;
        match &l.loop_var[p] {
            Some(v) => self.for_loop(st, l, p, v, content),
            None => Ok(self.with_pragma(st, st.leaves[p], content)),
        }
    }

    /// The init of a reduction (TE `ComputeLoopNest::Create`'s init nest): loops at
    /// `begin..` that touch a spatial axis, with fresh variables.
    fn init_nest(
        &mut self,
        s: usize,
        begin: usize,
        us: &[u8],
        buf: &str,
        value: Expr,
    ) -> Result<Stmt, LowerError> {
        let st = &self.sch.stages[s];
        let l = self.loops(s)?;
        let n = st.leaves.len();
        let mut init_var: Vec<Option<String>> = vec![None; n];
        for p in begin..n {
            if us[st.leaves[p]] != 2 {
                if let Some(v) = &l.loop_var[p] {
                    let fresh = self.names.vars.fresh(&format!("{v}_init"));
                    let r = self.ranges.get(v).copied().unwrap_or((0, 0));
                    self.ranges.insert(fresh.clone(), r);
                    init_var[p] = Some(fresh);
                }
            }
        }
        let pos_of: HashMap<usize, usize> =
            st.leaves.iter().enumerate().map(|(p, &v)| (v, p)).collect();
        let leaf_value = |v: usize| -> Option<Expr> {
            let p = pos_of[&v];
            if p < begin {
                return l.local[v].clone();
            }
            if us[v] == 2 {
                return None;
            }
            Some(init_var[p].as_deref().map_or(Expr::int(0), Expr::var))
        };
        let vals = pass_up(st, &l.ext, &leaf_value);
        let idx: Vec<Expr> = if st.n_axes == 0 {
            vec![Expr::int(0)]
        } else {
            vals[..st.n_axes]
                .iter()
                .cloned()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    LowerError::Internal(format!(
                        "{}: init index depends on a reduce loop",
                        st.op.name
                    ))
                })?
        };
        let preds = split_checks(st, l, &vals, &|v| us[v] == 2, &self.ranges);
        let idx: Vec<Expr> = idx.iter().map(convert::simplify_index).collect();
        let mut body = guard(&preds, self.store(s, buf, idx, value)?);
        for p in (begin..n).rev() {
            let v = st.leaves[p];
            if us[v] == 2 {
                continue;
            }
            body = match &init_var[p] {
                Some(iv) => self.for_loop(st, l, p, iv, body)?,
                None => self.with_pragma(st, v, body),
            };
        }
        Ok(body)
    }
}
