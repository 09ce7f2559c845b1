// Linear quantize / dequantize: every Q/DQ kernel of the op list (kernels/ops.inc) against the scalar reference, byte
// for byte (all output types, parameter paths, sizes, offsets, broadcast patterns, streaming); the
// minifloat conversions; the per-axis and blocked layouts of the ONNX and Quark ops against a
// direct per-element evaluation; and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "kernels/registry.h"
#include "polyquant/polyquant.h"
#include "test_util.h"

namespace polyquant::detail {
namespace {

using test::mixed_values;
using test::expect_error;

using test::isa_available;

constexpr std::size_t kLen = 4099 + 16;

// One operand: raw bytes of kLen elements of `size` bytes.
struct Bytes {
  std::vector<unsigned char> data;
  std::size_t size = 4;
  bool param = true;
};

template <class T>
Bytes bytes_of(const std::vector<T>& v, bool param) {
  Bytes b;
  b.size = sizeof(T);
  b.param = param;
  b.data.resize(v.size() * sizeof(T));
  std::memcpy(b.data.data(), v.data(), b.data.size());
  return b;
}

std::vector<unsigned char> run(RowKernel k, const void* params, const std::vector<Bytes>& ops, std::size_t out_size,
                               std::int64_t n, std::int64_t offset, std::uint32_t mask, bool stream,
                               std::uint32_t per_row = 0, std::int64_t row_len = 0) {
  RowArgs a;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const bool b = (mask >> i) & 1u;
    a.in[i] = ops[i].data.data() + (b ? 0 : offset) * static_cast<std::int64_t>(ops[i].size);
    if (b) a.broadcast_mask |= 1u << i;
  }
  a.per_row_mask = per_row;
  a.row_len = row_len;
  std::vector<unsigned char> out(static_cast<std::size_t>(n + offset + 16) * out_size, 0xAB);
  a.out = out.data() + static_cast<std::size_t>(offset) * out_size;
  a.n = n;
  a.stream = stream;
  k(params, a);
  for (std::size_t i = 0; i < static_cast<std::size_t>(offset) * out_size; ++i) EXPECT_EQ(out[i], 0xAB) << "wrote before the row";
  for (std::size_t i = static_cast<std::size_t>(n + offset) * out_size; i < out.size(); ++i) EXPECT_EQ(out[i], 0xAB) << "wrote past the row";
  return {out.begin() + offset * static_cast<std::int64_t>(out_size), out.begin() + (offset + n) * static_cast<std::int64_t>(out_size)};
}

// Outputs equal byte for byte; float32 outputs may differ only in the payload of a NaN.
bool same_output(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, bool float_out, std::string& where) {
  if (!float_out) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        where = "byte " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
        return false;
      }
    }
    return true;
  }
  for (std::size_t i = 0; i + 4 <= got.size(); i += 4) {
    float g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    if (!test::same_value(g, w)) {
      where = "element " + std::to_string(i / 4) + ": got " + test::describe(g) + " want " + test::describe(w);
      return false;
    }
  }
  return true;
}

// Blocked parameters: per-row operands (one value per row_len elements; ElementwiseCall::
// per_row_operands) for the parameters, or broadcast, or (the reference's path) per element.
void check_per_row(const KernelEntry& e, const void* params, const std::vector<Bytes>& ops, std::size_t out_size,
                   bool float_out, const std::string& what) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  for (std::int64_t row_len : {1, 3, 15, 16, 17, 32, 64, 100}) {
    for (std::int64_t rows : {1, 2, 7}) {
      const std::int64_t n = rows * row_len;
      for (std::uint32_t per_row = 2; per_row < (1u << ops.size()); per_row += 2) {
        for (std::uint32_t broadcast : {0u, 2u, 4u}) {
          if ((broadcast & per_row) != 0 || broadcast >= (1u << ops.size())) continue;
          for (std::int64_t offset : {0, 1, 16})
          for (bool stream : {false, true}) {
            const auto got = run(e.fn, params, ops, out_size, n, offset, broadcast, stream, per_row, row_len);
            const auto want = run(ref, params, ops, out_size, n, offset, broadcast, false, per_row, row_len);
            std::string where;
            if (!same_output(got, want, float_out, where)) {
              ADD_FAILURE() << e.name << " " << what << " per-row mask " << per_row << " row_len " << row_len
                            << " rows " << rows << " broadcast " << broadcast << " offset " << offset
                            << " stream " << stream << ": " << where;
              return;
            }
          }
        }
      }
    }
  }
}

