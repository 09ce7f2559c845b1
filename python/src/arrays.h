// Shared by every family's bindings: numpy arrays to polyquant tensor views and back, result
// allocation, and running a call with the GIL released. No numerics here. polyquant::Error becomes
// ValueError (kValue), TypeError (kType), OverflowError or RuntimeError (module.cc).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <utility>

#include "gil_release.h"
#include "polyquant/polyquant.h"

namespace polyquant::python {

namespace nb = nanobind;
namespace pq = polyquant;

// Inputs: any element type, any strides (nanobind hands them over in elements), read-only allowed,
// in host memory or (DLPack capsules from polyquant._common.device) on a CUDA device: the view
// carries the device, and ops without a device path refuse it by name.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<nb::numpy, nb::device::cpu>;
// Outputs on a device: any writable DLPack tensor.
using DeviceOutArray = nb::ndarray<>;

// Device calls (polyquant._common.device): between _device_call_enter(stream) and _device_call_exit()
// this thread's ops run on that CUDA stream, and an output not given is allocated by the Python
// side (polyquant._common.device._allocate: the inputs' framework, on their device).
bool in_device_call();
void bind_device_calls(nb::module_& m);

[[noreturn]] inline void fail(pq::ErrorKind kind, std::string message) { throw pq::Error(kind, message); }

// Tensor arguments: numpy arrays only (the package converts everything else first).
inline auto tensor_arg(const char* name) { return nb::arg(name).noconvert(); }

pq::DType to_dtype(nb::dlpack::dtype dt, const char* name);
// The device of a DLPack tensor (host memory, or a CUDA device; TypeError naming `name` otherwise).
pq::Device device_of(std::int32_t device_type, std::int32_t device_id, const char* name);
// A view of any dtype polyquant knows (numpy's and ml_dtypes' storage types).
pq::TensorView any_view(const InArray& a, const char* name);
// Views of QONNX / QKeras operands: numpy's dtypes only.
pq::TensorView view(const InArray& a, const char* name);
// Operand `bit` of a call whose bitmask `weak` marks the Python scalars (TensorView::weak; the
// package passes them 0-d, exact in bool/int64/float64).
pq::TensorView view(const InArray& a, const char* name, unsigned weak, int bit);
pq::MutableTensorView mutable_view(const OutArray& a);
// A fresh C-contiguous result of `spec`, allocated by numpy itself.
nb::object allocate(const pq::TensorSpec& spec);

// An output of `spec` on the device of the current device call, allocated by the inputs' framework.
nb::object allocate_on_device(const pq::TensorSpec& spec);

// The writable view of `out` (a numpy array on the CPU, or a writable DLPack tensor on a CUDA
// device; TypeError naming `out` otherwise).
pq::MutableTensorView out_view(const nb::object& out);

// Runs `spec` (with the GIL, it is cheap and may throw), allocates unless `out` was given (the op
// checks its shape and dtype), then `kernel(out)` without the GIL (gil_release.h's without_gil: a daemon thread still inside at
// interpreter exit parks instead of taking the GIL back). Returns the output array.
template <typename SpecFn, typename KernelFn>
nb::object run(SpecFn&& spec_fn, KernelFn&& kernel, nb::object out) {
  const pq::TensorSpec spec = spec_fn();
  if (out.is_none()) out = in_device_call() ? allocate_on_device(spec) : allocate(spec);
  const pq::MutableTensorView view = out_view(out);
  without_gil([&] { kernel(view); });
  return out;
}

// As run(), for an op planned once (its *_plan): the plan's spec sizes the output, the plan runs.
inline nb::object run(const pq::PlannedCall& call, nb::object out) {
  return run([&] { return call.spec(); }, [&](const pq::MutableTensorView& o) { call.run(o); }, std::move(out));
}

// ---- Tensors of ONNX-only dtypes (ONNX Q/DQ, Quark, AIMET) --------------------------------------
// ml_dtypes arrays (bfloat16, int4, float8_*, ...) arrive as uint8 / uint16 views of the same
// memory with the DType's code in `*_dtype` (-1: the array's own dtype); outputs of those types are
// allocated as uint8 / uint16 and returned with the dtype's name for the package to view.
pq::TensorView qdq_view(const InArray& a, const char* name, int dtype_code);
pq::DType storage_dtype(pq::DType t);
// polyquant's code of a dtype name (-1: unknown).
int dtype_code(const std::string& name);

// As run(), for ops whose output may have an ONNX-only dtype (allocated and viewed as its storage
// dtype): returns (array, dtype name).
template <typename SpecFn, typename KernelFn>
nb::object run_qdq(SpecFn&& spec_fn, KernelFn&& kernel, nb::object out) {
  const pq::TensorSpec spec = spec_fn();
  if (out.is_none()) {
    const pq::TensorSpec storage{storage_dtype(spec.dtype), spec.shape};
    out = in_device_call() ? allocate_on_device(storage) : allocate(storage);
  }
  pq::MutableTensorView view = out_view(out);
  if (view.dtype == storage_dtype(spec.dtype)) view.dtype = spec.dtype;
  without_gil([&] { kernel(view); });
  return nb::make_tuple(out, pq::dtype_name(spec.dtype));
}

// As run_qdq(), for an op planned once (its *_plan): the plan's spec sizes the output, the plan runs.
inline nb::object run_qdq(const pq::PlannedCall& call, nb::object out) {
  return run_qdq([&] { return call.spec(); }, [&](const pq::MutableTensorView& o) { call.run(o); }, std::move(out));
}

// One binding function per family (python/src/<family>.cc), called by module.cc with that family's
// submodule (polyquant._polyquant_ext.<family>; AIMET's three all bind into `aimet`).
void bind_qonnx(nb::module_& m);
void bind_qkeras(nb::module_& m);
void bind_onnx(nb::module_& m);
void bind_quark(nb::module_& m);
void bind_aimet(nb::module_& m);
void bind_aimet_analyzers(nb::module_& m);
void bind_aimet_quantizer(nb::module_& m);

}  // namespace polyquant::python
