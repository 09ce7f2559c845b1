// numpy's semantics for the families whose reference is numpy code (QONNX) or follows numpy's
// rules (QKeras): dtype promotion (NEP 50, weak Python scalars), integer arithmetic that wraps at
// the dtype's width, derived operands, and the validation helpers that turn public TensorViews
// into checked kernel calls.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <array>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <string>
#include <tuple>
#include <vector>

#include "core/elementwise.h"
#include "core/fused.h"
#include "core/scalar_math.h"
#include "kernels/registry.h"
#include "polyquant/error.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

// Throws TypeError unless `v` holds a floating dtype (the data tensor of every op).
void require_floating(const TensorView& v, const char* name);

// Throws ValueError unless `v` has exactly one element; returns it as a double. `why` completes
// the message ("the reference compares it with 1").
double single_value(const TensorView& v, const char* name, const char* why);

// Throws ValueError unless every element of `v` is finite.
void require_finite(const TensorView& v, const char* name);

// True when `v` is of an integer dtype, or a contiguous float view whose elements are all finite
// (scanned by the library's threads, one vectorized exponent test per element); false otherwise
// (then walk it with for_each_param, which finds the element).
bool all_finite_fast(const TensorView& v);

// Throws unless `out` has exactly the spec's shape and dtype.
void require_output(const MutableTensorView& out, const TensorSpec& spec, const char* op);

WorkType work_type_of(DType float_dtype);

// The float dtype numpy computes in when integers meet a true division or a Python float literal
// (`x / s`, `2.0 ** b`, `1.0 - bias`): itself if floating, float64 for integers and bool.
DType float_dtype_for(DType t);

// Rounds `v` to the nearest value of `t` (numpy astype) and returns it as a double.
double round_to(DType t, double v);

// An operand of the reference's arithmetic for numpy 2's promotion: an array's dtype, or a weak
// Python scalar (TensorView::weak; NEP 50), whose kind (bool < integer < float) counts and not its
// size. A result computed from arrays is strong; one from Python scalars alone stays weak (Python
// arithmetic: int with float is float).
struct Promoted {
  DType dtype = DType::kFloat32;
  bool weak = false;
};
inline Promoted promoted(const TensorView& v) { return {v.dtype, v.weak}; }
inline Promoted strong(DType t) { return {t, false}; }
inline constexpr Promoted kPythonFloat{DType::kFloat64, true};  // a literal such as 1.0 or 2.0

// numpy's dtype for `a op b`: two arrays promote_types; a weak scalar against an array takes the
// array's dtype unless its kind is higher (a Python float against integers or bool: float64; a
// Python int against bool: int64); two weak scalars give a weak scalar of the higher kind.
Promoted promote(Promoted a, Promoted b);

// Evaluates f.template operator()<T>() with T the C++ type that performs arithmetic of float
// dtype `t` exactly as numpy does (Half, float or double).
template <class F>
decltype(auto) with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16: return f.template operator()<Half>();
    case DType::kFloat32: return f.template operator()<float>();
    default: return f.template operator()<double>();
  }
}

// ---- numpy integer arithmetic ---------------------------------------------------------------
// Values of integer dtypes travel as two's-complement bits in a uint64 (signed types
// sign-extended); operations wrap modulo 2^width of their dtype, as numpy's integer ufuncs do.
bool is_integer(DType t);   // integers and bool (is_signed_integer, int_to_double: core/fused.h)
// The value `bits` of dtype t wrapped into dtype t's width (sign-extended when signed).
std::uint64_t wrap_int(DType t, std::uint64_t bits);
// The integer `bits` of dtype t rounded once to the float dtype `to` (astype), as a double.
double int_to_float(DType t, std::uint64_t bits, DType to);

