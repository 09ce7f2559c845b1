// The conversion kernel of every kernel set (kernels/convert) against the spec,
// convert_values_scalar, bit for bit: every float16, bfloat16, minifloat and sub-byte integer code
// widened; float32 narrowed to each of them over a stratified set of rounding boundaries (ties with
// even and odd kept parts, +-1 ulp), subnormals, overflow edges and NaN payloads, and every float32
// value to float16 and bfloat16 (the 2^32 sweep; skipped under POLYQUANT_SKIP_EXHAUSTIVE);
// runs of every length around the vector width from misaligned starts, and the pairs the kernel
// hands back to the spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/convert/element.h"
#include "kernels/registry.h"
#include "polyquant/runtime.h"
#include "test_util.h"

namespace polyquant::detail {

inline void PrintTo(const KernelEntry& e, std::ostream* os) { *os << e.name; }

namespace {

using test::isa_available;

// Converts `n` elements with the kernel and with the spec (from a misaligned `offset`) and returns
// the first differing element, or -1. Output bytes past the run must stay untouched.
// stream: RowArgs::stream (non-temporal stores where the kernel has them), the output
// `out_bytes` bytes past a 64-byte boundary (a multiple of the output's element size).
std::int64_t first_difference(RowKernel kernel, DType from, DType to, const void* src, std::int64_t n, bool stream = false,
                              std::size_t out_bytes = 0) {
  const std::size_t out_size = dtype_size(to);
  std::vector<unsigned char> got_memory(static_cast<std::size_t>(n) * out_size + 64 + 128, 0xA5), want(got_memory.size() - 128, 0xA5);
  const auto base = reinterpret_cast<std::uintptr_t>(got_memory.data());
  unsigned char* got = got_memory.data() + (64 - base % 64) % 64 + out_bytes;
  const ConvertParams p{from, to};
  RowArgs a;
  a.in[0] = src;
  a.out = got;
  a.n = n;
  a.stream = stream;
  kernel(&p, a);
  convert_values_scalar(src, from, 1, want.data(), to, 1, n);
  if (std::memcmp(got, want.data(), want.size()) == 0) return -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::memcmp(got + i * out_size, want.data() + i * out_size, out_size) != 0) return i;
  }
  return n;  // wrote past the run
}

class ConvertKernelTest : public ::testing::TestWithParam<KernelEntry> {};

TEST_P(ConvertKernelTest, EveryHalfAndBfloat16CodeWidensLikeTheSpec) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  std::vector<std::uint16_t> codes(65536 + 16);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint16_t>(i);
  for (DType from : {DType::kFloat16, DType::kBFloat16}) {
    for (std::int64_t offset : {0, 1, 7}) {
      const std::int64_t bad = first_difference(e.fn, from, DType::kFloat32, codes.data() + offset, 65536);
      EXPECT_EQ(bad, -1) << dtype_name(from) << " code 0x" << std::hex << (bad + offset) << " offset " << std::dec << offset;
    }
  }
}

// Every narrow 8-bit dtype the kernel widens: the minifloats and the sub-byte integers (one per
// byte; the spec reads only the low bits, so all 256 byte values are valid input).
constexpr DType kByteCodes[] = {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                                DType::kFloat8E8M0,   DType::kFloat6E2M3,     DType::kFloat6E3M2, DType::kFloat4E2M1,
                                DType::kInt4,         DType::kUInt4,          DType::kInt2,       DType::kUInt2};

TEST_P(ConvertKernelTest, EveryMinifloatAndSubByteCodeWidensLikeTheSpec) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  std::vector<std::uint8_t> codes(3 * 256 + 16);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(i * 7 / 3);  // each code, shuffled
  for (std::size_t i = 0; i < 256; ++i) codes[i] = static_cast<std::uint8_t>(i);
  for (DType from : kByteCodes) {
    for (std::int64_t offset : {0, 1, 13}) {
      const std::int64_t bad = first_difference(e.fn, from, DType::kFloat32, codes.data() + offset, 3 * 256);
      EXPECT_EQ(bad, -1) << dtype_name(from) << " code 0x" << std::hex << (bad >= 0 ? int{codes[static_cast<std::size_t>(bad + offset)]} : -1)
                         << " offset " << std::dec << offset;
    }
  }
}

