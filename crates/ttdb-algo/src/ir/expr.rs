//! Scalar expressions of compute bodies: a plain tree (`Box`ed children), cloneable,
//! walked by [`crate::ir::visit`].
//!
//! The constructors (`Expr::add`, `floordiv`, the `+ - *` operators, ...) fold constants
//! exactly like TVM's operator overloads do when TOPI builds a body (`arith::TryConstFold`,
//! `src/arith/const_fold.h`): `x*1 -> x`, `x + 0 -> x`, `floordiv(x, 1) -> x`,
//! `floormod(x, 1) -> 0`, `3 == 3 -> (bool)1`, but `0 - x` stays. This matters because
//! PrintDAG prints the folded tree and its md5 is the workload key hash. Use
//! [`Expr::binary_raw`] to build a node without folding (TVM's `tir::Select(...)` and node
//! constructors do not fold).
use super::dtype::DType;
use super::TensorId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// `/`: float division, or truncated division for integers (TVM `Div`).
    Div,
    /// `%`: truncated modulo (TVM `Mod`).
    Mod,
    FloorDiv,
    FloorMod,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }

    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

/// Intrinsic calls (`tir.<name>` ops). `IfThenElse` is TVM's lazy `tir.if_then_else`
/// used by `topi.nn.pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Intrinsic {
    Exp,
    Tanh,
    Sqrt,
    Log,
    Fabs,
    Sigmoid,
    Erf,
    Pow,
    IfThenElse,
}

impl Intrinsic {
    /// The registered op name, as PrintDAG shows it (`Op(tir.exp)`).
    pub fn op_name(self) -> &'static str {
        match self {
            Intrinsic::Exp => "tir.exp",
            Intrinsic::Tanh => "tir.tanh",
            Intrinsic::Sqrt => "tir.sqrt",
            Intrinsic::Log => "tir.log",
            Intrinsic::Fabs => "tir.fabs",
            Intrinsic::Sigmoid => "tir.sigmoid",
            Intrinsic::Erf => "tir.erf",
            Intrinsic::Pow => "tir.pow",
            Intrinsic::IfThenElse => "tir.if_then_else",
        }
    }

    pub fn arity(self) -> usize {
        match self {
            Intrinsic::Pow => 2,
            Intrinsic::IfThenElse => 3,
            _ => 1,
        }
    }
}

/// A scalar expression. Index variables are `Var`s named after the axis (axis names are
/// unique inside a stage; TVM checks it), always int32.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Expr {
    IntImm {
        value: i64,
        dtype: DType,
    },
    FloatImm {
        /// Non-finite values (an epilogue's bound) travel as words in JSON.
        #[serde(with = "crate::ir::serde_float")]
        value: f64,
        dtype: DType,
    },
    Var(String),
    /// `T[i, j, ...]`, a read of another stage's output (TVM `ProducerLoad`).
    Load {
        tensor: TensorId,
        indices: Vec<Expr>,
        dtype: DType,
    },
    Binary {
        op: BinOp,
        a: Box<Expr>,
        b: Box<Expr>,
    },
    Not(Box<Expr>),
    Select {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    Cast {
        dtype: DType,
        value: Box<Expr>,
    },
    Call {
        func: Intrinsic,
        args: Vec<Expr>,
        dtype: DType,
    },
}

/// Constant view of an immediate, for folding.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Const {
    Int(i64),
    Float(f64),
}

// `Expr::div`/`min`/`max` mirror TVM's free functions (`tvm::div`), not `std::ops`.
#[allow(clippy::should_implement_trait)]
impl Expr {
    // ----- leaves -------------------------------------------------------------------
    pub fn int(v: i64) -> Expr {
        Expr::IntImm {
            value: v,
            dtype: DType::I32,
        }
    }

    pub fn f32(v: f64) -> Expr {
        Expr::FloatImm {
            value: v,
            dtype: DType::F32,
        }
    }

    pub fn bool(v: bool) -> Expr {
        Expr::IntImm {
            value: v as i64,
            dtype: DType::Bool,
        }
    }

    pub fn var(name: impl Into<String>) -> Expr {
        Expr::Var(name.into())
    }

