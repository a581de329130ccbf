//! Minimal safe wrapper over the LLVM C API (llvm-sys): context, module, builder, types,
//! values, target machine, pass pipeline and object emission.
//!
//! Safety model: every handle borrows the `Context` it was created in (`'c`), so no handle can
//! outlive its context; owning types (`Context`, `Module`, `Builder`, `TargetMachine`) dispose
//! their object exactly once in `Drop`. IR well-formedness (operand types) is the translator's
//! responsibility and is checked with `Module::verify` before the module is optimised or
//! emitted, because LLVM release builds do not assert on malformed IR.

use llvm_sys::core::*;
use llvm_sys::prelude::*;
use llvm_sys::target::*;
use llvm_sys::target_machine::*;
use llvm_sys::transforms::pass_builder::*;
use llvm_sys::{LLVMIntPredicate, LLVMLinkage, LLVMRealPredicate};
use std::ffi::{c_char, c_uint, CStr, CString};
use std::marker::PhantomData;
use std::sync::Once;

pub use llvm_sys::LLVMIntPredicate as IntPred;
pub use llvm_sys::LLVMRealPredicate as RealPred;

const EMPTY: *const c_char = c"".as_ptr();

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "_")).expect("no interior NUL after replace")
}

/// Take ownership of an LLVM-allocated message.
fn take_message(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: `p` is a NUL-terminated string allocated by LLVM; disposed once right here.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        LLVMDisposeMessage(p);
        s
    }
}

/// Initialise the native target once per process.
pub fn init_native() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain initialisation calls, guarded to run once; the argv array and its
        // strings outlive the ParseCommandLineOptions call.
        unsafe {
            LLVM_InitializeNativeTarget();
            LLVM_InitializeNativeAsmPrinter();
            LLVM_InitializeNativeAsmParser();
            // LLVM 19's loop vectorizer miscompiles interleave groups whose index is a masked
            // affine expression (e.g. `B[(3*j) & 15]`, which is what `floormod(3*j, 16)`
            // becomes): it loads a stride-3 group and drops the mask. Strided groups are a
            // minor optimisation, so turn them off process-wide (see codegen tests
            // `floormod_index_in_llvm_vectorized_loop`).
            let args = [
                c"ttdb".as_ptr(),
                c"-enable-interleaved-mem-accesses=false".as_ptr(),
            ];
            llvm_sys::support::LLVMParseCommandLineOptions(
                args.len() as i32,
                args.as_ptr(),
                std::ptr::null(),
            );
        }
    });
}

/// Host CPU name and feature string as LLVM sees them.
pub fn host_cpu() -> (String, String) {
    // SAFETY: both return fresh messages that `take_message` disposes.
    unsafe {
        (
            take_message(LLVMGetHostCPUName()),
            take_message(LLVMGetHostCPUFeatures()),
        )
    }
}

pub struct Context {
    raw: LLVMContextRef,
}

