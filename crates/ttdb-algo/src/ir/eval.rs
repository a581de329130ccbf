//! A naive reference evaluator: runs a DAG stage by stage on full tensors, with f64
//! arithmetic and f64 accumulation. It is the ground truth schedules are checked against,
//! so it favours obviousness over speed (bodies are pre-resolved to variable slots and the
//! outermost dimension runs in parallel, nothing more).
use super::dag::{Body, Combiner, ComputeOp, Dag, Operation};
use super::dtype::DType;
use super::expr::{floor_div_i64, floor_mod_i64, BinOp, Expr, Intrinsic};
use rayon::prelude::*;
use std::fmt;

/// A dense row-major tensor of f64 values (ints are stored exactly).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    pub shape: Vec<i64>,
    pub data: Vec<f64>,
}

impl TensorData {
    pub fn new(shape: &[i64], data: Vec<f64>) -> TensorData {
        assert_eq!(
            data.len() as i64,
            shape.iter().product::<i64>(),
            "data length vs shape {shape:?}"
        );
        TensorData {
            shape: shape.to_vec(),
            data,
        }
    }

    pub fn zeros(shape: &[i64]) -> TensorData {
        TensorData::new(shape, vec![0.0; shape.iter().product::<i64>() as usize])
    }

    pub fn from_f32(shape: &[i64], data: &[f32]) -> TensorData {
        TensorData::new(shape, data.iter().map(|&x| x as f64).collect())
    }

    pub fn to_f32(&self) -> Vec<f32> {
        self.data.iter().map(|&x| x as f32).collect()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Row-major strides.
    pub fn strides(shape: &[i64]) -> Vec<i64> {
        let mut s = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * shape[i + 1];
        }
        s
    }

    /// Largest absolute difference to another tensor of the same shape.
    pub fn max_abs_diff(&self, other: &TensorData) -> f64 {
        assert_eq!(self.shape, other.shape);
        self.data
            .iter()
            .zip(&other.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "evaluation failed: {}", self.0)
    }
}
impl std::error::Error for EvalError {}

/// Evaluates every stage; `inputs` are the placeholders' values in stage order (the key
/// order). Returns the value of every stage (placeholders included), in stage order.
pub fn evaluate_all(dag: &Dag, inputs: &[TensorData]) -> Result<Vec<TensorData>, EvalError> {
    let placeholders = dag.placeholders();
    if inputs.len() != placeholders.len() {
        return Err(EvalError(format!(
            "{} inputs given, the DAG has {} placeholders",
            inputs.len(),
            placeholders.len()
        )));
    }
    let mut values: Vec<TensorData> = Vec::with_capacity(dag.stages.len());
    let mut next_input = 0;
    for stage in &dag.stages {
        match &stage.op {
            Operation::Placeholder { shape } => {
                let t = &inputs[next_input];
                next_input += 1;
                if &t.shape != shape {
                    return Err(EvalError(format!(
                        "input for {} has shape {:?}, expected {:?}",
                        stage.name, t.shape, shape
                    )));
                }
                values.push(t.clone());
            }
            Operation::Compute(c) => {
                let v = eval_stage(&stage.name, c, &values)?;
                values.push(v);
            }
        }
    }
    Ok(values)
}

/// Evaluates a DAG and returns its outputs.
pub fn evaluate(dag: &Dag, inputs: &[TensorData]) -> Result<Vec<TensorData>, EvalError> {
    let all = evaluate_all(dag, inputs)?;
    Ok(dag.outputs.iter().map(|o| all[o.0].clone()).collect())
}

#[derive(Clone, Copy, Debug)]
enum Val {
    I(i64),
    F(f64),
}

impl Val {
    fn f(self) -> f64 {
        match self {
            Val::I(i) => i as f64,
            Val::F(f) => f,
        }
    }
    fn i(self) -> i64 {
        match self {
            Val::I(i) => i,
            Val::F(f) => f as i64,
        }
    }
    fn truthy(self) -> bool {
        match self {
            Val::I(i) => i != 0,
            Val::F(f) => f != 0.0,
        }
    }
}

