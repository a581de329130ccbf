//! Walking and rewriting expressions: post-order visits (TVM's `PostOrderVisit`, which
//! defines the input-tensor order of a stage), structural mapping, variable substitution
//! (for a lowering pass that replaces axis variables with loop expressions) and re-folding.
use super::expr::Expr;
use super::TensorId;
use std::collections::HashMap;

impl Expr {
    /// Direct children in TVM's visiting order (operands left to right; for a load, its
    /// indices).
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::IntImm { .. } | Expr::FloatImm { .. } | Expr::Var(_) => vec![],
            Expr::Load { indices, .. } => indices.iter().collect(),
            Expr::Binary { a, b, .. } => vec![a, b],
            Expr::Not(a) => vec![a],
            Expr::Select {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
            Expr::Cast { value, .. } => vec![value],
            Expr::Call { args, .. } => args.iter().collect(),
        }
    }

    /// Visit every node, children before their parent.
    pub fn visit_post_order(&self, f: &mut dyn FnMut(&Expr)) {
        for c in self.children() {
            c.visit_post_order(f);
        }
        f(self);
    }

    /// Visit every node, parent first; `f` returns false to skip a node's children.
    pub fn visit_pre_order(&self, f: &mut dyn FnMut(&Expr) -> bool) {
        if f(self) {
            for c in self.children() {
                c.visit_pre_order(f);
            }
        }
    }

    /// The same node with each child replaced by `f(child)` (no folding).
    pub fn map_children(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Expr {
        match self {
            Expr::IntImm { .. } | Expr::FloatImm { .. } | Expr::Var(_) => self.clone(),
            Expr::Load {
                tensor,
                indices,
                dtype,
            } => Expr::Load {
                tensor: *tensor,
                indices: indices.iter().map(&mut *f).collect(),
                dtype: *dtype,
            },
            Expr::Binary { op, a, b } => Expr::Binary {
                op: *op,
                a: Box::new(f(a)),
                b: Box::new(f(b)),
            },
            Expr::Not(a) => Expr::Not(Box::new(f(a))),
            Expr::Select {
                cond,
                then,
                otherwise,
            } => Expr::Select {
                cond: Box::new(f(cond)),
                then: Box::new(f(then)),
                otherwise: Box::new(f(otherwise)),
            },
            Expr::Cast { dtype, value } => Expr::Cast {
                dtype: *dtype,
                value: Box::new(f(value)),
            },
            Expr::Call { func, args, dtype } => Expr::Call {
                func: *func,
                args: args.iter().map(&mut *f).collect(),
                dtype: *dtype,
            },
        }
    }

    /// Top-down rewrite: where `f` returns `Some`, that subtree is replaced (and not
    /// descended into); elsewhere the node is rebuilt from rewritten children.
    pub fn transform(&self, f: &mut dyn FnMut(&Expr) -> Option<Expr>) -> Expr {
        if let Some(e) = f(self) {
            return e;
        }
        self.map_children(&mut |c| c.transform(f))
    }

    /// Replace variables by expressions (unmapped variables stay). No folding: call
    /// [`Expr::refold`] afterwards to simplify constants the way TVM would have.
    pub fn substitute(&self, vars: &HashMap<String, Expr>) -> Expr {
        self.transform(&mut |e| match e {
            Expr::Var(n) => vars.get(n).cloned(),
            _ => None,
        })
    }

    /// Rebuild bottom-up through the folding constructors (`x*1 -> x`, constants folded).
    pub fn refold(&self) -> Expr {
        let e = self.map_children(&mut |c| c.refold());
        match e {
            Expr::Binary { op, a, b } => Expr::binary(op, *a, *b),
            Expr::Cast { dtype, value } => value.cast(dtype),
            Expr::Not(a) => match a.as_int() {
                Some(v) => Expr::bool(v == 0),
                None => Expr::Not(a),
            },
            other => other,
        }
    }

    /// Tensors read by this expression, in first-appearance order of a post-order walk
    /// (TVM `ComputeOpNode::InputTensors`).
    pub fn input_tensors(&self, out: &mut Vec<TensorId>) {
        self.visit_post_order(&mut |e| {
            if let Expr::Load { tensor, .. } = e {
                if !out.contains(tensor) {
                    out.push(*tensor);
                }
            }
        });
    }

    /// Names of the variables used, in first-appearance order.
    pub fn free_vars(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        self.visit_pre_order(&mut |e| {
            if let Expr::Var(n) = e {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
            true
        });
        out
    }

    /// Rename tensor references (used when the DAG builder fixes the final stage order).
    pub fn remap_tensors(&self, map: &dyn Fn(TensorId) -> TensorId) -> Expr {
        self.transform(&mut |e| match e {
            Expr::Load {
                tensor,
                indices,
                dtype,
            } => Some(Expr::Load {
                tensor: map(*tensor),
                indices: indices.iter().map(|i| i.remap_tensors(map)).collect(),
                dtype: *dtype,
            }),
            _ => None,
        })
    }

    /// Number of nodes (a size measure for tests and heuristics).
    pub fn node_count(&self) -> usize {
        let mut n = 0;
        self.visit_post_order(&mut |_| n += 1);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dtype::DType;

    #[test]
    fn substitute_then_refold_simplifies() {
        // (yy*2 + ry) with yy := 0 folds to ry
        let e = Expr::binary_raw(
            crate::ir::expr::BinOp::Add,
            Expr::binary_raw(crate::ir::expr::BinOp::Mul, Expr::var("yy"), Expr::int(2)),
            Expr::var("ry"),
        );
        let mut m = HashMap::new();
        m.insert("yy".to_string(), Expr::int(0));
        assert_eq!(e.substitute(&m).refold(), Expr::var("ry"));
        assert_eq!(e.free_vars(), vec!["yy".to_string(), "ry".to_string()]);
    }

    #[test]
    fn input_tensors_are_in_post_order_first_appearance() {
        // A[B[i]] * C[i] + A[0]: B is visited before A (indices first), then C.
        let b = Expr::Load {
            tensor: TensorId(1),
            indices: vec![Expr::var("i")],
            dtype: DType::I32,
        };
        let a = Expr::Load {
            tensor: TensorId(0),
            indices: vec![b],
            dtype: DType::F32,
        };
        let c = Expr::Load {
            tensor: TensorId(2),
            indices: vec![Expr::var("i")],
            dtype: DType::F32,
        };
        let a0 = Expr::Load {
            tensor: TensorId(0),
            indices: vec![Expr::int(0)],
            dtype: DType::F32,
        };
        let e = a * c + a0;
        let mut ids = Vec::new();
        e.input_tensors(&mut ids);
        assert_eq!(ids, vec![TensorId(1), TensorId(0), TensorId(2)]);
        let remapped = e.remap_tensors(&|t| TensorId(t.0 + 10));
        let mut ids2 = Vec::new();
        remapped.input_tensors(&mut ids2);
        assert_eq!(ids2, vec![TensorId(11), TensorId(10), TensorId(12)]);
    }
}
