//! Timing runner modelled on TVM's `time_evaluator` as used by Ansor: warm-up, then `repeat`
//! measurements, each averaging `number` back-to-back runs where `number` is grown until one
//! measurement lasts at least `min_repeat_ms`. Optionally some arguments leave the caches
//! before every run ([`Caches`]; each run is then timed alone and the eviction is excluded),
//! so a kernel is timed as it runs inside a model.

use crate::codegen::{CompiledKernel, RunError, RunOptions};
use crate::loopnest::data::BufferData;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MeasureOptions {
    pub warmup: usize,
    pub repeat: usize,
    pub min_repeat_ms: u64,
    /// What the caches hold when a run starts.
    #[serde(default)]
    pub caches: Caches,
    pub threads: Option<usize>,
    /// Per-run timeout.
    pub timeout: Option<Duration>,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            warmup: 1,
            repeat: 5,
            min_repeat_ms: 100,
            caches: Caches::Warm,
            threads: None,
            timeout: Some(Duration::from_secs(10)),
        }
    }
}

/// What the caches hold when a timed run starts.
///
/// Inside a model a kernel's input was just written by the kernel before it, but its weights
/// were last read a whole inference ago: when the model's weights exceed the caches, every
/// kernel meets its own from memory. On ResNet-50 (Intel, 2 MB of L2 per core), the kernels
/// with 2-9.4 MB of weights timed with them cold came within 0-17% above their times inside
/// the model (median 2%); timed warm they were 18-36% below (docs/measurements.md,
/// nineteenth session). TVM's flush also evicts the output and every other input, which a
/// model's kernel finds where the kernels before it left them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Caches {
    /// Nothing evicted: back-to-back runs, as TVM times by default.
    #[default]
    Warm,
    /// The kernel's weights evicted before each run when together they take at least
    /// `min_bytes` (a host's per-core L2: smaller weights are timed warm).
    ColdWeights { min_bytes: usize },
    /// Every argument but the first evicted before each run: TVM's `enable_cpu_cache_flush`
    /// (`cache_flush_cpu_non_first_arg`).
    ColdButFirst,
}

impl Caches {
    /// Weights cold when they fill one of `target`'s cores' L2, as inside a model
    /// ([`Caches::ColdWeights`]); 1 MiB when the L2 is unknown.
    pub fn cold_weights(target: &crate::target::Target) -> Caches {
        Caches::ColdWeights {
            min_bytes: target.l2_bytes.unwrap_or(1 << 20),
        }
    }

    /// The arguments to evict before each run, of a kernel whose weights are the arguments
    /// `weights` (indices into `args`).
    pub fn evicted(&self, args: &[BufferData], weights: &[usize]) -> Vec<usize> {
        match *self {
            Caches::Warm => Vec::new(),
            Caches::ColdButFirst => (1..args.len()).collect(),
            Caches::ColdWeights { min_bytes } => {
                let bytes: usize = weights
                    .iter()
                    .filter_map(|&i| args.get(i))
                    .map(|b| b.len() * b.dtype().bytes())
                    .sum();
                if bytes >= min_bytes && bytes > 0 {
                    weights.to_vec()
                } else {
                    Vec::new()
                }
            }
        }
    }
}

#[cfg(test)]
mod caches_tests {
    use super::*;
    use crate::target::Target;
    use ttdb_format::host::HostFingerprint;

