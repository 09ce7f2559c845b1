"""`polyquant bench` cases of Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear
(polyquant.quark), called directly and as nodes of an onnxruntime session with polyquant's custom-op
library; timed by the Q/DQ harness of bench/onnx.py against onnxruntime's standard op.

``alloc_quark_q_int8`` times ExtendedQuantizeLinear int8 per-tensor allocating against ``out=`` (the
harness of bench/common.py). There is no float16 / bfloat16 input case: Quark's Extended ops take
float32 x only (polyquant.quark raises TypeError on a 16-bit x, as Quark's op does)."""

from __future__ import annotations

import numpy as np

from ... import quark as pqq
from .common import AllocCase
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


def make_alloc_cases():
    def make(x):
        p = per_tensor(np.int8)(x.shape)
        fn = lambda out=None: pqq.extended_quantize_linear(x, p["scale"], p["zero_point"], out=out)  # noqa: E731
        return fn, np.zeros(x.shape, np.int8), None

    return [AllocCase("alloc_quark_q_int8", "quark", "polyquant.quark.extended_quantize_linear -> int8, per-tensor",
                      make)]


ALLOC_CASE_NAMES = ["alloc_quark_q_int8"]
