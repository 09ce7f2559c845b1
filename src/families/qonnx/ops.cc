// The QONNX semantic layer: validates inputs as the reference does, derives the working dtype and
// the small parameter tensors (bounds, truncation scales, minifloat limits) exactly as qonnx's
// numpy code computes them, then runs the elementwise kernel of the op.
#include <bit>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "core/device_elementwise.h"
#include "core/numpy_semantics.h"
#include "polyquant/qonnx.h"

namespace polyquant::qonnx {

using detail::ElementwiseCall;
using detail::KernelOp;

namespace {

// Whether an op runs on CUDA devices as well (docs/cuda.md lists the ops that do).
enum class Devices { kHostOnly, kHostOrCuda };

void check_operands(std::initializer_list<std::pair<const TensorView*, const char*>> operands, const char* op,
                    Devices devices) {
  std::vector<detail::NamedView> named;
  for (const auto& [view, name] : operands) named.emplace_back(view, name);
  if (devices == Devices::kHostOrCuda) detail::op_device(named, nullptr, op);
  else detail::require_host(named, op);
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

// Runs kernel `op` over `inputs` (named `names` in errors; converted to `kernel_dtypes`) into `out`,
// on the inputs' device.
void run(const char* what, KernelOp op, detail::WorkType work, std::span<const TensorView> inputs,
         std::span<const char* const> names, std::span<const DType> kernel_dtypes, DType kernel_out,
         const MutableTensorView& out, const void* params) {
  std::vector<detail::NamedView> named;
  for (std::size_t i = 0; i < inputs.size(); ++i) named.emplace_back(&inputs[i], names[i]);
  detail::op_device(named, &out, what);
  ElementwiseCall call;
  call.op = op;
  call.work = work;
  call.inputs = inputs;
  call.kernel_dtypes = kernel_dtypes;
  call.out = out;
  call.kernel_out_dtype = kernel_out;
  call.kernel = detail::best_kernel(op, work);
  call.params = params;
  call.repeated_row_operands = true;  // IntQuant, BipolarQuant: a per-channel scale, channels last
  detail::run_elementwise(call);
}

// Runs kernel `op` in one fused pass: its operands are `ops`' inputs and derivations, in the order
// of `kernel_operands`.
void run_fused(KernelOp op, detail::WorkType work, const detail::FusedOperands& ops, std::span<const int> kernel_operands,
               DType kernel_out, const MutableTensorView& out, const void* params,
               detail::RowParamsFn row_params = nullptr) {
  detail::FusedCall call = ops.call(kernel_operands);
  call.out = out;
  call.kernel_out_dtype = kernel_out;
  call.kernel = detail::best_kernel(op, work);
  call.op = op;
  call.work = work;
  call.params = params;
  call.row_params = row_params;
  detail::run_fused(call);
}

// numpy's dtype of `x / scale`, as the next step sees it: weak (a Python float) only when both are
// Python scalars, which the reference divides in Python; then the zero point's dtype rules.
detail::Promoted quotient_of(const TensorView& x, const TensorView& scale) {
  const detail::Promoted q = detail::promote(detail::promoted(x), detail::promoted(scale));
  return {detail::float_dtype_for(q.dtype), q.weak};
}

// ---- IntQuant --------------------------------------------------------------------------------
struct IntQuantSetup {
  TensorSpec spec;
  DType work;
  detail::IntQuantParams params;
};

IntQuantSetup setup_int_quant(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                              const TensorView& bitwidth, const IntQuantAttrs& attrs) {
  check_operands({{&x, "x"}, {&scale, "scale"}, {&zeropt, "zeropt"}, {&bitwidth, "bitwidth"}}, "IntQuant",
                 Devices::kHostOrCuda);
  detail::require_floating(x, "x");
  const double bits = detail::single_value(bitwidth, "bitwidth", "the reference compares it with 1");
  if (!std::isfinite(bits)) {
    throw Error(ErrorKind::kValue, "bitwidth: must be finite, got " + std::to_string(bits));
  }
  // An integer bit width is read exactly (not through float64: 2^53 + 1 stays itself).
  const bool int_bits = detail::is_integer(bitwidth.dtype);
  const detail::ParamValue bits_exact = detail::read_param_at(bitwidth, 0);
  IntQuantSetup s;
  const detail::Promoted quotient = quotient_of(x, scale);
  const DType divide_dtype = quotient.dtype;
  s.work = detail::float_dtype_for(detail::promote(quotient, detail::promoted(zeropt)).dtype);
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
  // The derived kernel operands min_exp = 1 - bias - m (in min_dtype) and max_value =
  // min(max_mantissa * 2^(2^E - 1 - bias), max_val) (2^E - 1 - bias in exp_dtype; float64).
  DType min_dtype = DType::kFloat64;
  DType exp_dtype = DType::kFloat64;
  double max_mantissa = 0;
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
                  {&mantissa_bitwidth, "mantissa_bitwidth"}, {&exponent_bias, "exponent_bias"}, {&max_val, "max_val"}},
                 "FloatQuant", Devices::kHostOrCuda);
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
  // numpy's temporary elision (see FloatQuantParams::nan_product_from_rounded): R = R(X / 2^e) has
  // the shape of (x, scale, exponent_bias, mantissa_bitwidth) broadcast and the working dtype;
  // numpy reuses a temporary of at least 256 KiB (NPY_MIN_ELIDE_BYTES) for the product.
  {
    const std::array<Dims, 4> rounded_shapes{x.shape, scale.shape, exponent_bias.shape, mantissa_bitwidth.shape};
    static constexpr const char* kRoundedNames[] = {"x", "scale", "exponent_bias", "mantissa_bitwidth"};
    const Dims rounded_shape = broadcast_shapes(rounded_shapes, "FloatQuant", kRoundedNames);
    const double rounded_bytes = static_cast<double>(rounded_shape.numel()) * static_cast<double>(dtype_size(s.work));
    const bool elided = rounded_bytes >= 256.0 * 1024.0;
    s.params.nan_product_from_rounded = (s.work == DType::kFloat16) ? !elided : elided;
  }
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

