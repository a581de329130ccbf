//! Static bounds checker.
//!
//! Proves, by interval analysis over loop ranges plus linear facts taken from enclosing `if`
//! conditions and `select` conditions (for the branch taken), that every `Load`/`Store` index is
//! inside its buffer dimension. Returns the accesses it could not prove; codegen refuses any
//! kernel with a non-empty list.
//!
//! Soundness notes: integer nodes whose interval may leave their type's range (wrapping) get the
//! full type range, and the linear (guard) reasoning is only used when no node could wrap.
//! `&&`/`||` are not short-circuit in this IR, so they never guard their right operand.

use super::affine::{linearize, Linear};
use super::ir::*;
use super::printer::expr_to_string;
use super::validate::{validate, ValidationError};
use std::collections::HashMap;

/// Closed integer interval; `None` = unbounded on that side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lo: Option<i128>,
    pub hi: Option<i128>,
}

impl Interval {
    pub const ALL: Interval = Interval { lo: None, hi: None };
    pub fn point(v: i128) -> Interval {
        Interval {
            lo: Some(v),
            hi: Some(v),
        }
    }
    pub fn new(lo: i128, hi: i128) -> Interval {
        Interval {
            lo: Some(lo),
            hi: Some(hi),
        }
    }
    fn union(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.zip(o.lo).map(|(a, b)| a.min(b)),
            hi: self.hi.zip(o.hi).map(|(a, b)| a.max(b)),
        }
    }
    fn add(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.zip(o.lo).map(|(a, b)| a.saturating_add(b)),
            hi: self.hi.zip(o.hi).map(|(a, b)| a.saturating_add(b)),
        }
    }
    fn neg(self) -> Interval {
        Interval {
            lo: self.hi.map(|v| -v),
            hi: self.lo.map(|v| -v),
        }
    }
    fn scale(self, k: i128) -> Interval {
        if k >= 0 {
            Interval {
                lo: self.lo.map(|v| v.saturating_mul(k)),
                hi: self.hi.map(|v| v.saturating_mul(k)),
            }
        } else {
            self.neg().scale(-k)
        }
    }
    fn mul(self, o: Interval) -> Interval {
        match (self.lo, self.hi, o.lo, o.hi) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                let p = [a * c, a * d, b * c, b * d];
                Interval::new(*p.iter().min().unwrap(), *p.iter().max().unwrap())
            }
            _ => {
                if let (Some(c), Some(d)) = (o.lo, o.hi) {
                    if c == d {
                        return self.scale(c);
                    }
                }
                if let (Some(a), Some(b)) = (self.lo, self.hi) {
                    if a == b {
                        return o.scale(a);
                    }
                }
                Interval::ALL
            }
        }
    }
    fn intersect(self, o: Interval) -> Interval {
        let pick = |a: Option<i128>, b: Option<i128>, f: fn(i128, i128) -> i128| match (a, b) {
            (Some(x), Some(y)) => Some(f(x, y)),
            (x, y) => x.or(y),
        };
        Interval {
            lo: pick(self.lo, o.lo, i128::max),
            hi: pick(self.hi, o.hi, i128::min),
        }
    }
    fn within(self, lo: i128, hi: i128) -> bool {
        matches!((self.lo, self.hi), (Some(a), Some(b)) if a >= lo && b <= hi)
    }
}

fn type_range(t: DType) -> Interval {
    match t {
        DType::I8 => Interval::new(i8::MIN as i128, i8::MAX as i128),
        DType::U8 => Interval::new(0, 255),
        DType::I32 => Interval::new(i32::MIN as i128, i32::MAX as i128),
        DType::Bool => Interval::new(0, 1),
        DType::I64 => Interval::new(i64::MIN as i128, i64::MAX as i128),
        _ => Interval::ALL,
    }
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// One access that could not be proven in bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct UnprovenAccess {
    pub buffer: String,
    pub is_store: bool,
    pub index: Vec<Expr>,
    /// Dimension that failed.
    pub dim: usize,
    pub extent: i64,
    /// Interval the checker derived for that index.
    pub range: Interval,
}

impl std::fmt::Display for UnprovenAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idx: Vec<String> = self.index.iter().map(expr_to_string).collect();
        let b = |v: Option<i128>| v.map_or("?".to_string(), |x| x.to_string());
        write!(
            f,
            "{} {}[{}]: dim {} index in [{}, {}] not provably within [0, {})",
            if self.is_store { "store" } else { "load" },
            self.buffer,
            idx.join(", "),
            self.dim,
            b(self.range.lo),
            b(self.range.hi),
            self.extent
        )
    }
}

