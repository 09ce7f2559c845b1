"""ONNX QuantizeLinear / DequantizeLinear (opset 28), bit-exact with onnx's reference evaluator.

``quantize_linear(x, y_scale, y_zero_point=None, axis=1, block_size=0, output_dtype=None,
saturate=1, precision=None)`` and ``dequantize_linear(x, x_scale, x_zero_point=None, axis=1,
block_size=0, output_dtype=None)`` take and return numpy arrays; the types numpy lacks are
``ml_dtypes`` arrays (bfloat16, int4/uint4, int2/uint2, float8_e4m3fn, float8_e4m3fnuz,
float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn), one
element per byte, as ``onnx.reference.ReferenceEvaluator`` returns them. ``output_dtype`` and
``precision`` are ONNX ``TensorProto`` data-type numbers (``onnx.TensorProto.INT4`` = 22, ...).

Semantics (see docs/onnx.md for every place where the evaluator departs from the spec text and the
one choice polyquant makes): the division ``x / y_scale`` in ``precision`` or in numpy's promoted
dtype; integer outputs ``clamp(rint(q) + zero_point)`` with NaN -> qmin, +inf -> qmax, -inf -> qmin
(ONNX Runtime's rule where the evaluator's int32 cast is undefined); float8 outputs a (saturating)
cast of q, the zero point ignored; float4/float6 a cast of q + zero_point. Dequantization:
``(x - zero_point) * scale`` in float32 (float64 for int32 with a zero point), rounded once to the
output dtype (``output_dtype``, else the scale's).

``pack`` / ``unpack`` convert sub-byte arrays to and from the packed bytes ONNX stores in tensors.
``upgrade_model`` rewrites an opset-28 model's Q/DQ nodes onto polyquant's ONNX Runtime domain
``polyquant.onnx`` so that today's onnxruntime runs it (``polyquant run`` does it by itself).
"""

from typing import Any

from .ops import dequantize_linear, pack, quantize_linear, unpack

__all__ = ["quantize_linear", "dequantize_linear", "pack", "unpack", "upgrade_model", "needs_upgrade",
           "onnxruntime_max_opset", "POLYQUANT_DOMAIN"]

_MODEL_TOOLS = ("POLYQUANT_DOMAIN", "needs_upgrade", "onnxruntime_max_opset", "upgrade_model")


def __getattr__(name: str) -> Any:
    # The model tools (models.py) need the onnx package: imported on first use, so the ops work (and
    # import fast) where only numpy is at hand.
    if name in _MODEL_TOOLS:
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module 'polyquant.onnx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODEL_TOOLS))