  s.min_dtype = min_dtype;
  // max_mantissa = sum(2.0 ** arange(0, -m - 1, -1)) in float64 (arange has ceil(m + 1) terms).
  s.max_mantissa = numpy_pairwise_power_sum(0.0, std::ceil(m + 1.0));
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
  s.exp_dtype = detail::float_dtype_for(
      promote(promote(promote(kPythonFloat, promoted(exponent_bitwidth)), kPythonFloat), promoted(exponent_bias)).dtype);
  return s;
}

// fp_internal_scale_min = 1.0 - bias - m, in the dtype of (bias, m).
double float_quant_min_exp(DType min_dtype, double bias, double mm) {
  return detail::with_float_type(min_dtype, [&]<class T>() {
    using detail::from_double;
    return detail::to_double(T(1.0f) - from_double<T>(bias) - from_double<T>(mm));
  });
}

// max_exponent = 2.0**E - 1.0 - bias and 2**max_exponent in the dtype of (E, bias); its product
// with the float64 series, then np.minimum with max_val (NaN propagating).
double float_quant_max_value(DType exp_dtype, double max_mantissa, double e, double bias, double mv) {
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
}

// Dense min_exp: 1 - bias - m in T.
bool float_quant_min_exp_dense(DType min_dtype, const detail::SourceRun* src, std::int64_t count, double* out,
                               std::uint8_t* fix) {
  const std::int64_t m = count;  // captured by value: fix, a char array, may alias anything by reference
  return detail::with_dense_type(min_dtype, [&, m]<class T>() {
    double* const o = out;  // locals: the stores to fx cannot alias them (or m)
    std::uint8_t* const fx = fix;
    alignas(64) T a[detail::kDeriveBlock], b[detail::kDeriveBlock];
    const T* bias = detail::span_as<T>(src[0], m, a);
    const T* mm = detail::span_as<T>(src[1], m, b);
    for (std::int64_t i = 0, n = m; i < n; ++i) {
      o[i] = static_cast<double>(T(1.0f) - bias[i] - mm[i]);
      fx[i] = 0;
    }
    return true;
  });
}

// Dense max_value: both powers of two from their bits where the exponents are integers in the
// normal range (pow's exact result); min with max_val as float_quant_max_value.
bool float_quant_max_value_dense(DType exp_dtype, double max_mantissa, const detail::SourceRun* src, std::int64_t count,
                                 double* out, std::uint8_t* fix) {
  const std::int64_t m = count;  // captured by value: fix, a char array, may alias anything by reference
  return detail::with_dense_type(exp_dtype, [&, m]<class T>() {
    double* const o = out;  // locals: the stores to fx cannot alias them (or m)
    std::uint8_t* const fx = fix;
    alignas(64) T a[detail::kDeriveBlock], b[detail::kDeriveBlock], power[detail::kDeriveBlock];
    alignas(64) double c[detail::kDeriveBlock];
    const T* e = detail::span_as<T>(src[0], m, a);
    const T* bias = detail::span_as<T>(src[1], m, b);
    const double* mv = detail::span_as<double>(src[2], m, c);
    // Two loops, each of one lane width (T, then double), which the compiler vectorizes.
    for (std::int64_t i = 0, n = m; i < n; ++i) {
      bool ok_e, ok_me;
      const T me = detail::pow2_fast<T>(e[i], &ok_e) - T(1.0f) - bias[i];
      power[i] = detail::pow2_fast<T>(me, &ok_me);
      fx[i] = !(ok_e & ok_me);
    }
    for (std::int64_t i = 0, n = m; i < n; ++i) {
      const double fmt_max = max_mantissa * static_cast<double>(power[i]);
      const bool nan = (fmt_max != fmt_max) | (mv[i] != mv[i]);
      o[i] = nan ? std::numeric_limits<double>::quiet_NaN() : (mv[i] < fmt_max ? mv[i] : fmt_max);
    }
    return true;
  });
}

// The fast float32 kernel compares with M in float32, exact only when M is a float32 value: a row
// with one broadcast M says whether it is (per-element M rows take the exact path anyway).
const void* float_quant_row_params(const void* params, const detail::RowArgs& a, void* storage) {
  if (!a.is_broadcast(3)) return params;
  static_assert(sizeof(detail::FloatQuantParams) <= detail::kRowParamsBytes);
  const double v = a.input<double>(3)[0];
  auto* p = new (storage) detail::FloatQuantParams(*static_cast<const detail::FloatQuantParams*>(params));
  p->max_fits_float32 = static_cast<double>(static_cast<float>(v)) == v || std::isnan(v);
  return p;
}

}  // namespace

