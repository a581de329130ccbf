//! Local response normalization across channels (ONNX `LRN`, Relay `nn.lrn`): stage
//! `T_lrn_sqsum` sums the squares of a window of `size` channels around each one (the
//! window clipped at the first and last channel), stage `T_lrn` divides by
//! `(bias + alpha / size * sqsum) ^ beta`. A glue kernel of a run model (TVM does not tune it).
use super::util::{axes, check};
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, Intrinsic, IterVar, Tensor};

/// LRN's attributes, as ONNX gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrnAttrs {
    pub size: i64,
    pub alpha: f64,
    pub beta: f64,
    pub bias: f64,
}

/// LRN of `x` (axis 1 the channels, any rank from 2).
pub fn lrn(b: &mut DagBuilder, x: &Tensor, a: LrnAttrs) -> Result<Tensor, BuildError> {
    check(x.ndim() >= 2, || {
        format!("lrn needs a channel axis: {:?}", x.shape)
    })?;
    check(a.size >= 1, || format!("lrn window of {} channels", a.size))?;
    let channels = x.shape[1];
    check(channels > 0, || {
        format!("lrn of no channels: {:?}", x.shape)
    })?;
    // ONNX: channels from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2); a reach
    // past every channel reads nothing more, so it is cut to the channels (a huge size
    // stays a small loop)
    let before = ((a.size - 1) / 2).min(channels - 1);
    let after = (a.size - 1 - (a.size - 1) / 2).min(channels - 1);
    let dtype = x.dtype;
    let sqsum = b.reduce(
        "T_lrn_sqsum",
        "",
        axes("ax", &x.shape),
        vec![IterVar::new("rc", before + after + 1)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let c = v[1].clone() + r[0].clone() - before;
            let mut index = v.to_vec();
            index[1] = c.clone();
            let inside = Expr::and(Expr::ge(c.clone(), 0), Expr::lt(c, channels));
            let value = x.at(index);
            Expr::if_then_else(inside, value.clone() * value, Expr::constant(0.0, dtype))
        },
    );
    let scale = a.alpha / a.size as f64;
    Ok(b.elementwise("T_lrn", "", axes("ax", &x.shape), |v| {
        let base =
            Expr::constant(a.bias, dtype) + Expr::constant(scale, dtype) * sqsum.at(v.to_vec());
        let denom = Expr::call(Intrinsic::Pow, vec![base, Expr::constant(a.beta, dtype)]);
        Expr::div(x.at(v.to_vec()), denom)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    #[test]
    fn each_channel_is_divided_by_its_clipped_window_of_squares() {
        // one pixel, channels [1, 2, 3, 4]; size 3: windows {1,2}, {1,2,3}, {2,3,4}, {3,4}
        let x = TensorData::new(&[1, 4, 1, 1], vec![1.0, 2.0, 3.0, 4.0]);
        let a = LrnAttrs {
            size: 3,
            alpha: 0.3,
            beta: 0.5,
            bias: 2.0,
        };
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        let out = lrn(&mut b, &p, a).unwrap();
        let dag = b.finish(&[&out]);
        let y = evaluate(&dag, std::slice::from_ref(&x)).unwrap().remove(0);
        let sums: [f64; 4] = [5.0, 14.0, 29.0, 25.0];
        for (c, sum) in sums.iter().enumerate() {
            let want = x.data[c] / (2.0 + 0.1 * sum).powf(0.5);
            assert!(
                (y.data[c] - want).abs() < 1e-12,
                "channel {c}: {}",
                y.data[c]
            );
        }
        // an even window reaches one channel further up than down
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        let even = LrnAttrs { size: 2, ..a };
        let out = lrn(&mut b, &p, even).unwrap();
        let dag = b.finish(&[&out]);
        let y = evaluate(&dag, std::slice::from_ref(&x)).unwrap().remove(0);
        let want = 1.0 / (2.0 + 0.15 * 5.0f64).powf(0.5);
        assert!((y.data[0] - want).abs() < 1e-12);
        // a window wider than twice the channels sums them all
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        let huge = LrnAttrs {
            size: i64::MAX,
            ..a
        };
        let out = lrn(&mut b, &p, huge).unwrap();
        let dag = b.finish(&[&out]);
        let y = evaluate(&dag, std::slice::from_ref(&x)).unwrap().remove(0);
        let want = 4.0 / (2.0 + 0.3 / i64::MAX as f64 * 30.0).powf(0.5);
        assert!((y.data[3] - want).abs() < 1e-12);
        let mut b = DagBuilder::new();
        let flat = b.placeholder("p0", &[4], DType::F32);
        assert!(lrn(&mut b, &flat, a).is_err());
    }
}
