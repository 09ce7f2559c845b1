// The QONNX semantic layer: validates inputs as the reference does, derives the working dtype and
// the small parameter tensors (bounds, truncation scales, minifloat limits) exactly as qonnx's
// numpy code computes them, then runs the elementwise kernel of the op.
#include <cmath>

#include "ops/op_support.h"
#include "polyquant/qonnx.h"

namespace polyquant::qonnx {

using detail::DerivedTensor;
using detail::ElementwiseCall;
using detail::KernelOp;

namespace {

void check_operands(std::initializer_list<std::pair<const TensorView*, const char*>> operands) {
  for (const auto& [view, name] : operands) {
    if (view->numel() > 0 && view->data == nullptr) {
      throw Error(ErrorKind::kValue, std::string(name) + ": tensor has no data");
    }
    if (view->weak && view->shape.rank != 0) {
      throw Error(ErrorKind::kValue, std::string(name) + ": a weak operand (a Python scalar) must be 0-d, got shape " +
                                         view->shape.str());
    }
  }
}

// Runs kernel `op` over `inputs` (converted to `kernel_dtypes`) into `out`.
void run(KernelOp op, detail::WorkType work, std::span<const TensorView> inputs,
         std::span<const DType> kernel_dtypes, DType kernel_out, const MutableTensorView& out, const void* params) {
  ElementwiseCall call;
  call.inputs = inputs;
  call.kernel_dtypes = kernel_dtypes;
  call.out = out;
  call.kernel_out_dtype = kernel_out;
  call.kernel = detail::best_kernel(op, work);
  call.params = params;
  detail::run_elementwise(call);
}

// ---- IntQuant --------------------------------------------------------------------------------
struct IntQuantSetup {
  TensorSpec spec;
  DType work;
  detail::IntQuantParams params;
};

IntQuantSetup setup_int_quant(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                              const TensorView& bitwidth, const IntQuantAttrs& attrs) {
  check_operands({{&x, "x"}, {&scale, "scale"}, {&zeropt, "zeropt"}, {&bitwidth, "bitwidth"}});
  detail::require_floating(x, "x");
  const double bits = detail::single_value(bitwidth, "bitwidth", "the reference compares it with 1");
  if (!std::isfinite(bits)) {
    throw Error(ErrorKind::kValue, "bitwidth: must be finite, got " + std::to_string(bits));
  }
  // An integer bit width is read exactly (not through float64: 2^53 + 1 stays itself).
  const bool int_bits = detail::is_integer(bitwidth.dtype);
  const detail::ParamValue bits_exact = detail::read_param_at(bitwidth, 0);
  IntQuantSetup s;
  const DType divide_dtype = detail::float_dtype_for(detail::promote(detail::promoted(x), detail::promoted(scale)).dtype);
  s.work = detail::float_dtype_for(detail::promote(detail::strong(divide_dtype), detail::promoted(zeropt)).dtype);
  s.params.divide_as = detail::work_type_of(divide_dtype);
  s.params.add_as = detail::work_type_of(s.work);
  s.params.mode = attrs.rounding_mode;
  // `bitwidth == 1`: numpy compares an integer width exactly.
  const bool is_one = int_bits ? detail::wrap_int(bitwidth.dtype, bits_exact.bits) == 1 : bits == 1.0;
  s.params.bipolar = is_one && attrs.is_signed;
  const std::array<Dims, 4> shapes{x.shape, scale.shape, zeropt.shape, bitwidth.shape};
  // The 1-bit path never broadcasts against the bounds, so bitwidth's shape does not reach the output.
  static constexpr const char* kNames[] = {"x", "scale", "zeropt", "bitwidth"};
  const std::size_t n = s.params.bipolar ? 3 : 4;
  s.spec.shape = broadcast_shapes(std::span<const Dims>(shapes.data(), n), "IntQuant", std::span(kNames, n));
  s.spec.dtype = s.work;  // the reference function does not cast (its ONNX node rounds to float32)
  if (!s.params.bipolar && int_bits) {
    // min_int/max_int in the width's integer dtype (wrapping as numpy does), each rounded once to
    // the working dtype: comparing y with the rounded bound decides exactly as numpy's comparison
    // with the integer, and the replacement is numpy's bound.astype(y.dtype).
    const DType d = detail::int_range_dtype(bitwidth.dtype);
    for (const bool want_max : {false, true}) {
      const std::uint64_t b =
          detail::int_range_bound(bitwidth.dtype, bits_exact.bits, attrs.is_signed, attrs.narrow, want_max, "bitwidth");
      (want_max ? s.params.hi : s.params.lo) = detail::int_to_float(d, b, s.work);
    }
  } else if (!s.params.bipolar) {
    s.params.lo = detail::round_to(s.work, detail::int_range_min(bits, bitwidth.dtype, attrs.is_signed, attrs.narrow));
    s.params.hi = detail::round_to(s.work, detail::int_range_max(bits, bitwidth.dtype, attrs.is_signed, attrs.narrow));
  }
  return s;
}

// ---- FloatQuant ------------------------------------------------------------------------------
struct FloatQuantSetup {
  TensorSpec spec;
  DType work;
  detail::FloatQuantParams params;
  DerivedTensor min_exp;   // 1 - bias - m
  DerivedTensor max_value; // min((2 - 2^-m) * 2^(2^E - 1 - bias), max_val), float64
};

// sum(2.0 ** arange(0, -m - 1, -1)) in float64, as numpy evaluates it: the terms are 2^-k for
// k = 0 .. ceil(m + 1) - 1 (arange's length), summed by numpy's pairwise summation (blocks of 8
// partial sums up to 128 elements, halving above). For at most 53 terms the sum is exactly
// 2 - 2^-(terms - 1); beyond, the rounding depends on numpy's grouping, so it is replayed. Terms past
// k = 1074 are 0 in float64, so a huge m (2^40) costs O(log m): all-zero halves are skipped.
double numpy_pairwise_power_sum(double first_k, double count) {
  auto term = [](double k) { return k > 1100 ? 0.0 : std::ldexp(1.0, -static_cast<int>(k)); };
  if (first_k > 1100) return 0.0;
  if (count < 8) {
    double r = 0.0;  // numpy: res = 0.; res += a[i] (a -0. start would not matter here)
    for (double i = 0; i < count; ++i) r += term(first_k + i);
    return r;
  }
  if (count <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = term(first_k + k);
    const auto whole = static_cast<std::int64_t>(count) - static_cast<std::int64_t>(count) % 8;
    for (std::int64_t i = 8; i < whole; i += 8) {
      for (int k = 0; k < 8; ++k) r[k] += term(first_k + static_cast<double>(i + k));
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (auto i = whole; i < static_cast<std::int64_t>(count); ++i) res += term(first_k + static_cast<double>(i));
    return res;
  }
  double half = std::floor(count / 2);
  half -= std::fmod(half, 8.0);
  return numpy_pairwise_power_sum(first_k, half) + numpy_pairwise_power_sum(first_k + half, count - half);
}

// with_values: derive min_exp and max_value (the op); the spec needs only shapes and dtypes.
FloatQuantSetup setup_float_quant(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                                  const TensorView& mantissa_bitwidth, const TensorView& exponent_bias,
                                  const TensorView& max_val, const FloatQuantAttrs& attrs, bool with_values = true) {
  check_operands({{&x, "x"}, {&scale, "scale"}, {&exponent_bitwidth, "exponent_bitwidth"},
                  {&mantissa_bitwidth, "mantissa_bitwidth"}, {&exponent_bias, "exponent_bias"}, {&max_val, "max_val"}});
  detail::require_floating(x, "x");
  const double m = detail::single_value(mantissa_bitwidth, "mantissa_bitwidth",
                                        "the reference builds its mantissa series from it");
  if (!std::isfinite(m) || m < 0) {
    throw Error(ErrorKind::kValue, "mantissa_bitwidth: must be a finite value >= 0, got " + std::to_string(m));
  }
  detail::require_finite(exponent_bitwidth, "exponent_bitwidth");
  detail::require_finite(exponent_bias, "exponent_bias");
  if (!attrs.saturation && !attrs.has_inf && !attrs.has_nan) {
    throw Error(ErrorKind::kValue,
                "saturation: 0 (non-saturating) requires has_inf=1 or has_nan=1 to say where overflow goes");
  }
  FloatQuantSetup s;
  // numpy's dtypes step by step (NEP 50: a Python scalar takes the dtype of what it meets): X /
  // scale (and its log2) in promote(X, scale); `- m` widens to m's dtype and np.maximum(..,
  // 1.0 - bias - m) to that of fp_internal_scale_min, and X / internal_scale and the rounding run
  // in that wider dtype. The clip against the float64 bound makes the result, and so its product
  // with `scale`, float64.
  using detail::kPythonFloat;
  using detail::promote;
  using detail::promoted;
  const DType xs_dtype = detail::float_dtype_for(promote(promoted(x), promoted(scale)).dtype);
  const detail::Promoted fp_min = promote(promote(kPythonFloat, promoted(exponent_bias)), promoted(mantissa_bitwidth));
  const DType min_dtype = detail::float_dtype_for(fp_min.dtype);  // a weak result: Python's double
  s.work = promote(promote(detail::strong(xs_dtype), promoted(mantissa_bitwidth)), fp_min).dtype;
  s.work = detail::float_dtype_for(s.work);
  const std::array<Dims, 6> shapes{x.shape, scale.shape, exponent_bitwidth.shape, mantissa_bitwidth.shape,
                                   exponent_bias.shape, max_val.shape};
  static constexpr const char* kNames[] = {"x", "scale", "exponent_bitwidth", "mantissa_bitwidth", "exponent_bias",
                                           "max_val"};
  s.spec.shape = broadcast_shapes(shapes, "FloatQuant", kNames);
  s.spec.dtype = DType::kFloat64;  // the function's clip against the float64 bound promotes
  s.params.mode = attrs.rounding_mode;
  s.params.mantissa_bits = m;
  s.params.saturation = attrs.saturation;
  s.params.has_inf = attrs.has_inf;
  s.params.has_nan = attrs.has_nan;
  s.params.is_signed = attrs.is_signed;
  s.params.xs_as = detail::work_type_of(xs_dtype);
  if (detail::round_to(s.work, m) != m) {
    throw Error(ErrorKind::kValue, "mantissa_bitwidth: " + std::to_string(m) + " is not exact in the working dtype " +
                                       dtype_name(s.work));
  }
  if (!with_values) return s;
  if (scale.weak) {
    const double v = detail::read_param_at(scale, 0).f;
    if (!(detail::round_to(s.work, v) == v)) {
      s.params.has_product_scale = true;
      s.params.product_scale = v;
    }
  }

  // fp_internal_scale_min = 1.0 - bias - m, in the dtype of (bias, m).
  s.min_exp = detail::derive<2>({&exponent_bias, &mantissa_bitwidth}, DType::kFloat64, "FloatQuant",
                                [&](const detail::ParamValue& bias_v, const detail::ParamValue& mm_v) {
    const double bias = bias_v.f, mm = mm_v.f;
    return detail::with_float_type(min_dtype, [&]<class T>() {
      using detail::from_double;
      return detail::to_double(T(1.0f) - from_double<T>(bias) - from_double<T>(mm));
    });
  });
  // max_mantissa = sum(2.0 ** arange(0, -m - 1, -1)) in float64 (arange has ceil(m + 1) terms).
  const double max_mantissa = numpy_pairwise_power_sum(0.0, std::ceil(m + 1.0));
  // Python numbers compute 2.0 ** E and 2 ** max_exponent in Python, which raises OverflowError
  // where numpy would give inf.
  if (exponent_bitwidth.weak) {
    auto overflow = [](const std::string& what, double exponent) {
      return Error(ErrorKind::kOverflow, what + ": 2 ** " + std::to_string(exponent) +
                                             " overflows a Python float (the reference raises OverflowError)");
    };
    const double e = detail::read_param_at(exponent_bitwidth, 0).f;
    const double two_to_e = std::pow(2.0, e);
    if (std::isinf(two_to_e) && std::isfinite(e)) throw overflow("exponent_bitwidth", e);
    if (exponent_bias.weak) {
      const double max_exponent = two_to_e - 1.0 - detail::read_param_at(exponent_bias, 0).f;
      if (std::isfinite(max_exponent) && std::isinf(std::pow(2.0, max_exponent))) {
        throw overflow("exponent_bitwidth, exponent_bias: 2.0 ** E - 1.0 - bias", max_exponent);
      }
    }
  }
  // max_exponent = 2.0 ** E - 1.0 - bias (2.0 ** an integer array is float64).
  const DType exp_dtype = detail::float_dtype_for(
      promote(promote(promote(kPythonFloat, promoted(exponent_bitwidth)), kPythonFloat), promoted(exponent_bias)).dtype);
  s.max_value = detail::derive<3>({&exponent_bitwidth, &exponent_bias, &max_val}, DType::kFloat64, "FloatQuant",
                                  [&](const detail::ParamValue& e_v, const detail::ParamValue& bias_v,
                                      const detail::ParamValue& mv_v) {
                                    const double e = e_v.f, bias = bias_v.f, mv = mv_v.f;
                                    // max_exponent = 2.0**E - 1.0 - bias and 2**max_exponent, in the
                                    // dtype of (E, bias); the product with the float64 series.
                                    const double pow_max = detail::with_float_type(exp_dtype, [&]<class T>() {
                                      using detail::from_double;
                                      const T two(2.0f), one(1.0f);
                                      T me;
                                      T p;
                                      if constexpr (std::is_same_v<T, detail::Half>) {
                                        me = T(std::pow(2.0f, float(from_double<T>(e)))) - one - from_double<T>(bias);
                                        p = T(std::pow(2.0f, float(me)));
                                      } else {
                                        me = std::pow(two, from_double<T>(e)) - one - from_double<T>(bias);
                                        p = std::pow(two, me);
                                      }
                                      return detail::to_double(p);
                                    });
                                    const double fmt_max = max_mantissa * pow_max;
                                    if (std::isnan(fmt_max) || std::isnan(mv)) return std::nan("");
                                    return std::min(fmt_max, mv);
                                  });
  const auto* max_values = reinterpret_cast<const double*>(s.max_value.data.get());
  for (std::int64_t i = 0; i < s.max_value.shape.numel(); ++i) {
    const double v = max_values[i];
    if (static_cast<double>(static_cast<float>(v)) != v && !std::isnan(v)) s.params.max_fits_float32 = false;
  }
  return s;
}

}  // namespace

// ================================================================================================
TensorSpec int_quant_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                          const TensorView& bitwidth, const IntQuantAttrs& attrs) {
  return setup_int_quant(x, scale, zeropt, bitwidth, attrs).spec;
}

void int_quant(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& bitwidth,
               const IntQuantAttrs& attrs, const MutableTensorView& out) {
  const IntQuantSetup s = setup_int_quant(x, scale, zeropt, bitwidth, attrs);
  detail::require_output(out, s.spec, "IntQuant");
  const std::array<TensorView, 3> inputs{x, scale, zeropt};
  const std::array<DType, 3> kd{s.work, s.work, s.work};
  run(KernelOp::kIntQuant, detail::work_type_of(s.work), inputs, kd, s.work, out, &s.params);
}

TensorSpec bipolar_quant_spec(const TensorView& x, const TensorView& scale) {
  check_operands({{&x, "x"}, {&scale, "scale"}});
  detail::require_floating(x, "x");
  const std::array<Dims, 2> shapes{x.shape, scale.shape};
  TensorSpec spec;
  static constexpr const char* kNames[] = {"x", "scale"};
  spec.shape = broadcast_shapes(shapes, "BipolarQuant", kNames);
  spec.dtype = detail::float_dtype_for(detail::promote(detail::promoted(x), detail::promoted(scale)).dtype);
  return spec;
}

void bipolar_quant(const TensorView& x, const TensorView& scale, const MutableTensorView& out) {
  const TensorSpec spec = bipolar_quant_spec(x, scale);
  detail::require_output(out, spec, "BipolarQuant");
  const std::array<TensorView, 2> inputs{x, scale};
  const std::array<DType, 2> kd{spec.dtype, spec.dtype};
  const detail::BipolarQuantParams params;
  run(KernelOp::kBipolarQuant, detail::work_type_of(spec.dtype), inputs, kd, spec.dtype, out, &params);
}

// ---- Trunc v1 ----------------------------------------------------------------------------------
namespace {
// 2 ** k in T for k = rint(...) of T (numpy's power with a weak Python int base).
template <class T>
T pow2_t(T k) {
  if constexpr (std::is_same_v<T, detail::Half>) return T(std::pow(2.0f, float(k)));
  else return detail::pow2_exact(k);
}

// What Trunc v1 computes in which dtype (numpy promotes step by step); values are derived in the op.
struct TruncV1Types {
  TensorSpec spec;
  DType divide_dtype, add_dtype;  // x / scale, then + zeropt
  DType diff_dtype;               // in_bitwidth - out_bitwidth (integer arithmetic for integer widths)
  DType ts_dtype;                 // 2.0 ** diff: float64 for integer widths
};

TruncV1Types trunc_v1_types(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                            const TensorView& in_bitwidth, const TensorView& out_bitwidth) {
  check_operands({{&x, "x"}, {&scale, "scale"}, {&zeropt, "zeropt"}, {&in_bitwidth, "in_bitwidth"},
                  {&out_bitwidth, "out_bitwidth"}});
  detail::require_floating(x, "x");
  if (in_bitwidth.dtype == DType::kBool && out_bitwidth.dtype == DType::kBool) {
    throw Error(ErrorKind::kType, "in_bitwidth, out_bitwidth: both bool, and the reference's in_bitwidth - "
                                  "out_bitwidth is not defined for booleans in numpy; allowed: numeric dtypes");
  }
  using detail::promote;
  using detail::promoted;
  using detail::strong;
  TruncV1Types t;
  t.divide_dtype = detail::float_dtype_for(promote(promoted(x), promoted(scale)).dtype);
  t.add_dtype = detail::float_dtype_for(promote(strong(t.divide_dtype), promoted(zeropt)).dtype);
  // 2.0 ** (in_bitwidth - out_bitwidth): two Python scalars make a Python float, which then takes
  // y's dtype in y / trunc_scale.
  const detail::Promoted diff = promote(promoted(in_bitwidth), promoted(out_bitwidth));
  const detail::Promoted trunc_scale = promote(detail::kPythonFloat, diff);
  t.diff_dtype = diff.dtype;
  t.ts_dtype = detail::float_dtype_for(trunc_scale.dtype);
  const std::array<Dims, 5> shapes{x.shape, scale.shape, zeropt.shape, in_bitwidth.shape, out_bitwidth.shape};
  static constexpr const char* kNames[] = {"x", "scale", "zeropt", "in_bitwidth", "out_bitwidth"};
  t.spec.shape = broadcast_shapes(shapes, "Trunc", kNames);
  t.spec.dtype = detail::float_dtype_for(promote(strong(t.add_dtype), trunc_scale).dtype);
  return t;
}

// trunc_scale = 2.0 ** (in_bitwidth - out_bitwidth). Integer widths subtract in their promoted
// integer dtype, wrapping as numpy does (int64: 2^53 + 1 - 2^53 = 1, which float64 would make 0;
// int8: 100 - (-100) = -56), and the power of the Python float 2.0 is float64.
detail::DerivedTensor trunc_v1_scale(const TruncV1Types& t, const TensorView& in_bitwidth,
                                     const TensorView& out_bitwidth) {
  using detail::ParamValue;
  if (!is_floating(t.diff_dtype)) {
    const DType d = t.diff_dtype;
    return detail::derive<2>({&in_bitwidth, &out_bitwidth}, t.ts_dtype, "Trunc",
                             [d](const ParamValue& ib, const ParamValue& ob) {
                               const std::uint64_t diff = detail::wrap_int(d, ib.bits - ob.bits);
                               return detail::pow2_exact(detail::int_to_double(d, diff));  // 2.0 ** int: float64
                             });
  }
  return detail::with_float_type(t.ts_dtype, [&]<class T>() {
    return detail::derive<2>({&in_bitwidth, &out_bitwidth}, t.ts_dtype, "Trunc",
                             [](const ParamValue& ib, const ParamValue& ob) {
                               using detail::from_double;
                               const T d = from_double<T>(ib.f) - from_double<T>(ob.f);
                               if constexpr (std::is_same_v<T, detail::Half>) {
                                 return detail::to_double(T(std::pow(2.0f, float(d))));
                               } else {
                                 return detail::to_double(detail::pow2_exact(d));
                               }
                             });
  });
}

// ---- Trunc v2 ----------------------------------------------------------------------------------
struct TruncV2Types {
  TensorSpec spec;
  DType divide_dtype, add_dtype;
  DType ts_dtype;  // out_scale / scale and everything of trunc_scale
  DType zt_dtype;  // zeropt / trunc_scale
};

TruncV2Types trunc_v2_types(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                            const TensorView& in_bitwidth, const TensorView& out_scale,
                            const TensorView& out_bitwidth) {
  check_operands({{&x, "x"}, {&scale, "scale"}, {&zeropt, "zeropt"}, {&in_bitwidth, "in_bitwidth"},
                  {&out_scale, "out_scale"}, {&out_bitwidth, "out_bitwidth"}});
  detail::require_floating(x, "x");
  TruncV2Types t;
  using detail::promote;
  using detail::promoted;
  using detail::strong;
  t.divide_dtype = detail::float_dtype_for(promote(promoted(x), promoted(scale)).dtype);
  t.add_dtype = detail::float_dtype_for(promote(strong(t.divide_dtype), promoted(zeropt)).dtype);
  // np.log2(out_scale / scale) (a true division; two Python floats divide in Python and log2 makes
  // the float64 strong), then 2.0 ** its rounding.
  t.ts_dtype = detail::float_dtype_for(promote(promoted(out_scale), promoted(scale)).dtype);
  t.zt_dtype = detail::float_dtype_for(promote(promoted(zeropt), strong(t.ts_dtype)).dtype);
  const std::array<Dims, 5> shapes{x.shape, scale.shape, zeropt.shape, out_scale.shape, out_bitwidth.shape};
  static constexpr const char* kNames[] = {"x", "scale", "zeropt", "out_scale", "out_bitwidth"};
  t.spec.shape = broadcast_shapes(shapes, "Trunc", kNames);
  // y / trunc_scale widens y to promote(add, ts); - zeropt / trunc_scale and * out_scale widen on.
  t.spec.dtype = detail::float_dtype_for(
      promote(strong(promote_types(t.add_dtype, t.ts_dtype)), promoted(out_scale)).dtype);
  return t;
}

// The derived operands of Trunc v2, each computed once per call by one streaming pass.
struct TruncV2Derived {
  detail::DerivedTensor trunc_scale;  // 2 ** rint(log2(out_scale / scale))
  detail::DerivedTensor zeropt_over_trunc_scale;  // in promote(zeropt, trunc_scale)
  detail::DerivedTensor lo, hi;  // min_int/max_int of out_bitwidth, rounded once to the working dtype
};

TruncV2Derived trunc_v2_derive(const TruncV2Types& t, const TensorView& scale, const TensorView& zeropt,
                               const TensorView& out_scale, const TensorView& out_bitwidth, bool is_signed,
                               bool narrow) {
  using detail::ParamValue;
  TruncV2Derived r;
  r.trunc_scale = detail::with_float_type(t.ts_dtype, [&]<class T>() {
    return detail::derive<2>({&out_scale, &scale}, t.ts_dtype, "Trunc", [](const ParamValue& os, const ParamValue& sc) {
      using detail::from_double;
      const T ratio = from_double<T>(os.f) / from_double<T>(sc.f);
      return detail::to_double(pow2_t<T>(detail::rint_t(detail::log2_t(ratio))));
    });
  });
  const TensorView ts_view = r.trunc_scale.view();
  const detail::WorkType zt_work = detail::work_type_of(t.zt_dtype);
  r.zeropt_over_trunc_scale = detail::derive<2>({&zeropt, &ts_view}, t.zt_dtype, "Trunc",
                                                [zt_work](const ParamValue& z, const ParamValue& ts) {
                                                  return detail::divide_in(zt_work, z.f, ts.f);
                                                });
  const DType w = t.spec.dtype;
  const DType bits_dtype = out_bitwidth.dtype;
  for (const bool want_max : {false, true}) {
    detail::DerivedTensor bound;
    if (detail::is_integer(bits_dtype)) {
      // Integer arithmetic in the width's dtype, wrapping as numpy does; then one rounding to w.
      const DType d = detail::int_range_dtype(bits_dtype);
      bound = detail::derive<1>({&out_bitwidth}, w, "Trunc", [=](const ParamValue& b) {
        return detail::int_to_float(
            d, detail::int_range_bound(bits_dtype, b.bits, is_signed, narrow, want_max, "out_bitwidth"), w);
      });
    } else {
      // In the width's float dtype T, then one rounding to w (T -> double is exact).
      bound = detail::with_float_type(bits_dtype, [&]<class T>() {
        return detail::with_float_type(w, [&]<class W>() {
          return detail::derive<1>({&out_bitwidth}, w, "Trunc", [=](const ParamValue& b) {
            if (!std::isfinite(b.f)) {
              throw Error(ErrorKind::kValue, "out_bitwidth: must be finite, got " + std::to_string(b.f));
            }
            const T r = detail::float_int_range<T>(detail::from_double<T>(b.f), is_signed, narrow, want_max);
            return detail::to_double(detail::from_double<W>(detail::to_double(r)));
          });
        });
      });
    }
    (want_max ? r.hi : r.lo) = std::move(bound);
  }
  return r;
}
}  // namespace

TensorSpec trunc_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                      const TensorView& in_bitwidth, const TensorView& out_bitwidth) {
  return trunc_v1_types(x, scale, zeropt, in_bitwidth, out_bitwidth).spec;
}

