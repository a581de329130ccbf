//! Lane masks of vector bodies: lane-varying `if`s (with a fast path for full and empty
//! vectors) and the memory operations that honour masks (masked load and store, gather,
//! scatter). What a mask means, and what an inactive lane may read, write and hold:
//! `vector.rs`'s module doc.

use super::llvm::*;
use super::translate::Tr;
use crate::loopnest::ir::Stmt;

impl<'c> Tr<'c, '_> {
    /// `then_` on the lanes of `c`, `else_` on the others, each arm masked (under `mask`).
    pub(super) fn masked_if(
        &mut self,
        c: Value<'c>,
        mask: Option<Value<'c>>,
        then_: &Stmt,
        else_: Option<&Stmt>,
    ) -> Result<(), String> {
        let (mt, mf) = self.arm_masks(c, mask);
        self.vec.as_mut().unwrap().mask = Some(mt);
        let mut r = self.vstmt(then_);
        if let (Ok(()), Some(e)) = (&r, else_) {
            self.vec.as_mut().unwrap().mask = Some(mf);
            r = self.vstmt(e);
        }
        self.vec.as_mut().unwrap().mask = mask;
        r
    }

    /// A lane-varying `if` entered from unmasked code: a vector whose lanes all take one arm
    /// runs that arm unmasked (plain vector loads and stores) and skips the other; only a
    /// mixed one pays for masks. Not again inside the arms it emits (code size).
    pub(super) fn unmasked_if(
        &mut self,
        c: Value<'c>,
        then_: &Stmt,
        else_: Option<&Stmt>,
    ) -> Result<(), String> {
        if c.is_constant() {
            // A mask known at compile time (an unrolled tile); LLVM uniques constants.
            return if c == self.all_true() {
                self.vstmt(then_)
            } else if c == c.ty().null() {
                else_.map_or(Ok(()), |e| self.vstmt(e))
            } else {
                self.masked_if(c, None, then_, else_)
            };
        }
        let func = self.fx.func;
        let block = |t: &Self, name: &str| t.cx.append_block(func, name);
        let (full, some, mixed, join) = (
            block(self, "vfull"),
            block(self, "vsome"),
            block(self, "vmixed"),
            block(self, "vjoin"),
        );
        let empty = if else_.is_some() {
            block(self, "vempty")
        } else {
            join
        };
        let all = self.reduce("llvm.vector.reduce.and", c)?;
        self.b.cond_br(all, full, some);
        self.b.position_at_end(some);
        let any = self.reduce("llvm.vector.reduce.or", c)?;
        self.b.cond_br(any, mixed, empty);
        self.vec.as_mut().unwrap().fast_path = false;
        let r = (|| {
            self.b.position_at_end(full);
            self.scoped(|t| t.vstmt(then_))?;
            self.b.br(join);
            self.b.position_at_end(mixed);
            self.scoped(|t| t.masked_if(c, None, then_, else_))?;
            self.b.br(join);
            if let Some(e) = else_ {
                self.b.position_at_end(empty);
                self.scoped(|t| t.vstmt(e))?;
                self.b.br(join);
            }
            Ok(())
        })();
        self.vec.as_mut().unwrap().fast_path = true;
        self.b.position_at_end(join);
        r
    }

    /// The i1 reduction `name` (`llvm.vector.reduce.and` / `.or`) of the mask `m`.
    fn reduce(&mut self, name: &str, m: Value<'c>) -> Result<Value<'c>, String> {
        let f = self.m.intrinsic(name, &[m.ty()]).ok_or(name)?;
        Ok(self.b.call_fn(f, &[m]))
    }

    /// The active lanes of the arms of a lane-varying condition `c` under `mask`: (then, else).
    /// `select(m, c, false)`, not `and`: `and false, poison` is poison, the select is false.
    pub(super) fn arm_masks(
        &self,
        c: Value<'c>,
        mask: Option<Value<'c>>,
    ) -> (Value<'c>, Value<'c>) {
        let not_c = self.b.not(c);
        match mask {
            Some(m) => {
                let off = c.ty().null();
                (self.b.select(m, c, off), self.b.select(m, not_c, off))
            }
            None => (c, not_c),
        }
    }

    pub(super) fn all_true(&self) -> Value<'c> {
        let t = self.cx.i1().const_int(1);
        Value::const_vector(&vec![t; self.lanes() as usize])
    }

    /// The mask over a span of `span` elements from `lo` in which element j is active when an
    /// active lane of `mask` reads it (lane l reads `offs[l]`): one shuffle of the mask per
    /// lane reading the same element, or-ed.
    pub(super) fn span_mask(
        &mut self,
        mask: Value<'c>,
        offs: &[i64],
        lo: i64,
        span: usize,
    ) -> Value<'c> {
        let lanes = offs.len() as u32;
        let mut readers: Vec<Vec<u32>> = vec![Vec::new(); span];
        for (l, &o) in offs.iter().enumerate() {
            readers[(o - lo) as usize].push(l as u32);
        }
        let most = readers.iter().map(Vec::len).max().unwrap_or(0);
        let off = Value::const_vector(&vec![self.cx.i1().const_int(0); lanes as usize]);
        let mut acc: Option<Value<'c>> = None;
        for k in 0..most {
            // Index `lanes` picks the first (inactive) lane of `off`.
            let pick: Vec<u32> = readers
                .iter()
                .map(|r| r.get(k).copied().unwrap_or(lanes))
                .collect();
            let pick = self.shuffle_mask(&pick);
            let m = self.b.shuffle(mask, off, pick);
            acc = Some(match acc {
                None => m,
                Some(a) => self.b.or(a, m),
            });
        }
        acc.expect("at least one lane")
    }

    /// A `vt` from `p` (inactive lanes of `mask` are not read).
    pub(super) fn masked_load(
        &mut self,
        vt: Type<'c>,
        p: Value<'c>,
        align: Value<'c>,
        mask: Value<'c>,
    ) -> Result<Value<'c>, String> {
        let f = self
            .m
            .intrinsic("llvm.masked.load", &[vt, p.ty()])
            .ok_or("masked.load")?;
        Ok(self.b.call_fn(f, &[p, align, mask, vt.null()]))
    }

    /// A `vt` from the lanes' pointers `ptrs` (inactive lanes of `mask` are not read).
    pub(super) fn gather(
        &mut self,
        vt: Type<'c>,
        ptrs: Value<'c>,
        align: Value<'c>,
        mask: Option<Value<'c>>,
    ) -> Result<Value<'c>, String> {
        let f = self
            .m
            .intrinsic("llvm.masked.gather", &[vt, ptrs.ty()])
            .ok_or("masked.gather")?;
        let m = mask.unwrap_or_else(|| self.all_true());
        Ok(self.b.call_fn(f, &[ptrs, align, m, vt.null()]))
    }

    /// Store `v` at `p` (inactive lanes of `mask` are not written).
    pub(super) fn store(
        &mut self,
        v: Value<'c>,
        p: Value<'c>,
        bytes: usize,
        mask: Option<Value<'c>>,
    ) -> Result<(), String> {
        let Some(m) = mask else {
            self.b.store(v, p, bytes as u32);
            return Ok(());
        };
        let f = self
            .m
            .intrinsic("llvm.masked.store", &[v.ty(), p.ty()])
            .ok_or("masked.store")?;
        let align = self.cx.i32().const_int(bytes as i64);
        self.b.call_fn(f, &[v, p, align, m]);
        Ok(())
    }

    /// Store `v` at the lanes' pointers `ptrs` (inactive lanes of `mask` are not written).
    pub(super) fn scatter(
        &mut self,
        v: Value<'c>,
        ptrs: Value<'c>,
        bytes: usize,
        mask: Option<Value<'c>>,
    ) -> Result<(), String> {
        let f = self
            .m
            .intrinsic("llvm.masked.scatter", &[v.ty(), ptrs.ty()])
            .ok_or("masked.scatter")?;
        let mask = mask.unwrap_or_else(|| self.all_true());
        let align = self.cx.i32().const_int(bytes as i64);
        self.b.call_fn(f, &[v, ptrs, align, mask]);
        Ok(())
    }
}
