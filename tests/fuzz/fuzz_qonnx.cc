// Fuzz harness over polyquant's public C++ API (the QONNX ops).
//
// Each case draws an op, a data dtype, parameter dtypes, an output shape (rank 0..8, empty dims,
// rows long enough for the SIMD loops, now and then large enough to be split over threads or with
// dimensions whose product overflows), operand shapes that broadcast to it (or, rarely, do not),
// strides for every operand (zero, negative, odd multiples, transposed) and values (IEEE specials,
// subnormals, ties, huge, random bits), then:
//   * calls the *_spec function; a rejection must be polyquant::Error, identical on every kernel
//     set (any other exception, a crash or a sanitizer report fails the run);
//   * runs the op on every kernel set the CPU has (polyquant::set_kernel_set) and compares each output with the scalar set's, bit for bit (any NaN equals any NaN);
//   * runs it again on contiguous copies of every operand and compares (layout invariance: the
//     zero-stride and negative-stride paths against the plain one);
//   * writes into a strided (reversed) output now and then and compares.
//
// Two ways to build it:
//   * the deterministic driver (default): `polyquant_fuzz [--seed N] [--seconds S] [--iterations N]
//     [--start I]`: case i is drawn from (seed, i) alone, so `--seed N --start I --iterations 1`
//     replays one case. It prints the kernel sets, executions per second and the total.
//   * a libFuzzer target (clang, -DPOLYQUANT_LIBFUZZER -fsanitize=fuzzer): LLVMFuzzerTestOneInput
//     draws the same case from the input bytes instead of the generator.
#include <polyquant/polyquant.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace pq = polyquant;
namespace qx = polyquant::qonnx;

namespace {

// ---- randomness: a generator or the fuzzer's bytes --------------------------------------------

struct Source {
  // Generator mode: splitmix64 from a seed.
  std::uint64_t state = 0;
  // Byte mode (libFuzzer): read from data; zeros once exhausted.
  const std::uint8_t* data = nullptr;
  std::size_t size = 0, pos = 0;

