//! Explicit vectorization of `Vectorized` loops (TVM `VectorizeLoop` analogue).
//!
//! A loop with constant extent L (2..=64) is emitted as one L-lane vector body when it is
//! provably lane-independent, else it is scalarized into a serial loop (as TVM does):
//! * the body contains only stores, sequences, attributes and `if`s whose condition reads no
//!   buffer written in the body;
//! * every written buffer is accessed (loads and stores) with one single flattened index whose
//!   coefficient in the loop variable is a non-zero constant, or indices whose difference is a
//!   constant no lane difference can produce (each lane owns its elements).
//!
//! Selects whose arms contain loads, and `if`s, are evaluated with the arm's lanes masked
//! (masked load/store, gather/scatter: `mask.rs`; no `inbounds` on their addresses), since
//! those accesses may only be valid under the condition; a uniform condition branches instead.
//! TVM scalarizes a loop with a lane-varying `if`; the guard of a split that does not divide
//! its loop is one when the split's inner loop is fused into the vector, and a scalarized loop
//! there ran 20-30x slower than its masked body. An `if` entered from unmasked code branches
//! on its mask first: a vector whose lanes all take one arm (a full tile) runs it unmasked.
//!
//! Masks (`VecCtx::mask`, `None`: all lanes active). A lane is active when every enclosing
//! lane-varying condition (`if`, or a `select` whose arms load) holds for it; a mask may
//! have no active lane (a chunk wholly past a split's end). Inactive lanes:
//! * read and write nothing: every load under a mask is masked, also in conditions and
//!   indices, and a uniform value is loaded lane-wise too (it may be out of bounds there);
//! * hold a defined but meaningless value: masked loads and gathers give 0, never poison, so
//!   a condition computed there is a plain `false`/`true`; arithmetic on them must not trap
//!   (`emit_div` guards 0 and -1 and freezes its divisor);
//! * have mask bit `false`, never poison: arm masks are `select(m, c, false)`, never `and`.
//!
//! Accesses: stride 0 → scalar load + broadcast, stride 1 → vector load/store, other constant
//! stride → gather/scatter with a `base + c·iota` address vector, non-affine → gather with a
//! vector index.

use super::llvm::*;
use super::translate::{Tr, VecCtx};
use crate::loopnest::affine::{eval_index_at as eval_at, linearize};
use crate::loopnest::ir::*;

/// Widest vector body emitted at once; longer vectorized loops run as a loop over chunks of
/// `max_chunk` lanes (2 native fp32 vectors) plus a scalar remainder, which keeps LLVM's type
/// legalization (and compile time) small.
pub const MAX_CHUNK: i64 = 64;

