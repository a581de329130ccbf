//! Running a whole model in process (`ttdb run`, docs/design/run.md): every fused group of
//! the model is one JIT kernel, called in topological order on the model's weights (folded
//! and packed once, at load) and inputs.
//!
//! It runs anchored groups (convs, pools, dense, ...) and the glue ttdb can build so far
//! (`glue.rs`); any other group is refused at load with the op and node named. A tuned
//! kernel runs the schedule `export --model` would choose from the database, when one is
//! given and has one that ttdb can lower; every other kernel runs ttdb's default schedule,
//! and the plan says which and why. Every schedule runs as the tuner measured it, on
//! weights packed at load into the layout it derives (`prepack.rs`). Intermediate tensors
//! share one arena, placed by liveness (`exec.rs`).
mod build;
mod exec;
mod glue;
pub mod in_model;
mod layout_choice;
mod prepack;
mod timing;

pub use build::{build_library, BuildOptions, Built};
pub use exec::{MemoryPlan, Workspace};
pub use layout_choice::{best_covered, layout_coverage, LayoutCoverage};
pub use timing::{
    deterministic_input, time_on_deterministic_inputs, time_runs, KernelTime, Timing,
};

use crate::tune::progress::{Progress, Silent, Work};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use ttdb_algo::ops::Era;
use ttdb_backend::codegen::{compile, CodegenOptions, CompiledKernel};
use ttdb_backend::loopnest::ir::DType;
use ttdb_backend::loopnest::ir::Kernel;
use ttdb_backend::loopnest::{kernel_to_string, BufferData};
use ttdb_backend::lower::{lower_default, LowerOptions};
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
    /// Every kernel on the naive loop nest (no stored or default schedule): a baseline.
    pub naive: bool,
    /// Records to run instead of the chosen ones, by workload key (`export::chosen_record`
    /// chooses otherwise): the in-model choice times the candidates this way.
    pub records: HashMap<String, i64>,
}

/// Where a kernel's schedule came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// A stored record (its source, e.g. `resnet_18.best.json:3`).
    Stored(String),
    /// ttdb's default schedule (`search/default_schedule.rs`), and why no stored one ran (None: a
    /// glue kernel, never tuned).
    Default(Option<String>),
    /// The naive loop nest: asked for, or the default schedule did not lower (why).
    Naive(String),
}

/// One kernel of the plan, as `ttdb run` reports it.
#[derive(Clone, Debug)]
pub struct PlannedKernel {
    pub name: String,
    pub class: String,
    pub anchored: bool,
    pub schedule: Schedule,
    /// The stored record it runs (with [`Schedule::Stored`]).
    pub record: Option<RanRecord>,
}

/// A stored record a kernel runs: its id and the workload key it was chosen under.
#[derive(Clone, Debug, PartialEq)]
pub struct RanRecord {
    pub workload_key: String,
    pub record_id: i64,
}

/// One kernel call of the plan (its name and class are `plan[i]`'s).
struct Step {
    /// Shared by the steps whose lowered kernels are identical (a transformer's layers).
    kernel: Arc<CompiledKernel>,
    /// Where each parameter's buffer lives, the output last.
    args: Vec<exec::Slot>,
}

/// A graph input or output: name, shape (row-major, plain layout) and element type.
#[derive(Clone, Debug)]
pub struct Port {
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: DType,
}

/// A loaded model, ready to run.
pub struct ModelRun {
    steps: Vec<Step>,
    /// Each step's kernel and schedule, in run order.
    pub plan: Vec<PlannedKernel>,
    /// The weights, in the kernels' layouts, computed at load.
    constants: Vec<BufferData>,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// Outputs no kernel writes (an input, a weight, a repeated output): copied after a run.
    output_copies: Vec<(usize, exec::Slot)>,
    pub memory: MemoryPlan,
    /// Weights packed at load into a layout a kernel's schedule derives (`prepack.rs`).
    pub packed_weights: usize,
    /// Reshapes that are no step: their readers read the value they view (`glue::view_source`).
    pub reshape_views: usize,
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
    opts: &ModelRunOptions,
) -> Result<(Era, Record, String, RanRecord), String> {
    let host = crate::tune::export::ForHost::of(&opts.target.host);
    let db = |e: ttdb_store::store::StoreError| format!("the database: {e}");
    let w = crate::tune::export::chosen_record(store, k, compat, &host)
        .map_err(db)?
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
    let (raw, source, record_id) = match opts.records.get(&w.workload_key) {
        Some(&id) => {
            let r = ttdb_store::store::lookup::valid_record(store, id)
                .map_err(db)?
                .filter(|r| r.key == w.workload_key)
                .ok_or_else(|| format!("record {id} is no valid record of its workload"))?;
            let label = r.label();
            (r.raw, label, id)
        }
        None => (w.raw, w.source, w.record_id),
    };
    let record = Record::parse(&raw).map_err(|e| format!("its record does not parse: {e}"))?;
    let ran = RanRecord {
        workload_key: w.workload_key,
        record_id,
    };
    Ok((era, record, source, ran))
}

