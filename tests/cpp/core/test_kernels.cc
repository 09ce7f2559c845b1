// Every optimized kernel of the op list (kernels/ops.inc) against the scalar reference of the same
// op and work type, bit for bit, on its family's kernel cases (tests/cpp/<family>/kernel_cases.cc):
// all rounding modes, sizes around the vector width, misaligned starts, every broadcast pattern of
// the parameters, blocked and repeated-row parameters, streaming stores, ties and IEEE specials.
// The grouped reductions fold into accumulators instead: ReductionKernelTest below.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "core/fpenv.h"
#include "kernel_cases.h"
#include "core/exact_sum.h"
#include "kernels/registry.h"
#include "test_util.h"

namespace polyquant::detail {

// gtest prints parameters in test listings: use the kernel's name.
inline void PrintTo(const KernelEntry& e, std::ostream* os) { *os << e.name; }

namespace {

using test::mixed_values;

using test::isa_available;

using test::KernelCases;
using test::KernelCheck;
using test::Operand;
constexpr std::size_t kLen = test::kOperandLength;

// Runs `kernel` on rows of n elements starting at `offset`, with the operands in `mask` broadcast;
// the kernel writes OutT (float32, or float64 for FloatQuant's function output).
template <class OutT = float>
std::vector<OutT> run_row(RowKernel kernel, const void* params, const std::vector<Operand>& ops, std::int64_t n,
                          std::int64_t offset, std::uint32_t mask, bool stream) {
  RowArgs a;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const bool b = (mask >> k) & 1u;
    const void* base = ops[k].f64.empty() ? static_cast<const void*>(ops[k].f32.data() + (b ? 0 : offset))
                                          : static_cast<const void*>(ops[k].f64.data() + (b ? 0 : offset));
    a.in[k] = base;
    if (b) a.broadcast_mask |= 1u << k;
  }
  std::vector<OutT> out(static_cast<std::size_t>(n + offset + 16), OutT(12345.0f));
  a.out = out.data() + offset;
  a.n = n;
  a.stream = stream;
  kernel(params, a);
  for (std::int64_t i = 0; i < offset; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], OutT(12345.0f)) << "wrote before the row";
  for (std::size_t i = static_cast<std::size_t>(n + offset); i < out.size(); ++i) EXPECT_EQ(out[i], OutT(12345.0f)) << "wrote past the row";
  return {out.begin() + offset, out.begin() + offset + n};
}

// Compares the kernel with the reference over sizes, offsets, broadcast masks and streaming. Every
// result must match bit for bit, NaN results included (payload and sign, not only NaN-ness).
template <class OutT = float>
void check_against_reference(const KernelEntry& e, const void* params, const std::vector<Operand>& ops,
                             const std::string& what) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  // Operand 0 (x) is swept too: a zero-stride x (np.broadcast_to, torch expand()) reaches the
  // kernels as a broadcast operand, alone or with every parameter broadcast.
  std::uint32_t param_bits = 1u;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].param) param_bits |= 1u << k;
  }
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 1; n <= 70; ++n) sizes.push_back(n);
  for (std::int64_t n : {127, 128, 129, 255, 1000, 4099}) sizes.push_back(n);
  for (std::uint32_t mask = 0; mask <= param_bits; ++mask) {
    if ((mask & ~param_bits) != 0) continue;
    for (std::int64_t n : sizes) {
      for (std::int64_t offset : {0, 1, 3, 7}) {
        for (bool stream : {false, true}) {
          const auto got = run_row<OutT>(e.fn, params, ops, n, offset, mask, stream);
          const auto want = run_row<OutT>(ref, params, ops, n, offset, mask, false);
          const auto r = test::all_same(got, want, /*nan_bits=*/true);
          if (!r) {
            ADD_FAILURE() << e.name << " " << what << " n=" << n << " offset=" << offset << " mask=" << mask
                          << " stream=" << stream << ": " << r.message();
            return;
          }
        }
      }
    }
  }
}

