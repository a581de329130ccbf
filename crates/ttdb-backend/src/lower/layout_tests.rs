//! Tests of the layout derivation and the packing ([`super`]).
use super::*;

/// The run-time packing kernel computes what the load-time packing does, holes included.
#[test]
fn pack_dag_agrees_with_pack_weight() {
    let dim = |axis, name: &str, extent, div| PackedDim {
        axis,
        name: name.into(),
        extent,
        div,
    };
    let layout = |shape: &[i64], names: &[&str], dims, split| PackedWeight {
        tensor: TensorId(1),
        input: 1,
        consumer: "c".into(),
        orig_shape: shape.to_vec(),
        orig_names: names.iter().map(|s| s.to_string()).collect(),
        dims,
        split,
    };
    // packs 1, 2, 3, ... (in the DAG's layout) both ways, which must agree
    let packed = |layout: &PackedWeight| -> Vec<f64> {
        let n = layout.orig_shape.iter().product::<i64>();
        let values = (0..n).map(|i| i as f64 + 1.0).collect();
        let original = TensorData::new(&layout.orig_shape, values);
        let dag = pack_dag(layout, ir::DType::F32);
        let got = ir::eval::evaluate(&dag, std::slice::from_ref(&original)).unwrap();
        let want = pack_weight(layout, &original);
        assert_eq!(got[0].shape, want.shape);
        assert_eq!(got[0].data, want.data);
        want.data
    };
    // a [2, 5, 6] batch_matmul operand: j in tiles of 4 over 5 (a hole), k split 3 x 2
    let dims = vec![
        dim(0, "b", 2, 1),
        dim(1, "j", 2, 4),
        dim(2, "k", 3, 2),
        dim(1, "j", 4, 1),
        dim(2, "k", 2, 1),
    ];
    let data = packed(&layout(&[2, 5, 6], &["b", "j", "k"], dims, None));
    assert!(data.contains(&0.0), "the layout has holes");

    // an NCHWc kernel [oc 2, ic/ib 2, ib 3]: ic (6) packed whole, in tiles of 4 (a hole)
    let split = |outer, inner, block| {
        Some(SplitAxis {
            outer,
            inner,
            block,
        })
    };
    let dims = vec![dim(1, "ic", 2, 4), dim(0, "oc", 2, 1), dim(1, "ic", 4, 1)];
    let data = packed(&layout(
        &[2, 2, 3],
        &["oc", "ic", "ic"],
        dims,
        split(1, 2, 3),
    ));
    // packed [ic.0][oc][ic.1]: ic = 4 ic.0 + ic.1 is element [oc][ic / 3][ic % 3], 1 + 6 oc + ic
    let want = [1, 2, 3, 4, 7, 8, 9, 10, 5, 6, 0, 0, 11, 12, 0, 0];
    assert_eq!(data, want.map(f64::from));

    // larger than one of pack_values' parallel runs (16384 values), split and holes:
    // an NCHWc kernel [oc 6, ic/ib 5, kh 3, ib 16, ob 16], ic (80) in tiles of 3 x 27
    let dims = vec![
        dim(0, "oc_chunk", 6, 1),
        dim(1, "ic", 3, 27),
        dim(2, "kh", 3, 1),
        dim(1, "ic", 27, 1),
        dim(4, "oc_block", 16, 1),
    ];
    let names = ["oc_chunk", "ic", "kh", "ic", "oc_block"];
    let data = packed(&layout(&[6, 5, 3, 16, 16], &names, dims, split(1, 3, 16)));
    assert!(data.len() > 16384 && data.contains(&0.0));
}

#[test]
fn names_like_tvm() {
    assert_eq!(original_iterators("ff.0"), ["ff"]);
    assert_eq!(original_iterators("i_c.3"), ["i_c"]);
    assert_eq!(original_iterators("nn.0@yy.0@"), ["nn", "yy"]);
    assert_eq!(original_iterators("k_o"), ["k_o"]);
    assert_eq!(axis_base_name("j.c"), "j");
    assert_eq!(axis_base_name("i_c"), "i");
    assert_eq!(axis_base_name("ff"), "ff");
}

fn weight(shape: &[i64], names: &[&str], dims: &[(usize, i64)]) -> PackedWeight {
    let mut d: Vec<PackedDim> = dims
        .iter()
        .map(|&(axis, extent)| PackedDim {
            axis,
            name: names[axis].into(),
            extent,
            div: 1,
        })
        .collect();
    let mut acc: HashMap<usize, i64> = HashMap::new();
    for x in d.iter_mut().rev() {
        let a = acc.entry(x.axis).or_insert(1);
        x.div = *a;
        *a *= x.extent;
    }
    PackedWeight {
        tensor: TensorId(1),
        input: 1,
        consumer: "c".into(),
        orig_shape: shape.to_vec(),
        orig_names: names.iter().map(|s| s.to_string()).collect(),
        split: None,
        dims: d,
    }
}

/// Packing then reading through the rewritten index gives the original element, padded
/// tiles included.
#[test]
fn pack_and_index_agree() {
    // [3, 7] (axes a, b) -> 2b 2a 4b 2a: b padded to 8, a padded to 4
    let w = weight(&[3, 7], &["a", "b"], &[(1, 2), (0, 2), (1, 4), (0, 2)]);
    assert_eq!(w.new_layout(), "2b2a4b2a");
    assert_eq!(w.orig_layout(), "3a7b");
    let orig = TensorData::new(&[3, 7], (0..21).map(|x| x as f64 + 1.0).collect());
    let packed = pack_weight(&w, &orig);
    assert_eq!(packed.shape, vec![2, 2, 4, 2]);
    assert_eq!(packed.data.iter().filter(|&&x| x == 0.0).count(), 32 - 21);
    let strides = [16i64, 8, 2, 1];
    for a in 0..3 {
        for b in 0..7 {
            let idx = w.index(&[Expr::int(a), Expr::int(b)]);
            let flat: i64 = idx
                .iter()
                .zip(strides)
                .map(|(e, s)| crate::loopnest::simplify_expr(e).as_int().unwrap() * s)
                .sum();
            assert_eq!(packed.data[flat as usize], orig.data[(a * 7 + b) as usize]);
        }
    }
}

#[test]
fn folding_uses_loop_ranges() {
    let r: HashMap<String, (i128, i128)> = [
        ("f0".to_string(), (0, 1)),
        ("f1".to_string(), (0, 31)),
        ("f3".to_string(), (0, 7)),
    ]
    .into_iter()
    .collect();
    // ff = f0*256 + f1*8 + f3 in 2ff 32ff 1ff 8ff
    let w = weight(&[512], &["ff"], &[(0, 2), (0, 32), (0, 1), (0, 8)]);
    let ff = Expr::add(
        Expr::add(
            Expr::mul(Expr::var("f0"), Expr::int(256)),
            Expr::mul(Expr::var("f1"), Expr::int(8)),
        ),
        Expr::var("f3"),
    );
    let got: Vec<String> = w
        .index(&[ff])
        .iter()
        .map(|e| crate::loopnest::printer::expr_to_string(&fold_index(e, &r)))
        .collect();
    assert_eq!(got, ["f0", "f1", "0", "f3"]);
    // not provable: kept
    let x = Expr::floormod(Expr::var("f1"), Expr::int(8));
    assert!(matches!(fold_index(&x, &r), Expr::Bin(BinOp::FloorMod, ..)));
    let y = Expr::floordiv(Expr::add(Expr::var("f3"), Expr::int(16)), Expr::int(8));
    assert_eq!(fold_index(&y, &r).as_int(), Some(2));
}