/// For each kernel, the first with the same lowered code (repeated layers), and the
/// kernels that are their own first: what needs compiling.
fn identical_kernels(lowered: &[Kernel]) -> (Vec<usize>, Vec<usize>) {
    let mut first_of: HashMap<String, usize> = HashMap::new();
    let same_as: Vec<usize> = lowered
        .iter()
        .enumerate()
        .map(|(i, k)| *first_of.entry(kernel_to_string(k)).or_insert(i))
        .collect();
    let unique = (0..lowered.len()).filter(|&i| same_as[i] == i).collect();
    (same_as, unique)
}

/// Compiles the lowered kernels on every core, in run order, telling `progress` as each
/// is done (the first error, naming its kernel, stops the rest). Identical kernels (the
/// same lowered code: repeated layers) are compiled once and shared.
fn compile_all(
    lowered: &[Kernel],
    plan: &[PlannedKernel],
    codegen: &CodegenOptions,
    progress: &mut dyn Progress,
) -> Result<Vec<Arc<CompiledKernel>>, String> {
    let (same_as, unique) = identical_kernels(lowered);
    let unique_plan: Vec<PlannedKernel> = unique.iter().map(|&i| plan[i].clone()).collect();
    let compiled = on_every_core(unique.len(), &unique_plan, progress, |u| {
        compile(&lowered[unique[u]], codegen).map_err(|e| e.to_string())
    })?;
    let by_index: HashMap<usize, Arc<CompiledKernel>> = unique
        .into_iter()
        .zip(compiled.into_iter().map(Arc::new))
        .collect();
    Ok(same_as.iter().map(|i| by_index[i].clone()).collect())
}

/// `work(0..n)` on every core, results in order; `progress` hears of each as it finishes
/// (labelled by `plan`), and the first error, naming its kernel, stops the rest.
fn on_every_core<T: Send>(
    n: usize,
    plan: &[PlannedKernel],
    progress: &mut dyn Progress,
    work: impl Fn(usize) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    progress.start(Work::Kernels(n));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let workers = ttdb_format::host::available_cores().clamp(1, n.max(1));
    let mut done: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<(usize, Result<T, String>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, failed, work) = (&next, &failed, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || failed.load(Ordering::Relaxed) {
                    break;
                }
                if tx.send((i, work(i))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (count, (i, r)) in rx.into_iter().enumerate() {
            match r {
                Ok(k) => done[i] = Some(k),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    let p = &plan[i];
                    first_error.get_or_insert(format!("kernel `{}` ({}): {e}", p.name, p.class));
                }
            }
            progress.kernel(count, n, &plan[i].name);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })?;
    Ok(done
        .into_iter()
        .map(|k| k.expect("every kernel done"))
        .collect())
}

impl ModelRun {
    /// Loads `path`, extracts its kernels, computes its constants and compiles every group,
    /// tuned kernels with their chosen schedule from `store` when given.
    pub fn load(
        path: &Path,
        opts: &ModelRunOptions,
        store: Option<&Store>,
    ) -> Result<ModelRun, String> {
        Self::load_with_progress(path, opts, store, &mut Silent)
    }

