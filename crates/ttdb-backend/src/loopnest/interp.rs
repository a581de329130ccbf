//! Reference interpreter: executes a `Kernel` on Rust buffers with every access checked.
//!
//! Defined semantics (codegen must match them):
//! * integer arithmetic wraps at the operand type; `Div`/`Mod` truncate, `FloorDiv`/`FloorMod`
//!   round toward -inf; integer division by zero is an error here (codegen yields 0, no UB);
//! * `F32` arithmetic is IEEE single precision (computed in f64 and rounded, which is exact for
//!   + - * /); float `min(a,b)` = `a < b ? a : b`, `max(a,b)` = `a > b ? a : b`;
//! * float→int casts saturate (NaN → 0); int→int casts wrap; `U8` zero-extends;
//! * `And`/`Or` evaluate both operands (no short-circuit), so `&&` ordering never guards an
//!   access; `Select` evaluates only the chosen arm (its condition may guard loads);
//! * temporaries are zero-initialised when allocated.
//!
//! An out-of-bounds access, a division by zero or an exhausted step budget is an `Err`.

use super::data::BufferData;
use super::ir::*;
use super::validate::validate;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum InterpError {
    Invalid(String),
    BadArguments(String),
    OutOfBounds {
        buffer: String,
        index: Vec<i64>,
        shape: Vec<i64>,
    },
    DivisionByZero,
    StepBudgetExceeded(u64),
    /// A temporary larger than `InterpOptions::max_temp_bytes`.
    TemporaryTooLarge {
        buffer: String,
        bytes: i64,
    },
}

impl std::fmt::Display for InterpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InterpError::Invalid(m) => write!(f, "invalid kernel: {m}"),
            InterpError::BadArguments(m) => write!(f, "bad arguments: {m}"),
            InterpError::OutOfBounds {
                buffer,
                index,
                shape,
            } => {
                write!(
                    f,
                    "out-of-bounds access {buffer}{index:?} (shape {shape:?})"
                )
            }
            InterpError::DivisionByZero => write!(f, "integer division by zero"),
            InterpError::StepBudgetExceeded(n) => write!(f, "step budget of {n} exhausted"),
            InterpError::TemporaryTooLarge { buffer, bytes } => {
                write!(f, "temporary `{buffer}` needs {bytes} bytes")
            }
        }
    }
}
impl std::error::Error for InterpError {}

#[derive(Clone, Copy, Debug, Default)]
pub struct InterpOptions {
    /// Maximum number of loop iterations + stores executed; `None` = unlimited.
    pub step_budget: Option<u64>,
}

/// Largest temporary the interpreter allocates (bytes); larger ones are an error.
pub const MAX_TEMP_BYTES: i64 = 1 << 32;

// ----- scalar semantics helpers (shared with the simplifier) ---------------------------------

/// Wrap an integer to the value range of `t`.
pub fn wrap_int(v: i64, t: DType) -> i64 {
    match t {
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I32 => v as i32 as i64,
        DType::Bool => (v != 0) as i64,
        _ => v,
    }
}

/// Integer binary operation at type `t`; `None` on division by zero.
pub fn eval_bin_int(op: BinOp, a: i64, b: i64, t: DType) -> Option<i64> {
    let r = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::Div => {
            if b == 0 {
                return None;
            }
            a.wrapping_div(b)
        }
        BinOp::Mod => {
            if b == 0 {
                return None;
            }
            a.wrapping_rem(b)
        }
        BinOp::FloorDiv => {
            if b == 0 {
                return None;
            }
            let q = a.wrapping_div(b);
            if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
                q.wrapping_sub(1)
            } else {
                q
            }
        }
        BinOp::FloorMod => {
            if b == 0 {
                return None;
            }
            let r = a.wrapping_rem(b);
            if r != 0 && ((r < 0) != (b < 0)) {
                r.wrapping_add(b)
            } else {
                r
            }
        }
        BinOp::Min => a.min(b),
        BinOp::Max => a.max(b),
    };
    Some(wrap_int(r, t))
}

