// Fuzz harness over polyquant's public C++ API: the linear quantize / dequantize ops, ONNX's
// QuantizeLinear / DequantizeLinear (polyquant/onnx_qdq.h) and Quark's ExtendedQuantizeLinear /
// ExtendedDequantizeLinear (polyquant/quark.h).
//
// Each case draws an op and
//   * a shape: rank 0 to 4 (now and then up to 8), dimensions 0 to 9 with occasional 17, 33 and
//     70, and now and then a tensor large enough to be split over the threads;
//   * a parameter layout: per-tensor (a scale of one element: 0-d, (1,), and for ONNX any rank),
//     per-axis on any axis, as a non-negative or a negative attribute, or blocked (ONNX) with
//     block sizes that divide the axis, leave a ragged last block or exceed it;
//   * dtypes: ONNX Q: x float32/float16/bfloat16/int32, scale float32/float16/bfloat16/e8m0 (and
//     now and then int32), output / zero point any of the 15 quantized types, saturate, precision
//     unset/float32/float16/bfloat16; ONNX DQ: x any of the 16 input types, scale
//     float32/float16/bfloat16 (and now and then e8m0), output_dtype unset/float32/float16/bfloat16;
//     Quark: zero point int8/uint8/int16/uint16/int32/uint32/float16/bfloat16 or absent, both
//     semantics;
//   * values: raw bit patterns (NaN payloads, subnormals, infinities, the largest values), ties
//     constructed against the element's own scale and zero point (x = (k + 1/2) * scale for integer
//     outputs, midpoints of adjacent codes for float8/6/4, bfloat16 and float16 outputs), each
//     also one ulp either side, and valid random parameters (sub-byte types: only valid codes in
//     the low bits; scales mostly positive and finite, now and then zero, negative or not finite);
//   * strides for x, the scale and the zero point (zero, negative, gapped, transposed, odd
//     alignment) and for the output (contiguous at an odd offset, reversed, gapped, transposed,
//     and zero strides where every aliased element gets the same value);
//   * now and then an invalid input: an axis out of range, a scale of the wrong length or rank, a
//     zero point of another shape or dtype, a dtype or attribute the op does not allow, a negative
//     block size, an output of the wrong dtype or shape.
// Then:
//   * the *_spec call; a rejection must be a polyquant::Error, and the op itself must then throw
//     the same Error (kind and message) in every variant below;
//   * the op on the scalar kernel set (the reference) and on every other kernel set the CPU has,
//     each output compared with the reference's byte for byte (the ops specify every bit: NaN
//     payloads and signs included), an error identical on every set;
//   * again on contiguous copies of x, scale and zero point into a contiguous output (every set),
//     with one thread, in place (the output in x's own memory where the element sizes agree) and
//     into a reversed view of x's memory (overlapping: the engine buffers), each compared with the
//     reference;
//   * every output's storage outside the view must keep its fill (no stray writes), a rejected call
//     must write nothing, and sub-byte and float6/float4 outputs must keep their high bits zero.
//
// `polyquant_fuzz_onnx [--seed N] [--seconds S] [--iterations N] [--start I] [--valid-only] [--dump]
// [--no-overlap]`
// replays case I with `--seed N --start I --iterations 1`; --dump prints each case's inputs
// (every element's bits) before running it; --valid-only draws no deliberately invalid inputs;
// --no-overlap leaves out the output overlapping x (reversed over x's memory), to triage other
// defects while that one fails.
// With -DPOLYQUANT_LIBFUZZER, LLVMFuzzerTestOneInput draws the case from libFuzzer's bytes.
#include <polyquant/polyquant.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"

namespace pq = polyquant;
namespace ox = polyquant::onnx;
namespace qk = polyquant::quark;

namespace {

using namespace polyquant::fuzz;
using pq::DType;

// ---- element encodings ------------------------------------------------------------------------

enum class MfKind { kIeee, kFn, kFnuz, kFinite };
struct Mf {
  int exp_bits, man_bits, bias;
  MfKind kind;
  int width() const { return 1 + exp_bits + man_bits; }
};

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2 || t == DType::kFloat8E5M2FNUZ;
}

Mf mf_of(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN: return {4, 3, 7, MfKind::kFn};
    case DType::kFloat8E4M3FNUZ: return {4, 3, 8, MfKind::kFnuz};
    case DType::kFloat8E5M2: return {5, 2, 15, MfKind::kIeee};
    case DType::kFloat8E5M2FNUZ: return {5, 2, 16, MfKind::kFnuz};
    case DType::kFloat6E2M3: return {2, 3, 1, MfKind::kFinite};
    case DType::kFloat6E3M2: return {3, 2, 3, MfKind::kFinite};
    case DType::kFloat4E2M1: return {2, 1, 1, MfKind::kFinite};
    case DType::kBFloat16: return {8, 7, 127, MfKind::kIeee};
    case DType::kFloat16: return {5, 10, 15, MfKind::kIeee};
    default: return {8, 23, 127, MfKind::kIeee};  // float32
  }
}

// The value of a code of a float format (float32/16, bfloat16, float8/6/4).
double mf_value(const Mf& f, std::uint64_t code) {
  const int w = f.width();
  const std::uint64_t sign_bit = std::uint64_t{1} << (w - 1);
  const bool neg = (code & sign_bit) != 0;
  const std::uint64_t mag = code & (sign_bit - 1);
  const std::uint64_t e = mag >> f.man_bits, m = mag & ((std::uint64_t{1} << f.man_bits) - 1);
  const std::uint64_t emax = (std::uint64_t{1} << f.exp_bits) - 1;
  switch (f.kind) {
    case MfKind::kIeee:
      if (e == emax) return m == 0 ? (neg ? -kInf : kInf) : kNaN;
      break;
    case MfKind::kFn:
      if (mag == sign_bit - 1) return kNaN;
      break;
    case MfKind::kFnuz:
      if (code == sign_bit) return kNaN;
      break;
    case MfKind::kFinite: break;
  }
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits)
                          : std::ldexp(static_cast<double>((std::uint64_t{1} << f.man_bits) | m),
                                       static_cast<int>(e) - f.bias - f.man_bits);
  return neg ? -v : v;
}

// The largest finite magnitude code of a format.
std::uint64_t mf_max_code(const Mf& f) {
  const std::uint64_t all = (std::uint64_t{1} << (f.width() - 1)) - 1;
  switch (f.kind) {
    case MfKind::kIeee: return all - (std::uint64_t{1} << f.man_bits);
    case MfKind::kFn: return all - 1;
    default: return all;
  }
}

// Bits (storage width) of each element: sub-byte and float6/float4 types use only the low bits.
int code_bits(DType t) {
  switch (t) {
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kFloat4E2M1: return 4;
    case DType::kInt2:
    case DType::kUInt2: return 2;
    case DType::kFloat6E2M3:
    case DType::kFloat6E3M2: return 6;
    case DType::kBool: return 1;
    default: return static_cast<int>(8 * pq::dtype_size(t));
  }
}

