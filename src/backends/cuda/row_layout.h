// Compile-time layouts of a CUDA row launch. A per-element row reads operand i at element j through
// RowArgs::index_of, which tests the operand's per-row, repeated-row and broadcast bits at every
// read: in a grid-stride loop over a few instructions per element, those tests (and the 64-bit
// division of a per-row operand) are a large part of the work. Most launches need none of them:
// a launch whose masks are known when it starts runs a kernel in which they are constants, so the
// compiler drops the tests. The element code, its arithmetic and the index each read resolves to
// are unchanged (row_layout_test checks the indices on the CPU), so every layout gives the same bits.
#pragma once

#include <cstdint>

#include "core/target.h"
#include "kernels/row.h"

namespace polyquant::detail::cuda {
inline namespace POLYQUANT_TARGET_NAMESPACE {  // one copy per build flavour (core/target.h)

enum class RowLayout : std::uint8_t {
  kGeneral,         // any masks (read at run time)
  kNoRowOperands,   // no per-row or repeated-row operand: each operand is contiguous or one value
  kFirstStreams,    // operand 0 contiguous, every other operand in use one value (per-tensor parameters)
};

// The most specific layout of a launch's RowArgs (host code). `host_scalars`: the operands passed by
// value (PolyquantCudaHostScalars::mask; the engine marks them broadcast). An operand is in use when
// its pointer is set or it is passed by value.
inline RowLayout row_layout_of(const RowArgs& a, std::uint32_t host_scalars) {
  if (a.per_row_mask != 0 || a.repeated_row_mask != 0) return RowLayout::kGeneral;
  if (a.is_broadcast(0)) return RowLayout::kNoRowOperands;
  for (int i = 1; i < kMaxOperands; ++i) {
    const bool in_use = a.in[static_cast<std::size_t>(i)] != nullptr || ((host_scalars >> i) & 1u) != 0;
    if (in_use && !a.is_broadcast(i)) return RowLayout::kNoRowOperands;
  }
  return RowLayout::kFirstStreams;
}

// `a` with the masks `kLayout` fixes set to their constant values (host and device code; applied to
// the kernel's own copy of the launch's RowArgs, before its loop).
template <RowLayout kLayout>
POLYQUANT_HD inline void fix_row_layout(RowArgs& a) {
  if constexpr (kLayout != RowLayout::kGeneral) {
    a.per_row_mask = 0;
    a.repeated_row_mask = 0;
  }
  if constexpr (kLayout == RowLayout::kFirstStreams) a.broadcast_mask = ~1u;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail::cuda
