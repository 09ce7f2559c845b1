#!/usr/bin/env python3
"""Build the example QONNX model `qonnx_mlp.onnx`: a quantized MLP 64 -> 128 -> 64 -> 10.

    x [256,64] -- IntQuant u8 ----------------------------------------------+
    W1 [128,64] -- IntQuant s4 narrow, per-row scale (128,1) -- Transpose --+-- MatMul -- Add -- Relu
      -- IntQuant u8 (HALF_UP) -- Trunc v2 (u8 -> u4, FLOOR) ----------------+
    W2 [64,128] -- Quant (legacy name) s4 narrow, (64,1) -- Transpose -------+-- MatMul -- Add
      -- BipolarQuant ------------------------------------------------------+
    W3 [10,64] -- FloatQuant FP8 E4M3, (10,1) -- Transpose -----------------+-- MatMul -- Add
      -- FloatQuant FP8 E4M3 -- y [256,10]

Every scale is a power of two, so every MatMul and Add sees exactly representable products and
sums: their float32 result does not depend on the summation order, and ONNX Runtime's fused
kernels give the same bits as qonnx's node-by-node execution. The custom ops are then the only
place where rounding happens, which is what the bit-exact comparison is meant to check.

The model is deterministic: running this script again writes identical bytes.

    python examples/make_qonnx_mlp.py [-o examples/qonnx_mlp.onnx]
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QONNX_DOMAIN = "qonnx.custom_op.general"
QONNX_OPSET = 2  # Trunc with 6 inputs is Trunc v2
ONNX_OPSET = 13
IR_VERSION = 8
BATCH = 256
SEED = 20240611


def pow2_scale(w, limit):
    """Per-row power-of-two scale with |w / scale| <= limit, shape (rows, 1)."""
    peak = np.abs(w).max(axis=1, keepdims=True)
    return (2.0 ** np.ceil(np.log2(peak / limit))).astype(np.float32)


class GraphBuilder:
    """Collects nodes, initializers and the shape of every tensor (qonnx's execute_onnx needs them all)."""

    def __init__(self):
        self.nodes, self.initializers, self.shapes = [], [], {}

    def const(self, name, value):
        arr = np.asarray(value, dtype=np.float32)
        self.initializers.append(numpy_helper.from_array(arr, name))
        self.shapes[name] = arr.shape
        return name

    def node(self, op_type, inputs, output, shape, domain="", **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, domain=domain, **attrs))
        self.shapes[output] = tuple(shape)
        return output

    def int_quant(self, x, name, scale, bitwidth, signed, narrow, rounding_mode="ROUND", op_type="IntQuant"):
        params = [self.const(f"{name}_scale", scale), self.const(f"{name}_zeropt", 0.0),
                  self.const(f"{name}_bitwidth", bitwidth)]
        return self.node(op_type, [x, *params], name, self.shapes[x], domain=QONNX_DOMAIN,
                         signed=signed, narrow=narrow, rounding_mode=rounding_mode)

    def fp8_e4m3(self, x, name, scale):
        params = [self.const(f"{name}_scale", scale), self.const(f"{name}_exponent_bitwidth", 4.0),
                  self.const(f"{name}_mantissa_bitwidth", 3.0), self.const(f"{name}_exponent_bias", 7.0),
                  self.const(f"{name}_max_val", 448.0)]
        return self.node("FloatQuant", [x, *params], name, self.shapes[x], domain=QONNX_DOMAIN,
                         has_inf=0, has_nan=1, has_subnormal=1, saturation=1, rounding_mode="ROUND")

    def linear(self, x, wq, bias, name):
        """x @ wq^T + bias, with wq stored (out, in) as Brevitas exports it."""
        out_features, in_features = self.shapes[wq]
        wt = self.node("Transpose", [wq], f"{name}_weight_t", (in_features, out_features), perm=[1, 0])
        mm = self.node("MatMul", [x, wt], f"{name}_matmul", (self.shapes[x][0], out_features))
        return self.node("Add", [mm, self.const(f"{name}_bias", bias)], f"{name}_out", self.shapes[mm])


def build_model():
    rng = np.random.default_rng(SEED)

    def weight(out_features, in_features):
        return (rng.standard_normal((out_features, in_features)) / np.sqrt(in_features)).astype(np.float32)

    def bias(features, step):
        return (np.round(rng.standard_normal(features) * 0.1 / step) * step).astype(np.float32)

    g = GraphBuilder()
    g.shapes["x"] = (BATCH, 64)

    # Layer 1: unsigned 8-bit input, 4-bit weights, ReLU, 8-bit activation truncated to 4 bits.
    xq = g.int_quant("x", "x_quant", 2.0**-5, 8.0, signed=0, narrow=0)
    w1 = weight(128, 64)
    w1q = g.int_quant(g.const("fc1_weight", w1), "fc1_weight_quant", pow2_scale(w1, 7), 4.0, signed=1, narrow=1)
    h1 = g.node("Relu", [g.linear(xq, w1q, bias(128, 2.0**-6), "fc1")], "fc1_relu", (BATCH, 128))
    h1q = g.int_quant(h1, "fc1_act_quant", 2.0**-6, 8.0, signed=0, narrow=0, rounding_mode="HALF_UP")
    trunc_params = [g.const("fc1_trunc_scale", 2.0**-6), g.const("fc1_trunc_zeropt", 0.0),
                    g.const("fc1_trunc_in_bitwidth", 8.0), g.const("fc1_trunc_out_scale", 2.0**-2),
                    g.const("fc1_trunc_out_bitwidth", 4.0)]
    a1 = g.node("Trunc", [h1q, *trunc_params], "fc1_trunc", (BATCH, 128), domain=QONNX_DOMAIN,
                rounding_mode="FLOOR", signed=0, narrow=0)

    # Layer 2: 4-bit weights through the legacy op name "Quant", binarized activation.
    w2 = weight(64, 128)
    w2q = g.int_quant(g.const("fc2_weight", w2), "fc2_weight_quant", pow2_scale(w2, 7), 4.0, signed=1, narrow=1,
                      op_type="Quant")
    h2 = g.linear(a1, w2q, bias(64, 2.0**-6), "fc2")
    a2 = g.node("BipolarQuant", [h2, g.const("fc2_act_scale", 0.5)], "fc2_act_quant", (BATCH, 64),
                domain=QONNX_DOMAIN)

    # Layer 3: FP8 E4M3 weights (per-row scale) and FP8 E4M3 output.
    w3 = weight(10, 64)
    w3q = g.fp8_e4m3(g.const("fc3_weight", w3), "fc3_weight_quant", pow2_scale(w3, 16))
    y = g.fp8_e4m3(g.linear(a2, w3q, bias(10, 2.0**-4), "fc3"), "y", 2.0**-4)

    initializer_names = {t.name for t in g.initializers}
    value_info = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                  for name, shape in g.shapes.items() if name not in initializer_names | {"x", y}]
    graph = helper.make_graph(
        g.nodes, "qonnx_mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, g.shapes["x"])],
        outputs=[helper.make_tensor_value_info(y, TensorProto.FLOAT, g.shapes[y])],
        initializer=g.initializers, value_info=value_info)
    model = helper.make_model(
        graph, ir_version=IR_VERSION, producer_name="polyquant examples/make_qonnx_mlp.py",
        opset_imports=[helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid(QONNX_DOMAIN, QONNX_OPSET)])
    onnx.checker.check_model(model)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).with_name("qonnx_mlp.onnx"),
                        help="where to write the model (default: %(default)s)")
    args = parser.parse_args(argv)
    data = build_model().SerializeToString()
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
