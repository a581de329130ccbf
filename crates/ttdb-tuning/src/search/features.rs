//! Per-store features of a lowered loop nest, for the learned cost model ([`super::cost_model`])
//! and the CPU draft estimate ([`super::draft`]).
//!
//! The groups follow TVM's `feature.cc` (one row of floats per store statement, every value
//! through `log2p`), adapted to ttdb's loop-nest IR:
//! 1. computation: float/int operation counts, and vectorize / unroll / parallel loops with
//!    their innermost length, count, product and position;
//! 2. buffer access: the five buffers with the most cache lines touched, each with access
//!    type, bytes, unique bytes, lines, unique lines, reuse type, distance and count, stride;
//! 3. arithmetic intensity at ten loop depths (flops per unique byte touched);
//! 4. allocation (a store into a scoped temporary);
//! 5. the loop structure (outer product, depth, innermost trip count) and the draft
//!    estimate's terms.
//!
//! Footprints use the affine form of each index: along one dimension, the loops inside a
//! depth span `1 + Σ |coef|·(extent-1)` elements, times the extents of the loops inside a
//! non-affine part, capped at the dimension.
use std::collections::HashMap;
use ttdb_backend::loopnest::affine::linearize;
use ttdb_backend::loopnest::bounds::{expr_interval, Interval};
use ttdb_backend::loopnest::ir::*;

/// Floats per store row.
pub const STORE_FEATURES: usize = 34 + BUFFER_SLOTS * BUFFER_FEATURES + CURVE_POINTS + 2 + 4;
const BUFFER_SLOTS: usize = 5;
const BUFFER_FEATURES: usize = 14;
const CURVE_POINTS: usize = 10;
const CACHE_LINE: f64 = 64.0;

/// One enclosing loop of a store, outermost first.
#[derive(Clone, Debug)]
pub struct LoopInfo {
    pub var: String,
    /// Upper bound of the trip count (guarded tails count as full).
    pub extent: f64,
    pub kind: ForKind,
}

/// One buffer access of a store statement (the store itself or a load in its value).
#[derive(Clone, Debug)]
pub struct Access {
    pub buf: String,
    pub write: bool,
    pub elem_bytes: f64,
    pub shape: Vec<i64>,
    pub dims: Vec<DimIndex>,
}

/// The index of one dimension: its affine terms, and the loop variables inside its
/// non-affine parts (`floordiv(i, 8)`, `i * j`), which are assumed to move it by one
/// element per iteration (an upper bound of the span for div/mod, the usual case).
#[derive(Clone, Debug, Default)]
pub struct DimIndex {
    /// (loop variable, |coefficient|).
    pub affine: Vec<(String, f64)>,
    pub opaque: Vec<String>,
}

impl Access {
    /// Distinct elements touched by the loops at depth `level` and deeper of `loops`.
    pub fn footprint_elems(&self, loops: &[LoopInfo], level: usize) -> f64 {
        self.spans(loops, level).iter().product()
    }

    /// Distinct cache lines touched by the loops at depth `level` and deeper.
    pub fn footprint_lines(&self, loops: &[LoopInfo], level: usize) -> f64 {
        let spans = self.spans(loops, level);
        let Some((last, outer)) = spans.split_last() else {
            return 1.0;
        };
        outer.iter().product::<f64>() * (last * self.elem_bytes / CACHE_LINE).ceil().max(1.0)
    }

    fn spans(&self, loops: &[LoopInfo], level: usize) -> Vec<f64> {
        let inner = &loops[level.min(loops.len())..];
        self.dims
            .iter()
            .zip(&self.shape)
            .map(|(d, &size)| {
                let extent = |v: &String| inner.iter().find(|l| &l.var == v).map(|l| l.extent);
                let affine: f64 = 1.0
                    + d.affine
                        .iter()
                        .filter_map(|(v, c)| extent(v).map(|e| c * (e - 1.0)))
                        .sum::<f64>();
                let opaque: f64 = d.opaque.iter().filter_map(extent).product();
                (affine * opaque).min(size.max(1) as f64)
            })
            .collect()
    }

    /// Elements between consecutive iterations of loop `var` (0: the loop reuses the element).
    pub fn stride_of(&self, var: &str) -> f64 {
        let mut stride = 0.0;
        let mut row = 1.0;
        for (d, &size) in self.dims.iter().zip(&self.shape).rev() {
            if let Some((_, c)) = d.affine.iter().find(|(v, _)| v == var) {
                stride += c * row;
            }
            if d.opaque.iter().any(|v| v == var) {
                stride += row;
            }
            row *= size.max(1) as f64;
        }
        stride
    }