// Blocked parameters (AIMET's blockwise encodings): every non-empty set of the parameter operands
// (Operand::param: the scale and offset) one value per row of row_len elements (per-row operands,
// ElementwiseCall::per_row_operands), each other parameter per row too, broadcast or running on, the
// data operands (x; a gradient's upstream gradient) running on, against the reference.
void check_per_row_params(const KernelEntry& e, const void* params, const std::vector<Operand>& ops) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  std::uint32_t param_mask = 0;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].param) param_mask |= 1u << k;
  }
  for (std::int64_t row_len : {1, 3, 15, 16, 17, 32, 100}) {
    for (std::int64_t rows : {1, 2, 7}) {
      const std::int64_t n = rows * row_len;
      for (std::uint32_t per_row = param_mask; per_row != 0; per_row = (per_row - 1) & param_mask) {
        const std::uint32_t others = param_mask & ~per_row;
        for (std::uint32_t broadcast = others;; broadcast = (broadcast - 1) & others) {
          RowArgs a;
          for (std::size_t k = 0; k < ops.size(); ++k) a.in[k] = ops[k].f32.data();
          a.per_row_mask = per_row;
          a.broadcast_mask = broadcast;
          a.row_len = row_len;
          a.n = n;
          std::vector<float> got(static_cast<std::size_t>(n)), want(static_cast<std::size_t>(n));
          a.out = got.data();
          e.fn(params, a);
          a.out = want.data();
          ref(params, a);
          const auto r = test::all_same(got, want);
          if (!r) {
            ADD_FAILURE() << e.name << " per-row row_len=" << row_len << " rows=" << rows << " per_row=" << per_row
                          << " broadcast=" << broadcast << ": " << r.message();
            return;
          }
          if (broadcast == 0) break;
        }
      }
    }
  }
}

// Repeated-row operands (RowArgs::repeated_row_mask, ElementwiseCall::repeated_row_operands: a
// per-channel parameter on channels-last rows, fused into one call): every mask of repeated
// operands, x included, the others contiguous or broadcast, rows shorter and longer than a vector,
// outputs misaligned so that streaming peels a head mid-row. The kernel and the reference given the
// repeated rows must both equal the reference given the rows written out in full.
template <class OutT = float>
void check_repeated_rows(const KernelEntry& e, const void* params, const std::vector<Operand>& ops,
                         const std::string& what) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  const std::size_t nops = ops.size();
  for (std::int64_t row_len : {1, 3, 7, 15, 16, 17, 32, 64, 100, 255}) {
    for (std::int64_t rows : {1, 2, 5, 33}) {
      const std::int64_t n = rows * row_len;
      // Operand k's repeated row (padded cyclically) and its rows written out, in its own type.
      std::vector<std::vector<unsigned char>> repeated(nops), expanded(nops);
      for (std::size_t k = 0; k < nops; ++k) {
        repeated[k] = ops[k].repeated_row(k, row_len, row_len + kRepeatedRowPad);
        expanded[k] = ops[k].repeated_row(k, row_len, n);
      }
      for (std::uint32_t repeat = 1; repeat < (1u << nops); ++repeat) {
        for (bool broadcast_others : {false, true}) {
          std::uint32_t broadcast = 0;
          for (std::size_t k = 1; k < nops && broadcast_others; ++k) {
            if (!((repeat >> k) & 1u) && ops[k].param) broadcast |= 1u << k;
          }
          for (std::int64_t offset : {0, 1, 5}) {
            for (bool stream : {false, true}) {
              RowArgs a, full;
              for (std::size_t k = 0; k < nops; ++k) {
                const bool r = (repeat >> k) & 1u;
                a.in[k] = r ? repeated[k].data() : expanded[k].data();
                full.in[k] = expanded[k].data();
              }
              a.repeated_row_mask = repeat;
              a.broadcast_mask = full.broadcast_mask = broadcast;
              a.row_len = row_len;
              a.n = full.n = n;
              a.stream = stream;
              std::vector<OutT> got(static_cast<std::size_t>(n + offset + 16), OutT(12345.0f)), from_ref(got), want(got);
              a.out = got.data() + offset;
              e.fn(params, a);
              a.out = from_ref.data() + offset;
              a.stream = false;
              ref(params, a);
              full.out = want.data() + offset;
              ref(params, full);
              for (const auto* result : {&got, &from_ref}) {
                const auto r = test::all_same(*result, want, /*nan_bits=*/true);
                if (!r) {
                  ADD_FAILURE() << e.name << " " << what << " repeated rows: " << (result == &got ? "kernel" : "reference")
                                << " row_len=" << row_len << " rows=" << rows << " repeat=" << repeat << " broadcast=" << broadcast
                                << " offset=" << offset << " stream=" << stream << ": " << r.message();
                  return;
                }
              }
            }
          }
        }
      }
    }
  }
}

