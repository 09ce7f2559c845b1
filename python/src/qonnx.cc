// Bindings of the QONNX ops (polyquant.qonnx): numpy operands, a `weak` bitmask marking Python
// scalars, and the core's attribute structs (polyquant/qonnx.h: IntQuantAttrs, TruncV2Attrs,
// FloatQuantAttrs; RoundingMode from polyquant/rounding.h) bound as classes with read-write fields,
// which polyquant.qonnx fills per call.
#include "arrays.h"

namespace polyquant::python {
namespace {

namespace qo = pq::qonnx;

nb::object int_quant(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& bitwidth,
                     const qo::IntQuantAttrs& attrs, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       bv = view(bitwidth, "bitwidth", weak, 3);
  return run(qo::int_quant_plan(xv, sv, zv, bv, attrs), std::move(out));
}

nb::object bipolar_quant(const InArray& x, const InArray& scale, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale", weak, 1);
  return run(qo::bipolar_quant_plan(xv, sv), std::move(out));
}

// Trunc v1 has no attribute struct in the core: its one attribute is the rounding mode.
nb::object trunc_v1(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
                    const InArray& out_bitwidth, pq::RoundingMode rounding_mode, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       iv = view(in_bitwidth, "in_bitwidth", weak, 3), ov = view(out_bitwidth, "out_bitwidth", weak, 4);
  return run(qo::trunc_plan(xv, sv, zv, iv, ov, rounding_mode), std::move(out));
}

nb::object trunc_v2(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
                    const InArray& out_scale, const InArray& out_bitwidth, const qo::TruncV2Attrs& attrs, nb::object out,
                    unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1), zv = view(zeropt, "zeropt", weak, 2),
                       iv = view(in_bitwidth, "in_bitwidth", weak, 3), osv = view(out_scale, "out_scale", weak, 4),
                       ov = view(out_bitwidth, "out_bitwidth", weak, 5);
  return run(qo::trunc_v2_plan(xv, sv, zv, iv, osv, ov, attrs), std::move(out));
}

nb::object float_quant(const InArray& x, const InArray& scale, const InArray& exponent_bitwidth,
                       const InArray& mantissa_bitwidth, const InArray& exponent_bias, const InArray& max_val,
                       const qo::FloatQuantAttrs& attrs, nb::object out, unsigned weak) {
  const pq::TensorView xv = view(x, "x", weak, 0), sv = view(scale, "scale", weak, 1),
                       ev = view(exponent_bitwidth, "exponent_bitwidth", weak, 2),
                       mv = view(mantissa_bitwidth, "mantissa_bitwidth", weak, 3),
                       bv = view(exponent_bias, "exponent_bias", weak, 4), maxv = view(max_val, "max_val", weak, 5);
  return run(qo::float_quant_plan(xv, sv, ev, mv, bv, maxv, attrs), std::move(out));
}

}  // namespace

void bind_qonnx(nb::module_& m) {
  // ---- the attribute structs (polyquant/qonnx.h, polyquant/rounding.h; defaults are the core's)
  nb::enum_<pq::RoundingMode>(m, "RoundingMode", "QONNX's rounding_mode attribute (polyquant/rounding.h).")
      .value("half_even", pq::RoundingMode::kHalfEven, "ROUND / HALF_EVEN: nearest, ties to even")
      .value("ceil", pq::RoundingMode::kCeil, "CEIL: toward +inf")
      .value("floor", pq::RoundingMode::kFloor, "FLOOR: toward -inf")
      .value("up", pq::RoundingMode::kUp, "UP: away from zero")
      .value("down", pq::RoundingMode::kDown, "DOWN: toward zero")
      .value("half_up", pq::RoundingMode::kHalfUp, "HALF_UP: nearest, ties away from zero")
      .value("half_down", pq::RoundingMode::kHalfDown, "HALF_DOWN: nearest, ties toward zero");
  m.def("rounding_mode", [](const std::string& text) { return pq::parse_rounding_mode(text, "rounding_mode"); },
        nb::arg("text"),
        "The RoundingMode a QONNX rounding_mode string names (the core's parser: ASCII upper-casing, ValueError "
        "listing the allowed modes).");
  nb::class_<qo::IntQuantAttrs>(m, "IntQuantAttrs", "IntQuant's attributes.")
      .def(nb::init<>())
      .def_rw("is_signed", &qo::IntQuantAttrs::is_signed)
      .def_rw("narrow", &qo::IntQuantAttrs::narrow)
      .def_rw("rounding_mode", &qo::IntQuantAttrs::rounding_mode);
  nb::class_<qo::TruncV2Attrs>(m, "TruncV2Attrs", "Trunc v2's attributes.")
      .def(nb::init<>())
      .def_rw("is_signed", &qo::TruncV2Attrs::is_signed)
      .def_rw("narrow", &qo::TruncV2Attrs::narrow)
      .def_rw("rounding_mode", &qo::TruncV2Attrs::rounding_mode);
  nb::class_<qo::FloatQuantAttrs>(m, "FloatQuantAttrs", "FloatQuant's attributes.")
      .def(nb::init<>())
      .def_rw("has_inf", &qo::FloatQuantAttrs::has_inf)
      .def_rw("has_nan", &qo::FloatQuantAttrs::has_nan)
      .def_rw("has_subnormal", &qo::FloatQuantAttrs::has_subnormal)
      .def_rw("saturation", &qo::FloatQuantAttrs::saturation)
      .def_rw("rounding_mode", &qo::FloatQuantAttrs::rounding_mode)
      .def_rw("is_signed", &qo::FloatQuantAttrs::is_signed, "false: unsigned minifloat");

  // ---- the ops
  auto tensor = tensor_arg;
  m.def("int_quant", &int_quant, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("bitwidth"), nb::arg("attrs"),
        nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u, "IntQuant/Quant (see polyquant.qonnx.int_quant).");
  m.def("bipolar_quant", &bipolar_quant, tensor("x"), tensor("scale"), nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u,
        "BipolarQuant (see polyquant.qonnx.bipolar_quant).");
  m.def("trunc", &trunc_v1, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_bitwidth"), nb::arg("rounding_mode"), nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u,
        "Trunc v1 (see polyquant.qonnx.trunc).");
  m.def("trunc_v2", &trunc_v2, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_scale"), tensor("out_bitwidth"), nb::arg("attrs"), nb::arg("out").none() = nb::none(),
        nb::arg("weak") = 0u, "Trunc v2 (see polyquant.qonnx.trunc_v2).");
  m.def("float_quant", &float_quant, tensor("x"), tensor("scale"), tensor("exponent_bitwidth"),
        tensor("mantissa_bitwidth"), tensor("exponent_bias"), tensor("max_val"), nb::arg("attrs"),
        nb::arg("out").none() = nb::none(), nb::arg("weak") = 0u, "FloatQuant (see polyquant.qonnx.float_quant).");
}

}  // namespace polyquant::python
