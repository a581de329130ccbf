//! Bound inference (TE `InferBound` + `PassDownDomain` + `PassUpIndex`, `bound.cc`,
//! `message_passing.cc`).
//!
//! Stages are visited consumers first (reverse stage order; attach targets and consumers always
//! come later). A stage at root gets its full domain. A stage computed at a loop gets the
//! region its consumers read during one iteration of that loop: each consumer's index
//! expressions are written in loop variables, the loops enclosing the attach point stay
//! symbolic (fixed), the loops inside it range over their extents (relaxed). Each index is
//! decomposed as `fixed affine part + [lo, hi]`: the region's minimum is symbolic in the outer
//! loops and its extent a constant, so temporaries get constant shapes. Non-affine terms
//! that involve relaxed loops are bounded numerically (conservative, still exact for the
//! tile patterns Ansor emits).
//!
//! Loop extents then flow down the splits and fuses with TE's rules (an inner extent is
//! tightened to the parent's when the factor is larger), and every op axis gets its value
//! from the loop variables (`outer * extent(inner) + inner`, fused loops by div/mod).
use super::convert::{self, uses_var_where, Converter};
use super::names::Naming;
use super::LowerError;
use crate::loopnest::affine::{linearize, Linear};
use crate::loopnest::{simplify_expr, BinOp, Expr};
use std::collections::{HashMap, HashSet};
use ttdb_algo::ir::TensorId;
use ttdb_algo::schedule::te::{LKind, Loc, Rel, TSchedule, TStage};
use ttdb_algo::schedule::MAX_EXTENT;

/// A loop extent: an expression (constant except for data- or index-dependent reduction
/// windows) and a constant upper bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Ext {
    pub e: Expr,
    pub max: i64,
}

impl Ext {
    pub fn konst(v: i64) -> Ext {
        Ext {
            e: Expr::int(v),
            max: v,
        }
    }

    pub fn as_const(&self) -> Option<i64> {
        self.e.as_int()
    }
}

fn checked_ext(v: i128, what: &str) -> Result<i64, LowerError> {
    if (0..=MAX_EXTENT as i128).contains(&v) {
        Ok(v as i64)
    } else {
        Err(LowerError::TooLarge(format!("{what} = {v} is above 2^40")))
    }
}

fn ceil_div_ext(p: &Ext, f: i64) -> Ext {
    let max = p.max / f + i64::from(p.max % f != 0);
    match p.as_const() {
        Some(_) => Ext::konst(max),
        None => Ext {
            e: simplify_expr(&Expr::floordiv(
                Expr::add(p.e.clone(), Expr::int(f - 1)),
                Expr::int(f),
            )),
            max,
        },
    }
}

/// Everything lowering needs about the loops of one stage.
#[derive(Clone, Debug)]
pub struct StageLoops {
    /// Per variable, after `PassDownDomain`.
    pub ext: Vec<Option<Ext>>,
    /// Per root variable: the global index of local coordinate 0 (region minimum).
    pub root_min: Vec<Expr>,
    /// Per loop position: its variable, or None for a loop of extent 1 (not emitted).
    pub loop_var: Vec<Option<String>>,
    /// Per variable: value in local coordinates (`PassUpIndex`).
    pub local: Vec<Option<Expr>>,
    /// Per root variable: `local + root_min`.
    pub global: Vec<Expr>,
    /// Per variable: does it need a bound check (`PassUpBoundCheck`)?
    pub flag: Vec<bool>,
    /// Shape of the stage's buffer (region extents for a stage computed at a loop).
    pub shape: Vec<i64>,
    /// `MakeBoundCheck` predicates of the main nest.
    pub preds: Vec<Expr>,
}

pub struct Bounds {
    pub stages: Vec<Option<StageLoops>>,
    /// Every loop variable: inclusive range.
    pub ranges: HashMap<String, (i128, i128)>,
    /// Loop variables whose extent is not a constant (reduction windows).
    pub dynamic: HashSet<String>,
}