impl Context {
    pub fn new() -> Context {
        // SAFETY: creates a fresh context owned by the returned value.
        Context {
            raw: unsafe { LLVMContextCreate() },
        }
    }
    fn ty(&self, raw: LLVMTypeRef) -> Type<'_> {
        Type {
            raw,
            _c: PhantomData,
        }
    }
    pub fn i1(&self) -> Type<'_> {
        // SAFETY: type getters on a live context.
        self.ty(unsafe { LLVMInt1TypeInContext(self.raw) })
    }
    pub fn i8(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMInt8TypeInContext(self.raw) })
    }
    pub fn i32(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMInt32TypeInContext(self.raw) })
    }
    pub fn i64(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMInt64TypeInContext(self.raw) })
    }
    pub fn f32(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMFloatTypeInContext(self.raw) })
    }
    pub fn f64(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMDoubleTypeInContext(self.raw) })
    }
    pub fn ptr(&self) -> Type<'_> {
        // SAFETY: as above (opaque pointer, address space 0).
        self.ty(unsafe { LLVMPointerTypeInContext(self.raw, 0) })
    }
    pub fn void(&self) -> Type<'_> {
        // SAFETY: as above.
        self.ty(unsafe { LLVMVoidTypeInContext(self.raw) })
    }
    pub fn fn_type<'c>(&'c self, ret: Type<'c>, params: &[Type<'c>]) -> Type<'c> {
        let mut p: Vec<LLVMTypeRef> = params.iter().map(|t| t.raw).collect();
        // SAFETY: `p` outlives the call; all types belong to this context.
        self.ty(unsafe { LLVMFunctionType(ret.raw, p.as_mut_ptr(), p.len() as c_uint, 0) })
    }
    pub fn module(&self, name: &str) -> Module<'_> {
        let n = cstring(name);
        // SAFETY: the module is created in this context and owned by the returned value.
        Module {
            raw: unsafe { LLVMModuleCreateWithNameInContext(n.as_ptr(), self.raw) },
            _c: PhantomData,
        }
    }
    pub fn builder(&self) -> Builder<'_> {
        // SAFETY: builder owned by the returned value.
        Builder {
            raw: unsafe { LLVMCreateBuilderInContext(self.raw) },
            _c: PhantomData,
        }
    }
    pub fn append_block<'c>(&'c self, f: Value<'c>, name: &str) -> Block<'c> {
        let n = cstring(name);
        // SAFETY: `f` is a function of this context.
        Block {
            raw: unsafe { LLVMAppendBasicBlockInContext(self.raw, f.raw, n.as_ptr()) },
            _c: PhantomData,
        }
    }
    pub fn string_attr<'c>(&'c self, f: Value<'c>, key: &str, val: &str) {
        // SAFETY: key/value lengths are passed explicitly; attribute index -1 = function.
        unsafe {
            let a = LLVMCreateStringAttribute(
                self.raw,
                key.as_ptr() as *const c_char,
                key.len() as c_uint,
                val.as_ptr() as *const c_char,
                val.len() as c_uint,
            );
            LLVMAddAttributeAtIndex(f.raw, u32::MAX, a);
        }
    }
    /// Enum attribute by name (e.g. "noalias", "nounwind") at `index` (0 = return,
    /// 1.. = parameters, u32::MAX = function).
    pub fn enum_attr<'c>(&'c self, f: Value<'c>, index: u32, name: &str) {
        // SAFETY: name passed with explicit length; unknown names yield kind 0 and are skipped.
        unsafe {
            let kind = LLVMGetEnumAttributeKindForName(name.as_ptr() as *const c_char, name.len());
            if kind != 0 {
                let a = LLVMCreateEnumAttribute(self.raw, kind, 0);
                LLVMAddAttributeAtIndex(f.raw, index, a);
            }
        }
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::new()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: all borrowing handles are gone (lifetimes); disposed once.
        unsafe { LLVMContextDispose(self.raw) }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Type<'c> {
    pub raw: LLVMTypeRef,
    _c: PhantomData<&'c Context>,
}

impl<'c> Type<'c> {
    pub fn vector(self, lanes: u32) -> Type<'c> {
        // SAFETY: `self` is a valid scalar type of a live context.
        Type {
            raw: unsafe { LLVMVectorType(self.raw, lanes) },
            _c: PhantomData,
        }
    }
    pub fn const_int(self, v: i64) -> Value<'c> {
        // SAFETY: `self` is an integer type (translator invariant; verified later).
        Value::new(unsafe { LLVMConstInt(self.raw, v as u64, 1) })
    }
    pub fn const_float(self, v: f64) -> Value<'c> {
        // SAFETY: `self` is a float type.
        Value::new(unsafe { LLVMConstReal(self.raw, v) })
    }
    pub fn null(self) -> Value<'c> {
        // SAFETY: any first-class type has a null value.
        Value::new(unsafe { LLVMConstNull(self.raw) })
    }
    pub fn poison(self) -> Value<'c> {
        // SAFETY: any type has a poison value.
        Value::new(unsafe { LLVMGetPoison(self.raw) })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Value<'c> {
    pub raw: LLVMValueRef,
    _c: PhantomData<&'c Context>,
}