    /// [`ModelRun::load`], telling `progress` of each kernel compiled.
    pub fn load_with_progress(
        path: &Path,
        opts: &ModelRunOptions,
        store: Option<&Store>,
        progress: &mut dyn Progress,
    ) -> Result<ModelRun, String> {
        let m = ModelPlan::new(path, opts, store)?;
        let codegen = opts.target.codegen_options();
        let compiled = compile_all(&m.kernels, &m.plan, &codegen, progress)?;
        Ok(ModelRun {
            steps: compiled
                .into_iter()
                .zip(m.args)
                .map(|(kernel, args)| Step { kernel, args })
                .collect(),
            plan: m.plan,
            constants: m.constants,
            inputs: m.inputs,
            outputs: m.outputs,
            output_copies: m.output_copies,
            memory: m.memory,
            packed_weights: m.packed_weights,
            reshape_views: m.reshape_views,
            filled_initializers: m.filled_initializers,
        })
    }
}

/// A model lowered and placed, before its kernels are compiled: what `ttdb run` compiles
/// in process and `ttdb build` ahead of time.
pub struct ModelPlan {
    /// Each step's lowered kernel, in run order.
    pub kernels: Vec<Kernel>,
    /// Where each step's arguments live, the output last.
    args: Vec<Vec<exec::Slot>>,
    pub plan: Vec<PlannedKernel>,
    constants: Vec<BufferData>,
    /// Weights packed into a layout a kernel's schedule derives (`prepack`).
    pub packed_weights: usize,
    pub reshape_views: usize,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    output_copies: Vec<(usize, exec::Slot)>,
    pub memory: MemoryPlan,
    pub filled_initializers: usize,
}

