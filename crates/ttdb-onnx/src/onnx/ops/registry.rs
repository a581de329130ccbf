//! Every ONNX op ttdb's frontend knows, one line each: a descriptor from its file; for an
//! op that is only a shape rule plus one Relay op, a [`Simple`] row right here; for an
//! activation Relay writes as several element-wise ops, an [`ActivationOp`] naming its row
//! of `ttdb_algo::ops::activation`.
//! An op type missing here is refused at shape inference with an error naming the node.
use super::activation::ActivationOp;
use super::reduce::{infer_arg, infer_reduce};
use super::Relay::{Opaque, OpaqueOnFirst, ReduceOnFirst, Relu, Tanh, Unary};
use super::*;
use ttdb_algo::ops::activation;

pub(super) static OPS: &[&dyn OnnxOp] = &[
    // anchors: the ops Ansor tunes, and what fuses into them
    &conv::Conv,
    &pool::Pool,
    &pool::GlobalPool,
    &gemm::Gemm,
    &matmul::MatMul,
    &softmax::Softmax,
    &reduce::ReduceMean,
    &batch_norm::BatchNorm,
    // element-wise, one input
    &Simple::new(&["Relu"], same_shape, Relu),
    &Simple::new(&["Tanh"], same_shape, Tanh),
    &Simple::new(&["Sigmoid"], same_shape, Unary("sigmoid")),
    &Simple::new(&["Exp"], same_shape, Unary("exp")),
    &Simple::new(&["Log"], same_shape, Unary("log")),
    &Simple::new(&["Sqrt"], same_shape, Unary("sqrt")),
    &Simple::new(&["Erf"], same_shape, Unary("erf")),
    &Simple::new(&["LeakyRelu"], same_shape, Unary("leakyrelu")),
    &Simple::new(&["Elu"], same_shape, Unary("elu")),
    &Simple::new(&["Selu"], same_shape, Unary("selu")),
    &Simple::new(&["Celu"], same_shape, Unary("celu")),
    &Simple::new(&["Neg"], same_shape, Unary("neg")),
    &Simple::new(&["Abs"], same_shape, Unary("abs")),
    &Simple::new(&["Softplus"], same_shape, Unary("softplus")),
    &Simple::new(&["Softsign"], same_shape, Unary("softsign")),
    &Simple::new(&["Floor"], same_shape, Unary("floor")),
    &Simple::new(&["Ceil"], same_shape, Unary("ceil")),
    &Simple::new(&["Round"], same_shape, Unary("round")),
    &Simple::new(&["Reciprocal"], same_shape, Unary("reciprocal")),
    &Simple::new(&["Not"], same_shape, Unary("not")),
    &Simple::new(&["Sin"], same_shape, Unary("sin")),
    &Simple::new(&["Cos"], same_shape, Unary("cos")),
    &Simple::new(&["Sign"], same_shape, Unary("sign")),
    &ActivationOp::new(&["Mish"], &activation::MISH),
    &Simple::new(&["Gelu"], same_shape, Unary("gelu")),
    &Simple::new(&["Shrink"], same_shape, Unary("shrink")),
    &Simple::new(&["ThresholdedRelu"], same_shape, Unary("thresholdedrelu")),
    &Simple::new(&["IsNaN"], same_shape, Unary("isnan")),
    &Simple::new(&["IsInf"], same_shape, Unary("isinf")),
    &clip::Clip,
    &hard_sigmoid::HardSigmoid,
    &ActivationOp::new(&["HardSwish"], &activation::HARDSWISH),
    &cast::Cast,
    // normalizations TVM does not fuse
    &lrn::Lrn,
    &Simple::new(&["LogSoftmax"], same_shape, OpaqueOnFirst("log_softmax")),
    &Simple::new(&["Hardmax"], same_shape, OpaqueOnFirst("hardmax")),
    &Simple::new(
        &["InstanceNormalization"],
        same_shape,
        OpaqueOnFirst("instancenormalization"),
    ),
    &Simple::new(
        &["LpNormalization"],
        same_shape,
        OpaqueOnFirst("lpnormalization"),
    ),
    &Simple::new(
        &["MeanVarianceNormalization"],
        same_shape,
        OpaqueOnFirst("meanvariancenormalization"),
    ),
    // element-wise, broadcasting
    &binary::Broadcast,
    &Simple::new(&["Mean"], binary::infer, Opaque("mean")),
    &Simple::new(&["LessOrEqual"], binary::infer, Opaque("lessorequal")),
    &Simple::new(&["GreaterOrEqual"], binary::infer, Opaque("greaterorequal")),
    &Simple::new(&["Xor"], binary::infer, Opaque("xor")),
    &Simple::new(&["BitShift"], binary::infer, Opaque("bitshift")),
    // pools and reductions ttdb does not tune
    &Simple::new(&["LpPool"], pool::infer_windowed, OpaqueOnFirst("lppool")),
    &Simple::new(
        &["GlobalLpPool"],
        pool::infer_global,
        OpaqueOnFirst("globallppool"),
    ),
    &Simple::new(&["ReduceSum"], infer_reduce, ReduceOnFirst("reducesum")),
    &Simple::new(&["ReduceMax"], infer_reduce, ReduceOnFirst("reducemax")),
    &Simple::new(&["ReduceMin"], infer_reduce, ReduceOnFirst("reducemin")),
    &Simple::new(&["ReduceProd"], infer_reduce, ReduceOnFirst("reduceprod")),
    &Simple::new(&["ReduceL1"], infer_reduce, ReduceOnFirst("reducel1")),
    &Simple::new(&["ReduceL2"], infer_reduce, ReduceOnFirst("reducel2")),
    &Simple::new(
        &["ReduceLogSumExp"],
        infer_reduce,
        ReduceOnFirst("reducelogsumexp"),
    ),
    &Simple::new(
        &["ReduceSumSquare"],
        infer_reduce,
        ReduceOnFirst("reducesumsquare"),
    ),
    &Simple::new(&["ArgMax"], infer_arg, ReduceOnFirst("argmax")),
    &Simple::new(&["ArgMin"], infer_arg, ReduceOnFirst("argmin")),
    // data movement
    &reshape::RESHAPE,
    &flatten::Flatten,
    &transpose::Transpose,
    &squeeze::SQUEEZE,
    &squeeze::UNSQUEEZE,
    &concat::Concat,
    &split::Split,
    &slice::Slice,
    &pad::PAD,
    &expand::EXPAND,
    &tile::TILE,
    &gather::Gather,
    &resize::RESIZE,
    // no Relay op: identities and constants
    &identity::Identity,
    &identity::Dropout,
    &constant::Constant,
    &constant::ConstantOfShape,
    &shape_of::ShapeOf,
    &shape_of::Size,
    // index computations, folded when their inputs are known
    &Simple::new(&["Range"], index_ops::range, Opaque("range")),
    &index_ops::CumSum,
    &index_ops::GatherElements,
    &Simple::new(&["ScatterElements"], same_shape, Opaque("scatterelements")),
    &Simple::new(&["ScatterND"], same_shape, Opaque("scatternd")),
    &Simple::new(&["Scatter"], same_shape, Opaque("scatter")),
    &Simple::new(&["Trilu"], same_shape, Opaque("trilu")),
    &Simple::new(&["NonZero"], index_ops::nonzero, Opaque("nonzero")),
];