  std::uint64_t u64() {
    if (data != nullptr) {
      std::uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | (pos < size ? data[pos++] : 0);
      return v;
    }
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform-ish in [0, n).
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : u64() % n; }
  bool chance(int percent) { return static_cast<int>(below(100)) < percent; }
  template <class T, std::size_t N>
  T pick(const T (&a)[N]) {
    return a[below(N)];
  }
};

// ---- element types ----------------------------------------------------------------------------

using f16 = _Float16;

constexpr pq::DType kFloatTypes[] = {pq::DType::kFloat16, pq::DType::kFloat32, pq::DType::kFloat64};
constexpr pq::DType kAllTypes[] = {
    pq::DType::kFloat16, pq::DType::kFloat32, pq::DType::kFloat64, pq::DType::kInt8,   pq::DType::kInt16,
    pq::DType::kInt32,   pq::DType::kInt64,   pq::DType::kUInt8,   pq::DType::kUInt16, pq::DType::kUInt32,
    pq::DType::kUInt64,  pq::DType::kBool};

// Writes `v` as element `i` of a buffer of `dtype` (integer types wrap, as a numpy cast would not
// necessarily, but any value is a legal input).
void store(void* buf, pq::DType dtype, std::int64_t i, double v) {
  auto* b = static_cast<unsigned char*>(buf);
  auto as_int = [&]() -> std::int64_t {
    if (!std::isfinite(v)) return 0;
    if (v > 9.2e18) return std::numeric_limits<std::int64_t>::max();
    if (v < -9.2e18) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(v);
  };
  switch (dtype) {
    case pq::DType::kFloat16: reinterpret_cast<f16*>(b)[i] = static_cast<f16>(v); break;
    case pq::DType::kFloat32: reinterpret_cast<float*>(b)[i] = static_cast<float>(v); break;
    case pq::DType::kFloat64: reinterpret_cast<double*>(b)[i] = v; break;
    case pq::DType::kInt8: reinterpret_cast<std::int8_t*>(b)[i] = static_cast<std::int8_t>(as_int()); break;
    case pq::DType::kInt16: reinterpret_cast<std::int16_t*>(b)[i] = static_cast<std::int16_t>(as_int()); break;
    case pq::DType::kInt32: reinterpret_cast<std::int32_t*>(b)[i] = static_cast<std::int32_t>(as_int()); break;
    case pq::DType::kInt64: reinterpret_cast<std::int64_t*>(b)[i] = as_int(); break;
    case pq::DType::kUInt8: reinterpret_cast<std::uint8_t*>(b)[i] = static_cast<std::uint8_t>(as_int()); break;
    case pq::DType::kUInt16: reinterpret_cast<std::uint16_t*>(b)[i] = static_cast<std::uint16_t>(as_int()); break;
    case pq::DType::kUInt32: reinterpret_cast<std::uint32_t*>(b)[i] = static_cast<std::uint32_t>(as_int()); break;
    case pq::DType::kUInt64:
      reinterpret_cast<std::uint64_t*>(b)[i] = static_cast<std::uint64_t>(as_int());
      break;
    case pq::DType::kBool: reinterpret_cast<bool*>(b)[i] = v != 0.0; break;
  }
}

// Raw random bits of one element (floats: any pattern, NaN payloads and subnormals included).
void store_bits(void* buf, pq::DType dtype, std::int64_t i, std::uint64_t bits) {
  const std::size_t size = pq::dtype_size(dtype);
  if (dtype == pq::DType::kBool) bits &= 1;
  std::memcpy(static_cast<unsigned char*>(buf) + static_cast<std::size_t>(i) * size, &bits, size);
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double data_value(Source& s) {
  static const double specials[] = {0.0,     -0.0,    kNaN,     -kNaN,        kInf,       -kInf,
                                    0.5,     -0.5,    1.5,      2.5,          -2.5,       0.49999997,
                                    1e-45,   1e-40,   1e-310,   5e-324,       1.1754942e-38,
                                    65504.0, 65520.0, 8388609.0, 16777215.0, 3.4028235e38, 1e300,
                                    -1e300,  6e-8,    2.0e-7,   1.7014118e38, 2.5521178e38};
  switch (s.below(5)) {
    case 0: return s.pick(specials);
    case 1: return static_cast<double>(static_cast<std::int64_t>(s.below(601)) - 300) / 2.0;  // ties
    case 2: return (static_cast<double>(s.below(2001)) - 1000.0) * 0.37;
    case 3: return std::ldexp(static_cast<double>(s.below(1 << 20)) / (1 << 20) + 1.0,
                              static_cast<int>(s.below(300)) - 150) * (s.chance(50) ? -1 : 1);
    default: return (static_cast<double>(s.below(1u << 24)) / (1u << 20) - 8.0);
  }
}

// ---- tensors ----------------------------------------------------------------------------------

struct Tensor {
  pq::DType dtype = pq::DType::kFloat32;
  pq::Dims shape, strides;
  std::vector<std::uint64_t> storage;  // 8-byte aligned backing store
  std::int64_t offset = 0;             // element offset of element 0 inside storage

  void* base() { return storage.data(); }
  void* data() { return static_cast<unsigned char*>(base()) + offset * static_cast<std::int64_t>(pq::dtype_size(dtype)); }
  pq::TensorView view() { return pq::TensorView(data(), dtype, shape, strides); }
  pq::MutableTensorView mutable_view() { return pq::MutableTensorView(data(), dtype, shape, strides); }
};

std::int64_t checked_numel(const pq::Dims& d) {
  // numel without overflow: saturates at 2^62.
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) {
    if (d[i] == 0) return 0;
  }
  for (int i = 0; i < d.rank; ++i) {
    if (n > (std::int64_t{1} << 62) / std::max<std::int64_t>(d[i], 1)) return std::int64_t{1} << 62;
    n *= d[i];
  }
  return n;
}

// Allocates a tensor of `shape` with drawn strides; the memory the strides reach is filled by `fill`
// (every element of the span, including gaps, so uninitialised reads cannot happen).
template <class Fill>
Tensor make_tensor(Source& s, pq::DType dtype, const pq::Dims& shape, bool allow_zero_stride, Fill fill) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides.rank = shape.rank;
  const int kind = static_cast<int>(s.below(6));  // 0,1: contiguous; 2: negative; 3: odd; 4: transposed; 5: mixed
  std::int64_t step = 1;
  std::vector<int> order(static_cast<std::size_t>(shape.rank));
  for (int i = 0; i < shape.rank; ++i) order[static_cast<std::size_t>(i)] = shape.rank - 1 - i;  // innermost first
  if (kind == 4 || kind == 5) {
    for (int i = shape.rank - 1; i > 0; --i) std::swap(order[static_cast<std::size_t>(i)], order[s.below(static_cast<std::uint64_t>(i) + 1)]);
  }
  for (int k : order) {
    std::int64_t mult = 1;
    static const std::int64_t mults[] = {1, 2, 3, 5};
    if (kind == 3 || kind == 5) mult = s.pick(mults);
    std::int64_t stride = step * mult;
    if ((kind == 2 || kind == 5) && s.chance(50)) stride = -stride;
    if (allow_zero_stride && shape[k] != 1 && s.chance(kind == 5 ? 40 : 15)) stride = 0;  // broadcast view
    if (shape[k] == 1 && s.chance(30)) stride = static_cast<std::int64_t>(s.below(7)) - 3;  // any stride is legal
    t.strides[k] = stride;
    step *= std::max<std::int64_t>(shape[k], 1) * mult;
  }
  // Span reached by the strides.
  std::int64_t lo = 0, hi = 0;
  if (checked_numel(shape) > 0) {
    for (int k = 0; k < shape.rank; ++k) {
      const std::int64_t reach = (shape[k] - 1) * t.strides[k];
      (reach < 0 ? lo : hi) += reach;
    }
  }
  const std::int64_t span = hi - lo + 1;
  const std::size_t bytes = static_cast<std::size_t>(span) * pq::dtype_size(dtype);
  t.storage.assign((bytes + 7) / 8, 0);
  t.offset = -lo;
  for (std::int64_t i = 0; i < span; ++i) fill(t.base(), i);
  return t;
}

