//! The machine a schedule was measured on: CPU model, ISA features, LLVM's name for the CPU,
//! cores. A leaf: the store records it with every measurement, codegen and measurement
//! detect it (`ttdb_backend::target::Target::detect`), the matcher compares it.
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
///
/// Read once per process: std reads the affinity mask and cgroup quota files on every call
/// (ten system calls), and every kernel run asks.
pub fn available_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Widest fp32 SIMD width in lanes of a host with ISA flags `flags`.
pub fn f32_lanes_of<'a>(flags: impl IntoIterator<Item = &'a str>) -> u32 {
    let flags: Vec<&str> = flags.into_iter().collect();
    if flags.contains(&"avx512f") {
        16
    } else if flags.contains(&"avx") {
        8
    } else {
        4
    }
}

/// [`HostFingerprint::class`] of a host known by its stored fields (`hosts` rows).
pub fn class_of<'a>(
    llvm_cpu: &str,
    isa_flags: impl IntoIterator<Item = &'a str>,
    cores: usize,
) -> String {
    format!("{llvm_cpu}/{}lanes/{cores}cores", f32_lanes_of(isa_flags))
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
        f32_lanes_of(self.isa_flags.iter().map(String::as_str))
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
        class_of(
            &self.llvm_cpu,
            self.isa_flags.iter().map(String::as_str),
            self.cores,
        )
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

/// The widest x86 vector ISA a record's timings assume, narrowest first: a schedule timed
/// with AVX-512 says little about its speed on a host without it, so the matcher ranks it
/// after schedules timed on ISAs this host has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorIsa {
    Sse42,
    Avx,
    Avx2,
    Avx512f,
}

impl VectorIsa {
    const ALL: [VectorIsa; 4] = [
        VectorIsa::Sse42,
        VectorIsa::Avx,
        VectorIsa::Avx2,
        VectorIsa::Avx512f,
    ];

    /// Its `/proc/cpuinfo` flag (the names of [`HostFingerprint::isa_flags`]).
    pub fn flag(self) -> &'static str {
        match self {
            VectorIsa::Sse42 => "sse4_2",
            VectorIsa::Avx => "avx",
            VectorIsa::Avx2 => "avx2",
            VectorIsa::Avx512f => "avx512f",
        }
    }

    /// Its LLVM feature name (`-mattr=+avx512f`).
    fn llvm_feature(self) -> &'static str {
        match self {
            VectorIsa::Sse42 => "sse4.2",
            _ => self.flag(),
        }
    }

    /// The level below (what disabling this one leaves: LLVM's `-avx2` also drops AVX-512).
    fn below(self) -> Option<VectorIsa> {
        VectorIsa::ALL.iter().rev().find(|&&i| i < self).copied()
    }

    /// The widest vector ISA an LLVM x86 CPU name implies (LLVM 19's `X86.td`; checked with
    /// `llc -mcpu=NAME` on 512-, 256-bit integer and 256-bit float adds). None for generic
    /// names (`generic`, `x86-64`, `native`), pre-SSE4.2 CPUs and other architectures.
    pub fn of_llvm_cpu(cpu: &str) -> Option<VectorIsa> {
        // LLVM accepts `_` spellings too (`skylake_avx512`).
        let cpu = cpu.trim().to_ascii_lowercase().replace('_', "-");
        let isa = match cpu.as_str() {
            "skylake-avx512" | "skx" | "cascadelake" | "cooperlake" | "cannonlake"
            | "icelake-client" | "icelake-server" | "rocketlake" | "tigerlake"
            | "sapphirerapids" | "emeraldrapids" | "graniterapids" | "graniterapids-d"
            | "diamondrapids" | "znver4" | "znver5" | "knl" | "knm" | "mic-avx512"
            | "x86-64-v4" => VectorIsa::Avx512f,
            "haswell"
            | "core-avx2"
            | "core-4th-gen-avx"
            | "core-4th-gen-avx-tsx"
            | "broadwell"
            | "core-5th-gen-avx"
            | "core-5th-gen-avx-tsx"
            | "skylake"
            | "alderlake"
            | "raptorlake"
            | "meteorlake"
            | "arrowlake"
            | "arrowlake-s"
            | "lunarlake"
            | "pantherlake"
            | "gracemont"
            | "sierraforest"
            | "grandridge"
            | "clearwaterforest"
            | "znver1"
            | "znver2"
            | "znver3"
            | "bdver4"
            | "x86-64-v3" => VectorIsa::Avx2,
            "sandybridge" | "corei7-avx" | "core-2nd-gen-avx" | "ivybridge" | "core-avx-i"
            | "core-3rd-gen-avx" | "btver2" | "bdver1" | "bdver2" | "bdver3" => VectorIsa::Avx,
            "nehalem" | "corei7" | "core-i7-sse4-2" | "westmere" | "core-aes-pclmulqdq"
            | "silvermont" | "slm" | "goldmont" | "goldmont-plus" | "tremont" | "atom-sse4-2"
            | "atom-sse4-2-movbe" | "x86-64-v2" => VectorIsa::Sse42,
            _ => return None,
        };
        Some(isa)
    }

    /// The widest vector ISA among `/proc/cpuinfo` flags.
    pub fn widest_of_flags<'a>(flags: impl IntoIterator<Item = &'a str>) -> Option<VectorIsa> {
        flags
            .into_iter()
            .filter_map(|f| VectorIsa::ALL.into_iter().find(|i| i.flag() == f))
            .max()
    }
}