// float32 bit patterns around every rounding boundary of float16 and bfloat16 in every binade of
// both signs, the subnormal-half shifts, the overflow edge and NaN payloads.
std::vector<std::uint32_t> stratified_floats() {
  std::vector<std::uint32_t> v;
  const std::uint32_t low_patterns[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x2FFF, 0x3000, 0x3001,
                                        0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000, 0x18001, 0x7FFFFF,
                                        0x7FE000, 0x7FF000, 0x7FEFFF, 0x400000, 0x555555, 0x2AAAAA};
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (std::uint32_t m : low_patterns) v.push_back(sign | (exponent << 23) | m);
      for (std::uint32_t k = 0; k < 23; ++k) {  // one bit set, and the ties just below and above it
        v.push_back(sign | (exponent << 23) | (1u << k));
        v.push_back(sign | (exponent << 23) | ((1u << k) - 1u));
        v.push_back(sign | (exponent << 23) | ((1u << k) + 1u));
        // A tie (bit k) with an odd kept part (bit k + 1), and +-1 ulp: the other half of ties to even.
        const std::uint32_t odd_tie = (3u << k) & 0x7FFFFFu;
        v.push_back(sign | (exponent << 23) | odd_tie);
        v.push_back(sign | (exponent << 23) | (odd_tie - 1u));
        v.push_back(sign | (exponent << 23) | ((odd_tie + 1u) & 0x7FFFFFu));
      }
    }
  }
  auto rng = test::make_rng(60);
  for (int i = 0; i < 200000; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
  return v;
}

TEST_P(ConvertKernelTest, Float32NarrowsLikeTheSpec) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  std::vector<std::uint32_t> values = stratified_floats();
  values.resize(values.size() + 16);
  std::vector<DType> targets{DType::kFloat16, DType::kBFloat16};
  targets.insert(targets.end(), std::begin(kByteCodes), std::end(kByteCodes));
  for (DType to : targets) {
    for (std::int64_t offset : {0, 3}) {
      const std::int64_t n = static_cast<std::int64_t>(values.size()) - 16;
      const std::int64_t bad = first_difference(e.fn, DType::kFloat32, to, values.data() + offset, n);
      EXPECT_EQ(bad, -1) << dtype_name(to) << " float32 bits 0x" << std::hex
                         << (bad >= 0 && bad < n ? values[static_cast<std::size_t>(bad + offset)] : 0u);
    }
  }
  // Streamed 16-bit outputs (non-temporal from the first aligned vector), at output addresses that
  // peel no head, and a head of 1, 5 and 15 codes; short runs too.
  for (DType to : {DType::kFloat16, DType::kBFloat16}) {
    for (std::size_t out_bytes : {0, 2, 10, 34}) {
      for (std::int64_t n : {static_cast<std::int64_t>(values.size()) - 16, std::int64_t{3}, std::int64_t{37}}) {
        const std::int64_t bad = first_difference(e.fn, DType::kFloat32, to, values.data() + 1, n, true, out_bytes);
        EXPECT_EQ(bad, -1) << dtype_name(to) << " streamed, output at +" << out_bytes << " bytes, n " << n;
      }
    }
  }
}

std::vector<KernelEntry> conversion_kernels();

