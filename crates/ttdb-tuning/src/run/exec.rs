//! Executing a loaded model without copies: every kernel is called on pointers into one
//! arena (the intermediate tensors, placed by liveness with `ttdb_runtime::arena::plan`), the
//! weights (computed once, at load) and the caller's input and output buffers.
use super::{ModelRun, StepTime};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use ttdb_backend::codegen::RunOptions;
use ttdb_backend::loopnest::ir::{Buffer, BufferRole, DType};
use ttdb_backend::loopnest::BufferData;
use ttdb_onnx::onnx::relay::ValId;
use ttdb_runtime::arena::{self, Block, Lifetime};

/// Where one kernel argument lives during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// The caller's input buffer `i` (read only).
    Input(usize),
    /// Weight `i`, computed at load (read only).
    Constant(usize),
    /// An intermediate tensor in the arena.
    Arena { offset: usize, bytes: usize },
    /// The caller's output buffer `i`.
    Output(usize),
}

/// The static memory plan of a model, as `ttdb run` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryPlan {
    /// The arena: every intermediate tensor, buffers reused by liveness.
    pub arena_bytes: usize,
    /// What the intermediate tensors would take with a buffer each.
    pub intermediates_bytes: usize,
    pub intermediates: usize,
    /// The weights, in the kernels' layouts.
    pub weights_bytes: usize,
}

/// What one kernel call reads and writes, in its parameter order (the output last).
pub(super) struct StepIo<'a> {
    pub reads: &'a [ValId],
    pub writes: ValId,
    pub params: &'a [Buffer],
    pub name: &'a str,
}

/// Each step's argument slots, the graph ports' dtypes, the outputs that are not a step's
/// own output (copied after the run: an output that is an input, a weight, or a repeat of
/// another output), and the memory plan.
pub(super) struct Placement {
    pub args: Vec<Vec<Slot>>,
    pub input_dtypes: Vec<DType>,
    pub output_dtypes: Vec<DType>,
    pub output_copies: Vec<(usize, Slot)>,
    pub memory: MemoryPlan,
}

fn bytes_of(b: &Buffer) -> usize {
    b.num_elements().max(0) as usize * b.dtype.bytes()
}

