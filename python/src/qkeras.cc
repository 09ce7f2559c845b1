// Bindings of the QKeras quantizers (polyquant.qkeras). The core's attribute structs
// (polyquant/qkeras.h: QuantizedBitsAttrs, QuantizedReluAttrs, QuantizedLinearAttrs, Settings,
// Training and the small structs inside them) are bound as classes whose fields are read-write
// attributes; polyquant.qkeras fills them from a quantizer's resolved configuration (validated there
// against QKeras' rules; the core validates again and names the parameter) and passes them with the
// tensors. The op functions only map arrays and run.
#include "arrays.h"

namespace polyquant::python {
namespace {

namespace qk = pq::qkeras;

// Allocates a float32 array of `shape` (a scale output) and its view.
std::pair<nb::object, pq::MutableTensorView> scale_array(const pq::Dims& shape) {
  nb::object a = allocate(pq::TensorSpec{pq::DType::kFloat32, shape});
  OutArray arr = nb::cast<OutArray>(a);
  return {a, mutable_view(arr)};
}

const pq::TensorView kNoTensor{};

// `info` (a dict, or None): receives the scale search's passes ("max_passes",
// "least_squares_rounds", "least_squares_rounds_on_device"; see polyquant::qkeras::SearchInfo), for
// benchmarks and the device checks.
void report_search(const qk::SearchInfo& s, nb::object info) {
  if (info.is_none()) return;
  nb::dict d = nb::cast<nb::dict>(info);
  d["max_passes"] = s.max_passes;
  d["least_squares_rounds"] = s.least_squares_rounds;
  d["least_squares_rounds_on_device"] = s.least_squares_rounds_on_device;
}

// The optional upstream gradient of a gradient call (None: the derivative alone).
struct GradOutput {
  InArray array;
  pq::TensorView view_ = kNoTensor;
  bool given = false;
  GradOutput(nb::object g, int dtype_code) {
    if (g.is_none()) return;
    array = nb::cast<InArray>(g);
    view_ = qdq_view(array, "grad_output", dtype_code);
    given = true;
  }
  const pq::TensorView* get() const { return given ? &view_ : nullptr; }
};

nb::tuple quantized_bits(const InArray& x, nb::object alpha, const qk::QuantizedBitsAttrs& a, const qk::Settings& settings,
                         const qk::Training& training, bool gradient, nb::object out, nb::object info, nb::object grad_output,
                         int x_dtype, int grad_output_dtype) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype);
  const GradOutput g(std::move(grad_output), grad_output_dtype);
  InArray alpha_array;
  pq::TensorView av = kNoTensor;
  if (!alpha.is_none()) {
    alpha_array = nb::cast<InArray>(alpha);
    av = view(alpha_array, a.frozen_scale ? "post_training_scale" : "alpha");
  }
  const bool report_scale = !gradient && (a.alpha == qk::Alpha::kAuto || a.alpha == qk::Alpha::kAutoPo2) && !a.frozen_scale;
  qk::SearchInfo search;
  nb::object scale = nb::none();
  pq::MutableTensorView scale_view;
  // Planned (validated) once; the plan writes the scale through &scale_view when it runs, so the
  // scale is sized here, after validation.
  const pq::PlannedCall call =
      gradient ? qk::quantized_bits_gradient_plan(xv, av, a, settings, g.get())
               : qk::quantized_bits_plan(xv, av, a, settings, training, report_scale ? &scale_view : nullptr, &search);
  if (report_scale) std::tie(scale, scale_view) = scale_array(qk::quantized_bits_scale_shape(xv, a, settings));
  nb::object result = run(call, std::move(out));
  report_search(search, std::move(info));
  return nb::make_tuple(result, scale);
}

nb::object quantized_relu(const InArray& x, const qk::QuantizedReluAttrs& a, const qk::Training& training, bool gradient,
                          nb::object out, nb::object grad_output, int x_dtype, int grad_output_dtype) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype);
  const GradOutput g(std::move(grad_output), grad_output_dtype);
  return run(gradient ? qk::quantized_relu_gradient_plan(xv, a, g.get()) : qk::quantized_relu_plan(xv, a, training), std::move(out));
}

