// Kernel-side description of the QONNX ops: operand order, parameter structs, and the per-element
// scalar formulas that define them (the spec every optimized kernel must equal bit for bit).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/floor_log2.h"
#include "core/scalar_math.h"
#include "core/target.h"
#include "kernels/ops.h"
#include "kernels/row.h"

namespace polyquant::detail {

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class T>
constexpr WorkType work_type_v = std::is_same_v<T, Half> ? WorkType::kF16
                                 : std::is_same_v<T, float> ? WorkType::kF32
                                                            : WorkType::kF64;

// a op b evaluated in precision w (operands are exact in w: they come from narrower dtypes).
POLYQUANT_HD inline double divide_in(WorkType w, double a, double b) {
  switch (w) {
    case WorkType::kF16: return to_double(Half(x86_to_float(a)) / Half(x86_to_float(b)));
    case WorkType::kF32: return x86_to_double(x86_div(x86_to_float(a), x86_to_float(b)));
    default: return x86_div(a, b);
  }
}
POLYQUANT_HD inline double add_in(WorkType w, double a, double b) {
  switch (w) {
    case WorkType::kF16: return to_double(Half(x86_to_float(a)) + Half(x86_to_float(b)));
    case WorkType::kF32: return x86_to_double(x86_add(x86_to_float(a), x86_to_float(b)));
    default: return x86_add(a, b);
  }
}

// x / s + z as numpy evaluates it: the division in promote(x, s), the addition in
// promote(x, s, z), each possibly narrower than the op's working type T.
// A NaN quotient and a NaN z give the quotient's NaN, numpy's first operand (spelled out: the
// compiler may swap the operands of `+`).
template <class T>
POLYQUANT_HD inline T scaled_offset(T x, T s, T z, WorkType divide_as, WorkType add_as) {
  if (divide_as == work_type_v<T> && add_as == work_type_v<T>) return add_first_nan(x86_div(x, s), z);
  const double q = divide_in(divide_as, to_double(x), to_double(s));
  return from_double<T>(add_in(add_as, q, to_double(z)));
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- IntQuant: operands x, scale, zeropt; output in the working type (the reference function does
// not cast; its ONNX node rounds to float32, which the engine's output conversion does) ------------
struct IntQuantParams {
  RoundingMode mode = RoundingMode::kHalfEven;
  bool bipolar = false;  // bitwidth == 1 and signed
  double lo = 0, hi = 0; // clamp bounds, already rounded to the working type
  WorkType divide_as = WorkType::kF32;  // precision of x / scale
  WorkType add_as = WorkType::kF32;     // precision of (x / scale) + zeropt
  // float16 work on float32 operands and output (the engine widens float16 tensors exactly and
  // rounds the results, which are float16 values, back exactly): the float32 kernels compute the
  // float16 spec, every operand and step rounded to float16 as numpy's float16 loops round them
  // (Half's arithmetic: the float32 operation, rounded once).
  bool half_steps = false;
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
POLYQUANT_HD inline T int_quant_element(T x, T s, T z, bool bipolar, T lo, T hi, WorkType divide_as, WorkType add_as) {
  T y = scaled_offset(x, s, z, divide_as, add_as);
  if (bipolar) {
    y = (y >= T(0.0f)) ? T(1.0f) : T(-1.0f);
  } else {
    y = (y > hi) ? hi : y;  // comparisons are false for NaN: NaN passes the clamp
    y = (y < lo) ? lo : y;
    y = round_t<kMode>(y);
  }
  return mul_first_nan(x86_sub(y, z), s);
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- BipolarQuant: operands x, scale; output in the working type ----------------------------
struct BipolarQuantParams {
  bool half_steps = false;  // float16 work on float32 operands (IntQuantParams::half_steps)
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class T>
POLYQUANT_HD inline T bipolar_quant_element(T x, T s) {
  return x86_mul((x >= T(0.0f)) ? T(1.0f) : T(-1.0f), s);
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Trunc v1: operands x, scale, zeropt, trunc_scale (= 2^(in_bw - out_bw)) -------------------
struct TruncParams {
  RoundingMode mode = RoundingMode::kFloor;
  WorkType divide_as = WorkType::kF32;  // precision of x / scale
  WorkType add_as = WorkType::kF32;     // precision of (x / scale) + zeropt and its rint
  bool half_steps = false;              // float16 work on float32 operands (IntQuantParams::half_steps)
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
POLYQUANT_HD inline T trunc_v1_element(T x, T s, T z, T t, WorkType divide_as, WorkType add_as) {
  T y = rint_t(scaled_offset(x, s, z, divide_as, add_as));
  y = round_t<kMode>(x86_div(y, t));
  return mul_first_nan(x86_sub(y, z), s);
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Trunc v2: operands x, scale, zeropt, trunc_scale, out_scale, lo, hi, zeropt / trunc_scale ---
// (zeropt / trunc_scale is precomputed in its own numpy dtype, promote(zeropt, trunc_scale).)
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
POLYQUANT_HD inline T trunc_v2_element(T x, T s, T z, T t, T out_scale, T lo, T hi, T zt, WorkType divide_as, WorkType add_as) {
  T y = rint_t(scaled_offset(x, s, z, divide_as, add_as));
  y = x86_div(y, t);
  y = (y > hi) ? hi : y;
  y = (y < lo) ? lo : y;
  y = round_t<kMode>(y);
  return mul_first_nan(x86_sub(y, zt), out_scale);
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- FloatQuant: operands x, scale, min_exp (= 1 - bias - m), max (M); output float64 ----------
// The reference's function returns float64 (its clip against the float64 bound M promotes), and
// that double is what polyquant computes; the ONNX node rounds it to float32 (the engine's output
// conversion, or the kernels directly when `double_output` is false: float32(c * s) equals the
// float32 product of the float32 values c and s, as the double product of two floats is exact).
// M arrives as float64. Optimized float32 kernels compare in float32, which is exact only when
// every M is a float32 value (max_fits_float32).
struct FloatQuantParams {
  RoundingMode mode = RoundingMode::kHalfEven;
  double mantissa_bits = 0;  // m, exact in the working type
  bool saturation = true;
  bool has_inf = false;
  bool has_nan = false;
  bool is_signed = true;     // false: the range is [0, M] (qonnx's float_quant(signed=False))
  bool max_fits_float32 = true;
  bool double_output = true;  // the kernel writes float64 (else float32)
  WorkType xs_as = WorkType::kF32;  // precision of X / scale and of its log2 (numpy's promote(X, scale))
  // A weak `scale` (a Python float, TensorView::weak) that the working type does not hold: X /
  // scale uses it rounded to X's dtype (the operand), but the reference multiplies its float64
  // result by the Python float itself, this value.
  bool has_product_scale = false;
  double product_scale = 0;
  // Which NaN the product 2^e * R(xs / 2^e) carries when both are NaN (a NaN x: 2^e's NaN has the
  // sign cleared by |xs|, R's keeps x's sign). numpy multiplies float32 and float64 as written, the
  // first NaN winning, except that its temporary elision computes the product in R's buffer, operands
  // swapped, when R holds 256 KiB or more; its float16 loop returns the second NaN, and elision swaps
  // that too. setup_float_quant decides from R's size and dtype (qonnx calls the function on the
  // whole tensor, so its FloatQuant node's NaN signs depend on the tensor's size).
  bool nan_product_from_rounded = false;
  // float16 work on float32 operands (IntQuantParams::half_steps): x, scale and min_exp arrive as
  // float32 and the kernels compute float_quant_element<Half> of them rounded to float16.
  bool half_steps = false;
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
// floor(log2(|xs| + tiny)) with log2, tiny and the addition in precision w, as numpy computes it on
// the array X / scale (whose dtype may be narrower than the kernel's working type).
POLYQUANT_HD inline double floor_log2_in(WorkType w, double xs) {
  switch (w) {
    case WorkType::kF16: {
      const Half v(x86_to_float(xs));
      return to_double(floor_log2_t(abs_t(v) + tiny<Half>()));
    }
    case WorkType::kF32: return x86_to_double(floor_log2_t(x86_add(abs_t(x86_to_float(xs)), tiny<float>())));
    default: return floor_log2_t(x86_add(abs_t(xs), tiny<double>()));
  }
}

// np.clip(q, lo, hi) of numpy 2: max with lo, then min with hi, each keeping q on ties (so the sign
// of a zero q survives a zero bound); a NaN q or a NaN bound gives NaN; lo > hi gives hi.
POLYQUANT_HD inline double numpy_clip(double q, double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi)) return NAN;
  double c = q;
  if (c < lo) c = lo;
  if (c > hi) c = hi;
  return c;
}

// q = 2^e * R(xs / 2^e), clipped to [lo, hi] = [-M or 0, M] (overflow judged on the unclipped q,
// after rounding): the value the reference multiplies by the scale.
template <RoundingMode kMode, class T>
POLYQUANT_HD inline double float_quant_clipped(T x, T s, T min_exp, double max_value, const FloatQuantParams& p) {
  T xs, e;
  if (p.xs_as == work_type_v<T>) {
    xs = x86_div(x, s);
    e = floor_log2_t(x86_add(abs_t(xs), tiny<T>()));
  } else {  // X / scale and its log2 in the narrower promote(X, scale); the rest in T
    const double q = divide_in(p.xs_as, to_double(x), to_double(s));
    xs = from_double<T>(q);
    e = from_double<T>(floor_log2_in(p.xs_as, q));
  }
  e = x86_sub(e, from_double<T>(p.mantissa_bits));
  if (!isnan_t(e) && !(e > min_exp)) e = min_exp;  // np.maximum, NaN propagating
  const T internal_scale = exp2_t(e);
  const T rounded = round_t<kMode>(x86_div(xs, internal_scale));
  const T q = p.nan_product_from_rounded ? mul_first_nan(rounded, internal_scale) : mul_first_nan(internal_scale, rounded);
  const double qd = to_double(q);
  const double lo = p.is_signed ? -max_value : 0.0;
  double clipped = numpy_clip(qd, lo, max_value);
  if (!p.saturation) {
    if (p.has_inf) {
      if (qd > max_value) clipped = INFINITY;
      if (qd < lo) clipped = -INFINITY;
    } else if (p.has_nan) {
      if (qd > max_value || qd < lo || isinf_t(q)) clipped = NAN;
    }
  }
  return clipped;
}

// The reference function's float64 result: clipped * scale (exact for float32 operands).
template <RoundingMode kMode, class T>
POLYQUANT_HD inline double float_quant_element(T x, T s, T min_exp, double max_value, const FloatQuantParams& p) {
  return mul_first_nan(float_quant_clipped<kMode>(x, s, min_exp, max_value, p),
                       p.has_product_scale ? p.product_scale : to_double(s));
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Per-element rows (host and device) and the scalar reference rows (host) --------------------
// <op>_row_element<T[, kMode]>(params, args, j) computes output element j of a row in the working
// type T (kernels/row.h); <op>_reference_row<W>, a plain loop over it with the rounding mode
// resolved once per row, is what the registry's scalar kernels ref::<op>_<work> run
// (kernels/reference_kernels.cc stamps them from the op list), and the CUDA backend runs the same
// element in its kernels. These rows are the portable fallback, the only kernels of the float16 and
// float64 work, and the oracle every vector kernel is tested against.
inline namespace POLYQUANT_TARGET_NAMESPACE {
// Operand i, element j, in the working type (float16 work reads the stored bits).
template <class T>
POLYQUANT_HD inline T load_work(const RowArgs& a, int i, std::int64_t j) {
  if constexpr (std::is_same_v<T, Half>) return Half::from_bits(a.at<std::uint16_t>(i, j));
  else return a.at<T>(i, j);
}

template <class T>
POLYQUANT_HD inline void store_work(const RowArgs& a, std::int64_t j, T v) {
  if constexpr (std::is_same_v<T, Half>) static_cast<std::uint16_t*>(a.out)[j] = v.bits;
  else static_cast<T*>(a.out)[j] = v;
}

// Element j of a float32 row with float16 work (the ops' half_steps): the float16 spec, `f(h)`
// with h(i) operand i rounded to float16 (exact for the float16 tensors the engine widened),
// stored as float32. False (nothing done) for any other row.
template <class T, class Params, class F>
POLYQUANT_HD inline bool half_work_element(const Params& p, const RowArgs& a, std::int64_t j, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.half_steps) {
      store_work<float>(a, j, static_cast<float>(f([&](int i) { return Half(a.at<float>(i, j)); })));
      return true;
    }
  }
  return false;
}

template <class T, RoundingMode kMode>
POLYQUANT_HD inline void int_quant_row_element(const IntQuantParams& p, const RowArgs& a, std::int64_t j) {
  if (half_work_element<T>(p, a, j, [&](auto h) {
        return int_quant_element<kMode>(h(0), h(1), h(2), p.bipolar, from_double<Half>(p.lo), from_double<Half>(p.hi), WorkType::kF16,
                                        WorkType::kF16);
      })) {
    return;
  }
  const T lo = from_double<T>(p.lo), hi = from_double<T>(p.hi);
  store_work<T>(a, j, int_quant_element<kMode>(load_work<T>(a, 0, j), load_work<T>(a, 1, j), load_work<T>(a, 2, j), p.bipolar, lo, hi,
                                               p.divide_as, p.add_as));
}

template <class T>
POLYQUANT_HD inline void bipolar_quant_row_element(const BipolarQuantParams& p, const RowArgs& a, std::int64_t j) {
  if (half_work_element<T>(p, a, j, [](auto h) { return bipolar_quant_element(h(0), h(1)); })) return;
  store_work<T>(a, j, bipolar_quant_element(load_work<T>(a, 0, j), load_work<T>(a, 1, j)));
}

template <class T, RoundingMode kMode>
POLYQUANT_HD inline void trunc_v1_row_element(const TruncParams& p, const RowArgs& a, std::int64_t j) {
  if (half_work_element<T>(p, a, j, [](auto h) { return trunc_v1_element<kMode>(h(0), h(1), h(2), h(3), WorkType::kF16, WorkType::kF16); })) {
    return;
  }
  store_work<T>(a, j, trunc_v1_element<kMode>(load_work<T>(a, 0, j), load_work<T>(a, 1, j), load_work<T>(a, 2, j), load_work<T>(a, 3, j),
                                              p.divide_as, p.add_as));
}

template <class T, RoundingMode kMode>
POLYQUANT_HD inline void trunc_v2_row_element(const TruncParams& p, const RowArgs& a, std::int64_t j) {
  if (half_work_element<T>(p, a, j, [](auto h) {
        return trunc_v2_element<kMode>(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7), WorkType::kF16, WorkType::kF16);
      })) {
    return;
  }
  store_work<T>(a, j, trunc_v2_element<kMode>(load_work<T>(a, 0, j), load_work<T>(a, 1, j), load_work<T>(a, 2, j), load_work<T>(a, 3, j),
                                              load_work<T>(a, 4, j), load_work<T>(a, 5, j), load_work<T>(a, 6, j), load_work<T>(a, 7, j),
                                              p.divide_as, p.add_as));
}

template <class T, RoundingMode kMode>
POLYQUANT_HD inline void float_quant_row_element(const FloatQuantParams& p, const RowArgs& a, std::int64_t j) {
  double v;
  if (std::is_same_v<T, float> && p.half_steps) {  // the float16 spec (half_work_element's, with M as it is)
    v = float_quant_element<kMode>(Half(a.at<float>(0, j)), Half(a.at<float>(1, j)), Half(a.at<float>(2, j)), a.at<double>(3, j), p);
  } else {
    v = float_quant_element<kMode>(load_work<T>(a, 0, j), load_work<T>(a, 1, j), load_work<T>(a, 2, j), a.at<double>(3, j), p);
  }
  if (p.double_output) static_cast<double*>(a.out)[j] = v;
  else static_cast<float*>(a.out)[j] = x86_to_float(v);
}

template <class T>
inline void int_quant_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const IntQuantParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) int_quant_row_element<T, kMode>(p, a, j);
  });
}

template <class T>
inline void bipolar_quant_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const BipolarQuantParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) bipolar_quant_row_element<T>(p, a, j);
}

template <class T>
inline void trunc_v1_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) trunc_v1_row_element<T, kMode>(p, a, j);
  });
}

template <class T>
inline void trunc_v2_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) trunc_v2_row_element<T, kMode>(p, a, j);
  });
}

template <class T>
inline void float_quant_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FloatQuantParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) float_quant_row_element<T, kMode>(p, a, j);
  });
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

template <> struct RowElementTraits<KernelOp::kIntQuant> { using Params = IntQuantParams; };
template <> struct RowElementTraits<KernelOp::kBipolarQuant> { using Params = BipolarQuantParams; };
template <> struct RowElementTraits<KernelOp::kTruncV1> { using Params = TruncParams; };
template <> struct RowElementTraits<KernelOp::kTruncV2> { using Params = TruncParams; };
template <> struct RowElementTraits<KernelOp::kFloatQuant> { using Params = FloatQuantParams; };

}  // namespace polyquant::detail
