// Dtype conversion of contiguous runs: the engine's convert step (an operand of another dtype than
// the kernel reads, an output of another dtype than the kernel writes) as a kernel of the op list,
// so the conversions every family's float16 / bfloat16 tensors go through run in the vector loop.
//
// The spec is convert_values_scalar (core/elementwise.cc): float16 and bfloat16 widen exactly (NaN
// payloads kept); to float16, round to nearest even from the exact value, |v| >= 65520 -> inf, NaN
// -> the quiet NaN with the payload's top bits (sign | 0x7E00 | payload >> 13); to bfloat16, round
// to nearest even, NaN -> 0x7FC0 with the sign (ml_dtypes); minifloats as core/minifloat.h; sub-byte
// integers: their low bits, from float the truncated integer part (NaN -> 0). The vector kernels do
// float32 <-> float16 / bfloat16 / every minifloat / int4 / uint4 / int2 / uint2 with integer bit
// arithmetic only (plus exact products), so neither the rounding mode nor the flush-to-zero state
// of the caller's thread can change a bit; every other pair goes to the spec.
#pragma once

#include <cstdint>

#include "core/target.h"
#include "kernels/row.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

struct ConvertParams {
  DType from = DType::kFloat32;  // operand 0's dtype, read contiguously
  DType to = DType::kFloat32;    // the output's dtype, written contiguously
};

// The spec (core/elementwise.cc): n elements from src (dtype st, every ss elements) to dst (dtype dt,
// every ds elements).
void convert_values_scalar(const void* src, DType st, std::int64_t ss, void* dst, DType dt, std::int64_t ds,
                           std::int64_t n);

// ---- Scalar reference rows (host code) ----------------------------------------------------------
// The registry's scalar kernel ref::convert_f32 runs this row (kernels/reference_kernels.cc stamps
// it from the op list): the spec over the run, and the tail of every vector kernel.
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class W>
inline void convert_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const ConvertParams*>(params);
  convert_values_scalar(a.in[0], p.from, a.is_broadcast(0) ? 0 : 1, a.out, p.to, 1, a.n);
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

}  // namespace polyquant::detail
