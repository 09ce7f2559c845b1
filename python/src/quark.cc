// Bindings of Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (polyquant.quark): arrays plus
// dtype codes (arrays.h), and the core's attribute struct (polyquant/quark.h: ExtendedAttrs, its
// Semantics enum) bound with read-write fields, which polyquant.quark fills per call.
#include "arrays.h"

namespace polyquant::python {
namespace {

namespace qr = pq::quark;

nb::object extended_quantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                    std::optional<InArray> zp, int zp_dtype, const qr::ExtendedAttrs& attrs,
                                    nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "y_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "y_zero_point", zp_dtype);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq(qr::extended_quantize_linear_plan(xv, sv, zp_ptr, attrs), std::move(out));
}

nb::object extended_dequantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                      std::optional<InArray> zp, int zp_dtype, const qr::ExtendedAttrs& attrs,
                                      nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "x_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "x_zero_point", zp_dtype);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq(qr::extended_dequantize_linear_plan(xv, sv, zp_ptr, attrs), std::move(out));
}

}  // namespace

void bind_quark(nb::module_& m) {
  // ---- the attribute struct (defaults are the core's)
  nb::enum_<qr::Semantics>(m, "Semantics", "Whose behaviour the ops follow where Quark's CPU kernels and the ONNX spec differ.")
      .value("quark", qr::Semantics::kQuarkCpu, "Quark's CPU kernels")
      .value("onnx", qr::Semantics::kOnnxSpec, "the ONNX spec");
  nb::class_<qr::ExtendedAttrs>(m, "ExtendedAttrs", "ExtendedQuantizeLinear's / ExtendedDequantizeLinear's attributes.")
      .def(nb::init<>())
      .def_rw("axis", &qr::ExtendedAttrs::axis)
      .def_rw("semantics", &qr::ExtendedAttrs::semantics);

  // ---- the ops
  auto tensor = tensor_arg;
  m.def("extended_quantize_linear", &extended_quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"),
        nb::arg("scale_dtype"), nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("attrs"),
        nb::arg("out").none() = nb::none(),
        "Quark ExtendedQuantizeLinear (see polyquant.quark); returns (array, dtype name).");
  m.def("extended_dequantize_linear", &extended_dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"),
        nb::arg("scale_dtype"), nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("attrs"),
        nb::arg("out").none() = nb::none(),
        "Quark ExtendedDequantizeLinear (see polyquant.quark); returns (array, dtype name).");
}

}  // namespace polyquant::python