// qonnx's min_int / max_int of an integer bit width (dtype t, value `bits`) in numpy's integer
// arithmetic: the result has dtype int_range_dtype(t) (t itself; int64 for bool) and every step
// wraps modulo 2^width, so an int8 width of 9 gives [0, -1] and a uint64 width with signed=1 the
// "minimum" 2^64 - 2^(b-1), exactly what the reference computes (and then compares and clamps
// with). numpy refuses 2 ** (negative integer) ("Integers to negative integer powers are not
// allowed"), so a signed width below 1 (signed=1) or below 0 raises Error naming `name`.
DType int_range_dtype(DType t);
std::uint64_t int_range_bound(DType t, std::uint64_t bits, bool is_signed, bool narrow, bool want_max, const char* name);

// Element `index` (flat, row-major over view.shape) of any view, exactly.
ParamValue read_param_at(const TensorView& view, std::int64_t index);

// ---- Derived operands (truncation scales, integer bounds, minifloat limits) -------------------
// An op does not materialize them: it describes each one as a derivation of raw parameters, and
// the fused pass (core/fused.h) computes it per block of a row beside the kernel. A derivation
// Derive<N, F, D> calls f(ParamValue s_0, ..., ParamValue s_{N-1}), which returns a double exact in
// the derived dtype (the caller rounds as numpy would), for each element of the broadcast of its
// sources, each read exactly: f is the spec. f must not throw in the fused pass: validate what
// can be invalid first (for_each_param), so an error leaves out untouched.
//
// A block is walked as runs of elements whose sources are bit-identical (per-channel parameters
// expanded, or any repeated value): f is called once per run, found by a vectorized scan for the
// next differing element. A block of one run is uniform (only out[0] is written; the kernel sees a
// broadcast). Once four or more runs average fewer than kMinAverageRun elements, the rest of the block is
// dense: the optional D (a dense derivation, below) computes it with loops over typed spans that
// the compiler vectorizes, leaving the elements it cannot prove equal to f (special values,
// exponents outside a fast range, a log2 near a rounding tie) to f; without D, or for source
// dtypes D does not handle, f runs per element.
//
// A dense derivation: bool d(const SourceRun* sources, std::int64_t m, double* out, std::uint8_t*
// fix) fills out[0..m) and fix[0..m) (1: out[i] is not computed, f must), or returns false for
// source dtypes it does not handle (then out and fix are unspecified).
struct NoDense {};

inline constexpr std::int64_t kMinAverageRun = 16;

template <std::size_t N, class F, class D = NoDense>
struct Derive {
  F f;
  D dense;

  static bool block(const void* ctx, const SourceRun* sources, std::int64_t m, double* out) {
    const Derive& self = *static_cast<const Derive*>(ctx);
    std::array<ParamValue, N> v{};
    for (std::size_t k = 0; k < N; ++k) {
      if (sources[k].broadcast) v[k] = read_param(sources[k].dtype, sources[k].data, 0);
    }
    auto at = [&](std::int64_t i) {
      for (std::size_t k = 0; k < N; ++k) {
        if (!sources[k].broadcast) v[k] = read_param(sources[k].dtype, sources[k].data, i);
      }
      return std::apply(self.f, v);
    };
    std::int64_t s = 0, runs = 0;
    while (s < m) {
      std::int64_t e = m;
      for (std::size_t k = 0; k < N; ++k) {
        if (!sources[k].broadcast) e = run_end(sources[k], s, e);
      }
      const double r = at(s);
      if (e == m && s == 0) {
        out[0] = r;
        return true;
      }
      std::fill(out + s, out + e, r);
      s = e;
      if (++runs >= 4 && runs * kMinAverageRun > s) break;  // short runs: the rest is dense
    }
    if (s == m) return false;
    if constexpr (!std::is_same_v<D, NoDense>) {
      SourceRun rest[N];
      for (std::size_t k = 0; k < N; ++k) {
        rest[k] = sources[k];
        if (!rest[k].broadcast) rest[k].data = static_cast<const unsigned char*>(rest[k].data) + s * rest[k].size;
      }
      alignas(64) std::uint8_t fix[kDeriveBlock];
      if (self.dense(rest, m - s, out + s, fix)) {
        for (std::int64_t i = 0; i < m - s; i += 64) {
          const std::int64_t end = std::min<std::int64_t>(m - s, i + 64);
          unsigned any = 0;
          for (std::int64_t j = i; j < end; ++j) any |= fix[j];
          if (any == 0) continue;
          for (std::int64_t j = i; j < end; ++j) {
            if (fix[j]) out[s + j] = at(s + j);
          }
        }
        return false;
      }
    }
    for (std::int64_t i = s; i < m; ++i) out[i] = at(i);
    return false;
  }
};
template <std::size_t N, class F>
Derive<N, F> derivation(F f) {
  return {std::move(f), {}};
}
template <std::size_t N, class F, class D>
Derive<N, F, D> derivation(F f, D dense) {
  return {std::move(f), std::move(dense)};
}

