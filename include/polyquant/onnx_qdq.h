// ONNX QuantizeLinear / DequantizeLinear (opset 28), bit-exact with onnx 1.23's reference
// evaluator (onnx.reference), which is the executable spec.
//
// Every function comes in two parts, as in qonnx.h: `*_spec` validates the inputs and returns the
// output's shape and dtype; the op fills a caller-allocated output of exactly that spec. Errors are
// polyquant::Error naming the parameter. An absent zero point is a null pointer.
//
// Parameter layouts (both ops): a scale with one element (0-d, or any shape holding one value) is
// per-tensor; with block_size == 0 a 1-D scale of length x.shape[axis] is per-axis; with
// block_size B > 0 the scale has x's rank and shape except ceil(x.shape[axis] / B) on `axis` (the
// last block may be shorter). A zero point has the scale's shape. axis in [-rank, rank - 1].
//
// QuantizeLinear:
//   q = x / y_scale   in `precision` (both operands first rounded to it) if given, otherwise in
//                     numpy's promoted dtype of x and y_scale (float32 for float32 operands,
//                     float16 for float16 ones, float64 when x or the scale is int32)
//   integer outputs (uint8, int8, uint16, int16, uint4, int4, uint2, int2):
//       y = clamp(rint(q) + zero_point, qmin, qmax)        (rint: ties to even)
//     The evaluator casts rint(q) to int32 first, which is undefined for NaN, +-inf and beyond
//     int32; polyquant saturates there as ONNX Runtime does: +inf (and large positive) -> qmax,
//     -inf (and large negative) -> qmin, NaN -> qmin.
//   float8 outputs: y = float8(q), saturate=true clips to the format's finite range first (so
//     +-inf give +-max), saturate=false gives NaN (e4m3fn, fnuz) or inf (e5m2) on overflow. The
//     zero point is ignored, as in the evaluator.
//   float4 / float6 outputs: y = minifloat(q + zero_point), overflow saturating (no inf or NaN
//     encodings; NaN becomes a zero of the opposite sign, ml_dtypes' rule).
//   Output dtype: the zero point's, else output_dtype, else uint8 (both given: they must agree).
//
// DequantizeLinear:
//   y = (x - x_zero_point) * x_scale, computed as the evaluator does: float32(x) - zero point in
//   float32 (float64 for int32 x with a zero point, the product then in float64), times the scale in
//   float32, rounded once to the output dtype (output_dtype, else the scale's dtype). float8 zero
//   points must be zero; a float4 zero point is ignored (evaluator).
#pragma once

#include <cstdint>
#include <optional>

#include "polyquant/export.h"
#include "polyquant/plan.h"
#include "polyquant/tensor.h"

namespace polyquant::onnx {

// ONNX TensorProto.DataType numbers <-> DType (nullopt: not a type polyquant holds).
POLYQUANT_API std::optional<DType> dtype_from_onnx(int onnx_type);
POLYQUANT_API int onnx_type_of(DType dtype);

struct QuantizeLinearAttrs {
  std::int64_t axis = 1;
  std::int64_t block_size = 0;
  std::optional<DType> output_dtype;  // ONNX's output_dtype attribute (absent or 0: unset)
  bool saturate = true;
  std::optional<DType> precision;     // float32, float16 or bfloat16
};

POLYQUANT_API TensorSpec quantize_linear_spec(const TensorView& x, const TensorView& y_scale,
                                              const TensorView* y_zero_point, const QuantizeLinearAttrs& attrs);
POLYQUANT_API void quantize_linear(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                                   const QuantizeLinearAttrs& attrs, const MutableTensorView& out);
// Validates once and returns the plan: its spec() is quantize_linear_spec's result, its run(out) is quantize_linear.
POLYQUANT_API PlannedCall quantize_linear_plan(const TensorView& x, const TensorView& y_scale,
                                               const TensorView* y_zero_point, const QuantizeLinearAttrs& attrs);

struct DequantizeLinearAttrs {
  std::int64_t axis = 1;
  std::int64_t block_size = 0;
  std::optional<DType> output_dtype;  // float32, float16 or bfloat16
};

POLYQUANT_API TensorSpec dequantize_linear_spec(const TensorView& x, const TensorView& x_scale,
                                                const TensorView* x_zero_point, const DequantizeLinearAttrs& attrs);
POLYQUANT_API void dequantize_linear(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                     const DequantizeLinearAttrs& attrs, const MutableTensorView& out);
// Validates once and returns the plan: its spec() is dequantize_linear_spec's result, its run(out) is dequantize_linear.
POLYQUANT_API PlannedCall dequantize_linear_plan(const TensorView& x, const TensorView& x_scale,
                                                 const TensorView* x_zero_point, const DequantizeLinearAttrs& attrs);

// ---- ONNX's packed storage of sub-byte types ----------------------------------------------------
// ONNX tensors (and ONNX Runtime) hold int4 / uint4 / float4e2m1 two to a byte and int2 / uint2 four
// to a byte: element i in bits [b * (i % k), b * (i % k) + b) of byte i / k, low bits first, the
// last byte's unused bits zero (b = `bits`, k = 8 / b). polyquant holds them one per byte, as
// ml_dtypes does; these convert between the two. `codes` has n bytes (only each code's low `bits`
// bits are read), `packed` ceil(n * bits / 8). bits must be 2 or 4.
POLYQUANT_API std::int64_t packed_size(std::int64_t n, int bits);
POLYQUANT_API void pack_sub_byte(const std::uint8_t* codes, std::int64_t n, int bits, std::uint8_t* packed);
POLYQUANT_API void unpack_sub_byte(const std::uint8_t* packed, std::int64_t n, int bits, std::uint8_t* codes);

}  // namespace polyquant::onnx
