// AIMET's affine quantization (aimet_torch.quantization.affine, aimet-torch 2.42.0 with torch 2.15
// on the CPU), bit-exact: quantize, quantize_dequantize, dequantize and their gradients.
//
// Parameters: `scale` and `offset` (AIMET's offset is minus the zero point) broadcast against x
// (right-aligned, each dimension 1 or x's), or, with a block size, one value per block: block_size
// has scale's rank and aligns with x's trailing dimensions; entry d is the block length along that
// dimension (-1: x's size / scale's size), and x's leading dimensions share every block's value.
// The grid is the integer range [qmin, qmax] (grid_from_bitwidth / grid_from_num_steps give
// AIMET's other two call forms).
//
//   quantize:            clamp(round(x / s) - o, qmin, qmax)          (float, x's dtype)
//   quantize_dequantize: (clamp(round(x / s) - o, qmin, qmax) + o) * s
//   dequantize:          (x + o) * s
// round is half-to-even; clamp lets NaN through and keeps -0. Working precision (AIMET's rule):
// x's dtype, unless eps(dtype) > 0.25 / (qmax - qmin), then float32, then float64; scale and offset
// are rounded to it, the result to x's dtype. quantize raises unless x's dtype holds the grid;
// dequantize computes in x's dtype.
//
// quantize_dequantize has two paths, as in AIMET. QdqPath::kNoGrad is what AIMET computes when no
// input requires grad: without a block size, with one scale/offset value or one value per index of
// a single axis, torch's fake quantization runs instead of the formula above:
//   q = rint(x * (1.0f / s)) + zp (zp = -int32(offset), truncated), clamped (NaN -> qmin; per
//   channel also +-inf and |q| >= 2^63), then (q - zp) * s, in float32 (float64 for float64 x).
// QdqPath::kTraining is the formula above (AIMET's training path); its gradients are
// quantize_dequantize_backward's.
#pragma once

#include <cstdint>
#include <span>

#include "polyquant/export.h"
#include "polyquant/plan.h"
#include "polyquant/tensor.h"

namespace polyquant::aimet {

struct Grid {
  std::int64_t qmin = 0, qmax = 255;
};
// num_steps = 2^bitwidth - 1; signed: [-ceil(num_steps / 2), floor(num_steps / 2)], else
// [0, num_steps]. bitwidth in [1, 62] (ValueError otherwise: the grid must fit int64).
POLYQUANT_API Grid grid_from_bitwidth(std::int64_t bitwidth, bool is_signed);
POLYQUANT_API Grid grid_from_num_steps(std::int64_t num_steps, bool is_signed);

struct AffineArgs {
  Grid grid;
  std::span<const std::int64_t> block_size;  // empty: no blocks (broadcasting)
};

enum class QdqPath : std::uint8_t { kNoGrad, kTraining };

// Errors: polyquant::Error; ErrorKind::kRuntime where AIMET raises RuntimeError (shapes that do
// not broadcast, block sizes that do not divide, a grid the working precision cannot hold,
// qmin > qmax), kType for x's dtype (float16, bfloat16, float32, float64 only).
POLYQUANT_API TensorSpec quantize_spec(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                       const AffineArgs& args);
POLYQUANT_API void quantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                            const AffineArgs& args, const MutableTensorView& out);
// Validates once and returns the plan: its spec() is quantize_spec's result, its run(out) is quantize.
// This plan and the two below resolve the block sizes into themselves: they keep no reference to them.
POLYQUANT_API PlannedCall quantize_plan(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                        const AffineArgs& args);

POLYQUANT_API TensorSpec quantize_dequantize_spec(const TensorView& x, const TensorView& scale,
                                                  const TensorView& offset, const AffineArgs& args, QdqPath path);
POLYQUANT_API void quantize_dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                       const AffineArgs& args, QdqPath path, const MutableTensorView& out);
// Validates once and returns the plan: its spec() is quantize_dequantize_spec's result, its run(out)
// is quantize_dequantize. On the no-grad path the plan reads offset's values when it is made (they
// decide whether torch's fake quantization runs, and so which checks apply) and runs with those.
POLYQUANT_API PlannedCall quantize_dequantize_plan(const TensorView& x, const TensorView& scale,
                                                   const TensorView& offset, const AffineArgs& args, QdqPath path);
// Whether quantize_dequantize(kNoGrad) takes torch's fake-quantization shortcut for these operands.
POLYQUANT_API bool takes_no_grad_shortcut(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                          const AffineArgs& args);

POLYQUANT_API TensorSpec dequantize_spec(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                         std::span<const std::int64_t> block_size);
POLYQUANT_API void dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                              std::span<const std::int64_t> block_size, const MutableTensorView& out);
// Validates once and returns the plan: its spec() is dequantize_spec's result, its run(out) is dequantize.
POLYQUANT_API PlannedCall dequantize_plan(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                          std::span<const std::int64_t> block_size);

// Gradients of the training path for an upstream gradient `grad_output` (x's shape): AIMET's
// autograd Functions element by element in the working precision, then summed over the elements
// that share a scale / offset value. Outputs: grad_x of x's shape and dtype, grad_scale and
// grad_offset of the parameters' shapes and dtypes; any of the three may be skipped (data null).
// Each sum is exact and rounded once, to float32 for float32 terms (then to float16 / bfloat16 for
// those working precisions) or float64 for float64 ones; so any thread count and kernel set gives
// the same bits. A zero sum is +0, a NaN sum the quiet NaN. torch sums in the working precision in
// its own order, so reduced gradients can differ from AIMET's in the last bits.
// kQuantizeDequantizeNoGrad: quantize_dequantize where only x requires grad, so AIMET's forward is
// its no-grad path; where that path is torch's fake quantization, grad_x is that op's gradient
// (grad * mask of its own rounding), else the formula's. grad_scale / grad_offset are not computed.
// `output` (optional, x's shape and dtype): the op's forward result as well (quantize, the
// training path of quantize_dequantize or its no-grad path, dequantize), the same bits as the op;
// with the three gradients of quantize_dequantize it comes from the same pass over x. It must not
// overlap grad_x, grad_scale or grad_offset (it may be x itself).
enum class AffineOp : std::uint8_t { kQuantize, kQuantizeDequantize, kDequantize, kQuantizeDequantizeNoGrad };
POLYQUANT_API void affine_backward(AffineOp op, const TensorView& grad_output, const TensorView& x,
                                   const TensorView& scale, const TensorView& offset, const AffineArgs& args,
                                   const MutableTensorView& grad_x, const MutableTensorView& grad_scale,
                                   const MutableTensorView& grad_offset, const MutableTensorView& output = MutableTensorView());

}  // namespace polyquant::aimet