impl<'c> Value<'c> {
    fn new(raw: LLVMValueRef) -> Value<'c> {
        Value {
            raw,
            _c: PhantomData,
        }
    }
    pub fn ty(self) -> Type<'c> {
        // SAFETY: valid value.
        Type {
            raw: unsafe { LLVMTypeOf(self.raw) },
            _c: PhantomData,
        }
    }
    pub fn param(self, i: u32) -> Value<'c> {
        // SAFETY: `self` is a function with more than `i` parameters (translator invariant).
        Value::new(unsafe { LLVMGetParam(self.raw, i) })
    }
    pub fn set_internal(self) {
        // SAFETY: `self` is a global value.
        unsafe { LLVMSetLinkage(self.raw, LLVMLinkage::LLVMInternalLinkage) }
    }
    /// Set fast-math flags if this is an instruction (constant-folded values are skipped).
    pub fn set_fast_math(self, flags: u32) {
        // SAFETY: flags are only set on instructions; callers only pass FP operations.
        unsafe {
            if !LLVMIsAInstruction(self.raw).is_null()
                && LLVMCanValueUseFastMathFlags(self.raw) != 0
            {
                LLVMSetFastMathFlags(self.raw, flags)
            }
        }
    }
    pub fn add_incoming(self, v: Value<'c>, bb: Block<'c>) {
        let mut vs = [v.raw];
        let mut bs = [bb.raw];
        // SAFETY: `self` is a phi node; arrays of length 1 live across the call.
        unsafe { LLVMAddIncoming(self.raw, vs.as_mut_ptr(), bs.as_mut_ptr(), 1) }
    }
    pub fn is_constant(self) -> bool {
        // SAFETY: valid value.
        unsafe { LLVMIsConstant(self.raw) != 0 }
    }
    pub fn const_vector(vals: &[Value<'c>]) -> Value<'c> {
        let mut v: Vec<LLVMValueRef> = vals.iter().map(|x| x.raw).collect();
        // SAFETY: all elements are constants of one type.
        Value::new(unsafe { LLVMConstVector(v.as_mut_ptr(), v.len() as c_uint) })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Block<'c> {
    raw: LLVMBasicBlockRef,
    _c: PhantomData<&'c Context>,
}

impl<'c> Block<'c> {
    /// Placeholder before a function exists; never positioned on.
    pub fn placeholder() -> Block<'c> {
        Block {
            raw: std::ptr::null_mut(),
            _c: PhantomData,
        }
    }
}

pub struct Module<'c> {
    raw: LLVMModuleRef,
    _c: PhantomData<&'c Context>,
}