/// An expression with variables resolved to slots and loads to (tensor, strides).
enum Compiled {
    Const(Val),
    Slot(usize),
    Load {
        tensor: usize,
        int: bool,
        indices: Vec<Compiled>,
    },
    Binary {
        op: BinOp,
        float: bool,
        a: Box<Compiled>,
        b: Box<Compiled>,
    },
    Not(Box<Compiled>),
    Select(Box<Compiled>, Box<Compiled>, Box<Compiled>),
    Cast {
        to: DType,
        value: Box<Compiled>,
    },
    Call {
        func: Intrinsic,
        args: Vec<Compiled>,
    },
}

fn compile(e: &Expr, slots: &[String]) -> Result<Compiled, EvalError> {
    let c = |x: &Expr| compile(x, slots).map(Box::new);
    Ok(match e {
        Expr::IntImm { value, .. } => Compiled::Const(Val::I(*value)),
        Expr::FloatImm { value, .. } => Compiled::Const(Val::F(*value)),
        Expr::Var(n) => Compiled::Slot(
            slots
                .iter()
                .position(|s| s == n)
                .ok_or_else(|| EvalError(format!("unbound variable {n}")))?,
        ),
        Expr::Load {
            tensor,
            indices,
            dtype,
        } => Compiled::Load {
            tensor: tensor.0,
            int: !dtype.is_float(),
            indices: indices
                .iter()
                .map(|i| compile(i, slots))
                .collect::<Result<_, _>>()?,
        },
        Expr::Binary { op, a, b } => {
            let float = a.dtype().is_float() || b.dtype().is_float();
            Compiled::Binary {
                op: *op,
                float,
                a: c(a)?,
                b: c(b)?,
            }
        }
        Expr::Not(a) => Compiled::Not(c(a)?),
        Expr::Select {
            cond,
            then,
            otherwise,
        } => Compiled::Select(c(cond)?, c(then)?, c(otherwise)?),
        Expr::Cast { dtype, value } => Compiled::Cast {
            to: *dtype,
            value: c(value)?,
        },
        Expr::Call { func, args, .. } => Compiled::Call {
            func: *func,
            args: args
                .iter()
                .map(|a| compile(a, slots))
                .collect::<Result<_, _>>()?,
        },
    })
}

/// Where loads read from: whole tensors ([`Ctx`]) or demand-driven points ([`PointLoader`]).
trait Loader {
    /// The value of `tensor` at `idx` (checked against its shape).
    fn load(&mut self, tensor: usize, idx: &[i64]) -> Result<f64, EvalError>;
    fn stage(&self) -> &str;
}

struct Ctx<'a> {
    values: &'a [TensorData],
    strides: Vec<Vec<i64>>,
    stage: &'a str,
}

/// Row-major offset of `idx` in `shape`, or the out-of-bounds error.
fn offset(stage: &str, tensor: usize, shape: &[i64], idx: &[i64]) -> Result<i64, EvalError> {
    let mut off = 0i64;
    for (d, &i) in idx.iter().enumerate() {
        if i < 0 || i >= shape[d] {
            return Err(EvalError(format!(
                "stage {stage} reads tensor #{tensor} out of bounds: index {i} in dim {d} of {shape:?}"
            )));
        }
        off = off * shape[d] + i;
    }
    Ok(off)
}

impl Loader for &Ctx<'_> {
    fn load(&mut self, tensor: usize, idx: &[i64]) -> Result<f64, EvalError> {
        let t = &self.values[tensor];
        let strides = &self.strides[tensor];
        let mut off = 0i64;
        for (d, &i) in idx.iter().enumerate() {
            if i < 0 || i >= t.shape[d] {
                return Err(EvalError(format!(
                    "stage {} reads tensor #{tensor} out of bounds: index {i} in dim {d} of {:?}",
                    self.stage, t.shape
                )));
            }
            off += i * strides[d];
        }
        Ok(t.data[off as usize])
    }

    fn stage(&self) -> &str {
        self.stage
    }
}

