//! Running a whole model in process (`ttdb run`, docs/design/run.md): every fused group of
//! the model is one JIT kernel, called in topological order on the model's weights (folded
//! and packed once, at load) and inputs.
//!
//! This first version runs anchored groups (convs, pools, dense, ...) and the glue ttdb can
//! build so far (layout transforms, reshapes, batch_flatten); any other group is refused at
//! load with the op and node named. A tuned kernel runs the schedule `export --model` would
//! choose from the database, when one is given and has one that ttdb can lower; every other
//! kernel runs the naive default schedule, and the plan says which and why. Each tensor has
//! its own buffer, freed after its last reader.
mod glue;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};
use ttdb_algo::ops::Era;
use ttdb_backend::codegen::{compile, CompiledKernel, RunOptions};
use ttdb_backend::loopnest::BufferData;
use ttdb_backend::lower::{lower_default, lower_steps, LowerOptions};
use ttdb_backend::target::Target;
use ttdb_format::ansor::Record;
use ttdb_onnx::onnx::constants::Folder;
use ttdb_onnx::onnx::relay::{Layout, ValId};
use ttdb_onnx::onnx::weights::{read_model_weights, Values, WeightLimits};
use ttdb_onnx::onnx::{self, InputShape, KernelKind, LayoutMode, Options};
use ttdb_store::store::Store;

/// What `ttdb run` was asked to do.
#[derive(Clone, Debug)]
pub struct ModelRunOptions {
    pub layout: LayoutMode,
    pub input_shapes: Vec<InputShape>,
    /// Extraction options (lanes, TopHub); `layout` overrides theirs.
    pub extract: Options,
    pub target: Target,
    pub weight_limits: WeightLimits,
}

/// Where a kernel's schedule came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// A stored record (its source, e.g. `resnet_18.best.json:3`).
    Stored(String),
    /// The naive default schedule, and why no stored one ran (None: a glue kernel).
    Naive(Option<String>),
}

/// One kernel of the plan, as `ttdb run` reports it.
#[derive(Clone, Debug)]
pub struct PlannedKernel {
    pub name: String,
    pub class: String,
    pub anchored: bool,
    pub schedule: Schedule,
}

/// One kernel call of the plan (its name and class are `plan[i]`'s).
struct Step {
    kernel: CompiledKernel,
    /// The kernel's input values, in its parameter order, then its output value.
    inputs: Vec<ValId>,
    output: ValId,
}

/// A graph input or output: name, value and shape.
#[derive(Clone, Debug)]
pub struct Port {
    pub name: String,
    pub shape: Vec<i64>,
    value: ValId,
}

/// A loaded model, ready to run.
pub struct ModelRun {
    steps: Vec<Step>,
    /// Each step's kernel and schedule, in run order.
    pub plan: Vec<PlannedKernel>,
    constants: HashMap<ValId, BufferData>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// For each value: the index of the last step that reads it (graph outputs: never freed).
    last_read: HashMap<ValId, usize>,
    /// Initializers filled deterministically (their external data was missing).
    pub filled_initializers: usize,
}

/// A run's timing of one step.
#[derive(Clone, Debug)]
pub struct StepTime {
    pub name: String,
    pub class: String,
    pub anchored: bool,
    pub time: Duration,
}

fn err(m: impl Into<String>) -> String {
    m.into()
}

/// The record `export --model` would choose for tuned kernel `k`, parsed, with the TVM era
/// whose DAG its steps address (the newest era with `p<i>` placeholder names among those
/// whose key it is) and where it came from. Err says why there is none.
fn stored_schedule(
    store: &Store,
    k: &onnx::Kernel,
    compat: &str,
    target: &Target,
) -> Result<(Era, Record, String), String> {
    let w = crate::tune::export::chosen_record(store, k, compat, &target.host.isa_flags)
        .map_err(|e| format!("the database: {e}"))?
        .ok_or("no valid record under its workload keys")?;
    let era = Era::ALL
        .iter()
        .rev()
        .find(|e| **e >= Era::V010Early && w.tvm_eras.contains(&e.to_string()))
        .copied()
        .ok_or_else(|| {
            format!(
                "its record is for TVM {}, whose placeholders ttdb run cannot tell apart yet",
                w.tvm_eras.join(", ")
            )
        })?;
    let record = Record::parse(&w.raw).map_err(|e| format!("its record does not parse: {e}"))?;
    Ok((era, record, w.source))
}