class KernelTest : public ::testing::TestWithParam<KernelEntry> {};

TEST_P(KernelTest, MatchesReferenceBitForBit) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  const KernelCases cases = test::kernel_cases(e.op);
  if (cases.checks.empty()) GTEST_SKIP() << "checked by " << cases.tested_elsewhere;
  for (const KernelCheck& check : cases.checks) {
    const std::vector<Operand>& ops = *check.operands;
    switch (check.kind) {
      case KernelCheck::Kind::kRows:
        if (check.double_output) check_against_reference<double>(e, check.params.get(), ops, check.what);
        else check_against_reference<float>(e, check.params.get(), ops, check.what);
        break;
      case KernelCheck::Kind::kPerRowParams:
        check_per_row_params(e, check.params.get(), ops);
        break;
      case KernelCheck::Kind::kRepeatedRows:
        check_repeated_rows(e, check.params.get(), ops, check.what);
        break;
    }
    if (HasFailure()) return;
  }
}

// Every op of the op list has kernel cases: checks of its optimized kernels, or the name of the test
// that owns them (a reduction, the Q/DQ formats, a scalar-only op), and the benchmark's call.
TEST(KernelCases, EveryOpHasChecksOrAnOwnerAndABenchmark) {
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    const KernelCases cases = test::kernel_cases(op);
    EXPECT_TRUE(!cases.checks.empty() || cases.tested_elsewhere != nullptr) << op_name(op);
    EXPECT_TRUE(cases.checks.empty() || cases.tested_elsewhere == nullptr) << op_name(op);
    EXPECT_TRUE(static_cast<bool>(cases.bench)) << op_name(op);
    for (const KernelCheck& check : cases.checks) {
      ASSERT_NE(check.params.get(), nullptr) << op_name(op) << " " << check.what;
      ASSERT_TRUE(check.operands && !check.operands->empty()) << op_name(op) << " " << check.what;
      for (const Operand& o : *check.operands) {
        EXPECT_EQ(o.f64.empty() ? o.f32.size() : o.f64.size(), kLen) << op_name(op) << " " << check.what;
      }
    }
  }
}

// Reduction kernels fold a row into accumulators that already hold earlier rows' results. Each is
// run on the same rows (sizes around the vector width and its tails, offsets, specials, subnormals,
// an initial accumulator from a previous row) and must leave exactly the scalar kernel's
// accumulators: NaN-ness, and for the maximum every non-NaN bit.
std::vector<float> reduction_values(std::size_t n, std::uint64_t salt) {
  std::vector<float> v = mixed_values(n, salt, 0.25f);
  for (std::size_t i = 3; i < n; i += 29) v[i] = std::ldexp(static_cast<float>(i % 5) - 2.0f, -128 - static_cast<int>(i % 15));
  for (std::size_t i = 11; i < n; i += 97) v[i] = (i % 2) ? -0.0f : 0.0f;
  return v;
}

// Gradient-like terms (AIMET's scale gradients): each stretch of 480 terms spans its own number of
// binades, around the exact sums' block rule (a block of 16 rows is narrow up to 25; 2 rows up to 28),
// so blocks (512 terms, or 32 m in short runs, straddling stretches) fall on both sides of it. Some
// stretches hold a run of zeros, a NaN, an infinity or a subnormal; terms [0, 160) and
// [2400, 3200) are zeros (whole blocks of zeros, joining the -0 and non-finite lanes).
std::vector<float> narrow_values(std::size_t n) {
  auto rng = test::make_rng(43);
  const int spans[] = {3, 24, 25, 26, 28, 29, 20};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t stretch = i / 480, at = i % 480;
    const int span = spans[stretch % 7];
    const int e = at == 0 ? 0 : at == 1 ? span : static_cast<int>(rng() % static_cast<std::uint64_t>(span + 1));
    const float mantissa = 1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f;
    v[i] = std::ldexp(rng() % 2 ? -mantissa : mantissa, e - 12);
    const bool zeros = (stretch % 5 == 2 && at >= 32 && at < 160) || i < 160 || (i >= 2400 && i < 3200);
    if (zeros) v[i] = (at % 2) ? -0.0f : 0.0f;
    if (at == 300 && stretch % 8 == 3) v[i] = NAN;
    if (at == 300 && stretch % 8 == 5) v[i] = -INFINITY;
    if (at == 300 && stretch % 8 == 6) v[i] = 0x1p-140f;
  }
  return v;
}