/// A value in a vector body: uniform across lanes (scalar) or per-lane.
#[derive(Clone, Copy)]
pub enum VV<'c> {
    U(Value<'c>),
    V(Value<'c>),
}

impl<'c> Tr<'c, '_> {
    /// Lanes per vector body for a loop of constant extent `e`.
    pub fn chunk_lanes(&self, e: i64) -> i64 {
        e.min(self.max_chunk.clamp(2, MAX_CHUNK))
    }

    pub fn vectorizable(&self, var: &str, min: &Expr, extent: &Expr, body: &Stmt) -> bool {
        let Some(e) = extent.as_int() else {
            return false;
        };
        if e < 2 {
            return false;
        }
        let l = self.chunk_lanes(e);
        let align = self.chunk_align(min, e);
        let mut stores: Vec<(String, Expr)> = Vec::new();
        if !self.collect_stores(body, var, l, align, &mut stores) {
            return false;
        }
        // All accesses to a written buffer must be lane-private or provably disjoint.
        let mut accesses = stores.clone();
        let mut collect = |e: &Expr| {
            e.for_each_load(&mut |buf, idx| {
                if stores.iter().any(|(b, _)| b == buf) {
                    accesses.push((buf.to_string(), self.flat_index(buf, idx)));
                }
            })
        };
        body.for_each_expr(&mut collect);
        for (b1, f1) in &stores {
            for (b2, f2) in &accesses {
                if b1 == b2 && !lanes_disjoint(f1, f2, var, l) {
                    return false;
                }
            }
        }
        let written: Vec<&str> = stores.iter().map(|(b, _)| b.as_str()).collect();
        self.conds_ok(body, &written)
    }

    /// Every chunk base of a vectorized loop from `min` over `e` iterations is a multiple of
    /// this (0: the one chunk starts at 0); see [`lane_offsets`].
    pub fn chunk_align(&self, min: &Expr, e: i64) -> i64 {
        let lanes = self.chunk_lanes(e);
        match min.as_int() {
            Some(lo) if lanes == e => lo,
            Some(lo) => gcd(lo, lanes),
            None => 1,
        }
    }

    fn collect_stores(
        &self,
        s: &Stmt,
        var: &str,
        lanes: i64,
        align: i64,
        out: &mut Vec<(String, Expr)>,
    ) -> bool {
        let each = |s: &Stmt, out: &mut Vec<(String, Expr)>| {
            self.collect_stores(s, var, lanes, align, out)
        };
        match s {
            Stmt::Seq(v) => v.iter().all(|s| each(s, out)),
            Stmt::Attr { body, .. } => each(body, out),
            Stmt::IfThenElse { then_, else_, .. } => {
                each(then_, out) && else_.as_ref().is_none_or(|e| each(e, out))
            }
            Stmt::Store { buf, index, .. } => {
                let flat = self.flat_index(buf, index);
                let strided = matches!(linearize(&flat).coeff_of_var(var), Some(c) if c != 0);
                // Or each lane its own element at a constant offset (fused loops).
                let private = || {
                    lane_offsets(&flat, var, lanes, align).is_some_and(|mut o| {
                        o.sort_unstable();
                        o.windows(2).all(|w| w[0] != w[1])
                    })
                };
                if !strided && !private() {
                    return false;
                }
                out.push((buf.clone(), flat));
                true
            }
            Stmt::For { .. } | Stmt::Allocate { .. } | Stmt::Evaluate(_) => false,
        }
    }

    fn conds_ok(&self, s: &Stmt, written: &[&str]) -> bool {
        match s {
            Stmt::Seq(v) => v.iter().all(|s| self.conds_ok(s, written)),
            Stmt::Attr { body, .. } => self.conds_ok(body, written),
            Stmt::IfThenElse { cond, then_, else_ } => {
                let mut reads_written = false;
                cond.for_each_load(&mut |b, _| reads_written |= written.contains(&b));
                !reads_written
                    && self.conds_ok(then_, written)
                    && else_.as_ref().is_none_or(|e| self.conds_ok(e, written))
            }
            _ => true,
        }
    }

    pub fn vector_loop(
        &mut self,
        var: &str,
        min: &Expr,
        extent: &Expr,
        body: &Stmt,
    ) -> Result<(), String> {
        let e = extent.as_int().expect("checked constant");
        let lanes = self.chunk_lanes(e);
        let align = self.chunk_align(min, e);
        let (chunks, rem) = (e / lanes, e % lanes);
        let lo = self.expr(min)?;
        let i64t = self.cx.i64();
        if chunks == 1 && rem == 0 {
            return self.vector_body(var, lo, lanes as u32, align, body);
        }
        // for c in 0..chunks: vector body at lo + c·lanes; then the scalar remainder.
        let chunk_var = format!("{var}.chunk");
        self.counted_loop(
            &chunk_var,
            i64t.const_int(0),
            i64t.const_int(chunks),
            false,
            |t| {
                let c = t.var(&chunk_var);
                let base = t.b.add(lo, t.b.mul(c, i64t.const_int(lanes)));
                t.vector_body(var, base, lanes as u32, align, body)
            },
        )?;
        if rem > 0 {
            let start = self.b.add(lo, i64t.const_int(chunks * lanes));
            let end = self.b.add(lo, i64t.const_int(e));
            self.counted_loop(var, start, end, false, |t| t.stmt(body))?;
        }
        Ok(())
    }

    fn vector_body(
        &mut self,
        var: &str,
        lo: Value<'c>,
        lanes: u32,
        align: i64,
        body: &Stmt,
    ) -> Result<(), String> {
        let i64t = self.cx.i64();
        let steps: Vec<Value<'c>> = (0..lanes).map(|l| i64t.const_int(l as i64)).collect();
        let iota = self
            .b
            .add(self.splat(lo, lanes), Value::const_vector(&steps));
        // Scalar uses of the variable (e.g. uniform sub-expressions) see lane 0's value.
        self.vars.push((var.to_string(), lo));
        self.vec = Some(VecCtx {
            var: var.to_string(),
            lanes,
            iota,
            mask: None,
            align,
            fast_path: self.full_tile_fast_path,
        });
        let r = self.scoped(|t| t.vstmt(body));
        self.vec = None;
        self.vars.pop();
        self.vector_loops += 1;
        r
    }

    pub(super) fn lanes(&self) -> u32 {
        self.vec.as_ref().map_or(1, |v| v.lanes)
    }

    fn widen(&self, v: VV<'c>) -> Value<'c> {
        match v {
            VV::U(x) => self.splat(x, self.lanes()),
            VV::V(x) => x,
        }
    }

    pub(super) fn vstmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::Seq(v) => v.iter().try_for_each(|s| self.vstmt(s)),
            Stmt::Attr { body, .. } => self.vstmt(body),
            Stmt::IfThenElse { cond, then_, else_ } => {
                let (var, mask) = {
                    let v = self.vec.as_ref().expect("vector context");
                    (v.var.clone(), v.mask)
                };
                // A load in the condition may only be valid in the active lanes.
                if !cond.uses_var(&var) && (mask.is_none() || !cond.has_load()) {
                    let c = self.expr(cond)?;
                    return self.branch(c, then_, else_.as_deref(), "v", Self::vstmt);
                }
                // Lane-varying: each arm runs with its lanes masked (unmasked in a vector
                // whose lanes all take it, when entered from unmasked code).
                let c = self.vexpr(cond)?;
                let c = self.widen(c);
                let fast = self.vec.as_ref().is_some_and(|v| v.fast_path);
                if mask.is_none() && fast {
                    return self.unmasked_if(c, then_, else_.as_deref());
                }
                self.masked_if(c, mask, then_, else_.as_deref())
            }
            Stmt::Store { buf, index, value } => {
                let v = self.vexpr(value)?;
                let v = self.widen(v);
                let dt = self.buf(buf).decl.dtype;
                let mask = self.vec.as_ref().and_then(|v| v.mask);
                match self.vaddress(buf, index)? {
                    Addr::Contiguous(p) => self.store(v, p, dt.bytes(), mask)?,
                    Addr::Lanes { index, offs } => {
                        // Distinct offsets (legality); a permutation of a range is one
                        // shuffle and one store, anything else a scatter.
                        let lo = *offs.iter().min().expect("lanes");
                        let mut sorted = offs.clone();
                        sorted.sort_unstable();
                        let range = sorted.iter().enumerate().all(|(j, &o)| o - lo == j as i64);
                        if range {
                            let mut inverse = vec![0u32; offs.len()];
                            for (l, &o) in offs.iter().enumerate() {
                                inverse[(o - lo) as usize] = l as u32;
                            }
                            let perm = self.shuffle_mask(&inverse);
                            let v = self.b.shuffle(v, v.ty().poison(), perm);
                            let mask = mask.map(|m| self.b.shuffle(m, m.ty().poison(), perm));
                            let p = self.lane_ptr(buf, index, lo);
                            self.store(v, p, dt.bytes(), mask)?;
                        } else {
                            let ptrs = self.lane_ptrs(buf, index, &offs);
                            self.scatter(v, ptrs, dt.bytes(), mask)?;
                        }
                    }
                    Addr::Gather(ptrs) => self.scatter(v, ptrs, dt.bytes(), mask)?,
                    Addr::Uniform(_) => return Err("uniform store in vector loop".into()),
                }
                Ok(())
            }
            _ => Err("statement not vectorizable (legality check missed it)".into()),
        }
    }

    pub(super) fn shuffle_mask(&self, lanes: &[u32]) -> Value<'c> {
        let i32t = self.cx.i32();
        let m: Vec<Value<'c>> = lanes.iter().map(|&l| i32t.const_int(l as i64)).collect();
        Value::const_vector(&m)
    }

    /// `&buf[index + off]` (`index`: lane 0's flat index).
    fn lane_ptr(&mut self, buf: &str, index: Value<'c>, off: i64) -> Value<'c> {
        let et = self.scalar_ty(self.buf(buf).decl.dtype);
        let i = self.b.add(index, self.cx.i64().const_int(off));
        self.gep_lanes(et, buf, i)
    }

    /// A GEP into `buf`; under a mask an inactive lane's index may be out of range, so it is
    /// not `inbounds`.
    fn gep_lanes(&self, et: Type<'c>, buf: &str, i: Value<'c>) -> Value<'c> {
        if self.vec.as_ref().is_some_and(|v| v.mask.is_some()) {
            self.b.gep_plain(et, self.buf(buf).ptr, i)
        } else {
            self.b.gep(et, self.buf(buf).ptr, i)
        }
    }

    /// `&buf[index + offs[l]]` for every lane.
    fn lane_ptrs(&mut self, buf: &str, index: Value<'c>, offs: &[i64]) -> Value<'c> {
        let et = self.scalar_ty(self.buf(buf).decl.dtype);
        let i64t = self.cx.i64();
        let o: Vec<Value<'c>> = offs.iter().map(|&x| i64t.const_int(x)).collect();
        let idx = self.b.add(
            self.splat(index, offs.len() as u32),
            Value::const_vector(&o),
        );
        self.gep_lanes(et, buf, idx)
    }

    fn vaddress(&mut self, buf: &str, index: &[Expr]) -> Result<Addr<'c>, String> {
        let (var, lanes) = {
            let v = self.vec.as_ref().expect("vector context");
            (v.var.clone(), v.lanes)
        };
        let flat = self.flat_index(buf, index);
        let et = self.scalar_ty(self.buf(buf).decl.dtype);
        let i64t = self.cx.i64();
        let masked = self.vec.as_ref().is_some_and(|v| v.mask.is_some());
        // Under a mask, indices may be out of range in inactive lanes: no `inbounds`
        // ([`Tr::gep_lanes`]), and loads inside the index are evaluated lane-wise (masked) too.
        let gep = |t: &Self, i: Value<'c>| t.gep_lanes(et, buf, i);
        let coeff = if masked && flat.has_load() {
            None
        } else {
            linearize(&flat).coeff_of_var(&var)
        };
        match coeff {
            Some(0) => {
                let i = self.index_expr(&flat)?;
                Ok(Addr::Uniform(gep(self, i)))
            }
            Some(1) => {
                let i = self.index_expr(&flat)?; // var bound to lane 0
                Ok(Addr::Contiguous(gep(self, i)))
            }
            Some(c) => {
                let i = self.index_expr(&flat)?;
                let offs: Vec<Value<'c>> = (0..lanes)
                    .map(|l| i64t.const_int((c as i64).wrapping_mul(l as i64)))
                    .collect();
                let idx = self.b.add(self.splat(i, lanes), Value::const_vector(&offs));
                Ok(Addr::Gather(gep(self, idx)))
            }
            None => {
                let align = self.vec.as_ref().map_or(1, |v| v.align);
                // (A load in the index is evaluated lane-wise under a mask.)
                let offs = (!masked || !flat.has_load())
                    .then(|| lane_offsets(&flat, &var, lanes as i64, align))
                    .flatten();
                if let Some(offs) = offs {
                    let i = self.index_expr(&flat)?; // var bound to lane 0
                    return Ok(if offs.iter().all(|&o| o == 0) {
                        Addr::Uniform(gep(self, i))
                    } else if offs.iter().enumerate().all(|(l, &o)| o == l as i64) {
                        Addr::Contiguous(gep(self, i))
                    } else {
                        Addr::Lanes { index: i, offs }
                    });
                }
                let i = self.vexpr(&flat)?;
                let i = self.widen(i);
                Ok(Addr::Gather(gep(self, i)))
            }
        }
    }

    pub fn vexpr(&mut self, e: &Expr) -> Result<VV<'c>, String> {
        let var = self.vec.as_ref().expect("vector context").var.clone();
        let mask = self.vec.as_ref().and_then(|v| v.mask);
        if !e.uses_var(&var) && (mask.is_none() || !e.has_load()) {
            return Ok(VV::U(self.expr(e)?));
        }
        let lanes = self.lanes();
        Ok(match e {
            Expr::Var(_) => VV::V(self.vec.as_ref().unwrap().iota),
            Expr::Load { buf, index } => {
                let dt = self.buf(buf).decl.dtype;
                let st = self.scalar_ty(dt);
                let vt = st.vector(lanes);
                let align = self.cx.i32().const_int(dt.bytes() as i64);
                let addr = self.vaddress(buf, index)?;
                match (addr, mask) {
                    (Addr::Uniform(p), None) => VV::U(self.b.load(st, p, dt.bytes() as u32)),
                    (Addr::Contiguous(p), None) => VV::V(self.b.load(vt, p, dt.bytes() as u32)),
                    (Addr::Lanes { index, offs }, m) => {
                        // Every element between two lanes' elements is in the buffer, so a
                        // short span is one load and one shuffle (under a mask, only the
                        // elements an active lane reads); a long one a gather.
                        let (lo, hi) = (*offs.iter().min().unwrap(), *offs.iter().max().unwrap());
                        let span = hi - lo + 1;
                        if span <= 2 * lanes as i64 {
                            let p = self.lane_ptr(buf, index, lo);
                            let svt = st.vector(span as u32);
                            let v = match m {
                                None => self.b.load(svt, p, dt.bytes() as u32),
                                Some(m) => {
                                    let sm = self.span_mask(m, &offs, lo, span as usize);
                                    self.masked_load(svt, p, align, sm)?
                                }
                            };
                            let pick: Vec<u32> = offs.iter().map(|&o| (o - lo) as u32).collect();
                            let pick = self.shuffle_mask(&pick);
                            VV::V(self.b.shuffle(v, v.ty().poison(), pick))
                        } else {
                            let ptrs = self.lane_ptrs(buf, index, &offs);
                            VV::V(self.gather(vt, ptrs, align, m)?)
                        }
                    }
                    (Addr::Contiguous(p), Some(m)) => VV::V(self.masked_load(vt, p, align, m)?),
                    (Addr::Uniform(p), m) | (Addr::Gather(p), m) => {
                        let ptrs = if p.ty() == self.cx.ptr() {
                            self.splat(p, lanes)
                        } else {
                            p
                        };
                        VV::V(self.gather(vt, ptrs, align, m)?)
                    }
                }
            }
            Expr::Bin(op, a, b) => {
                let t = self.ty(a);
                let x = self.vexpr(a)?;
                if let (BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod, Some(c)) =
                    (op, b.as_int())
                {
                    if t.is_int()
                        && c != 0
                        && c != -1
                        && crate::loopnest::interp::wrap_int(c, t) == c
                    {
                        let x = self.widen(x);
                        return Ok(VV::V(self.emit_div_const(*op, t, x, c, lanes)));
                    }
                }
                let y = self.vexpr(b)?;
                let (x, y) = (self.widen(x), self.widen(y));
                VV::V(self.emit_bin(*op, t, x, y, lanes))
            }
            Expr::Cmp(op, a, b) => {
                let t = self.ty(a);
                let x = self.vexpr(a)?;
                let y = self.vexpr(b)?;
                let (x, y) = (self.widen(x), self.widen(y));
                VV::V(self.emit_cmp(*op, t, x, y))
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                let x = self.vexpr(a)?;
                let y = self.vexpr(b)?;
                let (x, y) = (self.widen(x), self.widen(y));
                VV::V(if matches!(e, Expr::And(..)) {
                    self.b.and(x, y)
                } else {
                    self.b.or(x, y)
                })
            }
            Expr::Not(a) => {
                let x = self.vexpr(a)?;
                let x = self.widen(x);
                VV::V(self.b.not(x))
            }
            Expr::Select(c, t, f)
                if !c.uses_var(&var)
                    && (mask.is_none() || !c.has_load())
                    && (t.has_load() || f.has_load()) =>
            {
                // Uniform condition guarding loads: branch instead of evaluating both arms.
                // (Under a mask a load in it is valid only in active lanes, maybe none.)
                let cv = self.expr(c)?;
                let func = self.fx.func;
                let tb = self.cx.append_block(func, "vsel_t");
                let fb = self.cx.append_block(func, "vsel_f");
                let join = self.cx.append_block(func, "vsel_join");
                self.b.cond_br(cv, tb, fb);
                self.b.position_at_end(tb);
                let tv = self.scoped(|s| s.vexpr(t))?;
                let tv = self.widen(tv);
                let tend = self.b.current_block();
                self.b.br(join);
                self.b.position_at_end(fb);
                let fv = self.scoped(|s| s.vexpr(f))?;
                let fv = self.widen(fv);
                let fend = self.b.current_block();
                self.b.br(join);
                self.b.position_at_end(join);
                let phi = self.b.phi(tv.ty());
                phi.add_incoming(tv, tend);
                phi.add_incoming(fv, fend);
                VV::V(phi)
            }
            Expr::Select(c, t, f) if t.has_load() || f.has_load() => {
                // Lane-varying condition guarding loads: evaluate each arm with its lanes masked.
                let cv = self.vexpr(c)?;
                let cv = self.widen(cv);
                let (mt, mf) = self.arm_masks(cv, mask);
                self.vec.as_mut().unwrap().mask = Some(mt);
                let tv = self.vexpr(t);
                self.vec.as_mut().unwrap().mask = Some(mf);
                let fv = self.vexpr(f);
                self.vec.as_mut().unwrap().mask = mask;
                let (tv, fv) = (self.widen(tv?), self.widen(fv?));
                VV::V(self.b.select(cv, tv, fv))
            }
            Expr::Select(c, t, f) => {
                let cv = self.vexpr(c)?;
                let tv = self.vexpr(t)?;
                let fv = self.vexpr(f)?;
                let cv = self.widen(cv);
                let (tv, fv) = (self.widen(tv), self.widen(fv));
                VV::V(self.b.select(cv, tv, fv))
            }
            Expr::Cast(to, a) => {
                let from = self.ty(a);
                let x = self.vexpr(a)?;
                let x = self.widen(x);
                VV::V(self.emit_cast(from, *to, x, lanes))
            }
            Expr::Call(f, args) => {
                if *f == Intrinsic::Likely {
                    return self.vexpr(&args[0]);
                }
                let t = self.ty(&args[0]);
                let mut vals = Vec::new();
                for a in args {
                    let v = self.vexpr(a)?;
                    vals.push(self.widen(v));
                }
                VV::V(self.emit_call(*f, t, &vals, lanes))
            }
            Expr::Int(..) | Expr::Float(..) => unreachable!("constants do not use the variable"),
        })
    }
}

