//! Runtime support for generated kernels: parallel launch on persistent thread pools, the
//! abort flag + watchdog used for timeouts, and the libm/erf symbols kernels may call.
//!
//! ABI (all `extern "C"`):
//! * kernel:  `i32 kernel(ptr bufs, ptr scratch, ptr abort, ptr rtctx)`
//! * body:    `i32 body(ptr ptrs, ptr vars, i64 begin, i64 end, ptr scratch, ptr abort)`
//! * launch:  `i32 ttdb_parallel_for(ptr rtctx, ptr body, ptr ptrs, ptr vars, i64 extent,
//!                                   i64 scratch_bytes, ptr abort)`
//!
//! Status codes: 0 = ok, 1 = aborted (abort flag seen), 2 = scratch allocation failed,
//! 3 = a parallel chunk panicked (its message in `RunCtx::panic`).

use super::pool::{Job, Pool};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const STATUS_OK: i32 = 0;
pub const STATUS_ABORTED: i32 = 1;
pub const STATUS_NO_MEMORY: i32 = 2;
pub const STATUS_PANICKED: i32 = 3;

pub type BodyFn =
    unsafe extern "C" fn(*const *mut u8, *const i64, i64, i64, *mut u8, *const AtomicI32) -> i32;

/// Per-run context handed (as an opaque pointer) to the kernel and back to the launcher.
pub struct RunCtx {
    pub pool: Arc<Pool>,
    pub threads: usize,
    /// The first panic of a parallel launch of this run (with `STATUS_PANICKED`).
    pub panic: Mutex<Option<String>>,
}

/// Persistent pools, one per requested thread count (created on first use, never dropped).
pub fn pool(threads: usize) -> Arc<Pool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<Pool>>>> = OnceLock::new();
    let mut m = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    m.entry(threads.max(1))
        .or_insert_with(|| Arc::new(Pool::new(threads.max(1))))
        .clone()
}

pub fn default_threads() -> usize {
    ttdb_format::host::available_cores()
}

/// 64-byte aligned, zeroed scratch memory.
pub struct Scratch {
    ptr: *mut u8,
    layout: Option<std::alloc::Layout>,
}

// SAFETY: plain owned heap memory.
unsafe impl Send for Scratch {}