// Every float32 value narrowed to float16 and bfloat16 by every vector kernel set this CPU runs,
// against the spec computed once per chunk (one test for all kernel sets: the spec's share of the
// sweep was half its time when each kernel set's test computed it again).
TEST(ConvertKernelSweep, EveryFloat32NarrowsLikeTheSpecOnEveryKernelSet) {
  if (std::getenv("POLYQUANT_SKIP_EXHAUSTIVE")) GTEST_SKIP() << "POLYQUANT_SKIP_EXHAUSTIVE is set";
  std::vector<KernelEntry> kernels;
  for (const KernelEntry& e : conversion_kernels()) {
    if (isa_available(e.isa)) kernels.push_back(e);
  }
  if (kernels.empty()) GTEST_SKIP() << "no vector kernel set on this CPU";
  std::vector<std::atomic<std::uint64_t>> mismatches(kernels.size());
  std::vector<std::atomic<std::uint32_t>> example(kernels.size());
  auto scan = [&](std::uint64_t first, std::uint64_t last) {
    constexpr std::uint64_t kChunk = 1 << 20;
    std::vector<std::uint32_t> chunk(kChunk);
    std::vector<std::uint16_t> want(kChunk), got(kChunk + 32);
    for (std::uint64_t base = first; base < last; base += kChunk) {
      for (std::uint64_t i = 0; i < kChunk; ++i) chunk[i] = static_cast<std::uint32_t>(base + i);
      for (DType to : {DType::kFloat16, DType::kBFloat16}) {
        convert_values_scalar(chunk.data(), DType::kFloat32, 1, want.data(), to, 1, static_cast<std::int64_t>(kChunk));
        for (std::size_t k = 0; k < kernels.size(); ++k) {
          std::fill(got.begin(), got.end(), std::uint16_t{0xA5A5});
          const ConvertParams p{DType::kFloat32, to};
          RowArgs a;
          a.in[0] = chunk.data();
          a.out = got.data();
          a.n = static_cast<std::int64_t>(kChunk);
          kernels[k].fn(&p, a);
          const bool past = std::any_of(got.begin() + kChunk, got.end(), [](std::uint16_t v) { return v != 0xA5A5; });
          if (past || std::memcmp(got.data(), want.data(), kChunk * sizeof(std::uint16_t)) != 0) {
            ++mismatches[k];
            std::size_t i = 0;
            while (i < kChunk && got[i] == want[i]) ++i;
            example[k] = chunk[std::min<std::size_t>(i, kChunk - 1)];
          }
        }
      }
    }
  };
  std::thread t(scan, 0, std::uint64_t{1} << 31);
  scan(std::uint64_t{1} << 31, std::uint64_t{1} << 32);
  t.join();
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    EXPECT_EQ(mismatches[k].load(), 0u) << kernels[k].name << ": e.g. float32 bits 0x" << std::hex << example[k].load();
  }
}

TEST_P(ConvertKernelTest, RunsOfEveryLengthAndOtherPairs) {
  const KernelEntry& e = GetParam();
  if (!isa_available(e.isa)) GTEST_SKIP() << isa_name(e.isa) << " not supported by this CPU";
  const std::vector<float> x = test::mixed_values(4096, 61, 3.0f);
  std::vector<std::uint16_t> codes(4096);
  auto rng = test::make_rng(62);
  for (auto& c : codes) c = static_cast<std::uint16_t>(rng());
  std::vector<std::int8_t> ints(4096);
  for (auto& i : ints) i = static_cast<std::int8_t>(rng());
  for (std::int64_t n = 0; n <= 70; ++n) {
    for (std::int64_t offset : {0, 1, 5}) {
      for (DType to : {DType::kFloat16, DType::kBFloat16}) {
        EXPECT_EQ(first_difference(e.fn, DType::kFloat32, to, x.data() + offset, n), -1) << dtype_name(to) << " n=" << n;
        EXPECT_EQ(first_difference(e.fn, to, DType::kFloat32, codes.data() + offset, n), -1) << dtype_name(to) << " n=" << n;
      }
      for (DType t : kByteCodes) {
        EXPECT_EQ(first_difference(e.fn, DType::kFloat32, t, x.data() + offset, n), -1) << dtype_name(t) << " n=" << n;
        EXPECT_EQ(first_difference(e.fn, t, DType::kFloat32, ints.data() + offset, n), -1) << dtype_name(t) << " n=" << n;
      }
      // Pairs the kernel hands back to the spec.
      EXPECT_EQ(first_difference(e.fn, DType::kInt8, DType::kFloat32, ints.data() + offset, n), -1) << "int8 n=" << n;
      EXPECT_EQ(first_difference(e.fn, DType::kFloat16, DType::kFloat8E4M3FN, codes.data() + offset, n), -1) << "f16->e4m3fn n=" << n;
      EXPECT_EQ(first_difference(e.fn, DType::kFloat32, DType::kFloat64, x.data() + offset, n), -1) << "float64 n=" << n;
    }
  }
}

