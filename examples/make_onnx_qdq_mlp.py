#!/usr/bin/env python3
"""Build the example ONNX Q/DQ model `onnx_qdq_mlp.onnx`: an MLP 64 -> 128 -> 10 of standard
QuantizeLinear / DequantizeLinear nodes at opset 28, as a Q/DQ exporter writes one (activations as
Q -> DQ pairs, weights stored quantized with a DQ).

    x [32,64] -- QuantizeLinear int8 (scale 2^-5) -- DequantizeLinear ------------+
    W1 [64,128] int4, blocks of 32 along the input axis, scales (2,128) -- DQ ----+-- MatMul -- Add -- Relu
      -- QuantizeLinear uint8 (scale 2^-4, zero point 3) -- DequantizeLinear -----+
    W2 [128,10] int8, per output column (axis 1), scales (10,) -- DQ ------------+-- MatMul
      -- QuantizeLinear float8 e4m3fn (scale 2^-3, saturating) -- DequantizeLinear -- y [32,10]

Every scale is a power of two and every quantized value a small integer, so every product and sum
in MatMul and Add is exactly representable in float32: their result does not depend on the summation
order, and onnxruntime's kernels give the same bits as onnx's reference evaluator (numpy), which
`polyquant run --reference` compares against. The Q/DQ nodes are then the only place where rounding
happens. onnxruntime has no kernel for opset 28's QuantizeLinear / DequantizeLinear: `polyquant run`
moves them onto polyquant's `polyquant.onnx` domain (polyquant.onnx.upgrade_model).

Layer 2 has no bias on purpose: on a DQ -> MatMul -> Add -> Q unit, onnxruntime 1.32's MatMulAddFusion
adds a default-domain DequantizeLinear node ('.../MatMulAddFusion_bias_dq') at the model's opset,
28, which onnxruntime has no kernel for, so the session would not load.

The model is deterministic: running this script again writes identical bytes.

    python examples/make_onnx_qdq_mlp.py [-o examples/onnx_qdq_mlp.onnx]
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ONNX_OPSET = 28
IR_VERSION = 11  # IR 11 carries every opset-28 type used here (int4, float8)
BATCH = 32
BLOCK = 32
SEED = 20260111


def int4_initializer(name, values):
    """An INT4 tensor: ONNX stores two elements per byte, low nibble first."""
    flat = values.astype(np.int8).ravel()
    raw = (flat & 0x0F).astype(np.uint8)
    raw = np.concatenate([raw, np.zeros(raw.size % 2, np.uint8)])
    packed = (raw[0::2] | (raw[1::2] << 4)).astype(np.uint8)
    return helper.make_tensor(name, TensorProto.INT4, values.shape, packed.tobytes(), raw=True)


def build_model():
    rng = np.random.default_rng(SEED)
    f32 = np.float32
    initializers = [
        numpy_helper.from_array(np.array(2.0**-5, f32), "x_scale"),
        numpy_helper.from_array(np.array(2.0**-4, f32), "h_scale"),
        numpy_helper.from_array(np.array(3, np.uint8), "h_zero_point"),
        numpy_helper.from_array(np.array(2.0**-3, f32), "y_scale"),
    ]
    # Layer 1: int4 weights, one power-of-two scale per block of 32 input rows and output column.
    w1 = rng.integers(-8, 8, (64, 128))
    w1_scale = (2.0 ** rng.integers(-6, -4, (64 // BLOCK, 128))).astype(f32)
    b1 = (rng.integers(-16, 17, 128) * 2.0**-11).astype(f32)
    # Layer 2: int8 weights, one power-of-two scale per output column.
    w2 = rng.integers(-127, 128, (128, 10)).astype(np.int8)
    w2_scale = (2.0 ** rng.integers(-9, -7, 10)).astype(f32)
    initializers += [
        int4_initializer("w1_quantized", w1), numpy_helper.from_array(w1_scale, "w1_scale"),
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(w2, "w2_quantized"), numpy_helper.from_array(w2_scale, "w2_scale"),
    ]

    def node(op_type, inputs, output, **attrs):
        return helper.make_node(op_type, inputs, [output], name=output, **attrs)

    nodes = [
        node("QuantizeLinear", ["x", "x_scale"], "x_q", output_dtype=TensorProto.INT8),
        node("DequantizeLinear", ["x_q", "x_scale"], "x_dq"),
        node("DequantizeLinear", ["w1_quantized", "w1_scale"], "w1", axis=0, block_size=BLOCK),
        node("MatMul", ["x_dq", "w1"], "fc1_matmul"),
        node("Add", ["fc1_matmul", "b1"], "fc1_out"),
        node("Relu", ["fc1_out"], "fc1_relu"),
        node("QuantizeLinear", ["fc1_relu", "h_scale", "h_zero_point"], "h_q"),
        node("DequantizeLinear", ["h_q", "h_scale", "h_zero_point"], "h_dq"),
        node("DequantizeLinear", ["w2_quantized", "w2_scale"], "w2", axis=1),
        node("MatMul", ["h_dq", "w2"], "fc2_out"),
        node("QuantizeLinear", ["fc2_out", "y_scale"], "y_q", output_dtype=TensorProto.FLOAT8E4M3FN, saturate=1),
        node("DequantizeLinear", ["y_q", "y_scale"], "y"),
    ]
    graph = helper.make_graph(
        nodes, "onnx_qdq_mlp",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, (BATCH, 64))],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, (BATCH, 10))],
        initializer=initializers)
    model = helper.make_model(graph, ir_version=IR_VERSION, producer_name="polyquant examples/make_onnx_qdq_mlp.py",
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=Path(__file__).with_name("onnx_qdq_mlp.onnx"),
                        help="where to write the model (default: %(default)s)")
    args = parser.parse_args(argv)
    data = build_model().SerializeToString()
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