// A contiguous copy with the same values (read through the strides).
Tensor contiguous_copy(const Tensor& t) {
  Tensor c;
  c.dtype = t.dtype;
  c.shape = t.shape;
  c.strides = pq::contiguous_strides(t.shape);
  const std::size_t size = pq::dtype_size(t.dtype);
  const std::int64_t n = checked_numel(t.shape);
  c.storage.assign((static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 7) / 8, 0);
  const auto* src = reinterpret_cast<const unsigned char*>(t.storage.data()) + t.offset * static_cast<std::int64_t>(size);
  auto* dst = reinterpret_cast<unsigned char*>(c.storage.data());
  std::int64_t idx[pq::kMaxRank] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (int k = 0; k < t.shape.rank; ++k) off += idx[k] * t.strides[k];
    std::memcpy(dst + i * static_cast<std::int64_t>(size), src + off * static_cast<std::int64_t>(size), size);
    for (int k = t.shape.rank - 1; k >= 0; --k) {
      if (++idx[k] < t.shape[k]) break;
      idx[k] = 0;
    }
  }
  return c;
}

// Element i (C order) of a tensor, as raw bits, for the comparison.
bool same_element(const Tensor& a, const Tensor& b, std::int64_t i, std::string* what) {
  auto at = [](const Tensor& t, std::int64_t flat) {
    std::int64_t off = 0, rem = flat;
    for (int k = t.shape.rank - 1; k >= 0; --k) {
      off += (rem % t.shape[k]) * t.strides[k];
      rem /= t.shape[k];
    }
    const std::size_t size = pq::dtype_size(t.dtype);
    const auto* p = reinterpret_cast<const unsigned char*>(t.storage.data()) + (t.offset + off) * static_cast<std::int64_t>(size);
    double v = 0;
    std::uint64_t bits = 0;
    std::memcpy(&bits, p, size);
    switch (t.dtype) {
      case pq::DType::kFloat16: v = static_cast<double>(*reinterpret_cast<const f16*>(p)); break;
      case pq::DType::kFloat32: v = static_cast<double>(*reinterpret_cast<const float*>(p)); break;
      case pq::DType::kFloat64: v = *reinterpret_cast<const double*>(p); break;
      default: break;
    }
    return std::pair<double, std::uint64_t>(v, bits);
  };
  const auto [va, ba] = at(a, i);
  const auto [vb, bb] = at(b, i);
  if (std::isnan(va) && std::isnan(vb)) return true;
  if (ba == bb) return true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld: %.17g (0x%llx) vs %.17g (0x%llx)", static_cast<long long>(i), va,
                static_cast<unsigned long long>(ba), vb, static_cast<unsigned long long>(bb));
  *what = buf;
  return false;
}