struct Checker {
    buffers: HashMap<String, Buffer>,
    vars: HashMap<String, Interval>,
    /// Linear facts `lin ≤ 0`.
    guards: Vec<Linear>,
    /// Intervals the guards imply for non-variable atoms (`floormod(c, 2) ≥ 1` under a
    /// concat's `select`), which their structure alone cannot give.
    atoms: Vec<(Expr, Interval)>,
    out: Vec<UnprovenAccess>,
    wrapped: bool,
}

impl Checker {
    /// Interval and type of an expression; marks `wrapped` when an integer node may overflow.
    fn eval(&mut self, e: &Expr) -> (Interval, DType) {
        let (r, t) = self.eval_structure(e);
        if self.atoms.is_empty() || !t.is_int() {
            return (r, t);
        }
        match self.atoms.iter().find(|(a, _)| a == e) {
            Some((_, known)) => (r.intersect(*known), t),
            None => (r, t),
        }
    }

    /// [`Self::eval`] from the expression's structure alone.
    fn eval_structure(&mut self, e: &Expr) -> (Interval, DType) {
        match e {
            Expr::Int(v, t) => (Interval::point(*v as i128), *t),
            Expr::Float(_, t) => (Interval::ALL, *t),
            Expr::Var(v) => (
                self.vars.get(v).copied().unwrap_or(Interval::ALL),
                DType::I64,
            ),
            Expr::Load { buf, .. } => {
                let t = self.buffers.get(buf).map_or(DType::F32, |b| b.dtype);
                (type_range(t), t)
            }
            Expr::Bin(op, a, b) => {
                let (x, t) = self.eval(a);
                let (y, _) = self.eval(b);
                if !t.is_int() {
                    return (Interval::ALL, t);
                }
                let r = match op {
                    BinOp::Add => x.add(y),
                    BinOp::Sub => x.add(y.neg()),
                    BinOp::Mul => x.mul(y),
                    BinOp::Min => Interval {
                        lo: x.lo.zip(y.lo).map(|(a, b)| a.min(b)),
                        hi: match (x.hi, y.hi) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        },
                    },
                    BinOp::Max => Interval {
                        lo: match (x.lo, y.lo) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        },
                        hi: x.hi.zip(y.hi).map(|(a, b)| a.max(b)),
                    },
                    BinOp::FloorDiv | BinOp::Div => div_interval(*op, x, y),
                    BinOp::FloorMod => match (y.lo, y.hi) {
                        (Some(c), Some(d)) if c == d && c > 0 => match (x.lo, x.hi) {
                            (Some(a), Some(b)) if floor_div(a, c) == floor_div(b, c) => {
                                Interval::new(a.rem_euclid(c), b.rem_euclid(c))
                            }
                            _ => Interval::new(0, c - 1),
                        },
                        (Some(c), Some(d)) if c > 0 => Interval::new(0, d - 1),
                        _ => Interval::ALL,
                    },
                    BinOp::Mod => match (y.lo, y.hi) {
                        (Some(c), Some(d)) if c > 0 => {
                            let m = d - 1;
                            if x.lo.is_some_and(|v| v >= 0) {
                                Interval::new(0, x.hi.map_or(m, |h| h.min(m)))
                            } else {
                                Interval::new(-m, m)
                            }
                        }
                        _ => Interval::ALL,
                    },
                };
                (self.fit(r, t), t)
            }
            Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                self.eval(a);
                self.eval(b);
                (Interval::new(0, 1), DType::Bool)
            }
            Expr::Not(_) => (Interval::new(0, 1), DType::Bool),
            Expr::Select(_, t, f) => {
                let (x, ty) = self.eval(t);
                let (y, _) = self.eval(f);
                (x.union(y), ty)
            }
            Expr::Cast(t, a) => {
                let (x, from) = self.eval(a);
                if !t.is_int() {
                    return (Interval::ALL, *t);
                }
                if from.is_int() || from == DType::Bool {
                    let tr = type_range(*t);
                    if x.within(tr.lo.unwrap(), tr.hi.unwrap()) {
                        return (x, *t);
                    }
                }
                (type_range(*t), *t)
            }
            Expr::Call(Intrinsic::Likely, _) => (Interval::new(0, 1), DType::Bool),
            Expr::Call(_, a) => (Interval::ALL, self.eval(&a[0]).1),
        }
    }

    fn fit(&mut self, r: Interval, t: DType) -> Interval {
        let tr = type_range(t);
        if r.within(tr.lo.unwrap(), tr.hi.unwrap()) {
            r
        } else {
            self.wrapped = true;
            tr
        }
    }

    /// Upper bound of a linear form using atom intervals.
    fn upper(&mut self, l: &Linear) -> Option<i128> {
        self.upper_depth(l, 3)
    }

    /// Like `upper`, but `min(a, b)` with a positive coefficient (or `max` with a negative one)
    /// may be replaced by either operand, which keeps correlations such as
    /// `x - o*4 - min(4, 14 - o*4)` linear.
    fn upper_depth(&mut self, l: &Linear, depth: u32) -> Option<i128> {
        let mut acc = Interval::point(l.constant);
        for (a, c) in &l.terms {
            let (x, _) = self.eval(a);
            acc = acc.add(x.scale(*c));
        }
        let mut best = acc.hi;
        if depth == 0 {
            return best;
        }
        for (pos, (a, c)) in l.terms.iter().enumerate() {
            let (x, y) = match a {
                Expr::Bin(BinOp::Min, x, y) if *c > 0 => (x, y),
                Expr::Bin(BinOp::Max, x, y) if *c < 0 => (x, y),
                _ => continue,
            };
            for operand in [x, y] {
                let mut rest = l.clone();
                rest.terms.remove(pos);
                let alt = rest.add(&linearize(operand), *c);
                if let Some(u) = self.upper_depth(&alt, depth - 1) {
                    best = Some(best.map_or(u, |b| b.min(u)));
                }
            }
            break;
        }
        best
    }

    /// Prove `l ≤ 0` using intervals and the guard facts.
    fn prove_le0(&mut self, l: &Linear) -> bool {
        if self.upper(l).is_some_and(|u| u <= 0) {
            return true;
        }
        let guards = self.guards.clone();
        for g in &guards {
            let mut ks: Vec<i128> = vec![1];
            for (a, c) in &l.terms {
                if let Some((_, gc)) = g.terms.iter().find(|(b, _)| b == a) {
                    if (*c > 0) == (*gc > 0) && c % gc == 0 {
                        ks.push(c / gc);
                    }
                }
            }
            for k in ks {
                // l = (l - k·g) + k·g ≤ l - k·g  since g ≤ 0, k > 0.
                if self.upper(&l.add(g, -k)).is_some_and(|u| u <= 0) {
                    return true;
                }
            }
        }
        false
    }

    fn check_access(&mut self, buf: &str, index: &[Expr], is_store: bool) {
        for i in index {
            self.visit_expr(i);
        }
        let Some(b) = self.buffers.get(buf).cloned() else {
            return;
        };
        for (d, (i, &ext)) in index.iter().zip(&b.shape).enumerate() {
            self.wrapped = false;
            let (r, _) = self.eval(i);
            if r.within(0, ext as i128 - 1) {
                continue;
            }
            let mut ok = false;
            if !self.wrapped && ext > 0 {
                let lin = linearize(i);
                let upper = lin.add(&Linear::constant(ext as i128 - 1), -1);
                let lower = lin.scale(-1);
                let lo_ok = r.lo.is_some_and(|v| v >= 0) || self.prove_le0(&lower);
                ok = lo_ok && (r.hi.is_some_and(|v| v < ext as i128) || self.prove_le0(&upper));
            }
            if !ok {
                self.out.push(UnprovenAccess {
                    buffer: buf.to_string(),
                    is_store,
                    index: index.to_vec(),
                    dim: d,
                    extent: ext,
                    range: r,
                });
                return;
            }
        }
    }

    fn visit_expr(&mut self, e: &Expr) {
        match e {
            Expr::Load { buf, index } => self.check_access(buf, index, false),
            Expr::Select(c, t, f) => {
                self.visit_expr(c);
                self.with_cond(c, true, |s| s.visit_expr(t));
                self.with_cond(c, false, |s| s.visit_expr(f));
            }
            _ => e.for_each_child(|c| self.visit_expr(c)),
        }
    }

    /// Run `f` with the facts of `cond == truth` added.
    fn with_cond(&mut self, cond: &Expr, truth: bool, f: impl FnOnce(&mut Self)) {
        let ng = self.guards.len();
        let saved_vars = self.vars.clone();
        let saved_atoms = self.atoms.len();
        let mut facts = Vec::new();
        self.facts(cond, truth, &mut facts);
        for g in facts {
            self.tighten(&g);
            self.guards.push(g);
        }
        f(self);
        self.guards.truncate(ng);
        self.vars = saved_vars;
        self.atoms.truncate(saved_atoms);
    }

    /// Linear facts (`≤ 0`) implied by `cond == truth`.
    fn facts(&mut self, cond: &Expr, truth: bool, out: &mut Vec<Linear>) {
        match cond {
            Expr::Call(Intrinsic::Likely, a) => self.facts(&a[0], truth, out),
            Expr::Not(a) => self.facts(a, !truth, out),
            Expr::And(a, b) if truth => {
                self.facts(a, true, out);
                self.facts(b, true, out);
            }
            Expr::Or(a, b) if !truth => {
                self.facts(a, false, out);
                self.facts(b, false, out);
            }
            Expr::Cmp(op, a, b) => {
                self.wrapped = false;
                let (_, t) = self.eval(a);
                self.eval(b);
                if !t.is_int() || self.wrapped {
                    return;
                }
                let op = if truth {
                    *op
                } else {
                    match op {
                        CmpOp::Lt => CmpOp::Ge,
                        CmpOp::Le => CmpOp::Gt,
                        CmpOp::Gt => CmpOp::Le,
                        CmpOp::Ge => CmpOp::Lt,
                        CmpOp::Eq => CmpOp::Ne,
                        CmpOp::Ne => CmpOp::Eq,
                    }
                };
                let d = linearize(a).add(&linearize(b), -1); // a - b
                match op {
                    CmpOp::Lt => out.push(d.add(&Linear::constant(1), 1)),
                    CmpOp::Le => out.push(d),
                    CmpOp::Gt => out.push(d.scale(-1).add(&Linear::constant(1), 1)),
                    CmpOp::Ge => out.push(d.scale(-1)),
                    CmpOp::Eq => {
                        out.push(d.scale(-1));
                        out.push(d);
                    }
                    CmpOp::Ne => {}
                }
            }
            _ => {}
        }
    }

    /// Tighten the intervals of a fact's atoms (variables, or expressions such as
    /// `floormod(i, 2)`) from the fact `Σ cᵢ·atomᵢ + k ≤ 0`.
    fn tighten(&mut self, g: &Linear) {
        for (idx, (a, c)) in g.terms.iter().enumerate() {
            let mut rest = Linear::constant(g.constant);
            for (j, (b, d)) in g.terms.iter().enumerate() {
                if j != idx {
                    rest.add_term(b.clone(), *d);
                }
            }
            // c·v ≤ -rest ≤ -lower(rest)
            let Some(rest_lo) = self.upper(&rest.scale(-1)).map(|u| -u) else {
                continue;
            };
            let bound = -rest_lo;
            let cur = self.eval(a).0;
            let new = if *c > 0 {
                let hi = floor_div(bound, *c);
                Interval {
                    lo: cur.lo,
                    hi: Some(cur.hi.map_or(hi, |h| h.min(hi))),
                }
            } else {
                let lo = -floor_div(bound, -*c); // v ≥ ceil(bound / c) with c < 0
                Interval {
                    lo: Some(cur.lo.map_or(lo, |l| l.max(lo))),
                    hi: cur.hi,
                }
            };
            match a {
                Expr::Var(v) => {
                    self.vars.insert(v.clone(), new);
                }
                _ => self.atoms.push((a.clone(), new)),
            }
        }
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => {
                self.visit_expr(min);
                self.visit_expr(extent);
                let (m, _) = self.eval(min);
                let (x, _) = self.eval(extent);
                if x.hi.is_some_and(|h| h <= 0) {
                    return; // never executes
                }
                let range = Interval {
                    lo: m.lo,
                    hi: m.hi.zip(x.hi).map(|(a, b)| a.saturating_add(b) - 1),
                };
                let ng = self.guards.len();
                if min.as_int().is_none() || extent.as_int().is_none() {
                    let v = Linear::atom(Expr::Var(var.clone()));
                    let lm = linearize(min);
                    self.guards.push(lm.add(&v, -1)); // min - v ≤ 0
                    self.guards.push(
                        v.add(&lm, -1)
                            .add(&linearize(extent), -1)
                            .add(&Linear::constant(1), 1),
                    );
                }
                self.vars.insert(var.clone(), range);
                self.visit_stmt(body);
                self.vars.remove(var);
                self.guards.truncate(ng);
            }
            Stmt::Attr { body, .. } => self.visit_stmt(body),
            Stmt::Seq(v) => v.iter().for_each(|s| self.visit_stmt(s)),
            Stmt::Store { buf, index, value } => {
                self.visit_expr(value);
                self.check_access(buf, index, true);
            }
            Stmt::IfThenElse { cond, then_, else_ } => {
                self.visit_expr(cond);
                // A condition that reads a buffer the branch writes may be invalidated by those
                // writes before a later access: it proves nothing then.
                let stale = |branch: &Stmt| {
                    let mut written = Vec::new();
                    stored_buffers(branch, &mut written);
                    let mut hit = false;
                    loaded_buffers(cond, &mut |b| hit |= written.iter().any(|w| w == b));
                    hit
                };
                let truthy = if stale(then_) {
                    Expr::Int(1, DType::Bool)
                } else {
                    cond.clone()
                };
                self.with_cond(&truthy, true, |s| s.visit_stmt(then_));
                if let Some(e) = else_ {
                    let falsy = if stale(e) {
                        Expr::Int(0, DType::Bool)
                    } else {
                        cond.clone()
                    };
                    self.with_cond(&falsy, false, |s| s.visit_stmt(e));
                }
            }
            Stmt::Allocate { buffer, body } => {
                self.buffers.insert(buffer.name.clone(), buffer.clone());
                self.visit_stmt(body);
                self.buffers.remove(&buffer.name);
            }
            Stmt::Evaluate(e) => self.visit_expr(e),
        }
    }
}

