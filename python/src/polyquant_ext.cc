// polyquant._polyquant_ext: maps numpy arrays to polyquant tensor views and back. No numerics here:
// each op asks the core for the output spec, allocates the result (or takes `out`), runs the kernel
// with the GIL released and returns it. polyquant::Error becomes ValueError (kValue) or TypeError (kType).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <tuple>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unistd.h>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "gil_release.h"
#include "polyquant/polyquant.h"

namespace nb = nanobind;
namespace pq = polyquant;

namespace {

// Inputs: any element type, any strides (nanobind hands them over in elements), read-only allowed.
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy, nb::device::cpu>;

[[noreturn]] void fail(pq::ErrorKind kind, std::string message) { throw pq::Error(kind, message); }

pq::DType to_dtype(nb::dlpack::dtype dt, const char* name) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    switch (static_cast<Code>(dt.code)) {
      case Code::Float:
        if (dt.bits == 16) return pq::DType::kFloat16;
        if (dt.bits == 32) return pq::DType::kFloat32;
        if (dt.bits == 64) return pq::DType::kFloat64;
        break;
      case Code::Int:
        if (dt.bits == 8) return pq::DType::kInt8;
        if (dt.bits == 16) return pq::DType::kInt16;
        if (dt.bits == 32) return pq::DType::kInt32;
        if (dt.bits == 64) return pq::DType::kInt64;
        break;
      case Code::UInt:
        if (dt.bits == 8) return pq::DType::kUInt8;
        if (dt.bits == 16) return pq::DType::kUInt16;
        if (dt.bits == 32) return pq::DType::kUInt32;
        if (dt.bits == 64) return pq::DType::kUInt64;
        break;
      case Code::Bool:
        if (dt.bits == 8) return pq::DType::kBool;
        break;
      case Code::Bfloat:
        if (dt.bits == 16) return pq::DType::kBFloat16;
        break;
      default:
        break;
    }
  }
  fail(pq::ErrorKind::kType, std::string(name) + ": unsupported element type (DLPack code " +
                                 std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
                                 " bits); expected float16/32/64, (u)int8/16/32/64 or bool");
}

nb::dlpack::dtype to_nb_dtype(pq::DType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, std::size_t bytes) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bytes * 8), 1};
  };
  const std::size_t bytes = pq::dtype_size(dtype);
  switch (dtype) {
    case pq::DType::kFloat16:
    case pq::DType::kFloat32:
    case pq::DType::kFloat64:
      return make(Code::Float, bytes);
    case pq::DType::kInt8:
    case pq::DType::kInt16:
    case pq::DType::kInt32:
    case pq::DType::kInt64:
      return make(Code::Int, bytes);
    case pq::DType::kUInt8:
    case pq::DType::kUInt16:
    case pq::DType::kUInt32:
    case pq::DType::kUInt64:
      return make(Code::UInt, bytes);
    case pq::DType::kBool:
      return make(Code::Bool, bytes);
  }
  fail(pq::ErrorKind::kType, "internal: unknown output dtype");
}

pq::TensorView any_view(const InArray& a, const char* name);

// Views of QONNX / QKeras operands: numpy's dtypes only.
pq::TensorView view(const InArray& a, const char* name) {
  pq::TensorView v = any_view(a, name);
  if (pq::is_onnx_only(v.dtype)) {
    fail(pq::ErrorKind::kType, std::string(name) + ": unsupported element type " + pq::dtype_name(v.dtype) +
                                   "; expected float16/32/64, (u)int8/16/32/64 or bool");
  }
  return v;
}

pq::TensorView any_view(const InArray& a, const char* name) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank > pq::kMaxRank) {
    fail(pq::ErrorKind::kValue, std::string(name) + ": rank " + std::to_string(rank) + " exceeds the maximum of " +
                                    std::to_string(pq::kMaxRank) + " dimensions");
  }
  pq::Dims shape;
  shape.rank = rank;
  for (int i = 0; i < rank; ++i) shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
  const pq::DType dtype = to_dtype(a.dtype(), name);
  if (a.stride_ptr() == nullptr) return pq::TensorView(a.data(), dtype, shape);  // DLPack: C order
  pq::Dims strides;
  strides.rank = rank;
  for (int i = 0; i < rank; ++i) strides[i] = a.stride(static_cast<std::size_t>(i));
  return pq::TensorView(a.data(), dtype, shape, strides);
}

// Operand `bit` of a call whose bitmask `weak` marks the Python scalars (TensorView::weak; the
// package passes them 0-d, exact in bool/int64/float64).
pq::TensorView view(const InArray& a, const char* name, unsigned weak, int bit) {
  pq::TensorView v = view(a, name);
  v.weak = ((weak >> bit) & 1u) != 0;
  return v;
}