// ---- cases ------------------------------------------------------------------------------------

enum class Op { kIntQuant, kBipolar, kTruncV1, kTruncV2, kFloatQuant };
constexpr const char* kOpNames[] = {"int_quant", "bipolar_quant", "trunc_v1", "trunc_v2", "float_quant"};

struct Case {
  Op op = Op::kIntQuant;
  std::vector<Tensor> in;  // x first
  qx::IntQuantAttrs iq;
  qx::TruncV2Attrs t2;
  qx::FloatQuantAttrs fq;
  pq::RoundingMode mode = pq::RoundingMode::kHalfEven;
  std::string describe() const {
    std::string d = kOpNames[static_cast<int>(op)];
    for (const auto& t : in) {
      d += std::string(" ") + pq::dtype_name(t.dtype) + t.shape.str() + "/" + t.strides.str();
    }
    d += std::string(" mode=") + pq::rounding_mode_name(mode);
    return d;
  }
};

bool g_overflow_shapes = true;  // --no-overflow-shapes: triage of other defects while numel overflows

pq::Dims draw_out_shape(Source& s) {
  pq::Dims d;
  int shape_kind = static_cast<int>(s.below(20));
  if (shape_kind == 1 && !g_overflow_shapes) shape_kind = 2;
  if (shape_kind == 0) {  // big enough for several threads
    d = pq::Dims{static_cast<std::int64_t>(2 + s.below(3)), static_cast<std::int64_t>(40000 + s.below(40000))};
    return d;
  }
  if (shape_kind == 1) {  // dimensions whose product overflows int64 (only ever broadcast views)
    d = pq::Dims{std::int64_t{1} << (31 + s.below(3)), std::int64_t{1} << (31 + s.below(3)), 3};
    return d;
  }
  d.rank = static_cast<int>(s.below(pq::kMaxRank + 1));
  static const std::int64_t dims[] = {1, 1, 2, 3, 4, 0, 5, 7};
  static const std::int64_t rows[] = {16, 17, 31, 33, 64, 65, 130, 257};
  for (int i = 0; i < d.rank; ++i) d[i] = s.pick(dims);
  if (d.rank > 0 && s.chance(50)) d[d.rank - 1] = s.pick(rows);
  while (checked_numel(d) > 4096) d[static_cast<int>(s.below(static_cast<std::uint64_t>(d.rank)))] = 1;
  return d;
}

// A shape that broadcasts to `out` (a suffix of its dims, each kept or 1), or rarely an
// incompatible one, or a single element.
pq::Dims operand_shape(Source& s, const pq::Dims& out, bool single) {
  pq::Dims d;
  if (single) {
    d.rank = static_cast<int>(s.below(3));
    for (int i = 0; i < d.rank; ++i) d[i] = 1;
    return d;
  }
  d.rank = static_cast<int>(s.below(static_cast<std::uint64_t>(out.rank) + 1));
  for (int i = 0; i < d.rank; ++i) {
    const std::int64_t o = out[out.rank - d.rank + i];
    d[i] = s.chance(50) ? o : 1;
  }
  if (s.chance(2) && d.rank > 0) d[0] = d[0] + 1 + static_cast<std::int64_t>(s.below(3));  // incompatible
  return d;
}

template <class ValueFn>
Tensor param_tensor(Source& s, pq::DType x_dtype, const pq::Dims& shape, ValueFn value) {
  pq::DType dtype = x_dtype;
  if (s.chance(25)) dtype = s.pick(kAllTypes);
  const bool per_tensor = s.chance(60);
  const double v0 = value();
  const bool bits = s.chance(3);
  return make_tensor(s, dtype, shape, true, [&](void* buf, std::int64_t i) {
    if (bits) {
      store_bits(buf, dtype, i, s.u64());
    } else {
      store(buf, dtype, i, per_tensor ? v0 : value());
    }
  });
}