// Repeated-row operands (a per-axis parameter on the last axis: ElementwiseCall::
// repeated_row_operands): every mask of repeated operands, x included, the others contiguous or
// broadcast, misaligned streaming outputs. The kernel and the reference given the repeated rows
// must equal the reference given the rows written out in full.
void check_repeated_rows(const KernelEntry& e, const void* params, const std::vector<Bytes>& ops, std::size_t out_size,
                         bool float_out, const std::string& what) {
  const RowKernel ref = reference_kernel(e.op, e.work);
  for (std::int64_t row_len : {1, 3, 16, 17, 64, 100}) {
    for (std::int64_t rows : {1, 2, 33}) {
      const std::int64_t n = rows * row_len;
      std::vector<std::vector<unsigned char>> repeated(ops.size()), expanded(ops.size());
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const std::size_t size = ops[k].size;
        const unsigned char* row = &ops[k].data[k * 37 * size];  // rows of different operands differ
        repeated[k] = test::cyclic_copy(row, size, row_len, row_len + kRepeatedRowPad);
        expanded[k] = test::cyclic_copy(row, size, row_len, n);
      }
      for (std::uint32_t repeat = 1; repeat < (1u << ops.size()); ++repeat) {
        for (bool broadcast_others : {false, true}) {
          std::uint32_t broadcast = 0;
          for (std::size_t k = 1; k < ops.size() && broadcast_others; ++k) {
            if (!((repeat >> k) & 1u) && ops[k].param) broadcast |= 1u << k;
          }
          for (std::int64_t offset : {0, 1, 16}) {
            for (bool stream : {false, true}) {
              auto call = [&](RowKernel k, bool use_repeated, bool streaming) {
                RowArgs a;
                for (std::size_t i = 0; i < ops.size(); ++i) {
                  a.in[i] = use_repeated && ((repeat >> i) & 1u) ? repeated[i].data() : expanded[i].data();
                }
                a.repeated_row_mask = use_repeated ? repeat : 0;
                a.broadcast_mask = broadcast;
                a.row_len = row_len;
                a.n = n;
                a.stream = streaming;
                std::vector<unsigned char> out(static_cast<std::size_t>(n + offset + 16) * out_size, 0xAB);
                a.out = out.data() + static_cast<std::size_t>(offset) * out_size;
                k(params, a);
                return out;
              };
              const auto want = call(ref, false, false);
              const auto got = call(e.fn, true, stream), from_ref = call(ref, true, false);
              for (const auto* result : {&got, &from_ref}) {
                std::string where;
                if (!same_output(*result, want, float_out, where)) {
                  ADD_FAILURE() << e.name << " " << what << " repeated rows: " << (result == &got ? "kernel" : "reference")
                                << " mask " << repeat << " row_len " << row_len << " rows " << rows << " broadcast "
                                << broadcast << " offset " << offset << " stream " << stream << ": " << where;
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

void check(const KernelEntry& e, const void* params, const std::vector<Bytes>& ops, std::size_t out_size, bool float_out,
           const std::string& what) {
  if (ops.size() > 1) check_per_row(e, params, ops, out_size, float_out, what);
  if (ops.size() > 1) check_repeated_rows(e, params, ops, out_size, float_out, what);
  const RowKernel ref = reference_kernel(e.op, e.work);
  std::uint32_t param_bits = 1u;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].param) param_bits |= 1u << k;
  }
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 1; n <= 40; ++n) sizes.push_back(n);
  for (std::int64_t n : {63, 64, 65, 127, 128, 129, 1000, 4099}) sizes.push_back(n);
  for (std::uint32_t mask = 0; mask <= param_bits; ++mask) {
    if ((mask & ~param_bits) != 0) continue;
    for (std::int64_t n : sizes) {
      for (std::int64_t offset : {0, 1, 3}) {
        for (bool stream : {false, true}) {
          const auto got = run(e.fn, params, ops, out_size, n, offset, mask, stream);
          const auto want = run(ref, params, ops, out_size, n, offset, mask, false);
          std::string where;
          if (!same_output(got, want, float_out, where)) {
            ADD_FAILURE() << e.name << " " << what << " n=" << n << " offset=" << offset << " mask=" << mask
                          << " stream=" << stream << ": " << where;
            return;
          }
        }
      }
    }
  }
}

std::vector<float> pick(std::uint64_t salt, const std::vector<float>& choices) {
  auto rng = test::make_rng(salt);
  std::vector<float> v(kLen);
  for (auto& x : v) x = choices[rng() % choices.size()];
  return v;
}

class QdqKernelTest : public ::testing::TestWithParam<KernelEntry> {};

TEST_P(QdqKernelTest, MatchesReferenceByteForByte) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  if (e.isa == Isa::kScalar) GTEST_SKIP() << "the reference itself";
  if (e.op == KernelOp::kQuantizeLinear) {
    // x: ties of the scales used (k + 0.5 and one ulp either side), specials, huge values; and
    // quotients (by the power-of-two scales) halfway between two float16 or two bfloat16 values,
    // and one ulp either side, for the quotients rounded to a 16-bit division's dtype.
    std::vector<float> x = mixed_values(kLen, 50, 0.1f);
    const auto ties = test::near_ties(0.5f, 300);
    for (std::size_t i = 2; i < x.size(); i += 5) x[i] = ties[i % ties.size()];
    auto rng16 = test::make_rng(57);
    for (std::size_t i = 1; i < x.size(); i += 5) {
      const bool bf16 = (i / 5) % 2 == 1;
      const int fraction_bits = bf16 ? 7 : 10;
      // a 16-bit value's midpoint to the next one up: (1 + (2 m + 1) / 2^(fraction_bits + 1)) 2^e
      const auto m = static_cast<int>(rng16() % (1u << fraction_bits));
      const float mid = std::ldexp(1.0f + std::ldexp(static_cast<float>(2 * m + 1), -(fraction_bits + 1)),
                                   static_cast<int>(rng16() % 20) - 10);
      const int side = static_cast<int>(i / 10) % 3;  // the tie, one ulp below, one ulp above
      x[i] = (side == 0 ? mid : std::nextafter(mid, side == 1 ? 0.0f : INFINITY)) * ((i & 4) ? -1.0f : 1.0f);
    }
    const std::vector<float> scales = {0.5f, 0.1f, 1.0f / 255.0f, 3.0f, 1e-30f, 0.0f, -0.25f, INFINITY, 1e-45f};
    struct Target {
      DType out;
      std::int64_t lo, hi;
      std::size_t size;
    };
    const Target targets[] = {{DType::kInt8, -128, 127, 1},    {DType::kUInt8, 0, 255, 1},  {DType::kInt16, -32768, 32767, 2},
                              {DType::kUInt16, 0, 65535, 2},   {DType::kInt4, -8, 7, 1},    {DType::kUInt4, 0, 15, 1},
                              {DType::kInt2, -2, 1, 1},        {DType::kUInt2, 0, 3, 1},    {DType::kInt32, INT32_MIN, INT32_MAX, 4}};
    for (const Target& t : targets) {
      const std::vector<float> zps = t.lo < 0 ? std::vector<float>{0.0f, 3.0f, -5.0f, static_cast<float>(t.hi)}
                                              : std::vector<float>{0.0f, 128.0f, 3.0f, static_cast<float>(t.hi)};
      for (bool with_zp : {true, false}) {
        for (int policy = 0; policy < 2; ++policy) {
          for (int quotient = 0; quotient < 5; ++quotient) {  // 3, 4: float16, bfloat16 with the operands rounded
            QuantizeLinearParams p;
            p.out_dtype = t.out;
            p.qmin = t.lo;
            p.qmax = t.hi;
            p.has_zero_point = with_zp;
            p.non_finite = policy ? NonFinitePolicy::kInt64Cast : NonFinitePolicy::kSaturate;
            p.quotient = static_cast<QuotientRounding>(quotient < 3 ? quotient : quotient - 2);
            p.round_operands = quotient >= 3;
            p.zero_point_f64 = t.size == 4;
            std::vector<Bytes> ops = {bytes_of(x, false), bytes_of(pick(51, scales), true)};
            if (with_zp) {
              if (p.zero_point_f64) {
                std::vector<double> z(kLen);
                const std::vector<double> choices = {0.0, -7.0, 2147483647.0, -2147483648.0, 100000.0};
                auto rng = test::make_rng(52);
                for (auto& v : z) v = choices[rng() % choices.size()];
                ops.push_back(bytes_of(z, true));
              } else {
                ops.push_back(bytes_of(pick(52, zps), true));
              }
            }
            check(e, &p, ops, t.size, false,
                  std::string("integer ") + dtype_name(t.out) + " zp=" + std::to_string(with_zp) + " policy=" +
                      std::to_string(policy) + " quotient=" + std::to_string(quotient));
          }
        }
      }
    }
    // Narrow float targets, every format, saturating or not, with and without an added zero point
    // (and a zero point present but not added, as ONNX's float8 outputs have it). The quotients
    // include every format's rounding ties: x = s * (a tie of the format), s a power of two.
    std::vector<float> xm = x;
    for (std::size_t i = 0; i < xm.size(); i += 3) {
      const float scale = std::ldexp(1.0f, static_cast<int>(i % 7) - 3);
      const float tie = std::ldexp(1.0f + std::ldexp(1.0f, -1 - static_cast<int>(i % 4)), static_cast<int>(i % 40) - 20);
      xm[i] = scale * tie * ((i & 8) ? -1.0f : 1.0f);
      if (i % 9 == 0) xm[i] = std::nextafter(xm[i], 0.0f);
    }
    for (DType t : {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                    DType::kFloat8E8M0, DType::kFloat6E2M3, DType::kFloat6E3M2, DType::kFloat4E2M1}) {
      for (bool saturate : {true, false}) {
        for (int zp_mode = 0; zp_mode < 3; ++zp_mode) {  // none, present, added
          for (int quotient = 0; quotient < 3; ++quotient) {  // float32, float16, bfloat16 division
            QuantizeLinearParams p;
            p.target = QuantTarget::kMinifloat;
            p.out_dtype = t;
            p.format = minifloat_format(t);
            p.saturate = saturate;
            p.has_zero_point = zp_mode > 0;
            p.add_zero_point = zp_mode == 2;
            p.quotient = static_cast<QuotientRounding>(quotient);
            std::vector<Bytes> ops = {bytes_of(quotient == 0 ? xm : x, false),
                                      bytes_of(pick(53, {0.5f, 0.25f, 1.0f, 2.0f, 0.1f, 3.0f, 1e-30f, 0.0f, -0.25f, INFINITY}), true)};
            if (p.has_zero_point) ops.push_back(bytes_of(pick(54, {0.0f, 0.5f, -6.0f, -0.0f, NAN, -NAN}), true));
            check(e, &p, ops, 1, false,
                  std::string("minifloat ") + dtype_name(t) + " saturate=" + std::to_string(saturate) + " zp=" + std::to_string(zp_mode) +
                      " quotient=" + std::to_string(quotient));
          }
        }
      }
    }
    // 16-bit float targets (Quark), with and without a zero point, every division dtype, both
    // bfloat16 NaN rules (Quark's 0x7FC1, ml_dtypes'); x includes values beyond float16's range
    // and NaNs of either sign (mixed_values' specials).
    for (QuantTarget t : {QuantTarget::kBFloat16, QuantTarget::kFloat16, QuantTarget::kFloat16Clamp}) {
      for (bool with_zp : {true, false}) {
        for (int quotient = 0; quotient < 3; ++quotient) {
          for (std::uint16_t nan : {std::uint16_t{0x7FC1}, std::uint16_t{0}}) {
            QuantizeLinearParams p;
            p.target = t;
            p.out_dtype = t == QuantTarget::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
            p.has_zero_point = with_zp;
            p.quotient = static_cast<QuotientRounding>(quotient);
            p.bf16_nan = nan;
            std::vector<Bytes> ops = {bytes_of(x, false), bytes_of(pick(55, scales), true)};
            if (with_zp) ops.push_back(bytes_of(pick(56, {0.0f, 1.5f, -3.0f, NAN, -NAN}), true));
            check(e, &p, ops, 2, false,
                  "float target " + std::to_string(static_cast<int>(t)) + " zp=" + std::to_string(with_zp) + " quotient=" +
                      std::to_string(quotient) + " bf16_nan=" + std::to_string(nan));
          }
        }
      }
    }
  } else {
    const std::vector<float> scales = {0.5f, 0.1f, 1.0f / 255.0f, 3.0f, 1e-30f, 0.0f, -0.25f, INFINITY, NAN, 1e-45f};
    auto rng = test::make_rng(60);
    auto dq = [&](auto zero, DType dtype) {
      using T = decltype(zero);
      std::vector<T> xv(kLen), zv(kLen);
      for (auto& v : xv) v = static_cast<T>(rng());
      for (auto& v : zv) v = static_cast<T>(rng() % 7 == 0 ? rng() : rng() % 5);
      for (bool with_zp : {true, false}) {
        for (int diff = 0; diff < 3; ++diff) {
          DequantizeLinearParams p;
          p.x_dtype = dtype;
          p.has_zero_point = with_zp;
          p.difference = static_cast<DequantDifference>(diff);
          if (p.difference == DequantDifference::kFloat64) continue;  // float64 output: scalar only
          std::vector<Bytes> ops = {bytes_of(xv, true), bytes_of(pick(61, scales), true)};
          if (with_zp) ops.push_back(bytes_of(zv, true));
          check(e, &p, ops, 4, true, std::string("dequantize ") + dtype_name(dtype) + " zp=" + std::to_string(with_zp) +
                                          " difference=" + std::to_string(diff));
        }
      }
    };
    dq(std::int8_t{}, DType::kInt8);
    dq(std::uint8_t{}, DType::kUInt8);
    dq(std::int16_t{}, DType::kInt16);
    dq(std::uint16_t{}, DType::kUInt16);
    dq(std::int32_t{}, DType::kInt32);
    // Sub-byte integers and minifloats read in their storage: every byte value (high bits set
    // included, NaN codes, every special).
    for (DType t : {DType::kInt4, DType::kUInt4, DType::kInt2, DType::kUInt2, DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ,
                    DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ, DType::kFloat8E8M0, DType::kFloat6E2M3, DType::kFloat6E3M2,
                    DType::kFloat4E2M1}) {
      dq(std::uint8_t{}, t);
    }
    // Float inputs (minifloats, float16, bfloat16 arrive as float32), Quark's special modes.
    const std::vector<float> xf = mixed_values(kLen, 62);
    // Minifloat, sub-byte, float16 and bfloat16 x, widened to float32 by the engine (the zero
    // point likewise): x_dtype float32, the plain difference; x values of every minifloat code.
    std::vector<float> xw = xf;
    for (std::size_t i = 0; i < xw.size(); i += 2) {
      xw[i] = minifloat_to_float(minifloat_format(i % 4 ? DType::kFloat8E4M3FN : DType::kFloat8E5M2), static_cast<std::uint8_t>(i / 2));
    }
    for (bool with_zp : {true, false}) {
      DequantizeLinearParams p;
      p.x_dtype = DType::kFloat32;
      p.has_zero_point = with_zp;
      std::vector<Bytes> ops = {bytes_of(xw, true), bytes_of(pick(63, scales), true)};
      if (with_zp) ops.push_back(bytes_of(pick(64, {0.0f, 1.5f, NAN, -2.0f, -0.0f}), true));
      check(e, &p, ops, 4, true, std::string("dequantize widened x zp=") + std::to_string(with_zp));
    }
    for (int mode = 0; mode < 3; ++mode) {
      DequantizeLinearParams p;
      p.x_dtype = DType::kFloat32;
      p.has_zero_point = true;
      p.ignore_scale = mode == 1;
      p.canonical_nan = mode == 2;
      const std::vector<Bytes> ops = {bytes_of(xf, true), bytes_of(pick(63, scales), true),
                                      bytes_of(pick(64, {0.0f, 1.5f, NAN, -2.0f}), true)};
      check(e, &p, ops, 4, true, "dequantize float mode " + std::to_string(mode));
    }
  }
}

std::vector<KernelEntry> qdq_kernels() {
  std::vector<KernelEntry> v;
  for (const KernelEntry& e : all_kernels()) {
    if (e.op == KernelOp::kQuantizeLinear || e.op == KernelOp::kDequantizeLinear) v.push_back(e);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, QdqKernelTest, ::testing::ValuesIn(qdq_kernels()),
                         [](const ::testing::TestParamInfo<KernelEntry>& info) { return std::string(info.param.name); });

// ---- minifloats ----------------------------------------------------------------------------------
TEST(Minifloat, EveryCodeRoundTripsAndKnownValues) {
  for (DType t : {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                  DType::kFloat6E2M3, DType::kFloat6E3M2, DType::kFloat4E2M1, DType::kFloat8E8M0}) {
    const MinifloatFormat f = minifloat_format(t);
    const int codes = t == DType::kFloat4E2M1 ? 16 : (t == DType::kFloat6E2M3 || t == DType::kFloat6E3M2) ? 64 : 256;
    for (int c = 0; c < codes; ++c) {
      const float v = minifloat_to_float(f, static_cast<std::uint8_t>(c));
      if (std::isnan(v)) continue;
      if (f.kind == MinifloatKind::kFnuz && c == 0x80) continue;
      EXPECT_EQ(minifloat_from_float(f, v, false), c) << dtype_name(t) << " code " << c << " value " << v;
    }
    EXPECT_EQ(minifloat_to_float(f, f.max_magnitude), f.max_value) << dtype_name(t);
  }
  const MinifloatFormat e4m3 = minifloat_format(DType::kFloat8E4M3FN);
  EXPECT_EQ(minifloat_from_float(e4m3, 464.0f, false), 0x7E);  // tie between 448 and 480 (NaN code): even
  EXPECT_EQ(minifloat_from_float(e4m3, 465.0f, false), 0x7F);  // overflow -> NaN
  EXPECT_EQ(minifloat_from_float(e4m3, 465.0f, true), 0x7E);   // saturate -> max
  EXPECT_EQ(minifloat_from_float(e4m3, -INFINITY, true), 0xFE);
  const MinifloatFormat e5m2 = minifloat_format(DType::kFloat8E5M2);
  EXPECT_EQ(minifloat_from_float(e5m2, INFINITY, false), 0x7C);
  EXPECT_EQ(minifloat_from_float(e5m2, 1e9f, false), 0x7C);
  EXPECT_EQ(minifloat_from_float(e5m2, -1e9f, true), 0xFB);
  const MinifloatFormat fnuz = minifloat_format(DType::kFloat8E4M3FNUZ);
  EXPECT_EQ(minifloat_from_float(fnuz, -0.0f, false), 0x00);     // no negative zero
  EXPECT_EQ(minifloat_from_float(fnuz, -1e-30f, false), 0x00);
  const MinifloatFormat fp4 = minifloat_format(DType::kFloat4E2M1);
  EXPECT_EQ(minifloat_from_float(fp4, NAN, false), 0x8);   // ml_dtypes: NaN -> zero of the opposite sign
  EXPECT_EQ(minifloat_from_float(fp4, -NAN, false), 0x0);
  EXPECT_EQ(minifloat_from_float(fp4, 1e9f, false), 0x7);
  EXPECT_EQ(minifloat_from_float(fp4, 0.25f, false), 0x0);  // tie between 0 and 0.5: even
  EXPECT_EQ(minifloat_from_float(fp4, 0.26f, false), 0x1);
  const MinifloatFormat e8m0 = minifloat_format(DType::kFloat8E8M0);
  EXPECT_EQ(minifloat_from_float(e8m0, 0.75f, false), 0x7F);  // ties up
  EXPECT_EQ(minifloat_from_float(e8m0, 2.9f, false), 0x80);
  EXPECT_EQ(minifloat_from_float(e8m0, 0.0f, false), 0xFF);
  EXPECT_EQ(minifloat_from_float(e8m0, 1e-39f, false), 0x00);
}

// ---- ops: layouts against a per-element evaluation -------------------------------------------------
// Element (flat index i of x's C order) uses the scale at the index of its axis coordinate (per axis)
// or block (blocked).
std::int64_t param_index(const Dims& shape, std::int64_t i, int axis, std::int64_t block, const Dims& pshape) {
  std::int64_t coord[kMaxRank];
  for (int d = shape.rank - 1; d >= 0; --d) {
    coord[d] = i % shape[d];
    i /= shape[d];
  }
  if (block == 0) return coord[axis];
  std::int64_t idx = 0;
  for (int d = 0; d < shape.rank; ++d) idx = idx * pshape[d] + (d == axis ? coord[d] / block : coord[d]);
  return idx;
}

TEST(OnnxQdq, PerAxisAndBlockedLayoutsMatchPerElementEvaluation) {
  const Dims shape{3, 10, 7};
  const std::int64_t n = shape.numel();
  std::vector<float> x = mixed_values(static_cast<std::size_t>(n), 70, 0.5f);
  for (int axis = -3; axis < 3; ++axis) {
    const int a = axis < 0 ? axis + 3 : axis;
    for (std::int64_t block : {0, 1, 2, 3, 4, 7, 10, 11}) {
      Dims pshape;
      if (block == 0) pshape = Dims{shape[a]};
      else {
        pshape = shape;
        pshape[a] = (shape[a] + block - 1) / block;
      }
      const std::int64_t pn = pshape.numel();
      std::vector<float> s(static_cast<std::size_t>(pn));
      std::vector<std::int8_t> z(static_cast<std::size_t>(pn));
      for (std::int64_t k = 0; k < pn; ++k) {
        s[static_cast<std::size_t>(k)] = 0.05f * static_cast<float>(k % 9 + 1);
        z[static_cast<std::size_t>(k)] = static_cast<std::int8_t>(k % 11 - 5);
      }
      const TensorView xv(x.data(), DType::kFloat32, shape), sv(s.data(), DType::kFloat32, pshape),
          zv(z.data(), DType::kInt8, pshape);
      onnx::QuantizeLinearAttrs attrs;
      attrs.axis = axis;
      attrs.block_size = block;
      std::vector<std::int8_t> y(static_cast<std::size_t>(n));
      onnx::quantize_linear(xv, sv, &zv, attrs, MutableTensorView(y.data(), DType::kInt8, shape));
      // Dequantize back with the same parameters.
      std::vector<float> back(static_cast<std::size_t>(n));
      onnx::DequantizeLinearAttrs dattrs;
      dattrs.axis = axis;
      dattrs.block_size = block;
      onnx::dequantize_linear(TensorView(y.data(), DType::kInt8, shape), sv, &zv, dattrs,
                              MutableTensorView(back.data(), DType::kFloat32, shape));
      QuantizeLinearParams p;
      p.out_dtype = DType::kInt8;
      p.qmin = -128;
      p.qmax = 127;
      p.has_zero_point = true;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t k = param_index(shape, i, a, block, pshape);
        std::int8_t want;
        quantize_linear_element<float>(p, x[static_cast<std::size_t>(i)], s[static_cast<std::size_t>(k)],
                                       z[static_cast<std::size_t>(k)], &want, 0);
        ASSERT_EQ(y[static_cast<std::size_t>(i)], want) << "axis " << axis << " block " << block << " element " << i;
        const float wb = (static_cast<float>(want) - static_cast<float>(z[static_cast<std::size_t>(k)])) * s[static_cast<std::size_t>(k)];
        ASSERT_TRUE(test::same_value(back[static_cast<std::size_t>(i)], wb)) << "dequantize axis " << axis << " block " << block;
      }
    }
  }
}

// A planned call (the *_plan functions, what the bindings and the ORT library use): its spec is the
// *_spec result, running it writes what the op writes, byte for byte, it runs again, on another
// thread too, and an output of another shape or dtype is rejected as the op rejects it.
TEST(OnnxQdq, PlannedCallsEqualTheOps) {
  const Dims shape{4, 6, 5};
  const std::int64_t n = shape.numel();
  const std::vector<float> x = mixed_values(static_cast<std::size_t>(n), 71, 0.25f);
  const std::vector<float> s = {0.5f, 0.25f, 0.125f, 1.5f, 3.0f, 0.1f};
  const std::vector<std::int8_t> z = {0, -3, 7, 1, -128, 127};
  const TensorView xv(x.data(), DType::kFloat32, shape), sv(s.data(), DType::kFloat32, Dims{6}),
      zv(z.data(), DType::kInt8, Dims{6});
  std::vector<std::int8_t> q_op(static_cast<std::size_t>(n)), q_plan(q_op.size(), 99);
  std::vector<float> d_op(static_cast<std::size_t>(n)), d_plan(d_op.size(), 99.0f);
  const auto same_spec = [](const TensorSpec& a, const TensorSpec& b) { return a.dtype == b.dtype && a.shape == b.shape; };

  onnx::QuantizeLinearAttrs qa;
  const PlannedCall q = onnx::quantize_linear_plan(xv, sv, &zv, qa);
  EXPECT_TRUE(same_spec(q.spec(), onnx::quantize_linear_spec(xv, sv, &zv, qa)));
  onnx::quantize_linear(xv, sv, &zv, qa, MutableTensorView(q_op.data(), DType::kInt8, shape));
  for (int run = 0; run < 2; ++run) {
    std::fill(q_plan.begin(), q_plan.end(), std::int8_t{99});
    if (run == 0) q.run(MutableTensorView(q_plan.data(), DType::kInt8, shape));
    else std::thread([&] { q.run(MutableTensorView(q_plan.data(), DType::kInt8, shape)); }).join();
    EXPECT_EQ(q_plan, q_op) << "run " << run;
  }
  expect_error([&] { q.run(MutableTensorView(q_plan.data(), DType::kUInt8, shape)); }, ErrorKind::kValue, "QuantizeLinear");
  expect_error([&] { q.run(MutableTensorView(q_plan.data(), DType::kInt8, Dims{4, 30})); }, ErrorKind::kValue, "QuantizeLinear");

  onnx::DequantizeLinearAttrs da;
  const TensorView yv(q_op.data(), DType::kInt8, shape);
  const PlannedCall d = onnx::dequantize_linear_plan(yv, sv, &zv, da);
  EXPECT_TRUE(same_spec(d.spec(), onnx::dequantize_linear_spec(yv, sv, &zv, da)));
  onnx::dequantize_linear(yv, sv, &zv, da, MutableTensorView(d_op.data(), DType::kFloat32, shape));
  d.run(MutableTensorView(d_plan.data(), DType::kFloat32, shape));
  EXPECT_EQ(0, std::memcmp(d_plan.data(), d_op.data(), d_op.size() * sizeof(float)));

  // Quark's Extended ops: the same, per channel on axis 1.
  quark::ExtendedAttrs xa;
  const PlannedCall eq = quark::extended_quantize_linear_plan(xv, sv, &zv, xa);
  EXPECT_TRUE(same_spec(eq.spec(), quark::extended_quantize_linear_spec(xv, sv, &zv, xa)));
  std::fill(q_plan.begin(), q_plan.end(), std::int8_t{99});
  eq.run(MutableTensorView(q_plan.data(), DType::kInt8, shape));
  quark::extended_quantize_linear(xv, sv, &zv, xa, MutableTensorView(q_op.data(), DType::kInt8, shape));
  EXPECT_EQ(q_plan, q_op);
  const PlannedCall ed = quark::extended_dequantize_linear_plan(yv, sv, &zv, xa);
  EXPECT_TRUE(same_spec(ed.spec(), quark::extended_dequantize_linear_spec(yv, sv, &zv, xa)));
  std::fill(d_plan.begin(), d_plan.end(), 99.0f);
  ed.run(MutableTensorView(d_plan.data(), DType::kFloat32, shape));
  quark::extended_dequantize_linear(yv, sv, &zv, xa, MutableTensorView(d_op.data(), DType::kFloat32, shape));
  EXPECT_EQ(0, std::memcmp(d_plan.data(), d_op.data(), d_op.size() * sizeof(float)));
}

TEST(OnnxQdq, ReversedAndStridedViewsEqualContiguous) {
  const Dims shape{6, 9};
  std::vector<float> x = mixed_values(54, 71, 0.25f);
  std::vector<float> s = {0.25f, 0.5f, 0.1f, 1.0f, 2.0f, 0.3f, 0.7f, 0.9f, 0.05f};
  const TensorView sv(s.data(), DType::kFloat32, Dims{9});
  onnx::QuantizeLinearAttrs attrs;
  attrs.axis = 1;
  std::vector<std::uint8_t> want(54), got(54 * 2);
  onnx::quantize_linear(TensorView(x.data(), DType::kFloat32, shape), sv, nullptr, attrs,
                        MutableTensorView(want.data(), DType::kUInt8, shape));
  // x read backwards along both axes, written to a strided output.
  std::vector<float> xr(x.rbegin(), x.rend());
  const TensorView xrv(xr.data() + 53, DType::kFloat32, shape, Dims{-9, -1});
  onnx::quantize_linear(xrv, sv, nullptr, attrs, MutableTensorView(got.data(), DType::kUInt8, shape, Dims{18, 2}));
  for (int i = 0; i < 54; ++i) ASSERT_EQ(got[static_cast<std::size_t>(2 * i)], want[static_cast<std::size_t>(i)]) << i;
}

TEST(OnnxQdq, BadInputNamesTheParameter) {
  std::vector<float> x(24, 1.0f), s(8, 0.5f);
  std::vector<std::uint8_t> z(8, 0);
  std::vector<std::int8_t> zi(8, 0);
  const TensorView xv(x.data(), DType::kFloat32, Dims{2, 3, 4});
  auto q = [&](const TensorView& sv, const TensorView* zp, onnx::QuantizeLinearAttrs a) {
    return [=] { (void)onnx::quantize_linear_spec(xv, sv, zp, a); };
  };
  onnx::QuantizeLinearAttrs a;
  a.axis = 3;
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{4}), nullptr, a), ErrorKind::kValue, "axis 3 is out of range");
  a.axis = 1;
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{4}), nullptr, a), ErrorKind::kValue, "does not match x.shape[1]");
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{2, 2}), nullptr, a), ErrorKind::kValue, "y_scale must be a scalar");
  a.block_size = -1;
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{3}), nullptr, a), ErrorKind::kValue, "block_size must be a positive");
  a.block_size = 2;
  a.axis = 2;
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{2, 3, 3}), nullptr, a), ErrorKind::kValue, "must have shape (2, 3, 2)");
  a = {};
  const TensorView sv(s.data(), DType::kFloat32, Dims{3});
  const TensorView zbad(z.data(), DType::kUInt8, Dims{2});
  expect_error(q(sv, &zbad, a), ErrorKind::kValue, "y_zero_point must have the shape of y_scale");
  const TensorView zmany(z.data(), DType::kUInt8, Dims{2});
  expect_error(q(TensorView(s.data(), DType::kFloat32, Dims{}), &zmany, a), ErrorKind::kValue, "must have one element");
  const TensorView zf(s.data(), DType::kFloat32, Dims{3});
  expect_error(q(sv, &zf, a), ErrorKind::kType, "y_zero_point has dtype float32");
  const TensorView zu(z.data(), DType::kUInt8, Dims{3});
  a.output_dtype = DType::kInt8;
  expect_error(q(sv, &zu, a), ErrorKind::kValue, "output_dtype int8 does not match");
  // DQ: zero point of another dtype than x.
  onnx::DequantizeLinearAttrs d;
  const TensorView xq(z.data(), DType::kUInt8, Dims{8});
  const TensorView zq(zi.data(), DType::kInt8, Dims{});
  expect_error([&] { (void)onnx::dequantize_linear_spec(xq, TensorView(s.data(), DType::kFloat32, Dims{}), &zq, d); },
               ErrorKind::kType, "x_zero_point has dtype int8");
  // Quark: x must be float32; zero point types.
  quark::ExtendedAttrs qa;
  std::vector<double> xd(4, 1.0);
  expect_error([&] { (void)quark::extended_quantize_linear_spec(TensorView(xd.data(), DType::kFloat64, Dims{4}), sv, nullptr, qa); },
               ErrorKind::kType, "x must be float32");
  expect_error([&] { (void)quark::extended_quantize_linear_spec(xv, TensorView(s.data(), DType::kFloat32, Dims{}), &zf, qa); },
               ErrorKind::kType, "y_zero_point has dtype float32");
}

}  // namespace
}  // namespace polyquant::detail