pq::MutableTensorView mutable_view(const OutArray& a) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank > pq::kMaxRank) {
    fail(pq::ErrorKind::kValue, "out: rank " + std::to_string(rank) + " exceeds the maximum of " +
                                    std::to_string(pq::kMaxRank) + " dimensions");
  }
  pq::Dims shape, strides;
  shape.rank = strides.rank = rank;
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    strides[i] = a.stride(static_cast<std::size_t>(i));
  }
  return pq::MutableTensorView(a.data(), to_dtype(a.dtype(), "out"), shape, strides);
}

// A fresh C-contiguous result of `spec`, allocated by numpy itself: its allocator caches and
// hugepage-advises large blocks, which makes first-touch page faults far cheaper than a plain
// operator new for outputs of hundreds of MiB.
nb::object allocate(const pq::TensorSpec& spec) {
  static nb::object empty = nb::module_::import_("numpy").attr("empty");
  nb::list shape;
  for (int i = 0; i < spec.shape.rank; ++i) shape.append(spec.shape[i]);
  return empty(nb::tuple(shape), pq::dtype_name(spec.dtype));
}

// Interpreter exit: python/src/gil_release.h (a daemon thread in a call parks instead of aborting).
using polyquant::python::acquire_gil_or_park;
using polyquant::python::stop_reacquiring_at_exit;

// Runs `spec` (with the GIL, it is cheap and may throw), allocates unless `out` was given (the op
// checks its shape and dtype), then `kernel(out)` without the GIL. Returns the output array.
template <typename SpecFn, typename KernelFn>
nb::object run(SpecFn&& spec_fn, KernelFn&& kernel, nb::object out) {
  const pq::TensorSpec spec = spec_fn();
  if (out.is_none()) out = allocate(spec);
  OutArray array;
  if (!nb::try_cast(out, array)) {
    fail(pq::ErrorKind::kType, "out: expected a writable numpy array on the CPU");
  }
  const pq::MutableTensorView view = mutable_view(array);
  PyThreadState* state = PyEval_SaveThread();
  try {
    kernel(view);
  } catch (...) {
    acquire_gil_or_park(state);
    throw;
  }
  acquire_gil_or_park(state);
  return out;
}

pq::RoundingMode mode(const std::string& text) { return pq::parse_rounding_mode(text, "rounding_mode"); }

nb::object int_quant(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& bitwidth,
                     bool is_signed, bool narrow, const std::string& rounding_mode, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       bv = view(bitwidth, "bitwidth", weak, 3);
  const pq::qonnx::IntQuantAttrs attrs{is_signed, narrow, mode(rounding_mode)};
  return run([&] { return pq::qonnx::int_quant_spec(xv, sv, zv, bv, attrs); },
             [&](const pq::MutableTensorView& o) { pq::qonnx::int_quant(xv, sv, zv, bv, attrs, o); },
             std::move(out));
}

nb::object bipolar_quant(const InArray& x, const InArray& scale, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale", weak, 1);
  return run([&] { return pq::qonnx::bipolar_quant_spec(xv, sv); },
             [&](const pq::MutableTensorView& o) { pq::qonnx::bipolar_quant(xv, sv, o); },
             std::move(out));
}

nb::object trunc_v1(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
                    const InArray& out_bitwidth, const std::string& rounding_mode, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       iv = view(in_bitwidth, "in_bitwidth", weak, 3), ov = view(out_bitwidth, "out_bitwidth", weak, 4);
  const pq::RoundingMode rm = mode(rounding_mode);
  return run([&] { return pq::qonnx::trunc_spec(xv, sv, zv, iv, ov); },
             [&](const pq::MutableTensorView& o) { pq::qonnx::trunc(xv, sv, zv, iv, ov, rm, o); },
             std::move(out));
}

nb::object trunc_v2(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
                    const InArray& out_scale, const InArray& out_bitwidth, bool is_signed, bool narrow,
                    const std::string& rounding_mode, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       iv = view(in_bitwidth, "in_bitwidth", weak, 3), osv = view(out_scale, "out_scale", weak, 4),
                       ov = view(out_bitwidth, "out_bitwidth", weak, 5);
  const pq::qonnx::TruncV2Attrs attrs{is_signed, narrow, mode(rounding_mode)};
  return run([&] { return pq::qonnx::trunc_v2_spec(xv, sv, zv, iv, osv, ov); },
             [&](const pq::MutableTensorView& o) { pq::qonnx::trunc_v2(xv, sv, zv, iv, osv, ov, attrs, o); },
             std::move(out));
}