// ---- Building blocks of dense derivations (loops the compiler vectorizes) ----------------------
// Elements [0, m) of a source run as T (float or double): from_double<T>(read_param(..).f) each,
// the value the spec's arithmetic in T reads. The run itself when it is already T, else converted
// (a broadcast run: splat) into buf.
template <class T>
const T* span_as(const SourceRun& r, std::int64_t m, T* buf) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr DType kSelf = std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64;
  if (r.broadcast) {
    const T v = from_double<T>(read_param(r.dtype, r.data, 0).f);
    std::fill(buf, buf + m, v);
    return buf;
  }
  if (r.dtype == kSelf) return static_cast<const T*>(r.data);
  auto convert = [&]<class U>() {
    const U* p = static_cast<const U*>(r.data);
    for (std::int64_t i = 0; i < m; ++i) buf[i] = static_cast<T>(static_cast<double>(p[i]));
  };
  switch (r.dtype) {
    case DType::kFloat32: convert.template operator()<float>(); break;
    case DType::kFloat64: convert.template operator()<double>(); break;
    case DType::kInt8: convert.template operator()<std::int8_t>(); break;
    case DType::kInt16: convert.template operator()<std::int16_t>(); break;
    case DType::kInt32: convert.template operator()<std::int32_t>(); break;
    case DType::kInt64: convert.template operator()<std::int64_t>(); break;
    case DType::kUInt8: convert.template operator()<std::uint8_t>(); break;
    case DType::kUInt16: convert.template operator()<std::uint16_t>(); break;
    case DType::kUInt32: convert.template operator()<std::uint32_t>(); break;
    case DType::kUInt64: convert.template operator()<std::uint64_t>(); break;
    default:  // float16, bool
      for (std::int64_t i = 0; i < m; ++i) buf[i] = from_double<T>(read_param(r.dtype, r.data, i).f);
  }
  return buf;
}

// Calls f.template operator()<T>() with T the C++ type of float dtype t when it is float32 or
// float64 (dense derivations are written for those two); false for any other dtype.
template <class F>
bool with_dense_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f.template operator()<float>();
    case DType::kFloat64: return f.template operator()<double>();
    default: return false;
  }
}

// IEEE layout of T (float or double) for building powers of two from their exponent bits.
template <class T>
struct FloatBits {
  using U = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;
  using I = std::conditional_t<std::is_same_v<T, float>, std::int32_t, std::int64_t>;
  static constexpr int kMantissa = std::is_same_v<T, float> ? 23 : 52;
  static constexpr int kBias = std::is_same_v<T, float> ? 127 : 1023;
  static constexpr int kMinNormal = 1 - kBias;
};