    /// `tvm.tir.const(v, dtype)`.
    pub fn constant(v: f64, dtype: DType) -> Expr {
        if dtype.is_float() {
            Expr::FloatImm { value: v, dtype }
        } else {
            Expr::IntImm {
                value: v as i64,
                dtype,
            }
        }
    }

    /// `tvm::min_value(dtype)` (the identity of a max reduction, max-pool padding).
    pub fn min_value(dtype: DType) -> Expr {
        match dtype {
            DType::Float(16) => Expr::FloatImm {
                value: -65504.0,
                dtype,
            },
            DType::Float(32) => Expr::FloatImm {
                value: f32::MIN as f64,
                dtype,
            },
            DType::Float(_) => Expr::FloatImm {
                value: f64::MIN,
                dtype,
            },
            DType::Int(b) => Expr::IntImm {
                value: if b >= 64 {
                    i64::MIN
                } else {
                    -(1i64 << (b - 1))
                },
                dtype,
            },
            DType::UInt(_) | DType::Bool => Expr::IntImm { value: 0, dtype },
        }
    }

    // ----- type -----------------------------------------------------------------------
    pub fn dtype(&self) -> DType {
        match self {
            Expr::IntImm { dtype, .. } | Expr::FloatImm { dtype, .. } => *dtype,
            Expr::Var(_) => DType::I32,
            Expr::Load { dtype, .. } | Expr::Cast { dtype, .. } | Expr::Call { dtype, .. } => {
                *dtype
            }
            Expr::Binary { op, a, .. } => {
                if op.is_comparison() || op.is_logical() {
                    DType::Bool
                } else {
                    a.dtype()
                }
            }
            Expr::Not(_) => DType::Bool,
            Expr::Select { then, .. } => then.dtype(),
        }
    }

    fn as_const(&self) -> Option<Const> {
        match self {
            Expr::IntImm { value, .. } => Some(Const::Int(*value)),
            Expr::FloatImm { value, .. } => Some(Const::Float(*value)),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::IntImm { value, .. } => Some(*value),
            _ => None,
        }
    }

    fn is_const_value(&self, v: i64) -> bool {
        match self.as_const() {
            Some(Const::Int(x)) => x == v,
            Some(Const::Float(x)) => x == v as f64,
            None => false,
        }
    }

    // ----- casts (tvm::cast: identity when types agree, folds immediates) ---------------
    pub fn cast(self, dtype: DType) -> Expr {
        if self.dtype() == dtype {
            return self;
        }
        match self.as_const() {
            Some(Const::Int(v)) => Expr::constant(v as f64, dtype),
            Some(Const::Float(v)) => Expr::constant(v, dtype),
            None => Expr::Cast {
                dtype,
                value: Box::new(self),
            },
        }
    }

    /// `BinaryOpMatchTypes`: an int operand meeting a float one is cast to float; two
    /// ints of different width meet at the wider one.
    fn match_types(a: Expr, b: Expr) -> (Expr, Expr) {
        let (ta, tb) = (a.dtype(), b.dtype());
        if ta == tb {
            return (a, b);
        }
        if ta.is_float() && !tb.is_float() {
            return (a, b.cast(ta));
        }
        if tb.is_float() && !ta.is_float() {
            return (a.cast(tb), b);
        }
        if ta.is_float() && tb.is_float() || ta.is_int() && tb.is_int() {
            return if ta.bits() >= tb.bits() {
                (a, b.cast(ta))
            } else {
                (a.cast(tb), b)
            };
        }
        (a, b)
    }

    /// A binary node exactly as given (no folding, no type matching).
    pub fn binary_raw(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary {
            op,
            a: Box::new(a),
            b: Box::new(b),
        }
    }

