//! Lane masks of vector bodies and the memory operations that honour them (masked load and
//! store, gather, scatter). What a mask means, and what an inactive lane may read, write and
//! hold: `vector.rs`'s module doc.

use super::llvm::*;
use super::translate::Tr;

impl<'c> Tr<'c, '_> {
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
