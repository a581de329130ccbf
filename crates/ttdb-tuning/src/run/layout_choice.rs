//! `ttdb run --layout auto`: the layout whose kernels the database has schedules for.
//!
//! A database holds a model's schedules in the layout they were tuned or logged in: TVM's
//! x86 tutorials tune NHWC, ttdb's own tune defaults to NCHWc. Running in the other layout
//! finds none of them and runs every kernel on its default schedule, so `run` and `build`
//! look before they choose: for each candidate layout, the FLOPs (times repeats) of the
//! tuned kernels whose schedule `run` would take from the database; the most covered wins,
//! the first on a tie (no database, or no schedule in either: NCHWc, TVM's x86 default).
use crate::matcher::MatchOptions;
use crate::tune::export::{stored_flops, ForHost};
use ttdb_backend::target::Target;
use ttdb_onnx::onnx::{self, Graph, LayoutMode, Options};
use ttdb_store::store::Store;

/// One candidate's coverage: the FLOPs of the tuned kernels with a stored schedule (each
/// counted as often as it repeats) and of all tuned kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct LayoutCoverage {
    pub layout: LayoutMode,
    pub stored_flops: f64,
    pub tuned_flops: f64,
}

/// The coverage of each of `layouts` (in order) by `store`'s schedules for `target`.
pub fn layout_coverage(
    store: &Store,
    graph: &Graph,
    extract: &Options,
    layouts: &[LayoutMode],
    target: &Target,
) -> Result<Vec<LayoutCoverage>, String> {
    let compat = MatchOptions::default().compat;
    let host = ForHost::of(&target.host);
    layouts
        .iter()
        .map(|&layout| {
            let options = Options {
                layout,
                ..extract.clone()
            };
            let list = onnx::extract(graph, &options).map_err(|e| e.to_string())?;
            let c = stored_flops(store, &list, &compat, &host)
                .map_err(|e| format!("the database: {e}"))?;
            Ok(LayoutCoverage {
                layout,
                stored_flops: c.stored,
                tuned_flops: c.tuned,
            })
        })
        .collect()
}

/// The best covered of `coverage` (the first on a tie); None when it is empty.
pub fn best_covered(coverage: &[LayoutCoverage]) -> Option<&LayoutCoverage> {
    coverage
        .iter()
        .fold(None, |best: Option<&LayoutCoverage>, c| match best {
            Some(b) if b.stored_flops >= c.stored_flops => Some(b),
            _ => Some(c),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cov(layout: LayoutMode, stored: f64) -> LayoutCoverage {
        LayoutCoverage {
            layout,
            stored_flops: stored,
            tuned_flops: 10.0,
        }
    }

    #[test]
    fn the_most_covered_layout_wins_and_the_first_on_a_tie() {
        let nchwc = LayoutMode::Nchwc;
        let nhwc = LayoutMode::Nhwc;
        assert_eq!(
            best_covered(&[cov(nchwc, 1.0), cov(nhwc, 2.0)])
                .unwrap()
                .layout,
            nhwc
        );
        assert_eq!(
            best_covered(&[cov(nchwc, 2.0), cov(nhwc, 1.0)])
                .unwrap()
                .layout,
            nchwc
        );
        assert_eq!(
            best_covered(&[cov(nchwc, 0.0), cov(nhwc, 0.0)])
                .unwrap()
                .layout,
            nchwc
        );
        assert!(best_covered(&[]).is_none());
    }
}