/// Places every value the steps touch, checking that each kernel gets buffers of exactly the
/// dtype and size it was compiled for (what makes the pointer calls of [`ModelRun::run_in`]
/// sound).
pub(super) fn place(
    steps: &[StepIo],
    inputs: &[(ValId, i64)],
    outputs: &[ValId],
    constants: &HashMap<ValId, usize>,
    constant_data: &[BufferData],
) -> Result<Placement, String> {
    // every value's slot, with its dtype and element count
    let mut at: HashMap<ValId, (Slot, DType, usize)> = HashMap::new();
    let mut input_dtypes: Vec<Option<DType>> = vec![None; inputs.len()];
    let mut lifetimes: Vec<Lifetime> = Vec::new();
    let mut intermediate_of: HashMap<ValId, usize> = HashMap::new();
    let mut output_dtypes: Vec<Option<DType>> = vec![None; outputs.len()];
    let mut written_outputs: Vec<bool> = vec![false; outputs.len()];
    let mut reads: Vec<Vec<ValId>> = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let (out, ins) = s
            .params
            .split_last()
            .ok_or_else(|| format!("kernel `{}` has no parameters", s.name))?;
        if out.role != BufferRole::Output || ins.iter().any(|p| p.role != BufferRole::Input) {
            return Err(format!(
                "kernel `{}` does not write exactly its last parameter",
                s.name
            ));
        }
        if ins.len() != s.reads.len() {
            return Err(format!(
                "kernel `{}` takes {} inputs, its group reads {}",
                s.name,
                ins.len(),
                s.reads.len()
            ));
        }
        for (p, &v) in ins.iter().zip(s.reads) {
            let n = p.num_elements().max(0) as usize;
            let (dtype, count) = if let Some(&(_, d, c)) = at.get(&v) {
                (d, c)
            } else if let Some(&c) = constants.get(&v) {
                let data = &constant_data[c];
                at.insert(v, (Slot::Constant(c), data.dtype(), data.len()));
                (data.dtype(), data.len())
            } else if let Some(k) = inputs.iter().position(|&(iv, _)| iv == v) {
                // a graph input's dtype is what its readers were compiled for
                let d = *input_dtypes[k].get_or_insert(p.dtype);
                let count = inputs[k].1.max(0) as usize;
                at.insert(v, (Slot::Input(k), d, count));
                (d, count)
            } else {
                return Err(format!(
                    "kernel `{}` reads a value no earlier kernel computes",
                    s.name
                ));
            };
            if dtype != p.dtype || count != n {
                return Err(format!(
                    "kernel `{}`: parameter `{}` is {n} x {}, its value {count} x {dtype}",
                    s.name, p.name, p.dtype
                ));
            }
        }
        let n = out.num_elements().max(0) as usize;
        let slot = match outputs
            .iter()
            .enumerate()
            .position(|(k, &o)| o == s.writes && !written_outputs[k])
        {
            Some(k) => {
                written_outputs[k] = true;
                output_dtypes[k] = Some(out.dtype);
                Slot::Output(k)
            }
            None => {
                intermediate_of.insert(s.writes, lifetimes.len());
                lifetimes.push(Lifetime {
                    bytes: bytes_of(out),
                    first: i,
                    last: i,
                });
                // the offset comes from the plan, below
                Slot::Arena {
                    offset: usize::MAX,
                    bytes: bytes_of(out),
                }
            }
        };
        if at.insert(s.writes, (slot, out.dtype, n)).is_some() {
            return Err(format!("kernel `{}` writes a value written before", s.name));
        }
        reads.push(s.reads.to_vec());
    }
    // an intermediate lives to its last reader
    for (i, r) in reads.iter().enumerate() {
        for v in r {
            if let Some(&t) = intermediate_of.get(v) {
                lifetimes[t].last = lifetimes[t].last.max(i);
            }
        }
    }
    let memory_plan = arena::plan(&lifetimes, arena::ALIGN);
    let resolve = |v: &ValId| -> Slot {
        match at[v].0 {
            Slot::Arena { bytes, .. } => Slot::Arena {
                offset: memory_plan.offsets[intermediate_of[v]],
                bytes,
            },
            s => s,
        }
    };
    let args = steps
        .iter()
        .map(|s| {
            s.reads
                .iter()
                .chain(std::iter::once(&s.writes))
                .map(resolve)
                .collect()
        })
        .collect();
    let mut output_copies = Vec::new();
    for (k, o) in outputs.iter().enumerate() {
        if written_outputs[k] {
            continue;
        }
        let (from, dtype) = if let Some(&(_, d, _)) = at.get(o) {
            (resolve(o), d)
        } else if let Some(&c) = constants.get(o) {
            (Slot::Constant(c), constant_data[c].dtype())
        } else if let Some(i) = inputs.iter().position(|&(iv, _)| iv == *o) {
            (Slot::Input(i), *input_dtypes[i].get_or_insert(DType::F32))
        } else {
            return Err(format!("graph output {k} is computed by no kernel"));
        };
        output_dtypes[k] = Some(dtype);
        output_copies.push((k, from));
    }
    Ok(Placement {
        args,
        // an input no kernel reads is taken as float32 (and never read)
        input_dtypes: input_dtypes
            .into_iter()
            .map(|d| d.unwrap_or(DType::F32))
            .collect(),
        output_dtypes: output_dtypes
            .into_iter()
            .map(|d| d.unwrap_or(DType::F32))
            .collect(),
        output_copies,
        memory: MemoryPlan {
            arena_bytes: memory_plan.peak,
            intermediates_bytes: memory_plan.sum,
            intermediates: lifetimes.len(),
            weights_bytes: constant_data
                .iter()
                .map(|c| c.len() * c.dtype().bytes())
                .sum(),
        },
    })
}

/// What runs of a model need besides the model: the arena and the output buffers, allocated
/// once and reused by every run.
pub struct Workspace {
    arena: Block,
    /// The outputs of the last run, in [`ModelRun::outputs`] order.
    pub outputs: Vec<BufferData>,
}

impl ModelRun {
    /// The arena and output buffers for [`ModelRun::run_in`].
    pub fn workspace(&self) -> Result<Workspace, String> {
        let arena = Block::new(self.memory.arena_bytes)
            .ok_or_else(|| format!("cannot allocate the {} byte arena", self.memory.arena_bytes))?;
        let outputs = self
            .outputs
            .iter()
            .map(|o| BufferData::zeros(o.dtype, o.shape.iter().product::<i64>().max(0) as usize))
            .collect();
        Ok(Workspace { arena, outputs })
    }

