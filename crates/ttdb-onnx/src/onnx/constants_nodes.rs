//! Constants the ONNX graph computes from other constants, whose values shape inference did
//! not keep (too large, or an op whose values it does not fold): computed at load, as TVM's
//! FoldConstant would, for the few ops that make weights: `ConstantOfShape` (zoo models'
//! weights), `Expand` (a class token broadcast to the batch), `Gather` and `Cast` (position
//! embeddings of constant positions), the broadcast element-wise ops of attention masks
//! (arithmetic, comparisons, logic, `Where`, `Not`) and the ops that keep values as they
//! are (`Reshape`, `Squeeze`, `Unsqueeze`, `Flatten`, `Identity`). Element-wise ops compute
//! in f64, exact for the integers masks and positions hold (below 2^53).
//!
//! Nothing here may allocate more than the weight limit left ([`Folder`]'s fill budget):
//! a small model can ask for a huge constant.
use super::*;
use crate::onnx::graph::{dtype, numel, Attr, Node};
use crate::onnx::shape::broadcast;

impl Folder<'_> {
    /// The values of `name` when a node ttdb can evaluate makes it from constants (None
    /// when no such node does).
    pub(super) fn computed(&self, name: &str) -> Option<Result<Values>> {
        let node = self
            .graph
            .nodes
            .iter()
            .find(|n| n.outputs.first().map(String::as_str) == Some(name))?;
        let bad = |msg: String| OnnxError::Weight {
            tensor: name.into(),
            msg: format!("{} node `{}`: {msg}", node.op_type, node.name),
        };
        let shape = match self.graph.shape(name) {
            Some(s) => s.to_vec(),
            None => return Some(Err(bad("no static shape".into()))),
        };
        let input = |k: usize| -> Result<Values> {
            let i = node
                .input(k)
                .ok_or_else(|| bad(format!("input {k} is missing")))?;
            self.tensor(i)
        };
        Some(match node.op_type.as_str() {
            "ConstantOfShape" => self.constant_of_shape(node, &shape).map_err(bad),
            "Expand" => input(0).and_then(|x| {
                let from = self.graph.shape(node.input(0).unwrap_or_default());
                self.expand(&x, from.unwrap_or_default(), &shape)
                    .map_err(bad)
            }),
            "Gather" => input(0).and_then(|x| {
                let indices = input(1)?;
                let from = self.graph.shape(node.input(0).unwrap_or_default());
                let axis = node.int("axis").unwrap_or(0);
                self.gather(&x, from.unwrap_or_default(), &indices, axis, &shape)
                    .map_err(bad)
            }),
            "Cast" => input(0).and_then(|x| {
                let to = node.int("to").unwrap_or(dtype::FLOAT as i64) as i32;
                cast(x, to).map_err(bad)
            }),
            "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" | "Identity" => input(0),
            op => {
                let (arity, f) = elementwise_fn(op)?;
                if node.inputs.len() != arity {
                    let n = node.inputs.len();
                    return Some(Err(bad(format!("{n} inputs, {op} takes {arity}"))));
                }
                let integer = self
                    .graph
                    .tensor(name)
                    .is_some_and(|t| dtype::is_integer(t.dtype));
                (|| {
                    let mut operands = Vec::new();
                    for k in 0..node.inputs.len() {
                        let from = self.graph.shape(node.input(k).unwrap_or_default());
                        operands.push((input(k)?, from.unwrap_or_default().to_vec()));
                    }
                    self.elementwise(&operands, &shape, integer, f).map_err(bad)
                })()
            }
        })
    }

    /// Charges `n` elements of `width` bytes to the fill budget.
    fn charge(&self, n: i64, width: u64) -> std::result::Result<(), String> {
        let budget = self.fill_budget.get();
        match (n as u64).checked_mul(width).filter(|&b| b <= budget) {
            Some(bytes) => {
                self.fill_budget.set(budget - bytes);
                Ok(())
            }
            None => Err(format!(
                "{n} elements exceed what is left of the weight limit"
            )),
        }
    }

    /// `shape` filled with the node's one-element `value` (float32 0 without one), as the
    /// ONNX spec and onnxruntime have it.
    fn constant_of_shape(&self, node: &Node, shape: &[i64]) -> std::result::Result<Values, String> {
        let fill = match node.attrs.get("value") {
            None => Data::Floats(vec![0.0]),
            Some(Attr::Tensor(t)) => match &t.data {
                Some(d) if d.len() == 1 && t.dtype != dtype::FLOAT16 => d.clone(),
                _ => {
                    return Err(format!(
                        "its value is not one {} ttdb can read",
                        dtype::name(t.dtype)
                    ))
                }
            },
            Some(_) => return Err("its value is not a tensor".into()),
        };
        let n = numel(shape).ok_or("its shape overflows")?;
        Ok(match fill {
            Data::Floats(v) => {
                self.charge(n, 4)?;
                Values::F32(vec![v[0] as f32; n as usize])
            }
            Data::Ints(v) => {
                self.charge(n, 8)?;
                Values::I64(vec![v[0]; n as usize])
            }
        })
    }

    /// `f` of the `operands` (values and shapes) broadcast to `shape`, as int64 when
    /// `integer`, else float32.
    fn elementwise(
        &self,
        operands: &[(Values, Vec<i64>)],
        shape: &[i64],
        integer: bool,
        f: fn(&[f64]) -> f64,
    ) -> std::result::Result<Values, String> {
        let n = numel(shape).ok_or("its shape overflows")?;
        let mut strides = Vec::with_capacity(operands.len());
        let mut values = Vec::with_capacity(operands.len());
        for (v, from) in operands {
            if broadcast(from, shape).as_deref() != Some(shape) || from.len() > shape.len() {
                return Err(format!("{from:?} does not broadcast to {shape:?}"));
            }
            if numel(from) != Some(v.len() as i64) {
                return Err(format!("{} values for the shape {from:?}", v.len()));
            }
            strides.push(broadcast_strides(from, shape));
            values.push(match v {
                Values::F32(x) => x.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>(),
                Values::F64(x) => x.clone(),
                Values::I64(x) => x.iter().map(|&a| a as f64).collect(),
            });
        }
        self.charge(n, if integer { 8 } else { 4 })?;
        let mut args = vec![0.0; operands.len()];
        let results = (0..n as usize).map(|p| {
            for (k, arg) in args.iter_mut().enumerate() {
                *arg = values[k][source_index(p, shape, &strides[k])];
            }
            f(&args)
        });
        Ok(if integer {
            Values::I64(results.map(|v| v as i64).collect())
        } else {
            Values::F32(results.map(|v| v as f32).collect())
        })
    }

    /// ONNX `Gather`: slices of `x` (of shape `from`) along `axis` picked by `indices`
    /// (negative from the end), giving `shape`.
    fn gather(
        &self,
        x: &Values,
        from: &[i64],
        indices: &Values,
        axis: i64,
        shape: &[i64],
    ) -> std::result::Result<Values, String> {
        let Values::I64(indices) = indices else {
            return Err("its indices are not integers".into());
        };
        let r = from.len() as i64;
        let axis = if axis < 0 { axis + r } else { axis };
        if !(0..r).contains(&axis) || numel(from) != Some(x.len() as i64) {
            return Err(format!("axis {axis} of {from:?} ({} values)", x.len()));
        }
        let axis = axis as usize;
        let n = from[axis];
        let rows: Vec<usize> = indices
            .iter()
            .map(|&i| {
                let i = if i < 0 { i + n } else { i };
                (0..n)
                    .contains(&i)
                    .then_some(i as usize)
                    .ok_or_else(|| format!("index {i} out of range for a dim of {n}"))
            })
            .collect::<std::result::Result<_, _>>()?;
        let outer = numel(&from[..axis]).unwrap_or(0) as usize;
        let inner = numel(&from[axis + 1..]).unwrap_or(0) as usize;
        let count = outer * rows.len() * inner;
        if numel(shape) != Some(count as i64) {
            return Err(format!("{count} values for its shape {shape:?}"));
        }
        self.charge(
            count as i64,
            if matches!(x, Values::F32(_)) { 4 } else { 8 },
        )?;
        // output (o, j, i) reads x (o, rows[j], i)
        let (k, n) = (rows.len(), n as usize);
        Ok(permute(x, count, |p| {
            let (o, j, i) = (p / (k * inner), (p / inner) % k, p % inner);
            (o * n + rows[j]) * inner + i
        }))
    }

    /// `x` (of shape `from`) broadcast to `shape` (numpy rules, right-aligned).
    fn expand(
        &self,
        x: &Values,
        from: &[i64],
        shape: &[i64],
    ) -> std::result::Result<Values, String> {
        if broadcast(from, shape).as_deref() != Some(shape) || shape.len() < from.len() {
            return Err(format!("{from:?} does not expand to {shape:?}"));
        }
        if numel(from) != Some(x.len() as i64) {
            return Err(format!("{} values for the shape {from:?}", x.len()));
        }
        let n = numel(shape).ok_or("its shape overflows")?;
        self.charge(n, if matches!(x, Values::F32(_)) { 4 } else { 8 })?;
        let strides = broadcast_strides(from, shape);
        let index = |p: usize| source_index(p, shape, &strides);
        Ok(permute(x, n as usize, index))
    }
}