impl ModelRun {
    /// Loads `path`, extracts its kernels, computes its constants and compiles every group,
    /// tuned kernels with their chosen schedule from `store` when given.
    pub fn load(
        path: &Path,
        opts: &ModelRunOptions,
        store: Option<&Store>,
    ) -> Result<ModelRun, String> {
        let graph = onnx::load(path, &opts.input_shapes).map_err(|e| e.to_string())?;
        let weights = read_model_weights(path, &opts.weight_limits).map_err(|e| e.to_string())?;
        let extract = Options {
            layout: opts.layout,
            ..opts.extract.clone()
        };
        let ex = onnx::extract_all(&graph, &extract).map_err(|e| e.to_string())?;
        let g = &ex.graph;
        let mut folder = Folder::new(&ex.folded, g, &weights);
        // groups in topological order: by their output op
        let mut order: Vec<usize> = (0..ex.groups.len()).collect();
        order.sort_by_key(|&i| ex.groups[i].iter().max().copied().unwrap_or(0));
        let codegen = opts.target.codegen_options();
        let mut steps = Vec::new();
        let mut plan = Vec::new();
        let mut constants = HashMap::new();
        let compat = crate::matcher::MatchOptions::default().compat;
        for gi in order {
            let k = &ex.group_kernels[gi];
            let mut stored = None;
            // the values the DAG's placeholders p0, p1, ... stand for
            let mut params = k.values.inputs.clone();
            let dag = match &k.kind {
                KernelKind::Tuned => {
                    let spec = k.spec.as_ref().ok_or("a tuned kernel without a spec")?;
                    stored = store.map(|s| stored_schedule(s, k, &compat, &opts.target));
                    let era = match &stored {
                        Some(Ok((era, _, _))) => *era,
                        _ => Era::V010,
                    };
                    spec.build(era, &k.inputs)
                        .map_err(|e| format!("kernel `{}` ({}): {}", k.name, k.class, e.0))?
                }
                KernelKind::Untunable { reason } => {
                    return Err(format!(
                        "kernel `{}` ({}) cannot be built: {reason}",
                        k.name, k.class
                    ))
                }
                KernelKind::Simple => {
                    let (dag, all) = glue::glue_dag(g, &ex.groups[gi], &k.values.inputs)
                        .map_err(|e| format!("kernel `{}` ({}): {e}", k.name, k.class))?;
                    params = all;
                    dag
                }
            };
            for &v in &params {
                if g.values[v].constant && !constants.contains_key(&v) {
                    let c = folder.value(v).map_err(|e| e.to_string())?;
                    let data = match c.values {
                        Values::F32(x) => BufferData::F32(x),
                        Values::F64(x) => {
                            BufferData::F32(x.into_iter().map(|v| v as f32).collect())
                        }
                        Values::I64(x) => BufferData::I64(x),
                    };
                    constants.insert(v, data);
                }
            }
            // parameters are the DAG's placeholders (p<i> = input i) in schedule order
            let mut inputs = Vec::new();
            for t in dag.placeholders() {
                let name = &dag.stage(t).name;
                let i: usize = name
                    .strip_prefix('p')
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| err(format!("kernel `{}`: placeholder `{name}`", k.name)))?;
                inputs.push(
                    *params
                        .get(i)
                        .ok_or_else(|| err(format!("kernel `{}`: placeholder `{name}`", k.name)))?,
                );
            }
            // the stored schedule if it lowers here, else the naive one, saying why
            let naive = |dag: &ttdb_algo::ir::Dag| {
                lower_default(dag).map_err(|e| format!("kernel `{}` ({}): {e}", k.name, k.class))
            };
            let (lowered, schedule) = match stored {
                Some(Ok((_, record, source))) => {
                    match lower_steps(&dag, &record.steps, &LowerOptions::default()) {
                        Ok(l) => (l, Schedule::Stored(source)),
                        Err(e) => (
                            naive(&dag)?,
                            Schedule::Naive(Some(format!(
                                "its stored schedule ({source}) does not lower: {e}"
                            ))),
                        ),
                    }
                }
                Some(Err(why)) => (naive(&dag)?, Schedule::Naive(Some(why))),
                None if k.is_tuned() => (
                    naive(&dag)?,
                    Schedule::Naive(Some("no database given".into())),
                ),
                None => (naive(&dag)?, Schedule::Naive(None)),
            };
            let kernel = compile(&lowered, &codegen)
                .map_err(|e| format!("kernel `{}` ({}): {e}", k.name, k.class))?;
            plan.push(PlannedKernel {
                name: k.name.clone(),
                class: k.class.clone(),
                anchored: k.is_anchored(),
                schedule,
            });
            steps.push(Step {
                kernel,
                inputs,
                output: k.values.output,
            });
        }
        let port = |v: ValId| Port {
            name: g.values[v].name.clone(),
            shape: g.values[v].phys.clone(),
            value: v,
        };
        let outputs: Vec<Port> = g.outputs.iter().map(|&v| port(v)).collect();
        for o in &outputs {
            if g.values[o.value].layout != Layout::Plain && g.values[o.value].shape.len() == 4 {
                return Err(format!(
                    "graph output `{}` is left in a blocked layout",
                    o.name
                ));
            }
        }
        let mut last_read = HashMap::new();
        for (i, s) in steps.iter().enumerate() {
            for &v in &s.inputs {
                last_read.insert(v, i);
            }
        }
        for o in &outputs {
            last_read.insert(o.value, usize::MAX);
        }
        Ok(ModelRun {
            steps,
            plan,
            constants,
            inputs: g.inputs.iter().map(|&v| port(v)).collect(),
            outputs,
            last_read,
            filled_initializers: weights.filled().0,
        })
    }

    /// Runs the model on `inputs` (one per [`ModelRun::inputs`], by name; f32 row-major).
    /// Returns the outputs in order and each step's time.
    pub fn run(
        &self,
        inputs: &HashMap<String, Vec<f32>>,
        threads: Option<usize>,
    ) -> Result<(Vec<Vec<f32>>, Vec<StepTime>), String> {
        let mut live: HashMap<ValId, BufferData> = HashMap::new();
        for p in &self.inputs {
            let x = inputs
                .get(&p.name)
                .ok_or_else(|| format!("input `{}` is missing", p.name))?;
            let n: i64 = p.shape.iter().product();
            if x.len() as i64 != n {
                return Err(format!(
                    "input `{}` has {} values, its shape {:?} needs {n}",
                    p.name,
                    x.len(),
                    p.shape
                ));
            }
            live.insert(p.value, BufferData::F32(x.clone()));
        }
        let opts = RunOptions {
            threads,
            timeout: None,
        };
        let mut times = Vec::with_capacity(self.steps.len());
        for (i, (s, p)) in self.steps.iter().zip(&self.plan).enumerate() {
            let mut args: Vec<BufferData> = Vec::with_capacity(s.inputs.len() + 1);
            for v in &s.inputs {
                let b = match self.constants.get(v) {
                    Some(c) => c.clone(),
                    None => live.get(v).cloned().ok_or_else(|| {
                        format!("step `{}`: an input is not computed yet", p.name)
                    })?,
                };
                args.push(b);
            }
            let out = s
                .kernel
                .kernel
                .params
                .last()
                .ok_or("a kernel without parameters")?;
            args.push(BufferData::for_buffer(out));
            let t0 = Instant::now();
            s.kernel
                .run(&mut args, &opts)
                .map_err(|e| format!("step `{}` ({}): {e}", p.name, p.class))?;
            times.push(StepTime {
                name: p.name.clone(),
                class: p.class.clone(),
                anchored: p.anchored,
                time: t0.elapsed(),
            });
            live.insert(s.output, args.pop().expect("the output"));
            for v in &s.inputs {
                if self.last_read.get(v) == Some(&i) {
                    live.remove(v);
                }
            }
        }
        let outputs = self
            .outputs
            .iter()
            .map(|o| match live.get(&o.value) {
                Some(BufferData::F32(x)) => Ok(x.clone()),
                _ => Err(format!("output `{}` was not computed as float32", o.name)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((outputs, times))
    }
}