pub fn eval_cmp_int(op: CmpOp, a: i64, b: i64) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

pub fn eval_cmp_float(op: CmpOp, a: f64, b: f64) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

/// erf for f32: libm's `erff`, the function the JIT's kernels call (as TVM's do).
pub fn erf_f32(x: f32) -> f32 {
    extern "C" {
        fn erff(x: f32) -> f32;
    }
    // SAFETY: a pure libm function of one float
    unsafe { erff(x) }
}

/// erf for f64: libm's `erf`.
pub fn erf_f64(x: f64) -> f64 {
    extern "C" {
        fn erf(x: f64) -> f64;
    }
    // SAFETY: a pure libm function of one double
    unsafe { erf(x) }
}

/// Float intrinsic evaluation at type `t` (F32 results rounded to single precision).
pub fn eval_call_float(f: Intrinsic, args: &[f64], t: DType) -> f64 {
    if t == DType::F32 {
        let x = args[0] as f32;
        let r: f32 = match f {
            Intrinsic::Exp => x.exp(),
            Intrinsic::Log => x.ln(),
            Intrinsic::Sqrt => x.sqrt(),
            Intrinsic::Rsqrt => 1.0 / x.sqrt(),
            Intrinsic::Tanh => x.tanh(),
            Intrinsic::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Intrinsic::Erf => erf_f32(x),
            Intrinsic::Fabs => x.abs(),
            Intrinsic::Floor => x.floor(),
            Intrinsic::Ceil => x.ceil(),
            Intrinsic::Round => x.round_ties_even(),
            Intrinsic::Pow => x.powf(args[1] as f32),
            Intrinsic::Likely => x,
        };
        r as f64
    } else {
        let x = args[0];
        match f {
            Intrinsic::Exp => x.exp(),
            Intrinsic::Log => x.ln(),
            Intrinsic::Sqrt => x.sqrt(),
            Intrinsic::Rsqrt => 1.0 / x.sqrt(),
            Intrinsic::Tanh => x.tanh(),
            Intrinsic::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Intrinsic::Erf => erf_f64(x),
            Intrinsic::Fabs => x.abs(),
            Intrinsic::Floor => x.floor(),
            Intrinsic::Ceil => x.ceil(),
            Intrinsic::Round => x.round_ties_even(),
            Intrinsic::Pow => x.powf(args[1]),
            Intrinsic::Likely => x,
        }
    }
}

// ----- resolved form ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum V {
    I(i64),
    F(f64),
}

impl V {
    fn i(self) -> i64 {
        match self {
            V::I(v) => v,
            V::F(f) => f as i64,
        }
    }
    fn f(self) -> f64 {
        match self {
            V::F(v) => v,
            V::I(i) => i as f64,
        }
    }
}

enum IE {
    Const(V),
    Var(usize),
    Load(usize, Vec<IE>),
    Bin(BinOp, DType, Box<IE>, Box<IE>),
    Cmp(CmpOp, bool, Box<IE>, Box<IE>),
    And(Box<IE>, Box<IE>),
    Or(Box<IE>, Box<IE>),
    Not(Box<IE>),
    Select(Box<IE>, Box<IE>, Box<IE>),
    Cast(DType, DType, Box<IE>),
    Call(Intrinsic, DType, Vec<IE>),
}

enum IS {
    For(usize, IE, IE, Box<IS>),
    Seq(Vec<IS>),
    Store(usize, Vec<IE>, IE),
    If(IE, Box<IS>, Option<Box<IS>>),
    Alloc(usize, Box<IS>),
    Eval(IE),
}

struct Resolver {
    vars: HashMap<String, usize>,
    nvars: usize,
    bufs: HashMap<String, usize>,
    decls: Vec<Buffer>,
}