fn run<L: Loader>(e: &Compiled, env: &[i64], cx: &mut L) -> Result<Val, EvalError> {
    Ok(match e {
        Compiled::Const(v) => *v,
        Compiled::Slot(i) => Val::I(env[*i]),
        Compiled::Load {
            tensor,
            int,
            indices,
        } => {
            let mut idx = [0i64; 8];
            if indices.len() > idx.len() {
                return Err(EvalError(format!(
                    "stage {}: loads of rank > 8 are not supported",
                    cx.stage()
                )));
            }
            for (d, ix) in indices.iter().enumerate() {
                idx[d] = run(ix, env, cx)?.i();
            }
            let v = cx.load(*tensor, &idx[..indices.len()])?;
            if *int {
                Val::I(v as i64)
            } else {
                Val::F(v)
            }
        }
        Compiled::Binary { op, float, a, b } => {
            let x = run(a, env, cx)?;
            // `&&`/`||` are not lazy in TIR, but short-circuiting is harmless here
            let y = run(b, env, cx)?;
            binary(*op, *float, x, y)
                .ok_or_else(|| EvalError(format!("stage {}: division by zero", cx.stage())))?
        }
        Compiled::Not(a) => Val::I(!run(a, env, cx)?.truthy() as i64),
        Compiled::Select(c, t, o) => {
            // Select evaluates both branches in TIR; only the chosen one matters for values
            if run(c, env, cx)?.truthy() {
                run(t, env, cx)?
            } else {
                run(o, env, cx)?
            }
        }
        Compiled::Cast { to, value } => {
            let v = run(value, env, cx)?;
            match to {
                DType::Float(_) => Val::F(v.f()),
                DType::Bool => Val::I(v.truthy() as i64),
                _ => Val::I(match v {
                    Val::I(i) => i,
                    Val::F(f) => f.trunc() as i64,
                }),
            }
        }
        Compiled::Call { func, args } => match func {
            // lazy: the padded branch must not be evaluated out of bounds
            Intrinsic::IfThenElse => {
                if run(&args[0], env, cx)?.truthy() {
                    run(&args[1], env, cx)?
                } else {
                    run(&args[2], env, cx)?
                }
            }
            _ => {
                let x = run(&args[0], env, cx)?.f();
                Val::F(match func {
                    Intrinsic::Exp => x.exp(),
                    Intrinsic::Tanh => x.tanh(),
                    Intrinsic::Sqrt => x.sqrt(),
                    Intrinsic::Log => x.ln(),
                    Intrinsic::Fabs => x.abs(),
                    Intrinsic::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                    Intrinsic::Erf => erf(x),
                    Intrinsic::Pow => x.powf(run(&args[1], env, cx)?.f()),
                    Intrinsic::IfThenElse => unreachable!(),
                })
            }
        },
    })
}

fn binary(op: BinOp, float: bool, x: Val, y: Val) -> Option<Val> {
    use BinOp::*;
    if op.is_logical() {
        let r = match op {
            And => x.truthy() && y.truthy(),
            _ => x.truthy() || y.truthy(),
        };
        return Some(Val::I(r as i64));
    }
    if float {
        let (a, b) = (x.f(), y.f());
        return Some(match op {
            Add => Val::F(a + b),
            Sub => Val::F(a - b),
            Mul => Val::F(a * b),
            Div => Val::F(a / b),
            Mod => Val::F(a % b),
            FloorDiv => Val::F((a / b).floor()),
            FloorMod => Val::F(a - b * (a / b).floor()),
            Min => Val::F(a.min(b)),
            Max => Val::F(a.max(b)),
            Eq => Val::I((a == b) as i64),
            Ne => Val::I((a != b) as i64),
            Lt => Val::I((a < b) as i64),
            Le => Val::I((a <= b) as i64),
            Gt => Val::I((a > b) as i64),
            Ge => Val::I((a >= b) as i64),
            And | Or => unreachable!(),
        });
    }
    let (a, b) = (x.i(), y.i());
    Some(Val::I(match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div => a.checked_div(b)?,
        Mod => a.checked_rem(b)?,
        FloorDiv => (b != 0).then(|| floor_div_i64(a, b))?,
        FloorMod => (b != 0).then(|| floor_mod_i64(a, b))?,
        Min => a.min(b),
        Max => a.max(b),
        Eq => (a == b) as i64,
        Ne => (a != b) as i64,
        Lt => (a < b) as i64,
        Le => (a <= b) as i64,
        Gt => (a > b) as i64,
        Ge => (a >= b) as i64,
        And | Or => unreachable!(),
    }))
}

