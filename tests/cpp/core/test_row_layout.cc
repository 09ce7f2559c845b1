// The CUDA launches' compile-time layouts (backends/cuda/row_layout.h), on the CPU: a launch is
// given the most specific layout its masks and element sizes allow, and fixing that layout's masks
// leaves the index every operand in use reads at every element unchanged (so the specialised
// kernels compute the same elements from the same operands as the general one); a thread's
// RowCursor reads every operand where index_of does, a held operand gives back the bytes it was
// read from, and the thread loops of the kernels that read ahead equal the reference rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/row_elements.cuh"
#include "backends/cuda/row_layout.h"
#include "core/fake_device.h"
#include "kernel_cases.h"
#include "kernels/registry.h"
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
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kNoRowOperands) << "no element sizes: x cannot be read ahead";
  a.in_bytes = {4, 4, 8, 4};
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kFirstStreams);  // x and a per-tensor scale
  EXPECT_EQ(row_layout_of(a, 0, 2), RowLayout::kNoRowOperands) << "x wider than a thread holds";
  a.in_bytes[0] = 1;
  EXPECT_EQ(row_layout_of(a, 0, 2), RowLayout::kFirstStreams) << "int8 x";
  a.in_bytes[0] = 3;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kNoRowOperands) << "not a size a thread reads";
  a.in_bytes[0] = 4;
  a.in[2] = nullptr;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kNoRowOperands) << "a host scalar not marked broadcast";
  a.broadcast_mask |= 0b100;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kFirstStreams) << "a host scalar (broadcast) beside x";
  a.in_bytes[2] = 0;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kNoRowOperands) << "a host scalar without its size";
  a.in_bytes[2] = 8;
  a.in[3] = &value;
  EXPECT_EQ(row_layout_of(a, 0b100), RowLayout::kNoRowOperands) << "a contiguous third operand";
  EXPECT_EQ(row_layout_of(a, 0b100, 8, 3), RowLayout::kFirstStreams) << "the op's second stream, contiguous";
  EXPECT_EQ(row_layout_of(a, 0b100, 2, 3), RowLayout::kNoRowOperands) << "a second stream wider than a thread holds";
  a.broadcast_mask |= 0b1000;
  EXPECT_EQ(row_layout_of(a, 0b100, 8, 3), RowLayout::kFirstStreams) << "the op's second stream, one value";
  a.broadcast_mask &= ~0b1000u;
  a.broadcast_mask = 0b1111;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kNoRowOperands) << "x broadcast too";
  a.broadcast_mask = 0b10;
  a.per_row_mask = 0b1000;
  a.row_len = 8;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kRowsResolved);
  EXPECT_EQ(row_layout_of(a, 0, 8, 3), RowLayout::kGeneral) << "the second stream a row operand";
  a.per_row_mask = 0;
  a.repeated_row_mask = 0b1000;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kRowsResolved);
  a.in_bytes = {};
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "row operands without their sizes";
  a.repeated_row_mask = 0;
  a.per_row_mask = 0b1000;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "row operands without their sizes";
}

RowArgs fixed(RowArgs a, RowLayout layout) {
  switch (layout) {
    case RowLayout::kFirstStreams: fix_row_layout<RowLayout::kFirstStreams>(a); break;
    case RowLayout::kNoRowOperands: fix_row_layout<RowLayout::kNoRowOperands>(a); break;
    case RowLayout::kGeneral: fix_row_layout<RowLayout::kGeneral>(a); break;
    case RowLayout::kRowsResolved: ADD_FAILURE() << "resolved launches: TheCursorReadsTheAddressesIndexOfGives"; break;
  }
  return a;
}