void trunc(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& in_bitwidth,
           const TensorView& out_bitwidth, RoundingMode rounding_mode, const MutableTensorView& out) {
  const TruncV1Types t = trunc_v1_types(x, scale, zeropt, in_bitwidth, out_bitwidth);
  detail::require_output(out, t.spec, "Trunc");
  const detail::DerivedTensor trunc_scale = trunc_v1_scale(t, in_bitwidth, out_bitwidth);
  const DType w = t.spec.dtype;
  const std::array<TensorView, 4> inputs{x, scale, zeropt, trunc_scale.view()};
  const std::array<DType, 4> kd{w, w, w, w};
  const detail::TruncParams params{rounding_mode, detail::work_type_of(t.divide_dtype), detail::work_type_of(t.add_dtype)};
  run(KernelOp::kTruncV1, detail::work_type_of(w), inputs, kd, w, out, &params);
}

TensorSpec trunc_v2_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                         const TensorView& in_bitwidth, const TensorView& out_scale, const TensorView& out_bitwidth) {
  return trunc_v2_types(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth).spec;
}

void trunc_v2(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& in_bitwidth,
              const TensorView& out_scale, const TensorView& out_bitwidth, const TruncV2Attrs& attrs,
              const MutableTensorView& out) {
  const TruncV2Types t = trunc_v2_types(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth);
  detail::require_output(out, t.spec, "Trunc");
  const TruncV2Derived d = trunc_v2_derive(t, scale, zeropt, out_scale, out_bitwidth, attrs.is_signed, attrs.narrow);
  const DType w = t.spec.dtype;
  const std::array<TensorView, 8> inputs{x,         scale,       zeropt,      d.trunc_scale.view(),
                                          out_scale, d.lo.view(), d.hi.view(), d.zeropt_over_trunc_scale.view()};
  const std::array<DType, 8> kd{w, w, w, w, w, w, w, w};
  const detail::TruncParams params{attrs.rounding_mode, detail::work_type_of(t.divide_dtype),
                                   detail::work_type_of(t.add_dtype)};
  run(KernelOp::kTruncV2, detail::work_type_of(w), inputs, kd, w, out, &params);
}

