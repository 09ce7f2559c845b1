// Bindings of ONNX QuantizeLinear / DequantizeLinear (polyquant.onnx): arrays plus dtype codes
// (arrays.h), and the core's attribute structs (polyquant/onnx_qdq.h: QuantizeLinearAttrs,
// DequantizeLinearAttrs) bound as classes with read-write fields, which polyquant.onnx fills per call.
// Their DType-valued attributes (output_dtype, precision) read and write ONNX TensorProto type
// numbers, 0 meaning unset, as the ONNX attributes do; an unsupported number is a ValueError on
// assignment.
#include "arrays.h"

namespace polyquant::python {
namespace {

namespace ox = pq::onnx;

std::optional<pq::DType> onnx_dtype_attr(int value, const char* name) {
  if (value == 0) return std::nullopt;
  const std::optional<pq::DType> t = ox::dtype_from_onnx(value);
  if (!t) fail(pq::ErrorKind::kValue, std::string(name) + ": " + std::to_string(value) + " is not an ONNX data type polyquant supports");
  return t;
}

int onnx_code(const std::optional<pq::DType>& t) { return t ? ox::onnx_type_of(*t) : 0; }

nb::object quantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                           std::optional<InArray> zp, int zp_dtype, const ox::QuantizeLinearAttrs& attrs, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "y_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "y_zero_point", zp_dtype);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq(ox::quantize_linear_plan(xv, sv, zp_ptr, attrs), std::move(out));
}

nb::object dequantize_linear(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                             std::optional<InArray> zp, int zp_dtype, const ox::DequantizeLinearAttrs& attrs, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "x", x_dtype), sv = qdq_view(scale, "x_scale", scale_dtype);
  std::optional<pq::TensorView> zv;
  if (zp) zv = qdq_view(*zp, "x_zero_point", zp_dtype);
  const pq::TensorView* zp_ptr = zv ? &*zv : nullptr;
  return run_qdq(ox::dequantize_linear_plan(xv, sv, zp_ptr, attrs), std::move(out));
}

// ONNX's packed sub-byte storage (polyquant/onnx_qdq.h). `codes` / `packed`: C-contiguous uint8
// arrays (the package checks dtypes and shapes and views the result).
using Bytes = nb::ndarray<const std::uint8_t, nb::c_contig, nb::device::cpu>;

nb::object pack_sub_byte(const Bytes& codes, int bits) {
  const auto n = static_cast<std::int64_t>(codes.size());
  nb::object out = allocate(pq::TensorSpec{pq::DType::kUInt8, pq::Dims{ox::packed_size(n, bits)}});
  const pq::MutableTensorView view = out_view(out);
  without_gil([&] { ox::pack_sub_byte(codes.data(), n, bits, static_cast<std::uint8_t*>(view.data)); });
  return out;
}

nb::object unpack_sub_byte(const Bytes& packed, std::int64_t n, int bits) {
  const std::int64_t need = ox::packed_size(n, bits);
  if (static_cast<std::int64_t>(packed.size()) < need) {
    fail(pq::ErrorKind::kValue, "packed: " + std::to_string(packed.size()) + " bytes hold fewer than the " + std::to_string(n) +
                                    " elements asked for (" + std::to_string(need) + " bytes needed)");
  }
  nb::object out = allocate(pq::TensorSpec{pq::DType::kUInt8, pq::Dims{n}});
  const pq::MutableTensorView view = out_view(out);
  without_gil([&] { ox::unpack_sub_byte(packed.data(), n, bits, static_cast<std::uint8_t*>(view.data)); });
  return out;
}

}  // namespace

void bind_onnx(nb::module_& m) {
  // ---- the attribute structs (defaults are the core's, which are ONNX's)
  nb::class_<ox::QuantizeLinearAttrs>(m, "QuantizeLinearAttrs", "QuantizeLinear's attributes.")
      .def(nb::init<>())
      .def_rw("axis", &ox::QuantizeLinearAttrs::axis)
      .def_rw("block_size", &ox::QuantizeLinearAttrs::block_size)
      .def_prop_rw(
          "output_dtype", [](const ox::QuantizeLinearAttrs& a) { return onnx_code(a.output_dtype); },
          [](ox::QuantizeLinearAttrs& a, int code) { a.output_dtype = onnx_dtype_attr(code, "output_dtype"); },
          "ONNX type number (0: unset)")
      .def_rw("saturate", &ox::QuantizeLinearAttrs::saturate)
      .def_prop_rw(
          "precision", [](const ox::QuantizeLinearAttrs& a) { return onnx_code(a.precision); },
          [](ox::QuantizeLinearAttrs& a, int code) { a.precision = onnx_dtype_attr(code, "precision"); },
          "ONNX type number (0: unset)");
  nb::class_<ox::DequantizeLinearAttrs>(m, "DequantizeLinearAttrs", "DequantizeLinear's attributes.")
      .def(nb::init<>())
      .def_rw("axis", &ox::DequantizeLinearAttrs::axis)
      .def_rw("block_size", &ox::DequantizeLinearAttrs::block_size)
      .def_prop_rw(
          "output_dtype", [](const ox::DequantizeLinearAttrs& a) { return onnx_code(a.output_dtype); },
          [](ox::DequantizeLinearAttrs& a, int code) { a.output_dtype = onnx_dtype_attr(code, "output_dtype"); },
          "ONNX type number (0: unset)");

  // ---- the ops
  auto tensor = tensor_arg;
  m.def("quantize_linear", &quantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("y_scale"), nb::arg("scale_dtype"),
        nb::arg("y_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("attrs"), nb::arg("out").none() = nb::none(),
        "ONNX QuantizeLinear (see polyquant.onnx.quantize_linear); returns (array, dtype name).");
  m.def("dequantize_linear", &dequantize_linear, tensor("x"), nb::arg("x_dtype"), tensor("x_scale"), nb::arg("scale_dtype"),
        nb::arg("x_zero_point").none(), nb::arg("zero_point_dtype"), nb::arg("attrs"), nb::arg("out").none() = nb::none(),
        "ONNX DequantizeLinear (see polyquant.onnx.dequantize_linear); returns (array, dtype name).");
  m.def("pack_sub_byte", &pack_sub_byte, nb::arg("codes"), nb::arg("bits"),
        "ONNX's packed storage (flat uint8) of n one-per-byte codes of `bits` (2 or 4) bits each.");
  m.def("unpack_sub_byte", &unpack_sub_byte, nb::arg("packed"), nb::arg("n"), nb::arg("bits"),
        "The n one-per-byte codes (flat uint8) held in ONNX's packed storage `packed`.");
}

}  // namespace polyquant::python