// Sums on the edge of the segment groups' rule: positive terms in [1, 2) with one term per 32 at
// 2^-span (its last mantissa bit set), span 20 .. 26 by stretches of 512 terms. A plain float64 sum
// of a segment of 32 .. 128 such terms is exact up to a span of 24 .. 22 (the rule's limits) and
// rounds a little above it, so a rule looser than the spec's gives other accumulators and spills.
std::vector<float> segment_edge_values(std::size_t n) {
  auto rng = test::make_rng(44);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int span = 20 + static_cast<int>((i / 512) % 7);
    const float mantissa = 1.0f + static_cast<float>(rng() % (1u << 23) | 1u) * 0x1p-23f;
    v[i] = i % 32 == 5 ? std::ldexp(mantissa, -span) : mantissa;
  }
  return v;
}

// Accumulators compare bit for bit, except that any NaN equals any NaN: a reduction's NaN is an
// internal statistic whose bits the reductions leave unspecified (kernels/reduce/kernels.h: which of
// several NaNs survives depends on the fold order), and every consumer turns a NaN statistic into the
// NaN its own spec names (QKeras' NaN scale is +NaN, its derived NaN outputs 0xFFC00000; AIMET's
// encodings: tests/python/qkeras/test_specials.py and the AIMET analyzer tests check those bits on
// every kernel set). Per-element kernels (KernelTest) compare every bit, NaN sign and payload included.
class ReductionKernelTest : public ::testing::TestWithParam<KernelEntry> {};