// ================================================================================================
TensorSpec int_quant_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                          const TensorView& bitwidth, const IntQuantAttrs& attrs) {
  return setup_int_quant(x, scale, zeropt, bitwidth, attrs).spec;
}

PlannedCall int_quant_plan(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                           const TensorView& bitwidth, const IntQuantAttrs& attrs) {
  IntQuantSetup s = setup_int_quant(x, scale, zeropt, bitwidth, attrs);
  // float16 work on float32 operands, in the float32 kernels (IntQuantParams::half_steps)
  s.params.half_steps = s.work == DType::kFloat16 && s.params.divide_as == detail::WorkType::kF16 &&
                        s.params.add_as == detail::WorkType::kF16;
  return PlannedCall(s.spec, [s, inputs = std::array<TensorView, 3>{x, scale, zeropt}](const MutableTensorView& out) {
    detail::require_output(out, s.spec, "IntQuant");
    const DType kernel_dtype = s.params.half_steps ? DType::kFloat32 : s.work;
    const std::array<DType, 3> kd{kernel_dtype, kernel_dtype, kernel_dtype};
    static constexpr const char* kNames[] = {"x", "scale", "zeropt"};
    run("IntQuant", KernelOp::kIntQuant, detail::work_type_of(kernel_dtype), inputs, kNames, kd, kernel_dtype, out, &s.params);
  });
}

void int_quant(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& bitwidth,
               const IntQuantAttrs& attrs, const MutableTensorView& out) {
  int_quant_plan(x, scale, zeropt, bitwidth, attrs).run(out);
}

TensorSpec bipolar_quant_spec(const TensorView& x, const TensorView& scale) {
  check_operands({{&x, "x"}, {&scale, "scale"}}, "BipolarQuant", Devices::kHostOrCuda);
  detail::require_floating(x, "x");
  const std::array<Dims, 2> shapes{x.shape, scale.shape};
  TensorSpec spec;
  static constexpr const char* kNames[] = {"x", "scale"};
  spec.shape = broadcast_shapes(shapes, "BipolarQuant", kNames);
  spec.dtype = detail::float_dtype_for(detail::promote(detail::promoted(x), detail::promoted(scale)).dtype);
  return spec;
}

