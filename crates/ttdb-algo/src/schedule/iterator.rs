//! Loop iterators of a state (`loop_state.h::Iterator`).
use ttdb_format::ansor::Annotation;

/// `IteratorKind`: what an iterator ranges over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IterKind {
    Spatial,
    Reduction,
    /// Made by fusing iterators of different kinds.
    Mixed,
    Special,
}

impl IterKind {
    /// The one-letter code of the state dump (`S R M X`).
    pub fn code(self) -> char {
        match self {
            IterKind::Spatial => 'S',
            IterKind::Reduction => 'R',
            IterKind::Mixed => 'M',
            IterKind::Special => 'X',
        }
    }
}

/// Identity of an iterator, stable across re-ordering, annotation and range resets: the
/// state-level image of a TE `IterVar` object. Compute-at remembers it (spec §2.4.1) so that
/// a later RE of the target cannot silently change which loop a stage lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IterIdent(pub u64);

/// One loop of a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Iterator {
    /// State name (`i.0`, `i.0@j.0@`, `k_o`), as TVM prints it.
    pub name: String,
    /// Loop extent; `None` = undefined (after CA/CR until bounds are inferred, or a
    /// non-constant extent).
    pub extent: Option<i64>,
    pub kind: IterKind,
    pub annotation: Annotation,
    /// The iterators a fuse step merged (outer to inner); empty otherwise.
    pub orig_iters: Vec<Iterator>,
    /// Name of the corresponding TE `IterVar` (`k.outer`, `i.j.fused`); it names the axes of
    /// the stages that rfactor and cache_write create.
    pub te_name: String,
    /// Indices into the stage op's `axes ++ reduce_axes` of the op axes this loop covers.
    pub source_axes: Vec<usize>,
    pub ident: IterIdent,
}

impl Iterator {
    pub fn ident(&self) -> IterIdent {
        self.ident
    }
}

/// `utils.h::CleanName`: the state name of a TE variable.
pub fn clean_name(te_name: &str) -> String {
    te_name
        .replace(['.', '@'], "_")
        .replace("outer", "o")
        .replace("inner", "i")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_name_follows_tvm() {
        assert_eq!(clean_name("k.outer"), "k_o");
        assert_eq!(clean_name("k.inner.v"), "k_i_v");
        assert_eq!(clean_name("rv0.rv1.fused.outer"), "rv0_rv1_fused_o");
        assert_eq!(clean_name("nn.c"), "nn_c");
        assert_eq!(clean_name("a@b@"), "a_b_");
        assert_eq!(clean_name("ax0"), "ax0");
    }
}