    /// A binary node built like TVM's `tvm::add` & co: match types, then try to fold.
    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        let (a, b) = if op.is_logical() {
            (a, b)
        } else {
            Expr::match_types(a, b)
        };
        match fold(op, &a, &b) {
            Some(e) => e,
            None => Expr::binary_raw(op, a, b),
        }
    }

    pub fn floordiv(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorDiv, a, b.into())
    }
    pub fn floormod(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::FloorMod, a, b.into())
    }
    pub fn div(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Div, a, b.into())
    }
    pub fn min(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Min, a, b.into())
    }
    pub fn max(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Max, a, b.into())
    }
    pub fn eq(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Eq, a, b.into())
    }
    pub fn lt(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Lt, a, b.into())
    }
    pub fn ge(a: Expr, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::Ge, a, b.into())
    }
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::And, a, b)
    }
    /// `tvm.tir.all(*conds)`: a left-leaning `&&` chain; None if empty.
    pub fn all(conds: Vec<Expr>) -> Option<Expr> {
        conds.into_iter().reduce(Expr::and)
    }

    /// `tir::Select` node (never folded, like TVM's node constructor).
    pub fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        Expr::Select {
            cond: Box::new(cond),
            then: Box::new(then),
            otherwise: Box::new(otherwise),
        }
    }

    pub fn call(func: Intrinsic, args: Vec<Expr>) -> Expr {
        let dtype = match func {
            Intrinsic::IfThenElse => args[1].dtype(),
            _ => args[0].dtype(),
        };
        Expr::Call { func, args, dtype }
    }

    pub fn if_then_else(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        Expr::call(Intrinsic::IfThenElse, vec![cond, then, otherwise])
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::int(v)
    }
}

impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Expr {
        e.clone()
    }
}

macro_rules! impl_arith_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<R: Into<Expr>> std::ops::$trait<R> for Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                Expr::binary($op, self, rhs.into())
            }
        }
    };
}
impl_arith_operator!(Add, add, BinOp::Add);
impl_arith_operator!(Sub, sub, BinOp::Sub);
impl_arith_operator!(Mul, mul, BinOp::Mul);

fn int_like(v: i64, like: &Expr) -> Expr {
    Expr::IntImm {
        value: v,
        dtype: like.dtype(),
    }
}

fn float_like(v: f64, like: &Expr) -> Expr {
    Expr::FloatImm {
        value: v,
        dtype: like.dtype(),
    }
}

/// `arith::TryConstFold` for one binary op (types already matched).
fn fold(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    use BinOp::*;
    let (ca, cb) = (a.as_const(), b.as_const());
    let bool_of = |v: bool| Expr::bool(v);
    // both constant
    if let (Some(x), Some(y)) = (ca, cb) {
        match (x, y) {
            (Const::Int(x), Const::Int(y)) => {
                let r = match op {
                    Add => Some(x.wrapping_add(y)),
                    Sub => Some(x.wrapping_sub(y)),
                    Mul => Some(x.wrapping_mul(y)),
                    Div if y != 0 => Some(x / y),
                    Mod if y != 0 => Some(x % y),
                    FloorDiv if y != 0 => Some(floor_div_i64(x, y)),
                    FloorMod if y != 0 => Some(floor_mod_i64(x, y)),
                    Min => Some(x.min(y)),
                    Max => Some(x.max(y)),
                    _ => None,
                };
                if let Some(r) = r {
                    return Some(int_like(r, a));
                }
                let c = match op {
                    Eq => Some(x == y),
                    Ne => Some(x != y),
                    Lt => Some(x < y),
                    Le => Some(x <= y),
                    Gt => Some(x > y),
                    Ge => Some(x >= y),
                    And => Some(x != 0 && y != 0),
                    Or => Some(x != 0 || y != 0),
                    _ => None,
                };
                if let Some(c) = c {
                    return Some(bool_of(c));
                }
            }
            (Const::Float(x), Const::Float(y)) => {
                let r = match op {
                    Add => Some(x + y),
                    Sub => Some(x - y),
                    Mul => Some(x * y),
                    Div if y != 0.0 => Some(x / y),
                    Min => Some(x.min(y)),
                    Max => Some(x.max(y)),
                    _ => None,
                };
                if let Some(r) = r {
                    return Some(float_like(r, a));
                }
                let c = match op {
                    Eq => Some(x == y),
                    Ne => Some(x != y),
                    Lt => Some(x < y),
                    Le => Some(x <= y),
                    Gt => Some(x > y),
                    Ge => Some(x >= y),
                    _ => None,
                };
                if let Some(c) = c {
                    return Some(bool_of(c));
                }
            }
            _ => {}
        }
    }
    // one side constant: the algebraic identities TryConstFold knows
    match op {
        Add => {
            if a.is_const_value(0) {
                return Some(b.clone());
            }
            if b.is_const_value(0) {
                return Some(a.clone());
            }
        }
        Sub if b.is_const_value(0) => return Some(a.clone()),
        Mul => {
            if a.is_const_value(1) {
                return Some(b.clone());
            }
            if b.is_const_value(1) {
                return Some(a.clone());
            }
            if a.is_const_value(0) {
                return Some(a.clone());
            }
            if b.is_const_value(0) {
                return Some(b.clone());
            }
        }
        Div | FloorDiv => {
            if a.is_const_value(0) {
                return Some(a.clone());
            }
            if b.is_const_value(1) {
                return Some(a.clone());
            }
        }
        Mod | FloorMod => {
            if a.is_const_value(0) {
                return Some(a.clone());
            }
            if b.is_const_value(1) {
                return Some(int_like(0, a));
            }
        }
        And => {
            if let Some(Const::Int(x)) = ca {
                return Some(if x != 0 { b.clone() } else { a.clone() });
            }
            if let Some(Const::Int(y)) = cb {
                return Some(if y != 0 { a.clone() } else { b.clone() });
            }
        }
        Or => {
            if let Some(Const::Int(x)) = ca {
                return Some(if x != 0 { a.clone() } else { b.clone() });
            }
            if let Some(Const::Int(y)) = cb {
                return Some(if y != 0 { b.clone() } else { a.clone() });
            }
        }
        _ => {}
    }
    None
}