TEST(RowLayout, FixingTheLayoutKeepsEveryOperandsIndex) {
  static const float value = 1.0f;
  auto rng = test::make_rng(91);
  int specialised = 0, first_streams = 0;
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
      a.in_bytes[static_cast<std::size_t>(i)] = trial % 5 == 0 ? 0 : 4;
      if (kind < 3) a.broadcast_mask |= 1u << i;
      else if (kind == 5 && trial % 3 == 0) a.per_row_mask |= 1u << i;
      else if (kind == 6 && trial % 3 == 0) a.repeated_row_mask |= 1u << i;
    }
    for (int i = 0; i < kMaxOperands; ++i) {
      if ((scalars >> i) & 1u) a.in_bytes[static_cast<std::size_t>(i)] = 8;
    }
    const RowLayout layout = row_layout_of(a, scalars);
    if (layout == RowLayout::kRowsResolved) continue;
    specialised += layout != RowLayout::kGeneral;
    first_streams += layout == RowLayout::kFirstStreams;
    const RowArgs f = fixed(a, layout);
    for (int i = 0; i < operands; ++i) {
      for (std::int64_t j = 0; j < a.n; ++j) {
        ASSERT_EQ(f.index_of(i, j), a.index_of(i, j)) << "trial " << trial << " operand " << i << " element " << j;
      }
    }
  }
  EXPECT_GT(specialised, 5000) << "the specialised layouts were exercised";
  EXPECT_GT(first_streams, 1000);
}

}  // namespace
}  // namespace polyquant::detail::cuda

namespace polyquant::detail::cuda {
namespace {

// The address operand i of `a` reads for element j (index_of, in elements of `size` bytes).
const unsigned char* read_address(const RowArgs& a, int i, std::int64_t j, std::size_t size) {
  return static_cast<const unsigned char*>(a.in[static_cast<std::size_t>(i)]) + a.index_of(i, j) * static_cast<std::int64_t>(size);
}

// A launch with per-row and repeated-row operands whose element sizes are known gets the
// resolved layout; without a size, or without a row length, the general one.
TEST(RowLayout, RowOperandsWithTheirSizesAreResolvedPerThread) {
  static const float value = 1.0f;
  RowArgs a;
  a.n = 64;
  a.row_len = 8;
  a.in[0] = &value;
  a.in[1] = &value;
  a.per_row_mask = 0b10;
  a.in_bytes[0] = 4;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "no element size";
  a.in_bytes[1] = 4;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kRowsResolved);
  a.in_bytes[0] = 0;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "x without its size: not read ahead";
  a.in_bytes[0] = 8;
  EXPECT_EQ(row_layout_of(a, 0, 4), RowLayout::kGeneral) << "x wider than a thread holds";
  a.in_bytes[0] = 4;
  a.per_row_mask = 0b11;
  a.in_bytes[1] = 4;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "x itself a row operand";
  a.per_row_mask = 0b10;
  a.in[2] = &value;
  a.repeated_row_mask = 0b100;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "a repeated-row operand without its size";
  a.in_bytes[2] = 8;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kRowsResolved);
  a.row_len = 0;
  EXPECT_EQ(row_layout_of(a, 0), RowLayout::kGeneral) << "no row length";
}