// 2^k for a T value k (pow2_exact's result) where *ok: k an integer in [kMinNormal, kBias], the
// exact power built from its bits. Branch-free, for vectorized loops; other k set *ok = false and
// leave the result to pow2_exact. k + 1.5 * 2^p (p mantissa bits) rounds k to an integer, which
// then sits in the low bits of the sum for |k| < 2^(p-1); the sum minus the constant equals k
// exactly when k is an integer, and any k beyond that range (inf included) gives bits outside
// [kMinNormal, kBias]. (No float-to-int conversion and no && between comparisons: under the
// default -ftrapping-math either keeps the loop scalar.)
template <class T>
inline T pow2_fast(T k, bool* ok) {
  using B = FloatBits<T>;
  using U = typename B::U;
  using I = typename B::I;
  constexpr T kMagic = T(1.5) * static_cast<T>(U{1} << B::kMantissa);
  const T shifted = k + kMagic;
  const I ki = static_cast<I>(std::bit_cast<U>(shifted) - std::bit_cast<U>(kMagic));
  *ok = ((shifted - kMagic) == k) & (ki >= I{B::kMinNormal}) & (ki <= I{B::kBias});
  return std::bit_cast<T>(static_cast<U>(static_cast<U>(ki + B::kBias) << B::kMantissa));
}

// Assembles a FusedCall: engine operands (deduplicated: a tensor read in the same dtype twice is
// one operand), derivations in dependency order, then the kernel's operand list.
class FusedOperands {
 public:
  // Engine operand `v` read in `read_as` (the kernel's dtype, or v's own for a derivation source).
  int input(const TensorView& v, DType read_as);
  int source(const TensorView& v) { return input(v, v.dtype); }
  // Derived operand computed by `d` (which must outlive the call) from `sources` (input() or
  // earlier derive() results), handed to the kernel in `kernel_dtype`.
  template <std::size_t N, class F, class D>
  int derive(const std::array<int, N>& sources, DType kernel_dtype, const Derive<N, F, D>& d) {
    static_assert(N >= 1 && N <= kMaxDerivedSources);
    Derivation dv;
    for (std::size_t k = 0; k < N; ++k) dv.sources[k] = sources[k];
    dv.num_sources = static_cast<int>(N);
    dv.kernel_dtype = kernel_dtype;
    dv.fn = &Derive<N, F, D>::block;
    dv.ctx = &d;
    return add(dv);
  }
  // A FusedCall over these operands (its spans point into this object).
  FusedCall call(std::span<const int> kernel_operands) const;

 private:
  int add(const Derivation& d);
  std::array<TensorView, kMaxOperands> inputs_{};
  std::array<DType, kMaxOperands> dtypes_{};
  int num_inputs_ = 0;
  std::array<Derivation, kMaxDerived> derived_{};
  int num_derived_ = 0;
};

