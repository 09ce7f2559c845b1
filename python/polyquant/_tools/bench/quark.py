"""`polyquant bench` cases of Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear
(polyquant.quark), called directly and as nodes of an onnxruntime session with polyquant's custom-op
library; timed by the Q/DQ harness of bench/onnx.py against onnxruntime's standard op."""

from __future__ import annotations

import numpy as np

from .onnx import QdqCase, per_axis, per_tensor, shapes


def make_cases(size):
    wide, _ = shapes(size)
    return [
        QdqCase("quark_q_int16_axis1", "Quark ExtendedQuantizeLinear -> int16, per-axis on axis 1", wide, "q",
                per_axis(np.int16, 1), quark=True),
        QdqCase("ort_quark_q_int8", "onnxruntime session: Quark ExtendedQuantizeLinear -> int8, per-tensor "
                "(polyquant's library) vs onnxruntime's QuantizeLinear", wide, "q", per_tensor(np.int8), quark=True,
                through_ort=True),
        QdqCase("ort_quark_dq_int8_axis1", "onnxruntime session: Quark ExtendedDequantizeLinear int8, per-axis on "
                "axis 1 (polyquant's library) vs onnxruntime's DequantizeLinear", wide, "dq", per_axis(np.int8, 0),
                quark=True, through_ort=True),
    ]


CASE_NAMES = ["quark_q_int16_axis1", "ort_quark_q_int8", "ort_quark_dq_int8_axis1"]
