// QONNX quantization operators (IntQuant/Quant, BipolarQuant, Trunc v1/v2, FloatQuant), bit-exact
// with the numpy functions of qonnx 1.0.0.
//
// Every function comes in two parts: `*_spec` validates the inputs and returns the shape and dtype
// of the output (numpy broadcasting of all operands, so the output may be larger than X), and the
// op itself fills a caller-allocated output of exactly that spec. `*_plan` does both steps with one
// validation (polyquant/plan.h). Errors are polyquant::Error.
//
// Working precision. The reference evaluates each step in numpy 2's promoted dtype of that step's
// operands: `X / scale` in promote(X, scale), `+ zeropt` in promote(that, zeropt), and so on
// (float32 throughout when X and the parameters are float32; float64 once a parameter is float64
// or a 32/64-bit integer array; float16 when everything is float16). polyquant evaluates every
// step in the same dtype and order, with IEEE division where the reference divides and no FMA
// contraction. Bounds and scales derived from bit widths, exponent widths and biases are computed
// in those parameters' own dtypes, as the reference does.
#pragma once

#include "polyquant/export.h"
#include "polyquant/plan.h"
#include "polyquant/rounding.h"
#include "polyquant/tensor.h"

namespace polyquant::qonnx {

// ---------------------------------------------------------------------------------------------
// IntQuant (legacy op_type "Quant"):
//
//   y   = X / scale + zeropt
//   if bitwidth == 1 and signed:   y = (y >= 0) ? +1 : -1          (NaN -> -1; narrow, rounding ignored)
//   else:                          y = R(clamp(y, lo, hi))          (clamp *before* rounding)
//   out = float32((y - zeropt) * scale)
//
// with lo/hi = -2^(b-1)+narrow, 2^(b-1)-1 (signed) or 0, 2^b-1-narrow (unsigned; narrow applies to
// unsigned too), evaluated in bitwidth's own dtype (so a non-integer bitwidth gives non-integer
// bounds). The clamp is `y > hi ? hi : y` then `y < lo ? lo : y`: NaN passes through, +-inf
// saturates. bitwidth must have exactly one element. Output dtype: float32.
struct IntQuantAttrs {
  bool is_signed = true;
  bool narrow = false;
  RoundingMode rounding_mode = RoundingMode::kHalfEven;
};

POLYQUANT_API TensorSpec int_quant_spec(const TensorView& x, const TensorView& scale,
                                        const TensorView& zeropt, const TensorView& bitwidth,
                                        const IntQuantAttrs& attrs);
POLYQUANT_API void int_quant(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                             const TensorView& bitwidth, const IntQuantAttrs& attrs,
                             const MutableTensorView& out);
POLYQUANT_API PlannedCall int_quant_plan(const TensorView& x, const TensorView& scale,
                                         const TensorView& zeropt, const TensorView& bitwidth,
                                         const IntQuantAttrs& attrs);

// ---------------------------------------------------------------------------------------------
// BipolarQuant:  out = ((X >= 0) ? +1 : -1) * scale.   NaN -> -scale, -0.0 -> +scale.
// Output dtype: promote(X, scale) (not forced to float32).
POLYQUANT_API TensorSpec bipolar_quant_spec(const TensorView& x, const TensorView& scale);
POLYQUANT_API void bipolar_quant(const TensorView& x, const TensorView& scale, const MutableTensorView& out);
POLYQUANT_API PlannedCall bipolar_quant_plan(const TensorView& x, const TensorView& scale);

// ---------------------------------------------------------------------------------------------
// Trunc v1 (Brevitas <= 0.11 exports; opset 1 of the QONNX domain):
//
//   y   = rint(X / scale + zeropt)                         (always ties-to-even here)
//   y   = R(y / 2^(in_bitwidth - out_bitwidth))            (no clamp)
//   out = (y - zeropt) * scale
//
// Output dtype: the promoted working dtype (float32 for float32 inputs).
POLYQUANT_API TensorSpec trunc_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                                    const TensorView& in_bitwidth, const TensorView& out_bitwidth);
POLYQUANT_API void trunc(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                         const TensorView& in_bitwidth, const TensorView& out_bitwidth,
                         RoundingMode rounding_mode, const MutableTensorView& out);
