// The CUDA launches' compile-time layouts (backends/cuda/row_layout.h), on the CPU: a launch is
// given the most specific layout its masks allow, and fixing that layout's masks leaves the index
// every operand in use reads at every element unchanged (so the specialised kernels compute the
// same elements from the same operands as the general one).
#include <gtest/gtest.h>

#include <random>

#include "backends/cuda/row_layout.h"
#include "test_values.h"

namespace polyquant::detail::cuda {
namespace {

TEST(RowLayout, EachLaunchGetsTheMostSpecificLayoutItsMasksAllow) {
  static const float value = 1.0f;
  RowArgs a;
  a.n = 64;
  a.in[0] = &value;
  a.in[1] = &value;
  a.broadcast_mask = 0b10;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kFirstStreams);  // x and a per-tensor scale
  a.in[2] = nullptr;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kNoRowOperands) << "a host scalar not marked broadcast";
  a.broadcast_mask |= 0b100;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kFirstStreams) << "a host scalar (broadcast) beside x";
  a.in[3] = &value;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kNoRowOperands) << "a contiguous third operand";
  a.broadcast_mask = 0b1111;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kNoRowOperands) << "x broadcast too";
  a.broadcast_mask = 0b10;
  a.per_row_mask = 0b1000;
  a.row_len = 8;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral);
  a.per_row_mask = 0;
  a.repeated_row_mask = 0b1000;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral);
}

RowArgs fixed(RowArgs a, RowLayout layout) {
  switch (layout) {
    case RowLayout::kFirstStreams: fix_row_layout<RowLayout::kFirstStreams>(a); break;
    case RowLayout::kNoRowOperands: fix_row_layout<RowLayout::kNoRowOperands>(a); break;
    case RowLayout::kGeneral: fix_row_layout<RowLayout::kGeneral>(a); break;
  }
  return a;
}

TEST(RowLayout, FixingTheLayoutKeepsEveryOperandsIndex) {
  static const float value = 1.0f;
  auto rng = test::make_rng(91);
  int specialised = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    RowArgs a;
    a.row_len = 1 + static_cast<std::int64_t>(rng() % 16);
    a.n = a.row_len * (1 + static_cast<std::int64_t>(rng() % 16));
    const int operands = 1 + static_cast<int>(rng() % kMaxOperands);
    std::uint32_t scalars = 0;
    for (int i = 0; i < operands; ++i) {
      const unsigned kind = static_cast<unsigned>(rng() % 8);  // mostly contiguous or broadcast
      if (kind == 7 && i > 0) {                                // passed by value (engine: broadcast)
        scalars |= 1u << i;
        a.broadcast_mask |= 1u << i;
        continue;
      }
      a.in[static_cast<std::size_t>(i)] = &value;
      if (kind < 3) a.broadcast_mask |= 1u << i;
      else if (kind == 5 && trial % 3 == 0) a.per_row_mask |= 1u << i;
      else if (kind == 6 && trial % 3 == 0) a.repeated_row_mask |= 1u << i;
    }
    const RowLayout layout = row_layout_of(a, scalars);
    specialised += layout != RowLayout::kGeneral;
    const RowArgs f = fixed(a, layout);
    for (int i = 0; i < operands; ++i) {
      for (std::int64_t j = 0; j < a.n; ++j) {
        ASSERT_EQ(f.index_of(i, j), a.index_of(i, j)) << "trial " << trial << " operand " << i << " element " << j;
      }
    }
  }
  EXPECT_GT(specialised, 5000) << "the specialised layouts were exercised";
}

}  // namespace
}  // namespace polyquant::detail::cuda