/// Two accesses `f1` (a store) and `f2` of one buffer in an L-lane body never let one lane
/// touch another lane's element: identical index, or indices differing by a constant `d` that
/// no lane difference can produce (`d` not a multiple of the stride `c`, or `|d / c| ≥ L`).
fn lanes_disjoint(f1: &Expr, f2: &Expr, var: &str, lanes: i64) -> bool {
    let l1 = linearize(f1);
    let d = l1.add(&linearize(f2), -1);
    let Some(d) = d.as_constant() else {
        return false;
    };
    if d == 0 {
        return true;
    }
    match l1.coeff_of_var(var) {
        Some(c) if c != 0 => d % c != 0 || (d / c).abs() >= lanes as i128,
        _ => false,
    }
}

enum Addr<'c> {
    Uniform(Value<'c>),
    Contiguous(Value<'c>),
    Gather(Value<'c>),
    /// Lane `l` at flat index `index + offs[l]`, constants known at compile time.
    Lanes {
        index: Value<'c>,
        offs: Vec<i64>,
    },
}

/// The lanes' offsets from lane 0's flat index, when they are compile-time constants: an
/// affine index (`c * l`), or the index of loops fused before `AN vectorize`, where the
/// variable enters through `floordiv`/`floormod` by constants. Such a term t is periodic:
/// when every chunk base b is a multiple of the product P of its divisors (`align`, 0: the
/// one chunk starts at 0), t(b + l) - t(b) = t(l) - t(0). `None` when a term also uses
/// another variable or a load, or `align` does not allow it.
pub fn lane_offsets(flat: &Expr, var: &str, lanes: i64, align: i64) -> Option<Vec<i64>> {
    let mut offs = vec![0i64; lanes as usize];
    for (atom, k) in &linearize(flat).terms {
        if !atom.uses_var(var) {
            continue;
        }
        let period = period_of(atom, var)?;
        if align % period != 0 {
            return None;
        }
        let k = i64::try_from(*k).ok()?;
        let t0 = eval_at(atom, var, 0)?;
        for (l, o) in offs.iter_mut().enumerate() {
            let d = eval_at(atom, var, l as i64)? - t0;
            // The claim above, checked at one more base.
            if eval_at(atom, var, period + l as i64)? - eval_at(atom, var, period)? != d {
                return None;
            }
            *o = o.checked_add(k.checked_mul(d)?)?;
        }
    }
    Some(offs)
}

/// The product of the divisors of a term built from `var`, integer constants, `+`, `-`,
/// multiplication by a constant and `floordiv`/`floormod` by positive constants.
fn period_of(e: &Expr, var: &str) -> Option<i64> {
    match e {
        Expr::Var(v) if v == var => Some(1),
        Expr::Int(..) => Some(1),
        Expr::Cast(DType::I64, a) => period_of(a, var),
        Expr::Bin(BinOp::Add | BinOp::Sub, a, b) => {
            period_of(a, var)?.checked_mul(period_of(b, var)?)
        }
        Expr::Bin(BinOp::Mul, a, b) if a.as_int().is_some() || b.as_int().is_some() => {
            period_of(a, var)?.checked_mul(period_of(b, var)?)
        }
        Expr::Bin(BinOp::FloorDiv | BinOp::FloorMod, a, b) => {
            let c = b.as_int().filter(|&c| c > 0)?;
            period_of(a, var)?.checked_mul(c)
        }
        _ => None,
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}