/// Interval of an `I64` index expression over variable ranges; None when unbounded
/// (loads, unknown variables, division by a range containing 0).
pub fn interval(e: &Expr, r: &HashMap<String, (i128, i128)>) -> Option<(i128, i128)> {
    let corners = |a: (i128, i128), b: (i128, i128), f: &dyn Fn(i128, i128) -> i128| {
        let c = [f(a.0, b.0), f(a.0, b.1), f(a.1, b.0), f(a.1, b.1)];
        (*c.iter().min().unwrap(), *c.iter().max().unwrap())
    };
    let fdiv = |a: i128, b: i128| a.div_euclid(b) - i128::from(b < 0 && a.rem_euclid(b) != 0);
    Some(match e {
        Expr::Int(v, _) => (*v as i128, *v as i128),
        Expr::Var(v) => *r.get(v)?,
        Expr::Cast(t, a) if t.is_int() => interval(a, r)?,
        Expr::Select(_, a, b) => {
            let (x, y) = (interval(a, r)?, interval(b, r)?);
            (x.0.min(y.0), x.1.max(y.1))
        }
        Expr::Bin(op, a, b) => {
            let (x, y) = (interval(a, r)?, interval(b, r)?);
            match op {
                BinOp::Add => (x.0 + y.0, x.1 + y.1),
                BinOp::Sub => (x.0 - y.1, x.1 - y.0),
                BinOp::Mul => corners(x, y, &|p, q| p.saturating_mul(q)),
                BinOp::Min => (x.0.min(y.0), x.1.min(y.1)),
                BinOp::Max => (x.0.max(y.0), x.1.max(y.1)),
                BinOp::FloorDiv if y.0 > 0 || y.1 < 0 => corners(x, y, &fdiv),
                BinOp::Div if y.0 > 0 || y.1 < 0 => corners(x, y, &|p, q| p / q),
                BinOp::FloorMod if y.0 > 0 => {
                    if y.0 == y.1 && fdiv(x.0, y.0) == fdiv(x.1, y.0) {
                        (x.0.rem_euclid(y.0), x.1.rem_euclid(y.0))
                    } else {
                        (0, y.1 - 1)
                    }
                }
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// `fixed + [lo, hi]`: a region bound with a symbolic part in the fixed loops.
#[derive(Clone, Debug)]
struct SymRange {
    fixed: Linear,
    lo: i128,
    hi: i128,
}

impl SymRange {
    fn numeric(&self, r: &HashMap<String, (i128, i128)>) -> Result<(i128, i128), LowerError> {
        let f = if self.fixed.terms.is_empty() {
            (0, 0)
        } else {
            interval(&self.fixed.to_expr(), r).ok_or_else(unbounded)?
        };
        Ok((f.0 + self.lo, f.1 + self.hi))
    }

    fn union(self, o: SymRange, r: &HashMap<String, (i128, i128)>) -> Result<SymRange, LowerError> {
        if self.fixed.add(&o.fixed, -1).terms.is_empty() {
            return Ok(SymRange {
                fixed: self.fixed,
                lo: self.lo.min(o.lo),
                hi: self.hi.max(o.hi),
            });
        }
        let (a, b) = (self.numeric(r)?, o.numeric(r)?);
        Ok(SymRange {
            fixed: Linear::constant(0),
            lo: a.0.min(b.0),
            hi: a.1.max(b.1),
        })
    }
}

fn unbounded() -> LowerError {
    LowerError::Unsupported("a region whose bounds depend on data or are unbounded".into())
}

fn has_load(e: &Expr) -> bool {
    e.has_load()
}

/// Decomposes an index expression over the loops: atoms that use a relaxed loop (or data)
/// are bounded numerically, the rest stays symbolic. `floordiv`/`floormod` by a constant
/// of a sum whose symbolic part is a multiple of the divisor stay exact (what TVM's
/// `EvalSet` + simplifier give for channel blocks like `floordiv(ic.o*4 + ic.i, 4)`).
fn sym_range(
    e: &Expr,
    relaxed: &HashSet<String>,
    r: &HashMap<String, (i128, i128)>,
) -> Result<SymRange, LowerError> {
    let lin = linearize(&simplify_expr(e));
    let mut fixed = Linear::constant(0);
    let (mut lo, mut hi) = (lin.constant, lin.constant);
    for (atom, c) in &lin.terms {
        if !has_load(atom) && !uses_var_where(atom, &|v| relaxed.contains(v)) {
            fixed.add_term(atom.clone(), *c);
            continue;
        }
        let part = match divmod_range(atom, relaxed, r)? {
            Some(p) => p,
            None => {
                let (a, b) = interval(atom, r).ok_or_else(unbounded)?;
                SymRange {
                    fixed: Linear::constant(0),
                    lo: a,
                    hi: b,
                }
            }
        };
        let (x, y) = (part.lo.saturating_mul(*c), part.hi.saturating_mul(*c));
        lo += x.min(y);
        hi += x.max(y);
        fixed = fixed.add(&part.fixed, *c);
    }
    Ok(SymRange { fixed, lo, hi })
}

/// Exact ranges of `floordiv(x, c)` / `floormod(x, c)` (`c > 0`) when the symbolic part of
/// `x` is a multiple of `c`.
fn divmod_range(
    atom: &Expr,
    relaxed: &HashSet<String>,
    r: &HashMap<String, (i128, i128)>,
) -> Result<Option<SymRange>, LowerError> {
    let (op, x, c) = match atom {
        Expr::Bin(op @ (BinOp::FloorDiv | BinOp::FloorMod), x, c) => match c.as_int() {
            Some(c) if c > 0 => (*op, x, c as i128),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let inner = sym_range(x, relaxed, r)?;
    if inner.fixed.terms.iter().any(|(_, k)| k % c != 0) {
        return Ok(None);
    }
    let fdiv = |a: i128| a.div_euclid(c);
    Ok(Some(match op {
        BinOp::FloorDiv => SymRange {
            fixed: Linear::constant(0).add(&inner.fixed, 1).scale_div(c),
            lo: fdiv(inner.lo),
            hi: fdiv(inner.hi),
        },
        _ if fdiv(inner.lo) == fdiv(inner.hi) => SymRange {
            fixed: Linear::constant(0),
            lo: inner.lo.rem_euclid(c),
            hi: inner.hi.rem_euclid(c),
        },
        _ => SymRange {
            fixed: Linear::constant(0),
            lo: 0,
            hi: c - 1,
        },
    }))
}

trait ScaleDiv {
    fn scale_div(self, c: i128) -> Linear;
}
impl ScaleDiv for Linear {
    /// Every coefficient divided by `c` (callers check divisibility).
    fn scale_div(self, c: i128) -> Linear {
        Linear {
            terms: self.terms.into_iter().map(|(a, k)| (a, k / c)).collect(),
            constant: self.constant / c,
        }
    }
}

/// `PassUpIndex` from (possibly missing) leaf values: a variable's value is known when the
/// values it is computed from are.
pub fn pass_up(
    st: &TStage,
    ext: &[Option<Ext>],
    leaf_value: &dyn Fn(usize) -> Option<Expr>,
) -> Vec<Option<Expr>> {
    let mut v: Vec<Option<Expr>> = vec![None; st.vars.len()];
    for &l in &st.leaves {
        v[l] = leaf_value(l);
    }
    for rel in st.rels.iter().rev() {
        match *rel {
            Rel::Split {
                parent,
                outer,
                inner,
                ..
            } => {
                if let (Some(o), Some(i), Some(ie)) =
                    (v[outer].clone(), v[inner].clone(), &ext[inner])
                {
                    v[parent] = Some(simplify_expr(&Expr::add(i, Expr::mul(o, ie.e.clone()))));
                }
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                if let (Some(f), Some(ie)) = (v[fused].clone(), &ext[inner]) {
                    // a part of extent 1 is 0 and the other one is the fused value
                    if ie.as_const() == Some(1) {
                        v[outer] = Some(f);
                        v[inner] = Some(Expr::int(0));
                    } else if ext[outer].as_ref().and_then(Ext::as_const) == Some(1) {
                        v[outer] = Some(Expr::int(0));
                        v[inner] = Some(f);
                    } else {
                        v[outer] = Some(simplify_expr(&Expr::floordiv(f.clone(), ie.e.clone())));
                        v[inner] = Some(simplify_expr(&Expr::floormod(f, ie.e.clone())));
                    }
                }
            }
        }
    }
    v
}

/// `MakeBoundCheck`'s split checks: `value < extent` for flagged variables whose value may
/// reach the extent.
pub fn split_checks(
    st: &TStage,
    l: &StageLoops,
    values: &[Option<Expr>],
    skip: &dyn Fn(usize) -> bool,
    r: &HashMap<String, (i128, i128)>,
) -> Vec<Expr> {
    let mut preds = Vec::new();
    for (v, value) in values.iter().enumerate().take(st.vars.len()) {
        if !l.flag[v] || skip(v) {
            continue;
        }
        let (Some(val), Some(ext)) = (value, &l.ext[v]) else {
            continue;
        };
        let provable = ext
            .as_const()
            .is_some_and(|e| interval(val, r).is_some_and(|iv| iv.1 < e as i128));
        if !provable {
            preds.push(Expr::lt(val.clone(), ext.e.clone()));
        }
    }
    preds
}

/// The loops enclosing stage `c`'s body, innermost first: `(stage, loop position)`.
fn enclosing_loops(sch: &TSchedule, c: usize) -> Result<Vec<(usize, usize)>, LowerError> {
    let mut out = Vec::new();
    let (mut cur, mut upto) = (c, sch.stages[c].leaves.len());
    for _ in 0..=sch.stages.len() {
        out.extend((0..upto).rev().map(|p| (cur, p)));
        match sch.stages[cur].loc {
            Loc::At { stage, var } => {
                let pos = sch.stages[stage].leaves.iter().position(|&v| v == var);
                upto = pos
                    .ok_or_else(|| LowerError::Internal("attach loop is not a leaf".into()))?
                    + 1;
                cur = stage;
            }
            _ => return Ok(out),
        }
    }
    Err(LowerError::InvalidSchedule(
        "compute_at chain has a cycle".into(),
    ))
}

pub fn infer(sch: &TSchedule, names: &mut Naming) -> Result<Bounds, LowerError> {
    let n = sch.stages.len();
    let mut b = Bounds {
        stages: vec![None; n],
        ranges: HashMap::new(),
        dynamic: HashSet::new(),
    };
    for s in (0..n).rev() {
        let st = &sch.stages[s];
        if st.op.is_placeholder() || st.loc == Loc::Inline {
            continue;
        }
        let loops = stage_loops(sch, s, &b, names)?;
        for (p, v) in loops.loop_var.iter().enumerate() {
            if let Some(v) = v {
                let e = loops.ext[st.leaves[p]].as_ref();
                b.ranges
                    .insert(v.clone(), (0, e.map_or(1, |e| e.max) as i128 - 1));
                if e.is_some_and(|e| e.as_const().is_none()) {
                    b.dynamic.insert(v.clone());
                }
            }
        }
        b.stages[s] = Some(loops);
    }
    Ok(b)
}

/// Loads of placeholders in index/extent expressions, as loop-nest loads.
fn placeholder_load<'a>(
    sch: &'a TSchedule,
    names: &'a Naming,
) -> impl Fn(TensorId, Vec<Expr>) -> Result<Expr, LowerError> + 'a {
    move |t: TensorId, idx: Vec<Expr>| {
        let st = sch
            .stages
            .get(t.0)
            .ok_or_else(|| LowerError::Internal("load of a missing stage".into()))?;
        match (&st.op.kind, &names.buffer[t.0]) {
            (LKind::Placeholder { .. }, Some(buf)) => Ok(Expr::load(buf, idx)),
            // data read from computed stages: an opaque atom, bounded nowhere
            _ => Ok(Expr::load(&format!("\u{1}stage{}", t.0), idx)),
        }
    }
}

fn stage_loops(
    sch: &TSchedule,
    s: usize,
    b: &Bounds,
    names: &mut Naming,
) -> Result<StageLoops, LowerError> {
    let st = &sch.stages[s];
    let nv = st.vars.len();
    let full = st.op.shape()?;
    let region: Vec<(Expr, i64)> = match st.loc {
        Loc::At { .. } => region_of(sch, s, b, names)?,
        _ => full.iter().map(|&e| (Expr::int(0), e)).collect(),
    };
    let mut ext: Vec<Option<Ext>> = vec![None; nv];
    let mut root_min = vec![Expr::int(0); st.n_root];
    for (k, (min, e)) in region.iter().enumerate() {
        ext[k] = Some(Ext::konst(*e));
        root_min[k] = min.clone();
    }
    let mut dynamic = Vec::new();
    for (k, r) in st.op.reduce_axes().iter().enumerate() {
        let v = st.n_axes + k;
        match r.const_extent() {
            Some(e) => ext[v] = Some(Ext::konst(checked_ext(e as i128, "reduce extent")?)),
            None => dynamic.push(v),
        }
    }
    // PassDownDomain
    for rel in &st.rels {
        match *rel {
            Rel::Split {
                parent,
                outer,
                inner,
                factor,
                nparts,
            } => {
                let p = ext[parent].clone().ok_or_else(|| {
                    LowerError::Unsupported(format!(
                        "{}: split of the non-constant axis {}",
                        st.op.name, st.vars[parent].name
                    ))
                })?;
                let tight = |n: i64| if p.max < n { p.clone() } else { Ext::konst(n) };
                if let Some(f) = factor {
                    ext[inner] = Some(tight(f));
                    ext[outer] = Some(ceil_div_ext(&p, f));
                } else if let Some(np) = nparts {
                    ext[outer] = Some(tight(np));
                    ext[inner] = Some(ceil_div_ext(&p, np));
                }
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                let (Some(o), Some(i)) = (&ext[outer], &ext[inner]) else {
                    return Err(LowerError::Unsupported(format!(
                        "{}: fuse of a non-constant axis",
                        st.op.name
                    )));
                };
                let max = checked_ext(o.max as i128 * i.max as i128, "fused extent")?;
                ext[fused] = Some(match (o.as_const(), i.as_const()) {
                    (Some(_), Some(_)) => Ext::konst(max),
                    _ => Ext {
                        e: simplify_expr(&Expr::mul(o.e.clone(), i.e.clone())),
                        max,
                    },
                });
            }
        }
    }
    // loop variables
    let mut loop_var = Vec::with_capacity(st.leaves.len());
    for &l in &st.leaves {
        let trivial = ext[l].as_ref().is_some_and(|e| e.as_const() == Some(1));
        loop_var.push(if trivial {
            None
        } else {
            Some(
                names
                    .vars
                    .fresh(&format!("{}_{}", short(&st.op.name), st.vars[l].name)),
            )
        });
    }
    let pos_of: HashMap<usize, usize> =
        st.leaves.iter().enumerate().map(|(p, &l)| (l, p)).collect();
    let local = pass_up(st, &ext, &|l| {
        Some(match &loop_var[pos_of[&l]] {
            Some(v) => Expr::var(v),
            None => Expr::int(0),
        })
    });
    let mut global = Vec::with_capacity(st.n_root);
    for v in 0..st.n_root {
        let lv = local[v].clone().ok_or_else(|| {
            LowerError::Internal(format!(
                "{}: axis {} has no value",
                st.op.name, st.vars[v].name
            ))
        })?;
        global.push(if root_min[v].as_int() == Some(0) {
            lv
        } else {
            simplify_expr(&Expr::add(lv, root_min[v].clone()))
        });
    }
    // windows whose extent depends on the spatial axes (adaptive pooling, sparse rows)
    let mut ranges = b.ranges.clone();
    for (p, v) in loop_var.iter().enumerate() {
        if let (Some(v), Some(e)) = (v, &ext[st.leaves[p]]) {
            ranges.insert(v.clone(), (0, e.max as i128 - 1));
        }
    }
    for v in dynamic {
        let axis = &st.op.reduce_axes()[v - st.n_axes];
        if !st.leaves.contains(&v) {
            return Err(LowerError::Unsupported(format!(
                "{}: split or fuse of the non-constant reduce axis {}",
                st.op.name, axis.name
            )));
        }
        let vars: HashMap<String, Expr> = st
            .op
            .axes()
            .iter()
            .map(|a| a.name.clone())
            .zip(global.iter().cloned())
            .collect();
        let load = placeholder_load(sch, names);
        let e = Converter {
            vars: &vars,
            load: &load,
        }
        .expr(&axis.extent)?;
        if e.has_load() {
            return Err(LowerError::Unsupported(format!(
                "{}: the extent of reduce axis {} depends on input data (sparse workloads); its trip count and indices cannot be bounded",
                st.op.name, axis.name
            )));
        }
        let hi = interval(&e, &ranges).map(|iv| iv.1).ok_or_else(unbounded)?;
        let max = checked_ext(hi.max(1), "reduce window extent")?;
        let e = simplify_expr(&e);
        // TE would emit the loop with an extent that reads a variable of a loop inside it
        let pos = pos_of[&v];
        let inner: HashSet<&str> = loop_var[pos..]
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if uses_var_where(&e, &|x| inner.contains(x)) {
            return Err(LowerError::InvalidSchedule(format!(
                "{}: the extent of reduce loop {} depends on an axis whose loop is inside it",
                st.op.name, axis.name
            )));
        }
        ext[v] = Some(Ext { e, max });
        ranges.insert(
            loop_var[pos_of[&v]].clone().unwrap_or_default(),
            (0, max as i128 - 1),
        );
    }
    // PassUpBoundCheck
    let mut flag = vec![false; nv];
    for rel in st.rels.iter().rev() {
        match *rel {
            Rel::Split {
                parent,
                outer,
                inner,
                ..
            } => {
                let exact = match (&ext[parent], &ext[outer], &ext[inner]) {
                    (Some(p), Some(o), Some(i)) => match (p.as_const(), o.as_const(), i.as_const())
                    {
                        (Some(p), Some(o), Some(i)) => p as i128 == o as i128 * i as i128,
                        _ => false,
                    },
                    _ => false,
                };
                flag[parent] = flag[outer] || flag[inner] || !exact;
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                flag[outer] = flag[fused];
                flag[inner] = flag[fused];
            }
        }
    }
    let shape: Vec<i64> = region.iter().map(|r| r.1).collect();
    let mut l = StageLoops {
        ext,
        root_min,
        loop_var,
        local,
        global,
        flag,
        shape,
        preds: Vec::new(),
    };
    let mut preds = split_checks(st, &l, &l.local, &|_| false, &ranges);
    // a region reaching outside the op's domain is computed only inside it
    if matches!(st.loc, Loc::At { .. }) {
        for (k, &e) in full.iter().enumerate() {
            if l.root_min[k].as_int() == Some(0) && l.shape[k] == e {
                continue;
            }
            let iv = interval(&l.global[k], &ranges);
            if iv.is_none_or(|iv| iv.0 < 0) {
                preds.push(Expr::cmp(
                    crate::loopnest::CmpOp::Ge,
                    l.global[k].clone(),
                    Expr::int(0),
                ));
            }
            if iv.is_none_or(|iv| iv.1 >= e as i128) {
                preds.push(Expr::lt(l.global[k].clone(), Expr::int(e)));
            }
        }
    }
    l.preds = preds;
    Ok(l)
}

fn short(name: &str) -> String {
    name.chars().take(12).collect()
}

/// The region of stage `p` (computed at a loop) its consumers read in one iteration of that
/// loop: per axis `(global minimum, extent)`.
fn region_of(
    sch: &TSchedule,
    p: usize,
    b: &Bounds,
    names: &Naming,
) -> Result<Vec<(Expr, i64)>, LowerError> {
    let st = &sch.stages[p];
    let Loc::At { stage: target, var } = st.loc else {
        unreachable!()
    };
    let tpos = sch.stages[target]
        .leaves
        .iter()
        .position(|&v| v == var)
        .ok_or_else(|| LowerError::Internal("attach loop".into()))?;
    let full = st.op.shape()?;
    let mut acc: Vec<Option<SymRange>> = vec![None; full.len()];
    let load = placeholder_load(sch, names);
    for c in p + 1..sch.stages.len() {
        let cs = &sch.stages[c];
        if cs.op.is_placeholder() || cs.loc == Loc::Inline || !cs.op.inputs().contains(&TensorId(p))
        {
            continue;
        }
        let cl = b.stages[c]
            .as_ref()
            .ok_or_else(|| LowerError::Internal("consumer bounds missing".into()))?;
        let chain = enclosing_loops(sch, c)?;
        let cut = chain.iter().position(|&x| x == (target, tpos)).ok_or_else(|| {
            LowerError::InvalidSchedule(format!(
                "{} is computed inside a loop of {}, but its consumer {} does not run inside that loop",
                st.op.name, sch.stages[target].op.name, cs.op.name
            ))
        })?;
        let mut relaxed = HashSet::new();
        for &(s2, pos) in &chain[..cut] {
            let lv = if s2 == c {
                cl.loop_var[pos].clone()
            } else {
                b.stages[s2].as_ref().and_then(|l| l.loop_var[pos].clone())
            };
            relaxed.extend(lv);
        }
        // TE's PassUpDomain: an axis whose loops are all relaxed covers exactly its domain
        // (not the padded range of a non-divisible tiling)
        let mut ranges = b.ranges.clone();
        let mut vars: HashMap<String, Expr> = HashMap::new();
        let roots = cs.op.axes().iter().chain(cs.op.reduce_axes());
        for (k, (a, g)) in roots.zip(&cl.global).enumerate() {
            let local = cl.local[k]
                .as_ref()
                .ok_or_else(|| LowerError::Internal("axis without a value".into()))?;
            let full = uses_var_where(local, &|v| relaxed.contains(v))
                && !uses_var_where(local, &|v| !relaxed.contains(v));
            match (&cl.ext[k], full) {
                (Some(e), true) if e.as_const().is_some() => {
                    let synthetic = format!("\u{2}{c}.{k}");
                    ranges.insert(synthetic.clone(), (0, e.max as i128 - 1));
                    relaxed.insert(synthetic.clone());
                    let m = &cl.root_min[k];
                    let v = if m.as_int() == Some(0) {
                        Expr::var(&synthetic)
                    } else {
                        Expr::add(Expr::var(&synthetic), m.clone())
                    };
                    vars.insert(a.name.clone(), v);
                }
                _ => {
                    vars.insert(a.name.clone(), g.clone());
                }
            }
        }
        let conv = Converter {
            vars: &vars,
            load: &load,
        };
        let mut reads = Vec::new();
        for e in cs.op.exprs() {
            convert::loads_of(e, TensorId(p), &mut reads);
        }
        for idx in reads {
            if idx.len() != full.len() {
                return Err(LowerError::Internal(format!(
                    "{} read with {} indices",
                    st.op.name,
                    idx.len()
                )));
            }
            for (d, i) in idx.iter().enumerate() {
                let r = sym_range(&conv.expr(i)?, &relaxed, &ranges)?;
                acc[d] = Some(match acc[d].take() {
                    None => r,
                    Some(a) => a.union(r, &ranges)?,
                });
            }
        }
    }
    let mut out = Vec::with_capacity(full.len());
    for (d, a) in acc.into_iter().enumerate() {
        match a {
            // nobody reads it here: compute the whole axis
            None => out.push((Expr::int(0), full[d])),
            Some(r) => {
                let ext =
                    checked_ext(r.hi - r.lo + 1, &format!("region extent of {}", st.op.name))?;
                if ext < 1 {
                    return Err(LowerError::Internal("empty region".into()));
                }
                let lo = i64::try_from(r.lo)
                    .map_err(|_| LowerError::TooLarge("region minimum".into()))?;
                let min = simplify_expr(&Expr::add(r.fixed.to_expr(), Expr::int(lo)));
                out.push((min, ext));
            }
        }
    }
    Ok(out)
}