// Each thread's cursor, stepped over its elements, reads every operand at the address index_of
// gives for that element: per-row, repeated-row, broadcast and contiguous operands of every
// element size, rows of 1 to 40 elements, and strides below, at and above the row length and the
// row count (a thread with one element, with steps of less than a row, of several rows).
TEST(RowLayout, TheCursorReadsTheAddressesIndexOfGives) {
  static const std::uint64_t storage[64] = {};
  auto rng = test::make_rng(92);
  std::int64_t steps = 0, carries = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    RowArgs a;
    a.row_len = 1 + static_cast<std::int64_t>(rng() % 40);
    a.n = a.row_len * (1 + static_cast<std::int64_t>(rng() % 12));
    const int operands = 1 + static_cast<int>(rng() % kMaxOperands);
    std::size_t sizes[kMaxOperands] = {};
    for (int i = 0; i < operands; ++i) {
      const auto k = static_cast<std::size_t>(i);
      a.in[k] = &storage[rng() % 8];
      sizes[k] = std::size_t{1} << (rng() % 4);
      a.in_bytes[k] = static_cast<std::uint8_t>(sizes[k]);
      if (i == 0 && trial % 8 != 0) continue;  // x contiguous (else a general launch, skipped)
      switch (rng() % 4) {
        case 0: a.per_row_mask |= 1u << i; break;
        case 1: a.repeated_row_mask |= 1u << i; break;
        case 2: a.broadcast_mask |= 1u << i; break;
        default: break;  // contiguous
      }
    }
    if (row_layout_of(a, 0) != RowLayout::kRowsResolved) continue;
    const std::int64_t strides[] = {1, 2, 3, a.row_len - 1, a.row_len, a.row_len + 1, 2 * a.row_len + 3, a.n - 1, a.n, a.n + 7};
    for (std::int64_t stride : strides) {
      if (stride < 1) continue;
      for (std::int64_t first = 0; first < std::min(stride, a.n); ++first) {
        RowCursor cursor(a, first, stride);
        for (std::int64_t j = first;;) {
          const RowArgs& view = cursor.args();
          ASSERT_EQ(view.per_row_mask | view.repeated_row_mask, 0u);
          for (int i = 0; i < operands; ++i) {
            ASSERT_EQ(read_address(view, i, j, sizes[i]), read_address(a, i, j, sizes[i]))
                << "trial " << trial << " stride " << stride << " operand " << i << " element " << j << " row_len " << a.row_len;
          }
          const std::int64_t column = j % a.row_len;
          j += stride;
          if (j >= a.n) break;
          carries += j % a.row_len < column;
          ++steps;
          cursor.advance();
        }
      }
    }
  }
  EXPECT_GT(steps, 100000);
  EXPECT_GT(carries, 10000) << "steps whose column wraps into the next row";
}

// Runs the launch `a` (its output set here) through the scalar reference row and through the CUDA
// kernels' thread loop in `layout` on the host with 1, 5, 13, 64 and 1000 threads; every output
// byte, skipped ones included, must be equal. Counts the thread-loop launches in `launches`.
::testing::AssertionResult thread_loops_equal_reference(KernelOp op, RowKernel ref, const void* params, RowArgs a,
                                                        RowLayout layout, int& launches) {
  constexpr unsigned char kUntouched = 0xA5;
  std::vector<unsigned char> want(static_cast<std::size_t>(a.n) * 8, kUntouched);
  a.out = want.data();
  ref(params, a);
  for (std::int64_t threads : {1, 5, 13, 64, 1000}) {
    std::vector<unsigned char> got(want.size(), kUntouched);
    a.out = got.data();
    if (!test::run_row_threads_on_host(op, WorkType::kF32, params, a, threads, layout)) {
      return ::testing::AssertionFailure() << "no thread loop for this op";
    }
    ++launches;
    const auto [at, _] = std::mismatch(got.begin(), got.end(), want.begin());
    if (at != got.end()) {
      const auto byte = at - got.begin();
      return ::testing::AssertionFailure() << "threads " << threads << ": output byte " << byte << " is "
                                           << int(got[static_cast<std::size_t>(byte)]) << ", the reference row's "
                                           << int(want[static_cast<std::size_t>(byte)]);
    }
  }
  return ::testing::AssertionSuccess();
}

