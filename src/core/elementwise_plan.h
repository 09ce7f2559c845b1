// The engine's view of a call after broadcasting: shared by the host loop (core/elementwise.cc) and
// the device path (core/device_elementwise.cc).
#pragma once

#include <cstdint>

#include "core/elementwise.h"

namespace polyquant::detail {

// Every operand broadcast onto the output's shape, size-1 dimensions dropped and neighbours merged
// where they run on contiguously for every operand (strides in elements; 0: broadcast).
struct Plan {
  int rank = 0;  // after coalescing; the last dimension is the inner run
  std::int64_t shape[kMaxRank] = {};
  int num_inputs = 0;
  std::int64_t in_strides[kMaxOperands][kMaxRank] = {};
  std::int64_t out_strides[kMaxRank] = {};
};

Plan make_plan(const ElementwiseCall& call);

// Whether `out` shares memory with an input other than element for element (out = x[::-1],
// out = x.T, out = a shifted window of x, ...). numpy ufuncs buffer such calls; so does the engine.
bool output_overlaps_inputs(const ElementwiseCall& call);

}  // namespace polyquant::detail