impl<'c> Module<'c> {
    pub fn add_function(&self, name: &str, ty: Type<'c>) -> Value<'c> {
        let n = cstring(name);
        // SAFETY: `ty` is a function type of the same context.
        Value::new(unsafe { LLVMAddFunction(self.raw, n.as_ptr(), ty.raw) })
    }
    /// Declaration of an overloaded intrinsic, e.g. `("llvm.fma", [<8 x float>])`.
    pub fn intrinsic(&self, name: &str, overloads: &[Type<'c>]) -> Option<Value<'c>> {
        let mut tys: Vec<LLVMTypeRef> = overloads.iter().map(|t| t.raw).collect();
        // SAFETY: name passed with length; declaration is created in this module.
        unsafe {
            let id = LLVMLookupIntrinsicID(name.as_ptr() as *const c_char, name.len());
            if id == 0 {
                return None;
            }
            Some(Value::new(LLVMGetIntrinsicDeclaration(
                self.raw,
                id,
                tys.as_mut_ptr(),
                tys.len(),
            )))
        }
    }
    pub fn function(&self, name: &str) -> Option<Value<'c>> {
        let n = cstring(name);
        // SAFETY: lookup in a live module.
        let f = unsafe { LLVMGetNamedFunction(self.raw, n.as_ptr()) };
        (!f.is_null()).then(|| Value::new(f))
    }
    pub fn set_target(&self, tm: &TargetMachine) {
        // SAFETY: the triple string and data layout are owned locally during the calls.
        unsafe {
            let triple = LLVMGetTargetMachineTriple(tm.raw);
            LLVMSetTarget(self.raw, triple);
            LLVMDisposeMessage(triple);
            let dl = LLVMCreateTargetDataLayout(tm.raw);
            LLVMSetModuleDataLayout(self.raw, dl);
            llvm_sys::target::LLVMDisposeTargetData(dl);
        }
    }
    pub fn verify(&self) -> Result<(), String> {
        let mut msg: *mut c_char = std::ptr::null_mut();
        // SAFETY: ReturnStatus action does not abort; `msg` disposed by take_message.
        let failed = unsafe {
            llvm_sys::analysis::LLVMVerifyModule(
                self.raw,
                llvm_sys::analysis::LLVMVerifierFailureAction::LLVMReturnStatusAction,
                &mut msg,
            )
        };
        let text = take_message(msg);
        if failed != 0 {
            Err(text)
        } else {
            Ok(())
        }
    }
    pub fn print(&self) -> String {
        // SAFETY: returns a fresh message.
        take_message(unsafe { LLVMPrintModuleToString(self.raw) })
    }
    /// Instructions in the largest function of the module.
    pub fn largest_function(&self) -> usize {
        let mut largest = 0;
        // SAFETY: walks the live module's functions, blocks and instructions read-only.
        unsafe {
            let mut f = LLVMGetFirstFunction(self.raw);
            while !f.is_null() {
                let mut n = 0;
                let mut bb = LLVMGetFirstBasicBlock(f);
                while !bb.is_null() {
                    let mut i = LLVMGetFirstInstruction(bb);
                    while !i.is_null() {
                        n += 1;
                        i = LLVMGetNextInstruction(i);
                    }
                    bb = LLVMGetNextBasicBlock(bb);
                }
                largest = largest.max(n);
                f = LLVMGetNextFunction(f);
            }
        }
        largest
    }
    /// Run a new-pass-manager pipeline, e.g. "default<O3>".
    pub fn run_passes(
        &self,
        pipeline: &str,
        tm: &TargetMachine,
        vectorizers: bool,
        unroll: bool,
    ) -> Result<(), String> {
        let p = cstring(pipeline);
        // SAFETY: options created and disposed here; module and TM are live.
        unsafe {
            let opts = LLVMCreatePassBuilderOptions();
            LLVMPassBuilderOptionsSetLoopVectorization(opts, vectorizers as i32);
            LLVMPassBuilderOptionsSetSLPVectorization(opts, vectorizers as i32);
            LLVMPassBuilderOptionsSetLoopUnrolling(opts, unroll as i32);
            let err = LLVMRunPasses(self.raw, p.as_ptr(), tm.raw, opts);
            LLVMDisposePassBuilderOptions(opts);
            if err.is_null() {
                Ok(())
            } else {
                Err(take_message(llvm_sys::error::LLVMGetErrorMessage(err)))
            }
        }
    }
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        // SAFETY: module owned by this value; disposed once.
        unsafe { LLVMDisposeModule(self.raw) }
    }
}

/// An LLVM-owned memory buffer (an object file).
pub struct MemoryBuffer {
    pub raw: LLVMMemoryBufferRef,
}

impl MemoryBuffer {
    /// Give up ownership (the consumer disposes it).
    pub fn into_raw(self) -> LLVMMemoryBufferRef {
        let r = self.raw;
        std::mem::forget(self);
        r
    }
    pub fn len(&self) -> usize {
        // SAFETY: live buffer.
        unsafe { LLVMGetBufferSize(self.raw) }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for MemoryBuffer {
    fn drop(&mut self) {
        // SAFETY: owned buffer, disposed once.
        unsafe { LLVMDisposeMemoryBuffer(self.raw) }
    }
}

pub struct TargetMachine {
    pub raw: LLVMTargetMachineRef,
    pub cpu: String,
    pub features: String,
}

// SAFETY: a TargetMachine is only used by one thread at a time (callers hold it in a Mutex or
// own it exclusively); LLVM target machines carry no thread affinity.
unsafe impl Send for TargetMachine {}

impl TargetMachine {
    /// Host target machine (`LLVMGetHostCPUName`/`Features`, O3 back end, PIC, JIT code model).
    pub fn host() -> Result<TargetMachine, String> {
        TargetMachine::host_with(true)
    }

    /// Host target machine; `aggressive` selects the O3 (else O2) back-end optimisation level.
    pub fn host_with(aggressive: bool) -> Result<TargetMachine, String> {
        TargetMachine::host_in(aggressive, LLVMCodeModel::LLVMCodeModelJITDefault)
    }

    /// Host target machine for objects linked into a shared library by the system linker
    /// (PIC, the default code model) rather than by the JIT.
    pub fn host_for_library(aggressive: bool) -> Result<TargetMachine, String> {
        TargetMachine::host_in(aggressive, LLVMCodeModel::LLVMCodeModelDefault)
    }

    fn host_in(aggressive: bool, code_model: LLVMCodeModel) -> Result<TargetMachine, String> {
        init_native();
        let (cpu, features) = host_cpu();
        // SAFETY: strings live across the calls; error message disposed by take_message.
        unsafe {
            let triple = LLVMGetDefaultTargetTriple();
            let mut target: LLVMTargetRef = std::ptr::null_mut();
            let mut err: *mut c_char = std::ptr::null_mut();
            if LLVMGetTargetFromTriple(triple, &mut target, &mut err) != 0 {
                LLVMDisposeMessage(triple);
                return Err(take_message(err));
            }
            let c = cstring(&cpu);
            let f = cstring(&features);
            let raw = LLVMCreateTargetMachine(
                target,
                triple,
                c.as_ptr(),
                f.as_ptr(),
                if aggressive {
                    LLVMCodeGenOptLevel::LLVMCodeGenLevelAggressive
                } else {
                    LLVMCodeGenOptLevel::LLVMCodeGenLevelDefault
                },
                LLVMRelocMode::LLVMRelocPIC,
                code_model,
            );
            LLVMDisposeMessage(triple);
            if raw.is_null() {
                return Err("LLVMCreateTargetMachine failed".into());
            }
            Ok(TargetMachine { raw, cpu, features })
        }
    }
    /// Emit a relocatable object file for `m`.
    pub fn emit_object(&self, m: &Module<'_>) -> Result<MemoryBuffer, String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        let mut buf: LLVMMemoryBufferRef = std::ptr::null_mut();
        // SAFETY: module and TM live; on success `buf` is a fresh owned buffer.
        let failed = unsafe {
            LLVMTargetMachineEmitToMemoryBuffer(
                self.raw,
                m.raw,
                LLVMCodeGenFileType::LLVMObjectFile,
                &mut err,
                &mut buf,
            )
        };
        if failed != 0 {
            return Err(take_message(err));
        }
        Ok(MemoryBuffer { raw: buf })
    }
}

impl Drop for TargetMachine {
    fn drop(&mut self) {
        // SAFETY: owned, disposed once.
        unsafe { LLVMDisposeTargetMachine(self.raw) }
    }
}

pub struct Builder<'c> {
    raw: LLVMBuilderRef,
    _c: PhantomData<&'c Context>,
}

impl Drop for Builder<'_> {
    fn drop(&mut self) {
        // SAFETY: owned, disposed once.
        unsafe { LLVMDisposeBuilder(self.raw) }
    }
}

macro_rules! binop {
    ($($name:ident => $f:ident),* $(,)?) => {$(
        pub fn $name(&self, a: Value<'c>, b: Value<'c>) -> Value<'c> {
            // SAFETY: operands are values of one type in the builder's function.
            Value::new(unsafe { $f(self.raw, a.raw, b.raw, EMPTY) })
        }
    )*};
}