nb::tuple quantized_linear(const InArray& x, nb::object alpha, const qk::QuantizedLinearAttrs& a, const qk::Settings& settings,
                           const qk::Training& training, bool gradient, nb::object out, nb::object info, nb::object grad_output,
                           int x_dtype, int grad_output_dtype) {
  qk::SearchInfo search;
  const pq::TensorView xv = qdq_view(x, "x", x_dtype);
  const GradOutput g(std::move(grad_output), grad_output_dtype);
  InArray alpha_array;
  pq::TensorView av = kNoTensor;
  if (!alpha.is_none()) {
    alpha_array = nb::cast<InArray>(alpha);
    av = view(alpha_array, "alpha");
  }
  nb::object scale = nb::none();
  pq::MutableTensorView scale_view;
  // As quantized_bits: planned once, the scale sized after validation and written when the plan runs.
  const pq::PlannedCall call = gradient ? qk::quantized_linear_gradient_plan(xv, av, a, settings, g.get())
                                        : qk::quantized_linear_plan(xv, av, a, settings, training, &scale_view, &search);
  if (!gradient) std::tie(scale, scale_view) = scale_array(qk::quantized_linear_scale_shape(xv, av, a, settings));
  nb::object result = run(call, std::move(out));
  report_search(search, std::move(info));
  return nb::make_tuple(result, scale);
}

}  // namespace