nb::object float_quant(const InArray& x, const InArray& scale, const InArray& exponent_bitwidth,
                     const InArray& mantissa_bitwidth, const InArray& exponent_bias, const InArray& max_val,
                     bool has_inf, bool has_nan, bool has_subnormal, bool saturation,
                     const std::string& rounding_mode, bool is_signed, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1),
                       ev = view(exponent_bitwidth, "exponent_bitwidth", weak, 2),
                       mv = view(mantissa_bitwidth, "mantissa_bitwidth", weak, 3),
                       bv = view(exponent_bias, "exponent_bias", weak, 4), maxv = view(max_val, "max_val", weak, 5);
  const pq::qonnx::FloatQuantAttrs attrs{has_inf, has_nan, has_subnormal, saturation, mode(rounding_mode), is_signed};
  return run([&] { return pq::qonnx::float_quant_spec(xv, sv, ev, mv, bv, maxv, attrs); },
             [&](const pq::MutableTensorView& o) { pq::qonnx::float_quant(xv, sv, ev, mv, bv, maxv, attrs, o); },
             std::move(out));
}

// ---- QKeras ------------------------------------------------------------------------------------
// polyquant.qkeras passes each quantizer's resolved configuration as a dict of plain Python values
// (validated there against QKeras' rules; the core validates again and names the parameter).
double cfg_double(const nb::dict& c, const char* key) { return nb::cast<double>(c[key]); }
bool cfg_bool(const nb::dict& c, const char* key) { return nb::cast<bool>(c[key]); }
std::optional<double> cfg_optional(const nb::dict& c, const char* key) {
  if (!c.contains(key) || c[key].is_none()) return std::nullopt;
  return nb::cast<double>(c[key]);
}

pq::qkeras::Alpha cfg_alpha(const nb::dict& c) {
  const std::string kind = nb::cast<std::string>(c["alpha_kind"]);
  if (kind == "none") return pq::qkeras::Alpha::kNone;
  if (kind == "value") return pq::qkeras::Alpha::kValue;
  if (kind == "auto") return pq::qkeras::Alpha::kAuto;
  if (kind == "auto_po2") return pq::qkeras::Alpha::kAutoPo2;
  fail(pq::ErrorKind::kValue, "alpha: unknown kind '" + kind + "'");
}

pq::qkeras::ScaleAxis cfg_scale_axis(const nb::dict& c) {
  pq::qkeras::ScaleAxis a;
  nb::handle v = c["scale_axis"];
  if (v.is_none()) return a;
  if (nb::isinstance<nb::int_>(v)) {
    a.kind = pq::qkeras::ScaleAxis::Kind::kInt;
    a.axes = {nb::cast<int>(v)};
    return a;
  }
  a.kind = pq::qkeras::ScaleAxis::Kind::kList;
  for (nb::handle item : v) a.axes.push_back(nb::cast<int>(item));
  return a;
}

pq::qkeras::QNoise cfg_qnoise(const nb::dict& c) {
  return {cfg_double(c, "qnoise_factor"), cfg_bool(c, "qnoise_float32")};
}

pq::qkeras::Settings cfg_settings(const nb::dict& c) {
  pq::qkeras::Settings s;
  s.epsilon = nb::cast<float>(c["epsilon"]);
  s.image_data_format = nb::cast<std::string>(c["image_data_format"]) == "channels_first" ? pq::qkeras::DataFormat::kChannelsFirst
                                                                                         : pq::qkeras::DataFormat::kChannelsLast;
  return s;
}

pq::qkeras::Training cfg_training(const nb::dict& c) { return {cfg_bool(c, "training"), nb::cast<std::uint64_t>(c["seed"])}; }

// Allocates a float32 array of `shape` (a scale output) and its view.
std::pair<nb::object, pq::MutableTensorView> scale_array(const pq::Dims& shape) {
  nb::object a = allocate(pq::TensorSpec{pq::DType::kFloat32, shape});
  OutArray arr = nb::cast<OutArray>(a);
  return {a, mutable_view(arr)};
}

const pq::TensorView kNoTensor{};

// `info` (a dict, or None): receives the scale search's passes ("max_passes",
// "least_squares_rounds"; see polyquant::qkeras::SearchInfo), for benchmarks.
void report_search(const pq::qkeras::SearchInfo& s, nb::object info) {
  if (info.is_none()) return;
  nb::dict d = nb::cast<nb::dict>(info);
  d["max_passes"] = s.max_passes;
  d["least_squares_rounds"] = s.least_squares_rounds;
}