// Calls f(ParamValue) for the elements of `v` in its own shape (any strides), skipping an element
// bit-identical to the one before: the cheap validation pass of a parameter whose derivation can
// fail (f throws Error), run before the fused pass writes anything.
template <class U, class F, class Skip>
void for_each_param_as(const TensorView& v, const F& f, const Skip& skip) {
  const std::int64_t n = v.numel();
  if (n == 0) return;
  const auto* base = static_cast<const U*>(v.data);
  const int inner = v.shape.rank - 1;
  const std::int64_t len = inner < 0 ? 1 : v.shape[inner];
  const std::int64_t stride = inner < 0 ? 0 : v.strides[inner];
  std::int64_t idx[kMaxRank] = {};
  U prev{};
  bool have = false;
  for (std::int64_t row = 0; row < n / len; ++row) {
    std::int64_t offset = 0;
    for (int d = 0; d < inner; ++d) offset += idx[d] * v.strides[d];
    const U* p = base + offset;
    std::int64_t j = 0;
    if (stride == 1) {  // whole chunks that skip() drops entirely are passed over in one vectorized test
      for (; j + 64 <= len; j += 64) {
        unsigned keep = 0;
        for (int k = 0; k < 64; ++k) keep |= static_cast<unsigned>(!skip(p[j + k]));
        if (keep != 0) break;
      }
    }
    for (; j < len; ++j) {
      const U raw = p[j * stride];
      if (skip(raw) || (have && raw == prev)) continue;
      f(read_param(v.dtype, p + j * stride, 0));
      prev = raw;
      have = true;
    }
    for (int d = inner - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
}
// With finite_floats, the finite elements of a float tensor are skipped by their bits (one cheap
// test per element): f sees only infinities and NaNs.
template <class F>
void for_each_param(const TensorView& v, const F& f, bool finite_floats = false) {
  const bool skip_finite = finite_floats && is_floating(v.dtype);
  auto none = [](auto) { return false; };
  switch (dtype_size(v.dtype)) {
    case 1: return for_each_param_as<std::uint8_t>(v, f, none);
    case 2:
      if (skip_finite) return for_each_param_as<std::uint16_t>(v, f, [](std::uint16_t r) { return (r & 0x7c00u) != 0x7c00u; });
      return for_each_param_as<std::uint16_t>(v, f, none);
    case 4:
      if (skip_finite) {
        return for_each_param_as<std::uint32_t>(v, f, [](std::uint32_t r) { return (r & 0x7f800000u) != 0x7f800000u; });
      }
      return for_each_param_as<std::uint32_t>(v, f, none);
    default:
      if (skip_finite) {
        constexpr std::uint64_t kExp = 0x7ff0000000000000ull;
        return for_each_param_as<std::uint64_t>(v, f, [](std::uint64_t r) { return (r & kExp) != kExp; });
      }
      return for_each_param_as<std::uint64_t>(v, f, none);
  }
}

// 2 ** e in T (float or double) as numpy's power computes it: an integral e gives the exact power
// of two (or inf, or 0 / a subnormal), which is built from its bits instead of calling pow; any
// other e goes to pow.
template <class T>
inline T pow2_exact(T e) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr int kMinNormal = std::is_same_v<T, float> ? -126 : -1022;
  constexpr int kMaxExp = std::is_same_v<T, float> ? 127 : 1023;
  if (e >= T(kMinNormal) && e <= T(kMaxExp) && e == static_cast<T>(static_cast<int>(e))) {
    using Bits = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;
    constexpr int kMantissa = std::is_same_v<T, float> ? 23 : 52;
    return std::bit_cast<T>(static_cast<Bits>(static_cast<Bits>(static_cast<int>(e) + kMaxExp) << kMantissa));
  }
  return std::pow(T(2), e);
}

// qonnx's min_int / max_int of a float bit width b, in the arithmetic of T (Half, float, double):
// signed -> [-2^(b-1) + narrow, 2^(b-1) - 1], unsigned -> [0 * b, 2^b - 1 - narrow].
template <class T>
inline T float_int_range(T b, bool is_signed, bool narrow, bool want_max) {
  auto pow2 = [](T e) {
    if constexpr (std::is_same_v<T, Half>) return Half(std::pow(2.0f, float(e)));
    else return pow2_exact(e);
  };
  const T one(1.0f), two(2.0f);
  if (want_max) {
    if (!is_signed && !narrow) return pow2(b) - one;
    if (!is_signed && narrow) return pow2(b) - two;
    return pow2(b - one) - one;
  }
  if (is_signed && narrow) return -pow2(b - one) + one;
  if (is_signed) return -pow2(b - one);
  return T(0.0f) * b;  // 0 (NaN for a NaN width, as numpy would)
}

// The reference's integer range for a float bit width `bits` (qonnx min_int/max_int), evaluated
// in the arithmetic of the float dtype `bits_dtype` (float_int_range). Integer widths go through
// int_range_bound instead: numpy computes them in integers.
double int_range_min(double bits, DType bits_dtype, bool is_signed, bool narrow);
double int_range_max(double bits, DType bits_dtype, bool is_signed, bool narrow);

}  // namespace polyquant::detail
