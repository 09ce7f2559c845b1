// Bindings of the QKeras quantizers (polyquant.qkeras): each quantizer's resolved configuration arrives as a dict.
#include "arrays.h"

namespace polyquant::python {
namespace {

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

}  // namespace

void bind_qkeras(nb::module_& m) {
  auto tensor = tensor_arg;
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
}

}  // namespace polyquant::python
