// AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (domain com.amd.quark), bit-exact
// with the CPU kernel of amd-quark 0.13 by default.
//
// Output (Q) / input (DQ) types: int8, uint8, int16, uint16, int32, uint32, float16, bfloat16 —
// the zero point's dtype; uint8 with a zero of 0 when the zero point is absent. x (Q) and the
// scale must be float32; DQ returns float32. Parameters: a scale of one element (0-d or shape (1,))
// is per-tensor, otherwise it is 1-D of length x.shape[axis] (per-axis; axis may be negative); the
// zero point has the scale's shape.
//
// Semantics::kQuarkCpu (default), Quark's CPU kernel on x86-64:
//   integers:  t = int64(rint(x / s)) + zp (float32 division, ties to even), clamp(t, lowest, max);
//              NaN, +-inf and |x / s| >= 2^63 convert to INT64_MIN and the sum wraps: they give
//              the lowest value (+inf -> 0 for uint8), or the highest when zp < 0.
//   float16:   ORT's Cast of clamp(x, -65504, 65504); scale and zero point ignored; NaN -> 0x7E00
//              with x's sign.
//   bfloat16:  bfloat16(x / s + zp), round to nearest even, overflow -> inf, every NaN -> 0x7FC1.
//   DQ integers: float32(x - zp) * s (exact int64 difference, rounded once, then one product).
//   DQ float16:  a plain cast to float32 (scale and zero point ignored).
//   DQ bfloat16: (x - zp) * s in float32, every NaN of x or zp read as +0x7FC00000.
// Semantics::kOnnxSpec, the ONNX formulas for the same types: integers saturate as ONNX Runtime
// does (NaN -> lowest, +-inf -> highest / lowest); float16 and bfloat16 are x / s + zp rounded to
// nearest even (NaN kept, with its sign, bfloat16 as 0x7FC0); DQ is (x - zp) * s for every type.
//
// The ONNX Runtime op reads an absent `axis` attribute as 0 (Quark's kernel does; its
// documentation says 1); here `axis` is always explicit (default 1, the documented value).
#pragma once

#include <cstdint>

#include "polyquant/export.h"
#include "polyquant/plan.h"
#include "polyquant/tensor.h"

namespace polyquant::quark {

enum class Semantics : std::uint8_t { kQuarkCpu, kOnnxSpec };

struct ExtendedAttrs {
  std::int64_t axis = 1;
  Semantics semantics = Semantics::kQuarkCpu;
};

POLYQUANT_API TensorSpec extended_quantize_linear_spec(const TensorView& x, const TensorView& y_scale,
                                                       const TensorView* y_zero_point, const ExtendedAttrs& attrs);
POLYQUANT_API void extended_quantize_linear(const TensorView& x, const TensorView& y_scale,
                                            const TensorView* y_zero_point, const ExtendedAttrs& attrs,
                                            const MutableTensorView& out);
// Validates once and returns the plan: its spec() is extended_quantize_linear_spec's result, its run(out) is extended_quantize_linear.
POLYQUANT_API PlannedCall extended_quantize_linear_plan(const TensorView& x, const TensorView& y_scale,
                                                        const TensorView* y_zero_point, const ExtendedAttrs& attrs);

POLYQUANT_API TensorSpec extended_dequantize_linear_spec(const TensorView& x, const TensorView& x_scale,
                                                         const TensorView* x_zero_point, const ExtendedAttrs& attrs);
POLYQUANT_API void extended_dequantize_linear(const TensorView& x, const TensorView& x_scale,
                                              const TensorView* x_zero_point, const ExtendedAttrs& attrs,
                                              const MutableTensorView& out);
// Validates once and returns the plan: its spec() is extended_dequantize_linear_spec's result, its run(out) is extended_dequantize_linear.
POLYQUANT_API PlannedCall extended_dequantize_linear_plan(const TensorView& x, const TensorView& x_scale,
                                                          const TensorView* x_zero_point, const ExtendedAttrs& attrs);

}  // namespace polyquant::quark
