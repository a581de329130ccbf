//! Process-wide ORC LLJIT: links object files produced by our host `TargetMachine`, resolves
//! the runtime's absolute symbols, and frees a kernel's code when its handle is dropped.

use super::llvm::{init_native, MemoryBuffer, TargetMachine};
use llvm_sys::error::*;
use llvm_sys::orc2::lljit::*;
use llvm_sys::orc2::*;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock};

fn error_string(err: LLVMErrorRef) -> String {
    // SAFETY: `err` is a non-null error we own; GetErrorMessage consumes it.
    unsafe {
        let m = LLVMGetErrorMessage(err);
        let s = CStr::from_ptr(m).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(m);
        s
    }
}

struct Jit {
    raw: LLVMOrcLLJITRef,
}

// SAFETY: LLJIT is internally synchronised; we additionally serialise all calls with a Mutex.
unsafe impl Send for Jit {}

static JIT: OnceLock<Result<Mutex<Jit>, String>> = OnceLock::new();

/// Symbols the generated code may reference (runtime callbacks and libm functions).
pub type SymbolTable = Vec<(&'static str, usize)>;

fn create(symbols: SymbolTable) -> Result<Mutex<Jit>, String> {
    init_native();
    let tm = TargetMachine::host()?;
    // SAFETY: the builder takes ownership of the JTMB, which takes ownership of the TM (hence
    // `forget`); CreateLLJIT takes ownership of the builder. Symbol names are interned in the
    // execution session before being handed to AbsoluteSymbols, which takes them over.
    unsafe {
        let jtmb = LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm.raw);
        std::mem::forget(tm);
        let builder = LLVMOrcCreateLLJITBuilder();
        LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, jtmb);
        let mut j: LLVMOrcLLJITRef = std::ptr::null_mut();
        let err = LLVMOrcCreateLLJIT(&mut j, builder);
        if !err.is_null() {
            return Err(format!("LLJIT creation failed: {}", error_string(err)));
        }
        let es = LLVMOrcLLJITGetExecutionSession(j);
        let dylib = LLVMOrcLLJITGetMainJITDylib(j);
        let mut pairs: Vec<LLVMOrcCSymbolMapPair> = Vec::new();
        for (name, addr) in &symbols {
            let c = CString::new(*name).unwrap();
            let mangled = LLVMOrcLLJITMangleAndIntern(j, c.as_ptr());
            pairs.push(LLVMOrcCSymbolMapPair {
                Name: mangled,
                Sym: LLVMJITEvaluatedSymbol {
                    Address: *addr as u64,
                    Flags: LLVMJITSymbolFlags {
                        GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported
                            as u8
                            | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
                        TargetFlags: 0,
                    },
                },
            });
        }
        let _ = es;
        let mu = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
        let err = LLVMOrcJITDylibDefine(dylib, mu);
        if !err.is_null() {
            return Err(format!(
                "defining runtime symbols failed: {}",
                error_string(err)
            ));
        }
        Ok(Mutex::new(Jit { raw: j }))
    }
}

fn jit(symbols: impl FnOnce() -> SymbolTable) -> Result<&'static Mutex<Jit>, String> {
    JIT.get_or_init(|| create(symbols()))
        .as_ref()
        .map_err(|e| e.clone())
}

/// Code of one compiled kernel; removed from the JIT when dropped.
pub struct JitCode {
    rt: LLVMOrcResourceTrackerRef,
    /// Address of each requested symbol, in request order.
    pub addresses: Vec<usize>,
}

// SAFETY: the resource tracker is only used in Drop, under the JIT mutex.
unsafe impl Send for JitCode {}
// SAFETY: no interior mutation through &JitCode.
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        let Some(Ok(m)) = JIT.get() else { return };
        let _g = m.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: `rt` was created by us and is released exactly once; removal frees the
        // kernel's code, which no caller can reach any more (the handle owning the function
        // pointers is being dropped).
        unsafe {
            let err = LLVMOrcResourceTrackerRemove(self.rt);
            if !err.is_null() {
                LLVMConsumeError(err);
            }
            LLVMOrcReleaseResourceTracker(self.rt);
        }
    }
}

/// Link `obj` into the JIT and resolve `names`.
pub fn add_object(
    obj: MemoryBuffer,
    names: &[String],
    symbols: impl FnOnce() -> SymbolTable,
) -> Result<JitCode, String> {
    let m = jit(symbols)?;
    let g = m.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the JIT is live for the process; AddObjectFileWithRT takes ownership of the
    // buffer; lookups write one address each.
    unsafe {
        let dylib = LLVMOrcLLJITGetMainJITDylib(g.raw);
        let rt = LLVMOrcJITDylibCreateResourceTracker(dylib);
        let err = LLVMOrcLLJITAddObjectFileWithRT(g.raw, rt, obj.into_raw());
        if !err.is_null() {
            LLVMOrcReleaseResourceTracker(rt);
            return Err(format!("adding object failed: {}", error_string(err)));
        }
        let mut code = JitCode {
            rt,
            addresses: Vec::new(),
        };
        let mut addresses = Vec::new();
        for n in names {
            let c = CString::new(n.as_str()).map_err(|e| e.to_string())?;
            let mut addr: LLVMOrcExecutorAddress = 0;
            let err = LLVMOrcLLJITLookup(g.raw, &mut addr, c.as_ptr() as *const c_char);
            if !err.is_null() {
                drop(g);
                drop(code);
                return Err(format!("symbol lookup `{n}` failed: {}", error_string(err)));
            }
            addresses.push(addr as usize);
        }
        code.addresses = addresses;
        Ok(code)
    }
}