    fn uses(&self, var: &str) -> bool {
        self.dims
            .iter()
            .any(|d| d.affine.iter().any(|(v, _)| v == var) || d.opaque.iter().any(|v| v == var))
    }
}

/// Operation counts of one evaluation of a store's value (and its indices).
#[derive(Clone, Copy, Debug, Default)]
pub struct OpCounts {
    pub add: f64,
    pub mul: f64,
    pub div: f64,
    pub cmp: f64,
    pub math: f64,
    pub select: f64,
    pub int: f64,
    pub loads: f64,
}

impl OpCounts {
    pub fn flops(&self) -> f64 {
        self.add + self.mul + self.div + self.cmp + self.math + self.select
    }
}

/// What the feature rows and the draft estimate need of one store statement.
#[derive(Clone, Debug)]
pub struct StoreInfo {
    pub loops: Vec<LoopInfo>,
    pub ops: OpCounts,
    /// The store first, then the loads of its value.
    pub accesses: Vec<Access>,
    /// `auto_unroll_max_step` of the innermost enclosing pragma, 0 if none.
    pub auto_unroll: f64,
    /// The store writes a scoped temporary of this many bytes.
    pub temp_bytes: Option<f64>,
}

impl StoreInfo {
    /// How many times the store executes.
    pub fn executions(&self) -> f64 {
        self.loops.iter().map(|l| l.extent).product()
    }

    pub fn store(&self) -> &Access {
        &self.accesses[0]
    }

    /// Loops of `kind`, outermost first, with their depth.
    pub fn loops_of(&self, kind: ForKind) -> impl Iterator<Item = (usize, &LoopInfo)> {
        self.loops
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.kind == kind)
    }

    /// Depth of the innermost loop whose variable the store's index does not use (a
    /// reduction loop), if any.
    pub fn innermost_reduction(&self) -> Option<usize> {
        let store = self.store();
        self.loops.iter().rposition(|l| !store.uses(&l.var))
    }
}

/// Walks a kernel and describes every store statement.
pub fn store_infos(k: &Kernel) -> Vec<StoreInfo> {
    let mut w = Walker {
        buffers: k.params.clone(),
        vars: HashMap::new(),
        loops: Vec::new(),
        auto_unroll: 0.0,
        out: Vec::new(),
    };
    w.visit(&k.body);
    w.out
}

struct Walker {
    /// Parameters, then the temporaries allocated so far.
    buffers: Vec<Buffer>,
    vars: HashMap<String, Interval>,
    loops: Vec<LoopInfo>,
    auto_unroll: f64,
    out: Vec<StoreInfo>,
}

impl Walker {
    fn visit(&mut self, s: &Stmt) {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => {
                let m = expr_interval(min, &self.vars, &self.buffers);
                let hi = expr_interval(extent, &self.vars, &self.buffers)
                    .hi
                    .unwrap_or(1)
                    .max(0);
                if hi == 0 {
                    return;
                }
                self.vars.insert(
                    var.clone(),
                    Interval {
                        lo: m.lo,
                        hi: m.hi.map(|h| h.saturating_add(hi) - 1),
                    },
                );
                self.loops.push(LoopInfo {
                    var: var.clone(),
                    extent: hi as f64,
                    kind: *kind,
                });
                self.visit(body);
                self.loops.pop();
                self.vars.remove(var);
            }
            Stmt::Attr { attr, body } => {
                let saved = self.auto_unroll;
                if let Attr::AutoUnroll { max_step, .. } = attr {
                    self.auto_unroll = *max_step as f64;
                }
                self.visit(body);
                self.auto_unroll = saved;
            }
            Stmt::Seq(v) => v.iter().for_each(|s| self.visit(s)),
            Stmt::IfThenElse { then_, else_, .. } => {
                self.visit(then_);
                if let Some(e) = else_ {
                    self.visit(e);
                }
            }
            Stmt::Allocate { buffer, body } => {
                self.buffers.push(buffer.clone());
                self.visit(body);
            }
            Stmt::Evaluate(_) => {}
            Stmt::Store { buf, index, value } => {
                let mut ops = OpCounts::default();
                let mut accesses = vec![self.access(buf, index, true)];
                count_ops(value, &mut ops, &mut |b, idx| {
                    accesses.push(self.access(b, idx, false))
                });
                for i in index {
                    count_index_ops(i, &mut ops);
                }
                let temp_bytes = self
                    .buffer(buf)
                    .filter(|b| b.role == BufferRole::Temporary)
                    .map(|b| b.size_bytes() as f64);
                self.out.push(StoreInfo {
                    loops: self.loops.clone(),
                    ops,
                    accesses,
                    auto_unroll: self.auto_unroll,
                    temp_bytes,
                });
            }
        }
    }

    fn buffer(&self, name: &str) -> Option<&Buffer> {
        self.buffers.iter().rev().find(|b| b.name == name)
    }

    fn access(&self, buf: &str, index: &[Expr], write: bool) -> Access {
        let (elem_bytes, shape) = self.buffer(buf).map_or((4.0, vec![1; index.len()]), |b| {
            (b.dtype.bytes() as f64, b.shape.clone())
        });
        let dims = index
            .iter()
            .map(|e| {
                let mut d = DimIndex::default();
                for (atom, c) in &linearize(e).terms {
                    match atom {
                        Expr::Var(v) => d.affine.push((v.clone(), (*c as f64).abs())),
                        other => collect_vars(other, &mut d.opaque),
                    }
                }
                d
            })
            .collect();
        Access {
            buf: buf.to_string(),
            write,
            elem_bytes,
            shape,
            dims,
        }
    }
}

