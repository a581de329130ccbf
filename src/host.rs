//! The machine a schedule was measured on: CPU model, ISA features, LLVM's name for the CPU,
//! cores. A leaf: the store records it with every measurement, codegen and measurement
//! detect it (`crate::measure::detect_host`), the matcher compares it.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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

/// Logical cores available to this process (at least 1).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

impl HostFingerprint {
    /// The fingerprint from the text of `/proc/cpuinfo` and LLVM's view of the host.
    pub fn from_cpuinfo(
        cpuinfo: &str,
        llvm_cpu: String,
        llvm_features: String,
        cores: usize,
    ) -> Self {
        let field = |name: &str| {
            cpuinfo
                .lines()
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
        HostFingerprint {
            cpu_model,
            isa_flags,
            llvm_cpu,
            llvm_features,
            cores,
            ttdb_version: env!("CARGO_PKG_VERSION").to_string(),
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

    /// The Ansor target string ttdb writes for records measured here, and its
    /// hardware_params (`num_cores, vector_unit_bytes, cache_line_bytes, 0...`, TVM's CPU
    /// defaults).
    pub fn ansor_target(&self) -> (String, Vec<i64>) {
        (
            format!("llvm -keys=cpu -mcpu={}", self.llvm_cpu),
            vec![self.cores as i64, 64, 64, 0, 0, 0, 0, 0],
        )
    }

    /// The class of machines whose timings the search's cost model can share: the LLVM CPU,
    /// the f32 vector lanes and the cores.
    pub fn class(&self) -> String {
        format!("{}/{}lanes/{}cores", self.llvm_cpu, self.f32_lanes(), self.cores)
    }

    /// A stable digest of what identifies the machine (and the ttdb that measured on it).
    pub fn digest(&self) -> String {
        let text = serde_json::json!([
            self.cpu_model,
            self.isa_flags,
            self.llvm_cpu,
            self.cores,
            self.ttdb_version
        ]);
        crate::signature::hex(&Sha256::digest(text.to_string().as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_and_relevant_flags() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC 9R45\nflags\t\t: fpu avx2 fma avx512f sse4_2 avx512f\n";
        let h = HostFingerprint::from_cpuinfo(info, "znver5".into(), "+avx512f".into(), 2);
        assert_eq!(h.cpu_model, "AMD EPYC 9R45");
        assert_eq!(h.isa_flags, ["avx2", "avx512f", "fma", "sse4_2"]);
        assert_eq!(h.f32_lanes(), 16);
        assert_eq!(h.ansor_target().0, "llvm -keys=cpu -mcpu=znver5");
        assert_eq!(h.digest(), h.clone().digest());
    }
}