namespace polyquant::detail {
namespace {

// A blocked layout runs as several engine calls; an output overlapping x (here: reversed over x's
// own bytes) must still equal a separate output (found by the fuzz harness).
TEST(OnnxQdq, BlockedOutputOverlappingXEqualsSeparateOutput) {
  for (int rank8 = 0; rank8 < 2; ++rank8) {
    std::vector<std::int16_t> buf = {1, 2, 3, 4, 5};
    const std::int64_t n = rank8 ? 4 : 5;
    Dims shape = rank8 ? Dims{1, 1, 1, 1, 1, 1, 1, 4} : Dims{5};
    std::vector<float> scale = {1.0f, 10.0f, 100.0f};
    Dims sshape = rank8 ? Dims{1, 1, 1, 1, 1, 1, 1, 2} : Dims{3};
    onnx::DequantizeLinearAttrs attrs;
    attrs.axis = -1;
    attrs.block_size = 2;
    attrs.output_dtype = DType::kFloat16;
    const TensorView xv(buf.data(), DType::kInt16, shape);
    const TensorView sv(scale.data(), DType::kFloat32, sshape);
    std::vector<std::uint16_t> separate(static_cast<std::size_t>(n));
    onnx::dequantize_linear(xv, sv, nullptr, attrs, MutableTensorView(separate.data(), DType::kFloat16, shape));
    Dims strides = contiguous_strides(shape);
    strides[shape.rank - 1] = -1;
    onnx::dequantize_linear(xv, sv, nullptr, attrs,
                            MutableTensorView(buf.data() + n - 1, DType::kFloat16, shape, strides));
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(static_cast<std::uint16_t>(buf[static_cast<std::size_t>(n - 1 - i)]), separate[static_cast<std::size_t>(i)])
          << "rank8 " << rank8 << " element " << i;
    }
  }
}

}  // namespace
}  // namespace polyquant::detail

