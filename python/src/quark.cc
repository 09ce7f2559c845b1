// Bindings of Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (polyquant.quark).
#include "arrays.h"

namespace polyquant::python {
namespace {

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

}  // namespace

void bind_quark(nb::module_& m) {
  auto tensor = tensor_arg;
  m.def("extended_quantize_linear", &extended_quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"),
        nb::arg("scale_dtype"), nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"),
        nb::arg("semantics"), nb::arg("out").none() = nb::none(),
        "Quark ExtendedQuantizeLinear (see polyquant.quark); returns (array, dtype name).");
  m.def("extended_dequantize_linear", &extended_dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"),
        nb::arg("scale_dtype"), nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"),
        nb::arg("semantics"), nb::arg("out").none() = nb::none(),
        "Quark ExtendedDequantizeLinear (see polyquant.quark); returns (array, dtype name).");
}

}  // namespace polyquant::python
