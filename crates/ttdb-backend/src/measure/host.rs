//! Detecting this machine's [`HostFingerprint`] (the type lives in the leaf `ttdb_format::host`).
pub use ttdb_format::host::HostFingerprint;

/// This machine, as codegen targets it.
pub fn detect_host() -> HostFingerprint {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (llvm_cpu, llvm_features) = crate::codegen::target_id();
    HostFingerprint::from_cpuinfo(
        &info,
        llvm_cpu,
        llvm_features,
        ttdb_format::host::available_cores(),
    )
}
