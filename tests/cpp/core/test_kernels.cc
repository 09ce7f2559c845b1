// Every optimized kernel of the op list (kernels/ops.inc) against the scalar reference of the same op and work type,
// bit for bit: all rounding modes, sizes around the vector width, misaligned starts, every
// broadcast pattern of the parameters, streaming stores, ties and IEEE specials.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "core/fpenv.h"
#include "kernels/registry.h"
#include "test_util.h"

namespace polyquant::detail {

// gtest prints parameters in test listings: use the kernel's name.
inline void PrintTo(const KernelEntry& e, std::ostream* os) { *os << e.name; }

namespace {

using test::mixed_values;

bool isa_available(Isa isa) {
  for (Isa s : supported_isas()) {
    if (s == isa) return true;
  }
  return false;
}

// One operand: its values (enough for the largest row) and whether it may be broadcast.
struct Operand {
  std::vector<float> f32;
  std::vector<double> f64;  // used instead of f32 when non-empty
  bool param = true;        // may be broadcast (the sweep broadcasts the data operand x too)
};

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

constexpr std::size_t kLen = 4099 + 16;

// Blocked AIMET parameters: the scale / offset one value per row of row_len elements (per-row
// operands, ElementwiseCall::per_row_operands) or broadcast, x running on, against the reference.
void check_affine_per_row(const KernelEntry& e, const AffineParams& p, const std::vector<Operand>& ops) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  for (std::int64_t row_len : {1, 3, 15, 16, 17, 32, 100}) {
    for (std::int64_t rows : {1, 2, 7}) {
      const std::int64_t n = rows * row_len;
      for (std::uint32_t per_row : {2u, 4u, 6u}) {
        for (std::uint32_t broadcast : {0u, 2u, 4u}) {
          if ((broadcast & per_row) != 0) continue;
          RowArgs a;
          for (int k = 0; k < 3; ++k) a.in[static_cast<std::size_t>(k)] = ops[static_cast<std::size_t>(k)].f32.data();
          a.per_row_mask = per_row;
          a.broadcast_mask = broadcast;
          a.row_len = row_len;
          a.n = n;
          std::vector<float> got(static_cast<std::size_t>(n)), want(static_cast<std::size_t>(n));
          a.out = got.data();
          e.fn(&p, a);
          a.out = want.data();
          ref(&p, a);
          const auto r = test::all_same(got, want);
          if (!r) {
            ADD_FAILURE() << e.name << " per-row row_len=" << row_len << " rows=" << rows << " per_row=" << per_row
                          << " broadcast=" << broadcast << ": " << r.message();
            return;
          }
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
        const bool wide = !ops[k].f64.empty();
        const std::size_t esize = wide ? 8 : 4;
        const auto* src = wide ? static_cast<const unsigned char*>(static_cast<const void*>(ops[k].f64.data()))
                               : static_cast<const unsigned char*>(static_cast<const void*>(ops[k].f32.data()));
        const unsigned char* row = src + k * 37 * esize;  // rows of different operands differ
        repeated[k] = test::cyclic_copy(row, esize, row_len, row_len + kRepeatedRowPad);
        expanded[k] = test::cyclic_copy(row, esize, row_len, n);
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

std::vector<float> fill(float v) { return std::vector<float>(kLen, v); }

std::vector<float> random_params(std::uint64_t salt, std::vector<float> choices) {
  auto rng = test::make_rng(salt);
  std::vector<float> v(kLen);
  for (auto& x : v) x = choices[rng() % choices.size()];
  return v;
}

// NaNs of both signs, with and without a payload, and a signalling one, every `step` elements from
// `start` (the QKeras kernels specify which NaN they return: qk_nan_result).
void sprinkle_nans(std::vector<float>& v, std::size_t start, std::size_t step) {
  const std::uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFC54321u, 0x7F812345u, 0xFF800001u};
  std::size_t k = 0;
  for (std::size_t i = start; i < v.size(); i += step) v[i] = std::bit_cast<float>(nans[k++ % std::size(nans)]);
}

class KernelTest : public ::testing::TestWithParam<KernelEntry> {};

TEST_P(KernelTest, MatchesReferenceBitForBit) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  for (int m = 0; m < kNumRoundingModes; ++m) {
    const auto mode = static_cast<RoundingMode>(m);
    const std::string mode_name = rounding_mode_name(mode);
    switch (e.op) {
      case KernelOp::kGroupMax:
      case KernelOp::kProductSums:
        break;  // accumulators, not rows: ReductionKernelTest below
      case KernelOp::kGroupMinMax:
        break;  // accumulators, not rows: ReductionKernelTest below
      case KernelOp::kQuantizeLinear:
      case KernelOp::kDequantizeLinear:
        break;  // integer and narrow outputs: QdqKernelTest (onnx/test_api.cc)
      case KernelOp::kAffineGrad:
        break;  // scalar only (training-time gradients)
      case KernelOp::kAffine: {
        if (m > 0) break;
        // x around the grid (ties of x / s included by mixed_values' halves), scales with a tiny,
        // a zero and a negative one, integer and non-integer offsets.
        const std::vector<Operand> ops = {{mixed_values(kLen, 21, 64.0f), {}, false},
                                          {random_params(22, {0.5f, 0.1f, 3.0f, -0.25f, 1e-30f, 0.0f, 0.0078125f}), {}, true},
                                          {random_params(23, {0.0f, -128.0f, 3.0f, -0.5f, 2.5f, -0.0f}), {}, true}};
        const std::pair<double, double> grids[] = {{0, 255}, {-128, 127}, {0, 1}, {-8, 7}, {0, 65535}, {-2097152, 2097151}, {5, 5}};
        for (const auto& [lo, hi] : grids) {
          for (AffineKind kind : {AffineKind::kQuantize, AffineKind::kQuantizeDequantize, AffineKind::kDequantize}) {
            for (bool canonical : {false, true}) {
              AffineParams p;
              p.kind = kind;
              p.qmin = lo;
              p.qmax = hi;
              p.canonical_nan = canonical;
              check_against_reference(e, &p, ops, "affine kind " + std::to_string(static_cast<int>(kind)) + " grid [" +
                                                      std::to_string(lo) + "," + std::to_string(hi) + "]");
              check_affine_per_row(e, p, ops);
              if (!canonical && hi <= 255) check_repeated_rows(e, &p, ops, "affine kind " + std::to_string(static_cast<int>(kind)));
            }
          }
        }
        break;
      }
      case KernelOp::kFakeQuantize: {
        if (m > 0) break;
        const std::vector<Operand> ops = {
            {mixed_values(kLen, 24, 64.0f), {}, false},
            {random_params(25, {0.5f, 0.1f, 3.0f, -0.25f, 1e-30f, 0.0f, 0.0078125f}), {}, true},
            {{}, [] {
               std::vector<double> z(kLen);
               auto rng = test::make_rng(26);
               const double choices[] = {0, 128, -3, 7, 255, -8388608, 8388608};
               for (auto& v : z) v = choices[rng() % 7];
               return z;
             }(),
             true}};
        std::vector<Operand> ops_f32_zp = ops;
        ops_f32_zp[2].f32.assign(ops[2].f64.begin(), ops[2].f64.end());
        ops_f32_zp[2].f64.clear();
        const std::pair<std::int64_t, std::int64_t> grids[] = {{0, 255}, {-128, 127}, {0, 1}, {-8, 7}, {0, 65535}, {-8388608, 8388607}};
        for (const auto& [lo, hi] : grids) {
          for (bool per_channel : {false, true}) {
            for (bool exact : {false, true}) {
              FakeQuantizeParams p;
              p.per_channel = per_channel;
              p.qmin = lo;
              p.qmax = hi;
              p.exact_in_float = exact;
              check_against_reference(e, &p, ops, std::string(per_channel ? "per channel" : "per tensor") + " grid [" +
                                                      std::to_string(lo) + "," + std::to_string(hi) + "]");
              // The zero point as float32 (exact: within 2^23), as the op passes it for the vector kernels.
              p.zero_point_f32 = true;
              check_against_reference(e, &p, ops_f32_zp, std::string(per_channel ? "per channel" : "per tensor") +
                                                             " float32 zero point");
              if (exact && hi <= 255) check_repeated_rows(e, &p, ops_f32_zp, std::string(per_channel ? "per channel" : "per tensor") +
                                                         " float32 zero point");
            }
          }
        }
        break;
      }
      case KernelOp::kIntQuant: {
        const std::vector<Operand> ops = {{mixed_values(kLen, 1, 0.5f), {}, false},
                                          {random_params(2, {0.5f, 0.1f, 3.0f, -0.25f, 1.0f, 0.0f}), {}, true},
                                          {random_params(3, {0.0f, 0.5f, -3.0f, 1.25f}), {}, true}};
        const std::pair<double, double> ranges[] = {{-8, 7}, {-7, 7}, {0, 255}, {0, 2}, {-2.828427, 1.828427},
                                                    {-2147483648.0, 2147483648.0}, {-0.5, -0.5}};
        for (const auto& [lo, hi] : ranges) {
          for (bool bipolar : {false, true}) {
            const IntQuantParams p{mode, bipolar, lo, hi};
            check_against_reference(e, &p, ops, mode_name + " range [" + std::to_string(lo) + "," + std::to_string(hi) + "]");
            if (m == 0 && lo == -8) check_repeated_rows(e, &p, ops, "intquant bipolar=" + std::to_string(bipolar));
          }
        }
        break;
      }
      case KernelOp::kBipolarQuant: {
        if (m > 0) break;
        const std::vector<Operand> ops = {{mixed_values(kLen, 4), {}, false},
                                          {random_params(5, {0.5f, -2.0f, 0.0f, 1e-40f}), {}, true}};
        const BipolarQuantParams p;
        check_against_reference(e, &p, ops, "bipolar");
        check_repeated_rows(e, &p, ops, "bipolar");
        break;
      }
      case KernelOp::kTruncV1: {
        const std::vector<Operand> ops = {{mixed_values(kLen, 6, 16.0f), {}, false},
                                          {random_params(7, {1.0f, 0.5f, 0.375f}), {}, true},
                                          {random_params(8, {0.0f, 4.0f, 0.5f}), {}, true},
                                          {random_params(9, {16.0f, 1.0f, 0.5f, 256.0f, 0x1p127f, 0x1p-127f, 0x1p-126f}), {}, true}};
        const TruncParams p{mode};
        check_against_reference(e, &p, ops, mode_name);
        break;
      }
      case KernelOp::kTruncV2: {
        const std::vector<Operand> ops = {{mixed_values(kLen, 10, 16.0f), {}, false},
                                          {random_params(11, {1.0f, 0.5f}), {}, true},
                                          {random_params(12, {0.0f, 4.0f, 0.5f}), {}, true},
                                          {random_params(13, {16.0f, 4.0f, 1.0f, 0x1p127f, 0x1p-127f}), {}, true},
                                          {random_params(14, {16.0f, 12.0f, 2.0f}), {}, true},
                                          {random_params(15, {-8.0f, -7.0f, 0.0f}), {}, true},
                                          {random_params(16, {7.0f, 15.0f, 14.0f}), {}, true},
                                          {random_params(17, {0.0f, 0.25f, 0.03125f}), {}, true}};
        const TruncParams p{mode};
        check_against_reference(e, &p, ops, mode_name);
        break;
      }
      case KernelOp::kFloatQuant: {
        // Inputs just below powers of two, where float32 log2 rounds up, plus the usual mix.
        std::vector<float> x = mixed_values(kLen, 17);
        // Every binade of float32, normal and subnormal, so each exponent path is reached.
        for (std::size_t i = 1; i < x.size(); i += 3) {
          const int k = static_cast<int>(i / 3 % 277) - 149;
          x[i] = std::ldexp(1.0f + static_cast<float>(i % 7) / 8.0f, k) * ((i % 2) ? -1.0f : 1.0f);
        }
        for (std::size_t i = 0; i + 1 < x.size(); i += 3) {
          float v = std::ldexp(1.0f, static_cast<int>(i % 200) - 100);
          for (std::size_t s = 0; s < (i % 700); ++s) v = std::nextafter(v, 0.0f);
          x[i] = (i % 2) ? -v : v;
        }
        struct Format {
          double m, min_exp, max;
          bool sat, inf, nan, fits;
        };
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const Format formats[] = {
            {3, -9, 448, true, false, true, true},          // OCP E4M3
            {3, -9, 448, false, false, true, true},         // E4M3, overflow -> NaN
            {3, -9, 448, false, true, false, true},         // E4M3 with inf
            {2, -16, 57344, true, true, false, true},       // E5M2
            {1, -1, 6, true, false, false, true},           // E2M1
            {3, -129, double{3.1901472e38f}, true, false, false, true},  // E8M3, subnormal internal scales
            {10, -24, 65504, true, false, false, true},     // binary16-like
            {3, -9, 448.1, true, false, false, false},      // M not a float32: reference path
            {3, 127, 448, true, false, false, true},        // floor 1 - bias - m >= 127: 2^e overflows
            {3, 200, 448, false, true, false, true},        // ... far beyond, non-saturating
            {3, -9, -2.5, true, false, false, true},        // negative max_val: np.clip(q, 2.5, -2.5)
            {3, -9, -2.5, false, true, false, true},        // ... with inf overflow
            {3, -9, nan, true, false, false, true},         // max_val NaN: np.clip gives NaN
            {0, -5, 0.0, true, false, false, true},         // M = 0: clip to [-0, +0]
        };
        for (const auto& f : formats) {
          for (bool is_signed : {true, false}) {
            // A weak Python-float scale (product_scale, a float64 factor) on the first formats.
            const int product_variants = (&f - formats) < 3 ? 2 : 1;
            for (int pv = 0; pv < product_variants; ++pv)
            for (bool double_output : {false, true}) {
              FloatQuantParams p{mode, f.m, f.sat, f.inf, f.nan, is_signed, f.fits, double_output};
              p.has_product_scale = pv == 1;
              p.product_scale = 0.1;
              std::vector<Operand> ops = {{x, {}, false},
                                          {random_params(18, {1.0f, 0.5f, 3.0f, 1e-3f, 0.0f, -2.0f}), {}, true},
                                          {fill(static_cast<float>(f.min_exp)), {}, true},
                                          {{}, std::vector<double>(kLen, f.max), true}};
              const std::string what = mode_name + " m=" + std::to_string(f.m) + " min_exp=" + std::to_string(f.min_exp) +
                                       " M=" + std::to_string(f.max) + (is_signed ? " signed" : " unsigned") +
                                       (p.has_product_scale ? " product_scale=0.1" : "");
              if (double_output) check_against_reference<double>(e, &p, ops, what + " float64 out");
              else check_against_reference<float>(e, &p, ops, what + " float32 out");
            }
          }
        }
        break;
      }
      // ---- QKeras: no rounding-mode parameter (run once); every parameter path of each quantizer,
      // with subnormal inputs and results (the flush-to-zero scope), huge values and specials.
      case KernelOp::kQkBits: {
        if (m > 0) break;
        std::vector<float> x = mixed_values(kLen, 30, 0.125f);
        for (std::size_t i = 5; i < x.size(); i += 11) x[i] = std::ldexp(static_cast<float>(i % 5) - 2.0f, -130 - static_cast<int>(i % 20));
        sprinkle_nans(x, 2, 23);
        std::vector<float> alpha = random_params(31, {1.0f, 0.5f, 3.0f, 1e-3f, -2.0f, 0.0f, 1e-39f});
        sprinkle_nans(alpha, 4, 29);
        const std::vector<Operand> ops = {{x, {}, false}, {alpha, {}, true}};
        struct Case { float bits; float integer; bool sym; bool kn; float q; bool ste; };
        const Case cases[] = {{8, 0, false, true, 1, true},   {4, 2, true, true, 1, true},   {4, 0, false, false, 1, false},
                              {1, 0, false, true, 1, true},   {0, 3, false, false, 0.5f, true}, {6, -2, false, true, 0.3f, false},
                              {24, 10, false, true, 1, true}, {3, 0.5f, true, false, 0.7f, true}, {8, 130, false, true, 1, true},
                              {8, -140, false, true, 1, true}};
        for (const Case& c : cases) {
          QkBitsParams p;
          p.keep_negative = c.kn;
          p.binary = c.bits - (c.kn ? 1.0f : 0.0f) <= 0;
          p.m = std::pow(2.0f, c.bits - (c.kn ? 1.0f : 0.0f));
          p.m_i = std::pow(2.0f, c.integer);
          p.lo = (c.kn ? 1.0f : 0.0f) * ((-p.m) + (c.sym ? 1.0f : 0.0f));
          p.hi = p.m - 1.0f;
          p.blend = {c.ste, c.q, 1.0f - c.q};
          // Divisions by m and m_i, then products with their exact reciprocals (where they exist).
          for (bool reciprocals : {false, true}) {
            p.inv_m = reciprocals ? exact_reciprocal(p.m) : 0.0f;
            p.inv_m_i = reciprocals ? exact_reciprocal(p.m_i) : 0.0f;
            check_against_reference(e, &p, ops, "bits=" + std::to_string(c.bits) + " integer=" + std::to_string(c.integer) +
                                                    " reciprocals=" + std::to_string(reciprocals));
            if (c.integer == 0 && (c.bits == 8 || c.bits == 1)) check_repeated_rows(e, &p, ops, "bits=" + std::to_string(c.bits));
          }
        }
        break;
      }
      case KernelOp::kQkBitsAuto: {
        if (m > 0) break;
        std::vector<float> x = mixed_values(kLen, 32, 0.25f);
        for (std::size_t i = 7; i < x.size(); i += 17) x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, 120 - static_cast<int>(i % 260));
        sprinkle_nans(x, 3, 19);
        // Scales: NaN ones too (a channel holding a NaN has a NaN scale).
        std::vector<float> scales = random_params(33, {0.125f, 0.0078125f, 1.0f, 0.0f, 0x1p-23f, 3.0f, INFINITY});
        sprinkle_nans(scales, 6, 31);
        const std::vector<Operand> ops = {{x, {}, false}, {scales, {}, true}};
        // Power-of-two scales only (auto_po2), down to 2^-126 and up to 2^126: the reciprocal path.
        const std::vector<Operand> pow2_ops = {
            {x, {}, false}, {random_params(37, {0.125f, 0x1p-23f, 1.0f, 0x1p-126f, 0x1p126f, 0x1p-60f, 2.0f, 0x1p40f}), {}, true}};
        for (float bits : {2.0f, 4.0f, 8.0f, 16.0f, 4.5f}) {
          for (float integer : {0.0f, 3.0f, -5.0f, 0.5f, 126.0f}) {
            for (bool level_only : {false, true}) {
              QkBitsAutoParams p;
              p.m = std::pow(2.0f, bits - 1.0f);
              p.m_i = std::pow(2.0f, integer);
              p.half_levels = std::pow(2.0f, bits - 1.0f) - 1.0f;
              p.blend = {integer != 3.0f, 0.75f, 0.25f};
              p.level_only = level_only;
              const std::string what = "auto bits=" + std::to_string(bits) + " integer=" + std::to_string(integer) +
                                       " level_only=" + std::to_string(level_only);
              check_against_reference(e, &p, ops, what);
              p.inv_m = exact_reciprocal(p.m);
              p.inv_m_i = exact_reciprocal(p.m_i);
              check_against_reference(e, &p, ops, what + " reciprocals");
              p.pow2_scales = true;
              check_against_reference(e, &p, pow2_ops, what + " reciprocals pow2_scales");
              if (bits == 4.0f && integer == 0.0f && !level_only) check_repeated_rows(e, &p, pow2_ops, what + " pow2_scales");
            }
          }
        }
        break;
      }
      case KernelOp::kQkRelu: {
        if (m > 0) break;
        std::vector<float> x = mixed_values(kLen, 34, 0.0625f);
        for (std::size_t i = 3; i < x.size(); i += 13) x[i] = std::ldexp(1.0f, -128) * ((i % 2) ? -1.0f : 1.0f);
        sprinkle_nans(x, 5, 17);
        const std::vector<Operand> ops = {{x, {}, false}};
        for (bool sigmoid : {false, true}) {
          for (float ns : {0.0f, 0.25f, 1.0f}) {
            for (int clip_mode = 0; clip_mode < 4; ++clip_mode) {
              for (bool fast : {false, true}) {
                if (fast && (sigmoid || ns != 0.0f || clip_mode != 0)) continue;
                QkReluParams p;
                const float bits = 6.0f, integer = 2.0f, nsb = bits - (ns != 0.0f ? 1.0f : 0.0f);
                p.m = std::pow(2.0f, nsb);
                p.m_i = std::pow(2.0f, integer);
                p.clip_value = p.m_i - std::pow(2.0f, integer - nsb);
                p.one_minus_inv_m = 1.0f - 1.0f / p.m;
                p.negative_slope = ns;
                p.leaky = ns != 0.0f;
                p.negative_part = ns > 0.0f;
                p.m_i_ns = p.m_i * ns;
                p.neg_factor = ns > 0.0f ? 1.0f / (ns * p.m) : 0.0f;
                p.sigmoid = sigmoid;
                p.quantized_clip = clip_mode == 0;
                p.has_upper_bound = clip_mode >= 2;
                p.upper_bound = 1.5f;
                p.bound_output = clip_mode == 3;
                p.blend = {clip_mode != 1, clip_mode == 2 ? 0.5f : 1.0f, clip_mode == 2 ? 0.5f : 0.0f};
                p.fast_inference = fast;
                p.fast_p_factor = 16.0f;
                p.fast_factor = 1.0f / 64.0f;
                p.fast_ceiling = 1.0f - 1.0f / 64.0f;
                for (bool reciprocals : {false, true}) {
                  p.inv_m = reciprocals ? exact_reciprocal(p.m) : 0.0f;
                  p.inv_m_i = reciprocals ? exact_reciprocal(p.m_i) : 0.0f;
                  check_against_reference(e, &p, ops, "relu sigmoid=" + std::to_string(sigmoid) + " ns=" + std::to_string(ns) +
                                                          " clip_mode=" + std::to_string(clip_mode) + " fast=" + std::to_string(fast) +
                                                          " reciprocals=" + std::to_string(reciprocals));
                  if (!reciprocals && !sigmoid && ns == 0.0f && clip_mode == 0) check_repeated_rows(e, &p, ops, "relu");
                }
              }
            }
          }
        }
        break;
      }
      case KernelOp::kQkLinear: {
        if (m > 0) break;
        std::vector<float> x = mixed_values(kLen, 35, 0.125f);
        for (std::size_t i = 7; i < x.size(); i += 17) x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, 120 - static_cast<int>(i % 260));
        sprinkle_nans(x, 4, 19);
        std::vector<float> scales = random_params(36, {0.125f, 0.1f, 3.0f, 1e-7f, 0.0f, -0.5f, INFINITY});
        sprinkle_nans(scales, 9, 31);
        const std::vector<Operand> ops = {{x, {}, false}, {scales, {}, true}};
        const std::vector<Operand> pow2_ops = {
            {x, {}, false}, {random_params(38, {0.125f, 0x1p-23f, 1.0f, 0x1p-126f, 0x1p126f, 0x1p-60f, 2.0f, 0x1p40f}), {}, true}};
        const std::pair<float, float> bounds[] = {{-127, 127}, {-128, 127}, {0, 255}, {-0.0f, 3}, {-0.5f, 0.5f}};
        for (const auto& [lo, hi] : bounds) {
          QkLinearParams p;
          p.clip_min = lo;
          p.clip_max = hi;
          p.shift = hi == 0.5f ? 0.5f : 0.0f;
          p.blend = {true, lo == 0 ? 0.3f : 1.0f, 0.0f};
          for (bool level_only : {false, true}) {
            p.level_only = level_only;
            p.pow2_scales = false;
            check_against_reference(e, &p, ops, "linear [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
            p.pow2_scales = true;  // auto_po2 scales: x / s as x * (1 / s)
            check_against_reference(e, &p, pow2_ops, "linear pow2 [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
            if (lo == -127) check_repeated_rows(e, &p, pow2_ops, "linear pow2");
          }
        }
        break;
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

class ReductionKernelTest : public ::testing::TestWithParam<KernelEntry> {};

TEST_P(ReductionKernelTest, AccumulatorsMatchReferenceBitForBit) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  const RowKernel ref = reference_kernel(e.op, e.work);
  const std::vector<float> x = reduction_values(kLen, 40);
  std::vector<float> z = reduction_values(kLen, 41);
  for (auto& v : z) v = std::isfinite(v) ? std::nearbyint(std::fmod(v, 200.0f)) : v;  // integer levels, some specials
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 0; n <= 70; ++n) sizes.push_back(n);
  for (std::int64_t n : {127, 128, 129, 1000, 4099}) sizes.push_back(n);
  for (const bool flush : {false, true}) {
    for (std::int64_t n : sizes) {
      for (std::int64_t offset : {0, 1, 5}) {
        RowArgs a;
        a.in[0] = x.data() + offset;
        a.in[1] = z.data() + offset;
        a.n = n;
        std::unique_ptr<ScopedFlushDenormals> env;
        if (flush) env = std::make_unique<ScopedFlushDenormals>();
        if (e.op == KernelOp::kGroupMinMax) {
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
        (e.op == KernelOp::kGroupMax || e.op == KernelOp::kProductSums || e.op == KernelOp::kGroupMinMax)) {
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
