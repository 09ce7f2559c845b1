"""AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (domain ``com.amd.quark``),
bit-exact with the CPU kernel of amd-quark 0.13.

``extended_quantize_linear(x, y_scale, y_zero_point=None, axis=1)`` and
``extended_dequantize_linear(x, x_scale, x_zero_point=None, axis=1)``: the quantized type is the
zero point's dtype — int8, uint8, int16, uint16, int32, uint32, float16 or ``ml_dtypes.bfloat16`` —
and uint8 (zero 0) when it is absent; x (Q) and the scale are float32; DQ returns float32. A scale
of one element is per-tensor, otherwise it is 1-D of length ``x.shape[axis]``.

``semantics="quark"`` (default) reproduces Quark's kernel, including its NaN / infinity / overflow
results (NaN and +-inf give the type's lowest value, or its highest when the zero point is
negative), float16 as a cast of x clamped to +-65504 (scale and zero point ignored) and bfloat16
NaN as 0x7FC1. ``semantics="onnx"`` gives the ONNX formulas for the same types instead
(saturation as ONNX Runtime, float16/bfloat16 as x / scale + zero point). Note that Quark's
ONNX Runtime kernel reads an absent ``axis`` attribute as 0; here ``axis`` defaults to 1, the
documented value (polyquant's ONNX Runtime op follows the kernel).
"""

from .ops import extended_dequantize_linear, extended_quantize_linear

__all__ = ["extended_quantize_linear", "extended_dequantize_linear"]
