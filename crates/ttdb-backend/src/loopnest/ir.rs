//! Loop-nest IR data types: buffers, expressions, statements, kernels.
//!
//! This is the target of state→loop-nest lowering and the input of codegen. Indices on
//! `Load`/`Store` stay multi-dimensional (one expression per buffer dimension) so that the
//! bounds checker can reason per dimension; codegen flattens them row-major.
//!
//! Conventions:
//! * Every loop variable is a 64-bit signed integer (`DType::I64`). Integer immediates used in
//!   index arithmetic should be `I64` too (`Expr::int`).
//! * Variables are identified by name; a name must not be rebound while it is in scope
//!   (`validate` checks this).
//! * Buffers are identified by name: kernel parameters and `Allocate`d temporaries share one
//!   namespace.

use std::fmt;

/// Element / value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I8,
    U8,
    I32,
    I64,
    /// Result of comparisons and logical operators. Not allowed as a buffer element type.
    Bool,
}

impl DType {
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::U8 | DType::I32 | DType::I64)
    }
    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }
    /// Size in bytes of one element stored in memory.
    pub fn bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a buffer is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferRole {
    Input,
    Output,
    /// Scratch memory, only legal inside an `Allocate`. Contents are zero each time the
    /// `Allocate` is entered, interpreted and compiled alike (`codegen/translate.rs`).
    Temporary,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    /// Extent of every dimension (row-major). A scalar buffer has shape `[1]`.
    pub shape: Vec<i64>,
    pub role: BufferRole,
}

impl Buffer {
    pub fn new(name: &str, dtype: DType, shape: &[i64], role: BufferRole) -> Buffer {
        Buffer {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            role,
        }
    }
    /// Number of elements (saturating; shapes are validated to be small enough).
    pub fn num_elements(&self) -> i64 {
        self.shape
            .iter()
            .fold(1i64, |a, &d| a.saturating_mul(d.max(0)))
    }
    pub fn size_bytes(&self) -> i64 {
        self.num_elements()
            .saturating_mul(self.dtype.bytes() as i64)
    }
    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<i64> {
        let mut s = vec![1i64; self.shape.len()];
        for d in (0..self.shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1].saturating_mul(self.shape[d + 1]);
        }
        s
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Float division, or truncating integer division (C semantics).
    Div,
    /// Truncating integer remainder (C `%`).
    Mod,
    /// Floor division (integers only), TVM `floordiv`.
    FloorDiv,
    /// Floor modulo (integers only, result has the divisor's sign), TVM `floormod`.
    FloorMod,
    Min,
    Max,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Math intrinsics / builtins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Erf,
    Fabs,
    Floor,
    Ceil,
    Round,
    Pow,
    /// `likely(cond)`: a branch hint; value = its argument.
    Likely,
}

impl Intrinsic {
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Exp => "exp",
            Intrinsic::Log => "log",
            Intrinsic::Sqrt => "sqrt",
            Intrinsic::Rsqrt => "rsqrt",
            Intrinsic::Tanh => "tanh",
            Intrinsic::Sigmoid => "sigmoid",
            Intrinsic::Erf => "erf",
            Intrinsic::Fabs => "fabs",
            Intrinsic::Floor => "floor",
            Intrinsic::Ceil => "ceil",
            Intrinsic::Round => "round",
            Intrinsic::Pow => "pow",
            Intrinsic::Likely => "likely",
        }
    }
    pub fn arity(self) -> usize {
        if self == Intrinsic::Pow {
            2
        } else {
            1
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Int(i64, DType),
    Float(f64, DType),
    /// A loop variable (always `I64`).
    Var(String),
    Load {
        buf: String,
        index: Vec<Expr>,
    },
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(DType, Box<Expr>),
    Call(Intrinsic, Vec<Expr>),
}

/// Loop kinds (TVM `ForKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    Serial,
    Parallel,
    Vectorized,
    Unrolled,
}