impl Resolver {
    fn ty(&self, e: &Expr) -> DType {
        match e {
            Expr::Int(_, t) | Expr::Float(_, t) => *t,
            Expr::Var(_) => DType::I64,
            Expr::Load { buf, .. } => self.decls[self.bufs[buf]].dtype,
            Expr::Bin(_, a, _) => self.ty(a),
            Expr::Cmp(..) | Expr::And(..) | Expr::Or(..) | Expr::Not(_) => DType::Bool,
            Expr::Select(_, t, _) => self.ty(t),
            Expr::Cast(t, _) => *t,
            Expr::Call(Intrinsic::Likely, _) => DType::Bool,
            Expr::Call(_, a) => self.ty(&a[0]),
        }
    }
    fn expr(&self, e: &Expr) -> IE {
        let b = |x: &Expr| Box::new(self.expr(x));
        match e {
            Expr::Int(v, _) => IE::Const(V::I(*v)),
            Expr::Float(v, t) => IE::Const(V::F(if *t == DType::F32 {
                *v as f32 as f64
            } else {
                *v
            })),
            Expr::Var(v) => IE::Var(self.vars[v]),
            Expr::Load { buf, index } => {
                IE::Load(self.bufs[buf], index.iter().map(|i| self.expr(i)).collect())
            }
            Expr::Bin(op, x, y) => IE::Bin(*op, self.ty(x), b(x), b(y)),
            Expr::Cmp(op, x, y) => IE::Cmp(*op, self.ty(x).is_float(), b(x), b(y)),
            Expr::And(x, y) => IE::And(b(x), b(y)),
            Expr::Or(x, y) => IE::Or(b(x), b(y)),
            Expr::Not(x) => IE::Not(b(x)),
            Expr::Select(c, t, f) => IE::Select(b(c), b(t), b(f)),
            Expr::Cast(t, x) => IE::Cast(self.ty(x), *t, b(x)),
            Expr::Call(Intrinsic::Likely, a) => self.expr(&a[0]),
            Expr::Call(f, a) => {
                IE::Call(*f, self.ty(&a[0]), a.iter().map(|x| self.expr(x)).collect())
            }
        }
    }
    fn stmt(&mut self, s: &Stmt) -> IS {
        match s {
            Stmt::For {
                var,
                min,
                extent,
                body,
                ..
            } => {
                let min = self.expr(min);
                let ext = self.expr(extent);
                let slot = self.nvars;
                self.nvars += 1;
                self.vars.insert(var.clone(), slot);
                let body = self.stmt(body);
                self.vars.remove(var);
                IS::For(slot, min, ext, Box::new(body))
            }
            Stmt::Attr { body, .. } => self.stmt(body),
            Stmt::Seq(v) => IS::Seq(v.iter().map(|s| self.stmt(s)).collect()),
            Stmt::Store { buf, index, value } => IS::Store(
                self.bufs[buf],
                index.iter().map(|i| self.expr(i)).collect(),
                self.expr(value),
            ),
            Stmt::IfThenElse { cond, then_, else_ } => IS::If(
                self.expr(cond),
                Box::new(self.stmt(then_)),
                else_.as_ref().map(|e| Box::new(self.stmt(e))),
            ),
            Stmt::Allocate { buffer, body } => {
                let slot = self.decls.len();
                self.decls.push(buffer.clone());
                self.bufs.insert(buffer.name.clone(), slot);
                let body = self.stmt(body);
                self.bufs.remove(&buffer.name);
                IS::Alloc(slot, Box::new(body))
            }
            Stmt::Evaluate(e) => IS::Eval(self.expr(e)),
        }
    }
}

struct Machine<'a> {
    vars: Vec<i64>,
    decls: &'a [Buffer],
    strides: Vec<Vec<i64>>,
    store: Vec<BufferData>,
    steps: u64,
    budget: u64,
    max_temp_bytes: i64,
}

