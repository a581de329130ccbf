//! Kernel → LLVM IR translation: functions, statements, scalar expressions, loops, parallel
//! outlining and temporaries. Vector loops live in `vector.rs`, operations in `expr.rs`.
//!
//! Temporaries: ≤ `ALLOCA_LIMIT` bytes become entry-block allocas of the function that executes
//! them (SROA can promote them to registers); larger ones are carved from a scratch block the
//! runtime hands over (reused across runs and, per thread, across parallel chunks).
//!
//! The scratch contract, shared with the interpreter (`loopnest::interp`): a temporary is zero
//! each time its `Allocate` is entered. Both paths zero there, every time (a memset at the
//! `Allocate`, which LLVM drops where the body overwrites the buffer first, and which is not
//! emitted where `loopnest::coverage` proves that for a parallel stage), so a kernel reads
//! the same values compiled or interpreted, whether its temporary sits in a loop, in reused
//! scratch, or in a worker's block. No load yields undef.

use super::llvm::*;
use crate::loopnest::ir::*;
use crate::loopnest::simplify::simplify_expr;

pub const ALLOCA_LIMIT: i64 = 16 * 1024;

pub struct BufSlot<'c> {
    pub name: String,
    pub ptr: Value<'c>,
    pub decl: Buffer,
}

/// Per-function state.
pub struct Fx<'c> {
    pub func: Value<'c>,
    pub entry: Block<'c>,
    pub abort_bb: Block<'c>,
    pub abort_ptr: Value<'c>,
    pub scratch: Value<'c>,
    pub scratch_used: i64,
    pub rtctx: Option<Value<'c>>,
}

pub struct VecCtx<'c> {
    pub var: String,
    pub lanes: u32,
    /// `min + <0, 1, …, lanes-1>` as an i64 vector.
    pub iota: Value<'c>,
    /// Active lanes under a lane-varying `if` or select arm (see `vector.rs`'s module doc).
    pub mask: Option<Value<'c>>,
    /// Every chunk base is a multiple of this (0: the base is 0; `Tr::chunk_align`).
    pub align: i64,
    /// A lane-varying `if` may branch on its mask being full or empty (`Tr::unmasked_if`).
    /// False inside the arms of such a branch, which it emits twice: code grows at most 2x.
    pub fast_path: bool,
}