nb::tuple qkeras_bits(const InArray& x, nb::object alpha, const nb::dict& c, bool gradient, nb::object out, nb::object info) {
  pq::qkeras::QuantizedBitsAttrs a;
  a.bits = cfg_double(c, "bits");
  a.integer = cfg_double(c, "integer");
  a.symmetric = cfg_bool(c, "symmetric");
  a.keep_negative = cfg_bool(c, "keep_negative");
  a.alpha = cfg_alpha(c);
  a.use_stochastic_rounding = cfg_bool(c, "use_stochastic_rounding");
  a.scale_axis = cfg_scale_axis(c);
  a.qnoise = cfg_qnoise(c);
  a.use_ste = cfg_bool(c, "use_ste");
  a.frozen_scale = cfg_bool(c, "frozen_scale");
  if (!c["elements_per_scale"].is_none()) {
    nb::handle e = c["elements_per_scale"];
    if (nb::isinstance<nb::int_>(e)) {
      a.elements_per_scale.kind = pq::qkeras::ElementsPerScale::Kind::kInt;
      a.elements_per_scale.values = {nb::cast<std::int64_t>(e)};
    } else {
      a.elements_per_scale.kind = pq::qkeras::ElementsPerScale::Kind::kList;
      for (nb::handle item : e) a.elements_per_scale.values.push_back(nb::cast<std::int64_t>(item));
    }
  }
  a.min_po2_exponent = cfg_optional(c, "min_po2_exponent");
  a.max_po2_exponent = cfg_optional(c, "max_po2_exponent");
  const pq::qkeras::Settings settings = cfg_settings(c);
  const pq::qkeras::Training training = cfg_training(c);
  const pq::TensorView xv = view(x, "x");
  InArray alpha_array;
  pq::TensorView av = kNoTensor;
  if (!alpha.is_none()) {
    alpha_array = nb::cast<InArray>(alpha);
    av = view(alpha_array, a.frozen_scale ? "post_training_scale" : "alpha");
  }
  const bool report_scale = !gradient && (a.alpha == pq::qkeras::Alpha::kAuto || a.alpha == pq::qkeras::Alpha::kAutoPo2) && !a.frozen_scale;
  pq::qkeras::SearchInfo search;
  nb::object scale = nb::none();
  pq::MutableTensorView scale_view;
  if (report_scale) {
    pq::qkeras::quantized_bits_spec(xv, av, a, settings);  // validate before sizing the scale
    std::tie(scale, scale_view) = scale_array(pq::qkeras::quantized_bits_scale_shape(xv, a, settings));
  }
  nb::object result = run([&] { return pq::qkeras::quantized_bits_spec(xv, av, a, settings); },
                          [&](const pq::MutableTensorView& o) {
                            if (gradient) pq::qkeras::quantized_bits_gradient(xv, av, a, settings, o);
                            else pq::qkeras::quantized_bits(xv, av, a, settings, training, o, report_scale ? &scale_view : nullptr, &search);
                          },
                          std::move(out));
  report_search(search, std::move(info));
  return nb::make_tuple(result, scale);
}

nb::object qkeras_relu(const InArray& x, const nb::dict& c, bool gradient, nb::object out) {
  pq::qkeras::QuantizedReluAttrs a;
  a.bits = cfg_double(c, "bits");
  a.integer = cfg_double(c, "integer");
  a.use_sigmoid = cfg_bool(c, "use_sigmoid");
  a.negative_slope = cfg_double(c, "negative_slope");
  a.use_stochastic_rounding = cfg_bool(c, "use_stochastic_rounding");
  a.relu_upper_bound = cfg_optional(c, "relu_upper_bound");
  a.is_quantized_clip = cfg_bool(c, "is_quantized_clip");
  a.qnoise = cfg_qnoise(c);
  a.use_ste = cfg_bool(c, "use_ste");
  a.enable_fast_inference = cfg_bool(c, "enable_fast_inference");
  const pq::qkeras::Training training = cfg_training(c);
  const pq::TensorView xv = view(x, "x");
  return run([&] { return pq::qkeras::quantized_relu_spec(xv, a); },
             [&](const pq::MutableTensorView& o) {
               if (gradient) pq::qkeras::quantized_relu_gradient(xv, a, o);
               else pq::qkeras::quantized_relu(xv, a, training, o);
             },
             std::move(out));
}

nb::tuple qkeras_linear(const InArray& x, nb::object alpha, const nb::dict& c, bool gradient, nb::object out, nb::object info) {
  pq::qkeras::SearchInfo search;
  pq::qkeras::QuantizedLinearAttrs a;
  a.bits = cfg_double(c, "bits");
  a.integer = cfg_double(c, "integer");
  a.symmetric = cfg_bool(c, "symmetric");
  a.keep_negative = cfg_bool(c, "keep_negative");
  a.alpha = cfg_alpha(c);
  a.use_stochastic_rounding = cfg_bool(c, "use_stochastic_rounding");
  a.scale_axis = cfg_scale_axis(c);
  a.qnoise = cfg_qnoise(c);
  const pq::qkeras::Settings settings = cfg_settings(c);
  const pq::qkeras::Training training = cfg_training(c);
  const pq::TensorView xv = view(x, "x");
  InArray alpha_array;
  pq::TensorView av = kNoTensor;
  if (!alpha.is_none()) {
    alpha_array = nb::cast<InArray>(alpha);
    av = view(alpha_array, "alpha");
  }
  nb::object scale = nb::none();
  pq::MutableTensorView scale_view;
  if (!gradient) {
    pq::qkeras::quantized_linear_spec(xv, av, a, settings);
    std::tie(scale, scale_view) = scale_array(pq::qkeras::quantized_linear_scale_shape(xv, av, a, settings));
  }
  nb::object result = run([&] { return pq::qkeras::quantized_linear_spec(xv, av, a, settings); },
                          [&](const pq::MutableTensorView& o) {
                            if (gradient) pq::qkeras::quantized_linear_gradient(xv, av, a, settings, o);
                            else pq::qkeras::quantized_linear(xv, av, a, settings, training, o, &scale_view, &search);
                          },
                          std::move(out));
  report_search(search, std::move(info));
  return nb::make_tuple(result, scale);
}

