// Bindings of ONNX QuantizeLinear / DequantizeLinear (polyquant.onnx): arrays plus dtype codes (arrays.h).
#include "arrays.h"

namespace polyquant::python {
namespace {

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

}  // namespace

void bind_onnx(nb::module_& m) {
  auto tensor = tensor_arg;
  m.def("quantize_linear", &quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"), nb::arg("scale_dtype"),
        nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"), nb::arg("block_size"),
        nb::arg("output_dtype"), nb::arg("saturate"), nb::arg("precision"), nb::arg("out").none() = nb::none(),
        "ONNX QuantizeLinear (see polyquant.onnx.quantize_linear); returns (array, dtype name).");
  m.def("dequantize_linear", &dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"), nb::arg("scale_dtype"),
        nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("axis"), nb::arg("block_size"),
        nb::arg("output_dtype"), nb::arg("out").none() = nb::none(),
        "ONNX DequantizeLinear (see polyquant.onnx.dequantize_linear); returns (array, dtype name).");
}

}  // namespace polyquant::python