fn div_interval(op: BinOp, x: Interval, y: Interval) -> Interval {
    let (Some(c), Some(d)) = (y.lo, y.hi) else {
        return Interval::ALL;
    };
    if c <= 0 && d >= 0 {
        // Divisor may be zero: codegen yields 0 then, otherwise any quotient magnitude ≤ |x|.
        return match (x.lo, x.hi) {
            (Some(a), Some(b)) => {
                let m = a.abs().max(b.abs());
                Interval::new(-m - 1, m + 1)
            }
            _ => Interval::ALL,
        };
    }
    let (Some(a), Some(b)) = (x.lo, x.hi) else {
        // Unbounded dividend with a positive divisor keeps the sign direction.
        if c > 0 {
            let lo = x.lo.map(|a| if a >= 0 { a / d } else { floor_div(a, c) });
            let hi = x.hi.map(|b| {
                if b >= 0 {
                    b / c
                } else if op == BinOp::FloorDiv {
                    floor_div(b, d)
                } else {
                    0
                }
            });
            return Interval { lo, hi };
        }
        return Interval::ALL;
    };
    let f = |p: i128, q: i128| {
        if op == BinOp::FloorDiv {
            floor_div(p, q)
        } else {
            p / q
        }
    };
    let v = [f(a, c), f(a, d), f(b, c), f(b, d)];
    Interval::new(*v.iter().min().unwrap(), *v.iter().max().unwrap())
}

