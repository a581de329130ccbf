"""onnxruntime's latency for one op, the single-op peer of `benches/search.rs`:
`conv` = ResNet-50's 3x3 conv 64->64 at 56x56 with bias and relu (NCHW, onnxruntime picks
its own blocked layout), `matmul` = 512x512 @ 512x512. Prints `median_ms min_ms threads`.
Needs `pip install onnx onnxruntime` (benchmarks only)."""
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def conv_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": (1, 64, 56, 56)}


def matmul_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": (512, 512)}


def main():
    which, threads = sys.argv[1], int(sys.argv[2])
    model, inputs = {"conv": conv_model, "matmul": matmul_model}[which]()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {k: np.random.default_rng(1).standard_normal(s).astype(np.float32) for k, s in inputs.items()}
    for _ in range(10):
        sess.run(None, feeds)
    times = []
    for _ in range(100):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{times[len(times) // 2] * 1e3:.4f} {times[0] * 1e3:.4f} {threads}")


if __name__ == "__main__":
    main()
