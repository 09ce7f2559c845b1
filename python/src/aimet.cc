// Bindings of AIMET's affine ops and their gradients (polyquant.aimet): arrays plus dtype codes.
#include "arrays.h"

namespace polyquant::python {
namespace {

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

}  // namespace

void bind_aimet(nb::module_& m) {
  auto tensor = tensor_arg;
  m.def("quantize", &aimet_quantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("block_size").none(),
        nb::arg("out").none() = nb::none(), "AIMET quantize (see polyquant.aimet.quantize); returns (array, dtype name).");
  m.def("quantize_dequantize", &aimet_quantize_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"),
        nb::arg("block_size").none(), nb::arg("training"), nb::arg("out").none() = nb::none(),
        "AIMET quantize_dequantize (see polyquant.aimet); training=False is AIMET's no-grad path. Returns (array, dtype name).");
  m.def("takes_shortcut", &aimet_takes_shortcut, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("qmin"), nb::arg("qmax"),
        nb::arg("block_size").none(), "Whether AIMET's no-grad quantize_dequantize runs torch's fake quantization here.");
  m.def("dequantize", &aimet_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("block_size").none(), nb::arg("out").none() = nb::none(),
        "AIMET dequantize (see polyquant.aimet.dequantize); returns (array, dtype name).");
  m.def("backward", &aimet_backward, nb::arg("op"), tensor("grad_output"), nb::arg("grad_dtype"), tensor("tensor"),
        nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"),
        nb::arg("qmin"), nb::arg("qmax"), nb::arg("block_size").none(), nb::arg("want_tensor"), nb::arg("want_scale"),
        nb::arg("want_offset"),
        "Gradients of AIMET's training path (op 0 quantize, 1 quantize_dequantize, 2 dequantize): "
        "(grad_tensor, grad_scale, grad_offset), None where not asked.");
}

}  // namespace polyquant::python