    /// One run on `inputs` (in [`ModelRun::inputs`] order), into `ws.outputs`; returns each
    /// step's time. Nothing is allocated or copied but the outputs that no kernel writes.
    pub fn run_in(
        &self,
        ws: &mut Workspace,
        inputs: &[&BufferData],
        threads: Option<usize>,
    ) -> Result<Vec<Duration>, String> {
        if inputs.len() != self.inputs.len() {
            return Err(format!(
                "the model takes {} inputs, got {}",
                self.inputs.len(),
                inputs.len()
            ));
        }
        for (p, x) in self.inputs.iter().zip(inputs) {
            let n: i64 = p.shape.iter().product();
            if x.dtype() != p.dtype {
                return Err(format!(
                    "input `{}` is {}, the model's input is {}",
                    p.name,
                    x.dtype(),
                    p.dtype
                ));
            }
            if x.len() as i64 != n {
                return Err(format!(
                    "input `{}` has {} values, its shape {:?} needs {n}",
                    p.name,
                    x.len(),
                    p.shape
                ));
            }
        }
        let opts = RunOptions {
            threads,
            timeout: None,
        };
        let input_ptrs: Vec<*mut u8> = inputs.iter().map(|x| x.as_ptr() as *mut u8).collect();
        let output_ptrs: Vec<*mut u8> = ws.outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        let mut times = Vec::with_capacity(self.steps.len());
        let mut ptrs: Vec<*mut u8> = Vec::new();
        for (s, p) in self.steps.iter().zip(&self.plan) {
            ptrs.clear();
            for slot in &s.args {
                ptrs.push(self.pointer(*slot, &input_ptrs, &output_ptrs, &mut ws.arena)?);
            }
            let t0 = Instant::now();
            // SAFETY: `place` checked that every slot holds exactly the dtype and element
            // count of the parameter it is passed as (inputs and outputs were checked above);
            // the only written argument, the last, is an output buffer or an arena range whose
            // lifetime overlaps every argument of this step, so the plan gave it bytes of its
            // own; inputs and weights are never written (the loop-nest validator refuses a
            // store into an input buffer).
            unsafe { s.kernel.run_on_pointers(&ptrs, &opts) }
                .map_err(|e| format!("step `{}` ({}): {e}", p.name, p.class))?;
            times.push(t0.elapsed());
        }
        for &(k, from) in &self.output_copies {
            let src = self.pointer(from, &input_ptrs, &output_ptrs, &mut ws.arena)?;
            let bytes = ws.outputs[k].len() * ws.outputs[k].dtype().bytes();
            // SAFETY: `place` gave the output the dtype of its source, and the ports' element
            // counts are those of the values; the output buffer is the caller's own.
            unsafe { std::ptr::copy_nonoverlapping(src, output_ptrs[k], bytes) };
        }
        Ok(times)
    }

    fn pointer(
        &self,
        slot: Slot,
        inputs: &[*mut u8],
        outputs: &[*mut u8],
        arena: &mut Block,
    ) -> Result<*mut u8, String> {
        Ok(match slot {
            Slot::Input(i) => inputs[i],
            // read only (see `run_in`)
            Slot::Constant(c) => self.constants[c].as_ptr() as *mut u8,
            Slot::Output(k) => outputs[k],
            Slot::Arena { offset, bytes } => arena
                .at(offset, bytes)
                .ok_or("an intermediate tensor lies outside the arena")?,
        })
    }

    /// Runs the model once on `inputs` (by input name). Returns the outputs in order and
    /// each step's time.
    pub fn run(
        &self,
        inputs: &HashMap<String, BufferData>,
        threads: Option<usize>,
    ) -> Result<(Vec<BufferData>, Vec<StepTime>), String> {
        let given = self
            .inputs
            .iter()
            .map(|p| {
                inputs
                    .get(&p.name)
                    .ok_or_else(|| format!("input `{}` is missing", p.name))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut ws = self.workspace()?;
        let times = self.run_in(&mut ws, &given, threads)?;
        Ok((ws.outputs, self.step_times(&times)))
    }

    /// Names each of a run's step times.
    pub fn step_times(&self, times: &[Duration]) -> Vec<StepTime> {
        self.plan
            .iter()
            .zip(times)
            .map(|(p, &time)| StepTime {
                name: p.name.clone(),
                class: p.class.clone(),
                anchored: p.anchored,
                time,
            })
            .collect()
    }
}