/// The variables of `e`, each once.
fn collect_vars(e: &Expr, out: &mut Vec<String>) {
    if let Expr::Var(v) = e {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    e.for_each_child(|c| collect_vars(c, out));
}

fn count_ops(e: &Expr, ops: &mut OpCounts, on_load: &mut dyn FnMut(&str, &[Expr])) {
    match e {
        Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => {}
        Expr::Load { buf, index } => {
            ops.loads += 1.0;
            on_load(buf, index);
            for i in index {
                count_index_ops(i, ops);
            }
        }
        Expr::Bin(op, a, b) => {
            match op {
                BinOp::Add | BinOp::Sub => ops.add += 1.0,
                BinOp::Mul => ops.mul += 1.0,
                BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod => ops.div += 1.0,
                BinOp::Min | BinOp::Max => ops.cmp += 1.0,
            }
            count_ops(a, ops, on_load);
            count_ops(b, ops, on_load);
        }
        Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            ops.cmp += 1.0;
            count_ops(a, ops, on_load);
            count_ops(b, ops, on_load);
        }
        Expr::Not(a) | Expr::Cast(_, a) => count_ops(a, ops, on_load),
        Expr::Select(c, a, b) => {
            ops.select += 1.0;
            count_ops(c, ops, on_load);
            count_ops(a, ops, on_load);
            count_ops(b, ops, on_load);
        }
        Expr::Call(f, args) => {
            if *f != Intrinsic::Likely {
                ops.math += 1.0;
            }
            args.iter().for_each(|a| count_ops(a, ops, on_load));
        }
    }
}

fn count_index_ops(e: &Expr, ops: &mut OpCounts) {
    if let Expr::Bin(_, a, b) = e {
        ops.int += 1.0;
        count_index_ops(a, ops);
        count_index_ops(b, ops);
    }
}

/// TVM's `log2p`: `sign(x)·log2(|x|+1)`.
pub fn log2p(x: f64) -> f32 {
    (x.signum() * (x.abs() + 1.0).log2()) as f32
}

/// Extra per-store terms computed by the draft estimate (appended to the features).
#[derive(Clone, Copy, Debug, Default)]
pub struct DraftTerms {
    pub compute: f64,
    pub memory: f64,
    pub parallel_efficiency: f64,
    pub register_tile: f64,
}

