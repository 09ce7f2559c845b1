// Validation and parameter helpers shared by the framework layers (QONNX now; QKeras, AIMET, Quark
// later): they turn public TensorViews into checked kernel calls.
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
// Derive<N, F> calls f(ParamValue s_0, ..., ParamValue s_{N-1}), which returns a double exact in
// the derived dtype (the caller rounds as numpy would), for each element of the broadcast of its
// sources, each read exactly. Memoized: an element whose sources are bit-identical to the previous
// element's reuses its result (real per-element parameters are mostly runs of equal values, such
// as per-channel parameters expanded); any other element calls f, and a block whose values change
// in more than a quarter of its elements calls f for every element (no data-dependent branches). f must not throw in the fused
// pass: validate what can be invalid first (for_each_param), so an error leaves out untouched.
template <std::size_t N, class F>
struct Derive {
  F f;

  static bool block(const void* ctx, const SourceRun* sources, std::int64_t m, double* out) {
    const F& f = static_cast<const Derive*>(ctx)->f;
    // Elements whose sources all equal (in bits) the previous element's reuse its result.
    alignas(64) std::uint8_t changed[kDeriveBlock];
    changed[0] = 1;
    std::fill(changed + 1, changed + m, std::uint8_t{0});
    std::array<ParamValue, N> v{};
    for (std::size_t k = 0; k < N; ++k) {
      if (sources[k].broadcast) v[k] = read_param(sources[k].dtype, sources[k].data, 0);
      else mark_changes(sources[k], m, changed);
    }
    double result = 0, first = 0;
    bool uniform = true;
    std::int64_t changes = 0;
    for (std::int64_t i = 0; i < m; ++i) changes += changed[i];
    if (changes * 4 > m) {  // values that change often (random): every element straight, no branches on data
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::size_t k = 0; k < N; ++k) {
          if (!sources[k].broadcast) v[k] = read_param(sources[k].dtype, sources[k].data, i);
        }
        out[i] = std::apply(f, v);
      }
      return false;
    }
    for (std::int64_t i = 0; i < m; ++i) {
      if (changed[i]) {
        for (std::size_t k = 0; k < N; ++k) {
          if (!sources[k].broadcast) v[k] = read_param(sources[k].dtype, sources[k].data, i);
        }
        result = std::apply(f, v);
        if (i == 0) first = result;
        else uniform = uniform && std::bit_cast<std::uint64_t>(result) == std::bit_cast<std::uint64_t>(first);
      }
      out[i] = result;
    }
    return uniform;
  }
};
template <std::size_t N, class F>
Derive<N, F> derivation(F f) {
  return {std::move(f)};
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
  template <std::size_t N, class F>
  int derive(const std::array<int, N>& sources, DType kernel_dtype, const Derive<N, F>& d) {
    static_assert(N >= 1 && N <= kMaxDerivedSources);
    Derivation dv;
    for (std::size_t k = 0; k < N; ++k) dv.sources[k] = sources[k];
    dv.num_sources = static_cast<int>(N);
    dv.kernel_dtype = kernel_dtype;
    dv.fn = &Derive<N, F>::block;
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
    for (std::int64_t j = 0; j < len; ++j) {
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