// ---- packed sub-byte storage ----------------------------------------------------------------------
namespace polyquant::onnx {
namespace {
// Element i in bits [b * (i % k), ...) of byte i / k, low bits first, the last byte's spare bits zero;
// only the codes' low bits are read. Every length around the word size, both widths.
TEST(OnnxPacking, PacksLowBitsFirstAndRoundTrips) {
  auto rng = polyquant::test::make_rng(90);
  for (int bits : {2, 4}) {
    const int per = 8 / bits;
    for (std::int64_t n = 0; n <= 67; ++n) {
      std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
      for (auto& c : codes) c = static_cast<std::uint8_t>(rng());
      std::vector<std::uint8_t> packed(static_cast<std::size_t>(packed_size(n, bits)) + 1, 0xEE);
      ASSERT_EQ(packed_size(n, bits), (n + per - 1) / per);
      pack_sub_byte(codes.data(), n, bits, packed.data());
      EXPECT_EQ(packed.back(), 0xEE) << "wrote past the packed bytes, n=" << n;
      for (std::int64_t i = 0; i < packed_size(n, bits) * per; ++i) {
        const unsigned want = i < n ? codes[static_cast<std::size_t>(i)] & ((1u << bits) - 1) : 0u;
        ASSERT_EQ((packed[static_cast<std::size_t>(i / per)] >> (bits * (i % per))) & ((1u << bits) - 1), want)
            << "bits " << bits << " n " << n << " element " << i;
      }
      std::vector<std::uint8_t> back(static_cast<std::size_t>(n) + 1, 0xEE);
      unpack_sub_byte(packed.data(), n, bits, back.data());
      EXPECT_EQ(back.back(), 0xEE) << "wrote past the codes, n=" << n;
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(back[static_cast<std::size_t>(i)], codes[static_cast<std::size_t>(i)] & ((1u << bits) - 1)) << i;
      }
    }
  }
  std::uint8_t byte = 0;
  EXPECT_THROW(pack_sub_byte(&byte, 1, 3, &byte), Error);
  EXPECT_THROW(unpack_sub_byte(&byte, -1, 4, &byte), Error);
  EXPECT_THROW((void)packed_size(1, 8), Error);
}
}  // namespace
}  // namespace polyquant::onnx