impl Machine<'_> {
    fn tick(&mut self) -> Result<(), InterpError> {
        self.steps += 1;
        if self.steps > self.budget {
            return Err(InterpError::StepBudgetExceeded(self.budget));
        }
        Ok(())
    }

    fn offset(&mut self, buf: usize, idx: &[IE]) -> Result<usize, InterpError> {
        let mut vals = Vec::with_capacity(idx.len());
        for i in idx {
            vals.push(self.eval(i)?.i());
        }
        let shape = &self.decls[buf].shape;
        let mut off = 0i64;
        for (d, &v) in vals.iter().enumerate() {
            if v < 0 || v >= shape[d] {
                return Err(InterpError::OutOfBounds {
                    buffer: self.decls[buf].name.clone(),
                    index: vals.clone(),
                    shape: shape.clone(),
                });
            }
            off += v * self.strides[buf][d];
        }
        Ok(off as usize)
    }

    fn eval(&mut self, e: &IE) -> Result<V, InterpError> {
        Ok(match e {
            IE::Const(v) => *v,
            IE::Var(s) => V::I(self.vars[*s]),
            IE::Load(b, idx) => {
                let off = self.offset(*b, idx)?;
                match &self.store[*b] {
                    BufferData::F32(v) => V::F(v[off] as f64),
                    BufferData::F64(v) => V::F(v[off]),
                    BufferData::I8(v) => V::I(v[off] as i64),
                    BufferData::U8(v) => V::I(v[off] as i64),
                    BufferData::I32(v) => V::I(v[off] as i64),
                    BufferData::I64(v) => V::I(v[off]),
                }
            }
            IE::Bin(op, t, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                if t.is_float() {
                    let (x, y) = (x.f(), y.f());
                    let r = match op {
                        BinOp::Add => x + y,
                        BinOp::Sub => x - y,
                        BinOp::Mul => x * y,
                        BinOp::Div => x / y,
                        BinOp::Min => {
                            if x < y {
                                x
                            } else {
                                y
                            }
                        }
                        BinOp::Max => {
                            if x > y {
                                x
                            } else {
                                y
                            }
                        }
                        _ => return Err(InterpError::Invalid(format!("{op:?} on floats"))),
                    };
                    V::F(if *t == DType::F32 { r as f32 as f64 } else { r })
                } else {
                    V::I(eval_bin_int(*op, x.i(), y.i(), *t).ok_or(InterpError::DivisionByZero)?)
                }
            }
            IE::Cmp(op, float, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                let r = if *float {
                    eval_cmp_float(*op, x.f(), y.f())
                } else {
                    eval_cmp_int(*op, x.i(), y.i())
                };
                V::I(r as i64)
            }
            IE::And(a, b) => {
                let x = self.eval(a)?.i() != 0;
                let y = self.eval(b)?.i() != 0;
                V::I((x && y) as i64)
            }
            IE::Or(a, b) => {
                let x = self.eval(a)?.i() != 0;
                let y = self.eval(b)?.i() != 0;
                V::I((x || y) as i64)
            }
            IE::Not(a) => V::I((self.eval(a)?.i() == 0) as i64),
            IE::Select(c, t, f) => {
                // Only the chosen arm is evaluated: select conditions guard loads (bounds
                // checker), and codegen branches when an arm contains a load.
                if self.eval(c)?.i() != 0 {
                    self.eval(t)?
                } else {
                    self.eval(f)?
                }
            }
            IE::Cast(from, to, a) => {
                let x = self.eval(a)?;
                cast(x, *from, *to)
            }
            IE::Call(f, t, args) => {
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(a)?.f());
                }
                V::F(eval_call_float(*f, &vals, *t))
            }
        })
    }

    fn exec(&mut self, s: &IS) -> Result<(), InterpError> {
        match s {
            IS::For(slot, min, ext, body) => {
                let min = self.eval(min)?.i();
                let ext = self.eval(ext)?.i();
                for i in 0..ext.max(0) {
                    self.tick()?;
                    self.vars[*slot] = min.wrapping_add(i);
                    self.exec(body)?;
                }
            }
            IS::Seq(v) => {
                for s in v {
                    self.exec(s)?;
                }
            }
            IS::Store(b, idx, value) => {
                self.tick()?;
                let v = self.eval(value)?;
                let off = self.offset(*b, idx)?;
                match &mut self.store[*b] {
                    BufferData::F32(d) => d[off] = v.f() as f32,
                    BufferData::F64(d) => d[off] = v.f(),
                    BufferData::I8(d) => d[off] = v.i() as i8,
                    BufferData::U8(d) => d[off] = v.i() as u8,
                    BufferData::I32(d) => d[off] = v.i() as i32,
                    BufferData::I64(d) => d[off] = v.i(),
                }
            }
            IS::If(c, t, e) => {
                if self.eval(c)?.i() != 0 {
                    self.exec(t)?;
                } else if let Some(e) = e {
                    self.exec(e)?;
                }
            }
            IS::Alloc(slot, body) => {
                let bytes = self.decls[*slot].size_bytes();
                if bytes > self.max_temp_bytes {
                    return Err(InterpError::TemporaryTooLarge {
                        buffer: self.decls[*slot].name.clone(),
                        bytes,
                    });
                }
                let old = std::mem::replace(
                    &mut self.store[*slot],
                    BufferData::for_buffer(&self.decls[*slot]),
                );
                let r = self.exec(body);
                self.store[*slot] = old;
                r?;
            }
            IS::Eval(e) => {
                self.tick()?;
                self.eval(e)?;
            }
        }
        Ok(())
    }
}

