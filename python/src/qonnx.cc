// Bindings of the QONNX ops (polyquant.qonnx): numpy operands, a `weak` bitmask marking Python scalars.
#include "arrays.h"

namespace polyquant::python {
namespace {

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

}  // namespace

void bind_qonnx(nb::module_& m) {
  auto tensor = tensor_arg;
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
}

}  // namespace polyquant::python
