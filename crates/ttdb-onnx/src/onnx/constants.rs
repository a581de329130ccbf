//! The values of the op graph's constants, computed once when a model is loaded to run:
//! what TVM's FoldConstant and FoldScaleAxis compute at compile time. Graph passes record
//! how a constant they make derives from others ([`Recipe`] on the ONNX graph, [`Derived`]
//! on the op graph); this module evaluates those records on the model's [`Weights`], giving
//! each constant in its physical layout (`phys`), ready for the kernel that reads it.
use super::error::{OnnxError, Result};
use super::graph::{Data, Graph, Recipe};
use super::relay::{ConstOp, ConvWeightLayout, Layout, OpGraph, ValId};
use super::weights::{Values, Weights};
use std::cell::Cell;
use std::collections::HashMap;
use ttdb_algo::ir::eval::TensorData;
use ttdb_algo::ops::winograd::winograd_kernel_transform;

/// A constant's values in its physical layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    pub shape: Vec<i64>,
    pub values: Values,
}

impl Constant {
    fn floats(&self, what: &str) -> Result<&[f32]> {
        match &self.values {
            Values::F32(v) => Ok(v),
            _ => Err(OnnxError::Weight {
                tensor: what.into(),
                msg: "expected float values".into(),
            }),
        }
    }
}

/// Computes constants on demand, each once.
pub struct Folder<'a> {
    graph: &'a Graph,
    og: &'a OpGraph,
    weights: &'a Weights,
    done: HashMap<ValId, Constant>,
    /// Bytes left for constants filled at load (`ConstantOfShape`): a small model must not
    /// make ttdb allocate more than the weight limit.
    fill_budget: Cell<u64>,
}