fn cast(x: V, from: DType, to: DType) -> V {
    if to.is_float() {
        let f = match x {
            V::F(f) => f,
            V::I(i) => {
                if from == DType::U8 {
                    i as u8 as f64
                } else {
                    i as f64
                }
            }
        };
        V::F(if to == DType::F32 { f as f32 as f64 } else { f })
    } else {
        match x {
            V::F(f) => V::I(match to {
                DType::I8 => f as i8 as i64,
                DType::U8 => f as u8 as i64,
                DType::I32 => f as i32 as i64,
                DType::Bool => (f != 0.0) as i64,
                _ => f as i64,
            }),
            V::I(i) => V::I(wrap_int(i, to)),
        }
    }
}

/// Check that `bufs` match the kernel's parameters (count, dtype, length).
pub fn check_arguments(k: &Kernel, bufs: &[BufferData]) -> Result<(), String> {
    if bufs.len() != k.params.len() {
        return Err(format!(
            "kernel takes {} buffers, got {}",
            k.params.len(),
            bufs.len()
        ));
    }
    for (p, b) in k.params.iter().zip(bufs) {
        if p.dtype != b.dtype() || p.num_elements() as usize != b.len() {
            return Err(format!(
                "buffer `{}` expects {}x{}, got {}x{}",
                p.name,
                p.num_elements(),
                p.dtype,
                b.len(),
                b.dtype()
            ));
        }
    }
    Ok(())
}

/// Execute `k` on `bufs` (one per parameter, in order). Returns the number of steps executed.
pub fn run(k: &Kernel, bufs: &mut [BufferData], opts: InterpOptions) -> Result<u64, InterpError> {
    validate(k).map_err(|e| InterpError::Invalid(e.0))?;
    check_arguments(k, bufs).map_err(InterpError::BadArguments)?;
    let mut r = Resolver {
        vars: HashMap::new(),
        nvars: 0,
        bufs: k
            .params
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name.clone(), i))
            .collect(),
        decls: k.params.clone(),
    };
    let body = r.stmt(&k.body);
    let decls = r.decls;
    let mut store: Vec<BufferData> = bufs
        .iter_mut()
        .map(|b| std::mem::replace(b, BufferData::F32(Vec::new())))
        .collect();
    store.extend(
        decls[k.params.len()..]
            .iter()
            .map(|_| BufferData::F32(Vec::new())),
    );
    let mut m = Machine {
        vars: vec![0; r.nvars],
        strides: decls.iter().map(|d| d.strides()).collect(),
        decls: &decls,
        store,
        steps: 0,
        budget: opts.step_budget.unwrap_or(u64::MAX),
        max_temp_bytes: MAX_TEMP_BYTES,
    };
    let res = m.exec(&body);
    for (dst, src) in bufs.iter_mut().zip(m.store.drain(..)) {
        *dst = src;
    }
    res.map(|_| m.steps)
}
