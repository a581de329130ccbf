//! Host fingerprint: what a measurement was taken on.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFingerprint {
    /// `model name` from /proc/cpuinfo (or "unknown").
    pub cpu_model: String,
    /// ISA flags relevant to codegen (subset of /proc/cpuinfo flags), sorted.
    pub isa_flags: Vec<String>,
    /// LLVM's host CPU name and feature string (what kernels are compiled for).
    pub llvm_cpu: String,
    pub llvm_features: String,
    /// Logical cores available to this process.
    pub cores: usize,
    pub ttdb_version: String,
}

const RELEVANT: &[&str] = &[
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "neon",
    "asimd",
    "sve",
];

impl HostFingerprint {
    pub fn detect() -> HostFingerprint {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let cpu_model = field("model name").unwrap_or_else(|| "unknown".into());
        let flags = field("flags")
            .or_else(|| field("Features"))
            .unwrap_or_default();
        let mut isa_flags: Vec<String> = flags
            .split_whitespace()
            .filter(|f| RELEVANT.contains(f))
            .map(|s| s.to_string())
            .collect();
        isa_flags.sort();
        isa_flags.dedup();
        let (llvm_cpu, llvm_features) = crate::codegen::target_id();
        HostFingerprint {
            cpu_model,
            isa_flags,
            llvm_cpu,
            llvm_features,
            cores: crate::codegen::runtime::default_threads(),
            ttdb_version: crate::version().to_string(),
        }
    }

    pub fn has(&self, flag: &str) -> bool {
        self.isa_flags.iter().any(|f| f == flag)
    }

    /// Widest fp32 SIMD width in lanes this host supports.
    pub fn f32_lanes(&self) -> u32 {
        if self.has("avx512f") {
            16
        } else if self.has("avx") {
            8
        } else {
            4
        }
    }
}
