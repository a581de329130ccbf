//! The fork-join pool that runs a kernel's parallel loops.
//!
//! A kernel launches its parallel loop many times a millisecond when it is small (a
//! MobileNet conv runs in 0.1 ms and may hold two parallel loops). With a general-purpose
//! pool each launch parks the calling thread and wakes a worker through the kernel (futex)
//! and idle workers yield in a loop: on a 2-core machine that was ~16 `sched_yield` and 2-3
//! futex calls per run, noise and overhead of the order of the kernel itself. Here, as in the
//! runtimes of OpenMP and TVM, the calling thread takes part in the loop, and workers spin
//! for a while after a launch before they park, so a kernel run back to back (a timing loop,
//! a model's kernels one after another) costs a few atomic operations per launch.
//!
//! Protocol: a launch publishes a job (its address) and a new generation in `state`;
//! workers join the generation by incrementing its joined count, claim the chunks of their
//! own share (then of the others', once theirs is done) with atomic counters, and leave.
//! When every chunk is claimed the caller closes the generation (no later joins) and waits
//! for the joined workers to leave before the job goes out of scope.
//!
//! Panics: a chunk that panics (on the caller or on a worker) is caught where it runs; the
//! launch stops handing out chunks, every joined worker still leaves, and `run` returns the
//! panic as an error, so the pool stays usable. The close-and-wait is a drop guard, as in
//! rayon's `scope`: whatever unwinds out of a launch, the job outlives every worker using it.
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, Condvar, Mutex};

/// One launch: chunks `0..chunks` of work, run by `run(chunk)`.
pub struct Job<'a> {
    pub chunks: i64,
    pub run: &'a (dyn Fn(i64) + Sync),
}

/// A launch that did not complete: a chunk panicked, with this message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panicked(pub String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a parallel chunk panicked: {}", self.0)
    }
}

/// The job a worker finds: the launch's closure, each thread's share of its chunks, and the
/// first panic.
struct Published<'a> {
    job: &'a Job<'a>,
    shares: Vec<Share>,
    panic: Mutex<Option<String>>,
}

/// The chunks `next..end` of one thread's share of a launch: its owner claims them in
/// order, and a thread done with its own share takes from the others'. A cache line pair
/// each (the adjacent-line prefetcher pulls two), so an owner's claims stay in its own
/// cache until someone steals.
#[repr(align(128))]
struct Share {
    next: AtomicI64,
    end: i64,
}

impl<'a> Published<'a> {
    /// Chunks split into `threads` contiguous shares: thread k (0 the caller, k the k-th
    /// worker to join) starts on share k. So a thread works on the same part of the data
    /// from one launch to the next and from one kernel to the next one that splits its loop
    /// the same way (an elementwise stage after its producer): when the two cores share no
    /// cache (different dies of a server CPU, which a VM's two vCPUs often are), data stays
    /// on the core that wrote it.
    fn new(job: &'a Job<'a>, threads: usize) -> Published<'a> {
        let t = threads.max(1) as i64;
        let shares = (0..t)
            .map(|k| Share {
                next: AtomicI64::new(job.chunks * k / t),
                end: job.chunks * (k + 1) / t,
            })
            .collect();
        Published {
            job,
            shares,
            panic: Mutex::new(None),
        }
    }

    /// Records the first panic and stops the launch (no chunk is handed out after it).
    fn fail(&self, payload: Box<dyn std::any::Any + Send>) {
        for r in &self.shares {
            r.next.store(r.end, Ordering::Relaxed);
        }
        let mut first = self.panic.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| panic_message(&*payload));
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

// `state` = generation << 16 | CLOSED | joined workers.
const CLOSED: u64 = 1 << 15;
const JOINED: u64 = CLOSED - 1;

struct Shared {
    state: AtomicU64,
    job: AtomicPtr<()>,
    /// Workers that joined the current generation and have left it.
    left: AtomicU64,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// The caller of the current launch, once it stopped spinning for its workers: the
    /// worker that leaves last wakes it.
    waiter: Mutex<Option<std::thread::Thread>>,
}

/// Spin iterations (each a `spin_loop` hint: 10-50 ns) before an idle worker parks, about
/// 0.3-1.5 ms: long enough to span the gap between two runs of a kernel, short enough not to
/// hold a core for long once the kernels stop.
const SPIN: u32 = 1 << 15;