impl Scratch {
    pub fn new(bytes: usize) -> Option<Scratch> {
        if bytes == 0 {
            return Some(Scratch {
                ptr: std::ptr::null_mut(),
                layout: None,
            });
        }
        let layout = std::alloc::Layout::from_size_align(bytes, 64).ok()?;
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(Scratch {
            ptr,
            layout: Some(layout),
        })
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.layout.map_or(0, |l| l.size())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(l) = self.layout {
            // SAFETY: allocated with this layout in `new`.
            unsafe { std::alloc::dealloc(self.ptr, l) }
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtr<T>(T);
// SAFETY: the pointers are only dereferenced by generated code during the launch, while the
// launching frame (which owns the pointees) is blocked waiting for all chunks.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

thread_local! {
    /// This thread's scratch block for parallel chunks, reused from chunk to chunk and
    /// launch to launch (generated code zeroes each temporary at its `Allocate`; see
    /// `translate.rs`). Taken while a chunk runs, so a nested launch run inline on this
    /// thread gets a block of its own.
    static CHUNK_SCRATCH: std::cell::Cell<Option<Scratch>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with a scratch block of at least `bytes` private to this thread; None when it
/// cannot be allocated.
fn with_chunk_scratch<R>(bytes: usize, f: impl FnOnce(*mut u8) -> R) -> Option<R> {
    let mut block = CHUNK_SCRATCH
        .with(|c| c.take())
        .filter(|s| s.len() >= bytes);
    if block.is_none() {
        block = Some(Scratch::new(bytes)?);
    }
    let block = block.expect("allocated above");
    let r = f(block.ptr());
    CHUNK_SCRATCH.with(|c| c.set(Some(block)));
    Some(r)
}

/// Parallel launch callback registered into the JIT. Splits `[0, extent)` into contiguous
/// chunks (4 per thread) that the calling thread and the pool's workers claim in turn; each
/// chunk runs on its thread's scratch block for the body's large temporaries.
///
/// # Safety
/// Called only by generated code with the pointers it received from `CompiledKernel::run`.
pub unsafe extern "C" fn ttdb_parallel_for(
    ctx: *const RunCtx,
    body: BodyFn,
    ptrs: *const *mut u8,
    vars: *const i64,
    extent: i64,
    scratch_bytes: i64,
    abort: *const AtomicI32,
) -> i32 {
    if extent <= 0 {
        return STATUS_OK;
    }
    // SAFETY: `ctx` points to the RunCtx owned by the running `run` call.
    let ctx = unsafe { &*ctx };
    let threads = ctx.threads as i64;
    // Over-decompose (4 chunks per thread, each thread's share taken by the others once
    // they are done with theirs) so that a thread slowed down by other processes does not
    // stall the whole launch; one thread runs inline.
    let n = if threads <= 1 {
        1
    } else {
        (threads * 4).min(extent)
    };
    let status = AtomicI32::new(STATUS_OK);
    let (ptrs, vars, abort) = (SendPtr(ptrs), SendPtr(vars), SendPtr(abort));
    let run_chunk = |c: i64| {
        // In i128: `extent * c` overflows i64 for extents near its range.
        let bound = |c: i64| (extent as i128 * c as i128 / n as i128) as i64;
        let (begin, end) = (bound(c), bound(c + 1));
        let (p, v, a) = (ptrs, vars, abort);
        // SAFETY: generated body with the ABI above; all pointers are live for the launch;
        // the scratch block is private to this thread for the duration of the call.
        let r = with_chunk_scratch(scratch_bytes.max(0) as usize, |s| unsafe {
            body(p.0, v.0, begin, end, s, a.0)
        })
        .unwrap_or(STATUS_NO_MEMORY);
        if r != STATUS_OK {
            status.fetch_max(r, Ordering::Relaxed);
        }
    };
    let launched = ctx.pool.run(&Job {
        chunks: n,
        run: &run_chunk,
    });
    if let Err(p) = launched {
        let mut first = ctx.panic.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(p.0);
        return STATUS_PANICKED;
    }
    status.load(Ordering::Relaxed)
}

// ----- watchdog ---------------------------------------------------------------------------------

struct WatchState {
    next_id: u64,
    entries: Vec<(u64, Instant, Arc<AtomicI32>)>,
    /// When the watchdog thread wakes next: a later deadline needs no wake-up now (it is
    /// seen then), so a kernel run back to back costs no thread switch.
    wakes_at: Option<Instant>,
}

struct Watchdog {
    state: Mutex<WatchState>,
    cv: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<&'static Watchdog> = OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Watchdog = Box::leak(Box::new(Watchdog {
            state: Mutex::new(WatchState {
                next_id: 0,
                entries: Vec::new(),
                wakes_at: None,
            }),
            cv: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("ttdb-watchdog".into())
            .spawn(move || loop {
                let mut st = w.state.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                st.entries.retain(|(_, deadline, flag)| {
                    if *deadline <= now {
                        flag.store(STATUS_ABORTED, Ordering::Relaxed);
                        false
                    } else {
                        true
                    }
                });
                let wait = st
                    .entries
                    .iter()
                    .map(|(_, d, _)| d.saturating_duration_since(now))
                    .min()
                    .unwrap_or(Duration::from_secs(3600));
                st.wakes_at = now.checked_add(wait);
                let _unused =
                    w.cv.wait_timeout(st, wait)
                        .unwrap_or_else(|p| p.into_inner());
            })
            .expect("watchdog thread");
        w
    })
}

/// Sets `flag` to `STATUS_ABORTED` at `deadline` unless dropped first.
pub struct WatchGuard {
    id: u64,
}

pub fn arm_watchdog(deadline: Instant, flag: Arc<AtomicI32>) -> WatchGuard {
    let w = watchdog();
    let mut st = w.state.lock().unwrap_or_else(|p| p.into_inner());
    let id = st.next_id;
    st.next_id += 1;
    st.entries.push((id, deadline, flag));
    if st.wakes_at.is_none_or(|at| deadline < at) {
        w.cv.notify_all();
    }
    WatchGuard { id }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let w = watchdog();
        let mut st = w.state.lock().unwrap_or_else(|p| p.into_inner());
        st.entries.retain(|(id, _, _)| *id != self.id);
    }
}

// ----- math symbols -----------------------------------------------------------------------------

extern "C" fn rt_expf(x: f32) -> f32 {
    x.exp()
}
extern "C" fn rt_logf(x: f32) -> f32 {
    x.ln()
}
extern "C" fn rt_tanhf(x: f32) -> f32 {
    x.tanh()
}
extern "C" fn rt_powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}