nb::dict runtime_info() {
  const pq::RuntimeInfo info = pq::runtime_info();
  nb::list supported;
  for (const std::string& isa : info.supported) supported.append(nb::str(isa.c_str(), isa.size()));
  nb::dict d;
  d["version"] = nb::str(info.version.c_str(), info.version.size());
  d["isa"] = nb::str(info.isa.c_str(), info.isa.size());
  d["supported"] = supported;
  d["num_threads"] = info.num_threads;
  return d;
}

// Plain memcpy between two C-contiguous buffers of equal byte size: the benchmark's in-process
// bandwidth baseline, so it runs with the GIL released like the ops do.
using ContigIn = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using ContigOut = nb::ndarray<nb::c_contig, nb::device::cpu>;

void copy(const ContigIn& src, const ContigOut& dst) {
  if (src.nbytes() != dst.nbytes()) {
    fail(pq::ErrorKind::kValue, "copy: dst has " + std::to_string(dst.nbytes()) + " bytes but src has " +
                                    std::to_string(src.nbytes()));
  }
  const void* from = src.data();
  void* to = dst.data();
  const std::size_t bytes = src.nbytes();
  nb::gil_scoped_release release;
  if (bytes != 0) std::memcpy(to, from, bytes);
}

}  // namespace

// ---- Linear quantize / dequantize (ONNX, Quark) --------------------------------------------------
// ml_dtypes arrays (bfloat16, int4, float8_*, ...) arrive as uint8 / uint16 views of the same
// memory with the DType's code in `*_dtype` (-1: the array's own dtype); outputs of those types are
// allocated as uint8 / uint16 and returned with the dtype's name for the package to view.
pq::TensorView qdq_view(const InArray& a, const char* name, int dtype_code) {
  pq::TensorView v = any_view(a, name);
  if (dtype_code < 0) return v;
  const auto t = static_cast<pq::DType>(dtype_code);
  if (dtype_code > static_cast<int>(pq::DType::kFloat4E2M1) || pq::dtype_size(t) != pq::dtype_size(v.dtype)) {
    fail(pq::ErrorKind::kType, std::string(name) + ": internal dtype code " + std::to_string(dtype_code) + " does not fit the array");
  }
  v.dtype = t;
  return v;
}

pq::DType storage_dtype(pq::DType t) {
  if (!pq::is_onnx_only(t)) return t;
  return pq::dtype_size(t) == 2 ? pq::DType::kUInt16 : pq::DType::kUInt8;
}

template <typename SpecFn, typename KernelFn>
nb::object run_qdq(SpecFn&& spec_fn, KernelFn&& kernel, nb::object out) {
  const pq::TensorSpec spec = spec_fn();
  if (out.is_none()) out = allocate(pq::TensorSpec{storage_dtype(spec.dtype), spec.shape});
  OutArray array;
  if (!nb::try_cast(out, array)) fail(pq::ErrorKind::kType, "out: expected a writable numpy array on the CPU");
  pq::MutableTensorView view = mutable_view(array);
  if (view.dtype == storage_dtype(spec.dtype)) view.dtype = spec.dtype;
  PyThreadState* state = PyEval_SaveThread();
  try {
    kernel(view);
  } catch (...) {
    acquire_gil_or_park(state);
    throw;
  }
  acquire_gil_or_park(state);
  return nb::make_tuple(out, pq::dtype_name(spec.dtype));
}

std::optional<pq::DType> onnx_dtype_attr(int value, const char* name) {
  if (value == 0) return std::nullopt;
  const std::optional<pq::DType> t = pq::onnx::dtype_from_onnx(value);
  if (!t) fail(pq::ErrorKind::kValue, std::string(name) + ": " + std::to_string(value) + " is not an ONNX data type polyquant supports");
  return t;
}

