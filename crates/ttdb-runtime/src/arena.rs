//! The static memory plan of a model: every intermediate tensor gets an offset in one arena,
//! and two tensors share bytes only when their lifetimes do not overlap.
//!
//! A tensor lives from the step that writes it to the last step that reads it, both
//! included: a kernel never writes its output over one of its own inputs. Placement is
//! greedy by size, largest first, each at the lowest aligned offset that is free for its
//! whole lifetime (the "greedy by size" plan of TFLite's arena planner; TVM's
//! StorageRewrite plans the same way per function). The plan is deterministic.

/// One intermediate tensor: its size and the steps that write and last read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub bytes: usize,
    /// The step that writes it.
    pub first: usize,
    /// The last step that reads it (`>= first`; a graph output lives to the last step).
    pub last: usize,
}

impl Lifetime {
    fn overlaps(&self, o: &Lifetime) -> bool {
        self.first <= o.last && o.first <= self.last
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Byte offset of each tensor in the arena, in the order given.
    pub offsets: Vec<usize>,
    /// The arena's size: the end of the highest placed tensor.
    pub peak: usize,
    /// What the tensors would take without reuse (each rounded up to the alignment).
    pub sum: usize,
}

/// Places `tensors` in one arena; every offset is a multiple of `align` (a power of two).
pub fn plan(tensors: &[Lifetime], align: usize) -> ArenaPlan {
    assert!(
        align.is_power_of_two(),
        "alignment {align} is not a power of two"
    );
    let round = |b: usize| b.div_ceil(align) * align;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    // Largest first; ties by earlier start, then index, so the plan is deterministic.
    order.sort_by_key(|&i| (std::cmp::Reverse(tensors[i].bytes), tensors[i].first, i));
    let mut offsets = vec![0usize; tensors.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(tensors.len());
    let mut peak = 0;
    for i in order {
        let t = &tensors[i];
        let size = round(t.bytes);
        // The byte ranges taken, during this tensor's life, by those already placed.
        let mut taken: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| tensors[j].overlaps(t))
            .map(|&j| (offsets[j], offsets[j] + round(tensors[j].bytes)))
            .collect();
        taken.sort_unstable();
        let mut at = 0;
        for (start, end) in taken {
            if start >= at + size {
                break;
            }
            at = at.max(end);
        }
        offsets[i] = at;
        peak = peak.max(at + size);
        placed.push(i);
    }
    ArenaPlan {
        offsets,
        peak,
        sum: tensors.iter().map(|t| round(t.bytes)).sum(),
    }
}

/// The arena's memory: one zeroed block aligned to [`ALIGN`] bytes, allocated once and
/// reused by every run of the model.
pub struct Block {
    ptr: *mut u8,
    layout: Option<std::alloc::Layout>,
}

/// The alignment of the arena and of every tensor in it: a cache line, and a whole vector
/// on every x86 ISA ttdb targets.
pub const ALIGN: usize = 64;

// SAFETY: plain owned heap memory, no interior references.
unsafe impl Send for Block {}

impl Block {
    /// A zeroed block of `bytes` bytes; None when the allocator refuses.
    pub fn new(bytes: usize) -> Option<Block> {
        if bytes == 0 {
            return Some(Block {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                layout: None,
            });
        }
        let layout = std::alloc::Layout::from_size_align(bytes, ALIGN).ok()?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(Block {
            ptr,
            layout: Some(layout),
        })
    }
    pub fn len(&self) -> usize {
        self.layout.map_or(0, |l| l.size())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The address `offset` bytes in; None past the end (an offset equal to the length is
    /// allowed only for an empty tensor).
    pub fn at(&mut self, offset: usize, bytes: usize) -> Option<*mut u8> {
        let end = offset.checked_add(bytes)?;
        // SAFETY: offset <= end <= len, inside the allocation (or zero on a dangling one).
        (end <= self.len()).then(|| unsafe { self.ptr.add(offset) })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(l) = self.layout {
            // SAFETY: allocated with this layout in `new`.
            unsafe { std::alloc::dealloc(self.ptr, l) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn life(bytes: usize, first: usize, last: usize) -> Lifetime {
        Lifetime { bytes, first, last }
    }

    #[test]
    fn a_block_hands_out_only_ranges_inside_it() {
        let mut b = Block::new(256).unwrap();
        assert_eq!(b.len(), 256);
        let p = b.at(0, 256).unwrap();
        assert_eq!(p as usize % ALIGN, 0);
        assert!(b.at(192, 64).is_some());
        assert!(b.at(193, 64).is_none());
        assert!(b.at(usize::MAX, 2).is_none());
        let mut empty = Block::new(0).unwrap();
        assert!(empty.at(0, 0).is_some());
        assert!(empty.at(0, 1).is_none());
    }

    #[test]
    fn a_chain_reuses_memory_two_tensors_at_a_time() {
        // a -> b -> c -> d: each step reads one tensor and writes the next.
        let ts = [
            life(100, 0, 1),
            life(100, 1, 2),
            life(100, 2, 3),
            life(100, 3, 3),
        ];
        let p = plan(&ts, 64);
        assert_eq!(p.sum, 4 * 128);
        assert_eq!(p.peak, 2 * 128);
        assert_ne!(p.offsets[0], p.offsets[1]);
        assert_eq!(p.offsets[0], p.offsets[2]);
    }

    #[test]
    fn a_residual_keeps_its_input_alive() {
        // x is read at steps 1 and 3 (the skip connection).
        let ts = [
            life(64, 0, 3),
            life(64, 1, 2),
            life(64, 2, 3),
            life(64, 3, 3),
        ];
        let p = plan(&ts, 64);
        assert_eq!(p.peak, 3 * 64);
    }

    fn live_bytes_lower_bound(ts: &[Lifetime], align: usize) -> usize {
        let steps = ts.iter().map(|t| t.last).max().unwrap_or(0);
        (0..=steps)
            .map(|s| {
                ts.iter()
                    .filter(|t| t.first <= s && s <= t.last)
                    .map(|t| t.bytes.div_ceil(align) * align)
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0)
    }

    proptest! {
        #[test]
        fn tensors_alive_together_never_share_bytes(
            raw in proptest::collection::vec((1usize..5000, 0usize..20, 0usize..6), 0..40)
        ) {
            let ts: Vec<Lifetime> = raw.iter().map(|&(b, f, len)| life(b, f, f + len)).collect();
            let p = plan(&ts, 64);
            for (i, a) in ts.iter().enumerate() {
                prop_assert_eq!(p.offsets[i] % 64, 0);
                prop_assert!(p.offsets[i] + a.bytes <= p.peak);
                for (j, b) in ts.iter().enumerate().skip(i + 1) {
                    if a.overlaps(b) {
                        let disjoint = p.offsets[i] + a.bytes <= p.offsets[j]
                            || p.offsets[j] + b.bytes <= p.offsets[i];
                        prop_assert!(disjoint, "{:?}@{} and {:?}@{}", a, p.offsets[i], b, p.offsets[j]);
                    }
                }
            }
            prop_assert!(p.peak <= p.sum);
            prop_assert!(p.peak >= live_bytes_lower_bound(&ts, 64));
            prop_assert_eq!(plan(&ts, 64), p);
        }
    }
}