    #[test]
    fn cold_weights_are_those_that_fill_the_l2() {
        let mut t = Target::of(HostFingerprint {
            cpu_model: "test".into(),
            isa_flags: vec!["avx2".into()],
            llvm_cpu: "test".into(),
            llvm_features: String::new(),
            cores: 2,
            ttdb_version: "test".into(),
        });
        let cold = |t: &Target| Caches::cold_weights(t);
        assert_eq!(cold(&t), Caches::ColdWeights { min_bytes: 1 << 20 });
        t.l2_bytes = Some(2 << 20);
        assert_eq!(cold(&t), Caches::ColdWeights { min_bytes: 2 << 20 });
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Measurement {
    /// Seconds per run, one entry per repeat.
    pub samples: Vec<f64>,
    pub number: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Relative spread: (max - min) / median.
    pub spread: f64,
}

impl Measurement {
    pub fn from_samples(mut samples: Vec<f64>, number: usize) -> Measurement {
        samples.sort_by(|a, b| a.total_cmp(b));
        let n = samples.len();
        let median = if n == 0 {
            f64::NAN
        } else if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2.0
        };
        let (min, max) = (
            samples.first().copied().unwrap_or(f64::NAN),
            samples.last().copied().unwrap_or(f64::NAN),
        );
        Measurement {
            spread: (max - min) / median,
            samples,
            number,
            median,
            min,
            max,
        }
    }
    /// GFLOP/s for a kernel doing `flops` floating-point operations per run.
    pub fn gflops(&self, flops: f64) -> f64 {
        flops / self.median / 1e9
    }
}

/// Evicts the arguments `cold` (indices into `bufs`) from every cache level.
fn evict(bufs: &[BufferData], cold: &[usize]) {
    #[cfg(target_arch = "x86_64")]
    for b in cold.iter().filter_map(|&i| bufs.get(i)) {
        evict_lines(b.as_ptr(), b.len() * b.dtype().bytes());
    }
    // Without clflush one sweep evicts every argument at once (the warm ones too).
    #[cfg(not(target_arch = "x86_64"))]
    if !cold.is_empty() {
        sweep_caches();
    }
}

#[cfg(target_arch = "x86_64")]
fn evict_lines(p: *const u8, bytes: usize) {
    use std::arch::x86_64::{_mm_clflush, _mm_mfence};
    const LINE: usize = 64;
    // SAFETY: every address flushed lies within the `bytes` bytes of a live buffer
    // (clflush of a line only needs the address to be mapped); SSE2 is baseline on x86_64.
    unsafe {
        let mut off = 0;
        while off < bytes {
            _mm_clflush(p.add(off));
            off += LINE;
        }
        _mm_mfence();
    }
}

/// Sweeps a buffer larger than any last-level cache, which evicts everything.
#[cfg(not(target_arch = "x86_64"))]
fn sweep_caches() {
    use std::sync::OnceLock;
    static BUF: OnceLock<std::sync::Mutex<Vec<u8>>> = OnceLock::new();
    let m = BUF.get_or_init(|| std::sync::Mutex::new(vec![1u8; 64 << 20]));
    let mut b = m.lock().unwrap_or_else(|p| p.into_inner());
    let mut acc = 0u8;
    for i in (0..b.len()).step_by(64) {
        b[i] = b[i].wrapping_add(1);
        acc ^= b[i];
    }
    std::hint::black_box(acc);
}

/// Time a compiled kernel on `bufs`, the arguments `cold` (indices into `bufs`, from
/// [`Caches::evicted`]) evicted before each run; none: back-to-back runs.
pub fn measure(
    k: &CompiledKernel,
    bufs: &mut [BufferData],
    opts: &MeasureOptions,
    cold: &[usize],
) -> Result<Measurement, RunError> {
    let ro = RunOptions {
        threads: opts.threads,
        timeout: opts.timeout,
    };
    for _ in 0..opts.warmup {
        k.run(bufs, &ro)?;
    }
    let min_dur = Duration::from_millis(opts.min_repeat_ms);
    let mut samples = Vec::with_capacity(opts.repeat);
    if !cold.is_empty() {
        for _ in 0..opts.repeat.max(1) {
            let mut total = Duration::ZERO;
            let mut runs = 0;
            while runs == 0 || total < min_dur {
                evict(bufs, cold);
                let t = Instant::now();
                k.run(bufs, &ro)?;
                total += t.elapsed();
                runs += 1;
            }
            samples.push(total.as_secs_f64() / runs as f64);
        }
        return Ok(Measurement::from_samples(samples, 1));
    }
    let mut number = 1usize;
    for _ in 0..opts.repeat.max(1) {
        loop {
            let d = time_runs(k, bufs, &ro, number)?;
            if d >= min_dur || number >= 1 << 20 {
                samples.push(d.as_secs_f64() / number as f64);
                break;
            }
            // Grow like TVM: aim directly at min_repeat_ms with some headroom.
            let per = d.as_secs_f64().max(1e-9) / number as f64;
            number =
                ((min_dur.as_secs_f64() / per * 1.2) as usize).clamp(number + 1, number * 1000);
        }
    }
    Ok(Measurement::from_samples(samples, number))
}

/// One more sample of a kernel whose `number` (runs per sample) an earlier [`measure`] on the
/// same buffers calibrated: `opts.warmup` runs, then `number` runs timed together (no
/// calibration runs, whose cost is otherwise paid again for every sample). With arguments
/// `cold`, one sample of [`measure`] (runs are timed one by one there).
pub fn measure_again(
    k: &CompiledKernel,
    bufs: &mut [BufferData],
    number: usize,
    opts: &MeasureOptions,
    cold: &[usize],
) -> Result<Measurement, RunError> {
    if !cold.is_empty() {
        return measure(
            k,
            bufs,
            &MeasureOptions {
                repeat: 1,
                ..opts.clone()
            },
            cold,
        );
    }
    let ro = RunOptions {
        threads: opts.threads,
        timeout: opts.timeout,
    };
    for _ in 0..opts.warmup {
        k.run(bufs, &ro)?;
    }
    let number = number.max(1);
    let d = time_runs(k, bufs, &ro, number)?;
    Ok(Measurement::from_samples(
        vec![d.as_secs_f64() / number as f64],
        number,
    ))
}

/// The wall time of `number` back-to-back runs (one sample of [`measure`]).
fn time_runs(
    k: &CompiledKernel,
    bufs: &mut [BufferData],
    ro: &RunOptions,
    number: usize,
) -> Result<Duration, RunError> {
    let t = Instant::now();
    for _ in 0..number {
        k.run(bufs, ro)?;
    }
    Ok(t.elapsed())
}
