// Bindings of AIMET's affine ops and their gradients (polyquant.aimet): arrays plus dtype codes, and
// the attribute structs of polyquant/aimet.h (Grid, AffineArgs through an owner, QdqPath, AffineOp)
// bound with read-write fields, which polyquant.aimet fills per call.
#include "arrays.h"

namespace polyquant::python {
namespace {

// The core's AffineArgs holds block_size as a non-owning std::span; Python gets this owner instead
// (same fields, block_size a std::vector, empty meaning no blocks), bound as AffineArgs, and each
// call makes the core's view of it. Grid, QdqPath and AffineOp are the core's, bound as they are.
struct AffineArgsOwner {
  pq::aimet::Grid grid;
  std::vector<std::int64_t> block_size;

  pq::aimet::AffineArgs view() const {
    pq::aimet::AffineArgs args;
    args.grid = grid;
    args.block_size = std::span<const std::int64_t>(block_size.data(), block_size.size());
    return args;
  }
};

nb::object aimet_quantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                          int offset_dtype, const AffineArgsOwner& owner, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = owner.view();
  return run_qdq(pq::aimet::quantize_plan(xv, sv, ov, args), std::move(out));
}

nb::object aimet_quantize_dequantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype,
                                     const InArray& offset, int offset_dtype, const AffineArgsOwner& owner,
                                     pq::aimet::QdqPath path, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = owner.view();
  return run_qdq(pq::aimet::quantize_dequantize_plan(xv, sv, ov, args, path), std::move(out));
}

bool aimet_takes_shortcut(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                          int offset_dtype, const AffineArgsOwner& owner) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  return pq::aimet::takes_no_grad_shortcut(xv, sv, ov, owner.view());
}

// dequantize takes only block_size in the core (no grid): a list of ints, empty for no blocks.
nb::object aimet_dequantize(const InArray& x, int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset,
                            int offset_dtype, const std::vector<std::int64_t>& block_size, nb::object out) {
  const pq::TensorView xv = qdq_view(x, "tensor", x_dtype), sv = qdq_view(scale, "scale", scale_dtype),
                       ov = qdq_view(offset, "offset", offset_dtype);
  const std::span<const std::int64_t> blocks(block_size.data(), block_size.size());
  return run_qdq(pq::aimet::dequantize_plan(xv, sv, ov, blocks), std::move(out));
}

// Gradients of the training path: (grad_tensor, grad_scale, grad_offset), each None unless asked.
nb::tuple aimet_backward(pq::aimet::AffineOp affine_op, const InArray& grad_output, int grad_dtype, const InArray& x,
                         int x_dtype, const InArray& scale, int scale_dtype, const InArray& offset, int offset_dtype,
                         const AffineArgsOwner& owner, bool want_x, bool want_scale, bool want_offset, bool want_output) {
  const pq::TensorView gv = qdq_view(grad_output, "grad_output", grad_dtype), xv = qdq_view(x, "tensor", x_dtype),
                       sv = qdq_view(scale, "scale", scale_dtype), ov = qdq_view(offset, "offset", offset_dtype);
  const pq::aimet::AffineArgs args = owner.view();
  nb::object arrays[4] = {nb::none(), nb::none(), nb::none(), nb::none()};
  pq::MutableTensorView views[4];
  const pq::TensorView* like[4] = {&xv, &sv, &ov, &xv};
  const bool wanted[4] = {want_x, want_scale, want_offset, want_output};
  for (int k = 0; k < 4; ++k) {
    if (!wanted[k]) continue;
    // In a device call the inputs' framework allocates them on the device (arrays.h, run).
    const pq::TensorSpec spec{storage_dtype(like[k]->dtype), like[k]->shape};
    arrays[k] = in_device_call() ? allocate_on_device(spec) : allocate(spec);
    views[k] = out_view(arrays[k]);
    views[k].dtype = like[k]->dtype;
  }
  without_gil([&] { pq::aimet::affine_backward(affine_op, gv, xv, sv, ov, args, views[0], views[1], views[2], views[3]); });
  return nb::make_tuple(arrays[0], arrays[1], arrays[2], arrays[3]);
}

}  // namespace

void bind_aimet(nb::module_& m) {
  // ---- the attribute structs (polyquant/aimet.h; AffineArgs is the owner above)
  namespace am = pq::aimet;
  nb::class_<am::Grid>(m, "Grid", "The integer grid [qmin, qmax].")
      .def(nb::init<>())
      .def("__init__", [](am::Grid* g, std::int64_t qmin, std::int64_t qmax) { new (g) am::Grid{qmin, qmax}; },
           nb::arg("qmin"), nb::arg("qmax"))
      .def_rw("qmin", &am::Grid::qmin)
      .def_rw("qmax", &am::Grid::qmax);
  nb::class_<AffineArgsOwner>(m, "AffineArgs", "The affine ops' grid and block_size (empty: no blocks, broadcasting).")
      .def(nb::init<>())
      .def_rw("grid", &AffineArgsOwner::grid)
      .def_rw("block_size", &AffineArgsOwner::block_size);
  nb::enum_<am::QdqPath>(m, "QdqPath", "Which of AIMET's quantize_dequantize paths runs.")
      .value("no_grad", am::QdqPath::kNoGrad, "AIMET's no-grad path (torch's fake quantization where it applies)")
      .value("training", am::QdqPath::kTraining, "the formula, as AIMET's training path");
  nb::enum_<am::AffineOp>(m, "AffineOp", "The op whose gradients backward computes.")
      .value("quantize", am::AffineOp::kQuantize)
      .value("quantize_dequantize", am::AffineOp::kQuantizeDequantize)
      .value("dequantize", am::AffineOp::kDequantize)
      .value("quantize_dequantize_no_grad", am::AffineOp::kQuantizeDequantizeNoGrad,
             "quantize_dequantize where only the tensor requires grad (its forward is the no-grad path)");

  // ---- the ops
  auto tensor = tensor_arg;
  m.def("quantize", &aimet_quantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("args"), nb::arg("out").none() = nb::none(),
        "AIMET quantize (see polyquant.aimet.quantize); returns (array, dtype name).");
  m.def("quantize_dequantize", &aimet_quantize_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("args"), nb::arg("path"),
        nb::arg("out").none() = nb::none(),
        "AIMET quantize_dequantize (see polyquant.aimet); returns (array, dtype name).");
  m.def("takes_shortcut", &aimet_takes_shortcut, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"),
        nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"), nb::arg("args"),
        "Whether AIMET's no-grad quantize_dequantize runs torch's fake quantization here.");
  m.def("dequantize", &aimet_dequantize, tensor("tensor"), nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"),
        tensor("offset"), nb::arg("offset_dtype"), nb::arg("block_size"), nb::arg("out").none() = nb::none(),
        "AIMET dequantize (see polyquant.aimet.dequantize); block_size empty for no blocks. Returns (array, dtype name).");
  m.def("backward", &aimet_backward, nb::arg("op"), tensor("grad_output"), nb::arg("grad_dtype"), tensor("tensor"),
        nb::arg("tensor_dtype"), tensor("scale"), nb::arg("scale_dtype"), tensor("offset"), nb::arg("offset_dtype"),
        nb::arg("args"), nb::arg("want_tensor"), nb::arg("want_scale"), nb::arg("want_offset"), nb::arg("want_output") = false,
        "Gradients of AIMET's affine ops: (grad_tensor, grad_scale, grad_offset, output), None where not asked; "
        "output is the op's forward result, from the same pass where it can.");
}

}  // namespace polyquant::python