/// Floor division of integers (rounds toward negative infinity).
pub fn floor_div_i64(x: i64, y: i64) -> i64 {
    let q = x / y;
    if (x % y != 0) && ((x < 0) != (y < 0)) {
        q - 1
    } else {
        q
    }
}

/// Floor modulo of integers (result has the sign of the divisor).
pub fn floor_mod_i64(x: i64, y: i64) -> i64 {
    x - y * floor_div_i64(x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(n: &str) -> Expr {
        Expr::var(n)
    }

    #[test]
    fn folds_like_tvm_operator_overloads() {
        assert_eq!(v("x") * 1, v("x"));
        assert_eq!(Expr::int(1) * v("x"), v("x"));
        assert_eq!(v("x") + 0, v("x"));
        assert_eq!(Expr::floordiv(v("x"), 1), v("x"));
        assert_eq!(Expr::floormod(v("x"), 1), Expr::int(0));
        assert_eq!(Expr::eq(Expr::int(0), 0), Expr::bool(true));
        assert_eq!(Expr::int(3) * 4 + 2, Expr::int(14));
        // 0 - x is not folded (TryConstFold only drops a zero on the right of a Sub)
        assert!(matches!(
            Expr::int(0) - v("x"),
            Expr::Binary { op: BinOp::Sub, .. }
        ));
        // x*0 folds to the zero
        assert_eq!(v("x") * Expr::int(0), Expr::int(0));
        // float identities
        assert_eq!(Expr::f32(1.0) * Expr::f32(2.0), Expr::f32(2.0));
        assert_eq!(
            Expr::and(Expr::bool(true), Expr::lt(v("i"), 3)),
            Expr::lt(v("i"), 3)
        );
    }

    #[test]
    fn int_meets_float_by_casting_the_int() {
        let load = Expr::Load {
            tensor: TensorId(0),
            indices: vec![],
            dtype: DType::F32,
        };
        let e = Expr::div(load, Expr::int(9));
        match e {
            Expr::Binary {
                op: BinOp::Div, b, ..
            } => assert_eq!(*b, Expr::f32(9.0)),
            other => panic!("{other:?}"),
        }
        assert_eq!(Expr::cast(v("x"), DType::F32).dtype(), DType::F32);
        assert_eq!(Expr::int(7).cast(DType::F32), Expr::f32(7.0));
    }

    #[test]
    fn floor_division_rounds_down() {
        assert_eq!(floor_div_i64(-1, 4), -1);
        assert_eq!(floor_mod_i64(-1, 4), 3);
        assert_eq!(floor_div_i64(7, 2), 3);
        assert_eq!(Expr::floordiv(Expr::int(-7), 2), Expr::int(-4));
        assert_eq!(Expr::floormod(Expr::int(-7), 2), Expr::int(1));
    }
}