Case draw_case(Source& s) {
  Case c;
  c.op = static_cast<Op>(s.below(5));
  c.mode = static_cast<pq::RoundingMode>(s.below(pq::kNumRoundingModes));
  const pq::DType xd = s.pick(kFloatTypes);
  const pq::Dims out = draw_out_shape(s);
  const bool huge = checked_numel(out) > (std::int64_t{1} << 40);
  // x
  {
    pq::Dims xs = (huge || s.chance(10)) ? pq::Dims{} : out;
    if (!huge && s.chance(30)) xs = operand_shape(s, out, false);
    const bool bits = s.chance(10);
    c.in.push_back(make_tensor(s, xd, xs, true, [&](void* buf, std::int64_t i) {
      if (bits) {
        store_bits(buf, xd, i, s.u64());
      } else {
        store(buf, xd, i, data_value(s));
      }
    }));
  }
  if (huge) {  // every operand must stay tiny: make x a zero-stride view of one element
    Tensor& x = c.in[0];
    x.shape = out;
    x.strides = pq::Dims{};
    x.strides.rank = out.rank;
    x.offset = 0;
  }
  auto shape = [&](bool single = false) { return huge ? pq::Dims{} : operand_shape(s, out, single); };
  const double scales[] = {1.0, 0.5, 0.25, 2.0, 0.37, 3.0, 1e-3, 1e3, 0.0, -0.0, -0.5, kNaN, kInf, -kInf, 1e-40,
                           5e-324, 6e-8, 1e38, 1e300, 0.1};
  const double zeropts[] = {0.0, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -3.25, 128.0, kNaN, kInf, 1e30};
  const double bitwidths[] = {1, 2, 3, 4, 8, 16, 2.5, 0.5, 24, 25, 31, 32, 53, 64, 0, -1, kNaN, kInf, 1e300, 1023, 1024};
  auto pick_from = [&](const auto& arr) { return [&s, &arr] { return s.pick(arr); }; };
  switch (c.op) {
    case Op::kIntQuant:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(zeropts)));
      c.in.push_back(param_tensor(s, xd, s.chance(97) ? shape(true) : shape(), pick_from(bitwidths)));
      c.iq = {s.chance(50), s.chance(50), c.mode};
      break;
    case Op::kBipolar:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      break;
    case Op::kTruncV1:
    case Op::kTruncV2:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(zeropts)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(bitwidths)));
      if (c.op == Op::kTruncV2) c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(bitwidths)));
      c.t2 = {s.chance(50), s.chance(50), c.mode};
      break;
    case Op::kFloatQuant: {
      static const double ebits[] = {1, 2, 3, 4, 5, 8, 2.5, 0, 11, -1, kNaN, 1e4};
      static const double mbits[] = {0, 1, 2, 3, 4, 7, 10, 23, 2.5, 52, -1, kNaN, 1e9, 1099511627776.0};
      static const double biases[] = {0, 1, 3, 7, 15, 127, -3, 2.5, 1e3, kNaN, -1e3};
      static const double maxvals[] = {448, 57344, 1, 0, 0.5, 240, 3e38, kInf, kNaN, -1, 1e-40, 6};
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(ebits)));
      c.in.push_back(param_tensor(s, xd, s.chance(97) ? shape(true) : shape(), pick_from(mbits)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(biases)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(maxvals)));
      c.fq.has_inf = s.chance(30);
      c.fq.has_nan = s.chance(50);
      c.fq.has_subnormal = s.chance(50);
      c.fq.saturation = s.chance(70);
      c.fq.rounding_mode = c.mode;
      break;
    }
  }
  return c;
}

pq::TensorSpec spec_of(Case& c) {
  auto v = [&](int i) { return c.in[static_cast<std::size_t>(i)].view(); };
  switch (c.op) {
    case Op::kIntQuant: return qx::int_quant_spec(v(0), v(1), v(2), v(3), c.iq);
    case Op::kBipolar: return qx::bipolar_quant_spec(v(0), v(1));
    case Op::kTruncV1: return qx::trunc_spec(v(0), v(1), v(2), v(3), v(4));
    case Op::kTruncV2: return qx::trunc_v2_spec(v(0), v(1), v(2), v(3), v(4), v(5));
    case Op::kFloatQuant: return qx::float_quant_spec(v(0), v(1), v(2), v(3), v(4), v(5), c.fq);
  }
  std::abort();
}

