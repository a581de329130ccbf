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
//! workers join the generation by incrementing its joined count, claim chunks with an atomic
//! counter, and leave. When every chunk is claimed the caller closes the generation (no
//! later joins) and waits for the joined workers to leave before the job goes out of scope.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// One launch: chunks `0..chunks` of work, run by `run(chunk)`.
pub struct Job<'a> {
    pub chunks: i64,
    pub run: &'a (dyn Fn(i64) + Sync),
}

/// The job a worker finds: the launch's closure and its chunk counter.
struct Published<'a> {
    job: &'a Job<'a>,
    next: AtomicI64,
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
}

/// Spin iterations (each a `spin_loop` hint: 10-50 ns) before an idle worker parks, about
/// 0.3-1.5 ms: long enough to span the gap between two runs of a kernel, short enough not to
/// hold a core for long once the kernels stop.
const SPIN: u32 = 1 << 15;

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
    /// all are done. Nested in another launch, runs them inline.
    pub fn run(&self, job: &Job) {
        if self.workers == 0 || job.chunks <= 1 || IN_LAUNCH.with(Cell::get) {
            (0..job.chunks).for_each(|c| (job.run)(c));
            return;
        }
        let _one = self.launching.lock().unwrap_or_else(|p| p.into_inner());
        IN_LAUNCH.with(|f| f.set(true));
        let s = &*self.shared;
        let published = Published {
            job,
            next: AtomicI64::new(0),
        };
        s.left.store(0, Ordering::Relaxed);
        s.job
            .store(&published as *const Published as *mut (), Ordering::Relaxed);
        let generation = (s.state.load(Ordering::Relaxed) >> 16) + 1;
        s.state.store(generation << 16, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.park.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        take_chunks(&published);
        // Close the generation: no worker joins any more; wait for the joined to leave.
        let joined = s.state.fetch_or(CLOSED, Ordering::SeqCst) & JOINED;
        while s.left.load(Ordering::Acquire) < joined {
            std::hint::spin_loop();
        }
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

fn take_chunks(p: &Published) {
    loop {
        let c = p.next.fetch_add(1, Ordering::Relaxed);
        if c >= p.job.chunks {
            return;
        }
        (p.job.run)(c);
    }
}

fn worker(s: &Shared) {
    IN_LAUNCH.with(|f| f.set(true));
    let mut seen = 0u64;
    loop {
        // Wait for a generation after `seen`: spin, then park.
        let mut spins = 0;
        let state = loop {
            let st = s.state.load(Ordering::Acquire);
            if st >> 16 != seen {
                break st;
            }
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            if spins < SPIN {
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
        take_chunks(p);
        s.left.fetch_add(1, Ordering::Release);
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
            });
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
                                });
                            },
                        });
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        assert_eq!(total.load(Ordering::Relaxed), 4 * 200 * 4 * 3);
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
        });
        assert_eq!(seen.lock().unwrap().len(), 2, "the worker took no chunk");
    }
}
