//! `layout_transform` between the 4-D data layouts ttdb's frontend uses: NCHW, NCHW[x]c and
//! NHWC (TOPI `layout_transform`, stage `T_layout_trans`, axes `ax0..`). A glue kernel of a
//! run model, never a tuned one: Ansor does not tune injective ops.
use super::util::{axes, check, vars};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

/// A 4-D data layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataLayout {
    Nchw,
    /// NCHW[x]c with this block.
    Nchwc(i64),
    Nhwc,
}

impl DataLayout {
    /// The physical shape of a logical NCHW shape.
    pub fn physical(self, [n, c, h, w]: [i64; 4]) -> Vec<i64> {
        match self {
            DataLayout::Nchw => vec![n, c, h, w],
            DataLayout::Nchwc(b) => vec![n, c / b, h, w, b],
            DataLayout::Nhwc => vec![n, h, w, c],
        }
    }

    /// The logical (n, c, h, w) of a physical index.
    fn logical(self, p: &[Expr]) -> [Expr; 4] {
        match self {
            DataLayout::Nchw => [p[0].clone(), p[1].clone(), p[2].clone(), p[3].clone()],
            DataLayout::Nchwc(b) => [
                p[0].clone(),
                p[1].clone() * b + p[4].clone(),
                p[2].clone(),
                p[3].clone(),
            ],
            DataLayout::Nhwc => [p[0].clone(), p[3].clone(), p[1].clone(), p[2].clone()],
        }
    }

    /// The physical index of a logical (n, c, h, w).
    fn index(self, [n, c, h, w]: [Expr; 4]) -> Vec<Expr> {
        match self {
            DataLayout::Nchw => vec![n, c, h, w],
            DataLayout::Nchwc(b) => {
                vec![n, Expr::floordiv(c.clone(), b), h, w, Expr::floormod(c, b)]
            }
            DataLayout::Nhwc => vec![n, h, w, c],
        }
    }
}

/// `data` (laid out as `src`, logical NCHW shape `logical`) laid out as `dst`.
pub fn layout_transform(
    b: &mut DagBuilder,
    data: &Tensor,
    logical: [i64; 4],
    src: DataLayout,
    dst: DataLayout,
) -> Result<Tensor, BuildError> {
    let c = logical[1];
    for l in [src, dst] {
        if let DataLayout::Nchwc(block) = l {
            check(block > 0 && c % block == 0, || {
                format!("{c} channels do not split into blocks of {block}")
            })?;
        }
    }
    check(data.shape == src.physical(logical), || {
        format!(
            "layout_transform input {:?} is not {logical:?} laid out as {src:?}",
            data.shape
        )
    })?;
    let ax = axes("ax", &dst.physical(logical));
    let index = src.index(dst.logical(&vars(&ax)));
    Ok(b.elementwise("T_layout_trans", "injective", ax, |_| data.at(index)))
}

#[cfg(test)]
#[allow(clippy::identity_op)] // coordinates spelled out
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    fn transform(
        src: DataLayout,
        dst: DataLayout,
        x: &TensorData,
        logical: [i64; 4],
    ) -> TensorData {
        let mut b = DagBuilder::new();
        let data = b.placeholder("data", &x.shape, DType::Float(32));
        let out = layout_transform(&mut b, &data, logical, src, dst).unwrap();
        let dag = b.finish(&[&out]);
        evaluate(&dag, std::slice::from_ref(x)).unwrap().remove(0)
    }

    #[test]
    fn blockings_convert_through_every_layout_and_back() {
        let logical = [1, 8, 2, 3];
        let n: i64 = logical.iter().product();
        let x = TensorData::new(&logical, (0..n).map(|i| i as f64).collect());
        let path = [
            DataLayout::Nchwc(4),
            DataLayout::Nchwc(2),
            DataLayout::Nhwc,
            DataLayout::Nchwc(8),
            DataLayout::Nchw,
        ];
        let mut cur = x.clone();
        let mut from = DataLayout::Nchw;
        for to in path {
            cur = transform(from, to, &cur, logical);
            assert_eq!(cur.shape, to.physical(logical));
            from = to;
        }
        assert_eq!(cur, x);
        // NCHW4c element (0, 1, 1, 2, 3) is logical (0, 7, 1, 2)
        let blocked = transform(DataLayout::Nchw, DataLayout::Nchwc(4), &x, logical);
        let at = (((1 * 2 + 1) * 3 + 2) * 4 + 3) as usize;
        assert_eq!(blocked.data[at], ((7 * 2 + 1) * 3 + 2) as f64);
    }

    #[test]
    fn a_block_that_does_not_divide_the_channels_is_refused() {
        let mut b = DagBuilder::new();
        let data = b.placeholder("data", &[1, 6, 2, 2], DType::Float(32));
        let e = layout_transform(
            &mut b,
            &data,
            [1, 6, 2, 2],
            DataLayout::Nchw,
            DataLayout::Nchwc(4),
        )
        .unwrap_err();
        assert!(e.0.contains("blocks of 4"), "{}", e.0);
    }
}
