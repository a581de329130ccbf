//! LLVM code generation and JIT execution of loop-nest kernels.
//!
//! Pipeline (`compile`): validate → `UnrollLoop` pass → simplify → bounds proof (refuse any
//! unproven access) → static cost guard → translate to LLVM IR → verify → [`KERNEL_PIPELINE`]
//! with the host target machine → object file → ORC LLJIT.
//!
//! * [`llvm`]: safe wrapper over llvm-sys; [`jit`]: process-wide LLJIT;
//! * [`translate`], [`expr`], [`vector`], `mask`: IR translation; `vmath`: f32 exp, sigmoid,
//!   tanh and erf as vector polynomials;
//! * [`runtime`]: parallel launcher, watchdog, math symbols; [`cache`]: compiled-kernel cache.

pub mod cache;
pub mod expr;
pub mod jit;
pub mod llvm;
mod mask;
mod pool;
pub use pool::set_idle_spin;
pub mod runtime;
pub mod translate;
pub mod vector;
mod vmath;

use crate::loopnest::bounds::{check_bounds, UnprovenAccess};
use crate::loopnest::cost::{check_cost, CostEstimate, CostLimits};
use crate::loopnest::data::BufferData;
use crate::loopnest::interp::check_arguments;
use crate::loopnest::ir::Kernel;
use crate::loopnest::simplify::simplify_kernel;
use crate::loopnest::unroll::{unroll_loops_with, UnrollConfig};
use crate::loopnest::unswitch::unswitch_split_guards;
use crate::loopnest::validate::validate;
use llvm::{Context, TargetMachine};
use runtime::{RunCtx, Scratch, STATUS_ABORTED, STATUS_NO_MEMORY, STATUS_OK, STATUS_PANICKED};
use std::cell::RefCell;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use translate::{Fx, Tr};

pub use cache::KernelCache;

#[derive(Debug)]
pub enum CodegenError {
    Invalid(String),
    Unroll(String),
    /// Accesses the bounds checker could not prove; the kernel is refused.
    Unproven(Vec<UnprovenAccess>),
    Cost(String),
    Llvm(String),
}

impl std::fmt::Display for CodegenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodegenError::Invalid(m) => write!(f, "invalid kernel: {m}"),
            CodegenError::Unroll(m) => write!(f, "unroll failed: {m}"),
            CodegenError::Unproven(v) => {
                write!(f, "{} access(es) not provably in bounds", v.len())?;
                for a in v.iter().take(5) {
                    write!(f, "; {a}")?;
                }
                Ok(())
            }
            CodegenError::Cost(m) => write!(f, "kernel rejected by cost guard: {m}"),
            CodegenError::Llvm(m) => write!(f, "LLVM error: {m}"),
        }
    }
}
impl std::error::Error for CodegenError {}

/// ttdb's LLVM pass pipeline: the function passes that matter for loop nests whose
/// vectorization and unrolling the schedule already made explicit (SROA, CSE, instcombine,
/// LICM after loop rotation, induction-variable simplification, GVN, dead-store elimination),
/// then LLVM's loop and SLP vectorizers for loops the schedule left scalar. Against
/// `default<O3>` on the best corpus records of 32 workloads (NCHWc / NHWC convs, depthwise,
/// dense, batch_matmul, softmax, reductions; `cargo bench --bench pipeline`): kernel time
/// geomean 0.96x, median 1.0x; build time 0.78x, which is most of a search's trials/s.
///
/// `instcombine` named in a textual pipeline verifies that it reached a fixpoint in one
/// iteration and aborts the process when it did not (LLVM 19); the default pipelines use
/// `no-verify-fixpoint`, and so does this one.
pub const KERNEL_PIPELINE: &str = "function(sroa,early-cse<memssa>,simplifycfg,\
instcombine<no-verify-fixpoint>,loop-mssa(loop-rotate,licm),indvars,gvn,sccp,\
instcombine<no-verify-fixpoint>,dse,loop-mssa(licm),simplifycfg,instcombine<no-verify-fixpoint>,\
loop-vectorize,slp-vectorizer,instcombine<no-verify-fixpoint>,simplifycfg)";

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CodegenOptions {
    /// Insert abort-flag checks at non-innermost loop iterations (needed for timeouts).
    pub abort_checks: bool,
    /// Allow re-association of float ops (off by default: TVM only contracts to FMA).
    pub reassociate: bool,
    pub limits: CostLimits,
    /// Keep the unoptimised LLVM IR text in the compiled kernel (debugging).
    pub keep_ir: bool,
    /// New-pass-manager pipeline ([`KERNEL_PIPELINE`]; the CLI's `--llvm-pipeline` overrides
    /// it, e.g. `default<O3>`, through `crate::target::Target`).
    pub pipeline: String,
    /// Let the pipeline's loop and SLP vectorizers work (on top of ttdb's explicit
    /// vectorization).
    pub llvm_vectorizers: bool,
    /// Lanes per emitted vector body; longer vectorized loops are chunked. 0 = two native
    /// fp32 vectors (16 with AVX2, 32 with AVX-512).
    pub max_vector_lanes: i64,
    /// Back-end (instruction selection, scheduling) at O3 instead of O2.
    pub aggressive_backend: bool,
    /// Let LLVM unroll loops on its own (on top of the schedule's explicit unrolling). Off by
    /// default: it is the dominant compile-time cost (≈2× on a conv kernel) and measured
    /// run-time differences on the conv/GEMM fixtures were within noise; the schedule's
    /// `auto_unroll_max_step` / unroll annotations are applied explicitly either way.
    pub llvm_unroll: bool,
    /// A lane-varying `if` in a vector body first tests whether all lanes (or none) take an
    /// arm, and runs full tiles unmasked (`mask.rs`). Off only to measure what it buys.
    pub full_tile_fast_path: bool,
    /// f32 exp, sigmoid, tanh and erf as vector polynomials (`vmath.rs`) rather than libm
    /// calls, one per lane. Off only to measure what it buys (`cargo bench --bench vmath`).
    #[serde(default = "yes")]
    pub vector_math: bool,
}