/// erf: libm's, as the kernels TVM builds call it (tir.erf lowers to the `erf` extern).
fn erf(x: f64) -> f64 {
    extern "C" {
        fn erf(x: f64) -> f64;
    }
    // SAFETY: a pure libm function of one double
    unsafe { erf(x) }
}

fn eval_stage(name: &str, c: &ComputeOp, values: &[TensorData]) -> Result<TensorData, EvalError> {
    let shape = c.shape();
    let n_spatial = c.axes.len();
    let slots: Vec<String> = c
        .axes
        .iter()
        .chain(&c.reduce_axes)
        .map(|a| a.name.clone())
        .collect();
    let extents: Vec<Compiled> = c
        .reduce_axes
        .iter()
        .map(|r| compile(&r.extent, &slots))
        .collect::<Result<_, _>>()?;
    let (body, combiner, init) = match &c.body {
        Body::Expr(e) => (compile(e, &slots)?, None, 0.0),
        Body::Reduce {
            combiner,
            source,
            init,
        } => {
            let init = match init {
                Expr::FloatImm { value, .. } => *value,
                Expr::IntImm { value, .. } => *value as f64,
                _ => {
                    return Err(EvalError(format!(
                        "stage {name}: non-constant reduction init"
                    )))
                }
            };
            (compile(source, &slots)?, Some(*combiner), init)
        }
    };
    let cx = Ctx {
        values,
        strides: values
            .iter()
            .map(|v| TensorData::strides(&v.shape))
            .collect(),
        stage: name,
    };
    let total: i64 = shape.iter().product();
    let out_strides = TensorData::strides(&shape);
    let mut out = vec![0.0f64; total as usize];
    // parallel over contiguous chunks of the output
    let chunk = ((total as usize) / (rayon::current_num_threads() * 4)).max(64);
    out.par_chunks_mut(chunk)
        .enumerate()
        .try_for_each(|(ci, dst)| -> Result<(), EvalError> {
            let mut env = vec![0i64; slots.len()];
            let mut loader = &cx;
            for (k, slot) in dst.iter_mut().enumerate() {
                let flat = (ci * chunk + k) as i64;
                for d in 0..n_spatial {
                    env[d] = (flat / out_strides[d]) % shape[d];
                }
                *slot = match combiner {
                    None => run(&body, &env, &mut loader)?.f(),
                    Some(comb) => reduce_point(
                        &body,
                        &extents,
                        n_spatial,
                        comb,
                        init,
                        &mut env,
                        &mut loader,
                    )?,
                };
            }
            Ok(())
        })?;
    Ok(TensorData { shape, data: out })
}

/// Nested loops over the reduce axes of one output point (extents may depend on the
/// spatial indices and on the outer reduce indices).
fn reduce_point<L: Loader>(
    body: &Compiled,
    extents: &[Compiled],
    n_spatial: usize,
    comb: Combiner,
    init: f64,
    env: &mut [i64],
    cx: &mut L,
) -> Result<f64, EvalError> {
    #[allow(clippy::too_many_arguments)]
    fn rec<L: Loader>(
        level: usize,
        body: &Compiled,
        extents: &[Compiled],
        n_spatial: usize,
        comb: Combiner,
        acc: &mut f64,
        env: &mut [i64],
        cx: &mut L,
    ) -> Result<(), EvalError> {
        if level == extents.len() {
            let v = run(body, env, cx)?.f();
            *acc = match comb {
                Combiner::Sum => *acc + v,
                Combiner::Max => acc.max(v),
                Combiner::Min => acc.min(v),
            };
            return Ok(());
        }
        let ext = run(&extents[level], env, cx)?.i();
        for r in 0..ext {
            env[n_spatial + level] = r;
            rec(level + 1, body, extents, n_spatial, comb, acc, env, cx)?;
        }
        Ok(())
    }
    let mut acc = init;
    rec(0, body, extents, n_spatial, comb, &mut acc, env, cx)?;
    Ok(acc)
}