/// The feature row of one store.
pub fn store_row(s: &StoreInfo, draft: &DraftTerms) -> Vec<f32> {
    let mut f: Vec<f32> = Vec::with_capacity(STORE_FEATURES);
    let n = s.executions();
    let ops = &s.ops;
    for v in [
        ops.add, ops.mul, ops.div, ops.cmp, ops.math, ops.select, ops.int, ops.loads,
    ] {
        f.push(log2p(v * n));
    }
    let depth = s.loops.len();
    for kind in [ForKind::Vectorized, ForKind::Unrolled, ForKind::Parallel] {
        let ls: Vec<(usize, &LoopInfo)> = s.loops_of(kind).collect();
        let innermost = ls.last();
        f.push(log2p(innermost.map_or(0.0, |(_, l)| l.extent)));
        f.push(log2p(ls.len() as f64));
        f.push(log2p(
            ls.iter().map(|(_, l)| l.extent).product::<f64>() * (!ls.is_empty()) as u8 as f64,
        ));
        // Position of the innermost such loop: innermost, inner half, outer half, none.
        let pos = match innermost {
            None => 3,
            Some((d, _)) if *d + 1 == depth => 0,
            Some((d, _)) if 2 * d >= depth => 1,
            Some(_) => 2,
        };
        f.extend((0..4).map(|i| (i == pos) as u8 as f32));
        if kind == ForKind::Unrolled {
            f.push(log2p(s.auto_unroll));
        }
    }
    f.push(log2p(n));
    f.push(log2p(depth as f64));
    f.push(log2p(s.loops.last().map_or(1.0, |l| l.extent)));
    let store = s.store();
    f.push(s.accesses[1..].iter().any(|a| a.buf == store.buf) as u8 as f32);
    debug_assert_eq!(f.len(), 34);
    buffer_features(s, &mut f);
    // Arithmetic intensity at ten depths, outermost to innermost.
    let flops = ops.flops().max(1.0);
    for p in 0..CURVE_POINTS {
        let level = (p * (depth + 1)) / CURVE_POINTS;
        let inner: f64 = s.loops[level.min(depth)..]
            .iter()
            .map(|l| l.extent)
            .product();
        let bytes: f64 = s
            .accesses
            .iter()
            .map(|a| a.footprint_elems(&s.loops, level) * a.elem_bytes)
            .sum();
        f.push(log2p(flops * inner / bytes.max(1.0)));
    }
    f.push(s.temp_bytes.is_some() as u8 as f32);
    f.push(log2p(s.temp_bytes.unwrap_or(0.0)));
    f.push(log2p(draft.compute * 1e9));
    f.push(log2p(draft.memory * 1e9));
    f.push(draft.parallel_efficiency as f32);
    f.push(log2p(draft.register_tile));
    debug_assert_eq!(f.len(), STORE_FEATURES);
    f
}

/// Group 2: per buffer (merged over its accesses), the five with the most lines touched.
fn buffer_features(s: &StoreInfo, f: &mut Vec<f32>) {
    let n = s.executions();
    let loops = &s.loops;
    let innermost = loops.last().map(|l| l.var.as_str());
    let mut per_buf: Vec<(String, [f32; BUFFER_FEATURES], f64, f64)> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for a in &s.accesses {
        if !names.contains(&a.buf.as_str()) {
            names.push(&a.buf);
        }
    }
    for name in names {
        let accs: Vec<&Access> = s.accesses.iter().filter(|a| a.buf == name).collect();
        let (read, write) = (accs.iter().any(|a| !a.write), accs.iter().any(|a| a.write));
        let a = accs[0];
        let stride = innermost.map_or(0.0, |v| a.stride_of(v));
        let bytes = n * a.elem_bytes * accs.len() as f64;
        let unique = a.footprint_elems(loops, 0) * a.elem_bytes;
        // Lines touched counting repeats: each innermost run of `stride`-spaced elements.
        let lines = n
            * (stride.abs() * a.elem_bytes / CACHE_LINE).clamp(1.0 / CACHE_LINE, 1.0)
            * accs.len() as f64;
        let unique_lines = a.footprint_lines(loops, 0);
        // Reuse: the innermost loop whose variable the index does not use.
        let reuse_at = loops.iter().rposition(|l| !a.uses(&l.var));
        let (kind, dist_iter, dist_bytes, count) = match reuse_at {
            Some(d) => {
                let iters: f64 = loops[d + 1..].iter().map(|l| l.extent).product();
                let bytes = a.footprint_elems(loops, d + 1) * a.elem_bytes;
                (0, iters, bytes, loops[d].extent)
            }
            None if accs.len() > 1 => (1, 1.0, a.elem_bytes, accs.len() as f64),
            None => (2, 0.0, 0.0, 0.0),
        };
        let mut v = [0f32; BUFFER_FEATURES];
        v[0] = (read && !write) as u8 as f32;
        v[1] = (write && !read) as u8 as f32;
        v[2] = (read && write) as u8 as f32;
        v[3] = log2p(bytes);
        v[4] = log2p(unique);
        v[5] = log2p(lines);
        v[6] = log2p(unique_lines);
        v[7 + kind] = 1.0;
        v[10] = log2p(dist_iter);
        v[11] = log2p(dist_bytes);
        v[12] = log2p(count);
        v[13] = log2p(stride);
        per_buf.push((name.to_string(), v, lines, bytes));
    }
    per_buf.sort_by(|x, y| y.2.total_cmp(&x.2).then(y.3.total_cmp(&x.3)));
    for slot in 0..BUFFER_SLOTS {
        match per_buf.get(slot) {
            Some((_, v, ..)) => f.extend_from_slice(v),
            None => f.extend_from_slice(&[0.0; BUFFER_FEATURES]),
        }
    }
}