fn yes() -> bool {
    true
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            abort_checks: true,
            reassociate: false,
            limits: CostLimits::default(),
            keep_ir: false,
            pipeline: KERNEL_PIPELINE.into(),
            llvm_vectorizers: true,
            max_vector_lanes: 0,
            aggressive_backend: true,
            llvm_unroll: false,
            full_tile_fast_path: true,
            vector_math: true,
        }
    }
}

/// Statistics about one compilation.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    pub vector_loops: usize,
    pub scalarized_loops: usize,
    pub top_scratch_bytes: i64,
    pub cost: Option<CostEstimate>,
    /// Unroll, simplify, bound proof and cost check of the loop nest ([`prepare`]).
    pub prepare_time: Duration,
    /// Loop nest to LLVM IR, with the module's verification.
    pub translate_time: Duration,
    pub optimize_time: Duration,
    /// Instruction selection + object emission.
    pub emit_time: Duration,
    pub jit_time: Duration,
}

/// Options for one execution.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Worker threads for the parallel loop; `None` = all cores.
    pub threads: Option<usize>,
    /// Abort the kernel after this long (it returns `RunError::TimedOut`).
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    BadArguments(String),
    TimedOut,
    OutOfMemory,
    /// The runtime panicked in a parallel launch (the message): an error of this run, the
    /// pool stays usable.
    Panicked(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::BadArguments(m) => write!(f, "bad arguments: {m}"),
            RunError::TimedOut => write!(f, "kernel timed out"),
            RunError::OutOfMemory => write!(f, "kernel scratch allocation failed"),
            RunError::Panicked(m) => write!(f, "kernel runtime panicked: {m}"),
        }
    }
}
impl std::error::Error for RunError {}

type KernelFn =
    unsafe extern "C" fn(*const *mut u8, *mut u8, *const AtomicI32, *const RunCtx) -> i32;

/// A JIT-compiled kernel. Dropping it frees its machine code.
pub struct CompiledKernel {
    pub kernel: Kernel,
    pub stats: CompileStats,
    pub ir: Option<String>,
    entry: KernelFn,
    scratch_bytes: usize,
    scratch: Mutex<Option<Scratch>>,
    _code: jit::JitCode,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.kernel.name)
            .finish()
    }
}

impl CompiledKernel {
    /// Run on `bufs` (one per parameter, ABI order; dtypes and sizes are checked).
    pub fn run(&self, bufs: &mut [BufferData], opts: &RunOptions) -> Result<(), RunError> {
        check_arguments(&self.kernel, bufs).map_err(RunError::BadArguments)?;
        let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        // SAFETY: the buffers match the parameters (checked above) and are distinct `&mut`
        // borrows, so none aliases another.
        unsafe { self.run_on_pointers(&ptrs, opts) }
    }