/// Attribute / pragma attached to a sub-tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// TVM `pragma_auto_unroll_max_step` (+ `pragma_unroll_explicit`). TE places this *inside*
    /// the loop of the pragma'd axis (it wraps that loop's body), so that loop itself is not in
    /// the scope.
    AutoUnroll { max_step: i64, explicit: bool },
    /// Any other pragma, kept for printing only.
    Pragma(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    For {
        var: String,
        min: Expr,
        extent: Expr,
        kind: ForKind,
        body: Box<Stmt>,
    },
    Attr {
        attr: Attr,
        body: Box<Stmt>,
    },
    Seq(Vec<Stmt>),
    Store {
        buf: String,
        index: Vec<Expr>,
        value: Expr,
    },
    IfThenElse {
        cond: Expr,
        then_: Box<Stmt>,
        else_: Option<Box<Stmt>>,
    },
    /// Scoped temporary; `buffer.role` must be `Temporary` and its shape constant.
    Allocate {
        buffer: Buffer,
        body: Box<Stmt>,
    },
    /// Evaluate an expression for its side effects (none in this IR; kept for TIR parity).
    Evaluate(Expr),
}

/// A compilable unit: parameters in ABI order, and a body.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Buffer>,
    pub body: Stmt,
}

// ---------------------------------------------------------------------------------------------
// Construction helpers (keep lowering code short).

#[allow(clippy::should_implement_trait)]
impl Expr {
    pub fn int(v: i64) -> Expr {
        Expr::Int(v, DType::I64)
    }
    pub fn i32(v: i64) -> Expr {
        Expr::Int(v, DType::I32)
    }
    pub fn f32(v: f64) -> Expr {
        Expr::Float(v, DType::F32)
    }
    pub fn var(name: &str) -> Expr {
        Expr::Var(name.to_string())
    }
    pub fn load(buf: &str, index: Vec<Expr>) -> Expr {
        Expr::Load {
            buf: buf.to_string(),
            index,
        }
    }
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
    pub fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        Expr::Cmp(op, Box::new(a), Box::new(b))
    }
    pub fn add(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Add, a, b)
    }
    pub fn sub(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Sub, a, b)
    }
    pub fn mul(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Mul, a, b)
    }
    pub fn floordiv(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::FloorDiv, a, b)
    }
    pub fn floormod(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::FloorMod, a, b)
    }
    pub fn min(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Min, a, b)
    }
    pub fn max(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Max, a, b)
    }
    pub fn lt(a: Expr, b: Expr) -> Expr {
        Expr::cmp(CmpOp::Lt, a, b)
    }
    pub fn select(c: Expr, t: Expr, f: Expr) -> Expr {
        Expr::Select(Box::new(c), Box::new(t), Box::new(f))
    }
    pub fn cast(t: DType, e: Expr) -> Expr {
        Expr::Cast(t, Box::new(e))
    }
    pub fn call(f: Intrinsic, args: Vec<Expr>) -> Expr {
        Expr::Call(f, args)
    }
    pub fn likely(c: Expr) -> Expr {
        Expr::Call(Intrinsic::Likely, vec![c])
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int(v, _) => Some(*v),
            _ => None,
        }
    }
    /// Calls `f` on every direct sub-expression.
    pub fn for_each_child(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => {}
            Expr::Load { index, .. } => index.iter().for_each(f),
            Expr::Bin(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                f(a);
                f(b)
            }
            Expr::Not(a) | Expr::Cast(_, a) => f(a),
            Expr::Select(c, t, e) => {
                f(c);
                f(t);
                f(e)
            }
            Expr::Call(_, args) => args.iter().for_each(f),
        }
    }
    /// True if `name` occurs free in the expression.
    pub fn uses_var(&self, name: &str) -> bool {
        match self {
            Expr::Var(v) => v == name,
            _ => {
                let mut found = false;
                self.for_each_child(|c| found = found || c.uses_var(name));
                found
            }
        }
    }
    /// Calls `f` on every load in the expression (its buffer and indices), outermost first.
    pub fn for_each_load(&self, f: &mut dyn FnMut(&str, &[Expr])) {
        if let Expr::Load { buf, index } = self {
            f(buf, index);
        }
        self.for_each_child(|c| c.for_each_load(f));
    }
    /// True if the expression contains a `Load`.
    pub fn has_load(&self) -> bool {
        match self {
            Expr::Load { .. } => true,
            _ => {
                let mut found = false;
                self.for_each_child(|c| found = found || c.has_load());
                found
            }
        }
    }
    /// Replace every occurrence of variable `name` by `with`.
    pub fn substitute(&self, name: &str, with: &Expr) -> Expr {
        self.map(&mut |e| match e {
            Expr::Var(v) if v == name => Some(with.clone()),
            _ => None,
        })
    }
    /// Rebuild bottom-up-friendly: `f` may replace a node (returning `Some`), else children are
    /// mapped recursively.
    pub fn map(&self, f: &mut dyn FnMut(&Expr) -> Option<Expr>) -> Expr {
        if let Some(r) = f(self) {
            return r;
        }
        let bx = |e: &Expr, f: &mut dyn FnMut(&Expr) -> Option<Expr>| Box::new(e.map(f));
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => self.clone(),
            Expr::Load { buf, index } => Expr::Load {
                buf: buf.clone(),
                index: index.iter().map(|i| i.map(f)).collect(),
            },
            Expr::Bin(op, a, b) => Expr::Bin(*op, bx(a, f), bx(b, f)),
            Expr::Cmp(op, a, b) => Expr::Cmp(*op, bx(a, f), bx(b, f)),
            Expr::And(a, b) => Expr::And(bx(a, f), bx(b, f)),
            Expr::Or(a, b) => Expr::Or(bx(a, f), bx(b, f)),
            Expr::Not(a) => Expr::Not(bx(a, f)),
            Expr::Select(c, t, e) => Expr::Select(bx(c, f), bx(t, f), bx(e, f)),
            Expr::Cast(t, a) => Expr::Cast(*t, bx(a, f)),
            Expr::Call(i, args) => Expr::Call(*i, args.iter().map(|a| a.map(f)).collect()),
        }
    }
}