void bind_qkeras(nb::module_& m) {
  // ---- the attribute structs (defaults are the core's, which are QKeras')
  nb::enum_<qk::DataFormat>(m, "DataFormat", "keras.backend.image_data_format()")
      .value("channels_last", qk::DataFormat::kChannelsLast)
      .value("channels_first", qk::DataFormat::kChannelsFirst);
  nb::class_<qk::Settings>(m, "Settings", "Keras' global settings that QKeras reads, made explicit.")
      .def(nb::init<>())
      .def_rw("epsilon", &qk::Settings::epsilon, "keras.backend.epsilon() (float32)")
      .def_rw("image_data_format", &qk::Settings::image_data_format, "keras.backend.image_data_format()");
  nb::class_<qk::Training>(m, "Training", "Training mode (Keras learning phase 1) and the Philox seed of its noise.")
      .def(nb::init<>())
      .def_rw("enabled", &qk::Training::enabled)
      .def_rw("seed", &qk::Training::seed, "64-bit Philox key of this call");
  nb::class_<qk::QNoise>(m, "QNoise", "qnoise_factor q of the blend x + q * (xq - x).")
      .def(nb::init<>())
      .def_rw("factor", &qk::QNoise::factor)
      .def_rw("float32_variable", &qk::QNoise::float32_variable, "use_variables=True: q is a float32 variable");
  nb::enum_<qk::Alpha>(m, "Alpha", "How the scale is chosen: 1, the alpha tensor, or a per-channel search.")
      .value("none", qk::Alpha::kNone)
      .value("value", qk::Alpha::kValue)
      .value("auto", qk::Alpha::kAuto)
      .value("auto_po2", qk::Alpha::kAutoPo2);
  nb::class_<qk::ScaleAxis> scale_axis(m, "ScaleAxis", "scale_axis: None (the data format decides), one int, or a list of ints.");
  nb::enum_<qk::ScaleAxis::Kind>(scale_axis, "Kind")
      .value("none", qk::ScaleAxis::Kind::kNone)
      .value("int", qk::ScaleAxis::Kind::kInt)
      .value("list", qk::ScaleAxis::Kind::kList);
  scale_axis.def(nb::init<>()).def_rw("kind", &qk::ScaleAxis::kind).def_rw("axes", &qk::ScaleAxis::axes);
  nb::class_<qk::ElementsPerScale> elements(m, "ElementsPerScale",
                                            "elements_per_scale of alpha='auto_po2': None, one int, or a list of ints.");
  nb::enum_<qk::ElementsPerScale::Kind>(elements, "Kind")
      .value("none", qk::ElementsPerScale::Kind::kNone)
      .value("int", qk::ElementsPerScale::Kind::kInt)
      .value("list", qk::ElementsPerScale::Kind::kList);
  elements.def(nb::init<>()).def_rw("kind", &qk::ElementsPerScale::kind).def_rw("values", &qk::ElementsPerScale::values);

  nb::class_<qk::QuantizedBitsAttrs>(m, "QuantizedBitsAttrs", "quantized_bits' resolved configuration.")
      .def(nb::init<>())
      .def_rw("bits", &qk::QuantizedBitsAttrs::bits)
      .def_rw("integer", &qk::QuantizedBitsAttrs::integer)
      .def_rw("symmetric", &qk::QuantizedBitsAttrs::symmetric)
      .def_rw("keep_negative", &qk::QuantizedBitsAttrs::keep_negative)
      .def_rw("alpha", &qk::QuantizedBitsAttrs::alpha)
      .def_rw("use_stochastic_rounding", &qk::QuantizedBitsAttrs::use_stochastic_rounding)
      .def_rw("scale_axis", &qk::QuantizedBitsAttrs::scale_axis)
      .def_rw("qnoise", &qk::QuantizedBitsAttrs::qnoise)
      .def_rw("use_ste", &qk::QuantizedBitsAttrs::use_ste)
      .def_rw("elements_per_scale", &qk::QuantizedBitsAttrs::elements_per_scale)
      .def_rw("min_po2_exponent", &qk::QuantizedBitsAttrs::min_po2_exponent, nb::arg().none())
      .def_rw("max_po2_exponent", &qk::QuantizedBitsAttrs::max_po2_exponent, nb::arg().none())
      .def_rw("frozen_scale", &qk::QuantizedBitsAttrs::frozen_scale, "post_training_scale given (alpha is a string)");
  nb::class_<qk::QuantizedReluAttrs>(m, "QuantizedReluAttrs", "quantized_relu's resolved configuration.")
      .def(nb::init<>())
      .def_rw("bits", &qk::QuantizedReluAttrs::bits)
      .def_rw("integer", &qk::QuantizedReluAttrs::integer)
      .def_rw("use_sigmoid", &qk::QuantizedReluAttrs::use_sigmoid)
      .def_rw("negative_slope", &qk::QuantizedReluAttrs::negative_slope)
      .def_rw("use_stochastic_rounding", &qk::QuantizedReluAttrs::use_stochastic_rounding)
      .def_rw("relu_upper_bound", &qk::QuantizedReluAttrs::relu_upper_bound, nb::arg().none())
      .def_rw("is_quantized_clip", &qk::QuantizedReluAttrs::is_quantized_clip)
      .def_rw("qnoise", &qk::QuantizedReluAttrs::qnoise)
      .def_rw("use_ste", &qk::QuantizedReluAttrs::use_ste)
      .def_rw("enable_fast_inference", &qk::QuantizedReluAttrs::enable_fast_inference);
  nb::class_<qk::QuantizedLinearAttrs>(m, "QuantizedLinearAttrs", "quantized_linear's resolved configuration.")
      .def(nb::init<>())
      .def_rw("bits", &qk::QuantizedLinearAttrs::bits)
      .def_rw("integer", &qk::QuantizedLinearAttrs::integer)
      .def_rw("symmetric", &qk::QuantizedLinearAttrs::symmetric)
      .def_rw("keep_negative", &qk::QuantizedLinearAttrs::keep_negative)
      .def_rw("alpha", &qk::QuantizedLinearAttrs::alpha)
      .def_rw("use_stochastic_rounding", &qk::QuantizedLinearAttrs::use_stochastic_rounding)
      .def_rw("scale_axis", &qk::QuantizedLinearAttrs::scale_axis)
      .def_rw("qnoise", &qk::QuantizedLinearAttrs::qnoise);

  // ---- the ops
  auto tensor = tensor_arg;
  m.def("quantized_bits", &quantized_bits, tensor("x"), nb::arg("alpha").none(), nb::arg("attrs"), nb::arg("settings"),
        nb::arg("training"), nb::arg("gradient") = false, nb::arg("out").none() = nb::none(),
        nb::arg("info").none() = nb::none(), nb::arg("grad_output").none() = nb::none(), nb::arg("x_dtype") = -1,
        nb::arg("grad_output_dtype") = -1,
        "quantized_bits (see polyquant.qkeras): (output, reported scale or None); `info` (a dict) receives the "
        "scale search's passes; with gradient, `grad_output` multiplies the derivative (the backward's product). "
        "A bfloat16 x or grad_output travels as its uint16 storage with the dtype's code in x_dtype / "
        "grad_output_dtype (-1: the array's own dtype).");
  m.def("quantized_relu", &quantized_relu, tensor("x"), nb::arg("attrs"), nb::arg("training"), nb::arg("gradient") = false,
        nb::arg("out").none() = nb::none(), nb::arg("grad_output").none() = nb::none(), nb::arg("x_dtype") = -1,
        nb::arg("grad_output_dtype") = -1,
        "quantized_relu (see polyquant.qkeras); with gradient, `grad_output` multiplies the derivative. "
        "x_dtype / grad_output_dtype as for quantized_bits.");
  m.def("quantized_linear", &quantized_linear, tensor("x"), nb::arg("alpha").none(), nb::arg("attrs"), nb::arg("settings"),
        nb::arg("training"), nb::arg("gradient") = false, nb::arg("out").none() = nb::none(),
        nb::arg("info").none() = nb::none(), nb::arg("grad_output").none() = nb::none(), nb::arg("x_dtype") = -1,
        nb::arg("grad_output_dtype") = -1,
        "quantized_linear (see polyquant.qkeras): (output, quantization scale); `info` (a dict) receives the "
        "scale search's passes; with gradient, `grad_output` multiplies the derivative. x_dtype / "
        "grad_output_dtype as for quantized_bits.");
}

}  // namespace polyquant::python