    /// Run on raw buffer pointers, one per parameter in ABI order: what a model runner
    /// calls on its arena, weights and caller-owned buffers, without copying them.
    ///
    /// # Safety
    /// `ptrs[i]` must point to at least `params[i].num_elements()` elements of
    /// `params[i].dtype`, valid for the whole call; a buffer the kernel writes (its output)
    /// must not overlap any other argument. Read-only arguments may share memory.
    pub unsafe fn run_on_pointers(
        &self,
        ptrs: &[*mut u8],
        opts: &RunOptions,
    ) -> Result<(), RunError> {
        if ptrs.len() != self.kernel.params.len() {
            return Err(RunError::BadArguments(format!(
                "kernel takes {} buffers, got {}",
                self.kernel.params.len(),
                ptrs.len()
            )));
        }
        let abort = Arc::new(AtomicI32::new(0));
        let threads = opts.threads.unwrap_or_else(runtime::default_threads).max(1);
        let ctx = RunCtx {
            pool: runtime::pool(threads),
            threads,
            panic: Mutex::new(None),
        };
        let _guard = opts
            .timeout
            .map(|t| runtime::arm_watchdog(Instant::now() + t, abort.clone()));
        let mut cached = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if cached.is_none() {
            *cached = Some(Scratch::new(self.scratch_bytes).ok_or(RunError::OutOfMemory)?);
        }
        let scratch = cached.as_ref().unwrap().ptr();
        // SAFETY: `entry` was compiled from `self.kernel`, whose every access the bounds checker
        // proved inside the parameter shapes; the caller guarantees `ptrs` point to buffers of
        // those shapes and dtypes and that the written one aliases nothing, so the noalias
        // assumptions hold; scratch is at least `scratch_bytes` long; `abort` and `ctx` outlive
        // the call, which blocks until all parallel chunks are done.
        let status = unsafe { (self.entry)(ptrs.as_ptr(), scratch, Arc::as_ptr(&abort), &ctx) };
        match status {
            STATUS_OK => Ok(()),
            STATUS_ABORTED => Err(RunError::TimedOut),
            STATUS_NO_MEMORY => Err(RunError::OutOfMemory),
            STATUS_PANICKED => Err(RunError::Panicked(
                ctx.panic
                    .into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_default(),
            )),
            s => Err(RunError::BadArguments(format!(
                "unexpected kernel status {s}"
            ))),
        }
    }
}

thread_local! {
    static TM: RefCell<[Option<TargetMachine>; 2]> = const { RefCell::new([None, None]) };
}

static KERNEL_ID: AtomicUsize = AtomicUsize::new(0);

/// `(cpu, features)` the code is generated for (part of cache keys).
pub fn target_id() -> (String, String) {
    llvm::init_native();
    llvm::host_cpu()
}

fn prefer_vector_width(features: &str) -> &'static str {
    if features.split(',').any(|f| f == "+avx512f") {
        "512"
    } else if features.split(',').any(|f| f == "+avx") {
        "256"
    } else {
        "128"
    }
}

/// Prepare a kernel for codegen: validate, give full tiles a copy without split guards,
/// unroll, simplify, prove bounds, check cost. When the copy makes the kernel fail a later
/// step (the unroll budget, a bound the checker cannot prove), the kernel as it was is
/// prepared instead.
pub fn prepare(k: &Kernel, opts: &CodegenOptions) -> Result<(Kernel, CostEstimate), CodegenError> {
    validate(k).map_err(|e| CodegenError::Invalid(e.0))?;
    let unswitched = unswitch_split_guards(k);
    if unswitched != *k {
        if let Ok(prepared) = prepare_valid(&unswitched, opts) {
            return Ok(prepared);
        }
    }
    prepare_valid(k, opts)
}

fn prepare_valid(
    k: &Kernel,
    opts: &CodegenOptions,
) -> Result<(Kernel, CostEstimate), CodegenError> {
    let cfg = UnrollConfig {
        max_nodes: opts.limits.max_stmt_nodes,
        ..UnrollConfig::default()
    };
    let k = unroll_loops_with(k, cfg).map_err(|e| CodegenError::Unroll(e.to_string()))?;
    let k = simplify_kernel(&k);
    let unproven = check_bounds(&k).map_err(|e| CodegenError::Invalid(e.0))?;
    if !unproven.is_empty() {
        return Err(CodegenError::Unproven(unproven));
    }
    let cost = check_cost(&k, &opts.limits).map_err(CodegenError::Cost)?;
    Ok((k, cost))
}