// The exact sums (ExactSumsParams) on one row: the accumulators and the spill list (values, indices,
// order) equal the scalar kernel's bit for bit, and accumulators plus spills hold exactly what the
// accumulators held before plus every term (compared as ExactSumFloat32 values, non-finite flags
// included). The accumulators start from earlier rows' sums, some far above or below the terms
// (their adds must spill) and some non-finite.
void check_exact_sums(const KernelEntry& e, RowKernel ref, RowArgs a, const std::vector<float>& x, std::int64_t n,
                      std::int64_t offset, bool flush, bool mostly_zeros_hint = false, bool presum = false) {
  const std::int64_t full_n = n;
  for (int variant = 0; variant < 12; ++variant) {
    // whole run; per element; per element over 3 rows; segments of 1, 7, 32, 64, 96, 128, 544,
    // 1000 (n cut to a multiple; 32 .. 544 take the vector fold, 7 and 1000 a scalar tail; 64 ..
    // 1000 have blocks, 544 one block and a row after it); whole run from finite accumulators
    // (-0 the only lane a zero changes)
    const std::int64_t segments[] = {0, 0, 0, 1, 7, 32, 64, 96, 128, 544, 1000, 0};
    const std::int64_t segment = segments[variant];
    const bool per_element = variant == 1 || variant == 2;
    const std::int64_t rows = variant == 2 ? 3 : 1;
    n = segment > 0 ? full_n - full_n % segment : full_n;
    a.n = n;
    if (rows * (n + 5) + offset > static_cast<std::int64_t>(kLen)) continue;
    const std::size_t m = per_element ? static_cast<std::size_t>(std::max<std::int64_t>(n, 1))
                          : segment > 0 ? static_cast<std::size_t>(std::max<std::int64_t>(n / segment, 1))
                                        : kExactSumVirtualLanes;
    std::vector<double> start(m);
    for (std::size_t i = 0; i < m; ++i) {
      const double v = static_cast<double>(x[(i * 31 + 7) % kLen]);
      start[i] = i % 9 == 0 ? 0.0 : i % 9 == 1 ? v * 0x1p30 : i % 9 == 2 ? std::ldexp(1.0, -149) : i % 9 == 3 ? v + 0x1p-40 : i % 9 == 4 ? -0.0 : v;
      if (i % 29 == 5 && variant != 11) start[i] = INFINITY;
      if (i % 31 == 6 && variant != 11) start[i] = NAN;
    }
    const std::size_t terms = static_cast<std::size_t>(rows * n);
    // presum: a whole run of whole blocks with their spans and lane sums given (PresummedBlocks),
    // or the segments with their spans and sums; a block or segment that is not narrow gets NaN
    // sums, which must go unused.
    PresummedBlocks presummed;
    const bool whole_run = !per_element && segment == 0;
    if (presum && segment > 0 && n > 0 && n / segment <= PresummedBlocks::kMaxSegments) {
      presummed.segments = n / segment;
      presummed.segment_length = segment;
      for (std::int64_t s = 0; s < presummed.segments; ++s) {
        const float* t = x.data() + offset + segment * s;
        const auto i = static_cast<std::size_t>(s);
        exact_sums_span(t, segment, presummed.segment_max_bits[i], presummed.segment_min_bits[i]);
        double sum = 0.0;
        for (std::int64_t k = segment - 1; k >= 0; --k) sum += static_cast<double>(t[k]);  // any order
        const bool narrow = exact_sums_span_is_narrow(presummed.segment_max_bits[i], presummed.segment_min_bits[i], static_cast<int>(segment));
        presummed.segment_sum[i] = narrow ? sum : NAN;
      }
    }
    if (presum && whole_run && n >= 512 && n / 512 <= PresummedBlocks::kMaxBlocks) {  // its whole blocks, the rest not
      presummed.blocks = n / 512;
      for (std::int64_t b = 0; b < presummed.blocks; ++b) {
        const float* t = x.data() + offset + 512 * b;
        exact_sums_span(t, 512, presummed.max_bits[b], presummed.min_bits[b]);
        const bool narrow = exact_sums_span_is_narrow(presummed.max_bits[b], presummed.min_bits[b], 16);
        for (int l = 0; l < 32; ++l) {
          double sum = 0.0;
          for (int i = 0; i < 16; ++i) sum += static_cast<double>(t[32 * i + l]);
          presummed.lane_sums[b][l] = narrow ? sum : NAN;
        }
      }
    }
    struct Run {
      std::vector<double> acc, spill_value;
      std::vector<std::int32_t> spill_index;
      std::int64_t count = 3;  // spills go after entries already there
    };
    const auto room = static_cast<std::size_t>(exact_sums_spill_room(static_cast<std::int64_t>(terms), segment > 0 ? n / segment : 0));
    Run got{start, std::vector<double>(room + 3, -1.0), std::vector<std::int32_t>(room + 3, -1)};
    Run want = got;
    for (Run* run : {&got, &want}) {
      ExactSumsParams p;
      p.per_element = per_element;
      p.rows = rows;
      p.x_row_stride = n + 5;
      p.segment = segment;
      p.mostly_zeros = mostly_zeros_hint;  // a path choice: the results must not change
      if (presummed.blocks > 0 || presummed.segments > 0) p.presummed = &presummed;  // another
      p.spill_value = run->spill_value.data();
      p.spill_index = run->spill_index.data();
      p.spill_count = &run->count;
      a.out = run->acc.data();
      (run == &got ? e.fn : ref)(&p, a);
    }
    const std::string where = std::string(e.name) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                              " per_element=" + std::to_string(per_element) + " rows=" + std::to_string(rows) +
                              " segment=" + std::to_string(segment) +
                              " flush=" + std::to_string(flush) + " mostly_zeros=" + std::to_string(mostly_zeros_hint) +
                              " presummed=" + std::to_string(presummed.blocks) + "/" + std::to_string(presummed.segments);
    ASSERT_EQ(got.count, want.count) << where;
    ASSERT_EQ(0, std::memcmp(got.acc.data(), want.acc.data(), m * sizeof(double))) << where << " accumulators";
    ASSERT_EQ(0, std::memcmp(got.spill_value.data(), want.spill_value.data(), room * sizeof(double))) << where << " spills";
    ASSERT_LE(got.count, static_cast<std::int64_t>(room) + 3) << where << " more spills than exact_sums_spill_room";
    ASSERT_EQ(got.spill_index, want.spill_index) << where << " spill indices";
    if (flush) continue;  // flushed terms are not the terms
    // Exactness, per accumulator: before + its terms == after + its spills.
    std::vector<ExactSumFloat32> before(m), after(m);
    for (std::size_t i = 0; i < m; ++i) {
      before[i].add(start[i]);
      after[i].add(got.acc[i]);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t i = per_element   ? static_cast<std::size_t>(j)
                              : segment > 0 ? static_cast<std::size_t>(j / segment)
                                            : static_cast<std::size_t>(j % kExactSumVirtualLanes);
        before[i].add(x[static_cast<std::size_t>(offset + r * (n + 5) + j)]);
      }
    }
    for (std::int64_t c = 3; c < got.count; ++c) after[static_cast<std::size_t>(got.spill_index[static_cast<std::size_t>(c)])].add(got.spill_value[static_cast<std::size_t>(c)]);
    for (std::size_t i = 0; i < m; ++i) {
      ASSERT_EQ(before[i].is_nan(), after[i].is_nan()) << where << " at " << i;
      ASSERT_EQ(before[i].is_infinite(), after[i].is_infinite()) << where << " at " << i;
      for (int l = 0; l < ExactSumFloat32::kLimbCount; ++l) ASSERT_EQ(before[i].limb(l), after[i].limb(l)) << where << " at " << i;
    }
  }
}