nb::object quantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                           std::optional<InArray> zp, int zp_dtype, std::int64_t axis, std::int64_t block_size,
                           int output_dtype, bool saturate, int precision, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "y_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "y_zero_point", zp_dtype);
  pq::onnx::QuantizeLinearAttrs attrs;
  attrs.axis = axis;
  attrs.block_size = block_size;
  attrs.output_dtype = onnx_dtype_attr(output_dtype, "output_dtype");
  attrs.saturate = saturate;
  attrs.precision = onnx_dtype_attr(precision, "precision");
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq([&] { return pq::onnx::quantize_linear_spec(xv, sv, zp_ptr, attrs); },
                 [&](const pq::MutableTensorView& o) { pq::onnx::quantize_linear(xv, sv, zp_ptr, attrs, o); }, std::move(out));
}

nb::object dequantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                             std::optional<InArray> zp, int zp_dtype, std::int64_t axis, std::int64_t block_size,
                             int output_dtype, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "x_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "x_zero_point", zp_dtype);
  pq::onnx::DequantizeLinearAttrs attrs;
  attrs.axis = axis;
  attrs.block_size = block_size;
  attrs.output_dtype = onnx_dtype_attr(output_dtype, "output_dtype");
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq([&] { return pq::onnx::dequantize_linear_spec(xv, sv, zp_ptr, attrs); },
                 [&](const pq::MutableTensorView& o) { pq::onnx::dequantize_linear(xv, sv, zp_ptr, attrs, o); }, std::move(out));
}

pq::quark::ExtendedAttrs quark_attrs(std::int64_t axis, const std::string& semantics) {
  pq::quark::ExtendedAttrs a;
  a.axis = axis;
  if (semantics == "quark") a.semantics = pq::quark::Semantics::kQuarkCpu;
  else if (semantics == "onnx") a.semantics = pq::quark::Semantics::kOnnxSpec;
  else fail(pq::ErrorKind::kValue, "semantics: '" + semantics + "' is not one of 'quark', 'onnx'");
  return a;
}

nb::object extended_quantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                    std::optional<InArray> zp, int zp_dtype, std::int64_t axis,
                                    const std::string& semantics, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "y_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "y_zero_point", zp_dtype);
  const pq::quark::ExtendedAttrs attrs = quark_attrs(axis, semantics);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq([&] { return pq::quark::extended_quantize_linear_spec(xv, sv, zp_ptr, attrs); },
                 [&](const pq::MutableTensorView& o) { pq::quark::extended_quantize_linear(xv, sv, zp_ptr, attrs, o); },
                 std::move(out));
}

nb::object extended_dequantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                      std::optional<InArray> zp, int zp_dtype, std::int64_t axis,
                                      const std::string& semantics, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "x_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "x_zero_point", zp_dtype);
  const pq::quark::ExtendedAttrs attrs = quark_attrs(axis, semantics);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq([&] { return pq::quark::extended_dequantize_linear_spec(xv, sv, zp_ptr, attrs); },
                 [&](const pq::MutableTensorView& o) { pq::quark::extended_dequantize_linear(xv, sv, zp_ptr, attrs, o); },
                 std::move(out));
}

// ---- AIMET affine ops (polyquant.aimet): tensors arrive as arrays plus polyquant dtype codes
// (bfloat16 as uint16 storage); block_size None or a list.
pq::aimet::AffineArgs aimet_args(std::int64_t qmin, std::int64_t qmax, const std::optional<std::vector<std::int64_t>>& block_size) {
  pq::aimet::AffineArgs args;
  args.grid = {qmin, qmax};
  if (block_size) args.block_size = std::span<const std::int64_t>(block_size->data(), block_size->size());
  return args;
}

nb::object aimet_quantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                          int offset_dtype, std::int64_t qmin, std::int64_t qmax,
                          std::optional<std::vector<std::int64_t>> block_size, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = aimet_args(qmin, qmax, block_size);
  return run_qdq([&] { return pq::aimet::quantize_spec(xv, sv, ov, args); },
                 [&](const pq::MutableTensorView& o) { pq::aimet::quantize(xv, sv, ov, args, o); }, std::move(out));
}

nb::object aimet_quantize_dequantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                     const InArray& offset, int offset_dtype, std::int64_t qmin, std::int64_t qmax,
                                     std::optional<std::vector<std::int64_t>> block_size, bool training, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = aimet_args(qmin, qmax, block_size);
  const auto path = training ? pq::aimet::QdqPath::kTraining : pq::aimet::QdqPath::kNoGrad;
  return run_qdq([&] { return pq::aimet::quantize_dequantize_spec(xv, sv, ov, args, path); },
                 [&](const pq::MutableTensorView& o) { pq::aimet::quantize_dequantize(xv, sv, ov, args, path, o); },
                 std::move(out));
}

bool aimet_takes_shortcut(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                          int offset_dtype, std::int64_t qmin, std::int64_t qmax,
                          std::optional<std::vector<std::int64_t>> block_size) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  return pq::aimet::takes_no_grad_shortcut(xv, sv, ov, aimet_args(qmin, qmax, block_size));
}