/// Compile a kernel to machine code.
pub fn compile(k: &Kernel, opts: &CodegenOptions) -> Result<CompiledKernel, CodegenError> {
    let t0 = Instant::now();
    let (prepared, cost) = prepare(k, opts)?;
    let prepare_time = t0.elapsed();
    TM.with(|cell| {
        let mut slots = cell.borrow_mut();
        let slot = &mut slots[opts.aggressive_backend as usize];
        if slot.is_none() {
            *slot = Some(
                TargetMachine::host_with(opts.aggressive_backend).map_err(CodegenError::Llvm)?,
            );
        }
        let tm = slot.as_ref().unwrap();
        compile_prepared(k, &prepared, cost, tm, opts, prepare_time)
    })
}

/// A kernel's machine code, before it is linked: what the JIT loads, or what `ttdb build`
/// links into a shared library.
struct Emitted {
    obj: llvm::MemoryBuffer,
    stats: CompileStats,
    ir: Option<String>,
    top_scratch: usize,
}

/// A kernel compiled ahead of time: a relocatable object defining `symbol`, the entry
/// `i32 symbol(ptr bufs, ptr scratch, ptr abort, ptr rtctx)` (runtime.rs's ABI), which calls
/// `ttdb_parallel_for` and libm functions.
pub struct KernelObject {
    pub symbol: String,
    pub object: Vec<u8>,
    /// The top-level scratch block the entry needs (64-byte aligned).
    pub scratch_bytes: usize,
}

/// Compiles `k` to an object for the host ISA, with its entry named `symbol` (a C
/// identifier unique in the library it goes into).
pub fn compile_object(
    k: &Kernel,
    opts: &CodegenOptions,
    symbol: &str,
) -> Result<KernelObject, CodegenError> {
    if symbol.is_empty()
        || !symbol
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        || symbol.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(CodegenError::Invalid(format!(
            "`{symbol}` is not a C identifier"
        )));
    }
    let t0 = Instant::now();
    let (prepared, cost) = prepare(k, opts)?;
    let tm =
        TargetMachine::host_for_library(opts.aggressive_backend).map_err(CodegenError::Llvm)?;
    let e = emit(&prepared, cost, &tm, opts, t0.elapsed(), symbol)?;
    // SAFETY: a live LLVM memory buffer of `len()` bytes, copied before it is dropped.
    let object = unsafe {
        std::slice::from_raw_parts(
            llvm_sys::core::LLVMGetBufferStart(e.obj.raw) as *const u8,
            e.obj.len(),
        )
    }
    .to_vec();
    Ok(KernelObject {
        symbol: symbol.to_string(),
        object,
        scratch_bytes: e.top_scratch,
    })
}

fn compile_prepared(
    original: &Kernel,
    k: &Kernel,
    cost: CostEstimate,
    tm: &TargetMachine,
    opts: &CodegenOptions,
    prepare_time: Duration,
) -> Result<CompiledKernel, CodegenError> {
    let id = KERNEL_ID.fetch_add(1, Ordering::Relaxed);
    let clean: String = k
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect();
    let prefix = format!("ttdb_k{id}_{clean}");
    let e = emit(k, cost, tm, opts, prepare_time, &prefix)?;
    let t2 = Instant::now();
    let code = jit::add_object(e.obj, std::slice::from_ref(&prefix), runtime::symbols)
        .map_err(CodegenError::Llvm)?;
    let mut stats = e.stats;
    stats.jit_time = t2.elapsed();
    // SAFETY: the symbol is the exported wrapper `emit` defined with exactly this signature.
    let entry: KernelFn = unsafe { std::mem::transmute::<usize, KernelFn>(code.addresses[0]) };
    Ok(CompiledKernel {
        kernel: original.clone(),
        stats,
        ir: e.ir,
        entry,
        scratch_bytes: e.top_scratch,
        scratch: Mutex::new(None),
        _code: code,
    })
}