PlannedCall bipolar_quant_plan(const TensorView& x, const TensorView& scale) {
  const TensorSpec spec = bipolar_quant_spec(x, scale);
  return PlannedCall(spec, [spec, inputs = std::array<TensorView, 2>{x, scale}](const MutableTensorView& out) {
    detail::require_output(out, spec, "BipolarQuant");
    detail::BipolarQuantParams params;
    params.half_steps = spec.dtype == DType::kFloat16;  // float16 work in the float32 kernels
    const DType kernel_dtype = params.half_steps ? DType::kFloat32 : spec.dtype;
    const std::array<DType, 2> kd{kernel_dtype, kernel_dtype};
    static constexpr const char* kNames[] = {"x", "scale"};
    run("BipolarQuant", KernelOp::kBipolarQuant, detail::work_type_of(kernel_dtype), inputs, kNames, kd, kernel_dtype, out, &params);
  });
}

void bipolar_quant(const TensorView& x, const TensorView& scale, const MutableTensorView& out) {
  bipolar_quant_plan(x, scale).run(out);
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
                  {&out_bitwidth, "out_bitwidth"}}, "Trunc", Devices::kHostOrCuda);
  detail::require_floating(x, "x");
  if (in_bitwidth.dtype == DType::kBool && out_bitwidth.dtype == DType::kBool) {
    throw Error(ErrorKind::kType, "in_bitwidth, out_bitwidth: both bool, and the reference's in_bitwidth - "
                                  "out_bitwidth is not defined for booleans in numpy; allowed: numeric dtypes");
  }
  using detail::promote;
  using detail::promoted;
  using detail::strong;
  TruncV1Types t;
  const detail::Promoted quotient = quotient_of(x, scale);
  t.divide_dtype = quotient.dtype;
  t.add_dtype = detail::float_dtype_for(promote(quotient, promoted(zeropt)).dtype);
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
double trunc_v1_scale(const TruncV1Types& t, const detail::ParamValue& ib, const detail::ParamValue& ob) {
  if (!is_floating(t.diff_dtype)) {
    const std::uint64_t diff = detail::wrap_int(t.diff_dtype, ib.bits - ob.bits);
    return detail::pow2_exact(detail::int_to_double(t.diff_dtype, diff));  // 2.0 ** int: float64
  }
  return detail::with_float_type(t.ts_dtype, [&]<class T>() {
    using detail::from_double;
    const T d = from_double<T>(ib.f) - from_double<T>(ob.f);
    if constexpr (std::is_same_v<T, detail::Half>) {
      return detail::to_double(T(std::pow(2.0f, float(d))));
    } else {
      return detail::to_double(detail::pow2_exact(d));
    }
  });
}