nb::object aimet_dequantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                            int offset_dtype, std::optional<std::vector<std::int64_t>> block_size, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = aimet_args(0, 0, block_size);
  return run_qdq([&] { return pq::aimet::dequantize_spec(xv, sv, ov, args.block_size); },
                 [&](const pq::MutableTensorView& o) { pq::aimet::dequantize(xv, sv, ov, args.block_size, o); },
                 std::move(out));
}

// Gradients of the training path: (grad_tensor, grad_scale, grad_offset), each None unless asked.
nb::tuple aimet_backward(int op, const InArray& grad_output, int grad_dtype, const InArray& x, int x_dtype,
                         const InArray& scale, int scale_dtype, const InArray& offset, int offset_dtype, std::int64_t qmin,
                         std::int64_t qmax, std::optional<std::vector<std::int64_t>> block_size, bool want_x,
                         bool want_scale, bool want_offset) {
  const pq::TensorView gv = qdq_view(grad_output, "grad_output", grad_dtype), xv = qdq_view(x, "tensor", x_dtype),
                       sv = qdq_view(scale, "scale", scale_dtype), ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = aimet_args(qmin, qmax, block_size);
  const auto affine_op = static_cast<pq::aimet::AffineOp>(op);
  nb::object arrays[3] = {nb::none(), nb::none(), nb::none()};
  pq::MutableTensorView views[3];
  const pq::TensorView* like[3] = {&xv, &sv, &ov};
  const bool wanted[3] = {want_x, want_scale, want_offset};
  for (int k = 0; k < 3; ++k) {
    if (!wanted[k]) continue;
    arrays[k] = allocate(pq::TensorSpec{storage_dtype(like[k]->dtype), like[k]->shape});
    OutArray a = nb::cast<OutArray>(arrays[k]);
    views[k] = mutable_view(a);
    views[k].dtype = like[k]->dtype;
  }
  PyThreadState* state = PyEval_SaveThread();
  try {
    pq::aimet::affine_backward(affine_op, gv, xv, sv, ov, args, views[0], views[1], views[2]);
  } catch (...) {
    acquire_gil_or_park(state);
    throw;
  }
  acquire_gil_or_park(state);
  return nb::make_tuple(arrays[0], arrays[1], arrays[2]);
}

int dtype_code(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(pq::DType::kFloat4E2M1); ++c) {
    if (name == pq::dtype_name(static_cast<pq::DType>(c))) return c;
  }
  return -1;
}

void bind_aimet_analyzers(nb::module_& m);  // aimet_analyzers_ext.cc
void bind_aimet_quantizer(nb::module_& m);  // aimet_quantizer_ext.cc