extern "C" fn rt_floorf(x: f32) -> f32 {
    x.floor()
}
extern "C" fn rt_ceilf(x: f32) -> f32 {
    x.ceil()
}
extern "C" fn rt_roundevenf(x: f32) -> f32 {
    x.round_ties_even()
}
extern "C" fn rt_fmaf(x: f32, y: f32, z: f32) -> f32 {
    x.mul_add(y, z)
}
extern "C" fn rt_sqrtf(x: f32) -> f32 {
    x.sqrt()
}
extern "C" fn rt_exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn rt_log(x: f64) -> f64 {
    x.ln()
}
extern "C" fn rt_tanh(x: f64) -> f64 {
    x.tanh()
}
extern "C" fn rt_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}

extern "C" fn rt_floor(x: f64) -> f64 {
    x.floor()
}
extern "C" fn rt_ceil(x: f64) -> f64 {
    x.ceil()
}
extern "C" fn rt_roundeven(x: f64) -> f64 {
    x.round_ties_even()
}
extern "C" fn rt_fma(x: f64, y: f64, z: f64) -> f64 {
    x.mul_add(y, z)
}
extern "C" fn rt_sqrt(x: f64) -> f64 {
    x.sqrt()
}

extern "C" {
    // libm's, the functions TVM's kernels call for tir.erf
    fn erff(x: f32) -> f32;
    fn erf(x: f64) -> f64;
    fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8;
    fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
    fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
}

/// Every symbol generated code may reference.
pub fn symbols() -> Vec<(&'static str, usize)> {
    vec![
        ("ttdb_parallel_for", ttdb_parallel_for as *const () as usize),
        ("erff", erff as *const () as usize),
        ("erf", erf as *const () as usize),
        ("expf", rt_expf as *const () as usize),
        ("logf", rt_logf as *const () as usize),
        ("tanhf", rt_tanhf as *const () as usize),
        ("powf", rt_powf as *const () as usize),
        ("floorf", rt_floorf as *const () as usize),
        ("ceilf", rt_ceilf as *const () as usize),
        ("roundevenf", rt_roundevenf as *const () as usize),
        ("fmaf", rt_fmaf as *const () as usize),
        ("sqrtf", rt_sqrtf as *const () as usize),
        ("exp", rt_exp as *const () as usize),
        ("log", rt_log as *const () as usize),
        ("tanh", rt_tanh as *const () as usize),
        ("pow", rt_pow as *const () as usize),
        ("floor", rt_floor as *const () as usize),
        ("ceil", rt_ceil as *const () as usize),
        ("roundeven", rt_roundeven as *const () as usize),
        ("fma", rt_fma as *const () as usize),
        ("sqrt", rt_sqrt as *const () as usize),
        ("memset", memset as *const () as usize),
        ("memcpy", memcpy as *const () as usize),
        ("memmove", memmove as *const () as usize),
    ]
}