/// The spin of idle workers ([`SPIN`], or 0 when [`set_idle_spin`] turned it off).
static IDLE_SPIN: AtomicU32 = AtomicU32::new(SPIN);

/// Whether idle workers spin ([`SPIN`]) before they park, process-wide. Off, every launch
/// wakes its workers through the kernel, as a general-purpose pool does: for ablations of
/// the launch cost (`ttdb --pool-spin 0`).
pub fn set_idle_spin(on: bool) {
    IDLE_SPIN.store(if on { SPIN } else { 0 }, Ordering::Relaxed);
}

/// Spin iterations of a caller waiting for its workers to leave a launch (40-200 us) before
/// it parks until the last one leaves: a worker pre-empted inside its last chunk would
/// otherwise cost the caller a whole time slice of spinning on the core that worker needs.
const WAIT_SPIN: u32 = 1 << 12;

thread_local! {
    /// Inside a launch (as its caller or a worker): a nested parallel loop runs inline.
    static IN_LAUNCH: Cell<bool> = const { Cell::new(false) };
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: usize,
    /// One launch at a time; another thread's launch waits.
    launching: Mutex<()>,
}

impl Pool {
    /// A pool whose launches run on `threads` threads: the caller and `threads - 1` workers.
    pub fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            left: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            waiter: Mutex::new(None),
        });
        let workers = threads.clamp(1, JOINED as usize) - 1;
        for i in 0..workers {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("ttdb-kernel-{i}"))
                .spawn(move || worker(&s))
                .expect("kernel worker thread");
        }
        Pool {
            shared,
            workers,
            launching: Mutex::new(()),
        }
    }

    /// Runs every chunk of `job` once, on the calling thread and the workers; returns when
    /// all are done. Nested in another launch, runs them inline. A chunk that panics stops
    /// the launch (chunks not yet started are skipped) and is returned as the error.
    pub fn run(&self, job: &Job) -> Result<(), Panicked> {
        if self.workers == 0 || job.chunks <= 1 || IN_LAUNCH.with(Cell::get) {
            for c in 0..job.chunks {
                catch_unwind(AssertUnwindSafe(|| (job.run)(c)))
                    .map_err(|p| Panicked(panic_message(&*p)))?;
            }
            return Ok(());
        }
        let _one = self.launching.lock().unwrap_or_else(|p| p.into_inner());
        let s = &*self.shared;
        let published = Published::new(job, self.workers + 1);
        {
            IN_LAUNCH.with(|f| f.set(true));
            let _launch = Launch { shared: s };
            s.left.store(0, Ordering::Relaxed);
            s.job
                .store(&published as *const Published as *mut (), Ordering::Relaxed);
            let generation = (s.state.load(Ordering::Relaxed) >> 16) + 1;
            s.state.store(generation << 16, Ordering::SeqCst);
            if s.sleepers.load(Ordering::SeqCst) > 0 {
                let _g = s.park.lock().unwrap_or_else(|p| p.into_inner());
                s.wake.notify_all();
            }
            take_chunks(&published, 0);
            // `_launch` closes the generation and waits for the joined workers here.
        }
        match published
            .panic
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
        {
            Some(message) => Err(Panicked(message)),
            None => Ok(()),
        }
    }
}

/// Ends a launch when dropped (also while unwinding): closes the generation, so no worker
/// joins any more, and waits for the joined ones to leave; only then may the job go.
struct Launch<'a> {
    shared: &'a Shared,
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        let s = self.shared;
        let joined = s.state.fetch_or(CLOSED, Ordering::SeqCst) & JOINED;
        let mut spins = 0;
        while s.left.load(Ordering::Acquire) < joined {
            if spins < WAIT_SPIN {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            // Park; the last worker to leave unparks (the timeout covers a wake-up that
            // raced with registering).
            *s.waiter.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current());
            if s.left.load(Ordering::Acquire) < joined {
                std::thread::park_timeout(std::time::Duration::from_millis(1));
            }
        }
        *s.waiter.lock().unwrap_or_else(|p| p.into_inner()) = None;
        IN_LAUNCH.with(|f| f.set(false));
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        let _g = self.shared.park.lock().unwrap_or_else(|p| p.into_inner());
        self.shared.wake.notify_all();
    }
}