/// ONNX `Cast` in ttdb's run types: floats to float32, integers and bools to int64 (a
/// float truncated toward zero; a bool 1 for any non-zero value).
fn cast(x: Values, to: i32) -> std::result::Result<Values, String> {
    let floats = |x: Values| -> Vec<f64> {
        match x {
            Values::F32(v) => v.into_iter().map(f64::from).collect(),
            Values::F64(v) => v,
            Values::I64(v) => v.into_iter().map(|i| i as f64).collect(),
        }
    };
    Ok(match to {
        dtype::FLOAT | dtype::DOUBLE | dtype::FLOAT16 => {
            Values::F32(floats(x).into_iter().map(|v| v as f32).collect())
        }
        dtype::BOOL => Values::I64(floats(x).into_iter().map(|v| (v != 0.0) as i64).collect()),
        t if dtype::is_integer(t) => match x {
            Values::I64(v) => Values::I64(v),
            x => Values::I64(floats(x).into_iter().map(|v| v.trunc() as i64).collect()),
        },
        t => return Err(format!("a cast to {}", dtype::name(t))),
    })
}

/// The row-major stride of a source of shape `from` along each axis of `shape` it
/// broadcasts to (right-aligned): 0 where it broadcasts.
fn broadcast_strides(from: &[i64], shape: &[i64]) -> Vec<usize> {
    let r = shape.len();
    let mut strides = vec![0usize; r];
    let mut stride = 1usize;
    for (i, &d) in from.iter().enumerate().rev() {
        if d != 1 {
            strides[r - from.len() + i] = stride;
        }
        stride *= d as usize;
    }
    strides
}