pub struct Tr<'c, 'a> {
    pub cx: &'c Context,
    pub m: &'a Module<'c>,
    pub b: Builder<'c>,
    pub fm_flags: u32,
    pub bufs: Vec<BufSlot<'c>>,
    pub vars: Vec<(String, Value<'c>)>,
    pub fx: Fx<'c>,
    pub vec: Option<VecCtx<'c>>,
    pub prefix: String,
    pub fn_count: usize,
    pub fn_attrs: Vec<(String, String)>,
    pub abort_checks: bool,
    /// `CodegenOptions::full_tile_fast_path`.
    pub full_tile_fast_path: bool,
    /// `CodegenOptions::vector_math`.
    pub vector_math: bool,
    /// Maximum lanes of one vector body (see `vector::MAX_CHUNK`).
    pub max_chunk: i64,
    /// Scoped cache of pure (load-free) index computations: a value emitted earlier in the
    /// current structured region (or an enclosing one) dominates everything emitted later in
    /// it, so it can be reused. One map per open region (loop body, branch, vector body).
    pub cache: Vec<std::collections::HashMap<String, Value<'c>>>,
    /// Statistics for tests / reports.
    pub vector_loops: usize,
    pub scalarized_loops: usize,
}

fn align_up(x: i64, a: i64) -> i64 {
    (x + a - 1) / a * a
}

impl<'c, 'a> Tr<'c, 'a> {
    pub fn buf(&self, name: &str) -> &BufSlot<'c> {
        self.bufs
            .iter()
            .rev()
            .find(|b| b.name == name)
            .expect("validated buffer")
    }
    pub fn var(&self, name: &str) -> Value<'c> {
        self.vars
            .iter()
            .rev()
            .find(|v| v.0 == name)
            .expect("validated variable")
            .1
    }

    /// Type of an expression (kernel already validated).
    pub fn ty(&self, e: &Expr) -> DType {
        match e {
            Expr::Int(_, t) | Expr::Float(_, t) => *t,
            Expr::Var(_) => DType::I64,
            Expr::Load { buf, .. } => self.buf(buf).decl.dtype,
            Expr::Bin(_, a, _) => self.ty(a),
            Expr::Cmp(..) | Expr::And(..) | Expr::Or(..) | Expr::Not(_) => DType::Bool,
            Expr::Select(_, t, _) => self.ty(t),
            Expr::Cast(t, _) => *t,
            Expr::Call(Intrinsic::Likely, _) => DType::Bool,
            Expr::Call(_, a) => self.ty(&a[0]),
        }
    }

    /// Row-major flattened I64 index expression.
    pub fn flat_index(&self, buf: &str, index: &[Expr]) -> Expr {
        let strides = self.buf(buf).decl.strides();
        let mut acc = Expr::int(0);
        for (i, s) in index.iter().zip(strides) {
            let i = if self.ty(i) == DType::I64 {
                i.clone()
            } else {
                Expr::cast(DType::I64, i.clone())
            };
            acc = Expr::add(acc, Expr::mul(i, Expr::int(s)));
        }
        simplify_expr(&acc)
    }

    /// Create a function with entry / start / abort blocks and make it current.
    pub fn begin_function(&mut self, name: &str, fty: Type<'c>, internal: bool) -> Value<'c> {
        let f = self.m.add_function(name, fty);
        if internal {
            f.set_internal();
        }
        for (k, v) in &self.fn_attrs {
            self.cx.string_attr(f, k, v);
        }
        self.cx.enum_attr(f, u32::MAX, "nounwind");
        let entry = self.cx.append_block(f, "entry");
        let abort_bb = self.cx.append_block(f, "aborted");
        self.b.position_at_end(abort_bb);
        self.b.ret(
            self.cx
                .i32()
                .const_int(super::runtime::STATUS_ABORTED as i64),
        );
        let start = self.cx.append_block(f, "start");
        self.b.position_at_end(start);
        self.fx = Fx {
            func: f,
            entry,
            abort_bb,
            abort_ptr: self.cx.ptr().null(),
            scratch: self.cx.ptr().null(),
            scratch_used: 0,
            rtctx: None,
        };
        f
    }

    /// Terminate the current block with `ret 0` and link entry → start.
    pub fn end_function(&mut self, start: Block<'c>) {
        self.b.ret(self.cx.i32().const_int(0));
        let cur = self.b.current_block();
        self.b.position_at_end(self.fx.entry);
        self.b.br(start);
        self.b.position_at_end(cur);
    }

    /// Run `f` in a new cache region (values it caches are forgotten afterwards).
    /// `if c { then_ } else { else_ }`, each arm emitted by `emit` in its own scope;
    /// `tag` tells the blocks of the scalar and vector emitters apart in the IR.
    pub fn branch(
        &mut self,
        c: Value<'c>,
        then_: &Stmt,
        else_: Option<&Stmt>,
        tag: &str,
        emit: fn(&mut Self, &Stmt) -> Result<(), String>,
    ) -> Result<(), String> {
        let f = self.fx.func;
        let tb = self.cx.append_block(f, &format!("{tag}then"));
        let eb = self.cx.append_block(f, &format!("{tag}else"));
        let join = self.cx.append_block(f, &format!("{tag}endif"));
        self.b.cond_br(c, tb, eb);
        self.b.position_at_end(tb);
        self.scoped(|t| emit(t, then_))?;
        self.b.br(join);
        self.b.position_at_end(eb);
        if let Some(e) = else_ {
            self.scoped(|t| emit(t, e))?;
        }
        self.b.br(join);
        self.b.position_at_end(join);
        Ok(())
    }

    pub fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.cache.push(Default::default());
        let r = f(self);
        self.cache.pop();
        r
    }

    fn cached(&self, key: &str) -> Option<Value<'c>> {
        self.cache.iter().rev().find_map(|m| m.get(key).copied())
    }

    fn remember(&mut self, key: String, v: Value<'c>) {
        if let Some(m) = self.cache.last_mut() {
            m.insert(key, v);
        }
    }

    /// Scalar value of a pure integer expression, reusing an earlier identical computation.
    pub fn index_expr(&mut self, e: &Expr) -> Result<Value<'c>, String> {
        if e.has_load() || matches!(e, Expr::Int(..) | Expr::Var(_)) {
            return self.expr(e);
        }
        let key = crate::loopnest::printer::expr_to_string(e);
        if let Some(v) = self.cached(&key) {
            return Ok(v);
        }
        let v = self.expr(e)?;
        self.remember(key, v);
        Ok(v)
    }

    /// Run `f` with the builder positioned at the end of the entry block.
    pub fn in_entry<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let cur = self.b.current_block();
        self.b.position_at_end(self.fx.entry);
        let r = f(self);
        self.b.position_at_end(cur);
        r
    }

    fn new_fn_name(&mut self, what: &str) -> String {
        self.fn_count += 1;
        format!("{}_{}{}", self.prefix, what, self.fn_count)
    }

    pub fn abort_check(&mut self) {
        if !self.abort_checks {
            return;
        }
        let i32t = self.cx.i32();
        let v = self.b.load_atomic_i32(i32t, self.fx.abort_ptr);
        let c = self.b.icmp(LLVMIntNE, v, i32t.const_int(0));
        let cont = self.cx.append_block(self.fx.func, "cont");
        self.b.cond_br(c, self.fx.abort_bb, cont);
        self.b.position_at_end(cont);
    }

    // ----- statements ------------------------------------------------------------------------

    pub fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => match kind {
                ForKind::Parallel => self.parallel(var, min, extent, body),
                ForKind::Vectorized => {
                    if self.vectorizable(var, min, extent, body) {
                        self.vector_loop(var, min, extent, body)
                    } else {
                        self.scalarized_loops += 1;
                        self.serial(var, min, extent, body)
                    }
                }
                ForKind::Serial | ForKind::Unrolled => self.serial(var, min, extent, body),
            },
            Stmt::Attr { body, .. } => self.stmt(body),
            Stmt::Seq(v) => v.iter().try_for_each(|s| self.stmt(s)),
            Stmt::Store { buf, index, value } => {
                let v = self.expr(value)?;
                let ptr = self.address(buf, index)?;
                let align = self.buf(buf).decl.dtype.bytes() as u32;
                self.b.store(v, ptr, align);
                Ok(())
            }
            Stmt::IfThenElse { cond, then_, else_ } => {
                let c = self.expr(cond)?;
                self.branch(c, then_, else_.as_deref(), "", Self::stmt)
            }
            Stmt::Allocate { buffer, body } => {
                let zeroed = !crate::loopnest::coverage::overwritten_first(buffer, body);
                let ptr = self.allocate(buffer, zeroed);
                self.bufs.push(BufSlot {
                    name: buffer.name.clone(),
                    ptr,
                    decl: buffer.clone(),
                });
                let r = self.stmt(body);
                self.bufs.pop();
                r
            }
            Stmt::Evaluate(e) => self.expr(e).map(|_| ()),
        }
    }

    /// The memory of `buffer`, zeroed here (at its `Allocate`, each time it is entered: the
    /// scratch contract above) unless `zeroed` is false because its first loop nest provably
    /// overwrites every element (`loopnest::coverage`); the alloca or scratch slot itself is
    /// made once, in the entry block.
    fn allocate(&mut self, buffer: &Buffer, zeroed: bool) -> Value<'c> {
        let bytes = buffer.size_bytes().max(1);
        let p = if bytes <= ALLOCA_LIMIT {
            self.in_entry(|t| t.b.alloca(t.cx.i8(), t.cx.i64().const_int(bytes), 64))
        } else {
            let off = self.fx.scratch_used;
            self.fx.scratch_used = align_up(off + bytes, 64);
            let scratch = self.fx.scratch;
            self.in_entry(|t| t.b.gep(t.cx.i8(), scratch, t.cx.i64().const_int(off)))
        };
        if !zeroed {
            return p;
        }
        let memset = self
            .m
            .intrinsic("llvm.memset", &[self.cx.ptr(), self.cx.i64()])
            .expect("memset");
        let (zero, n, volatile) = (
            self.cx.i8().const_int(0),
            self.cx.i64().const_int(bytes),
            self.cx.i1().const_int(0),
        );
        self.b.call_fn(memset, &[p, zero, n, volatile]);
        p
    }

    pub fn address(&mut self, buf: &str, index: &[Expr]) -> Result<Value<'c>, String> {
        let flat = self.flat_index(buf, index);
        let i = self.index_expr(&flat)?;
        let slot = self.buf(buf);
        let et = self.scalar_ty(slot.decl.dtype);
        Ok(self.b.gep(et, slot.ptr, i))
    }

    /// Serial loop `for var in [min, min + extent)`.
    fn serial(&mut self, var: &str, min: &Expr, extent: &Expr, body: &Stmt) -> Result<(), String> {
        // Tiny constant loops are emitted unrolled, as LLVM's full unrolling would (TVM
        // relies on it; ttdb runs LLVM without its costly unroll passes). This leaves the
        // loop around them innermost, where LLVM's loop vectorizer can take it.
        if let (Some(m), Some(e)) = (min.as_int(), extent.as_int()) {
            if emitted_unrolled(extent, body) {
                for i in m..m + e {
                    self.vars
                        .push((var.to_string(), self.cx.i64().const_int(i)));
                    let r = self.scoped(|t| t.stmt(body));
                    self.vars.pop();
                    r?;
                }
                return Ok(());
            }
        }
        let lo = self.expr(min)?;
        let ext = self.expr(extent)?;
        let hi = self.b.add(lo, ext);
        // Abort checks go into loops that run other loops, so the innermost emitted loops
        // (also those left innermost by unrolling tiny ones) stay check-free, where LLVM
        // vectorizes them. The checks also keep LLVM from hoisting a hot inner loop's
        // invariants into registers it needs (measured: GEMM and vgg_16 convs lose 15-20%
        // without them). A long innermost loop checks anyway.
        let check = runs_a_loop(body) || extent.as_int().is_none_or(|e| e > 1 << 16);
        self.counted_loop(var, lo, hi, check, |t| t.stmt(body))
    }

    /// Emit `for var in [lo, hi)` around `f`.
    pub fn counted_loop(
        &mut self,
        var: &str,
        lo: Value<'c>,
        hi: Value<'c>,
        check_abort: bool,
        f: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let func = self.fx.func;
        let pre = self.b.current_block();
        let header = self.cx.append_block(func, "loop");
        let body = self.cx.append_block(func, "body");
        let exit = self.cx.append_block(func, "endloop");
        self.b.br(header);
        self.b.position_at_end(header);
        let i = self.b.phi(self.cx.i64());
        i.add_incoming(lo, pre);
        let c = self.b.icmp(LLVMIntSLT, i, hi);
        self.b.cond_br(c, body, exit);
        self.b.position_at_end(body);
        if check_abort {
            self.abort_check();
        }
        self.vars.push((var.to_string(), i));
        let r = self.scoped(f);
        self.vars.pop();
        r?;
        let next = self.b.add(i, self.cx.i64().const_int(1));
        i.add_incoming(next, self.b.current_block());
        self.b.br(header);
        self.b.position_at_end(exit);
        Ok(())
    }

    /// Outline the parallel loop body and call the runtime launcher.
    fn parallel(
        &mut self,
        var: &str,
        min: &Expr,
        extent: &Expr,
        body: &Stmt,
    ) -> Result<(), String> {
        let lo = self.expr(min)?;
        let ext = self.expr(extent)?;
        let ptr_t = self.cx.ptr();
        let i64t = self.cx.i64();
        let i32t = self.cx.i32();
        // Captures: every visible buffer pointer, every visible variable, and `lo`.
        let nb = self.bufs.len();
        let nv = self.vars.len() + 1;
        let (parr, varr) = self.in_entry(|t| {
            let p = t.b.alloca(ptr_t, i64t.const_int(nb.max(1) as i64), 8);
            let v = t.b.alloca(i64t, i64t.const_int(nv as i64), 8);
            (p, v)
        });
        for (k, slot) in self.bufs.iter().enumerate() {
            let at = self.b.gep(ptr_t, parr, i64t.const_int(k as i64));
            self.b.store(slot.ptr, at, 8);
        }
        let mut var_vals: Vec<Value<'c>> = self.vars.iter().map(|v| v.1).collect();
        var_vals.push(lo);
        for (k, v) in var_vals.iter().enumerate() {
            let at = self.b.gep(i64t, varr, i64t.const_int(k as i64));
            self.b.store(*v, at, 8);
        }

        // --- outlined functions -----------------------------------------------------------
        let impl_name = self.new_fn_name("par_impl");
        let wrap_name = self.new_fn_name("par");
        let mut impl_params: Vec<Type<'c>> = vec![ptr_t; nb];
        impl_params.extend(vec![i64t; nv]);
        impl_params.extend([i64t, i64t, ptr_t, ptr_t]); // begin, end, scratch, abort
        let impl_ty = self.cx.fn_type(i32t, &impl_params);
        let ph = self.fx_placeholder();
        let saved_fx = std::mem::replace(&mut self.fx, ph);
        let saved_bufs: Vec<BufSlot<'c>> = std::mem::take(&mut self.bufs);
        let saved_vars = std::mem::take(&mut self.vars);
        let saved_cache = std::mem::replace(&mut self.cache, vec![Default::default()]);
        let saved_block = self.b.current_block();

        let f = self.begin_function(&impl_name, impl_ty, true);
        let start = self.b.current_block();
        for (k, slot) in saved_bufs.iter().enumerate() {
            self.cx.enum_attr(f, k as u32 + 1, "noalias");
            self.bufs.push(BufSlot {
                name: slot.name.clone(),
                ptr: f.param(k as u32),
                decl: slot.decl.clone(),
            });
        }
        for (k, (name, _)) in saved_vars.iter().enumerate() {
            self.vars.push((name.clone(), f.param((nb + k) as u32)));
        }
        let base = (nb + nv) as u32;
        let par_lo = f.param(base - 1);
        let (begin, end) = (f.param(base), f.param(base + 1));
        self.fx.scratch = f.param(base + 2);
        self.fx.abort_ptr = f.param(base + 3);
        let result = self.counted_loop("__par_i", begin, end, true, |t| {
            let i = t.var("__par_i");
            let v = t.b.add(par_lo, i);
            t.vars.push((var.to_string(), v));
            let r = t.stmt(body);
            t.vars.pop();
            r
        });
        self.end_function(start);
        let body_scratch = self.fx.scratch_used;

        // wrapper: body(ptr ptrs, ptr vars, i64 begin, i64 end, ptr scratch, ptr abort)
        let wrap_ty = self
            .cx
            .fn_type(i32t, &[ptr_t, ptr_t, i64t, i64t, ptr_t, ptr_t]);
        let w = self.begin_function(&wrap_name, wrap_ty, true);
        let wstart = self.b.current_block();
        let mut args = Vec::new();
        for k in 0..nb {
            let at = self.b.gep(ptr_t, w.param(0), i64t.const_int(k as i64));
            args.push(self.b.load(ptr_t, at, 8));
        }
        for k in 0..nv {
            let at = self.b.gep(i64t, w.param(1), i64t.const_int(k as i64));
            args.push(self.b.load(i64t, at, 8));
        }
        args.extend([w.param(2), w.param(3), w.param(4), w.param(5)]);
        let st = self.b.call(impl_ty, f, &args);
        self.b.ret(st);
        let cur = self.b.current_block();
        self.b.position_at_end(self.fx.entry);
        self.b.br(wstart);
        self.b.position_at_end(cur);

        // --- restore and launch --------------------------------------------------------------
        self.fx = saved_fx;
        self.bufs = saved_bufs;
        self.vars = saved_vars;
        self.cache = saved_cache;
        self.b.position_at_end(saved_block);
        result?;
        let launch_ty = self
            .cx
            .fn_type(i32t, &[ptr_t, ptr_t, ptr_t, ptr_t, i64t, i64t, ptr_t]);
        let launch = self
            .m
            .function("ttdb_parallel_for")
            .unwrap_or_else(|| self.m.add_function("ttdb_parallel_for", launch_ty));
        let rtctx = self
            .fx
            .rtctx
            .ok_or("parallel loop outside the top-level function")?;
        let status = self.b.call(
            launch_ty,
            launch,
            &[
                rtctx,
                w,
                parr,
                varr,
                ext,
                i64t.const_int(body_scratch),
                self.fx.abort_ptr,
            ],
        );
        let bad = self.b.icmp(LLVMIntNE, status, i32t.const_int(0));
        let cont = self.cx.append_block(self.fx.func, "after_par");
        self.b.cond_br(bad, self.fx.abort_bb, cont);
        self.b.position_at_end(cont);
        Ok(())
    }

    fn fx_placeholder(&self) -> Fx<'c> {
        Fx {
            func: self.fx.func,
            entry: self.fx.entry,
            abort_bb: self.fx.abort_bb,
            abort_ptr: self.fx.abort_ptr,
            scratch: self.fx.scratch,
            scratch_used: 0,
            rtctx: None,
        }
    }

    // ----- scalar expressions ----------------------------------------------------------------

    pub fn expr(&mut self, e: &Expr) -> Result<Value<'c>, String> {
        Ok(match e {
            Expr::Int(v, t) => self.scalar_ty(*t).const_int(*v),
            Expr::Float(v, t) => self.scalar_ty(*t).const_float(*v),
            Expr::Var(v) => self.var(v),
            Expr::Load { buf, index } => {
                let ptr = self.address(buf, index)?;
                let t = self.buf(buf).decl.dtype;
                self.b.load(self.scalar_ty(t), ptr, t.bytes() as u32)
            }
            Expr::Bin(op, a, b) => {
                // Integer divisions are the expensive part of index arithmetic: reuse them.
                let key = (matches!(
                    op,
                    BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod
                ) && !e.has_load())
                .then(|| crate::loopnest::printer::expr_to_string(e));
                if let Some(v) = key.as_deref().and_then(|k| self.cached(k)) {
                    return Ok(v);
                }
                let t = self.ty(a);
                let x = self.expr(a)?;
                let v = match (op, b.as_int()) {
                    (BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod, Some(c))
                        if t.is_int()
                            && c != 0
                            && c != -1
                            && crate::loopnest::interp::wrap_int(c, t) == c =>
                    {
                        self.emit_div_const(*op, t, x, c, 1)
                    }
                    _ => {
                        let y = self.expr(b)?;
                        self.emit_bin(*op, t, x, y, 1)
                    }
                };
                if let Some(k) = key {
                    self.remember(k, v);
                }
                v
            }
            Expr::Cmp(op, a, b) => {
                let t = self.ty(a);
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                self.emit_cmp(*op, t, x, y)
            }
            Expr::And(a, b) => {
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                self.b.and(x, y)
            }
            Expr::Or(a, b) => {
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                self.b.or(x, y)
            }
            Expr::Not(a) => {
                let x = self.expr(a)?;
                self.b.not(x)
            }
            Expr::Select(c, t, f) => {
                let cv = self.expr(c)?;
                if t.has_load() || f.has_load() {
                    // Loads may only be valid under the condition: branch, don't speculate.
                    return self.branchy_select(cv, t, f);
                }
                let tv = self.expr(t)?;
                let fv = self.expr(f)?;
                self.b.select(cv, tv, fv)
            }
            Expr::Cast(to, a) => {
                let from = self.ty(a);
                let x = self.expr(a)?;
                self.emit_cast(from, *to, x, 1)
            }
            Expr::Call(f, args) => {
                if *f == Intrinsic::Likely {
                    return self.expr(&args[0]);
                }
                let t = self.ty(&args[0]);
                let mut vals = Vec::new();
                for a in args {
                    vals.push(self.expr(a)?);
                }
                self.emit_call(*f, t, &vals, 1)
            }
        })
    }

    fn branchy_select(&mut self, c: Value<'c>, t: &Expr, f: &Expr) -> Result<Value<'c>, String> {
        let func = self.fx.func;
        let tb = self.cx.append_block(func, "sel_t");
        let fb = self.cx.append_block(func, "sel_f");
        let join = self.cx.append_block(func, "sel_join");
        self.b.cond_br(c, tb, fb);
        self.b.position_at_end(tb);
        let tv = self.scoped(|s| s.expr(t))?;
        let tend = self.b.current_block();
        self.b.br(join);
        self.b.position_at_end(fb);
        let fv = self.scoped(|s| s.expr(f))?;
        let fend = self.b.current_block();
        self.b.br(join);
        self.b.position_at_end(join);
        let phi = self.b.phi(tv.ty());
        phi.add_incoming(tv, tend);
        phi.add_incoming(fv, fend);
        Ok(phi)
    }
}