/// Claims and runs chunks until none is left, its own share (`own`) first, then the
/// others' in turn; a panic is caught here (on whichever thread runs the chunk) and stops
/// the launch.
fn take_chunks(p: &Published, own: usize) {
    let n = p.shares.len();
    for k in 0..n {
        let r = &p.shares[(own + k) % n];
        loop {
            let c = r.next.fetch_add(1, Ordering::Relaxed);
            if c >= r.end {
                break;
            }
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (p.job.run)(c))) {
                p.fail(payload);
                return;
            }
        }
    }
}

fn worker(s: &Shared) {
    IN_LAUNCH.with(|f| f.set(true));
    let mut seen = 0u64;
    loop {
        // Wait for a generation after `seen`: spin, then park.
        let spin_limit = IDLE_SPIN.load(Ordering::Relaxed);
        let mut spins = 0;
        let state = loop {
            let st = s.state.load(Ordering::Acquire);
            if st >> 16 != seen {
                break st;
            }
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            if spins < spin_limit {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let g = s.park.lock().unwrap_or_else(|p| p.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            let g = if s.state.load(Ordering::SeqCst) >> 16 == seen
                && !s.shutdown.load(Ordering::SeqCst)
            {
                s.wake.wait(g).unwrap_or_else(|p| p.into_inner())
            } else {
                g
            };
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(g);
            spins = 0;
        };
        seen = state >> 16;
        if state & CLOSED != 0 {
            continue;
        }
        // Join unless the caller closed the generation in between.
        if s.state
            .compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another worker joined first (retry), or the generation closed or moved on.
            let now = s.state.load(Ordering::Acquire);
            if now >> 16 == seen && now & CLOSED == 0 {
                seen = seen.wrapping_sub(1);
            }
            continue;
        }
        // SAFETY: the caller publishes the job before the generation and does not return
        // (the job stays alive) until every worker that joined has left.
        let p = unsafe { &*(s.job.load(Ordering::Acquire) as *const Published) };
        // The k-th worker to join takes share k (the caller has share 0).
        take_chunks(p, (state & JOINED) as usize + 1);
        s.left.fetch_add(1, Ordering::SeqCst);
        if let Some(caller) = &*s.waiter.lock().unwrap_or_else(|p| p.into_inner()) {
            caller.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts_after(pool: &Pool, chunks: i64, launches: usize) -> Vec<u64> {
        let hits: Vec<AtomicU64> = (0..chunks).map(|_| AtomicU64::new(0)).collect();
        for _ in 0..launches {
            pool.run(&Job {
                chunks,
                run: &|c| {
                    hits[c as usize].fetch_add(1, Ordering::Relaxed);
                },
            })
            .unwrap();
        }
        hits.iter().map(|h| h.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn every_chunk_runs_once_per_launch() {
        for threads in [1, 2, 3, 5] {
            let pool = Pool::new(threads);
            for chunks in [0, 1, 2, 7, 64] {
                let c = counts_after(&pool, chunks, 500);
                assert!(c.iter().all(|&n| n == 500), "{threads} threads: {c:?}");
            }
        }
    }

    #[test]
    fn each_thread_owns_a_contiguous_share_and_then_takes_the_others_in_turn() {
        let order = Mutex::new(Vec::new());
        let job = Job {
            chunks: 10,
            run: &|c| order.lock().unwrap().push(c),
        };
        let p = Published::new(&job, 3);
        let shares: Vec<(i64, i64)> = p
            .shares
            .iter()
            .map(|r| (r.next.load(Ordering::Relaxed), r.end))
            .collect();
        assert_eq!(shares, [(0, 3), (3, 6), (6, 10)]);
        // The second worker to join, alone: its own share, then the caller's, then the
        // first worker's; every chunk once.
        take_chunks(&p, 2);
        assert_eq!(*order.lock().unwrap(), [6, 7, 8, 9, 0, 1, 2, 3, 4, 5]);
        // More threads than chunks: empty shares, each chunk still once.
        let job = Job {
            chunks: 2,
            run: &|c| order.lock().unwrap().push(c),
        };
        order.lock().unwrap().clear();
        take_chunks(&Published::new(&job, 5), 0);
        assert_eq!(*order.lock().unwrap(), [0, 1]);
    }

    #[test]
    fn launches_from_several_threads_and_nested_ones_complete() {
        let pool = Arc::new(Pool::new(3));
        let total = Arc::new(AtomicU64::new(0));
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (pool, total) = (pool.clone(), total.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        pool.run(&Job {
                            chunks: 4,
                            run: &|_| {
                                // A nested launch runs inline on the thread that runs this chunk.
                                pool.run(&Job {
                                    chunks: 3,
                                    run: &|_| {
                                        total.fetch_add(1, Ordering::Relaxed);
                                    },
                                })
                                .unwrap();
                            },
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        assert_eq!(total.load(Ordering::Relaxed), 4 * 200 * 4 * 3);
    }

    /// The ablation's pool (`set_idle_spin(false)`): workers park after every launch and
    /// every launch wakes them; each still runs every chunk once. (nextest runs each test
    /// in a process of its own, so the switch reaches no other test.)
    #[test]
    fn without_idle_spin_workers_park_between_launches_and_every_chunk_runs() {
        set_idle_spin(false);
        let pool = Pool::new(3);
        for chunks in [2, 7, 64] {
            let c = counts_after(&pool, chunks, 300);
            assert!(c.iter().all(|&n| n == 300), "{c:?}");
        }
        // Parked within a moment of the last launch (spinning ones would take ~1 ms).
        let t0 = std::time::Instant::now();
        while pool.shared.sleepers.load(Ordering::SeqCst) < pool.workers {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(5),
                "never parked"
            );
            std::thread::yield_now();
        }
        set_idle_spin(true);
    }

    #[test]
    fn parked_workers_wake_for_the_next_launch() {
        let pool = Pool::new(2);
        assert!(counts_after(&pool, 8, 1).iter().all(|&n| n == 1));
        // Long enough for the worker to stop spinning and park.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let seen = Mutex::new(std::collections::HashSet::new());
        pool.run(&Job {
            chunks: 64,
            run: &|_| {
                std::thread::sleep(std::time::Duration::from_micros(200));
                seen.lock().unwrap().insert(std::thread::current().id());
            },
        })
        .unwrap();
        assert_eq!(seen.lock().unwrap().len(), 2, "the worker took no chunk");
    }

    /// A chunk that panics on the caller, and one that panics on a worker: each launch
    /// returns the panic as an error (instead of unwinding with workers still reading the
    /// job, or spinning forever on a worker that died), and the next launch works.
    #[test]
    fn a_panicking_chunk_is_an_error_and_the_pool_stays_usable() {
        let pool = Pool::new(2);
        let caller = std::thread::current().id();
        for on_caller in [true, false] {
            for _ in 0..20 {
                let started = std::sync::Barrier::new(2);
                let r = pool.run(&Job {
                    chunks: 2,
                    run: &|_| {
                        // Both chunks start before either panics: one runs on each thread.
                        started.wait();
                        if (std::thread::current().id() == caller) == on_caller {
                            panic!("chunk fault");
                        }
                    },
                });
                assert_eq!(
                    r,
                    Err(Panicked("chunk fault".into())),
                    "on caller: {on_caller}"
                );
                assert!(counts_after(&pool, 16, 3).iter().all(|&n| n == 3));
            }
        }
        // Inline (one thread) too.
        let one = Pool::new(1);
        let r = one.run(&Job {
            chunks: 3,
            run: &|c| assert!(c < 1, "chunk {c}"),
        });
        assert!(r.unwrap_err().0.contains("chunk 1"));
        assert!(counts_after(&one, 4, 2).iter().all(|&n| n == 2));
    }

    /// This thread's CPU time.
    fn thread_cpu() -> std::time::Duration {
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, t: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut t = Timespec { sec: 0, nsec: 0 };
        // SAFETY: clock_gettime fills the struct (Linux's timespec on 64-bit targets).
        assert_eq!(unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) }, 0);
        std::time::Duration::new(t.sec as u64, t.nsec as u32)
    }

    /// A caller whose worker is stuck in a long chunk (pre-empted, or slow) does not spin on
    /// the core for the whole wait: it parks until the worker leaves.
    #[test]
    fn a_caller_waiting_for_a_slow_worker_parks() {
        let pool = Pool::new(2);
        let caller = std::thread::current().id();
        let started = std::sync::Barrier::new(2);
        let cpu0 = thread_cpu();
        let t0 = std::time::Instant::now();
        pool.run(&Job {
            chunks: 2,
            run: &|_| {
                started.wait();
                if std::thread::current().id() != caller {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            },
        })
        .unwrap();
        let (wall, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
        assert!(wall >= std::time::Duration::from_millis(200));
        assert!(
            cpu < std::time::Duration::from_millis(50),
            "the caller burnt {cpu:?} of CPU waiting {wall:?} for its worker"
        );
    }
}