impl std::fmt::Display for VectorIsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.flag())
    }
}

/// The vector ISA a record needs, and what says so (`target -mcpu=skylake-avx512`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IsaRequirement {
    /// None: nothing says (a target without `-mcpu`/`-mattr`, a generic CPU).
    pub needs: Option<VectorIsa>,
    pub basis: String,
}

/// Whether this host can run a record as it was timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IsaCompat {
    /// This host has the ISA the record needs.
    Compatible,
    /// The record's ISA or this host's is not known.
    Unknown,
    /// The record needs an ISA this host lacks (kept, ranked last).
    Lacks,
}

impl IsaCompat {
    /// Rank among candidates: only records this host lacks the ISA for go last. A record
    /// whose ISA is unknown (a generic target names none) ranks with the compatible ones by
    /// its cost: it most likely needs nothing special, and demoting it would hide the fast
    /// generic records of many real logs behind slower `-mcpu` ones.
    pub fn rank(self) -> u8 {
        (self == IsaCompat::Lacks) as u8
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IsaCompat::Compatible => "compatible",
            IsaCompat::Unknown => "unknown",
            IsaCompat::Lacks => "lacks",
        }
    }
}

impl IsaRequirement {
    /// From an imported record's target: the ISA its `-mcpu` implies, raised by `+feature`
    /// and lowered by `-feature` of `-mattr` (in order, as LLVM applies them).
    pub fn of_target(mcpu: Option<&str>, mattr: &[String]) -> IsaRequirement {
        let mut needs = mcpu.and_then(VectorIsa::of_llvm_cpu);
        let mut basis: Vec<String> = mcpu.map(|m| format!("-mcpu={m}")).into_iter().collect();
        let mut changed = false;
        for a in mattr {
            let (on, name) = match a.split_at_checked(1) {
                Some(("+", n)) => (true, n),
                Some(("-", n)) => (false, n),
                _ => continue,
            };
            let Some(isa) = VectorIsa::ALL
                .into_iter()
                .find(|i| i.llvm_feature() == name)
            else {
                continue;
            };
            changed = true;
            if on {
                needs = needs.max(Some(isa));
            } else if needs.is_some_and(|n| n >= isa) {
                needs = isa.below();
            }
        }
        if changed {
            basis.push(format!("-mattr={}", mattr.join(",")));
        }
        IsaRequirement {
            needs,
            basis: if basis.is_empty() {
                "target names no -mcpu or -mattr".into()
            } else {
                format!("target {}", basis.join(" "))
            },
        }
    }