// The kernel cases of every per-element op with blocked (per-row) or repeated-row operands, run
// through the CUDA kernels' resolved thread loop (run_row_thread, on the host) with 1, 5, 13, 64 and
// 1000 threads, equal the scalar reference row byte for byte: the same elements, in the kernel's
// order of reads, as the GPU runs them (RowsOnDevice.* repeats this on a GPU).
TEST(RowLayout, ResolvedThreadLoopsEqualTheReferenceRows) {
  constexpr std::int64_t kLength = 4099;
  int ops_checked = 0, launches = 0;
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    const RowKernel ref = reference_kernel(op, WorkType::kF32);
    if (ref == nullptr) continue;
    const test::KernelCases cases = test::kernel_cases(op);
    bool checked = false;
    for (const test::KernelCheck& check : cases.checks) {
      if (check.kind == test::KernelCheck::Kind::kRows) continue;
      const std::vector<test::Operand>& ops = *check.operands;
      const std::size_t nops = ops.size();
      for (std::int64_t row_len : {1, 17, 100, 1024}) {
        const std::int64_t n = (kLength / row_len) * row_len;
        std::vector<std::vector<unsigned char>> compact(nops), whole(nops);
        std::vector<std::uint8_t> sizes(nops);
        for (std::size_t i = 0; i < nops; ++i) {
          sizes[i] = static_cast<std::uint8_t>(ops[i].element_size());
          whole[i].assign(ops[i].bytes(), ops[i].bytes() + kLength * sizes[i]);
          compact[i] = ops[i].repeated_row(i, row_len, row_len + kRepeatedRowPad);
        }
        const bool per_row = check.kind == test::KernelCheck::Kind::kPerRowParams;
        std::vector<std::uint32_t> masks;
        if (per_row) {
          std::uint32_t params = 0;
          for (std::size_t i = 1; i < nops; ++i) params |= ops[i].param ? 1u << i : 0u;
          masks.push_back(params);
        } else {
          for (std::uint32_t m = 1; m < (1u << nops); ++m) masks.push_back(m);
        }
        for (std::uint32_t mask : masks) {
          RowArgs a;
          a.n = n;
          a.row_len = row_len;
          (per_row ? a.per_row_mask : a.repeated_row_mask) = mask;
          for (std::size_t i = 0; i < nops && i < a.in.size(); ++i) {
            a.in[i] = (!per_row && ((mask >> i) & 1u) != 0) ? compact[i].data() : whole[i].data();
            a.in_bytes[i] = sizes[i];
          }
          const int second = second_stream_of(op);
          if ((mask & 1u) != 0 || (second > 0 && ((mask >> second) & 1u) != 0)) {  // x or the second stream a row operand
            ASSERT_EQ(row_layout_of(a, 0, 8, second), RowLayout::kGeneral);
            continue;
          }
          ASSERT_EQ(row_layout_of(a, 0, 8, second), RowLayout::kRowsResolved);
          ASSERT_TRUE(thread_loops_equal_reference(op, ref, check.params.get(), a, RowLayout::kRowsResolved, launches))
              << op_name(op) << " " << check.what << (per_row ? " per-row" : " repeated rows") << " mask " << mask << " row_len "
              << row_len;
          checked = true;
        }
      }
    }
    ops_checked += checked;
  }
  EXPECT_GE(ops_checked, 8);
  EXPECT_GT(launches, 1000);
}

}  // namespace
}  // namespace polyquant::detail::cuda

namespace polyquant::detail::cuda {
namespace {

// A held operand is the bytes it was read from: every element size a thread reads, at several
// elements, read back as the types an element reads them as, NaN payloads and signalling NaNs
// included (the value travels as an integer, never through a float register).
TEST(RowLayout, AHeldOperandIsTheBytesItWasReadFrom) {
  const std::vector<float> floats = test::special_values();
  const std::vector<double> doubles = {0.0, -0.0, std::bit_cast<double>(0x7FF0000000000001ull), std::bit_cast<double>(0xFFF8DEADBEEF0001ull),
                                       4.9e-324, -1.5, 1e308};
  const std::vector<std::int8_t> int8s = {0, 1, -1, 127, -128, 42};
  const std::vector<std::uint16_t> halves = {0x0000, 0x8000, 0x7C01, 0xFE00, 0x0001, 0x3C00};
  for (std::size_t j = 0; j < floats.size(); ++j) {
    const auto held = HeldOperand<std::uint32_t>(read_operand_bits<std::uint32_t>(floats.data(), static_cast<std::int64_t>(j), 4));
    float back = 0;
    std::memcpy(&back, held.bytes, sizeof back);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back), std::bit_cast<std::uint32_t>(floats[j])) << j;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(*reinterpret_cast<const float*>(held.bytes)), std::bit_cast<std::uint32_t>(floats[j]));
    const auto wide = HeldOperand<std::uint64_t>(read_operand_bits<std::uint64_t>(floats.data(), static_cast<std::int64_t>(j), 4));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(*reinterpret_cast<const float*>(wide.bytes)), std::bit_cast<std::uint32_t>(floats[j]));
  }
  for (std::size_t j = 0; j < doubles.size(); ++j) {
    const auto held = HeldOperand<std::uint64_t>(read_global_operand_bits<std::uint64_t>(doubles.data(), static_cast<std::int64_t>(j), 8));
    ASSERT_EQ(std::bit_cast<std::uint64_t>(*reinterpret_cast<const double*>(held.bytes)), std::bit_cast<std::uint64_t>(doubles[j])) << j;
  }
  for (std::size_t j = 0; j < int8s.size(); ++j) {
    const auto held = HeldOperand<std::uint32_t>(read_global_operand_bits<std::uint32_t>(int8s.data(), static_cast<std::int64_t>(j), 1));
    ASSERT_EQ(*reinterpret_cast<const std::int8_t*>(held.bytes), int8s[j]) << j;
  }
  for (std::size_t j = 0; j < halves.size(); ++j) {
    const auto held = HeldOperand<std::uint32_t>(read_operand_bits<std::uint32_t>(halves.data(), static_cast<std::int64_t>(j), 2));
    ASSERT_EQ(*reinterpret_cast<const std::uint16_t*>(held.bytes), halves[j]) << j;
  }
}