// Dense trunc_scale (float widths): d = ib - ob in T, then pow2_exact(d), as loops over the block.
bool trunc_v1_scale_dense(const TruncV1Types& t, const detail::SourceRun* src, std::int64_t count, double* out,
                          std::uint8_t* fix) {
  if (!is_floating(t.diff_dtype)) return false;
  const std::int64_t m = count;
  return detail::with_dense_type(t.ts_dtype, [&, m]<class T>() {
    double* const o = out;  // locals: the stores to fx cannot alias them (or m)
    std::uint8_t* const fx = fix;
    alignas(64) T a[detail::kDeriveBlock], b[detail::kDeriveBlock];
    const T* ib = detail::span_as<T>(src[0], m, a);
    const T* ob = detail::span_as<T>(src[1], m, b);
    for (std::int64_t i = 0, n = m; i < n; ++i) {  // n: a local, which the stores to fix cannot alias
      bool ok;
      o[i] = static_cast<double>(detail::pow2_fast<T>(ib[i] - ob[i], &ok));
      fx[i] = !ok;
    }
    return true;
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
                  {&out_scale, "out_scale"}, {&out_bitwidth, "out_bitwidth"}}, "Trunc", Devices::kHostOrCuda);
  detail::require_floating(x, "x");
  TruncV2Types t;
  using detail::promote;
  using detail::promoted;
  using detail::strong;
  const detail::Promoted quotient = quotient_of(x, scale);
  t.divide_dtype = quotient.dtype;
  t.add_dtype = detail::float_dtype_for(promote(quotient, promoted(zeropt)).dtype);
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

// The derived operands of Trunc v2 (computed per block in the fused pass):
// trunc_scale = 2 ** rint(log2(out_scale / scale)) in ts_dtype,
double trunc_v2_scale(const TruncV2Types& t, const detail::ParamValue& os, const detail::ParamValue& sc) {
  return detail::with_float_type(t.ts_dtype, [&]<class T>() {
    using detail::from_double;
    const T ratio = from_double<T>(os.f) / from_double<T>(sc.f);
    return detail::to_double(pow2_t<T>(detail::rint_t(detail::log2_t(ratio))));
  });
}

// Dense trunc_scale: ratio = os / sc in T; rint(log2(ratio)) of a positive normal ratio 2^e * f
// (1 <= f < 2) is e + (f > sqrt(2)), since log2(ratio) = e + log2(f) and log2(f) < 1/2 exactly
// when f < sqrt(2). log2 rounds its result, so fractions within 2^-10 of sqrt(2) (a margin of
// thousands of ulps of log2's result even at |e| = 2^10) are left to the spec, as are
// non-positive, subnormal and non-finite ratios and powers outside the normal range.
bool trunc_v2_scale_dense(const TruncV2Types& t, const detail::SourceRun* src, std::int64_t count, double* out,
                          std::uint8_t* fix) {
  const std::int64_t m = count;
  return detail::with_dense_type(t.ts_dtype, [&, m]<class T>() {
    double* const o = out;  // locals: the stores to fx cannot alias them (or m)
    std::uint8_t* const fx = fix;
    using B = detail::FloatBits<T>;
    using U = typename B::U;
    using I = typename B::I;
    constexpr U kMantissaMask = (U{1} << B::kMantissa) - 1;
    constexpr U kSqrt2 = static_cast<U>(std::is_same_v<T, float> ? 0x3504f3ull : 0x6a09e667f3bcdull);  // fraction of sqrt(2)
    constexpr U kWindow = U{1} << (B::kMantissa - 10);
    constexpr U kMaxBiased = 2 * B::kBias;  // the largest finite biased exponent
    alignas(64) T a[detail::kDeriveBlock], b[detail::kDeriveBlock];
    const T* os = detail::span_as<T>(src[0], m, a);
    const T* sc = detail::span_as<T>(src[1], m, b);
    for (std::int64_t i = 0, n = m; i < n; ++i) {
      const U bits = std::bit_cast<U>(os[i] / sc[i]);
      const U biased = bits >> B::kMantissa;  // the sign bit makes a negative ratio's too large
      const U fraction = bits & kMantissaMask;
      const bool normal = (biased >= 1) & (biased <= kMaxBiased);
      const bool near_tie = static_cast<U>(fraction - (kSqrt2 - kWindow)) <= 2 * kWindow;
      const I k = static_cast<I>(normal ? biased : U{B::kBias}) - B::kBias + static_cast<I>(fraction > kSqrt2);
      bool ok;
      o[i] = static_cast<double>(detail::pow2_fast<T>(static_cast<T>(k), &ok));
      fx[i] = !(ok & normal & !near_tie);
    }
    return true;
  });
}

// Dense zeropt / trunc_scale in float32 or float64 (divide_in).
bool trunc_v2_zt_dense(detail::WorkType zt_work, const detail::SourceRun* src, std::int64_t count, double* out,
                       std::uint8_t* fix) {
  const std::int64_t m = count;
  const DType d = zt_work == detail::WorkType::kF32   ? DType::kFloat32
                  : zt_work == detail::WorkType::kF64 ? DType::kFloat64
                                                      : DType::kFloat16;
  return detail::with_dense_type(d, [&, m]<class T>() {
    double* const o = out;  // locals: the stores to fx cannot alias them (or m)
    std::uint8_t* const fx = fix;
    alignas(64) T a[detail::kDeriveBlock], b[detail::kDeriveBlock];
    const T* z = detail::span_as<T>(src[0], m, a);
    const T* ts = detail::span_as<T>(src[1], m, b);
    for (std::int64_t i = 0, n = m; i < n; ++i) {
      o[i] = static_cast<double>(z[i] / ts[i]);
      fx[i] = 0;
    }
    return true;
  });
}

// and min_int / max_int of out_bitwidth, rounded once to the working dtype w. Throws for a width
// numpy refuses (a negative integer power) or a non-finite float width.
double trunc_v2_bound(DType w, DType bits_dtype, bool int_bits, const detail::ParamValue& b, bool is_signed,
                      bool narrow, bool want_max) {
  if (int_bits) {
    // Integer arithmetic in the width's dtype, wrapping as numpy does; then one rounding to w.
    const DType d = detail::int_range_dtype(bits_dtype);
    return detail::int_to_float(d, detail::int_range_bound(bits_dtype, b.bits, is_signed, narrow, want_max, "out_bitwidth"),
                                w);
  }
  if (!std::isfinite(b.f)) throw Error(ErrorKind::kValue, "out_bitwidth: must be finite, got " + std::to_string(b.f));
  // In the width's float dtype T, then one rounding to w (T -> double is exact).
  return detail::with_float_type(bits_dtype, [&]<class T>() {
    const double r = detail::to_double(detail::float_int_range<T>(detail::from_double<T>(b.f), is_signed, narrow, want_max));
    switch (w) {  // one rounding to w (round_to, inline: this runs per element)
      case DType::kFloat16: return detail::to_double(detail::half_from_double(r));
      case DType::kFloat32: return static_cast<double>(static_cast<float>(r));
      default: return r;
    }
  });
}

// Dense min_int / max_int of a float out_bitwidth in its dtype T (float_int_range, the powers of
// two from their bits), rounded once to a float32 or float64 working dtype w.
bool trunc_v2_bound_dense(DType w, DType bits_dtype, bool is_signed, bool narrow, bool want_max,
                          const detail::SourceRun* src, std::int64_t count, double* out, std::uint8_t* fix) {
  if (w != DType::kFloat32 && w != DType::kFloat64) return false;
  const std::int64_t m = count;
  return detail::with_dense_type(bits_dtype, [&, m]<class T>() {
    alignas(64) T a[detail::kDeriveBlock];
    const T* b = detail::span_as<T>(src[0], m, a);
    const T one(1.0f);
    // max: 2^b - 1 or 2^b - 2 (unsigned), 2^(b-1) - 1 (signed); min: -2^(b-1) (+ 1 narrow), 0 * b.
    const T exponent_offset = is_signed ? one : T(0.0f);
    const T max_offset = (!is_signed && narrow) ? T(2.0f) : one;
    const T min_offset = narrow ? one : T(0.0f);
    // One loop per case (a loop-invariant choice of FP operations would stay inside the loop).
    auto each = [&, m]<bool kToFloat>(auto&& bound) {
      double* const o = out;  // locals: the stores to fx cannot alias them
      std::uint8_t* const fx = fix;
      for (std::int64_t i = 0, n = m; i < n; ++i) {
        bool ok;
        const double r = static_cast<double>(bound(b[i], &ok));
        o[i] = kToFloat ? static_cast<double>(static_cast<float>(r)) : r;
        fx[i] = !ok;
      }
    };
    auto run = [&](auto&& bound) {
      if (w == DType::kFloat32) each.template operator()<true>(bound);
      else each.template operator()<false>(bound);
    };
    if (want_max) {
      run([&](T v, bool* ok) { return detail::pow2_fast<T>(v - exponent_offset, ok) - max_offset; });
    } else if (is_signed && narrow) {
      run([&](T v, bool* ok) { return -detail::pow2_fast<T>(v - exponent_offset, ok) + min_offset; });
    } else if (is_signed) {
      run([&](T v, bool* ok) { return -detail::pow2_fast<T>(v - exponent_offset, ok); });
    } else {
      run([&](T v, bool* ok) {
        *ok = true;
        return T(0.0f) * v;
      });
    }
    return true;
  });
}
}  // namespace