/// Whether `s` emits a loop: vectorized loops become straight vector code, and tiny serial
/// loops are emitted unrolled.
fn runs_a_loop(s: &Stmt) -> bool {
    match s {
        Stmt::For {
            kind: ForKind::Vectorized,
            body,
            ..
        } => runs_a_loop(body),
        Stmt::For {
            kind: ForKind::Serial | ForKind::Unrolled,
            extent,
            body,
            ..
        } if emitted_unrolled(extent, body) => runs_a_loop(body),
        Stmt::For { .. } => true,
        Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => runs_a_loop(body),
        Stmt::Seq(v) => v.iter().any(runs_a_loop),
        Stmt::IfThenElse { then_, else_, .. } => {
            runs_a_loop(then_) || else_.as_ref().is_some_and(|e| runs_a_loop(e))
        }
        Stmt::Store { .. } | Stmt::Evaluate(_) => false,
    }
}

/// Serial loops whose unrolled body holds at most this many statements are emitted
/// unrolled: enough for the register tiles of real schedules. 32 gave the same kernel
/// speed on the resnet-50 corpus convs at 1.8x the compile time.
const FULL_UNROLL_SIZE: u64 = 16;

/// Statements emitted for `s` once its serial loops are unrolled: a vectorized loop emits
/// its body once (as vector code); parallel loops and allocations are never unrolled.
fn unrolled_size(s: &Stmt) -> u64 {
    match s {
        Stmt::For {
            kind: ForKind::Serial | ForKind::Unrolled,
            extent,
            body,
            ..
        } => match extent.as_int() {
            Some(e) => (e.max(0) as u64).saturating_mul(unrolled_size(body)),
            None => u64::MAX,
        },
        Stmt::For {
            kind: ForKind::Vectorized,
            body,
            ..
        } => unrolled_size(body),
        Stmt::For { .. } | Stmt::Allocate { .. } => u64::MAX,
        Stmt::Attr { body, .. } => unrolled_size(body),
        Stmt::Seq(v) => v
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(unrolled_size(s))),
        Stmt::IfThenElse { then_, else_, .. } => 1u64
            .saturating_add(unrolled_size(then_))
            .saturating_add(else_.as_ref().map_or(0, |e| unrolled_size(e))),
        Stmt::Store { .. } | Stmt::Evaluate(_) => 1,
    }
}