POLYQUANT_API PlannedCall trunc_plan(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                                     const TensorView& in_bitwidth, const TensorView& out_bitwidth,
                                     RoundingMode rounding_mode);

// Trunc v2 (Brevitas >= 0.12; opset 2 of the QONNX domain):
//
//   y   = rint(X / scale + zeropt)
//   t   = 2 ^ rint(log2(out_scale / scale))                 (forced power of two)
//   y   = R(clamp(y / t, lo(out_bitwidth), hi(out_bitwidth)))
//   out = (y - zeropt / t) * out_scale
//
// in_bitwidth is accepted and ignored, as in the reference.
struct TruncV2Attrs {
  bool is_signed = true;
  bool narrow = false;
  RoundingMode rounding_mode = RoundingMode::kFloor;
};
POLYQUANT_API TensorSpec trunc_v2_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                                       const TensorView& in_bitwidth, const TensorView& out_scale,
                                       const TensorView& out_bitwidth);
POLYQUANT_API void trunc_v2(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                            const TensorView& in_bitwidth, const TensorView& out_scale,
                            const TensorView& out_bitwidth, const TruncV2Attrs& attrs,
                            const MutableTensorView& out);
POLYQUANT_API PlannedCall trunc_v2_plan(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                                        const TensorView& in_bitwidth, const TensorView& out_scale,
                                        const TensorView& out_bitwidth, const TruncV2Attrs& attrs);

// ---------------------------------------------------------------------------------------------
// FloatQuant (arbitrary signed minifloat with E exponent and m mantissa bits):
//
//   xs  = X / scale
//   e   = max(floor(log2(|xs| + tiny)) - m, 1 - bias - m)  (tiny = smallest normal of the dtype;
//                                                           log2 in the working dtype, *not* the
//                                                           exact exponent: just below 2^k it can
//                                                           round up to k)
//   q   = 2^e * R(xs / 2^e)
//   M   = min((2 - 2^-m) * 2^(2^E - 1 - bias), max_val)     (in float64)
//   q   = clip(q, -M, M);  if !saturation: has_inf ? (overflow -> +-inf) : has_nan ? (overflow or
//         inf -> NaN) : error
//   out = float32(q * scale)
//
// Overflow is judged after rounding. +-inf inputs give NaN (inf / inf). has_subnormal is accepted
// and ignored: subnormals are always produced, as in the reference. mantissa_bitwidth must have
// exactly one element. Output dtype: float32.
struct FloatQuantAttrs {
  bool has_inf = false;
  bool has_nan = false;
  bool has_subnormal = false;
  bool saturation = true;
  RoundingMode rounding_mode = RoundingMode::kHalfEven;
  bool is_signed = true;  // false: unsigned minifloat, clip to [0, M] (qonnx's float_quant(signed=False))
};
POLYQUANT_API TensorSpec float_quant_spec(const TensorView& x, const TensorView& scale,
                                          const TensorView& exponent_bitwidth,
                                          const TensorView& mantissa_bitwidth,
                                          const TensorView& exponent_bias, const TensorView& max_val,
                                          const FloatQuantAttrs& attrs);
POLYQUANT_API void float_quant(const TensorView& x, const TensorView& scale,
                               const TensorView& exponent_bitwidth, const TensorView& mantissa_bitwidth,
                               const TensorView& exponent_bias, const TensorView& max_val,
                               const FloatQuantAttrs& attrs, const MutableTensorView& out);
POLYQUANT_API PlannedCall float_quant_plan(const TensorView& x, const TensorView& scale,
                                           const TensorView& exponent_bitwidth,
                                           const TensorView& mantissa_bitwidth,
                                           const TensorView& exponent_bias, const TensorView& max_val,
                                           const FloatQuantAttrs& attrs);

}  // namespace polyquant::qonnx