// ---- FloatQuant --------------------------------------------------------------------------------
TensorSpec float_quant_spec(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                            const TensorView& mantissa_bitwidth, const TensorView& exponent_bias,
                            const TensorView& max_val, const FloatQuantAttrs& attrs) {
  return setup_float_quant(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val, attrs, false).spec;
}

void float_quant(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                 const TensorView& mantissa_bitwidth, const TensorView& exponent_bias, const TensorView& max_val,
                 const FloatQuantAttrs& attrs, const MutableTensorView& out) {
  const FloatQuantSetup s =
      setup_float_quant(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val, attrs);
  detail::require_output(out, s.spec, "FloatQuant");
  const DType w = s.work;
  const std::array<TensorView, 4> inputs{x, scale, s.min_exp.view(), s.max_value.view()};
  const std::array<DType, 4> kd{w, w, w, DType::kFloat64};
  // A float32 out (the ONNX node) is written directly as float32(c * s); any other dtype gets the
  // function's float64 value, rounded once by the engine when out is float16.
  detail::FloatQuantParams params = s.params;
  params.double_output = out.dtype != DType::kFloat32;
  run(KernelOp::kFloatQuant, detail::work_type_of(w), inputs, kd, params.double_output ? DType::kFloat64 : DType::kFloat32,
      out, &params);
}

}  // namespace polyquant::qonnx