TEST_P(ReductionKernelTest, AccumulatorsMatchReferenceBitForBit) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  const RowKernel ref = reference_kernel(e.op, e.work);
  const std::vector<float> x = reduction_values(kLen, 40);
  std::vector<float> z = reduction_values(kLen, 41);
  const std::vector<float> narrow = narrow_values(kLen);
  const std::vector<float> edge = segment_edge_values(kLen);
  std::vector<float> mostly_zeros(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) mostly_zeros[i] = i % 97 == 5 || i % 131 == 7 ? x[i] : (i % 2 ? -0.0f : 0.0f);
  // Sparser: about one term in 300 nonzero (AIMET's offset terms at 8 bits), so most 512-term blocks
  // hold under the sparse path's limit of nonzero terms, and some 128-term segments none at all.
  std::vector<float> sparse_zeros(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) sparse_zeros[i] = (i * 2654435761u) % 300 < 1 ? x[i] : (i % 3 ? -0.0f : 0.0f);
  for (auto& v : z) v = std::isfinite(v) ? std::nearbyint(std::fmod(v, 200.0f)) : v;  // integer levels, some specials
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 0; n <= 70; ++n) sizes.push_back(n);
  for (std::int64_t n : {127, 128, 129, 511, 512, 1000, 1056, 2048, 4099}) sizes.push_back(n);
  for (const bool flush : {false, true}) {
    for (std::int64_t n : sizes) {
      for (std::int64_t offset : {0, 1, 5}) {
        RowArgs a;
        a.in[0] = x.data() + offset;
        a.in[1] = z.data() + offset;
        a.n = n;
        std::unique_ptr<ScopedFlushDenormals> env;
        if (flush) env = std::make_unique<ScopedFlushDenormals>();
        if (e.op == KernelOp::kExactSums) {
          check_exact_sums(e, ref, a, x, n, offset, flush);
          if (HasFailure()) return;
          // The mostly-zeros hint on dense terms: the first block leaves the sparse path.
          check_exact_sums(e, ref, a, x, n, offset, flush, true);
          if (HasFailure()) return;
          // The blocks' spans and lane sums given (whole runs of 512 .. 2048 terms), or the
          // segments' spans and sums.
          check_exact_sums(e, ref, a, x, n, offset, flush, false, true);
          if (HasFailure()) return;
          // Mostly zeros of both signs (AIMET's offset gradient): whole blocks of zeros are skipped;
          // with the hint, blocks of a few nonzero terms take the sparse path, and blocks of more
          // (the denser data) send the rest of the call to the dense one.
          for (const std::vector<float>* zeros : {&mostly_zeros, &sparse_zeros}) {
            RowArgs za = a;
            za.in[0] = zeros->data() + offset;
            for (const bool hint : {false, true}) {
              check_exact_sums(e, ref, za, *zeros, n, offset, flush, hint);
              if (HasFailure()) return;
            }
          }
          // Mostly narrow blocks (the lane sums' path), and blocks on both sides of the rule.
          RowArgs na = a;
          na.in[0] = narrow.data() + offset;
          check_exact_sums(e, ref, na, narrow, n, offset, flush);
          if (HasFailure()) return;
          check_exact_sums(e, ref, na, narrow, n, offset, flush, false, true);
          if (HasFailure()) return;
          // Groups of segments on both sides of their rule.
          RowArgs ea = a;
          ea.in[0] = edge.data() + offset;
          check_exact_sums(e, ref, ea, edge, n, offset, flush);
          if (HasFailure()) return;
          check_exact_sums(e, ref, ea, edge, n, offset, flush, false, true);
          if (HasFailure()) return;
        } else if (e.op == KernelOp::kGroupMinMax) {
          // AIMET's statistics never run in flush-to-zero mode (torch does not set it); under DAZ
          // the vector min/max return flushed operands, which the scalar fold does not.
          for (int variant = 0; variant < 3 && !flush; ++variant) {
            // whole run; per element; per element over 3 rows
            const bool per_element = variant > 0;
            const std::int64_t rows = variant == 2 ? 3 : 1;
            if (rows * (n + 5) + offset > static_cast<std::int64_t>(kLen)) continue;
            const std::size_t m = static_cast<std::size_t>(std::max<std::int64_t>(n, 1));
            // Accumulators start from an earlier batch's values (incl. +-inf, NaN, +-0, subnormal).
            std::vector<float> got_min(m), got_max(m);
            for (std::size_t i = 0; i < m; ++i) {
              got_min[i] = i % 7 == 0 ? INFINITY : i % 13 == 1 ? NAN : i % 11 == 2 ? -0.0f : x[(i * 31) % kLen];
              got_max[i] = i % 7 == 0 ? -INFINITY : i % 13 == 1 ? NAN : i % 11 == 2 ? 0.0f : x[(i * 37) % kLen];
            }
            std::vector<float> want_min = got_min, want_max = got_max;
            // Which accumulators saw a -0.0: set where one was folded in, kept where already set.
            std::vector<std::uint8_t> got_nz(m), want_nz(m), expect_nz(m);
            for (std::size_t i = 0; i < m; ++i) got_nz[i] = want_nz[i] = expect_nz[i] = i % 5 == 3;
            for (std::int64_t r = 0; r < rows; ++r) {
              for (std::int64_t j = 0; j < n; ++j) {
                if (is_negative_zero(x[static_cast<std::size_t>(offset + r * (n + 5) + j)])) {
                  expect_nz[per_element ? static_cast<std::size_t>(j) : 0] = 1;
                }
              }
            }
            GroupMinMaxParams p{per_element, rows, n + 5, got_max.data(), got_nz.data()};
            a.out = got_min.data();
            e.fn(&p, a);
            p.max_out = want_max.data();
            p.negative_zero = want_nz.data();
            a.out = want_min.data();
            ref(&p, a);
            ASSERT_EQ(want_nz, expect_nz) << e.name << " reference negative zeros n=" << n << " offset=" << offset
                                          << " per_element=" << per_element << " rows=" << rows;
            ASSERT_EQ(got_nz, expect_nz) << e.name << " negative zeros n=" << n << " offset=" << offset
                                         << " per_element=" << per_element << " rows=" << rows;
            for (std::size_t i = 0; i < m; ++i) {
              for (const auto& [g, w] : {std::pair{got_min[i], want_min[i]}, std::pair{got_max[i], want_max[i]}}) {
                const bool same = (std::isnan(g) && std::isnan(w)) || std::memcmp(&g, &w, sizeof(float)) == 0;
                ASSERT_TRUE(same) << e.name << " n=" << n << " offset=" << offset << " per_element=" << per_element
                                  << " rows=" << rows << " flush=" << flush << " at " << i << ": got " << g << " want " << w;
              }
            }
          }
        } else if (e.op == KernelOp::kGroupMax) {
          for (bool absolute : {false, true}) {
            for (int variant = 0; variant < 3; ++variant) {
              // whole run; per element; per element over 3 rows (a tile of a channels-last tensor)
              const bool per_element = variant > 0;
              const std::int64_t rows = variant == 2 ? 3 : 1;
              if (rows * (n + 5) + offset > static_cast<std::int64_t>(kLen)) continue;
              const GroupMaxParams p{absolute, per_element, rows, n + 5};
              // Accumulators start from an earlier row's values (incl. -inf, NaN, -0, subnormal).
              std::vector<float> got(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
              for (std::size_t i = 0; i < got.size(); ++i) got[i] = i % 7 == 0 ? -INFINITY : i % 13 == 1 ? NAN : x[(i * 31) % kLen];
              std::vector<float> want = got;
              a.out = got.data();
              e.fn(&p, a);
              a.out = want.data();
              ref(&p, a);
              for (std::size_t i = 0; i < got.size(); ++i) {
                const bool same = (std::isnan(got[i]) && std::isnan(want[i])) ||
                                  std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
                ASSERT_TRUE(same) << e.name << " n=" << n << " offset=" << offset << " absolute=" << absolute
                                  << " per_element=" << per_element << " rows=" << rows << " flush=" << flush << " at " << i
                                  << ": got " << got[i] << " want " << want[i];
              }
            }
          }
        } else {
          for (int variant = 0; variant < 3; ++variant) {
            const bool per_element = variant > 0;
            const std::int64_t rows = variant == 2 ? 3 : 1;
            if (rows * (n + 5) + offset > static_cast<std::int64_t>(kLen)) continue;
            for (float divisor : {1.0f, 0.25f, 3.0f}) {
              const ProductSumsParams p{per_element, divisor != 1.0f, divisor, exact_reciprocal(divisor), rows, n + 5, n + 7};
              if (rows * (n + 7) + offset > static_cast<std::int64_t>(kLen)) continue;
              std::vector<double> got(static_cast<std::size_t>(per_element ? 2 * n : 16));
              for (std::size_t i = 0; i < got.size(); ++i) got[i] = static_cast<double>(x[(i * 17) % kLen]) * 1e-3;
              std::vector<double> want = got;
              a.out = got.data();
              e.fn(&p, a);
              a.out = want.data();
              ref(&p, a);
              for (std::size_t i = 0; i < got.size(); ++i) {
                const bool same = (std::isnan(got[i]) && std::isnan(want[i])) ||
                                  std::memcmp(&got[i], &want[i], sizeof(double)) == 0;
                ASSERT_TRUE(same) << e.name << " n=" << n << " offset=" << offset << " per_element=" << per_element
                                  << " rows=" << rows << " divisor=" << divisor << " flush=" << flush << " at " << i
                                  << ": got " << got[i] << " want " << want[i];
              }
            }
          }
        }
      }
    }
  }
}