TensorSpec trunc_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                      const TensorView& in_bitwidth, const TensorView& out_bitwidth) {
  return trunc_v1_types(x, scale, zeropt, in_bitwidth, out_bitwidth).spec;
}

PlannedCall trunc_plan(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& in_bitwidth,
                       const TensorView& out_bitwidth, RoundingMode rounding_mode) {
  const TruncV1Types t = trunc_v1_types(x, scale, zeropt, in_bitwidth, out_bitwidth);
  return PlannedCall(t.spec, [t, x, scale, zeropt, in_bitwidth, out_bitwidth, rounding_mode](const MutableTensorView& out) {
    detail::require_output(out, t.spec, "Trunc");
    using detail::ParamValue;
    const auto trunc_scale = detail::derivation<2>(
        [&t](const ParamValue& ib, const ParamValue& ob) { return trunc_v1_scale(t, ib, ob); },
        [&t](const detail::SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
          return trunc_v1_scale_dense(t, src, m, out, fix);
        });
    detail::TruncParams params{rounding_mode, detail::work_type_of(t.divide_dtype), detail::work_type_of(t.add_dtype)};
    // float16 work in the float32 kernels (TruncParams::half_steps; the truncation scale, 2 to an
    // integer power, is a float32 value the kernel rounds to float16 as the spec's conversion would)
    params.half_steps = t.spec.dtype == DType::kFloat16 && params.divide_as == detail::WorkType::kF16 &&
                        params.add_as == detail::WorkType::kF16;
    const DType w = params.half_steps ? DType::kFloat32 : t.spec.dtype;
    detail::FusedOperands ops;
    const std::array<int, 4> kernel_operands{
        ops.input(x, w), ops.input(scale, w), ops.input(zeropt, w),
        ops.derive<2>({ops.source(in_bitwidth), ops.source(out_bitwidth)}, w, trunc_scale)};
    run_fused(KernelOp::kTruncV1, detail::work_type_of(w), ops, kernel_operands, w, out, &params);
  });
}