void run_op(Case& c, std::vector<Tensor>& in, const pq::MutableTensorView& out) {
  auto v = [&](int i) { return in[static_cast<std::size_t>(i)].view(); };
  switch (c.op) {
    case Op::kIntQuant: qx::int_quant(v(0), v(1), v(2), v(3), c.iq, out); return;
    case Op::kBipolar: qx::bipolar_quant(v(0), v(1), out); return;
    case Op::kTruncV1: qx::trunc(v(0), v(1), v(2), v(3), v(4), c.mode, out); return;
    case Op::kTruncV2: qx::trunc_v2(v(0), v(1), v(2), v(3), v(4), v(5), c.t2, out); return;
    case Op::kFloatQuant: qx::float_quant(v(0), v(1), v(2), v(3), v(4), v(5), c.fq, out); return;
  }
}

// ---- the run ----------------------------------------------------------------------------------

struct Stats {
  std::uint64_t cases = 0, rejected = 0, executions = 0, compared_elements = 0;
  std::uint64_t per_op[5] = {};
};

std::vector<std::string> g_sets;  // kernel sets to compare, scalar first

void select_set(const std::string& name) { pq::set_kernel_set(name); }

std::uint64_t g_seed = 0, g_case = 0;  // for the replay line of a failure

[[noreturn]] void fail(const Case& c, const std::string& why) {
  std::fprintf(stderr, "polyquant_fuzz: FAILED: %s\n  case: %s\n  replay: --seed %llu --start %llu --iterations 1\n",
               why.c_str(), c.describe().c_str(), static_cast<unsigned long long>(g_seed),
               static_cast<unsigned long long>(g_case));
  std::fflush(stderr);
  std::abort();
}

Tensor output_for(Source& s, const pq::TensorSpec& spec, bool strided) {
  Tensor o;
  o.dtype = spec.dtype;
  o.shape = spec.shape;
  o.strides = pq::contiguous_strides(spec.shape);
  const std::int64_t n = checked_numel(spec.shape);
  const std::size_t size = pq::dtype_size(spec.dtype);
  o.storage.assign((static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 7) / 8, 0x5A5A5A5A5A5A5A5Aull);
  if (strided && n > 0) {  // reversed on every axis
    std::int64_t off = 0;
    for (int k = 0; k < o.shape.rank; ++k) {
      off += (o.shape[k] - 1) * o.strides[k];
      o.strides[k] = -o.strides[k];
    }
    o.offset = off;
  }
  (void)s;
  return o;
}

void compare(const Case& c, const Tensor& got, const Tensor& want, const std::string& what, Stats& st) {
  const std::int64_t n = checked_numel(want.shape);
  std::string detail;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!same_element(got, want, i, &detail)) fail(c, what + ": " + detail);
  }
  st.compared_elements += static_cast<std::uint64_t>(n);
}

void run_case(Source& s, Stats& st) {
  Case c = draw_case(s);
  ++st.cases;
  ++st.per_op[static_cast<int>(c.op)];
  // The spec must agree on every kernel set (it does not depend on one, but check anyway).
  std::optional<pq::TensorSpec> spec;
  std::string error;
  try {
    spec = spec_of(c);
  } catch (const pq::Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    fail(c, std::string("the spec threw a non-polyquant exception: ") + e.what());
  }
  if (!spec) {
    ++st.rejected;
    return;
  }
  const std::int64_t n = checked_numel(spec->shape);
  if (n > (std::int64_t{1} << 22)) {
    ++st.rejected;  // accepted a huge broadcast: the spec is all we can check without the memory
    return;
  }
  const bool strided_out = s.chance(20);
  const bool check_layout = s.chance(50);
  std::optional<Tensor> reference;
  std::string reference_error;
  for (const std::string& set : g_sets) {
    select_set(set);
    Tensor out = output_for(s, *spec, strided_out);
    std::string err;
    try {
      run_op(c, c.in, out.mutable_view());
    } catch (const pq::Error& e) {
      err = e.what();
    } catch (const std::exception& e) {
      fail(c, "kernel set " + set + " threw a non-polyquant exception: " + e.what());
    }
    ++st.executions;
    if (!reference && reference_error.empty()) {  // the first set (scalar) is the reference
      if (err.empty()) {
        reference = std::move(out);
      } else {
        reference_error = err;
      }
      continue;
    }
    if (!reference_error.empty() || !err.empty()) {
      if (err != reference_error) {
        fail(c, "kernel set " + set + " error '" + err + "' differs from the scalar set's '" + reference_error + "'");
      }
      continue;
    }
    compare(c, out, *reference, "kernel set " + set + " vs scalar", st);
  }
  if (check_layout && reference) {
    std::vector<Tensor> copies;
    for (const Tensor& t : c.in) copies.push_back(contiguous_copy(t));
    for (const std::string& set : g_sets) {
      select_set(set);
      Tensor out = output_for(s, *spec, false);
      try {
        run_op(c, copies, out.mutable_view());
      } catch (const std::exception& e) {
        fail(c, "contiguous copies on kernel set " + set + " threw: " + e.what());
      }
      ++st.executions;
      compare(c, out, *reference, "contiguous copies on kernel set " + set + " vs the strided inputs on scalar", st);
    }
  }
  select_set(g_sets.back());
}

