// AIMET's quantizer modules (aimet_torch.quantization.affine Quantize, QuantizeDequantize and
// GroupedBlockQuantizeDequantize, aimet-torch 2.42.0): the parameter arithmetic that turns a
// quantizer's learnable min / max into the scale and offset its forward passes to the functional
// ops of polyquant/aimet.h, bit-exact.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "polyquant/aimet.h"
#include "polyquant/export.h"

namespace polyquant::aimet {

// ---- quantizer modules (Quantize, QuantizeDequantize, GroupedBlockQuantizeDequantize) ----------
// The parameter arithmetic of AIMET's quantizer modules, in float32 and in torch's operation order.
// Every array is contiguous float32, one value per parameter element (min, max, scale and offset of
// one quantizer have the same length); N = qmax - qmin, and float(v) is v rounded to float32.
//
//   minimum_scale(N)          min(float32 eps, 0.01 / N)               (a double, as Python has it)
//   quantizer_scale           |(max - min) / float(N)|, then at least float(minimum_scale(N))
//   quantizer_offset          symmetric: -round_half_even((qmin + qmax) / 2) everywhere;
//                             else clamp(round(min / scale) - float(qmin), float(-qmax), float(-qmin))
//                             (NaN passes the clamp)
//   quantizer_range           get_min / get_max: scale * ((offset + float(qmin)) + 0.0f) and with qmax
//   scale_offset_from_range   a range set during calibration (the batch's dynamic encoding):
//                             scale = (max - min) / float(N) with no abs and no floor, offset as above
//                             without the clamp
POLYQUANT_API double minimum_scale(std::int64_t num_steps);
POLYQUANT_API float symmetric_offset(Grid grid);
POLYQUANT_API void quantizer_scale(std::span<const float> min, std::span<const float> max, Grid grid,
                                   std::span<float> scale);
POLYQUANT_API void quantizer_offset(std::span<const float> min, std::span<const float> scale, Grid grid,
                                    bool symmetric, std::span<float> offset);
POLYQUANT_API void quantizer_range(std::span<const float> scale, std::span<const float> offset, Grid grid,
                                   std::span<float> min, std::span<float> max);
POLYQUANT_API void scale_offset_from_range(std::span<const float> min, std::span<const float> max, Grid grid,
                                           bool symmetric, std::span<float> scale, std::span<float> offset);
// The inverse, for loading exported encodings: a range whose quantizer_scale (and, asymmetric,
// quantizer_offset) give back exactly `scale` and `offset`. It starts from the grid-snapped range
// scale * (offset + qmin), scale * (offset + qmax) and moves max (then min) by up to 64 ulps where
// float32 rounding of (max - min) / N misses `scale`; where no such range exists it keeps the start.
POLYQUANT_API void range_for_scale_offset(std::span<const float> scale, std::span<const float> offset, Grid grid,
                                          bool symmetric, std::span<float> min, std::span<float> max);

// LPBQ (GroupedBlockQuantizeDequantize). `raw_scale` (quantizer_scale's result) has `shape`;
// `grouping` has one entry per dimension (-1: the whole dimension) and must divide it. With
// k = decompressed_bw - bitwidth:
//   per_channel_scale  (shape / grouping): the group's max of raw_scale (NaN if any is NaN) / 2^k
//   scale              (shape): AIMET's blockwise quantize_dequantize of raw_scale with the per-
//                      channel scale, offset 0, grid [1, 2^k]: (clamp(round(raw / pc), 1, 2^k)) * pc
//   per_block_int_scale (shape): clamp(round(scale / pc), 1, 2^k)
// computed in float32 (float64 when AIMET's working-precision rule says so). lpbq_channel_shape
// gives per_channel_scale's shape; errors (kRuntime) for a grouping that does not fit `shape`.
POLYQUANT_API std::vector<std::int64_t> lpbq_channel_shape(std::span<const std::int64_t> shape,
                                                           std::span<const std::int64_t> grouping);
POLYQUANT_API void lpbq_scales(std::span<const float> raw_scale, std::span<const std::int64_t> shape,
                               std::span<const std::int64_t> grouping, std::int64_t bitwidth,
                               std::int64_t decompressed_bw, std::span<float> per_channel_scale,
                               std::span<float> scale, std::span<float> per_block_int_scale);

}  // namespace polyquant::aimet