void trunc(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& in_bitwidth,
           const TensorView& out_bitwidth, RoundingMode rounding_mode, const MutableTensorView& out) {
  trunc_plan(x, scale, zeropt, in_bitwidth, out_bitwidth, rounding_mode).run(out);
}

TensorSpec trunc_v2_spec(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                         const TensorView& in_bitwidth, const TensorView& out_scale, const TensorView& out_bitwidth) {
  return trunc_v2_types(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth).spec;
}

PlannedCall trunc_v2_plan(const TensorView& x, const TensorView& scale, const TensorView& zeropt,
                          const TensorView& in_bitwidth, const TensorView& out_scale, const TensorView& out_bitwidth,
                          const TruncV2Attrs& attrs) {
  const TruncV2Types t = trunc_v2_types(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth);
  const DType w = t.spec.dtype;
  const DType bits_dtype = out_bitwidth.dtype;
  const bool is_signed = attrs.is_signed, narrow = attrs.narrow;
  using detail::ParamValue;
  // The bounds are the only derivation that can fail: check every width while planning, before
  // anything is written. (A float width fails only when not finite; an integer one by numpy's
  // integer rules.)
  const bool int_bits = detail::is_integer(bits_dtype);
  if (int_bits || !detail::all_finite_fast(out_bitwidth)) {
    detail::for_each_param(out_bitwidth, [&](const ParamValue& b) {
      if (!int_bits && std::isfinite(b.f)) return;
      for (const bool want_max : {false, true}) trunc_v2_bound(w, bits_dtype, int_bits, b, is_signed, narrow, want_max);
    }, /*finite_floats=*/true);
  }
  return PlannedCall(t.spec, [=](const MutableTensorView& out) {
    detail::require_output(out, t.spec, "Trunc");
    using detail::SourceRun;
    const auto trunc_scale = detail::derivation<2>(
        [&t](const ParamValue& os, const ParamValue& sc) { return trunc_v2_scale(t, os, sc); },
        [&t](const SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
          return trunc_v2_scale_dense(t, src, m, out, fix);
        });
    const detail::WorkType zt_work = detail::work_type_of(t.zt_dtype);
    const auto zeropt_over_trunc_scale = detail::derivation<2>(
        [zt_work](const ParamValue& z, const ParamValue& ts) { return detail::divide_in(zt_work, z.f, ts.f); },
        [zt_work](const SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
          return trunc_v2_zt_dense(zt_work, src, m, out, fix);
        });
    auto bound = [=](bool want_max) {
      return detail::derivation<1>(
          [=](const ParamValue& b) { return trunc_v2_bound(w, bits_dtype, int_bits, b, is_signed, narrow, want_max); },
          [=](const SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
            return !int_bits && trunc_v2_bound_dense(w, bits_dtype, is_signed, narrow, want_max, src, m, out, fix);
          });
    };
    const auto lo = bound(false), hi = bound(true);
    detail::TruncParams params{attrs.rounding_mode, detail::work_type_of(t.divide_dtype), detail::work_type_of(t.add_dtype)};
    // float16 work in the float32 kernels (TruncParams::half_steps): the derived operands (bounds,
    // zeropt / trunc_scale) are then float16 values, computed in float16, and the truncation scale
    // a power of two; handed over as float32 they are the same values
    params.half_steps = w == DType::kFloat16 && params.divide_as == detail::WorkType::kF16 &&
                        params.add_as == detail::WorkType::kF16 && zt_work == detail::WorkType::kF16;
    const DType kw = params.half_steps ? DType::kFloat32 : w;
    detail::FusedOperands ops;
    const int x_op = ops.input(x, kw), scale_op = ops.input(scale, kw), zeropt_op = ops.input(zeropt, kw);
    const int out_scale_op = ops.input(out_scale, kw);
    const int ts = ops.derive<2>({ops.source(out_scale), ops.source(scale)}, kw, trunc_scale);
    const int bits = ops.source(out_bitwidth);
    const std::array<int, 8> kernel_operands{
        x_op, scale_op, zeropt_op, ts, out_scale_op, ops.derive<1>({bits}, kw, lo), ops.derive<1>({bits}, kw, hi),
        ops.derive<2>({ops.source(zeropt), ts}, kw, zeropt_over_trunc_scale)};
    run_fused(KernelOp::kTruncV2, detail::work_type_of(kw), ops, kernel_operands, kw, out, &params);
  });
}