// The kernel cases of every per-element op with per-tensor parameters (every operand after x one
// value: elements 0, 1, 37 and 1000 of each, so special parameter values are among them; and with
// the op's second stream, a gradient's other operand, contiguous beside x), run
// through the thread loop of the kernel that reads x ahead and its parameters once per thread
// (RowLayout::kFirstStreams, on the host) with 1, 5, 13, 64 and 1000 threads over rows of 1 to 4099
// elements, equal the scalar reference row byte for byte.
TEST(RowLayout, ReadAheadThreadLoopsEqualTheReferenceRows) {
  int ops_checked = 0, launches = 0, second_streams = 0;
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    const RowKernel ref = reference_kernel(op, WorkType::kF32);
    if (ref == nullptr) continue;
    const test::KernelCases cases = test::kernel_cases(op);
    bool checked = false;
    for (const test::KernelCheck& check : cases.checks) {
      const std::vector<test::Operand>& ops = *check.operands;
      const std::size_t nops = ops.size();
      if (nops > static_cast<std::size_t>(kMaxOperands)) continue;
      const int second = second_stream_of(op);
      const bool has_second = second > 0 && static_cast<std::size_t>(second) < nops;
      for (std::int64_t parameter_at : {0, 1, 37, 1000}) {
        for (std::int64_t n : {1, 2, 5, 100, 4099}) {
          // The op's second stream one value, then (where the case has it) contiguous.
          for (const bool second_contiguous : {false, true}) {
            if (second_contiguous && !has_second) continue;
            RowArgs a;
            a.n = n;
            for (std::size_t i = 0; i < nops; ++i) {
              const std::size_t size = ops[i].element_size();
              const bool contiguous = i == 0 || (second_contiguous && static_cast<int>(i) == second);
              a.in[i] = ops[i].bytes() + (contiguous ? 0 : parameter_at * static_cast<std::int64_t>(size));
              a.in_bytes[i] = static_cast<std::uint8_t>(size);
              if (!contiguous) a.broadcast_mask |= 1u << i;
            }
            ASSERT_EQ(row_layout_of(a, 0, 8, second), RowLayout::kFirstStreams);
            second_streams += second_contiguous;
            ASSERT_TRUE(thread_loops_equal_reference(op, ref, check.params.get(), a, RowLayout::kFirstStreams, launches))
                << op_name(op) << " " << check.what << " parameters at " << parameter_at << " n " << n
                << (second_contiguous ? " second stream contiguous" : "");
            checked = true;
          }
        }
      }
    }
    ops_checked += checked;
  }
  EXPECT_GE(ops_checked, 10);
  EXPECT_GT(launches, 1000);
  EXPECT_GT(second_streams, 100) << "launches whose second stream (a gradient's other operand) is contiguous";
}

}  // namespace
}  // namespace polyquant::detail::cuda