// The spec itself, against ml_dtypes 0.5 (`astype(np.float32)` of bfloat16 and float16 codes): a
// signalling NaN widens with its quiet bit still clear, payload and sign kept (an earlier spec
// went through float64 for bfloat16 and quieted it).
TEST(ConvertSpec, SignallingNaNsWidenUnquietedAsMlDtypes) {
  const std::uint16_t bf16[] = {0x7F81, 0xFF81, 0x7FC1, 0x0001};
  const std::uint32_t bf16_want[] = {0x7F810000u, 0xFF810000u, 0x7FC10000u, 0x00010000u};
  std::uint32_t got[4] = {};
  convert_values_scalar(bf16, DType::kBFloat16, 1, got, DType::kFloat32, 1, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], bf16_want[i]) << "bfloat16 0x" << std::hex << bf16[i];
  const std::uint16_t f16 = 0x7C01;
  convert_values_scalar(&f16, DType::kFloat16, 1, got, DType::kFloat32, 1, 1);
  EXPECT_EQ(got[0], 0x7F802000u);
}

// convert_element, the per-element form the CUDA conversion kernel runs (kernels/convert/
// element.h), equals the host loop for every pair of dtypes over the stratified float32 values
// converted into each source dtype and raw bytes of every code; integer targets are not
// conversions (the op kernels write them) and report so.
TEST(ConvertSpec, ConvertElementEqualsTheHostLoopForEveryPairOfDtypes) {
  const std::vector<std::uint32_t> bits = stratified_floats();
  const std::size_t n = bits.size() + 65536;
  for (int s = 0; s <= static_cast<int>(DType::kFloat4E2M1); ++s) {
    const auto st = static_cast<DType>(s);
    const std::size_t ss = dtype_size(st);
    // Source values: every 16-bit pattern (every code of the narrow types), then the float32 set
    // rounded into st (or raw float32 bits where st is an integer type: any bytes are valid).
    std::vector<unsigned char> src(n * ss);
    for (std::size_t i = 0; i < 65536; ++i) {
      const auto code = static_cast<std::uint16_t>(i);
      std::memcpy(src.data() + i * ss, &code, std::min<std::size_t>(ss, 2));
    }
    for (std::size_t i = 0; i < bits.size(); ++i) {
      unsigned char* dst = src.data() + (65536 + i) * ss;
      if (is_floating(st) || is_onnx_only(st)) {
        if (is_onnx_only(st) && !(st == DType::kBFloat16 || is_minifloat(st))) {
          std::memcpy(dst, &bits[i], 1);  // sub-byte integers: one element per byte, low bits only
          *dst &= (st == DType::kInt4 || st == DType::kUInt4) ? 0x0F : 0x03;
        } else {
          convert_values_scalar(&bits[i], DType::kFloat32, 1, dst, st, 1, 1);
        }
      } else {
        std::memcpy(dst, &bits[i], std::min<std::size_t>(ss, 4));
      }
    }
    for (int d = 0; d <= static_cast<int>(DType::kFloat4E2M1); ++d) {
      const auto dt = static_cast<DType>(d);
      if (!is_conversion_target(dt) && st != dt) {
        unsigned char sink[8] = {};
        EXPECT_FALSE(convert_element(src.data(), st, 0, sink, dt, 0)) << dtype_name(st) << " -> " << dtype_name(dt);
        continue;
      }
      const std::size_t ds = dtype_size(dt);
      std::vector<unsigned char> loop(n * ds), element(n * ds);
      convert_values_scalar(src.data(), st, 1, loop.data(), dt, 1, static_cast<std::int64_t>(n));
      for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(convert_element(src.data(), st, static_cast<std::int64_t>(i), element.data(), dt, static_cast<std::int64_t>(i)));
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(loop.data() + i * ds, element.data() + i * ds, ds), 0)
            << dtype_name(st) << " -> " << dtype_name(dt) << " element " << i;
      }
    }
  }
}

std::vector<KernelEntry> conversion_kernels() {
  std::vector<KernelEntry> v;
  for (const auto& e : all_kernels()) {
    if (e.op == KernelOp::kConvert && e.isa != Isa::kScalar) v.push_back(e);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Registry, ConvertKernelTest, ::testing::ValuesIn(conversion_kernels()),
                         [](const auto& info) { return std::string(info.param.name); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ConvertKernelTest);

}  // namespace
}  // namespace polyquant::detail