void trunc_v2(const TensorView& x, const TensorView& scale, const TensorView& zeropt, const TensorView& in_bitwidth,
              const TensorView& out_scale, const TensorView& out_bitwidth, const TruncV2Attrs& attrs,
              const MutableTensorView& out) {
  trunc_v2_plan(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth, attrs).run(out);
}

// ---- FloatQuant --------------------------------------------------------------------------------
TensorSpec float_quant_spec(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                            const TensorView& mantissa_bitwidth, const TensorView& exponent_bias,
                            const TensorView& max_val, const FloatQuantAttrs& attrs) {
  return setup_float_quant(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val, attrs, false).spec;
}

PlannedCall float_quant_plan(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                             const TensorView& mantissa_bitwidth, const TensorView& exponent_bias,
                             const TensorView& max_val, const FloatQuantAttrs& attrs) {
  const FloatQuantSetup s =
      setup_float_quant(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val, attrs);
  return PlannedCall(s.spec, [s, x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias,
                              max_val](const MutableTensorView& out) {
    detail::require_output(out, s.spec, "FloatQuant");
    const DType w = s.work;
    using detail::ParamValue;
    using detail::SourceRun;
    const auto min_exp = detail::derivation<2>(
        [&s](const ParamValue& bias, const ParamValue& m) { return float_quant_min_exp(s.min_dtype, bias.f, m.f); },
        [&s](const SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
          return float_quant_min_exp_dense(s.min_dtype, src, m, out, fix);
        });
    const auto max_value = detail::derivation<3>(
        [&s](const ParamValue& e, const ParamValue& bias, const ParamValue& mv) {
          return float_quant_max_value(s.exp_dtype, s.max_mantissa, e.f, bias.f, mv.f);
        },
        [&s](const SourceRun* src, std::int64_t m, double* out, std::uint8_t* fix) {
          return float_quant_max_value_dense(s.exp_dtype, s.max_mantissa, src, m, out, fix);
        });
    // float16 work in the float32 kernels (FloatQuantParams::half_steps): x, the scale and min_exp
    // in float32, which the kernels round to float16 (a float64 value rounded to float32 and then
    // to float16 is rounded to float16 once: 24 >= 2 x 11 + 2).
    detail::FloatQuantParams params = s.params;
    params.half_steps = w == DType::kFloat16;
    const DType kw = params.half_steps ? DType::kFloat32 : w;
    detail::FusedOperands ops;
    const int bias = ops.source(exponent_bias);
    const std::array<int, 4> kernel_operands{
        ops.input(x, kw), ops.input(scale, kw), ops.derive<2>({bias, ops.source(mantissa_bitwidth)}, kw, min_exp),
        ops.derive<3>({ops.source(exponent_bitwidth), bias, ops.source(max_val)}, DType::kFloat64, max_value)};
    // A float32 out (the ONNX node) is written directly as float32(c * s); any other dtype gets the
    // function's float64 value, rounded once by the engine when out is float16.
    params.double_output = out.dtype != DType::kFloat32;
    run_fused(KernelOp::kFloatQuant, detail::work_type_of(kw), ops, kernel_operands,
              params.double_output ? DType::kFloat64 : DType::kFloat32, out, &params, &float_quant_row_params);
  });
}

void float_quant(const TensorView& x, const TensorView& scale, const TensorView& exponent_bitwidth,
                 const TensorView& mantissa_bitwidth, const TensorView& exponent_bias, const TensorView& max_val,
                 const FloatQuantAttrs& attrs, const MutableTensorView& out) {
  float_quant_plan(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val, attrs).run(out);
}

}  // namespace polyquant::qonnx
