//! Interval arithmetic over integer index expressions: given a range for each variable,
//! a conservative `[lo, hi]` (inclusive) for an expression. This is the core of bound
//! inference (which region of a producer a consumer reads) and is also used to bound
//! non-constant reduce extents (adaptive pooling windows).
use super::expr::{floor_div_i64, BinOp, Expr};
use std::collections::HashMap;

/// Inclusive integer interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub lo: i64,
    pub hi: i64,
}

impl Interval {
    pub fn point(v: i64) -> Interval {
        Interval { lo: v, hi: v }
    }

    /// `[0, extent)` as an inclusive interval.
    pub fn range(extent: i64) -> Interval {
        Interval {
            lo: 0,
            hi: extent - 1,
        }
    }

    pub fn union(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    fn corners(a: Interval, b: Interval, f: impl Fn(i64, i64) -> i64) -> Interval {
        let c = [f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)];
        Interval {
            lo: *c.iter().min().unwrap(),
            hi: *c.iter().max().unwrap(),
        }
    }
}

/// Bounds of an integer expression, or None when it is not an integer expression of the
/// given variables (loads, floats, unknown variables).
pub fn int_bounds(e: &Expr, vars: &HashMap<String, Interval>) -> Option<Interval> {
    match e {
        Expr::IntImm { value, .. } => Some(Interval::point(*value)),
        Expr::Var(n) => vars.get(n).copied(),
        Expr::Cast { dtype, value } if dtype.is_int() => int_bounds(value, vars),
        Expr::Select {
            cond,
            then,
            otherwise,
        } => {
            let t = int_bounds(then, vars)?;
            let o = int_bounds(otherwise, vars)?;
            match int_bounds(cond, vars) {
                Some(Interval { lo: 1, hi: 1 }) => Some(t),
                Some(Interval { lo: 0, hi: 0 }) => Some(o),
                _ => Some(t.union(o)),
            }
        }
        Expr::Binary { op, a, b } => {
            let x = int_bounds(a, vars)?;
            let y = int_bounds(b, vars)?;
            let bool_iv = |always: bool, never: bool| {
                Some(if always {
                    Interval::point(1)
                } else if never {
                    Interval::point(0)
                } else {
                    Interval { lo: 0, hi: 1 }
                })
            };
            match op {
                BinOp::Add => Some(Interval {
                    lo: x.lo + y.lo,
                    hi: x.hi + y.hi,
                }),
                BinOp::Sub => Some(Interval {
                    lo: x.lo - y.hi,
                    hi: x.hi - y.lo,
                }),
                BinOp::Mul => Some(Interval::corners(x, y, |p, q| p * q)),
                BinOp::Min => Some(Interval {
                    lo: x.lo.min(y.lo),
                    hi: x.hi.min(y.hi),
                }),
                BinOp::Max => Some(Interval {
                    lo: x.lo.max(y.lo),
                    hi: x.hi.max(y.hi),
                }),
                BinOp::FloorDiv | BinOp::Div if y.lo > 0 || y.hi < 0 => {
                    if *op == BinOp::FloorDiv {
                        Some(Interval::corners(x, y, floor_div_i64))
                    } else {
                        Some(Interval::corners(x, y, |p, q| p / q))
                    }
                }
                BinOp::FloorMod if y.lo == y.hi && y.lo > 0 => {
                    let m = y.lo;
                    // exact when the dividend stays inside one period
                    if floor_div_i64(x.lo, m) == floor_div_i64(x.hi, m) {
                        Some(Interval {
                            lo: x.lo - m * floor_div_i64(x.lo, m),
                            hi: x.hi - m * floor_div_i64(x.hi, m),
                        })
                    } else {
                        Some(Interval { lo: 0, hi: m - 1 })
                    }
                }
                BinOp::Eq => bool_iv(
                    x.lo == x.hi && y.lo == y.hi && x.lo == y.lo,
                    x.hi < y.lo || y.hi < x.lo,
                ),
                BinOp::Ne => bool_iv(
                    x.hi < y.lo || y.hi < x.lo,
                    x.lo == x.hi && y.lo == y.hi && x.lo == y.lo,
                ),
                BinOp::Lt => bool_iv(x.hi < y.lo, x.lo >= y.hi),
                BinOp::Le => bool_iv(x.hi <= y.lo, x.lo > y.hi),
                BinOp::Gt => bool_iv(x.lo > y.hi, x.hi <= y.lo),
                BinOp::Ge => bool_iv(x.lo >= y.hi, x.hi < y.lo),
                BinOp::And => bool_iv(x.lo > 0 && y.lo > 0, x.hi == 0 || y.hi == 0),
                BinOp::Or => bool_iv(x.lo > 0 || y.lo > 0, x.hi == 0 && y.hi == 0),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_of_strided_window_index() {
        // yy*2 + ry, yy in [0,7), ry in [0,3) -> [0, 14]
        let e = Expr::var("yy") * 2 + Expr::var("ry");
        let mut vars = HashMap::new();
        vars.insert("yy".to_string(), Interval::range(7));
        vars.insert("ry".to_string(), Interval::range(3));
        assert_eq!(int_bounds(&e, &vars), Some(Interval { lo: 0, hi: 14 }));
        let m = Expr::floormod(Expr::var("yy"), 4);
        assert_eq!(int_bounds(&m, &vars), Some(Interval { lo: 0, hi: 3 }));
        let d = Expr::floordiv(Expr::var("yy") - 1, 2);
        assert_eq!(int_bounds(&d, &vars), Some(Interval { lo: -1, hi: 2 }));
    }

    #[test]
    fn select_with_known_condition_picks_a_branch() {
        let vars = HashMap::new();
        let e = Expr::select(Expr::bool(true), Expr::int(7), Expr::int(8));
        assert_eq!(int_bounds(&e, &vars), Some(Interval::point(7)));
    }
}
