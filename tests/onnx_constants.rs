//! Every constant a tuned kernel of a corpus model reads can be computed from the model's
//! weights (the deterministic fill where the external data was not shipped), in the layout
//! the kernel reads it: folded BatchNorms, folded scales, transposed dense weights, NCHWc and
//! NHWC weight packing, the winograd kernel transform, re-laid-out biases.
use crate::common;

use std::path::PathBuf;
use ttdb::onnx::constants::Folder;
use ttdb::onnx::weights::{read_model_weights, Values, WeightLimits};
use ttdb::onnx::{self, LayoutMode, Options};

fn models() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["torchvision_graph_only", "torchvision_more", "transformers"] {
        let d = common::corpus_dir().join("onnx").join(dir);
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            out.push(e.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn every_tuned_kernel_constant_computes_in_its_layout() {
    let opts = Options::default().with_default_tophub().unwrap();
    let mut total = 0;
    for path in models() {
        let g = onnx::load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let weights = read_model_weights(&path, &WeightLimits::default()).unwrap();
        for layout in [LayoutMode::Nchwc, LayoutMode::Nhwc, LayoutMode::Nchw] {
            let o = Options {
                layout,
                ..opts.clone()
            };
            let ex = onnx::extract_all(&g, &o).unwrap();
            let mut folder = Folder::new(&ex.folded, &ex.graph, &weights);
            let mut n = 0;
            for k in ex.group_kernels.iter().filter(|k| k.is_tuned()) {
                assert_eq!(
                    k.values.inputs.len(),
                    k.inputs.len(),
                    "{}: {}",
                    path.display(),
                    k.name
                );
                for (&v, shape) in k.values.inputs.iter().zip(&k.inputs) {
                    if !ex.graph.values[v].constant {
                        continue;
                    }
                    let c = folder.value(v).unwrap_or_else(|e| {
                        panic!("{} ({layout:?}) kernel {}: {e}", path.display(), k.name)
                    });
                    assert_eq!(&c.shape, shape, "{}: {}", path.display(), k.name);
                    if let Values::F32(x) = &c.values {
                        assert!(
                            x.iter().all(|v| v.is_finite()),
                            "{}: {}",
                            path.display(),
                            k.name
                        );
                    }
                    n += 1;
                }
            }
            assert!(n > 0, "{} ({layout:?}): no constants", path.display());
            total += n;
        }
    }
    assert!(total > 1000, "only {total} constants computed");
}