std::vector<KernelEntry> optimized_reduction_kernels() {
  std::vector<KernelEntry> v;
  for (const auto& e : all_kernels()) {
    if (e.isa != Isa::kScalar &&
        (e.op == KernelOp::kGroupMax || e.op == KernelOp::kProductSums || e.op == KernelOp::kGroupMinMax ||
         e.op == KernelOp::kExactSums)) {
      v.push_back(e);
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, ReductionKernelTest, ::testing::ValuesIn(optimized_reduction_kernels()),
                         [](const auto& info) { return std::string(info.param.name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ReductionKernelTest);

std::vector<KernelEntry> optimized_kernels() {
  std::vector<KernelEntry> v;
  for (const auto& e : all_kernels()) {
    if (e.isa != Isa::kScalar) v.push_back(e);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, KernelTest, ::testing::ValuesIn(optimized_kernels()),
                         [](const auto& info) { return std::string(info.param.name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(KernelTest);

// The optimized FloatQuant kernels take the exponent of |x|/s + tiny from its bit field instead of
// floor(log2f(.)) except in the top 2^11 mantissa codes of each binade. Check that claim for every
// positive normal float32 (2^31 values, split over two threads).
TEST(FloatQuantExponent, BitFieldEqualsFloorLog2BelowTheLimit) {
  if (std::getenv("POLYQUANT_SKIP_EXHAUSTIVE")) GTEST_SKIP() << "POLYQUANT_SKIP_EXHAUSTIVE is set";
  constexpr std::uint32_t kLimit = (1u << 23) - (1u << 11);
  std::atomic<std::uint64_t> mismatches{0};
  auto scan = [&](std::uint32_t first_exp, std::uint32_t last_exp) {
    std::uint64_t bad = 0;
    for (std::uint32_t be = first_exp; be <= last_exp; ++be) {
      for (std::uint32_t mant = 0; mant < kLimit; ++mant) {
        const float a = std::bit_cast<float>((be << 23) | mant);
        if (std::floor(std::log2(a)) != static_cast<float>(static_cast<int>(be) - 127)) ++bad;
      }
    }
    mismatches += bad;
  };
  std::thread t(scan, 1u, 127u);
  scan(128u, 254u);
  t.join();
  EXPECT_EQ(mismatches.load(), 0u);
}

}  // namespace
}  // namespace polyquant::detail