    /// From the flags of the host that measured the record (ttdb's own measurements).
    pub fn of_host_flags<'a>(flags: impl IntoIterator<Item = &'a str>) -> IsaRequirement {
        let needs = VectorIsa::widest_of_flags(flags);
        IsaRequirement {
            needs,
            basis: match needs {
                Some(isa) => format!("measured by ttdb on a host with {isa}"),
                None => "measured by ttdb on a host without x86 vector flags".into(),
            },
        }
    }

    /// The verdict on a host with `/proc/cpuinfo` flags `host_flags` (empty: unknown host).
    pub fn check(&self, host_flags: &[String]) -> IsaCompat {
        match self.needs {
            _ if host_flags.is_empty() => IsaCompat::Unknown,
            None => IsaCompat::Unknown,
            Some(isa) if host_flags.iter().any(|f| f == isa.flag()) => IsaCompat::Compatible,
            Some(_) => IsaCompat::Lacks,
        }
    }

    /// Why a record with this requirement ranks where it does on a host whose verdict is
    /// `compat`, for `match --explain`.
    pub fn explain(&self, compat: IsaCompat) -> String {
        match (compat, self.needs) {
            (IsaCompat::Lacks, Some(isa)) => format!(
                "record needs {isa} ({}); this host lacks it: ranked after compatible records",
                self.basis
            ),
            (IsaCompat::Compatible, Some(isa)) => {
                format!("record needs {isa} ({}), which this host has", self.basis)
            }
            (_, Some(isa)) => format!(
                "record needs {isa} ({}); this host's ISA is unknown",
                self.basis
            ),
            (_, None) => format!("record's ISA unknown ({})", self.basis),
        }
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

    #[test]
    fn llvm_cpus_imply_their_widest_vector_isa() {
        use VectorIsa::*;
        for (cpu, isa) in [
            ("skylake-avx512", Some(Avx512f)),
            ("cascadelake", Some(Avx512f)),
            ("cooperlake", Some(Avx512f)),
            ("icelake-client", Some(Avx512f)),
            ("icelake_server", Some(Avx512f)),
            ("tigerlake", Some(Avx512f)),
            ("sapphirerapids", Some(Avx512f)),
            ("znver4", Some(Avx512f)),
            ("znver5", Some(Avx512f)),
            ("knl", Some(Avx512f)),
            ("haswell", Some(Avx2)),
            ("broadwell", Some(Avx2)),
            ("skylake", Some(Avx2)),
            ("core-avx2", Some(Avx2)),
            ("znver1", Some(Avx2)),
            ("znver3", Some(Avx2)),
            ("alderlake", Some(Avx2)),
            ("sandybridge", Some(Avx)),
            ("nehalem", Some(Sse42)),
            ("generic", None),
            ("x86-64", None),
            ("native", None),
            ("cortex-a72", None),
        ] {
            assert_eq!(VectorIsa::of_llvm_cpu(cpu), isa, "{cpu}");
        }
    }

    fn attrs(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mattr_raises_and_lowers_the_cpu_level() {
        let r = IsaRequirement::of_target(Some("skylake-avx512"), &[]);
        assert_eq!(r.needs, Some(VectorIsa::Avx512f));
        assert_eq!(r.basis, "target -mcpu=skylake-avx512");
        let r = IsaRequirement::of_target(None, &attrs(&["+avx512f", "+avx512bw"]));
        assert_eq!(r.needs, Some(VectorIsa::Avx512f));
        assert_eq!(r.basis, "target -mattr=+avx512f,+avx512bw");
        let r = IsaRequirement::of_target(Some("skylake-avx512"), &attrs(&["-avx512f"]));
        assert_eq!(r.needs, Some(VectorIsa::Avx2));
        // Disabling AVX2 drops what needs it (AVX-512) too.
        let r = IsaRequirement::of_target(Some("znver4"), &attrs(&["-avx2"]));
        assert_eq!(r.needs, Some(VectorIsa::Avx));
        let r = IsaRequirement::of_target(Some("haswell"), &attrs(&["+fma", "-avx512f"]));
        assert_eq!(r.needs, Some(VectorIsa::Avx2));
        let r = IsaRequirement::of_target(None, &[]);
        assert_eq!(r.needs, None);
        assert_eq!(r.basis, "target names no -mcpu or -mattr");
    }

    #[test]
    fn verdicts_on_avx2_and_avx512_hosts() {
        let avx2 = attrs(&["avx", "avx2", "fma", "sse4_2"]);
        let avx512 = attrs(&["avx", "avx2", "avx512f", "fma", "sse4_2"]);
        let skx = IsaRequirement::of_target(Some("skylake-avx512"), &[]);
        let hsw = IsaRequirement::of_target(Some("core-avx2"), &[]);
        let none = IsaRequirement::of_target(None, &[]);
        assert_eq!(skx.check(&avx2), IsaCompat::Lacks);
        assert_eq!(skx.check(&avx512), IsaCompat::Compatible);
        assert_eq!(hsw.check(&avx2), IsaCompat::Compatible);
        assert_eq!(none.check(&avx2), IsaCompat::Unknown);
        // An unknown host judges nothing.
        assert_eq!(skx.check(&[]), IsaCompat::Unknown);
        assert!(
            IsaCompat::Compatible < IsaCompat::Unknown && IsaCompat::Unknown < IsaCompat::Lacks
        );
        assert_eq!(
            skx.explain(IsaCompat::Lacks),
            "record needs avx512f (target -mcpu=skylake-avx512); this host lacks it: ranked after compatible records"
        );
        let measured = IsaRequirement::of_host_flags(["avx2", "avx512f", "fma"]);
        assert_eq!(measured.needs, Some(VectorIsa::Avx512f));
        assert_eq!(measured.check(&avx2), IsaCompat::Lacks);
    }
}