std::uint64_t case_seed(std::uint64_t seed, std::uint64_t i) {
  Source s;
  s.state = seed ^ (i * 0xD1B54A32D192ED03ull);
  return s.u64();
}

void init_sets() {
  const pq::RuntimeInfo info = pq::runtime_info();
  g_sets.clear();
  // scalar first (the reference), the active (best) set last.
  for (auto it = info.supported.rbegin(); it != info.supported.rend(); ++it) g_sets.push_back(*it);
}

}  // namespace

#if defined(POLYQUANT_LIBFUZZER)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static bool ready = [] {
    init_sets();
    return true;
  }();
  (void)ready;
  Source s;
  s.data = data;
  s.size = size;
  Stats st;
  run_case(s, st);
  return 0;
}
#else
int main(int argc, char** argv) {
  std::uint64_t seed = 1, iterations = 0, start = 0;
  double seconds = 10.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") {
      seed = std::strtoull(next(), nullptr, 10);
    } else if (a == "--seconds") {
      seconds = std::strtod(next(), nullptr);
    } else if (a == "--iterations") {
      iterations = std::strtoull(next(), nullptr, 10);
    } else if (a == "--start") {
      start = std::strtoull(next(), nullptr, 10);
    } else if (a == "--no-overflow-shapes") {
      g_overflow_shapes = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seed N] [--seconds S] [--iterations N] [--start I] [--no-overflow-shapes]\n"
                   "  runs cases start, start+1, ... until S seconds or N cases (whichever first)\n",
                   argv[0]);
      return 2;
    }
  }
  init_sets();
  const pq::RuntimeInfo info = pq::runtime_info();
  std::string sets;
  for (const auto& x : info.supported) sets += (sets.empty() ? "" : ", ") + x;
  std::printf("polyquant_fuzz: polyquant %s; kernel sets compared: %s (each against scalar); threads %d\n",
              info.version.c_str(), sets.c_str(), info.num_threads);
  std::printf("polyquant_fuzz: seed %llu, start %llu, %s\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(start), iterations ? "iteration limit set" : "time limit only");
  std::fflush(stdout);
  Stats st;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  std::uint64_t i = start;
  for (;; ++i) {
    if (iterations && i - start >= iterations) break;
    if (((i - start) & 15) == 0) {
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (elapsed >= seconds) break;
    }
    Source s;
    s.state = case_seed(seed, i);
    g_seed = seed;
    g_case = i;
    try {
      run_case(s, st);
    } catch (...) {
      std::fprintf(stderr, "polyquant_fuzz: unexpected exception in case %llu (seed %llu)\n",
                   static_cast<unsigned long long>(i), static_cast<unsigned long long>(seed));
      throw;
    }
  }
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "polyquant_fuzz: %llu cases (%llu rejected with polyquant::Error), %llu executions, %llu elements compared "
      "in %.1f s: %.0f cases/s, %.0f executions/s\n",
      static_cast<unsigned long long>(st.cases), static_cast<unsigned long long>(st.rejected),
      static_cast<unsigned long long>(st.executions), static_cast<unsigned long long>(st.compared_elements), elapsed,
      static_cast<double>(st.cases) / std::max(elapsed, 1e-9), static_cast<double>(st.executions) / std::max(elapsed, 1e-9));
  std::printf("polyquant_fuzz: per op:");
  for (int k = 0; k < 5; ++k) std::printf(" %s=%llu", kOpNames[k], static_cast<unsigned long long>(st.per_op[k]));
  std::printf("\npolyquant_fuzz: OK (replay one case: --seed %llu --start I --iterations 1)\n",
              static_cast<unsigned long long>(seed));
  return 0;
}
#endif
