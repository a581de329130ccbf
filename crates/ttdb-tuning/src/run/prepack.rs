//! A model's weights, and the packed copies its kernels' schedules ask for.
//!
//! The tuner measures a schedule with its layout-free weights pre-packed into the layout
//! the schedule's loops derive (Ansor's layout rewrite, option 2; `EvalOptions::
//! prepack_weights`): the inner loops then read weights contiguously. A run that replayed
//! the same schedule on weights in the DAG's layout would read them with strides, and be
//! slower than what the database recorded. So a run lowers every schedule the way it was
//! measured and packs the weights it reads once, when the model loads (what TVM's constant
//! folding of `auto_scheduler_layout_transform` does); `ttdb build` embeds the packed copies.
//! A packed operand computed at run time (a batch_matmul's right operand is an activation)
//! is packed by a step of its own before its kernel, every run ([`RunPack`]).
use std::collections::{HashMap, HashSet};
use ttdb_algo::ir::Dag;
use ttdb_backend::loopnest::ir::Kernel;
use ttdb_backend::loopnest::BufferData;
use ttdb_backend::lower::{
    lower_steps_detailed, pack_dag, pack_values, LowerError, LowerOptions, PackedWeight,
    WeightLayoutMode,
};
use ttdb_format::ansor::Step;
use ttdb_onnx::onnx::relay::ValId;

/// The constants of a model run: its weights (computed once) and packed copies of them.
pub(super) struct Constants {
    /// Value -> index in `data`. Packed copies have values of their own, past the graph's.
    pub of: HashMap<ValId, usize>,
    pub data: Vec<BufferData>,
    /// (weight, packed layout) -> the value of its packed copy: kernels with the same
    /// layout share one copy.
    packed: HashMap<(ValId, String), ValId>,
    /// The same for values computed at run time: each gets a packing step (`take_run_packs`).
    run_packed: HashMap<(ValId, String), ValId>,
    /// Packing steps the last lowerings asked for, not yet placed in the run.
    run_packs: Vec<RunPack>,
    next_value: ValId,
}

/// A step that packs a value computed at run time into the layout a kernel reads it in.
pub(super) struct RunPack {
    pub from: ValId,
    pub to: ValId,
    pub layout: PackedWeight,
    pub dtype: ttdb_algo::ir::DType,
}

impl Constants {
    /// No constants yet, for a graph of `values` values.
    pub fn new(values: usize) -> Constants {
        Constants {
            of: HashMap::new(),
            data: Vec::new(),
            packed: HashMap::new(),
            run_packed: HashMap::new(),
            run_packs: Vec::new(),
            next_value: values,
        }
    }

    pub fn add(&mut self, v: ValId, data: BufferData) {
        self.of.insert(v, self.data.len());
        self.data.push(data);
    }

    /// Packed copies made.
    pub fn packed_copies(&self) -> usize {
        self.packed.len()
    }

    /// The packing steps lowerings asked for since the last call, to run before their kernel.
    pub fn take_run_packs(&mut self) -> Vec<RunPack> {
        std::mem::take(&mut self.run_packs)
    }

    fn new_value(&mut self) -> ValId {
        self.next_value += 1;
        self.next_value - 1
    }

    /// Frees the weights nothing reads any more (kernels read packed copies instead),
    /// keeping their indices: `read` holds every value a step reads or an output copies.
    pub fn release_unread(&mut self, read: &HashSet<ValId>) {
        for (v, &c) in &self.of {
            if !read.contains(v) {
                self.data[c] = BufferData::zeros(self.data[c].dtype(), 0);
            }
        }
    }
}

/// Lowers `steps` on `dag` as the tuner measured them: layout-free weights packed. `inputs`
/// holds the value of each placeholder; each packed weight's becomes its packed copy: made at
/// load for an f32 constant of the model, by a packing step before the kernel for a value
/// computed at run time (`take_run_packs`). Where a weight the schedule would pack is a
/// constant of another type, lowers with every weight as it is, which is always correct.
/// (`exec::place` checks each packed copy's size against the kernel's parameter, as for
/// every argument.)
pub(super) fn lower(
    dag: &Dag,
    steps: &[Step],
    opts: &LowerOptions,
    inputs: &mut [ValId],
    constants: &mut Constants,
) -> Result<Kernel, LowerError> {
    let packed_opts = LowerOptions {
        weight_layout: WeightLayoutMode::PrePacked,
        ..opts.clone()
    };
    let lowered = lower_steps_detailed(dag, steps, &packed_opts)?;
    let packed = lowered.weight_layout.packed();
    let packable = packed.iter().all(|p| match inputs.get(p.input) {
        Some(v) => match constants.of.get(v) {
            Some(&c) => matches!(constants.data[c], BufferData::F32(_)),
            None => true,
        },
        None => false,
    });
    if !packable {
        let original = LowerOptions {
            weight_layout: WeightLayoutMode::Original,
            ..opts.clone()
        };
        return lower_steps_detailed(dag, steps, &original).map(|l| l.kernel);
    }
    for p in packed {
        let weight = inputs[p.input];
        let key = (weight, p.new_layout());
        let copy = if let Some(&c) = constants.of.get(&weight) {
            match constants.packed.get(&key) {
                Some(&v) => v,
                None => {
                    let BufferData::F32(values) = &constants.data[c] else {
                        unreachable!("checked above")
                    };
                    let data = BufferData::F32(pack_values(p, values));
                    let v = constants.new_value();
                    constants.add(v, data);
                    constants.packed.insert(key, v);
                    v
                }
            }
        } else {
            match constants.run_packed.get(&key) {
                Some(&v) => v,
                None => {
                    let v = constants.new_value();
                    constants.run_packs.push(RunPack {
                        from: weight,
                        to: v,
                        layout: p.clone(),
                        dtype: dag.stage(p.tensor).dtype,
                    });
                    constants.run_packed.insert(key, v);
                    v
                }
            }
        };
        inputs[p.input] = copy;
    }
    Ok(lowered.kernel)
}

/// The kernel of a packing step: the packing DAG on its default schedule (vectorized and
/// parallel like any glue), else its naive loop nest.
pub(super) fn pack_kernel(pack: &RunPack, lanes: i64) -> Result<Kernel, LowerError> {
    let dag = pack_dag(&pack.layout, pack.dtype);
    let opts = LowerOptions {
        name: "layout_rewrite".into(),
        ..LowerOptions::default()
    };
    match crate::search::default_schedule::lowering_default(&dag, lanes) {
        Some(steps) => lower_steps_detailed(&dag, &steps, &opts).map(|l| l.kernel),
        None => ttdb_backend::lower::lower_default(&dag),
    }
}