impl<'a> Folder<'a> {
    pub fn new(graph: &'a Graph, og: &'a OpGraph, weights: &'a Weights) -> Folder<'a> {
        Folder {
            graph,
            og,
            weights,
            done: HashMap::new(),
            fill_budget: Cell::new(weights.unspent_bytes),
        }
    }

    /// The values of constant `v` in its layout (`phys` shape).
    pub fn value(&mut self, v: ValId) -> Result<Constant> {
        if let Some(c) = self.done.get(&v) {
            return Ok(c.clone());
        }
        let val = &self.og.values[v];
        let bad = |msg: String| OnnxError::Weight {
            tensor: val.name.clone(),
            msg,
        };
        if !val.constant {
            return Err(bad("is computed at run time, not a constant".into()));
        }
        let phys = val.phys.clone();
        let c = if let Some(d) = val.derived {
            let src = self.value(d.from)?;
            let src_val = &self.og.values[d.from];
            let values = match d.op {
                ConstOp::Reshape => src.values,
                ConstOp::TransposeLast2 => transpose_last2(&src, &src_val.shape).map_err(bad)?,
                ConstOp::Scale(s) => {
                    let s = self.value(s)?;
                    let s = match s.floats(&self.og.values[d.from].name)? {
                        [x] => *x,
                        _ => return Err(bad("a folded scale must be a scalar".into())),
                    };
                    Values::F32(src.floats(&val.name)?.iter().map(|x| x * s).collect())
                }
                ConstOp::Relayout => {
                    let logical = to_logical(&src, src_val.layout).map_err(bad)?;
                    from_logical(&logical, val.layout, &phys).map_err(bad)?
                }
                ConstOp::ConvWeight(layout) => {
                    pack_conv_weight(&src, &src_val.shape, layout).map_err(bad)?
                }
            };
            Constant {
                shape: phys,
                values,
            }
        } else if let Some(data) = &val.data {
            Constant {
                shape: phys,
                values: match data {
                    Data::Floats(f) => Values::F32(f.iter().map(|&x| x as f32).collect()),
                    Data::Ints(i) => Values::I64(i.clone()),
                },
            }
        } else {
            Constant {
                shape: phys,
                values: self.tensor(&val.name)?,
            }
        };
        let n: i64 = c.shape.iter().product();
        if c.values.len() as i64 != n {
            return Err(bad(format!(
                "has {} values, its shape {:?} needs {n}",
                c.values.len(),
                c.shape
            )));
        }
        self.done.insert(v, c.clone());
        Ok(c)
    }

    /// A tensor of the ONNX graph by name: a weight, a recipe's result or a folded constant.
    fn tensor(&self, name: &str) -> Result<Values> {
        if let Some(w) = self.weights.tensors.get(name) {
            return Ok(w.values.clone());
        }
        if let Some(r) = self.graph.recipes.get(name) {
            return self.recipe(name, r);
        }
        match self.graph.tensor(name).and_then(|t| t.data.as_ref()) {
            Some(Data::Floats(f)) => Ok(Values::F32(f.iter().map(|&x| x as f32).collect())),
            Some(Data::Ints(i)) => Ok(Values::I64(i.clone())),
            None => self.computed(name).unwrap_or_else(|| {
                Err(OnnxError::Weight {
                    tensor: name.into(),
                    msg: "no values: neither an initializer nor a constant ttdb can compute".into(),
                })
            }),
        }
    }

    fn floats_of(&self, name: &str) -> Result<Vec<f32>> {
        match self.tensor(name)? {
            Values::F32(v) => Ok(v),
            Values::F64(v) => Ok(v.into_iter().map(|x| x as f32).collect()),
            Values::I64(_) => Err(OnnxError::Weight {
                tensor: name.into(),
                msg: "expected float values".into(),
            }),
        }
    }

    fn recipe(&self, name: &str, r: &Recipe) -> Result<Values> {
        // per output channel: scale / sqrt(var + eps), in f64 as TVM folds in the graph's
        // dtype after SimplifyInference (the difference is below the comparison tolerance)
        let factor = |scale: &str, var: &str, eps: f64| -> Result<Vec<f64>> {
            let (s, v) = (self.floats_of(scale)?, self.floats_of(var)?);
            if s.len() != v.len() {
                return Err(OnnxError::Weight {
                    tensor: name.into(),
                    msg: format!("BN scale has {} values, variance {}", s.len(), v.len()),
                });
            }
            Ok(s.iter()
                .zip(&v)
                .map(|(&s, &v)| s as f64 / (v as f64 + eps).sqrt())
                .collect())
        };
        let channel_mismatch = |what: &str, n: usize, c: usize| OnnxError::Weight {
            tensor: name.into(),
            msg: format!("{what} has {n} values for {c} channels"),
        };
        match r {
            Recipe::BnWeight {
                weight,
                scale,
                var,
                eps,
            } => {
                let f = factor(scale, var, *eps)?;
                let w = self.floats_of(weight)?;
                if f.is_empty() || w.len() % f.len() != 0 {
                    return Err(channel_mismatch("the conv weight", w.len(), f.len()));
                }
                let per = w.len() / f.len();
                Ok(Values::F32(
                    w.iter()
                        .enumerate()
                        .map(|(i, &x)| (x as f64 * f[i / per]) as f32)
                        .collect(),
                ))
            }
            Recipe::BnScale { scale, var, eps } => Ok(Values::F32(
                factor(scale, var, *eps)?
                    .into_iter()
                    .map(|f| f as f32)
                    .collect(),
            )),
            Recipe::BnBias {
                bias,
                scale,
                shift,
                mean,
                var,
                eps,
            } => {
                let f = factor(scale, var, *eps)?;
                let (sh, m) = (self.floats_of(shift)?, self.floats_of(mean)?);
                let b = match bias {
                    Some(b) => self.floats_of(b)?,
                    None => vec![0.0; f.len()],
                };
                for (what, n) in [
                    ("BN shift", sh.len()),
                    ("BN mean", m.len()),
                    ("conv bias", b.len()),
                ] {
                    if n != f.len() {
                        return Err(channel_mismatch(what, n, f.len()));
                    }
                }
                Ok(Values::F32(
                    (0..f.len())
                        .map(|o| ((b[o] as f64 - m[o] as f64) * f[o] + sh[o] as f64) as f32)
                        .collect(),
                ))
            }
        }
    }
}

fn gather<T: Copy>(src: &[T], index: impl Fn(usize) -> usize, n: usize) -> Vec<T> {
    (0..n).map(|i| src[index(i)]).collect()
}

/// Values permuted: element `i` of the result is element `index(i)` of `v`.
fn permute(v: &Values, n: usize, index: impl Fn(usize) -> usize) -> Values {
    match v {
        Values::F32(x) => Values::F32(gather(x, index, n)),
        Values::F64(x) => Values::F64(gather(x, index, n)),
        Values::I64(x) => Values::I64(gather(x, index, n)),
    }
}

/// `[B, R, C]` (B the product of the leading dims) to `[B, C, R]`.
fn transpose_last2(src: &Constant, shape: &[i64]) -> std::result::Result<Values, String> {
    let r = shape.len();
    if r < 2 {
        return Err(format!("cannot transpose a tensor of rank {r}"));
    }
    let (rows, cols) = (shape[r - 2] as usize, shape[r - 1] as usize);
    let n = src.values.len();
    let plane = rows * cols;
    Ok(permute(&src.values, n, |i| {
        let (b, k) = (i / plane, i % plane);
        let (c, rr) = (k / rows, k % rows);
        b * plane + rr * cols + c
    }))
}

/// The logical NCHW shape that `layout` lays out as `phys`.
fn logical_shape(layout: Layout, phys: &[i64]) -> Vec<i64> {
    match (layout, phys) {
        (Layout::Nchwc(_), [n, cb, h, w, b]) => vec![*n, cb * b, *h, *w],
        (Layout::Nhwc, [n, h, w, c]) => vec![*n, *c, *h, *w],
        _ => phys.to_vec(),
    }
}

/// Row-major logical (NCHW) order of values stored in `layout`.
fn to_logical(src: &Constant, layout: Layout) -> std::result::Result<Values, String> {
    let n = src.values.len();
    Ok(match (layout, src.shape.as_slice()) {
        (Layout::Plain, _) => src.values.clone(),
        (Layout::Nchwc(_), &[_, _, h, w, b]) => {
            let (h, w, b) = (h as usize, w as usize, b as usize);
            let c = logical_shape(layout, &src.shape)[1] as usize;
            permute(&src.values, n, |i| {
                // logical (nn, cc, y, x) -> physical (nn, cc / b, y, x, cc % b)
                let (x, y, cc, nn) = (i % w, (i / w) % h, (i / (w * h)) % c, i / (w * h * c));
                ((((nn * (c / b) + cc / b) * h + y) * w + x) * b) + cc % b
            })
        }
        (Layout::Nhwc, &[_, h, w, c]) => {
            let (h, w, c) = (h as usize, w as usize, c as usize);
            permute(&src.values, n, |i| {
                let (x, y, cc, nn) = (i % w, (i / w) % h, (i / (w * h)) % c, i / (w * h * c));
                ((nn * h + y) * w + x) * c + cc
            })
        }
        (l, s) => return Err(format!("a {l:?} constant of shape {s:?} is not 4-D")),
    })
}

/// Logical (NCHW, row-major) values laid out as `phys` in `layout`.
fn from_logical(v: &Values, layout: Layout, phys: &[i64]) -> std::result::Result<Values, String> {
    let n = v.len();
    let expected: i64 = phys.iter().product();
    if n as i64 != expected {
        return Err(format!("{n} values cannot be laid out as {phys:?}"));
    }
    Ok(match (layout, phys) {
        (Layout::Plain, _) => v.clone(),
        (Layout::Nchwc(_), &[_, cb, h, w, b]) => {
            let (cb, h, w, b) = (cb as usize, h as usize, w as usize, b as usize);
            let c = cb * b;
            permute(v, n, |i| {
                // physical (nn, co, y, x, ci) <- logical (nn, co * b + ci, y, x)
                let (ci, x, y, co, nn) = (
                    i % b,
                    (i / b) % w,
                    (i / (b * w)) % h,
                    (i / (b * w * h)) % cb,
                    i / (b * w * h * cb),
                );
                ((nn * c + co * b + ci) * h + y) * w + x
            })
        }
        (Layout::Nhwc, &[_, h, w, c]) => {
            let (h, w, c) = (h as usize, w as usize, c as usize);
            permute(v, n, |i| {
                let (cc, x, y, nn) = (i % c, (i / c) % w, (i / (c * w)) % h, i / (c * w * h));
                ((nn * c + cc) * h + y) * w + x
            })
        }
        (l, s) => return Err(format!("cannot lay out {s:?} as {l:?}")),
    })
}

/// An OIHW conv weight in a conv kernel's weight layout.
fn pack_conv_weight(
    src: &Constant,
    oihw: &[i64],
    layout: ConvWeightLayout,
) -> std::result::Result<Values, String> {
    let &[o, i, kh, kw] = oihw else {
        return Err(format!("a conv weight of shape {oihw:?} is not OIHW"));
    };
    let (o, i, kh, kw) = (o as usize, i as usize, kh as usize, kw as usize);
    let n = src.values.len();
    let at = |oo: usize, ii: usize, y: usize, x: usize| ((oo * i + ii) * kh + y) * kw + x;
    Ok(match layout {
        ConvWeightLayout::Oihw => src.values.clone(),
        ConvWeightLayout::Nchwc { ic_bn, oc_bn } => {
            let (ib, ob) = (ic_bn as usize, oc_bn as usize);
            permute(&src.values, n, |p| {
                // [O/ob, I/ib, kh, kw, ib, ob]
                let (bo, bi, x, y) = (
                    p % ob,
                    (p / ob) % ib,
                    (p / (ob * ib)) % kw,
                    (p / (ob * ib * kw)) % kh,
                );
                let rest = p / (ob * ib * kw * kh);
                let (ci, co) = (rest % (i / ib), rest / (i / ib));
                at(co * ob + bo, ci * ib + bi, y, x)
            })
        }
        ConvWeightLayout::DepthwiseNchwc { oc_bn } => {
            let ob = oc_bn as usize;
            permute(&src.values, n, |p| {
                // [O/ob, 1, kh, kw, 1, ob]
                let (bo, x, y, co) = (
                    p % ob,
                    (p / ob) % kw,
                    (p / (ob * kw)) % kh,
                    p / (ob * kw * kh),
                );
                at(co * ob + bo, 0, y, x)
            })
        }
        ConvWeightLayout::Hwio => permute(&src.values, n, |p| {
            let (oo, ii, x, y) = (p % o, (p / o) % i, (p / (o * i)) % kw, p / (o * i * kw));
            at(oo, ii, y, x)
        }),
        ConvWeightLayout::DepthwiseHwo1 => permute(&src.values, n, |p| {
            let (oo, x, y) = (p % o, (p / o) % kw, p / (o * kw));
            at(oo, 0, y, x)
        }),
        ConvWeightLayout::Winograd => {
            let hwio = permute(&src.values, n, |p| {
                let (oo, ii, x, y) = (p % o, (p / o) % i, (p / (o * i)) % kw, p / (o * i * kw));
                at(oo, ii, y, x)
            });
            let Values::F32(hwio) = hwio else {
                return Err("a winograd weight must be float".into());
            };
            let t = TensorData::new(
                &[kh as i64, kw as i64, i as i64, o as i64],
                hwio.iter().map(|&x| x as f64).collect(),
            );
            let packed = winograd_kernel_transform(&t, 4).map_err(|e| e.0)?;
            Values::F32(packed.data.iter().map(|&x| x as f32).collect())
        }
    })
}

#[path = "constants_nodes.rs"]
mod nodes;

#[cfg(test)]
#[path = "constants_tests.rs"]
mod tests;
