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
bool is_integer(DType t);   // integers and bool
inline bool is_signed_integer(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
}
// The value `bits` of dtype t wrapped into dtype t's width (sign-extended when signed).
std::uint64_t wrap_int(DType t, std::uint64_t bits);
// Exact value of integer `bits` of dtype t, rounded once to float64 (numpy's astype).
inline double int_to_double(DType t, std::uint64_t bits) {
  return is_signed_integer(t) ? static_cast<double>(static_cast<std::int64_t>(bits)) : static_cast<double>(bits);
}
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

// One element of a parameter tensor, exact whatever its dtype, as a derivation reads it.
struct ParamValue {
  double f = 0;            // the value as numpy's cast to float64 gives it (exact for floats)
  std::uint64_t bits = 0;  // integer dtypes (bool: 0/1): the value's two's-complement bits
};

// Reads element j of a contiguous run of dtype t.
inline ParamValue read_param(DType t, const void* p, std::int64_t j) {
  ParamValue v;
  switch (t) {
    case DType::kFloat16: v.f = to_double(Half::from_bits(static_cast<const std::uint16_t*>(p)[j])); return v;
    case DType::kFloat32: v.f = static_cast<const float*>(p)[j]; return v;
    case DType::kFloat64: v.f = static_cast<const double*>(p)[j]; return v;
    case DType::kInt8: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int8_t*>(p)[j]}); break;
    case DType::kInt16: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int16_t*>(p)[j]}); break;
    case DType::kInt32: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int32_t*>(p)[j]}); break;
    case DType::kInt64: v.bits = static_cast<std::uint64_t>(static_cast<const std::int64_t*>(p)[j]); break;
    case DType::kUInt8: v.bits = static_cast<const std::uint8_t*>(p)[j]; break;
    case DType::kUInt16: v.bits = static_cast<const std::uint16_t*>(p)[j]; break;
    case DType::kUInt32: v.bits = static_cast<const std::uint32_t*>(p)[j]; break;
    case DType::kUInt64: v.bits = static_cast<const std::uint64_t*>(p)[j]; break;
    case DType::kBool: v.bits = static_cast<const std::uint8_t*>(p)[j] != 0; break;
  }
  v.f = int_to_double(t, v.bits);
  return v;
}

// Element `index` (flat, row-major over view.shape) of any view, exactly.
ParamValue read_param_at(const TensorView& view, std::int64_t index);

// A parameter tensor an op derives from others (truncation scales, integer bounds, minifloat
// limits): values exact in `dtype` (a float dtype) over the broadcast shape of its sources.
struct DerivedTensor {
  Dims shape;
  DType dtype = DType::kFloat64;
  std::unique_ptr<unsigned char[]> data;  // uninitialized until derived: the derivation's threads touch it first
  TensorView view() const { return TensorView(data.get(), dtype, shape); }
};

namespace derive_internal {
template <std::size_t N, class F>
struct Job {
  const F* f;
  std::array<DType, N> dtypes;
  DType out;
};

// Reads elements [j0, j0 + m) of a contiguous run of dtype t (the dtype switch once per chunk).
inline void read_params(DType t, const void* p, std::int64_t j0, int m, ParamValue* dst) {
  switch (t) {
    case DType::kFloat32:
      for (int i = 0; i < m; ++i) dst[i].f = static_cast<const float*>(p)[j0 + i];
      return;
    case DType::kFloat64:
      for (int i = 0; i < m; ++i) dst[i].f = static_cast<const double*>(p)[j0 + i];
      return;
    default:
      for (int i = 0; i < m; ++i) dst[i] = read_param(t, p, j0 + i);
      return;
  }
}

template <class Out, std::size_t N, class F>
void run_row(const Job<N, F>& job, const RowArgs& a) {
  constexpr int kChunk = 256;
  ParamValue chunk[N][kChunk];
  std::array<ParamValue, N> v;
  for (std::size_t k = 0; k < N; ++k) {
    if (a.is_broadcast(static_cast<int>(k))) v[k] = read_param(job.dtypes[k], a.in[k], 0);
  }
  for (std::int64_t j0 = 0; j0 < a.n; j0 += kChunk) {
    const int m = static_cast<int>(std::min<std::int64_t>(kChunk, a.n - j0));
    for (std::size_t k = 0; k < N; ++k) {
      if (!a.is_broadcast(static_cast<int>(k))) read_params(job.dtypes[k], a.in[k], j0, m, chunk[k]);
    }
    for (int i = 0; i < m; ++i) {
      for (std::size_t k = 0; k < N; ++k) {
        if (!a.is_broadcast(static_cast<int>(k))) v[k] = chunk[k][i];
      }
      const double r = std::apply(*job.f, v);
      if constexpr (std::is_same_v<Out, Half>) static_cast<std::uint16_t*>(a.out)[j0 + i] = half_from_double(r).bits;
      else static_cast<Out*>(a.out)[j0 + i] = static_cast<Out>(r);
    }
  }
}

template <std::size_t N, class F>
void row(const void* params, const RowArgs& a) {
  const auto& job = *static_cast<const Job<N, F>*>(params);
  switch (job.out) {
    case DType::kFloat16: return run_row<Half>(job, a);
    case DType::kFloat32: return run_row<float>(job, a);
    default: return run_row<double>(job, a);
  }
}
}  // namespace derive_internal

// Derives a parameter tensor elementwise: out[i] = f(s_0[i], ..., s_{N-1}[i]) over the numpy
// broadcast of `sources`, each element read exactly (ParamValue). f returns a double that is exact
// in `dtype` (a float dtype; the caller rounds as numpy would); it is stored in dtype. The work runs
// through the elementwise engine (any strides, broadcasting, the thread pool), once per op call:
// per-element parameters cost one streaming pass, per-tensor ones a single call of f. f may throw
// Error (it is rethrown on the caller).
template <std::size_t N, class F>
DerivedTensor derive(const std::array<const TensorView*, N>& sources, DType dtype, const char* what, const F& f) {
  std::array<Dims, N> shapes;
  std::array<TensorView, N> inputs;
  derive_internal::Job<N, F> job{&f, {}, dtype};
  for (std::size_t i = 0; i < N; ++i) {
    shapes[i] = sources[i]->shape;
    inputs[i] = *sources[i];
    job.dtypes[i] = sources[i]->dtype;
  }
  DerivedTensor t;
  t.shape = broadcast_shapes(shapes, what);
  t.dtype = dtype;
  const std::int64_t n = t.shape.numel();
  t.data.reset(new unsigned char[static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * dtype_size(dtype)]);
  if (n == 0) return t;
  ElementwiseCall call;
  call.inputs = inputs;
  call.kernel_dtypes = job.dtypes;  // read in place (or gathered) in their own dtypes
  call.out = MutableTensorView(t.data.get(), dtype, t.shape);
  call.kernel_out_dtype = dtype;
  call.kernel = &derive_internal::row<N, F>;
  call.params = &job;
  run_elementwise(call);
  return t;
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