/// Check a kernel; `Ok(vec![])` means every access is proven in bounds.
pub fn check_bounds(k: &Kernel) -> Result<Vec<UnprovenAccess>, ValidationError> {
    validate(k)?;
    let mut c = Checker {
        buffers: k
            .params
            .iter()
            .map(|b| (b.name.clone(), b.clone()))
            .collect(),
        vars: HashMap::new(),
        guards: Vec::new(),
        atoms: Vec::new(),
        out: Vec::new(),
        wrapped: false,
    };
    c.visit_stmt(&k.body);
    Ok(c.out)
}

/// Interval of an integer expression given variable ranges (loads of integer buffers take their
/// element type's full range). Used by the cost guard to bound trip counts.
pub fn expr_interval(e: &Expr, vars: &HashMap<String, Interval>, buffers: &[Buffer]) -> Interval {
    let mut c = Checker {
        buffers: buffers
            .iter()
            .map(|b| (b.name.clone(), b.clone()))
            .collect(),
        vars: vars.clone(),
        guards: Vec::new(),
        atoms: Vec::new(),
        out: Vec::new(),
        wrapped: false,
    };
    c.eval(e).0
}

fn stored_buffers(s: &Stmt, out: &mut Vec<String>) {
    match s {
        Stmt::Store { buf, .. } => out.push(buf.clone()),
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
            stored_buffers(body, out)
        }
        Stmt::Seq(v) => v.iter().for_each(|s| stored_buffers(s, out)),
        Stmt::IfThenElse { then_, else_, .. } => {
            stored_buffers(then_, out);
            if let Some(e) = else_ {
                stored_buffers(e, out);
            }
        }
        Stmt::Evaluate(_) => {}
    }
}

fn loaded_buffers(e: &Expr, f: &mut dyn FnMut(&str)) {
    if let Expr::Load { buf, .. } = e {
        f(buf);
    }
    e.for_each_child(|c| loaded_buffers(c, f));
}