impl ModelPlan {
    /// Loads `path`, extracts its kernels, computes its constants, lowers every group (tuned
    /// kernels with their chosen schedule from `store` when given) and places every tensor.
    pub fn new(
        path: &Path,
        opts: &ModelRunOptions,
        store: Option<&Store>,
    ) -> Result<ModelPlan, String> {
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
        let mut lowered_all: Vec<(Kernel, Vec<ValId>, ValId)> = Vec::new();
        let mut plan = Vec::new();
        let mut constants = prepack::Constants::new(g.values.len());
        let compat = crate::matcher::MatchOptions::default().compat;
        // a reshape's output -> the value it views (`glue::view_source`): no step, its
        // readers read that value
        let mut views: HashMap<ValId, ValId> = HashMap::new();
        let seen = |views: &HashMap<ValId, ValId>, v: ValId| *views.get(&v).unwrap_or(&v);
        for gi in order {
            let k = &ex.group_kernels[gi];
            if matches!(k.kind, KernelKind::Simple) && !g.outputs.contains(&k.values.output) {
                if let Some(src) = glue::view_source(g, &ex.groups[gi], &k.values.inputs) {
                    views.insert(k.values.output, seen(&views, src));
                    continue;
                }
            }
            let mut stored = None;
            // the values the DAG's placeholders p0, p1, ... stand for
            let mut params = k.values.inputs.clone();
            let dag = match &k.kind {
                KernelKind::Tuned => {
                    let spec = k.spec.as_ref().ok_or("a tuned kernel without a spec")?;
                    stored = store.map(|s| stored_schedule(s, k, &compat, opts));
                    let era = match &stored {
                        Some(Ok((era, _, _, _))) => *era,
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
            for v in params.iter_mut() {
                *v = seen(&views, *v);
            }
            for &v in &params {
                if g.values[v].constant && !constants.of.contains_key(&v) {
                    let c = folder.value(v).map_err(|e| e.to_string())?;
                    let data = match c.values {
                        Values::F32(x) => BufferData::F32(x),
                        Values::F64(x) => {
                            BufferData::F32(x.into_iter().map(|v| v as f32).collect())
                        }
                        Values::I64(x) => BufferData::I64(x),
                    };
                    constants.add(v, data);
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
            // the stored schedule if it lowers here, else the default one, saying why; both
            // as the tuner measured them, their weights packed (`prepack`)
            let fallback = |why: Option<String>,
                            inputs: &mut Vec<ValId>,
                            constants: &mut prepack::Constants|
             -> Result<(Kernel, Schedule), String> {
                let naive = || {
                    lower_default(&dag)
                        .map_err(|e| format!("kernel `{}` ({}): {e}", k.name, k.class))
                };
                if opts.naive {
                    return Ok((naive()?, Schedule::Naive("--naive".into())));
                }
                let named = LowerOptions {
                    name: "default".into(),
                    ..LowerOptions::default()
                };
                let mut last_error = String::new();
                for steps in crate::search::default_schedule::default_schedules(
                    &dag,
                    opts.target.lanes() as i64,
                ) {
                    match prepack::lower(&dag, &steps, &named, inputs, constants) {
                        Ok(l) => return Ok((l, Schedule::Default(why))),
                        Err(e) => last_error = e.to_string(),
                    }
                }
                Ok((
                    naive()?,
                    Schedule::Naive(format!(
                        "{}the default schedule does not lower: {last_error}",
                        why.map(|w| format!("{w}; ")).unwrap_or_default()
                    )),
                ))
            };
            let mut ran = None;
            let (lowered, schedule) = match stored {
                Some(Ok((_, record, source, r))) => {
                    let default = LowerOptions::default();
                    match prepack::lower(&dag, &record.steps, &default, &mut inputs, &mut constants)
                    {
                        Ok(l) => {
                            ran = Some(r);
                            (l, Schedule::Stored(source))
                        }
                        Err(e) => fallback(
                            Some(format!(
                                "its stored schedule ({source}) does not lower: {e}"
                            )),
                            &mut inputs,
                            &mut constants,
                        )?,
                    }
                }
                Some(Err(why)) => fallback(Some(why), &mut inputs, &mut constants)?,
                None if k.is_tuned() => fallback(
                    Some("no database given".into()),
                    &mut inputs,
                    &mut constants,
                )?,
                None => fallback(None, &mut inputs, &mut constants)?,
            };
            // operands computed at run time that the schedule reads packed: packed just before
            for pack in constants.take_run_packs() {
                let kernel = prepack::pack_kernel(&pack, opts.target.lanes() as i64)
                    .map_err(|e| format!("kernel `{}`: packing an operand: {e}", k.name))?;
                plan.push(PlannedKernel {
                    name: k.name.clone(),
                    class: "layout_rewrite".into(),
                    anchored: false,
                    schedule: Schedule::Default(None),
                    record: None,
                });
                lowered_all.push((kernel, vec![pack.from], pack.to));
            }
            plan.push(PlannedKernel {
                name: k.name.clone(),
                class: k.class.clone(),
                anchored: k.is_anchored(),
                schedule,
                record: ran,
            });
            lowered_all.push((lowered, inputs, k.values.output));
        }
        for &o in &g.outputs {
            let v = &g.values[o];
            if v.layout != Layout::Plain && v.shape.len() == 4 {
                return Err(format!(
                    "graph output `{}` is left in a blocked layout",
                    v.name
                ));
            }
        }
        // A weight every reader of which got a packed copy is not kept twice.
        let read: std::collections::HashSet<ValId> = lowered_all
            .iter()
            .flat_map(|(_, reads, _)| reads.iter().copied())
            .chain(g.outputs.iter().copied())
            .collect();
        constants.release_unread(&read);
        let io: Vec<exec::StepIo> = lowered_all
            .iter()
            .zip(&plan)
            .map(|((kernel, reads, writes), p)| exec::StepIo {
                reads,
                writes: *writes,
                params: &kernel.params,
                name: &p.name,
            })
            .collect();
        let graph_inputs: Vec<(ValId, i64)> = g
            .inputs
            .iter()
            .map(|&v| (v, g.values[v].phys.iter().product()))
            .collect();
        let placed = exec::place(
            &io,
            &graph_inputs,
            &g.outputs,
            &constants.of,
            &constants.data,
        )?;
        let port = |v: ValId, dtype: DType| Port {
            name: g.values[v].name.clone(),
            shape: g.values[v].phys.clone(),
            dtype,
        };
        Ok(ModelPlan {
            kernels: lowered_all.into_iter().map(|(k, _, _)| k).collect(),
            args: placed.args,
            plan,
            packed_weights: constants.packed_copies(),
            reshape_views: views.len(),
            constants: constants.data,
            inputs: g
                .inputs
                .iter()
                .zip(&placed.input_dtypes)
                .map(|(&v, &d)| port(v, d))
                .collect(),
            outputs: g
                .outputs
                .iter()
                .zip(&placed.output_dtypes)
                .map(|(&v, &d)| port(v, d))
                .collect(),
            output_copies: placed.output_copies,
            memory: placed.memory,
            filled_initializers: weights.filled().0,
        })
    }
}