/// The source element the output element at flat position `p` (of `shape`) reads.
fn source_index(mut p: usize, shape: &[i64], strides: &[usize]) -> usize {
    let mut at = 0;
    for axis in (0..shape.len()).rev() {
        let d = shape[axis] as usize;
        at += (p % d) * strides[axis];
        p /= d;
    }
    at
}

/// The element-wise ops computed here: their number of operands and their function of
/// f64 operands; truth values are 0 / 1.
type ElementwiseFn = fn(&[f64]) -> f64;

fn elementwise_fn(op: &str) -> Option<(usize, ElementwiseFn)> {
    let f: ElementwiseFn = match op {
        "Add" => |a| a[0] + a[1],
        "Sub" => |a| a[0] - a[1],
        "Mul" => |a| a[0] * a[1],
        "Max" => |a| a[0].max(a[1]),
        "Min" => |a| a[0].min(a[1]),
        "Equal" => |a| f64::from(u8::from(a[0] == a[1])),
        "Less" => |a| f64::from(u8::from(a[0] < a[1])),
        "LessOrEqual" => |a| f64::from(u8::from(a[0] <= a[1])),
        "Greater" => |a| f64::from(u8::from(a[0] > a[1])),
        "GreaterOrEqual" => |a| f64::from(u8::from(a[0] >= a[1])),
        "And" => |a| f64::from(u8::from(a[0] != 0.0 && a[1] != 0.0)),
        "Or" => |a| f64::from(u8::from(a[0] != 0.0 || a[1] != 0.0)),
        "Not" => |a| f64::from(u8::from(a[0] == 0.0)),
        "Where" => |a| if a[0] != 0.0 { a[1] } else { a[2] },
        _ => return None,
    };
    let arity = match op {
        "Not" => 1,
        "Where" => 3,
        _ => 2,
    };
    Some((arity, f))
}