NB_MODULE(_polyquant_ext, m) {
  m.doc() = "polyquant's compiled core (private; use polyquant.qonnx)";
  nb::module_::import_("atexit").attr("register")(nb::cpp_function(&stop_reacquiring_at_exit));

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pq::Error& e) {
      PyErr_SetString(e.kind() == pq::ErrorKind::kType       ? PyExc_TypeError
                      : e.kind() == pq::ErrorKind::kOverflow ? PyExc_OverflowError
                      : e.kind() == pq::ErrorKind::kRuntime  ? PyExc_RuntimeError
                                                             : PyExc_ValueError,
                      e.what());
    }
  });
  bind_aimet_analyzers(m);
  bind_aimet_quantizer(m);

  // Tensor arguments: numpy arrays only (polyquant.qonnx converts everything else first).
  auto tensor = [](const char* name) { return nb::arg(name).noconvert(); };
  m.def("quantize_linear", &quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"), nb::arg("scale_dtype"),
        nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"), nb::arg("block_size"),
        nb::arg("output_dtype"), nb::arg("saturate"), nb::arg("precision"), nb::arg("out").none() = nb::none(),
        "ONNX QuantizeLinear (see polyquant.onnx.quantize_linear); returns (array, dtype name).");
  m.def("dequantize_linear", &dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"), nb::arg("scale_dtype"),
        nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"), nb::arg("block_size"),
        nb::arg("output_dtype"), nb::arg("out").none() = nb::none(),
        "ONNX DequantizeLinear (see polyquant.onnx.dequantize_linear); returns (array, dtype name).");
  m.def("extended_quantize_linear", &extended_quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"),
        nb::arg("scale_dtype"), nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"),
        nb::arg("semantics"), nb::arg("out").none() = nb::none(),
        "Quark ExtendedQuantizeLinear (see polyquant.quark); returns (array, dtype name).");
  m.def("extended_dequantize_linear", &extended_dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"),
        nb::arg("scale_dtype"), nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"),
        nb::arg("semantics"), nb::arg("out").none() = nb::none(),
        "Quark ExtendedDequantizeLinear (see polyquant.quark); returns (array, dtype name).");
  m.def("aimet_quantize", &aimet_quantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("block_size").none(),
        nb::arg("out").none() = nb::none(), "AIMET quantize (see polyquant.aimet.quantize); returns (array, dtype name).");
  m.def("aimet_quantize_dequantize", &aimet_quantize_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"),
        nb::arg("block_size").none(), nb::arg("training"), nb::arg("out").none() = nb::none(),
        "AIMET quantize_dequantize (see polyquant.aimet); training=False is AIMET's no-grad path. Returns (array, dtype name).");
  m.def("aimet_takes_shortcut", &aimet_takes_shortcut, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"),
        nb::arg("block_size").none(), "Whether AIMET's no-grad quantize_dequantize runs torch's fake quantization here.");
  m.def("aimet_dequantize", &aimet_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("block_size").none(), nb::arg("out").none() = nb::none(),
        "AIMET dequantize (see polyquant.aimet.dequantize); returns (array, dtype name).");
  m.def("aimet_backward", &aimet_backward, nb::arg("op"), tensor("grad_output"), nb::arg("grad_dtype"), tensor("tensor"),
        nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"),
        nb::arg("qmin"), nb::arg("qmax"), nb::arg("block_size").none(), nb::arg("want_tensor"), nb::arg("want_scale"),
        nb::arg("want_offset"),
        "Gradients of AIMET's training path (op 0 quantize, 1 quantize_dequantize, 2 dequantize): "
        "(grad_tensor, grad_scale, grad_offset), None where not asked.");
  m.def("dtype_code", &dtype_code, nb::arg("name"), "polyquant's code of a dtype name (-1: unknown).");
  m.def("int_quant", &int_quant, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("bitwidth"), nb::arg("signed"),
        nb::arg("narrow"), nb::arg("rounding_mode"), nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u, "IntQuant/Quant (see polyquant.qonnx.int_quant).");
  m.def("bipolar_quant", &bipolar_quant, tensor("x"), tensor("scale"), nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u,
        "BipolarQuant (see polyquant.qonnx.bipolar_quant).");
  m.def("trunc", &trunc_v1, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_bitwidth"), nb::arg("rounding_mode"), nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u, "Trunc v1 (see polyquant.qonnx.trunc).");
  m.def("trunc_v2", &trunc_v2, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_scale"), tensor("out_bitwidth"), nb::arg("signed"), nb::arg("narrow"), nb::arg("rounding_mode"),
        nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u, "Trunc v2 (see polyquant.qonnx.trunc_v2).");
  m.def("float_quant", &float_quant, tensor("x"), tensor("scale"), tensor("exponent_bitwidth"),
        tensor("mantissa_bitwidth"), tensor("exponent_bias"), tensor("max_val"), nb::arg("has_inf"),
        nb::arg("has_nan"), nb::arg("has_subnormal"), nb::arg("saturation"), nb::arg("rounding_mode"),
        nb::arg("signed") = true, nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u,
        "FloatQuant (see polyquant.qonnx.float_quant).");
  m.def("qkeras_bits", &qkeras_bits, tensor("x"), nb::arg("alpha").none(), nb::arg("config"), nb::arg("gradient") = false,
        nb::arg("out").none() = nb::none(), nb::arg("info").none() = nb::none(),
        "quantized_bits (see polyquant.qkeras): (output, reported scale or None); `info` (a dict) receives the "
        "scale search's passes.");
  m.def("qkeras_relu", &qkeras_relu, tensor("x"), nb::arg("config"), nb::arg("gradient") = false,
        nb::arg("out").none() = nb::none(), "quantized_relu (see polyquant.qkeras).");
  m.def("qkeras_linear", &qkeras_linear, tensor("x"), nb::arg("alpha").none(), nb::arg("config"), nb::arg("gradient") = false,
        nb::arg("out").none() = nb::none(), nb::arg("info").none() = nb::none(),
        "quantized_linear (see polyquant.qkeras): (output, quantization scale); `info` (a dict) receives the "
        "scale search's passes.");
  m.def("_set_kernel_set", [](const std::string& name) { pq::set_kernel_set(name); }, nb::arg("name"),
        "Tests and benchmarks only: switch the kernel set ('scalar', 'avx2', 'avx512') for later calls.");
  m.def("_set_num_threads", [](int n) { pq::set_num_threads(n); }, nb::arg("n"),
        "Tests and benchmarks only: cap the threads of later calls (1..256).");
  m.def("version", [] { return std::string(POLYQUANT_PY_VERSION); },
        "The polyquant version this module was built from.");
  m.def("runtime_info", &runtime_info,
        "Version, kernel set in use, kernel sets this CPU supports, worker threads.");
  m.def("copy", &copy, nb::arg("src").noconvert(), nb::arg("dst").noconvert(),
        "memcpy of C-contiguous src into dst (same byte size), GIL released.");
}