macro_rules! castop {
    ($($name:ident => $f:ident),* $(,)?) => {$(
        pub fn $name(&self, v: Value<'c>, to: Type<'c>) -> Value<'c> {
            // SAFETY: cast legality checked by the module verifier.
            Value::new(unsafe { $f(self.raw, v.raw, to.raw, EMPTY) })
        }
    )*};
}

impl<'c> Builder<'c> {
    pub fn position_at_end(&self, bb: Block<'c>) {
        // SAFETY: live builder and block.
        unsafe { LLVMPositionBuilderAtEnd(self.raw, bb.raw) }
    }
    pub fn current_block(&self) -> Block<'c> {
        // SAFETY: builder is positioned.
        Block {
            raw: unsafe { LLVMGetInsertBlock(self.raw) },
            _c: PhantomData,
        }
    }
    binop! {
        add => LLVMBuildAdd, sub => LLVMBuildSub, mul => LLVMBuildMul,
        sdiv => LLVMBuildSDiv, udiv => LLVMBuildUDiv, srem => LLVMBuildSRem, urem => LLVMBuildURem,
        fadd => LLVMBuildFAdd, fsub => LLVMBuildFSub, fmul => LLVMBuildFMul, fdiv => LLVMBuildFDiv,
        and => LLVMBuildAnd, or => LLVMBuildOr, xor => LLVMBuildXor,
        shl => LLVMBuildShl, ashr => LLVMBuildAShr,
    }
    castop! {
        sext => LLVMBuildSExt, zext => LLVMBuildZExt, trunc => LLVMBuildTrunc,
        sitofp => LLVMBuildSIToFP, uitofp => LLVMBuildUIToFP,
        fptrunc => LLVMBuildFPTrunc, fpext => LLVMBuildFPExt, bitcast => LLVMBuildBitCast,
    }
    pub fn icmp(&self, p: LLVMIntPredicate, a: Value<'c>, b: Value<'c>) -> Value<'c> {
        // SAFETY: integer operands of one type.
        Value::new(unsafe { LLVMBuildICmp(self.raw, p, a.raw, b.raw, EMPTY) })
    }
    pub fn fcmp(&self, p: LLVMRealPredicate, a: Value<'c>, b: Value<'c>) -> Value<'c> {
        // SAFETY: float operands of one type.
        Value::new(unsafe { LLVMBuildFCmp(self.raw, p, a.raw, b.raw, EMPTY) })
    }
    pub fn select(&self, c: Value<'c>, t: Value<'c>, f: Value<'c>) -> Value<'c> {
        // SAFETY: i1 (or vector of i1) condition, same-typed arms.
        Value::new(unsafe { LLVMBuildSelect(self.raw, c.raw, t.raw, f.raw, EMPTY) })
    }
    pub fn not(&self, v: Value<'c>) -> Value<'c> {
        // SAFETY: integer operand.
        Value::new(unsafe { LLVMBuildNot(self.raw, v.raw, EMPTY) })
    }
    /// `freeze`: a poison (or undef) input becomes some fixed value of its type.
    pub fn freeze(&self, v: Value<'c>) -> Value<'c> {
        // SAFETY: any first-class operand.
        Value::new(unsafe { LLVMBuildFreeze(self.raw, v.raw, EMPTY) })
    }
    pub fn fneg(&self, v: Value<'c>) -> Value<'c> {
        // SAFETY: float operand.
        Value::new(unsafe { LLVMBuildFNeg(self.raw, v.raw, EMPTY) })
    }
    pub fn br(&self, bb: Block<'c>) {
        // SAFETY: positioned builder.
        unsafe { LLVMBuildBr(self.raw, bb.raw) };
    }
    pub fn cond_br(&self, c: Value<'c>, t: Block<'c>, f: Block<'c>) {
        // SAFETY: i1 condition.
        unsafe { LLVMBuildCondBr(self.raw, c.raw, t.raw, f.raw) };
    }
    pub fn ret(&self, v: Value<'c>) {
        // SAFETY: value matches the function's return type (verified).
        unsafe { LLVMBuildRet(self.raw, v.raw) };
    }
    pub fn ret_void(&self) {
        // SAFETY: positioned builder in a void function (verified).
        unsafe { LLVMBuildRetVoid(self.raw) };
    }
    pub fn phi(&self, ty: Type<'c>) -> Value<'c> {
        // SAFETY: positioned builder.
        Value::new(unsafe { LLVMBuildPhi(self.raw, ty.raw, EMPTY) })
    }
    pub fn alloca(&self, ty: Type<'c>, n: Value<'c>, align: u32) -> Value<'c> {
        // SAFETY: `n` is an integer count.
        unsafe {
            let a = LLVMBuildArrayAlloca(self.raw, ty.raw, n.raw, EMPTY);
            LLVMSetAlignment(a, align);
            Value::new(a)
        }
    }
    pub fn load(&self, ty: Type<'c>, ptr: Value<'c>, align: u32) -> Value<'c> {
        // SAFETY: `ptr` is a pointer value; the access itself is proven in bounds by the
        // bounds checker before codegen.
        unsafe {
            let l = LLVMBuildLoad2(self.raw, ty.raw, ptr.raw, EMPTY);
            LLVMSetAlignment(l, align);
            Value::new(l)
        }
    }
    /// Relaxed (monotonic) atomic i32 load, for the abort flag.
    pub fn load_atomic_i32(&self, ty: Type<'c>, ptr: Value<'c>) -> Value<'c> {
        // SAFETY: as `load`; monotonic ordering on an aligned i32.
        unsafe {
            let l = LLVMBuildLoad2(self.raw, ty.raw, ptr.raw, EMPTY);
            LLVMSetAlignment(l, 4);
            LLVMSetOrdering(l, llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic);
            Value::new(l)
        }
    }
    pub fn store(&self, v: Value<'c>, ptr: Value<'c>, align: u32) {
        // SAFETY: see `load`.
        unsafe {
            let s = LLVMBuildStore(self.raw, v.raw, ptr.raw);
            LLVMSetAlignment(s, align);
        }
    }
    /// `getelementptr inbounds elem, ptr, idx`.
    pub fn gep(&self, elem: Type<'c>, ptr: Value<'c>, idx: Value<'c>) -> Value<'c> {
        let mut i = [idx.raw];
        // SAFETY: single integer (or vector of integers) index.
        Value::new(unsafe {
            LLVMBuildInBoundsGEP2(self.raw, elem.raw, ptr.raw, i.as_mut_ptr(), 1, EMPTY)
        })
    }
    /// `getelementptr elem, ptr, idx` without `inbounds` (address arithmetic only; used for
    /// masked-off lanes whose index may be out of range).
    pub fn gep_plain(&self, elem: Type<'c>, ptr: Value<'c>, idx: Value<'c>) -> Value<'c> {
        let mut i = [idx.raw];
        // SAFETY: single integer (or vector of integers) index.
        Value::new(unsafe { LLVMBuildGEP2(self.raw, elem.raw, ptr.raw, i.as_mut_ptr(), 1, EMPTY) })
    }
    pub fn call(&self, fn_ty: Type<'c>, f: Value<'c>, args: &[Value<'c>]) -> Value<'c> {
        let mut a: Vec<LLVMValueRef> = args.iter().map(|v| v.raw).collect();
        // SAFETY: argument list matches `fn_ty` (verified).
        Value::new(unsafe {
            LLVMBuildCall2(
                self.raw,
                fn_ty.raw,
                f.raw,
                a.as_mut_ptr(),
                a.len() as c_uint,
                EMPTY,
            )
        })
    }
    /// Call an intrinsic declaration (its function type is read from the declaration).
    pub fn call_fn(&self, f: Value<'c>, args: &[Value<'c>]) -> Value<'c> {
        // SAFETY: `f` is a function declaration.
        let ty = Type {
            raw: unsafe { LLVMGlobalGetValueType(f.raw) },
            _c: PhantomData,
        };
        self.call(ty, f, args)
    }
    pub fn extract(&self, v: Value<'c>, i: Value<'c>) -> Value<'c> {
        // SAFETY: vector operand, integer index.
        Value::new(unsafe { LLVMBuildExtractElement(self.raw, v.raw, i.raw, EMPTY) })
    }
    pub fn insert(&self, v: Value<'c>, x: Value<'c>, i: Value<'c>) -> Value<'c> {
        // SAFETY: vector operand, element of its type, integer index.
        Value::new(unsafe { LLVMBuildInsertElement(self.raw, v.raw, x.raw, i.raw, EMPTY) })
    }
    pub fn shuffle(&self, a: Value<'c>, b: Value<'c>, mask: Value<'c>) -> Value<'c> {
        // SAFETY: constant mask vector.
        Value::new(unsafe { LLVMBuildShuffleVector(self.raw, a.raw, b.raw, mask.raw, EMPTY) })
    }
}

pub use llvm_sys::LLVMIntPredicate::*;
pub use llvm_sys::LLVMRealPredicate::*;
pub use llvm_sys::{
    LLVMFastMathAllowContract as FM_CONTRACT, LLVMFastMathAllowReassoc as FM_REASSOC,
    LLVMFastMathNoSignedZeros as FM_NSZ,
};