impl Stmt {
    /// Calls `f` on every top-level expression of the tree: loop bounds, guards, store
    /// indices and values, evaluated expressions (not on their sub-expressions).
    pub fn for_each_expr(&self, f: &mut dyn FnMut(&Expr)) {
        match self {
            Stmt::Seq(v) => v.iter().for_each(|s| s.for_each_expr(f)),
            Stmt::For {
                min, extent, body, ..
            } => {
                f(min);
                f(extent);
                body.for_each_expr(f)
            }
            Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => body.for_each_expr(f),
            Stmt::IfThenElse { cond, then_, else_ } => {
                f(cond);
                then_.for_each_expr(f);
                if let Some(e) = else_ {
                    e.for_each_expr(f);
                }
            }
            Stmt::Store { index, value, .. } => {
                index.iter().for_each(&mut *f);
                f(value);
            }
            Stmt::Evaluate(e) => f(e),
        }
    }
    /// This node rebuilt with `f` applied to each of its child statements (loop, attribute
    /// and allocation bodies, sequence items, both arms of an `if`); leaves are cloned.
    pub fn map_children(&self, f: &mut dyn FnMut(&Stmt) -> Stmt) -> Stmt {
        match self {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => Stmt::for_(var, min.clone(), extent.clone(), *kind, f(body)),
            Stmt::Attr { attr, body } => Stmt::attr(attr.clone(), f(body)),
            Stmt::Seq(items) => Stmt::Seq(items.iter().map(&mut *f).collect()),
            Stmt::IfThenElse { cond, then_, else_ } => {
                let then_ = f(then_);
                Stmt::if_(cond.clone(), then_, else_.as_ref().map(|e| f(e)))
            }
            Stmt::Allocate { buffer, body } => Stmt::allocate(buffer.clone(), f(body)),
            Stmt::Store { .. } | Stmt::Evaluate(_) => self.clone(),
        }
    }
    pub fn for_(var: &str, min: Expr, extent: Expr, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::For {
            var: var.to_string(),
            min,
            extent,
            kind,
            body: Box::new(body),
        }
    }
    /// `for var in 0..extent` with a constant extent.
    pub fn loop_(var: &str, extent: i64, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::for_(var, Expr::int(0), Expr::int(extent), kind, body)
    }
    pub fn store(buf: &str, index: Vec<Expr>, value: Expr) -> Stmt {
        Stmt::Store {
            buf: buf.to_string(),
            index,
            value,
        }
    }
    pub fn if_(cond: Expr, then_: Stmt, else_: Option<Stmt>) -> Stmt {
        Stmt::IfThenElse {
            cond,
            then_: Box::new(then_),
            else_: else_.map(Box::new),
        }
    }
    pub fn allocate(buffer: Buffer, body: Stmt) -> Stmt {
        Stmt::Allocate {
            buffer,
            body: Box::new(body),
        }
    }
    pub fn attr(attr: Attr, body: Stmt) -> Stmt {
        Stmt::Attr {
            attr,
            body: Box::new(body),
        }
    }
    pub fn nop() -> Stmt {
        Stmt::Seq(Vec::new())
    }
    /// Substitute a variable in every expression of the statement.
    pub fn substitute(&self, name: &str, with: &Expr) -> Stmt {
        self.map_exprs(&mut |e| e.substitute(name, with))
    }
    /// Apply `f` to every top-level expression of every statement.
    pub fn map_exprs(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Stmt {
        match self {
            Stmt::For {
                var,
                min,
                extent,
                kind,
                body,
            } => Stmt::For {
                var: var.clone(),
                min: f(min),
                extent: f(extent),
                kind: *kind,
                body: Box::new(body.map_exprs(f)),
            },
            Stmt::Attr { attr, body } => Stmt::Attr {
                attr: attr.clone(),
                body: Box::new(body.map_exprs(f)),
            },
            Stmt::Seq(v) => Stmt::Seq(v.iter().map(|s| s.map_exprs(f)).collect()),
            Stmt::Store { buf, index, value } => Stmt::Store {
                buf: buf.clone(),
                index: index.iter().map(&mut *f).collect(),
                value: f(value),
            },
            Stmt::IfThenElse { cond, then_, else_ } => Stmt::IfThenElse {
                cond: f(cond),
                then_: Box::new(then_.map_exprs(f)),
                else_: else_.as_ref().map(|e| Box::new(e.map_exprs(f))),
            },
            Stmt::Allocate { buffer, body } => Stmt::Allocate {
                buffer: buffer.clone(),
                body: Box::new(body.map_exprs(f)),
            },
            Stmt::Evaluate(e) => Stmt::Evaluate(f(e)),
        }
    }
    /// Number of statement nodes (a size measure for code-size guards).
    pub fn size(&self) -> usize {
        match self {
            Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
                1 + body.size()
            }
            Stmt::Seq(v) => 1 + v.iter().map(|s| s.size()).sum::<usize>(),
            Stmt::IfThenElse { then_, else_, .. } => {
                1 + then_.size() + else_.as_ref().map_or(0, |e| e.size())
            }
            Stmt::Store { .. } | Stmt::Evaluate(_) => 1,
        }
    }
    /// Flatten nested `Seq`s and drop empty ones.
    pub fn seq(items: Vec<Stmt>) -> Stmt {
        let mut out = Vec::new();
        for s in items {
            match s {
                Stmt::Seq(inner) => {
                    if let Stmt::Seq(v) = Stmt::seq(inner) {
                        out.extend(v)
                    } else {
                        unreachable!()
                    }
                }
                other => out.push(other),
            }
        }
        Stmt::Seq(out)
    }
    pub fn contains_loop(&self) -> bool {
        match self {
            Stmt::For { .. } => true,
            Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => body.contains_loop(),
            Stmt::Seq(v) => v.iter().any(|s| s.contains_loop()),
            Stmt::IfThenElse { then_, else_, .. } => {
                then_.contains_loop() || else_.as_ref().is_some_and(|e| e.contains_loop())
            }
            Stmt::Store { .. } | Stmt::Evaluate(_) => false,
        }
    }
}

impl Kernel {
    pub fn new(name: &str, params: Vec<Buffer>, body: Stmt) -> Kernel {
        Kernel {
            name: name.to_string(),
            params,
            body,
        }
    }
    pub fn param(&self, name: &str) -> Option<&Buffer> {
        self.params.iter().find(|b| b.name == name)
    }
}
