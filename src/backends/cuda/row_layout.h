// Compile-time layouts of a CUDA row launch. A per-element row reads operand i at element j through
// RowArgs::index_of, which tests the operand's per-row, repeated-row and broadcast bits at every
// read: in a grid-stride loop over a few instructions per element, those tests (and the 64-bit
// division of a per-row operand) are a large part of the work. Most launches need none of them:
// a launch whose masks are known when it starts runs a kernel in which they are constants, so the
// compiler drops the tests; a launch with per-row or repeated-row operands (per channel, blockwise)
// resolves them once per thread and steps them by additions (RowCursor). The element code, its
// arithmetic and the address each read resolves to are unchanged (row_layout_test checks the
// addresses on the CPU and runs rows through every layout against the reference rows), so every
// layout gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/target.h"
#include "kernels/row.h"
#include "polyquant/rounding.h"

namespace polyquant::detail::cuda {
inline namespace POLYQUANT_TARGET_NAMESPACE {  // one copy per build flavour (core/target.h)

enum class RowLayout : std::uint8_t {
  kGeneral,         // any masks (read at run time)
  kNoRowOperands,   // no per-row or repeated-row operand: each operand is contiguous or one value
  kFirstStreams,    // operand 0 contiguous, every other operand in use one value (per-tensor parameters)
  kRowsResolved,    // per-row or repeated-row operands, each with its element size (RowArgs::in_bytes):
                    // resolved once per thread (RowCursor)
};

// The most specific layout of a launch's RowArgs (host code). `host_scalars`: the operands passed by
// value (PolyquantCudaHostScalars::mask; the engine marks them broadcast). An operand is in use when
// its pointer is set or it is passed by value.
inline RowLayout row_layout_of(const RowArgs& a, std::uint32_t host_scalars) {
  if (const std::uint32_t row_operands = a.per_row_mask | a.repeated_row_mask; row_operands != 0) {
    if (a.row_len <= 0) return RowLayout::kGeneral;
    for (int i = 0; i < kMaxOperands; ++i) {
      if (((row_operands >> i) & 1u) != 0 && a.in_bytes[static_cast<std::size_t>(i)] == 0) return RowLayout::kGeneral;
    }
    return RowLayout::kRowsResolved;
  }
  if (a.is_broadcast(0)) return RowLayout::kNoRowOperands;
  for (int i = 1; i < kMaxOperands; ++i) {
    const bool in_use = a.in[static_cast<std::size_t>(i)] != nullptr || ((host_scalars >> i) & 1u) != 0;
    if (in_use && !a.is_broadcast(i)) return RowLayout::kNoRowOperands;
  }
  return RowLayout::kFirstStreams;
}

// `a` with the masks `kLayout` fixes set to their constant values (host and device code; applied to
// the kernel's own copy of the launch's RowArgs, before its loop).
// (kRowsResolved: the RowCursor's RowArgs, whose row operands are resolved to one value each.)
template <RowLayout kLayout>
POLYQUANT_HD inline void fix_row_layout(RowArgs& a) {
  if constexpr (kLayout != RowLayout::kGeneral) {
    a.per_row_mask = 0;
    a.repeated_row_mask = 0;
  }
  if constexpr (kLayout == RowLayout::kFirstStreams) a.broadcast_mask = ~1u;
}

// One thread's walk over the elements first, first + stride, first + 2 stride, ... (< a.n) of a
// launch with per-row or repeated-row operands (RowLayout::kRowsResolved). args() is the launch's
// RowArgs with each of those operands resolved to the one value the current element reads, as
// index_of gives it: a per-row operand to in[i] + j / row_len elements, a repeated-row one to
// in[i] + j % row_len elements, both then read as broadcast (so no read tests or divides). The
// element's row j / row_len and column j % row_len are divided once, here; each step adds the
// stride's quotient and remainder, with one carry. The rebased RowArgs is rebuilt at each element
// rather than carried: carrying eight pointers from step to step took 46 to 57 registers in sm_90
// code where rebuilding takes 28 to 48 (docs/cuda.md).
class RowCursor {
 public:
  POLYQUANT_HD RowCursor(const RowArgs& a, std::int64_t first, std::int64_t stride) : launch_(a) {
    row_ = first / a.row_len;
    column_ = first - row_ * a.row_len;
    row_step_ = stride / a.row_len;
    column_step_ = stride - row_step_ * a.row_len;
  }
  // The launch's RowArgs for the current element: built afresh at each element from the launch's
  // own (so the only state a thread carries from element to element is its row and column).
  POLYQUANT_HD RowArgs args() const {
    RowArgs view = launch_;
    view.broadcast_mask |= launch_.per_row_mask | launch_.repeated_row_mask;
    fix_row_layout<RowLayout::kRowsResolved>(view);
    for (int i = 0; i < kMaxOperands; ++i) {
      const std::uint32_t bit = 1u << i;
      const auto k = static_cast<std::size_t>(i);
      const std::int64_t at = (launch_.per_row_mask & bit) != 0 ? row_ : (launch_.repeated_row_mask & bit) != 0 ? column_ : 0;
      view.in[k] = static_cast<const unsigned char*>(launch_.in[k]) + at * launch_.in_bytes[k];
    }
    return view;
  }
  // To the element `stride` further on.
  POLYQUANT_HD void advance() {
    row_ += row_step_;
    column_ += column_step_;
    if (column_ >= launch_.row_len) {
      column_ -= launch_.row_len;
      ++row_;
    }
  }

 private:
  const RowArgs& launch_;
  std::int64_t row_ = 0, column_ = 0, row_step_ = 0, column_step_ = 0;
};

// The work of one thread of a row launch in layout kLayout: elements first, first + stride, ...
// (a grid-stride loop; the CUDA kernel runs it per thread, the host stand-in for every thread in
// turn). Row::element<T, kMode>(p, args, j) is the op's per-element row (backends/cuda/row_elements.cuh).
template <class Row, class T, RoundingMode kMode, RowLayout kLayout, class P>
POLYQUANT_HD inline void run_row_thread(const P& p, const RowArgs& a, std::int64_t first, std::int64_t stride) {
  if constexpr (kLayout == RowLayout::kRowsResolved) {
    if (first >= a.n) return;
    RowCursor cursor(a, first, stride);
    for (std::int64_t j = first;;) {
      const RowArgs view = cursor.args();
      Row::template element<T, kMode>(p, view, j);
      j += stride;
      if (j >= a.n) break;
      cursor.advance();
    }
  } else {
    RowArgs fixed = a;
    fix_row_layout<kLayout>(fixed);
    for (std::int64_t j = first; j < a.n; j += stride) Row::template element<T, kMode>(p, fixed, j);
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail::cuda