/// A compute stage prepared for evaluation at single points.
struct PointStage {
    name: String,
    shape: Vec<i64>,
    n_slots: usize,
    n_spatial: usize,
    body: Compiled,
    extents: Vec<Compiled>,
    reduce: Option<(Combiner, f64)>,
}

/// Demand-driven evaluation: the value of a stage at a point is computed from exactly the
/// producer points it reads, memoized. Checking a kernel on a sample of output points then
/// costs the sample's receptive field, not the whole workload (a ResNet conv: milliseconds
/// instead of tens of seconds).
struct PointLoader<'a> {
    stages: &'a [Option<PointStage>],
    inputs: &'a [Option<&'a TensorData>],
    memo: std::collections::HashMap<(usize, i64), f64>,
    current: usize,
}

impl Loader for PointLoader<'_> {
    fn load(&mut self, tensor: usize, idx: &[i64]) -> Result<f64, EvalError> {
        if let Some(t) = self.inputs[tensor] {
            let off = offset(self.stage(), tensor, &t.shape, idx)?;
            return Ok(t.data[off as usize]);
        }
        let st = self.stages[tensor]
            .as_ref()
            .ok_or_else(|| EvalError(format!("tensor #{tensor} is not evaluable")))?;
        let off = offset(self.stage(), tensor, &st.shape, idx)?;
        if let Some(v) = self.memo.get(&(tensor, off)) {
            return Ok(*v);
        }
        let outer = std::mem::replace(&mut self.current, tensor);
        let mut env = vec![0i64; st.n_slots];
        env[..idx.len()].copy_from_slice(idx);
        let v = match st.reduce {
            None => run(&st.body, &env, self)?.f(),
            Some((comb, init)) => reduce_point(
                &st.body,
                &st.extents,
                st.n_spatial,
                comb,
                init,
                &mut env,
                self,
            )?,
        };
        self.current = outer;
        self.memo.insert((tensor, off), v);
        Ok(v)
    }

    fn stage(&self) -> &str {
        self.stages[self.current]
            .as_ref()
            .map_or("?", |s| s.name.as_str())
    }
}

/// The values of output `output` (an index into `dag.outputs`) at the given flat
/// row-major positions, evaluated on demand (see [`PointLoader`]). Same arithmetic as
/// [`evaluate`], so the values are identical to the full evaluation's.
pub fn evaluate_points(
    dag: &Dag,
    inputs: &[TensorData],
    output: usize,
    points: &[usize],
) -> Result<Vec<f64>, EvalError> {
    let placeholders = dag.placeholders();
    if inputs.len() != placeholders.len() {
        return Err(EvalError(format!(
            "{} inputs given, the DAG has {} placeholders",
            inputs.len(),
            placeholders.len()
        )));
    }
    let mut input_of: Vec<Option<&TensorData>> = vec![None; dag.stages.len()];
    for (t, data) in placeholders.iter().zip(inputs) {
        if data.shape != dag.stage(*t).shape() {
            return Err(EvalError(format!(
                "input for {} has shape {:?}, expected {:?}",
                dag.stage(*t).name,
                data.shape,
                dag.stage(*t).shape()
            )));
        }
        input_of[t.0] = Some(data);
    }
    let mut stages = Vec::with_capacity(dag.stages.len());
    for stage in &dag.stages {
        let Operation::Compute(c) = &stage.op else {
            stages.push(None);
            continue;
        };
        let slots: Vec<String> = c
            .axes
            .iter()
            .chain(&c.reduce_axes)
            .map(|a| a.name.clone())
            .collect();
        let extents = c
            .reduce_axes
            .iter()
            .map(|r| compile(&r.extent, &slots))
            .collect::<Result<_, _>>()?;
        let (body, reduce) = match &c.body {
            Body::Expr(e) => (compile(e, &slots)?, None),
            Body::Reduce {
                combiner,
                source,
                init,
            } => {
                let init = match init {
                    Expr::FloatImm { value, .. } => *value,
                    Expr::IntImm { value, .. } => *value as f64,
                    _ => {
                        return Err(EvalError(format!(
                            "stage {}: non-constant reduction init",
                            stage.name
                        )))
                    }
                };
                (compile(source, &slots)?, Some((*combiner, init)))
            }
        };
        stages.push(Some(PointStage {
            name: stage.name.clone(),
            shape: c.shape(),
            n_slots: slots.len(),
            n_spatial: c.axes.len(),
            body,
            extents,
            reduce,
        }));
    }
    let out = *dag
        .outputs
        .get(output)
        .ok_or_else(|| EvalError(format!("no output #{output}")))?;
    let shape = dag.stage(out).shape();
    let total: i64 = shape.iter().product();
    let mut loader = PointLoader {
        stages: &stages,
        inputs: &input_of,
        memo: Default::default(),
        current: out.0,
    };
    let mut idx = vec![0i64; shape.len()];
    points
        .iter()
        .map(|&p| {
            if p as i64 >= total {
                return Err(EvalError(format!(
                    "point {p} is outside the output of {total} elements"
                )));
            }
            let mut rest = p as i64;
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            loader.load(out.0, &idx)
        })
        .collect()
}

