//! Cache of compiled kernels keyed by a caller-provided key plus the target (CPU + features)
//! and the codegen options that change generated code.

use super::{compile, target_id, CodegenError, CodegenOptions, CompiledKernel};
use crate::loopnest::ir::Kernel;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct KernelCache {
    map: Mutex<HashMap<String, Arc<CompiledKernel>>>,
    target: std::sync::OnceLock<String>,
}

impl KernelCache {
    pub fn new() -> KernelCache {
        KernelCache::default()
    }

    fn full_key(&self, key: &str, opts: &CodegenOptions) -> String {
        let target = self.target.get_or_init(|| {
            let (cpu, features) = target_id();
            format!("{cpu};{features}")
        });
        format!(
            "{key}|{target}|abort={}|reassoc={}|{}|vec={}|lanes={}|be3={}|unroll={}|vmath={}",
            opts.abort_checks,
            opts.reassociate,
            opts.pipeline,
            opts.llvm_vectorizers,
            opts.max_vector_lanes,
            opts.aggressive_backend,
            opts.llvm_unroll,
            opts.vector_math
        )
    }

    /// Return the cached kernel for `key`, compiling `kernel` on a miss. The caller guarantees
    /// that equal keys mean equal kernels.
    pub fn get_or_compile(
        &self,
        key: &str,
        kernel: &Kernel,
        opts: &CodegenOptions,
    ) -> Result<Arc<CompiledKernel>, CodegenError> {
        let full = self.full_key(key, opts);
        if let Some(k) = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&full)
        {
            return Ok(k.clone());
        }
        // Compile outside the lock; a concurrent duplicate compile is harmless.
        let compiled = Arc::new(compile(kernel, opts)?);
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(m.entry(full).or_insert(compiled).clone())
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
