//! Lane-generic emission of operations: the same helpers build scalar (`lanes == 1`) or vector
//! IR, implementing the semantics documented in `loopnest::interp` (wrapping integers,
//! floor division, zero on integer division by zero, saturating float→int casts).

use super::llvm::*;
use super::translate::Tr;
use crate::loopnest::ir::*;

impl<'c> Tr<'c, '_> {
    pub fn scalar_ty(&self, t: DType) -> Type<'c> {
        match t {
            DType::F32 => self.cx.f32(),
            DType::F64 => self.cx.f64(),
            DType::I8 | DType::U8 => self.cx.i8(),
            DType::I32 => self.cx.i32(),
            DType::I64 => self.cx.i64(),
            DType::Bool => self.cx.i1(),
        }
    }

    pub fn ty_lanes(&self, t: DType, lanes: u32) -> Type<'c> {
        let s = self.scalar_ty(t);
        if lanes > 1 {
            s.vector(lanes)
        } else {
            s
        }
    }

    /// Broadcast a scalar to `lanes` lanes (identity for lanes == 1).
    pub fn splat(&self, v: Value<'c>, lanes: u32) -> Value<'c> {
        if lanes <= 1 {
            return v;
        }
        let vt = v.ty().vector(lanes);
        let i0 = self.cx.i32().const_int(0);
        let one = self.b.insert(vt.poison(), v, i0);
        let mask = Value::const_vector(&vec![i0; lanes as usize]);
        self.b.shuffle(one, vt.poison(), mask)
    }

    pub fn cint(&self, t: DType, v: i64, lanes: u32) -> Value<'c> {
        let c = self.scalar_ty(t).const_int(v);
        if lanes > 1 {
            Value::const_vector(&vec![c; lanes as usize])
        } else {
            c
        }
    }

    fn cfloat(&self, t: DType, v: f64, lanes: u32) -> Value<'c> {
        let c = self.scalar_ty(t).const_float(v);
        if lanes > 1 {
            Value::const_vector(&vec![c; lanes as usize])
        } else {
            c
        }
    }

    fn fm(&self, v: Value<'c>) -> Value<'c> {
        v.set_fast_math(self.fm_flags);
        v
    }

    /// Binary operation on operands of type `t` (both with `lanes` lanes).
    pub fn emit_bin(
        &self,
        op: BinOp,
        t: DType,
        a: Value<'c>,
        b: Value<'c>,
        lanes: u32,
    ) -> Value<'c> {
        let bd = &self.b;
        if t.is_float() {
            return match op {
                BinOp::Add => self.fm(bd.fadd(a, b)),
                BinOp::Sub => self.fm(bd.fsub(a, b)),
                BinOp::Mul => self.fm(bd.fmul(a, b)),
                BinOp::Div => self.fm(bd.fdiv(a, b)),
                BinOp::Min => bd.select(bd.fcmp(LLVMRealOLT, a, b), a, b),
                BinOp::Max => bd.select(bd.fcmp(LLVMRealOGT, a, b), a, b),
                // Rejected by the validator.
                BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod => a.ty().poison(),
            };
        }
        let signed = t.is_signed();
        match op {
            BinOp::Add => bd.add(a, b),
            BinOp::Sub => bd.sub(a, b),
            BinOp::Mul => bd.mul(a, b),
            BinOp::Min => {
                let p = if signed { LLVMIntSLT } else { LLVMIntULT };
                bd.select(bd.icmp(p, a, b), a, b)
            }
            BinOp::Max => {
                let p = if signed { LLVMIntSGT } else { LLVMIntUGT };
                bd.select(bd.icmp(p, a, b), a, b)
            }
            BinOp::Div | BinOp::Mod | BinOp::FloorDiv | BinOp::FloorMod => {
                self.emit_div(op, t, a, b, lanes)
            }
        }
    }

    /// Integer division by a constant `c ∉ {0, -1}` (no guards needed).
    pub fn emit_div_const(
        &self,
        op: BinOp,
        t: DType,
        a: Value<'c>,
        c: i64,
        lanes: u32,
    ) -> Value<'c> {
        let bd = &self.b;
        let cv = self.cint(t, c, lanes);
        if !t.is_signed() {
            return match op {
                BinOp::Div | BinOp::FloorDiv => bd.udiv(a, cv),
                _ => bd.urem(a, cv),
            };
        }
        let zero = self.cint(t, 0, lanes);
        match op {
            BinOp::Div => bd.sdiv(a, cv),
            BinOp::Mod => bd.srem(a, cv),
            BinOp::FloorDiv | BinOp::FloorMod => {
                let q = bd.sdiv(a, cv);
                let r = bd.srem(a, cv);
                // r != 0 with sign(r) != sign(c)
                let off = if c > 0 {
                    bd.icmp(LLVMIntSLT, r, zero)
                } else {
                    bd.icmp(LLVMIntSGT, r, zero)
                };
                if op == BinOp::FloorDiv {
                    bd.select(off, bd.sub(q, self.cint(t, 1, lanes)), q)
                } else {
                    bd.select(off, bd.add(r, cv), r)
                }
            }
            _ => unreachable!(),
        }
    }

    /// Integer division family without UB: b == 0 → 0; MIN / -1 wraps.
    fn emit_div(&self, op: BinOp, t: DType, a: Value<'c>, b: Value<'c>, lanes: u32) -> Value<'c> {
        let bd = &self.b;
        // A poison divisor (e.g. a lane nothing defines) would pass the guards as poison, and
        // `sdiv` by poison is UB: freeze it to some value first.
        let b = bd.freeze(b);
        let zero = self.cint(t, 0, lanes);
        let one = self.cint(t, 1, lanes);
        let is_zero = bd.icmp(LLVMIntEQ, b, zero);
        if !t.is_signed() {
            let bs = bd.select(is_zero, one, b);
            let r = match op {
                BinOp::Div | BinOp::FloorDiv => bd.udiv(a, bs),
                _ => bd.urem(a, bs),
            };
            return bd.select(is_zero, zero, r);
        }
        let m1 = self.cint(t, -1, lanes);
        let is_m1 = bd.icmp(LLVMIntEQ, b, m1);
        let bad = bd.or(is_zero, is_m1);
        let bs = bd.select(bad, one, b);
        let q = bd.select(is_m1, bd.sub(zero, a), bd.sdiv(a, bs));
        let r = bd.select(is_m1, zero, bd.srem(a, bs));
        let res = match op {
            BinOp::Div => q,
            BinOp::Mod => r,
            BinOp::FloorDiv | BinOp::FloorMod => {
                // adjust when r != 0 and sign(r) != sign(b)
                let rnz = bd.icmp(LLVMIntNE, r, zero);
                let rneg = bd.icmp(LLVMIntSLT, r, zero);
                let bneg = bd.icmp(LLVMIntSLT, b, zero);
                let adj = bd.and(rnz, bd.xor(rneg, bneg));
                if op == BinOp::FloorDiv {
                    bd.select(adj, bd.sub(q, one), q)
                } else {
                    bd.select(adj, bd.add(r, b), r)
                }
            }
            _ => unreachable!(),
        };
        bd.select(is_zero, zero, res)
    }

    pub fn emit_cmp(&self, op: CmpOp, t: DType, a: Value<'c>, b: Value<'c>) -> Value<'c> {
        if t.is_float() {
            let p = match op {
                CmpOp::Eq => LLVMRealOEQ,
                CmpOp::Ne => LLVMRealUNE,
                CmpOp::Lt => LLVMRealOLT,
                CmpOp::Le => LLVMRealOLE,
                CmpOp::Gt => LLVMRealOGT,
                CmpOp::Ge => LLVMRealOGE,
            };
            return self.b.fcmp(p, a, b);
        }
        let s = t.is_signed();
        let p = match op {
            CmpOp::Eq => LLVMIntEQ,
            CmpOp::Ne => LLVMIntNE,
            CmpOp::Lt if s => LLVMIntSLT,
            CmpOp::Le if s => LLVMIntSLE,
            CmpOp::Gt if s => LLVMIntSGT,
            CmpOp::Ge if s => LLVMIntSGE,
            CmpOp::Lt => LLVMIntULT,
            CmpOp::Le => LLVMIntULE,
            CmpOp::Gt => LLVMIntUGT,
            CmpOp::Ge => LLVMIntUGE,
        };
        self.b.icmp(p, a, b)
    }

    pub fn emit_cast(&self, from: DType, to: DType, v: Value<'c>, lanes: u32) -> Value<'c> {
        if from == to {
            return v;
        }
        let tt = self.ty_lanes(to, lanes);
        let unsigned_src = matches!(from, DType::U8 | DType::Bool);
        let bd = &self.b;
        match (from.is_float(), to.is_float()) {
            (true, true) => {
                if from.bytes() > to.bytes() {
                    bd.fptrunc(v, tt)
                } else {
                    bd.fpext(v, tt)
                }
            }
            (false, true) => {
                if unsigned_src {
                    bd.uitofp(v, tt)
                } else {
                    bd.sitofp(v, tt)
                }
            }
            (true, false) => {
                if to == DType::Bool {
                    return bd.fcmp(LLVMRealUNE, v, v.ty().null());
                }
                let name = if to == DType::U8 {
                    "llvm.fptoui.sat"
                } else {
                    "llvm.fptosi.sat"
                };
                let f = self
                    .m
                    .intrinsic(name, &[tt, v.ty()])
                    .expect("fpto*i.sat intrinsic");
                bd.call_fn(f, &[v])
            }
            (false, false) => {
                let (fb, tb) = (int_bits(from), int_bits(to));
                if tb < fb {
                    bd.trunc(v, tt)
                } else if tb == fb {
                    v
                } else if unsigned_src {
                    bd.zext(v, tt)
                } else {
                    bd.sext(v, tt)
                }
            }
        }
    }

    /// Math intrinsic on `t` (float) values with `lanes` lanes.
    pub fn emit_call(&self, f: Intrinsic, t: DType, args: &[Value<'c>], lanes: u32) -> Value<'c> {
        // f32 exp, sigmoid, tanh and erf: vector polynomials (vmath.rs); f64 keeps libm's
        if t == DType::F32 && self.vector_math {
            if let Some(v) = self.emit_vmath(f, args[0], lanes) {
                return v;
            }
        }
        let ty = args[0].ty();
        let bd = &self.b;
        let intr = |name: &str| self.m.intrinsic(name, &[ty]).expect("math intrinsic");
        match f {
            Intrinsic::Likely => args[0],
            Intrinsic::Exp => bd.call_fn(intr("llvm.exp"), &args[..1]),
            Intrinsic::Log => bd.call_fn(intr("llvm.log"), &args[..1]),
            Intrinsic::Sqrt => bd.call_fn(intr("llvm.sqrt"), &args[..1]),
            Intrinsic::Fabs => bd.call_fn(intr("llvm.fabs"), &args[..1]),
            Intrinsic::Floor => bd.call_fn(intr("llvm.floor"), &args[..1]),
            Intrinsic::Ceil => bd.call_fn(intr("llvm.ceil"), &args[..1]),
            Intrinsic::Round => bd.call_fn(intr("llvm.roundeven"), &args[..1]),
            Intrinsic::Pow => bd.call_fn(intr("llvm.pow"), &args[..2]),
            Intrinsic::Rsqrt => {
                let s = bd.call_fn(intr("llvm.sqrt"), &args[..1]);
                bd.fdiv(self.cfloat(t, 1.0, lanes), s)
            }
            // TVM's `default.FLegalize` of tir.sigmoid (src/target/intrin_rule.cc)
            Intrinsic::Sigmoid => {
                let e = bd.call_fn(intr("llvm.exp"), &[bd.fneg(args[0])]);
                let d = bd.fadd(self.cfloat(t, 1.0, lanes), e);
                bd.fdiv(self.cfloat(t, 1.0, lanes), d)
            }
            // TVM's llvm rule for tir.tanh, `DispatchNumericalStableTanh`: both branches
            // from exp(-2x) and exp(2x), selected by the sign
            Intrinsic::Tanh => {
                let x = args[0];
                let one = self.cfloat(t, 1.0, lanes);
                let e_neg =
                    bd.call_fn(intr("llvm.exp"), &[bd.fmul(self.cfloat(t, -2.0, lanes), x)]);
                let e_pos = bd.call_fn(intr("llvm.exp"), &[bd.fmul(self.cfloat(t, 2.0, lanes), x)]);
                let pos = bd.fdiv(bd.fsub(one, e_neg), bd.fadd(one, e_neg));
                let neg = bd.fdiv(bd.fsub(e_pos, one), bd.fadd(e_pos, one));
                let ge = bd.fcmp(LLVMRealOGE, x, self.cfloat(t, 0.0, lanes));
                bd.select(ge, pos, neg)
            }
            // tir.erf: TVM's `DispatchPureExtern<FloatSuffix>`, libm's erff / erf, per lane
            Intrinsic::Erf => {
                let name = if t == DType::F32 { "erff" } else { "erf" };
                let st = self.scalar_ty(t);
                let fty = self.cx.fn_type(st, &[st]);
                let func = self
                    .m
                    .function(name)
                    .unwrap_or_else(|| self.m.add_function(name, fty));
                if lanes <= 1 {
                    return bd.call(fty, func, &args[..1]);
                }
                let mut out = ty.poison();
                for l in 0..lanes {
                    let i = self.cx.i32().const_int(l as i64);
                    let x = bd.extract(args[0], i);
                    out = bd.insert(out, bd.call(fty, func, &[x]), i);
                }
                out
            }
        }
    }
}

fn int_bits(t: DType) -> u32 {
    match t {
        DType::Bool => 1,
        DType::I8 | DType::U8 => 8,
        DType::I32 => 32,
        _ => 64,
    }
}