/// Whether a serial loop with this extent and body is emitted unrolled.
fn emitted_unrolled(extent: &Expr, body: &Stmt) -> bool {
    extent
        .as_int()
        .is_some_and(|e| (e.max(0) as u64).saturating_mul(unrolled_size(body)) <= FULL_UNROLL_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Stmt {
        Stmt::store("O", vec![Expr::var("i")], Expr::f32(0.0))
    }

    #[test]
    fn unrolled_size_counts_vector_bodies_once_and_refuses_parallel_loops() {
        let inner = Stmt::loop_("v", 8, ForKind::Vectorized, store());
        let tile = Stmt::loop_(
            "a",
            4,
            ForKind::Serial,
            Stmt::loop_("b", 2, ForKind::Serial, inner),
        );
        assert_eq!(unrolled_size(&tile), 8);
        let par = Stmt::loop_("p", 2, ForKind::Parallel, store());
        assert_eq!(
            unrolled_size(&Stmt::loop_("a", 2, ForKind::Serial, par)),
            u64::MAX
        );
    }

    #[test]
    fn abort_checks_skip_loops_that_are_emitted_unrolled() {
        // oc 32 x (ic 2 x oh 2 stores): the tiny ic/oh loops are emitted unrolled, so
        // the oc loop runs no loop and stays check-free (LLVM may vectorize it)
        let tiny = Stmt::loop_(
            "ic",
            2,
            ForKind::Serial,
            Stmt::loop_("oh", 2, ForKind::Serial, store()),
        );
        assert!(emitted_unrolled(
            &Expr::int(2),
            &Stmt::loop_("oh", 2, ForKind::Serial, store())
        ));
        assert!(!runs_a_loop(&tiny));
        let oc = Stmt::loop_("oc", 32, ForKind::Serial, tiny);
        assert!(runs_a_loop(&oc), "the loop around the oc loop checks");
        assert!(!runs_a_loop(&Stmt::loop_(
            "v",
            8,
            ForKind::Vectorized,
            store()
        )));
        assert!(!emitted_unrolled(&Expr::var("n"), &store()));
    }
}
