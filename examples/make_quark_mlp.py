#!/usr/bin/env python3
"""Build the example Quark model `quark_mlp.onnx`: an MLP 64 -> 128 -> 10 of AMD Quark's
ExtendedQuantizeLinear / ExtendedDequantizeLinear (domain `com.amd.quark`, version 1), as Quark
exports an A16W8 model (16-bit activations, 8-bit weights stored quantized with a DQ), with a
bfloat16 output.

    x [32,64] -- ExtendedQuantizeLinear int16 (scale 2^-6, zero point 0) -- ExtendedDequantizeLinear -+
    W1 [64,128] int8, per output column (axis 1), scales (128,) -- ExtendedDequantizeLinear ----------+-- MatMul
      -- Add -- Relu -- ExtendedQuantizeLinear uint16 (scale 2^-4, zero point 5) -- ExtendedDequantizeLinear -+
    W2 [128,10] int8, per output column (axis 1), scales (10,) -- ExtendedDequantizeLinear -------------------+-- MatMul
      -- Add -- ExtendedQuantizeLinear bfloat16 (scale 1, zero point 0) -- ExtendedDequantizeLinear -- y [32,10]

The quantized type of each ExtendedQuantizeLinear is its zero point's dtype. Every node gives its
`axis` (an absent one means axis 0 in Quark's CPU kernel, 1 in its documentation). Every scale is a
power of two and every quantized value a small integer, so every product and sum in MatMul and Add is
exactly representable in float32: the result does not depend on the summation order, and any
difference `polyquant run --reference` reports (against amd-quark's own CPU op, when amd-quark and
torch are installed) comes from the Quark ops.

The model is deterministic: running this script again writes identical bytes.

    python examples/make_quark_mlp.py [-o examples/quark_mlp.onnx]
"""

import argparse
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QUARK_DOMAIN = "com.amd.quark"
QUARK_OPSET = 1
ONNX_OPSET = 17
IR_VERSION = 9
BATCH = 32
SEED = 20260112


def build_model():
    rng = np.random.default_rng(SEED)
    f32 = np.float32
    bf16_zero = helper.make_tensor("y_zero_point", TensorProto.BFLOAT16, (),
                                   np.zeros((), ml_dtypes.bfloat16).view(np.uint16).tobytes(), raw=True)
    initializers = [
        numpy_helper.from_array(np.array(2.0**-6, f32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.int16), "x_zero_point"),
        numpy_helper.from_array(np.array(2.0**-4, f32), "h_scale"),
        numpy_helper.from_array(np.array(5, np.uint16), "h_zero_point"),
        numpy_helper.from_array(np.array(1.0, f32), "y_scale"),
        bf16_zero,
    ]
    # Weights: int8 with one power-of-two scale per output column (zero points 0, as Quark's
    # symmetric weight quantization gives).
    for name, (fan_in, fan_out), exponents, bias_step in [("w1", (64, 128), (-8, -6), 2.0**-14),
                                                          ("w2", (128, 10), (-9, -7), 2.0**-13)]:
        w = rng.integers(-127, 128, (fan_in, fan_out)).astype(np.int8)
        scale = (2.0 ** rng.integers(*exponents, fan_out)).astype(f32)
        bias = (rng.integers(-64, 65, fan_out) * bias_step).astype(f32)
        initializers += [numpy_helper.from_array(w, f"{name}_quantized"), numpy_helper.from_array(scale, f"{name}_scale"),
                         numpy_helper.from_array(np.zeros(fan_out, np.int8), f"{name}_zero_point"),
                         numpy_helper.from_array(bias, f"b{name[1]}")]

    def node(op_type, inputs, output, **attrs):
        domain = QUARK_DOMAIN if op_type.startswith("Extended") else ""
        return helper.make_node(op_type, inputs, [output], name=output, domain=domain, **attrs)

    def qdq(x, prefix, output):
        params = [f"{prefix}_scale", f"{prefix}_zero_point"]
        return [node("ExtendedQuantizeLinear", [x, *params], f"{prefix}_q", axis=1),
                node("ExtendedDequantizeLinear", [f"{prefix}_q", *params], output, axis=1)]

    nodes = [
        *qdq("x", "x", "x_dq"),
        node("ExtendedDequantizeLinear", ["w1_quantized", "w1_scale", "w1_zero_point"], "w1", axis=1),
        node("MatMul", ["x_dq", "w1"], "fc1_matmul"),
        node("Add", ["fc1_matmul", "b1"], "fc1_out"),
        node("Relu", ["fc1_out"], "fc1_relu"),
        *qdq("fc1_relu", "h", "h_dq"),
        node("ExtendedDequantizeLinear", ["w2_quantized", "w2_scale", "w2_zero_point"], "w2", axis=1),
        node("MatMul", ["h_dq", "w2"], "fc2_matmul"),
        node("Add", ["fc2_matmul", "b2"], "fc2_out"),
        *qdq("fc2_out", "y", "y"),
    ]
    graph = helper.make_graph(
        nodes, "quark_mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, (BATCH, 64))],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, (BATCH, 10))],
        initializer=initializers)
    model = helper.make_model(graph, ir_version=IR_VERSION, producer_name="polyquant examples/make_quark_mlp.py",
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET),
                                             helper.make_opsetid(QUARK_DOMAIN, QUARK_OPSET)])
    onnx.checker.check_model(model)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).with_name("quark_mlp.onnx"),
                        help="where to write the model (default: %(default)s)")
    args = parser.parse_args(argv)
    data = build_model().SerializeToString()
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