/// Translates prepared kernel `k` to LLVM IR with its entry named `prefix`, optimizes it and
/// emits an object.
fn emit(
    k: &Kernel,
    cost: CostEstimate,
    tm: &TargetMachine,
    opts: &CodegenOptions,
    prepare_time: Duration,
    prefix: &str,
) -> Result<Emitted, CodegenError> {
    let t0 = Instant::now();
    let prefix = prefix.to_string();
    let cx = Context::new();
    let m = cx.module(&prefix);
    m.set_target(tm);
    let mut fm = llvm::FM_CONTRACT;
    if opts.reassociate {
        fm |= llvm::FM_REASSOC | llvm::FM_NSZ;
    }
    let fn_attrs = vec![
        ("target-cpu".to_string(), tm.cpu.clone()),
        ("target-features".to_string(), tm.features.clone()),
        (
            "prefer-vector-width".to_string(),
            prefer_vector_width(&tm.features).to_string(),
        ),
    ];
    let dummy = cx.ptr().null();
    let mut tr = Tr {
        cx: &cx,
        m: &m,
        b: cx.builder(),
        fm_flags: fm,
        bufs: Vec::new(),
        vars: Vec::new(),
        fx: Fx {
            func: dummy,
            entry: llvm::Block::placeholder(),
            abort_bb: llvm::Block::placeholder(),
            abort_ptr: dummy,
            scratch: dummy,
            scratch_used: 0,
            rtctx: None,
        },
        vec: None,
        cache: vec![Default::default()],
        prefix: prefix.clone(),
        fn_count: 0,
        fn_attrs,
        abort_checks: opts.abort_checks,
        full_tile_fast_path: opts.full_tile_fast_path,
        vector_math: opts.vector_math,
        max_chunk: if opts.max_vector_lanes > 0 {
            opts.max_vector_lanes
        } else {
            2 * prefer_vector_width(&tm.features)
                .parse::<i64>()
                .unwrap_or(128)
                / 32
        },
        vector_loops: 0,
        scalarized_loops: 0,
    };
    let (ptr_t, i32t, i64t) = (cx.ptr(), cx.i32(), cx.i64());
    let np = k.params.len();
    // impl(noalias p0..pn, scratch, abort, rtctx)
    let mut params = vec![ptr_t; np];
    params.extend([ptr_t, ptr_t, ptr_t]);
    let impl_ty = cx.fn_type(i32t, &params);
    let f = tr.begin_function(&format!("{prefix}_impl"), impl_ty, true);
    let start = tr.b.current_block();
    for (i, p) in k.params.iter().enumerate() {
        cx.enum_attr(f, i as u32 + 1, "noalias");
        tr.bufs.push(translate::BufSlot {
            name: p.name.clone(),
            ptr: f.param(i as u32),
            decl: p.clone(),
        });
    }
    tr.fx.scratch = f.param(np as u32);
    tr.fx.abort_ptr = f.param(np as u32 + 1);
    tr.fx.rtctx = Some(f.param(np as u32 + 2));
    tr.stmt(&k.body).map_err(CodegenError::Llvm)?;
    tr.end_function(start);
    let top_scratch = tr.fx.scratch_used;
    // Exported wrapper: kernel(ptr bufs, ptr scratch, ptr abort, ptr rtctx)
    let wrap_ty = cx.fn_type(i32t, &[ptr_t, ptr_t, ptr_t, ptr_t]);
    let w = tr.begin_function(&prefix, wrap_ty, false);
    let wstart = tr.b.current_block();
    let mut args = Vec::new();
    for i in 0..np {
        let at = tr.b.gep(ptr_t, w.param(0), i64t.const_int(i as i64));
        args.push(tr.b.load(ptr_t, at, 8));
    }
    args.extend([w.param(1), w.param(2), w.param(3)]);
    let st = tr.b.call(impl_ty, f, &args);
    tr.b.ret(st);
    let cur = tr.b.current_block();
    tr.b.position_at_end(tr.fx.entry);
    tr.b.br(wstart);
    tr.b.position_at_end(cur);
    let (vector_loops, scalarized_loops) = (tr.vector_loops, tr.scalarized_loops);
    drop(tr);

    let ir = opts.keep_ir.then(|| m.print());
    m.verify()
        .map_err(|e| CodegenError::Llvm(format!("module verification failed: {e}")))?;
    let t1 = Instant::now();
    let size = m.largest_function();
    if size > opts.limits.max_ir_instructions {
        return Err(CodegenError::Cost(format!(
            "{size} LLVM instructions in one function (limit {}): too long to compile",
            opts.limits.max_ir_instructions
        )));
    }
    m.run_passes(&opts.pipeline, tm, opts.llvm_vectorizers, opts.llvm_unroll)
        .map_err(CodegenError::Llvm)?;
    let t15 = Instant::now();
    let obj = tm.emit_object(&m).map_err(CodegenError::Llvm)?;
    let t2 = Instant::now();
    Ok(Emitted {
        obj,
        stats: CompileStats {
            vector_loops,
            scalarized_loops,
            top_scratch_bytes: top_scratch,
            cost: Some(cost),
            prepare_time,
            translate_time: t1 - t0,
            optimize_time: t15 - t1,
            emit_time: t2 - t15,
            jit_time: Duration::ZERO,
        },
        ir,
        top_scratch: top_scratch as usize,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vector_tests;
#[cfg(test)]
mod vmath_tests;