bool is_integer(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kInt64:
    case DType::kUInt64:
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kInt2:
    case DType::kUInt2: return true;
    default: return false;
  }
}
bool is_signed_integer(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 || t == DType::kInt4 ||
         t == DType::kInt2;
}
void int_range(DType t, double& lo, double& hi) {
  const int b = code_bits(t);
  if (b == 64) {  // bounds that convert back to int64 / uint64 without overflow
    lo = is_signed_integer(t) ? -9.2e18 : 0;
    hi = is_signed_integer(t) ? 9.2e18 : 1.8e19;
  } else if (is_signed_integer(t)) {
    lo = -std::ldexp(1.0, b - 1);
    hi = std::ldexp(1.0, b - 1) - 1;
  } else {
    lo = 0;
    hi = std::ldexp(1.0, b) - 1;
  }
}

// The value an element's bits hold (NaN for NaN codes).
double value_of(DType t, std::uint64_t bits) {
  switch (t) {
    case DType::kFloat16: {
      f16 h;
      const auto u = static_cast<std::uint16_t>(bits);
      std::memcpy(&h, &u, 2);
      return static_cast<double>(h);
    }
    case DType::kFloat32: {
      float f;
      const auto u = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case DType::kBFloat16: {
      float f;
      const auto u = static_cast<std::uint32_t>(bits & 0xFFFF) << 16;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::kFloat8E8M0: return (bits & 0xFF) == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(bits & 0xFF) - 127);
    case DType::kBool: return (bits & 0xFF) != 0 ? 1.0 : 0.0;
    default: break;
  }
  if (is_integer(t)) {
    const int b = code_bits(t);
    const std::uint64_t mask = b == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
    const std::uint64_t u = bits & mask;
    if (is_signed_integer(t) && b < 64 && (u >> (b - 1)) != 0) return static_cast<double>(static_cast<std::int64_t>(u | ~mask));
    if (is_signed_integer(t)) return static_cast<double>(static_cast<std::int64_t>(u));
    return static_cast<double>(u);
  }
  return mf_value(mf_of(t), bits & ((std::uint64_t{1} << code_bits(t)) - 1));
}

// Bits of (a value near) v in t: floats round to nearest (float16 / bfloat16 through their own
// rounding), integers round and saturate, e8m0 the nearest power of two.
std::uint64_t bits_of(DType t, double v) {
  switch (t) {
    case DType::kFloat16: {
      const f16 h = static_cast<f16>(v);
      std::uint16_t u;
      std::memcpy(&u, &h, 2);
      return u;
    }
    case DType::kFloat32: {
      const float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case DType::kFloat64: {
      std::uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
    case DType::kBFloat16: {
      const float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      if (std::isnan(f)) return 0x7FC0;
      return ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) & 0xFFFF;
    }
    case DType::kFloat8E8M0: {
      if (!(v > 0) || std::isinf(v)) return 0xFF;
      const int e = std::ilogb(v);
      return static_cast<std::uint64_t>(std::clamp(e, -127, 127) + 127);
    }
    case DType::kBool: return v != 0 ? 1 : 0;
    default: break;
  }
  if (is_integer(t)) {
    double lo, hi;
    int_range(t, lo, hi);
    double r = std::isnan(v) ? 0 : std::nearbyint(v);
    r = std::clamp(r, lo, hi);
    const int b = code_bits(t);
    const std::uint64_t mask = b == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
    const std::uint64_t u =
        is_signed_integer(t) ? static_cast<std::uint64_t>(static_cast<std::int64_t>(r)) : static_cast<std::uint64_t>(r);
    return u & mask;
  }
  // A small float: the nearest finite code (ties to the lower magnitude; enough for parameters).
  const Mf f = mf_of(t);
  const std::uint64_t maxc = mf_max_code(f);
  std::uint64_t best = 0;
  double best_d = kInf;
  for (std::uint64_t c = 0; c <= maxc; ++c) {
    const double d = std::fabs(mf_value(f, c) - std::fabs(v));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (std::signbit(v) && !(f.kind == MfKind::kFnuz && best == 0)) best |= std::uint64_t{1} << (f.width() - 1);
  return best;
}

// Raw bits of a float format, biased to the classes that matter: NaN payloads, infinities,
// subnormals, zeros, the largest values, values near 1.
std::uint64_t float_bits(Source& s, const Mf& f) {
  const int w = f.width();
  const std::uint64_t width_mask = (std::uint64_t{1} << w) - 1;
  const std::uint64_t sign = s.chance(50) ? std::uint64_t{1} << (w - 1) : 0;
  const std::uint64_t man_mask = (std::uint64_t{1} << f.man_bits) - 1;
  const std::uint64_t emax = (std::uint64_t{1} << f.exp_bits) - 1;
  const std::uint64_t man = s.u64() & man_mask;
  switch (s.below(9)) {
    case 0:
    case 1: return s.u64() & width_mask;
    case 2: return sign | (emax << f.man_bits) | man;  // NaN payloads (or the top codes)
    case 3: return sign | (emax << f.man_bits) | (s.chance(50) ? 0 : std::uint64_t{1} << (f.man_bits - 1));  // inf, qNaN
    case 4: return sign | man;                                                                             // subnormal
    case 5: return sign | ((emax - 1) << f.man_bits) | man;                                               // huge
    case 6: return sign | (s.chance(50) ? man_mask : 1);
    case 7: return sign;  // +-0
    default: {
      const auto e = static_cast<std::uint64_t>(
          std::clamp<std::int64_t>(f.bias + static_cast<std::int64_t>(s.below(21)) - 10, 1, static_cast<std::int64_t>(emax) - 1));
      return sign | (e << f.man_bits) | man;
    }
  }
}

// The next representable code away from (up) or towards (down) zero; codes keep their sign.
std::uint64_t nudge(DType t, std::uint64_t bits, bool up) {
  if (t == DType::kInt32) {
    const auto v = static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
    if (up && v == std::numeric_limits<std::int32_t>::max()) return bits;
    if (!up && v == std::numeric_limits<std::int32_t>::min()) return bits;
    return static_cast<std::uint32_t>(up ? v + 1 : v - 1);
  }
  const Mf f = mf_of(t);
  const std::uint64_t sign_bit = std::uint64_t{1} << (f.width() - 1);
  const std::uint64_t mag = bits & (sign_bit - 1);
  if (up && mag + 1 < sign_bit) return bits + 1;
  if (!up && mag > 0) return bits - 1;
  return bits;
}

// ---- tensors ----------------------------------------------------------------------------------

// Address of element `flat` (C order).
unsigned char* element_ptr(Tensor& t, std::int64_t flat) {
  std::int64_t off = 0, rem = flat;
  for (int k = t.shape.rank - 1; k >= 0; --k) {
    off += (rem % t.shape[k]) * t.strides[k];
    rem /= t.shape[k];
  }
  return reinterpret_cast<unsigned char*>(t.storage.data()) + (t.offset + off) * static_cast<std::int64_t>(pq::dtype_size(t.dtype));
}
// Writes element `flat`; only the dtype's valid low bits (sub-byte types, float6/4, bool).
void put(Tensor& t, std::int64_t flat, std::uint64_t bits) {
  const int b = code_bits(t.dtype);
  if (b < 64) bits &= (std::uint64_t{1} << b) - 1;
  std::memcpy(element_ptr(t, flat), &bits, pq::dtype_size(t.dtype));
}
std::uint64_t get(const Tensor& t, std::int64_t flat) { return element_bits(t, flat); }

// Moves the view `k` elements further into a larger allocation (odd alignments).
void shift(Tensor& t, std::int64_t k) {
  if (k <= 0) return;
  const std::size_t pad = static_cast<std::size_t>(k) * pq::dtype_size(t.dtype);
  const std::size_t old = t.storage.size() * 8;
  std::vector<std::uint64_t> bigger((pad + old + 7) / 8);
  auto* dst = reinterpret_cast<unsigned char*>(bigger.data());
  for (std::size_t i = 0; i < pad; ++i) dst[i] = static_cast<unsigned char>(0xA5 ^ i);
  std::memcpy(dst + pad, t.storage.data(), old);
  t.storage = std::move(bigger);
  t.offset += k;
}

// A tensor with drawn strides whose memory (gaps included) holds random bits of its storage
// width, then (possibly) an odd offset; the caller writes the elements.
Tensor input_tensor(Source& s, DType dtype, const pq::Dims& shape) {
  const int bits = code_bits(dtype);
  const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  Tensor t = make_tensor(s, dtype, shape, true, [&](void* buf, std::int64_t i) { store_bits(buf, dtype, i, s.u64() & mask); });
  if (s.chance(25)) shift(t, static_cast<std::int64_t>(1 + s.below(7)));
  return t;
}

// ---- cases ------------------------------------------------------------------------------------

enum class Op { kOnnxQ, kOnnxDQ, kQuarkQ, kQuarkDQ };
constexpr const char* kOpNames[] = {"onnx_quantize", "onnx_dequantize", "quark_quantize", "quark_dequantize"};
enum class Layout { kTensor, kAxis, kBlocked };
constexpr const char* kLayoutNames[] = {"per-tensor", "per-axis", "blocked"};

bool g_valid_only = false;  // --valid-only
bool g_dump = false;        // --dump
bool g_overlap = true;      // --no-overlap: triage of other defects while overlapping outputs fail
bool g_streaming = false;   // --streaming: every dequantize case is a streaming one
// One dequantize case in kStreamingRate has a float32 output over the engine's streaming threshold
// (32 MiB: non-temporal stores, the DQ kernel's aligned head).
constexpr std::uint64_t kStreamingRate = 2000;
std::uint64_t g_elements = 0;  // output elements computed, all executions

constexpr DType kQuantized[] = {DType::kUInt8,         DType::kInt8,           DType::kUInt16,      DType::kInt16,
                                DType::kUInt4,         DType::kInt4,           DType::kUInt2,       DType::kInt2,
                                DType::kFloat8E4M3FN,  DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2,  DType::kFloat8E5M2FNUZ,
                                DType::kFloat4E2M1,    DType::kFloat6E2M3,     DType::kFloat6E3M2};
constexpr DType kDequantInputs[] = {DType::kUInt8,         DType::kInt8,           DType::kUInt16,      DType::kInt16,
                                    DType::kInt32,         DType::kUInt4,          DType::kInt4,        DType::kUInt2,
                                    DType::kInt2,          DType::kFloat8E4M3FN,   DType::kFloat8E4M3FNUZ,
                                    DType::kFloat8E5M2,    DType::kFloat8E5M2FNUZ, DType::kFloat4E2M1,  DType::kFloat6E2M3,
                                    DType::kFloat6E3M2};
constexpr DType kQuarkTypes[] = {DType::kInt8,  DType::kUInt8,  DType::kInt16,   DType::kUInt16,
                                 DType::kInt32, DType::kUInt32, DType::kFloat16, DType::kBFloat16};
constexpr DType kFloatOuts[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
// Every dtype, for invalid draws.
constexpr DType kEveryType[] = {
    DType::kFloat16,      DType::kFloat32,        DType::kFloat64,     DType::kInt8,           DType::kInt16,
    DType::kInt32,        DType::kInt64,          DType::kUInt8,       DType::kUInt16,         DType::kUInt32,
    DType::kUInt64,       DType::kBool,           DType::kBFloat16,    DType::kInt4,           DType::kUInt4,
    DType::kInt2,         DType::kUInt2,          DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2,
    DType::kFloat8E5M2FNUZ, DType::kFloat8E8M0,   DType::kFloat6E2M3,  DType::kFloat6E3M2,     DType::kFloat4E2M1};

struct Case {
  Op op = Op::kOnnxQ;
  Layout layout = Layout::kTensor;
  int axis = 0;                // the normalized axis the parameters were laid out on (kAxis, kBlocked)
  std::int64_t block = 0;      // kBlocked
  std::string invalid;         // the deliberate defect, if any
  Tensor x, scale;
  std::optional<Tensor> zp;
  ox::QuantizeLinearAttrs q;
  ox::DequantizeLinearAttrs dq;
  qk::ExtendedAttrs ext;
  std::optional<DType> out_dtype_override;  // invalid: an output of another dtype
  bool out_shape_wrong = false;             // invalid: an output of another shape
  bool streaming = false;                   // an output over the streaming threshold, every operand contiguous
  std::string out_layout;                   // the drawn output's dtype, shape, strides and offset

  std::string describe() const;
};

std::string opt_dtype(const std::optional<DType>& t) { return t ? pq::dtype_name(*t) : "unset"; }
std::string tensor_str(const char* name, const Tensor& t) {
  return std::string(" ") + name + " " + pq::dtype_name(t.dtype) + t.shape.str() + "/" + t.strides.str() +
         (t.offset ? "@" + std::to_string(t.offset) : "");
}

std::string Case::describe() const {
  std::string d = kOpNames[static_cast<int>(op)];
  d += std::string(" ") + kLayoutNames[static_cast<int>(layout)];
  if (layout != Layout::kTensor) d += " (axis " + std::to_string(axis) + ")";
  d += tensor_str("x", x) + tensor_str("scale", scale);
  d += zp ? tensor_str("zero_point", *zp) : std::string(" zero_point absent");
  switch (op) {
    case Op::kOnnxQ:
      d += " axis=" + std::to_string(q.axis) + " block_size=" + std::to_string(q.block_size) +
           " output_dtype=" + opt_dtype(q.output_dtype) + " saturate=" + std::to_string(q.saturate) +
           " precision=" + opt_dtype(q.precision);
      break;
    case Op::kOnnxDQ:
      d += " axis=" + std::to_string(dq.axis) + " block_size=" + std::to_string(dq.block_size) +
           " output_dtype=" + opt_dtype(dq.output_dtype);
      break;
    default:
      d += " axis=" + std::to_string(ext.axis) +
           (ext.semantics == qk::Semantics::kQuarkCpu ? " semantics=quark_cpu" : " semantics=onnx_spec");
      break;
  }
  if (out_dtype_override) d += std::string(" out_dtype=") + pq::dtype_name(*out_dtype_override);
  if (out_shape_wrong) d += " out_shape=wrong";
  d += out_layout;
  if (!invalid.empty()) d += " invalid=" + invalid;
  return d;
}

// ---- drawing ----------------------------------------------------------------------------------

std::int64_t draw_dim(Source& s) {
  if (s.chance(8)) {
    static const std::int64_t odd[] = {17, 33, 70};
    return s.pick(odd);
  }
  if (s.chance(4)) return 0;
  return static_cast<std::int64_t>(1 + s.below(9));
}

pq::Dims draw_shape(Source& s) {
  if (s.chance(3)) {  // large enough for several threads (the engine's grain is 65,536 elements)
    switch (s.below(4)) {
      case 0: return pq::Dims{static_cast<std::int64_t>(2 + s.below(3)), static_cast<std::int64_t>(40000 + s.below(40000))};
      case 1: return pq::Dims{70, 70, static_cast<std::int64_t>(33 + s.below(8))};
      case 2: return pq::Dims{static_cast<std::int64_t>(131073 + s.below(70000))};
      default: return pq::Dims{static_cast<std::int64_t>(40000 + s.below(30000)), static_cast<std::int64_t>(3 + s.below(3))};
    }
  }
  pq::Dims d;
  if (s.chance(2)) {  // beyond the usual ranks: up to kMaxRank (blocked: no room to split an axis)
    d.rank = static_cast<int>(5 + s.below(pq::kMaxRank - 4));
    for (int i = 0; i < d.rank; ++i) d[i] = static_cast<std::int64_t>(1 + s.below(3));
    return d;
  }
  d.rank = static_cast<int>(s.below(5));
  for (int i = 0; i < d.rank; ++i) d[i] = draw_dim(s);
  while (checked_numel(d) > (1 << 16)) d[static_cast<int>(s.below(static_cast<std::uint64_t>(d.rank)))] = static_cast<std::int64_t>(1 + s.below(9));
  return d;
}

// A scale value: mostly positive and finite (powers of two, short mantissas that make exact ties,
// random), now and then zero, negative, tiny, huge or not finite.
double draw_scale_value(Source& s) {
  if (s.chance(4)) {
    static const double specials[] = {0.0, -0.0, -0.5, -3.0, kNaN, kInf, -kInf, 1e-45, 1e-40, 6e-8, 3e38, 1e-30, 65504, 1e10};
    return s.pick(specials);
  }
  static const double mantissas[] = {1, 1, 1.5, 1.25, 1.75, 1.125, 1.0 / 3.0, 0.1 * 8, 1.9921875};
  const int e = static_cast<int>(s.below(s.chance(80) ? 17 : 61)) - (s.chance(80) ? 10 : 30);
  double m = s.chance(70) ? s.pick(mantissas) : 1.0 + static_cast<double>(s.below(1 << 23)) / (1 << 23);
  return std::ldexp(m, e);
}

std::uint64_t draw_scale_bits(Source& s, DType t) {
  if (t == DType::kFloat8E8M0) {
    if (s.chance(3)) return 0xFF;  // NaN
    if (s.chance(10)) return s.below(255);
    return static_cast<std::uint64_t>(127 + static_cast<int>(s.below(25)) - 12);
  }
  if (t == DType::kInt32) {
    static const double ints[] = {1, 2, 3, 4, 7, 10, 100, 1000, 0, -1, -2, 65536, 2147483647};
    return bits_of(t, s.pick(ints));
  }
  if (s.chance(3)) return float_bits(s, mf_of(t));
  return bits_of(t, draw_scale_value(s));
}

// A zero point code of dtype t (valid codes only). `dequant_float8`: DequantizeLinear's float8
// zero points must be zero (|v| < 1): mostly zeros, now and then a subnormal or any code.
std::uint64_t draw_zero_point_bits(Source& s, DType t, bool dequant_float8) {
  const int b = code_bits(t);
  const std::uint64_t mask = b >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
  if (is_integer(t)) {
    double lo, hi;
    int_range(t, lo, hi);
    switch (s.below(6)) {
      case 0:
      case 1: return 0;
      case 2: return bits_of(t, s.chance(50) ? lo : hi);
      case 3: return bits_of(t, s.chance(50) ? lo + 1 : hi - 1);
      case 4: return bits_of(t, static_cast<double>(static_cast<std::int64_t>(s.below(21)) - 10));
      default: return s.u64() & mask;
    }
  }
  if (t == DType::kFloat16 || t == DType::kBFloat16) {
    if (s.chance(40)) return 0;
    if (s.chance(10)) return float_bits(s, mf_of(t));
    static const double zps[] = {1, -1, 2, 0.5, -3.25, 128, 100.5, -0.0, 1e-3};
    return bits_of(t, s.pick(zps));
  }
  if (dequant_float8 && is_float8(t)) {
    if (s.chance(80)) return s.chance(80) ? 0 : 0x80;  // +0 and -0 (NaN for fnuz)
    if (s.chance(60)) return s.below(4) | (s.chance(50) ? 0x80 : 0);  // subnormals
    return s.u64() & mask;
  }
  if (s.chance(50)) return 0;
  return s.u64() & mask;
}

// Flat index of x's multi-index.
void unflatten(const pq::Dims& shape, std::int64_t flat, std::int64_t* idx) {
  for (int k = shape.rank - 1; k >= 0; --k) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
}

// The value of parameter p that x's element idx meets under the case's layout, or `fallback`
// when p's shape does not fit (an invalid case).
double param_at(const Case& c, const Tensor& p, const std::int64_t* idx, double fallback) {
  const std::int64_t n = checked_numel(p.shape);
  if (n == 1) return value_of(p.dtype, get(p, 0));
  const pq::Dims& xs = c.x.shape;
  if (c.layout == Layout::kAxis && p.shape.rank == 1 && xs.rank > c.axis && p.shape[0] == xs[c.axis]) {
    return value_of(p.dtype, get(p, idx[c.axis]));
  }
  if (c.layout == Layout::kBlocked && p.shape.rank == xs.rank && c.block > 0) {
    std::int64_t flat = 0;
    for (int k = 0; k < xs.rank; ++k) {
      const std::int64_t i = k == c.axis ? idx[k] / c.block : idx[k];
      if (i >= p.shape[k]) return fallback;
      flat = flat * p.shape[k] + i;
    }
    return value_of(p.dtype, get(p, flat));
  }
  return fallback;
}

// The quotient x / scale (plus zero point, where the target adds it) of a tie of the output type:
// the midpoint between two adjacent results, or a result itself, or a value past the range.
double draw_tie_quotient(Source& s, DType target, double zp) {
  if (is_integer(target)) {
    double lo, hi;
    int_range(target, lo, hi);
    if (s.chance(15)) {
      static const double far[] = {2147483647.5, -2147483648.5, 2147483648.0, 9.2233720368547758e18, -9.2233720368547758e18,
                                   16777216.5,   8388608.5,     -8388609.5,   4294967295.5,         1e30};
      return s.pick(far);
    }
    const double near = static_cast<double>(s.below(7)) - 3;
    double k;
    switch (s.below(4)) {
      case 0: k = lo - zp + near; break;  // the clamp's ends
      case 1: k = hi - zp + near; break;
      case 2: k = static_cast<double>(static_cast<std::int64_t>(s.below(21)) - 10); break;
      default: {  // anywhere in the range
        const double a = std::max(lo - zp, -1048576.0), b = std::max(a, std::min(hi - zp, 1048576.0));
        k = std::floor(a + static_cast<double>(s.below(static_cast<std::uint64_t>(b - a) + 1)));
        break;
      }
    }
    static const double fracs[] = {0.5, 0.5, 0.5, 0.0, -0.5, 0.25, 0.75};
    return k + s.pick(fracs);
  }
  // Float outputs: the midpoint of two adjacent codes (the largest with its would-be successor:
  // the overflow threshold), or a code itself.
  const Mf f = mf_of(target);
  const std::uint64_t maxc = mf_max_code(f);
  const std::uint64_t c = s.chance(15) ? maxc : s.below(maxc + 1);
  const double v = mf_value(f, c);
  double mid = v;
  if (!s.chance(15)) {
    const double next = c < maxc ? mf_value(f, c + 1) : v + (v - mf_value(f, c - 1));
    mid = (v + next) / 2;
  }
  if (s.chance(50)) mid = -mid;
  return mid - zp;
}

// The x element of ONNX / Quark Q for the element's scale and zero point.
std::uint64_t draw_q_x(Source& s, const Case& c, DType out, const std::int64_t* idx, int mode) {
  const DType t = c.x.dtype;
  const int pick = mode == 0 ? static_cast<int>(s.below(3)) : mode - 1;  // 0 bits, 1 tie, 2 value
  if (pick == 0) {
    if (t == DType::kInt32) return s.chance(50) ? s.u64() & 0xFFFFFFFFu : bits_of(t, static_cast<double>(static_cast<std::int64_t>(s.below(601)) - 300));
    return float_bits(s, mf_of(t));
  }
  const double scale = param_at(c, c.scale, idx, 1.0);
  if (pick == 1) {
    // The zero point the quotient meets: integers and float6/4 add it, float8 ignores it, Quark's
    // float16 (quark_cpu) ignores scale and zero point.
    const bool f16_clamp = c.op == Op::kQuarkQ && out == DType::kFloat16 && c.ext.semantics == qk::Semantics::kQuarkCpu;
    double zp = c.zp ? param_at(c, *c.zp, idx, 0.0) : 0.0;
    if (is_float8(out) || f16_clamp || !std::isfinite(zp)) zp = 0;
    double q = draw_tie_quotient(s, out, zp);
    double xv = f16_clamp ? q : q * (std::isfinite(scale) && scale != 0 ? scale : 1.0);
    std::uint64_t b = bits_of(t, xv);
    if (s.chance(40)) b = nudge(t, b, s.chance(50));
    return b;
  }
  return bits_of(t, data_value(s) * (std::isfinite(scale) && scale != 0 && s.chance(70) ? scale : 1.0));
}

// A DQ x element of dtype t: any valid code, biased to the extremes.
std::uint64_t draw_dq_x(Source& s, DType t) {
  const int b = code_bits(t);
  const std::uint64_t mask = b >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << b) - 1;
  if (is_integer(t)) {
    double lo, hi;
    int_range(t, lo, hi);
    switch (s.below(5)) {
      case 0: return bits_of(t, s.chance(50) ? lo : hi);
      case 1: return bits_of(t, static_cast<double>(static_cast<std::int64_t>(s.below(9)) - 4));
      default: return s.u64() & mask;
    }
  }
  if (t == DType::kFloat16 || t == DType::kBFloat16) return float_bits(s, mf_of(t));
  return s.u64() & mask;
}

// Shape of a per-tensor parameter.
pq::Dims one_element_shape(Source& s, bool any_rank) {
  pq::Dims d;
  d.rank = static_cast<int>(any_rank ? s.below(4) : s.below(2));
  for (int i = 0; i < d.rank; ++i) d[i] = 1;
  return d;
}

Case draw_case(Source& s) {
  Case c;
  c.op = static_cast<Op>(s.below(4));
  const bool onnx = c.op == Op::kOnnxQ || c.op == Op::kOnnxDQ;
  const bool quant = c.op == Op::kOnnxQ || c.op == Op::kQuarkQ;
  const bool dequant = c.op == Op::kOnnxDQ || c.op == Op::kQuarkDQ;
  const bool streaming = dequant && (g_streaming || s.below(kStreamingRate) == 0);
  c.streaming = streaming;
  const pq::Dims xs = !streaming ? draw_shape(s)
                      : s.chance(50) ? pq::Dims{static_cast<std::int64_t>((1 << 23) + s.below(4096))}
                                     : pq::Dims{2, static_cast<std::int64_t>((1 << 22) + s.below(2048))};
  const int rank = xs.rank;
  static const DType kVectorDequantInputs[] = {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kUInt16};

  // Dtypes and attributes.
  DType x_dtype, scale_dtype;
  std::optional<DType> zp_dtype;
  DType out = DType::kUInt8;  // the quantized type (Q: output; DQ: x)
  switch (c.op) {
    case Op::kOnnxQ: {
      static const DType xts[] = {DType::kFloat32, DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32};
      static const DType sts[] = {DType::kFloat32, DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E8M0};
      x_dtype = s.pick(xts);
      scale_dtype = s.chance(4) ? DType::kInt32 : s.pick(sts);
      out = s.pick(kQuantized);
      if (s.chance(70)) {
        zp_dtype = out;
        if (s.chance(30)) c.q.output_dtype = out;
      } else if (s.chance(75)) {
        c.q.output_dtype = out;
      } else {
        out = DType::kUInt8;  // the default
      }
      c.q.saturate = s.chance(50);
      static const std::optional<DType> precisions[] = {std::nullopt, std::nullopt, DType::kFloat32, DType::kFloat16,
                                                        DType::kBFloat16};
      c.q.precision = s.pick(precisions);
      break;
    }
    case Op::kOnnxDQ: {
      static const DType sts[] = {DType::kFloat32, DType::kFloat32, DType::kFloat16, DType::kBFloat16};
      out = streaming ? s.pick(kVectorDequantInputs) : s.pick(kDequantInputs);
      x_dtype = out;
      scale_dtype = s.chance(4) ? DType::kFloat8E8M0 : s.pick(sts);
      if (s.chance(60)) zp_dtype = out;
      static const std::optional<DType> outs[] = {std::nullopt, std::nullopt, DType::kFloat32, DType::kFloat16, DType::kBFloat16};
      c.dq.output_dtype = s.pick(outs);
      if (streaming) {  // a float32 output
        scale_dtype = DType::kFloat32;
        if (c.dq.output_dtype) c.dq.output_dtype = DType::kFloat32;
      }
      break;
    }
    default: {
      x_dtype = DType::kFloat32;
      scale_dtype = DType::kFloat32;
      if (s.chance(80)) {
        out = streaming ? s.pick(kVectorDequantInputs) : s.pick(kQuarkTypes);
        zp_dtype = out;
      }
      if (c.op == Op::kQuarkDQ) x_dtype = out;
      c.ext.semantics = s.chance(50) ? qk::Semantics::kQuarkCpu : qk::Semantics::kOnnxSpec;
      break;
    }
  }

  // Layout.
  pq::Dims ss;
  if (rank == 0) {
    c.layout = Layout::kTensor;
  } else {
    const int r = static_cast<int>(s.below(100));
    c.layout = r < 30 ? Layout::kTensor : (!onnx || r < 65) ? Layout::kAxis : Layout::kBlocked;
  }
  c.axis = rank == 0 ? 0 : static_cast<int>(s.below(static_cast<std::uint64_t>(rank)));
  std::int64_t axis_attr = (rank > 0 && s.chance(40)) ? c.axis - rank : c.axis;
  std::int64_t block = 0;
  switch (c.layout) {
    case Layout::kTensor:
      ss = one_element_shape(s, onnx);
      if (s.chance(30)) axis_attr = static_cast<std::int64_t>(s.below(11)) - 5;  // ignored for per-tensor
      if (onnx && s.chance(10)) block = static_cast<std::int64_t>(1 + s.below(4));  // a one-element scale stays per-tensor
      break;
    case Layout::kAxis:
      ss = pq::Dims{xs[c.axis]};
      break;
    case Layout::kBlocked: {
      const std::int64_t d = xs[c.axis];
      static const std::int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 100};
      block = s.pick(sizes);
      if (d > 0 && s.chance(40)) {  // a divisor of the axis (no ragged block)
        std::vector<std::int64_t> divs;
        for (std::int64_t b = 1; b <= d; ++b) {
          if (d % b == 0) divs.push_back(b);
        }
        block = divs[s.below(divs.size())];
      }
      c.block = block;
      ss = xs;
      ss[c.axis] = d / block + (d % block != 0 ? 1 : 0);
      break;
    }
  }
  pq::Dims zs = ss;
  if (zp_dtype && c.layout == Layout::kTensor) zs = one_element_shape(s, onnx);

  // Deliberate defects.
  if (!g_valid_only && s.chance(8)) {
    switch (s.below(11)) {
      case 0:
        if (c.layout == Layout::kTensor) break;
        axis_attr = s.chance(50) ? rank + static_cast<std::int64_t>(s.below(3)) : -rank - 1 - static_cast<std::int64_t>(s.below(3));
        c.invalid = "axis out of range";
        break;
      case 1:
        if (ss.rank == 0) break;
        ss[static_cast<int>(s.below(static_cast<std::uint64_t>(ss.rank)))] += 1 + static_cast<std::int64_t>(s.below(2));
        if (!s.chance(30)) zs = ss;
        c.invalid = "scale shape";
        break;
      case 2:
        if (!zp_dtype) break;
        if (zs.rank > 0 && s.chance(50)) {
          zs[0] += 1;
        } else {
          zs.rank = std::min(zs.rank + 1, pq::kMaxRank);
          zs[zs.rank - 1] = 2;
        }
        c.invalid = "zero point shape";
        break;
      case 3: {
        if (!zp_dtype) break;
        zp_dtype = s.pick(kEveryType);
        c.invalid = "zero point dtype";
        break;
      }
      case 4:
        x_dtype = s.pick(kEveryType);
        c.invalid = "x dtype";
        break;
      case 5:
        scale_dtype = s.pick(kEveryType);
        c.invalid = "scale dtype";
        break;
      case 6:
        if (!onnx) break;
        block = -1 - static_cast<std::int64_t>(s.below(3));
        c.invalid = "negative block_size";
        break;
      case 7:
        if (c.op == Op::kOnnxQ) {
          if (s.chance(50)) c.q.precision = s.pick(kEveryType);
          else c.q.output_dtype = s.pick(kEveryType);
          c.invalid = "attribute dtype";
        } else if (c.op == Op::kOnnxDQ) {
          c.dq.output_dtype = s.pick(kEveryType);
          c.invalid = "attribute dtype";
        }
        break;
      case 8:
        if (c.layout == Layout::kTensor || rank == 0) break;
        ss = s.chance(50) ? xs : pq::Dims{xs[c.axis], 1};  // a rank the layout does not take
        zs = ss;
        c.invalid = "scale rank";
        break;
      case 9:
        c.out_dtype_override = s.pick(kEveryType);
        c.invalid = "output dtype";
        break;
      default:
        c.out_shape_wrong = true;
        c.invalid = "output shape";
        break;
    }
  }
  switch (c.op) {
    case Op::kOnnxQ:
      c.q.axis = axis_attr;
      c.q.block_size = block;
      break;
    case Op::kOnnxDQ:
      c.dq.axis = axis_attr;
      c.dq.block_size = block;
      break;
    default: c.ext.axis = axis_attr; break;
  }

  // Parameters first (x's ties need them), then x.
  // A contiguous tensor at an odd offset (streaming cases: every operand read in place).
  auto contiguous = [&](DType t, const pq::Dims& shape) {
    Tensor r = output_for(pq::TensorSpec{t, shape}, false);
    shift(r, static_cast<std::int64_t>(s.below(8)));
    return r;
  };
  c.scale = streaming ? contiguous(scale_dtype, ss) : input_tensor(s, scale_dtype, ss);
  {
    const bool per_tensor_value = s.chance(30);
    const std::uint64_t v0 = draw_scale_bits(s, scale_dtype);
    for (std::int64_t i = 0; i < checked_numel(ss); ++i) put(c.scale, i, per_tensor_value ? v0 : draw_scale_bits(s, scale_dtype));
  }
  if (zp_dtype) {
    c.zp = streaming ? contiguous(*zp_dtype, zs) : input_tensor(s, *zp_dtype, zs);
    const bool dq8 = c.op == Op::kOnnxDQ;
    for (std::int64_t i = 0; i < checked_numel(zs); ++i) put(*c.zp, i, draw_zero_point_bits(s, *zp_dtype, dq8));
  }
  c.x = streaming ? contiguous(x_dtype, xs) : input_tensor(s, x_dtype, xs);
  const std::int64_t n = checked_numel(xs);
  const int mode = static_cast<int>(s.below(5));  // 0: mixed; 1: bits; 2: ties; 3, 4: values
  std::int64_t idx[pq::kMaxRank] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    if (quant && (x_dtype == DType::kFloat32 || x_dtype == DType::kFloat16 || x_dtype == DType::kBFloat16 ||
                  x_dtype == DType::kInt32)) {
      unflatten(xs, i, idx);
      put(c.x, i, draw_q_x(s, c, out, idx, mode >= 3 ? 3 : mode));
    } else {
      put(c.x, i, draw_dq_x(s, x_dtype));
    }
  }
  return c;
}

// ---- running ----------------------------------------------------------------------------------

// The output spec, or the dtype and shape an output gets when the spec is rejected.
pq::TensorSpec output_spec(const Case& c, const std::optional<pq::TensorSpec>& spec) {
  pq::TensorSpec o;
  if (spec) {
    o = *spec;
  } else {
    o.shape = c.x.shape;
    switch (c.op) {
      case Op::kOnnxQ: o.dtype = c.zp ? c.zp->dtype : c.q.output_dtype.value_or(DType::kUInt8); break;
      case Op::kOnnxDQ: o.dtype = c.dq.output_dtype.value_or(c.scale.dtype); break;
      case Op::kQuarkQ: o.dtype = c.zp ? c.zp->dtype : DType::kUInt8; break;
      case Op::kQuarkDQ: o.dtype = DType::kFloat32; break;
    }
  }
  if (c.out_dtype_override) o.dtype = *c.out_dtype_override;
  if (c.out_shape_wrong) {
    if (o.shape.rank > 0 && o.shape[0] > 0) {
      o.shape[0] -= 1;
    } else if (o.shape.rank < pq::kMaxRank) {
      o.shape.rank += 1;
      o.shape[o.shape.rank - 1] = 2;
    }
  }
  return o;
}

pq::TensorSpec spec_of(const Case& c, const pq::TensorView& x, const pq::TensorView& scale, const pq::TensorView* zp) {
  switch (c.op) {
    case Op::kOnnxQ: return ox::quantize_linear_spec(x, scale, zp, c.q);
    case Op::kOnnxDQ: return ox::dequantize_linear_spec(x, scale, zp, c.dq);
    case Op::kQuarkQ: return qk::extended_quantize_linear_spec(x, scale, zp, c.ext);
    case Op::kQuarkDQ: return qk::extended_dequantize_linear_spec(x, scale, zp, c.ext);
  }
  std::abort();
}

void run_op(const Case& c, const pq::TensorView& x, const pq::TensorView& scale, const pq::TensorView* zp,
            const pq::MutableTensorView& out) {
  switch (c.op) {
    case Op::kOnnxQ: return ox::quantize_linear(x, scale, zp, c.q, out);
    case Op::kOnnxDQ: return ox::dequantize_linear(x, scale, zp, c.dq, out);
    case Op::kQuarkQ: return qk::extended_quantize_linear(x, scale, zp, c.ext, out);
    case Op::kQuarkDQ: return qk::extended_dequantize_linear(x, scale, zp, c.ext, out);
  }
}

constexpr unsigned char kFill = 0x5A;

// Whether parameter p has one value along x's dimension d (so that x repeating along d gives
// outputs repeating along d).
bool constant_along(const Case& c, const Tensor& p, int d) {
  if (checked_numel(p.shape) == 1) return true;
  if (c.layout == Layout::kAxis) return d != c.axis || p.shape.rank != 1 || p.strides[0] == 0;
  if (c.layout == Layout::kBlocked && p.shape.rank == c.x.shape.rank) return p.shape[d] == 1 || p.strides[d] == 0;
  return false;
}

// The output of the case: contiguous (at an odd offset now and then), reversed, gapped /
// negative / transposed, or with zero strides on dimensions along which every operand repeats
// (so that every element written to one address has the same value). Filled with kFill.
Tensor draw_output(Source& s, const pq::TensorSpec& spec, const Case& c) {
  Tensor o;
  const int kind = static_cast<int>(s.below(c.streaming ? 5 : 10));
  if (kind <= 4) {
    o = output_for(spec, false);
    if (kind >= 2) shift(o, static_cast<std::int64_t>(1 + s.below(15)));
  } else if (kind == 5) {
    o = output_for(spec, true);
  } else {
    o = make_tensor(s, spec.dtype, spec.shape, false, [](void*, std::int64_t) {});
    if (kind == 9 && c.x.shape == spec.shape) {
      for (int d = 0; d < spec.shape.rank; ++d) {
        const bool repeats = c.x.strides[d] == 0 && constant_along(c, c.scale, d) && (!c.zp || constant_along(c, *c.zp, d));
        if (spec.shape[d] > 1 && repeats && s.chance(70)) o.strides[d] = 0;
      }
    }
  }
  std::memset(o.storage.data(), kFill, o.storage.size() * 8);
  return o;
}

// A fresh copy of an output layout (its storage re-filled).
Tensor fresh(const Tensor& layout) {
  Tensor o = layout;
  std::memset(o.storage.data(), kFill, o.storage.size() * 8);
  return o;
}

struct Outcome {
  bool ok = true;
  pq::ErrorKind kind = pq::ErrorKind::kValue;
  std::string error;
  std::string str() const {
    if (ok) return "success";
    const char* k = kind == pq::ErrorKind::kValue ? "kValue" : kind == pq::ErrorKind::kType ? "kType" : "kOverflow";
    return std::string("Error(") + k + ", '" + error + "')";
  }
  bool operator==(const Outcome& o) const { return ok == o.ok && (ok || (kind == o.kind && error == o.error)); }
};

struct Inputs {
  pq::TensorView x, scale, zp;
  bool has_zp = false;
};

Inputs views(Case& c) {
  Inputs in;
  in.x = c.x.view();
  in.scale = c.scale.view();
  if (c.zp) {
    in.zp = c.zp->view();
    in.has_zp = true;
  }
  return in;
}

Outcome execute(const Case& c, const Inputs& in, const pq::MutableTensorView& out, const std::string& where, Stats& st) {
  Outcome o;
  try {
    run_op(c, in.x, in.scale, in.has_zp ? &in.zp : nullptr, out);
  } catch (const pq::Error& e) {
    o.ok = false;
    o.kind = e.kind();
    o.error = e.what();
  } catch (const std::exception& e) {
    fail(c.describe(), where + " threw a non-polyquant exception: " + e.what());
  }
  ++st.executions;
  if (o.ok) g_elements += static_cast<std::uint64_t>(checked_numel(out.shape));
  return o;
}

// Checks one variant against the reference: the same outcome, the same bits, nothing written
// outside the view (nothing at all when rejected).
void check_variant(const Case& c, const Outcome& got, const Tensor& out, const Outcome& want, const Tensor& ref,
                   const std::string& what, Stats& st) {
  if (!(got == want)) fail(c.describe(), what + ": " + got.str() + " differs from the reference's " + want.str());
  check_untouched(c.describe(), out, kFill, !got.ok, what);
  if (got.ok) compare_bits(c.describe(), out, ref, what, st);
}

void dump_tensor(const char* name, const Tensor& t) {
  std::printf("  %s: %s%s strides %s offset %lld\n   ", name, pq::dtype_name(t.dtype), t.shape.str().c_str(),
              t.strides.str().c_str(), static_cast<long long>(t.offset));
  const std::int64_t n = std::min<std::int64_t>(checked_numel(t.shape), 4096);
  const int digits = static_cast<int>(2 * pq::dtype_size(t.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    std::printf(" %0*llx", digits, static_cast<unsigned long long>(get(t, i)));
    if (i % 16 == 15) std::printf("\n   ");
  }
  if (checked_numel(t.shape) > n) std::printf(" ...");
  std::printf("\n");
}

void run_case(Source& s, Stats& st) {
  Case c = draw_case(s);
  ++st.cases;
  ++st.per_op[static_cast<std::size_t>(c.op)];
  Inputs in = views(c);
  std::optional<pq::TensorSpec> spec;
  Outcome spec_outcome;
  try {
    spec = spec_of(c, in.x, in.scale, in.has_zp ? &in.zp : nullptr);
  } catch (const pq::Error& e) {
    spec_outcome = {false, e.kind(), e.what()};
  } catch (const std::exception& e) {
    fail(c.describe(), std::string("the spec threw a non-polyquant exception: ") + e.what());
  }
  const pq::TensorSpec ospec = output_spec(c, spec);
  const Tensor layout = draw_output(s, ospec, c);
  c.out_layout = tensor_str("out", layout);
  if (g_dump) {
    std::printf("case %llu: %s\n", static_cast<unsigned long long>(g_case), c.describe().c_str());
    dump_tensor("x", c.x);
    dump_tensor("scale", c.scale);
    if (c.zp) dump_tensor("zero_point", *c.zp);
    std::fflush(stdout);
  }
  const std::int64_t n = checked_numel(ospec.shape);

  // The reference: the scalar kernel set, the drawn layouts.
  select_set(g_sets.front());
  Tensor ref = fresh(layout);
  const Outcome want = execute(c, in, ref.mutable_view(), "the scalar set", st);
  if (!spec_outcome.ok && !(want == spec_outcome)) {
    fail(c.describe(), "the spec's " + spec_outcome.str() + " differs from the op's " + want.str());
  }
  check_untouched(c.describe(), ref, kFill, !want.ok, "the scalar set");
  if (want.ok) {
    const int bits = code_bits(ref.dtype);
    if (bits < 8) {  // sub-byte and float6/float4 elements keep their high bits zero
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint64_t b = get(ref, i);
        if ((b >> bits) != 0) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "element %lld of the %s output has high bits set: 0x%02llx",
                        static_cast<long long>(i), pq::dtype_name(ref.dtype), static_cast<unsigned long long>(b));
          fail(c.describe(), buf);
        }
      }
    }
  } else {
    ++st.rejected;
  }

  // Every other kernel set, the same layouts.
  for (std::size_t k = 1; k < g_sets.size(); ++k) {
    select_set(g_sets[k]);
    Tensor o = fresh(layout);
    const Outcome got = execute(c, in, o.mutable_view(), "kernel set " + g_sets[k], st);
    check_variant(c, got, o, want, ref, "kernel set " + g_sets[k] + " vs scalar", st);
  }

  // Contiguous copies into a contiguous output, on every set.
  const bool huge = n > (1 << 20);
  if (!huge && s.chance(50)) {
    Tensor xc = contiguous_copy(c.x), sc = contiguous_copy(c.scale);
    std::optional<Tensor> zc;
    if (c.zp) zc = contiguous_copy(*c.zp);
    Inputs ci{xc.view(), sc.view(), zc ? zc->view() : pq::TensorView(), zc.has_value()};
    const Tensor plain = output_for(ospec, false);
    for (const std::string& set : g_sets) {
      select_set(set);
      Tensor o = fresh(plain);
      const Outcome got = execute(c, ci, o.mutable_view(), "contiguous copies on " + set, st);
      check_variant(c, got, o, want, ref, "contiguous copies on kernel set " + set + " vs the drawn layouts on scalar", st);
    }
  }
  select_set(g_sets.back());

  // One thread, the best set.
  if (n >= (std::int64_t{1} << 16) || s.chance(10)) {
    pq::set_num_threads(1);
    Tensor o = fresh(layout);
    const Outcome got = execute(c, in, o.mutable_view(), "one thread", st);
    pq::set_num_threads(256);  // back to the pool's size
    check_variant(c, got, o, want, ref, "one thread on kernel set " + g_sets.back() + " vs scalar", st);
  }

  // The output in x's own memory: in place (same layout) and reversed (overlapping: buffered).
  // Only where x's elements are distinct (no zero strides) and as wide as the output's.
  bool distinct = true;
  for (int d = 0; d < c.x.shape.rank; ++d) distinct = distinct && (c.x.shape[d] <= 1 || c.x.strides[d] != 0);
  if (want.ok && !huge && c.x.shape == ospec.shape && pq::dtype_size(c.x.dtype) == pq::dtype_size(ospec.dtype) && s.chance(40)) {
    const bool reversed = s.chance(40) && g_overlap;
    Tensor buf = distinct && s.chance(50) ? c.x : contiguous_copy(c.x);  // the drawn layout or a plain one
    Inputs ai = in;
    ai.x = buf.view();
    pq::MutableTensorView ov(buf.data(), ospec.dtype, buf.shape, buf.strides);
    if (reversed) {
      // Reverse every axis of the output view over the same elements: out[i] is x[n - 1 - i].
      std::int64_t off = 0;
      for (int d = 0; d < ov.shape.rank; ++d) {
        if (ov.shape[d] > 1) off += (ov.shape[d] - 1) * ov.strides[d];
        ov.strides[d] = -ov.strides[d];
      }
      ov = pq::MutableTensorView(static_cast<unsigned char*>(buf.data()) + off * static_cast<std::int64_t>(pq::dtype_size(ospec.dtype)),
                                 ospec.dtype, ov.shape, ov.strides);
    }
    const std::string what = std::string(reversed ? "reversed over x's memory" : "in place") + " on kernel set " + g_sets.back();
    const Outcome got = execute(c, ai, ov, what, st);
    if (!(got == want)) fail(c.describe(), what + ": " + got.str() + " differs from the reference's " + want.str());
    Tensor view_of_out = buf;
    view_of_out.dtype = ospec.dtype;
    view_of_out.strides = ov.strides;
    view_of_out.offset = (static_cast<unsigned char*>(ov.data) - reinterpret_cast<unsigned char*>(buf.storage.data())) /
                         static_cast<std::int64_t>(pq::dtype_size(ospec.dtype));
    compare_bits(c.describe(), view_of_out, ref, what + " vs scalar", st);
  }
}

// The deterministic driver (or libFuzzer) over run_case.
Driver make_driver() {
  Driver d;
  d.name = "polyquant_fuzz_onnx";
  d.op_names.assign(std::begin(kOpNames), std::end(kOpNames));
  d.run_case = run_case;
  d.extra_flag = [](const std::string& flag) {
    if (flag == "--valid-only") {
      g_valid_only = true;
      return true;
    }
    if (flag == "--dump") {
      g_dump = true;
      return true;
    }
    if (flag == "--no-overlap") {
      g_overlap = false;
      return true;
    }
    if (flag == "--streaming") {
      g_streaming = true;
      return true;
    }
    return false;
  };
  d.extra_usage = " [--valid-only] [--dump] [--no-overlap] [--streaming]";
  // The Q/DQ harness also reports its throughput in output elements.
  d.after_run = [](double seconds) {
    std::printf("polyquant_fuzz_onnx: %llu output elements computed (all executions): %.0f elements/s\n",
                static_cast<unsigned long long>(g_elements), static_cast<double>(g_elements) / std::max(seconds, 1e-9));
  };
  return d;
}

}  // namespace

POLYQUANT_FUZZ_ENTRY_POINT(make_driver)
