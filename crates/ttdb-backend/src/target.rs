//! The machine ttdb compiles for and measures on, as one value.
//!
//! The binary builds it once ([`Target::detect`] plus its flags: `--pretend-isa`,
//! `--llvm-pipeline`, `--profile`, ...) and options structs carry it down, so no layer
//! re-detects the host or reads the environment, and a test can play another machine (an
//! AVX2 host, a 4-lane target) by building its own.
use crate::codegen::{CodegenOptions, KERNEL_PIPELINE};
use ttdb_format::host::HostFingerprint;

/// What the measuring code prints about where time goes (`--profile`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Profile {
    #[default]
    Off,
    /// One line per measured batch: where its wall time went.
    Batches,
    /// Also each build's steps as it starts and its time when done.
    Builds,
}

impl Profile {
    /// `--profile` / `TTDB_PROFILE`: empty or `0` off, `builds` per build, anything else per
    /// batch.
    pub fn parse(s: &str) -> Profile {
        match s {
            "" | "0" | "off" => Profile::Off,
            "builds" => Profile::Builds,
            _ => Profile::Batches,
        }
    }
}

/// LLVM settings for experiments (the defaults are what ttdb measured best).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CodegenSettings {
    /// The new-pass-manager pipeline ([`KERNEL_PIPELINE`], e.g. `default<O3>` instead).
    pub pipeline: String,
    /// LLVM's loop and SLP vectorizers on top of ttdb's explicit vectorization.
    pub llvm_vectorizers: bool,
    /// The back end at O3 (else O2).
    pub aggressive_backend: bool,
    /// LLVM's own loop unrolling.
    pub llvm_unroll: bool,
    /// exp, sigmoid, tanh and erf as vector polynomials (else a libm call per lane).
    pub vector_math: bool,
}

impl Default for CodegenSettings {
    fn default() -> Self {
        CodegenSettings {
            pipeline: KERNEL_PIPELINE.into(),
            llvm_vectorizers: true,
            aggressive_backend: true,
            llvm_unroll: false,
            vector_math: true,
        }
    }
}

/// The machine: its fingerprint (CPU, ISA flags, LLVM cpu, cores), the codegen settings and
/// the profiling switch.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub host: HostFingerprint,
    pub codegen: CodegenSettings,
    pub profile: Profile,
    /// One core's L2 cache in bytes, when the OS says: weights at least this large cannot
    /// stay next to the core through a kernel (`measure::runner::Caches::cold_weights`).
    pub l2_bytes: Option<usize>,
}

/// This machine, as codegen targets it; private so that [`Target::detect`] stays the one place.
fn detect_host() -> HostFingerprint {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (llvm_cpu, llvm_features) = crate::codegen::target_id();
    HostFingerprint::from_cpuinfo(
        &info,
        llvm_cpu,
        llvm_features,
        ttdb_format::host::available_cores(),
    )
}

/// The L2 of CPU 0 from sysfs (Linux), the cache of level 2 that holds data.
fn detect_l2_bytes() -> Option<usize> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8).find_map(|i| {
        let read = |f: &str| std::fs::read_to_string(dir.join(format!("index{i}/{f}"))).ok();
        l2_size(&read("level")?, &read("type")?, &read("size")?)
    })
}

/// A sysfs cache entry's size in bytes when it is a level-2 data (or unified) cache:
/// `size` reads like `2048K` or `1M`.
fn l2_size(level: &str, kind: &str, size: &str) -> Option<usize> {
    if level.trim() != "2" || kind.trim() == "Instruction" {
        return None;
    }
    let size = size.trim();
    let (digits, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    n.checked_mul(scale).filter(|&b| b > 0)
}

impl Target {
    /// This machine with ttdb's default settings: the one place that detects the host.
    pub fn detect() -> Target {
        Target {
            l2_bytes: detect_l2_bytes(),
            ..Target::of(detect_host())
        }
    }

    /// A machine with this fingerprint and default settings (tests play other hosts).
    pub fn of(host: HostFingerprint) -> Target {
        Target {
            host,
            codegen: CodegenSettings::default(),
            profile: Profile::Off,
            l2_bytes: None,
        }
    }

    /// fp32 lanes of the widest vector its ISA has.
    pub fn lanes(&self) -> usize {
        self.host.f32_lanes().max(1) as usize
    }

    /// Cores (threads) its kernels run on.
    pub fn cores(&self) -> usize {
        self.host.cores.max(1)
    }

    /// Codegen options with this target's settings (the rest at their defaults).
    pub fn codegen_options(&self) -> CodegenOptions {
        let s = &self.codegen;
        CodegenOptions {
            pipeline: s.pipeline.clone(),
            llvm_vectorizers: s.llvm_vectorizers,
            aggressive_backend: s.aggressive_backend,
            llvm_unroll: s.llvm_unroll,
            vector_math: s.vector_math,
            ..CodegenOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_l2_size_is_read_from_its_sysfs_entry() {
        assert_eq!(l2_size("2\n", "Unified\n", "2048K\n"), Some(2 << 20));
        assert_eq!(l2_size("2", "Data", "1M"), Some(1 << 20));
        assert_eq!(l2_size("1", "Data", "48K"), None, "an L1");
        assert_eq!(l2_size("2", "Instruction", "1M"), None);
        for bad in [
            "",
            "K",
            "0K",
            "12",
            "3G",
            "-1K",
            "99999999999999999999999K",
            "18446744073709551615K",
        ] {
            assert_eq!(l2_size("2", "Unified", bad), None, "{bad:?}");
        }
    }

    fn host(flags: &[&str], cores: usize) -> HostFingerprint {
        HostFingerprint {
            cpu_model: "test".into(),
            isa_flags: flags.iter().map(|f| f.to_string()).collect(),
            llvm_cpu: "test".into(),
            llvm_features: String::new(),
            cores,
            ttdb_version: "test".into(),
        }
    }

    /// A test plays another machine by building its target, whatever this one is.
    #[test]
    fn a_target_is_the_machine_it_describes() {
        let avx2 = Target::of(host(&["avx", "avx2", "fma"], 4));
        assert_eq!((avx2.lanes(), avx2.cores()), (8, 4));
        let avx512 = Target::of(host(&["avx", "avx2", "avx512f"], 2));
        assert_eq!(avx512.lanes(), 16);
        let sse = Target::of(host(&["sse4_2"], 0));
        assert_eq!((sse.lanes(), sse.cores()), (4, 1));
        let mut o3 = Target::of(host(&[], 1));
        o3.codegen.pipeline = "default<O3>".into();
        o3.codegen.llvm_unroll = true;
        let c = o3.codegen_options();
        assert_eq!((c.pipeline.as_str(), c.llvm_unroll), ("default<O3>", true));
        assert_eq!(Profile::parse("builds"), Profile::Builds);
        assert_eq!(Profile::parse("1"), Profile::Batches);
        assert_eq!(Profile::parse(""), Profile::Off);
    }
}