/// Deterministic pseudo-random inputs (xorshift) in [-1, 1) for tests and verification;
/// integer placeholders get zeros (callers with index tensors must fill them).
pub fn random_inputs(dag: &Dag, seed: u64) -> Vec<TensorData> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    dag.placeholders()
        .into_iter()
        .map(|t| {
            let s = dag.stage(t);
            let shape = s.shape();
            let n = shape.iter().product::<i64>() as usize;
            let data = (0..n)
                .map(|_| {
                    if !s.dtype.is_float() {
                        return 0.0;
                    }
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // exactly representable in f32
                    ((state >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
                })
                .collect();
            TensorData::new(&shape, data)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dag::{ComputeAttrs, DagBuilder, IterVar};

    #[test]
    fn evaluates_padding_reduction_and_epilogue() {
        // y[i] = relu(sum_k pad(x)[i + k] * w[k]) with 1 zero of padding on each side
        let mut b = DagBuilder::new();
        let x = b.placeholder("x", &[3], DType::F32);
        let w = b.placeholder("w", &[3], DType::F32);
        let pad = b.elementwise("pad", "", vec![IterVar::new("i0", 5)], |v| {
            let i = v[0].clone();
            Expr::if_then_else(
                Expr::and(Expr::ge(i.clone(), 1), Expr::lt(i.clone(), 4)),
                x.at(vec![i - 1]),
                Expr::f32(0.0),
            )
        });
        let conv = b.reduce(
            "conv",
            "",
            vec![IterVar::new("i", 3)],
            vec![IterVar::new("k", 3)],
            Combiner::Sum,
            ComputeAttrs::default(),
            |v, r| pad.at(vec![v[0].clone() + r[0].clone()]) * w.at(vec![r[0].clone()]),
        );
        let relu = b.elementwise("relu", "", vec![IterVar::new("i", 3)], |v| {
            Expr::max(conv.at(vec![v[0].clone()]), Expr::f32(0.0))
        });
        let dag = b.finish(&[&relu]);
        let out = evaluate(
            &dag,
            &[
                TensorData::from_f32(&[3], &[1.0, 2.0, 3.0]),
                TensorData::from_f32(&[3], &[1.0, -1.0, 0.5]),
            ],
        )
        .unwrap();
        // i=0: 0*1 + 1*-1 + 2*.5 = 0 ; i=1: 1 - 2 + 1.5 = 0.5 ; i=2: 2 - 3 + 0 = -1 -> 0
        assert_eq!(out[0].data, vec![0.0, 0.5, 0.0]);
    }

    #[test]
    fn out_of_bounds_reads_are_errors() {
        let mut b = DagBuilder::new();
        let x = b.placeholder("x", &[3], DType::F32);
        let y = b.elementwise("y", "", vec![IterVar::new("i", 3)], |v| {
            x.at(vec![v[0].clone() + 1])
        });
        let dag = b.finish(&[&y]);
        let err = evaluate(&dag, &[TensorData::zeros(&[3])]).unwrap_err();
        assert!(err.0.contains("out of bounds"), "{err}");
    }

    #[test]
    fn erf_is_accurate() {
        assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf(-1.0) + 0.842_700_792_949_714_9).abs() < 1e-15);
    }
}
