// polyquant._polyquant_ext: maps numpy arrays to polyquant tensor views and back. No numerics here:
// each op asks the core for the output spec, allocates the result, runs the kernel with the GIL
// released and returns. polyquant::Error becomes ValueError (kValue) or TypeError (kType).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "polyquant/polyquant.h"

namespace nb = nanobind;
namespace pq = polyquant;

namespace {

// Inputs: any element type, any strides (nanobind hands them over in elements), read-only allowed.
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy, nb::device::cpu>;

constexpr std::size_t kOutputAlignment = 64;

[[noreturn]] void fail(pq::ErrorKind kind, std::string message) { throw pq::Error(kind, message); }

pq::DType to_dtype(nb::dlpack::dtype dt, const char* name) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    switch (static_cast<Code>(dt.code)) {
      case Code::Float:
        if (dt.bits == 16) return pq::DType::kFloat16;
        if (dt.bits == 32) return pq::DType::kFloat32;
        if (dt.bits == 64) return pq::DType::kFloat64;
        break;
      case Code::Int:
        if (dt.bits == 8) return pq::DType::kInt8;
        if (dt.bits == 16) return pq::DType::kInt16;
        if (dt.bits == 32) return pq::DType::kInt32;
        if (dt.bits == 64) return pq::DType::kInt64;
        break;
      case Code::UInt:
        if (dt.bits == 8) return pq::DType::kUInt8;
        if (dt.bits == 16) return pq::DType::kUInt16;
        if (dt.bits == 32) return pq::DType::kUInt32;
        if (dt.bits == 64) return pq::DType::kUInt64;
        break;
      case Code::Bool:
        if (dt.bits == 8) return pq::DType::kBool;
        break;
      default:
        break;
    }
  }
  fail(pq::ErrorKind::kType, std::string(name) + ": unsupported element type (DLPack code " +
                                 std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
                                 " bits); expected float16/32/64, (u)int8/16/32/64 or bool");
}

nb::dlpack::dtype to_nb_dtype(pq::DType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, std::size_t bytes) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bytes * 8), 1};
  };
  const std::size_t bytes = pq::dtype_size(dtype);
  switch (dtype) {
    case pq::DType::kFloat16:
    case pq::DType::kFloat32:
    case pq::DType::kFloat64:
      return make(Code::Float, bytes);
    case pq::DType::kInt8:
    case pq::DType::kInt16:
    case pq::DType::kInt32:
    case pq::DType::kInt64:
      return make(Code::Int, bytes);
    case pq::DType::kUInt8:
    case pq::DType::kUInt16:
    case pq::DType::kUInt32:
    case pq::DType::kUInt64:
      return make(Code::UInt, bytes);
    case pq::DType::kBool:
      return make(Code::Bool, bytes);
  }
  fail(pq::ErrorKind::kType, "internal: unknown output dtype");
}

pq::TensorView view(const InArray& a, const char* name) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank > pq::kMaxRank) {
    fail(pq::ErrorKind::kValue, std::string(name) + ": rank " + std::to_string(rank) + " exceeds the maximum of " +
                                    std::to_string(pq::kMaxRank) + " dimensions");
  }
  pq::Dims shape;
  shape.rank = rank;
  for (int i = 0; i < rank; ++i) shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
  const pq::DType dtype = to_dtype(a.dtype(), name);
  if (a.stride_ptr() == nullptr) return pq::TensorView(a.data(), dtype, shape);  // DLPack: C order
  pq::Dims strides;
  strides.rank = rank;
  for (int i = 0; i < rank; ++i) strides[i] = a.stride(static_cast<std::size_t>(i));
  return pq::TensorView(a.data(), dtype, shape, strides);
}

// A freshly allocated, C-contiguous result of `spec`, owned by a capsule (freed with the array).
struct Output {
  OutArray array;
  pq::MutableTensorView view;
};

void free_output(void* p) noexcept { ::operator delete(p, std::align_val_t{kOutputAlignment}); }

Output allocate(const pq::TensorSpec& spec) {
  const std::int64_t numel = spec.shape.numel();
  const std::size_t bytes = static_cast<std::size_t>(numel) * pq::dtype_size(spec.dtype);
  std::unique_ptr<void, decltype(&free_output)> buffer(
      ::operator new(bytes == 0 ? kOutputAlignment : bytes, std::align_val_t{kOutputAlignment}), &free_output);
  void* data = buffer.get();
  nb::capsule owner(data, free_output);  // may throw; `buffer` frees the memory until here
  buffer.release();
  std::size_t shape[pq::kMaxRank];
  for (int i = 0; i < spec.shape.rank; ++i) shape[i] = static_cast<std::size_t>(spec.shape[i]);
  OutArray array(data, static_cast<std::size_t>(spec.shape.rank), shape, owner, nullptr, to_nb_dtype(spec.dtype));
  return {std::move(array), pq::MutableTensorView(data, spec.dtype, spec.shape)};
}

// Runs `spec` (with the GIL, it is cheap and may throw), allocates, then `kernel(out)` without it.
template <typename SpecFn, typename KernelFn>
OutArray run(SpecFn&& spec_fn, KernelFn&& kernel) {
  const pq::TensorSpec spec = spec_fn();
  Output out = allocate(spec);
  {
    nb::gil_scoped_release release;
    kernel(out.view);
  }
  return std::move(out.array);
}

pq::RoundingMode mode(const std::string& text) { return pq::parse_rounding_mode(text, "rounding_mode"); }

OutArray int_quant(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& bitwidth,
                   bool is_signed, bool narrow, const std::string& rounding_mode) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale"), zv = view(zeropt, "zeropt"),
                       bv = view(bitwidth, "bitwidth");
  const pq::qonnx::IntQuantAttrs attrs{is_signed, narrow, mode(rounding_mode)};
  return run([&] { return pq::qonnx::int_quant_spec(xv, sv, zv, bv, attrs); },
             [&](const pq::MutableTensorView& out) { pq::qonnx::int_quant(xv, sv, zv, bv, attrs, out); });
}

OutArray bipolar_quant(const InArray& x, const InArray& scale) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale");
  return run([&] { return pq::qonnx::bipolar_quant_spec(xv, sv); },
             [&](const pq::MutableTensorView& out) { pq::qonnx::bipolar_quant(xv, sv, out); });
}

OutArray trunc_v1(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
               const InArray& out_bitwidth, const std::string& rounding_mode) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale"), zv = view(zeropt, "zeropt"),
                       iv = view(in_bitwidth, "in_bitwidth"), ov = view(out_bitwidth, "out_bitwidth");
  const pq::RoundingMode rm = mode(rounding_mode);
  return run([&] { return pq::qonnx::trunc_spec(xv, sv, zv, iv, ov); },
             [&](const pq::MutableTensorView& out) { pq::qonnx::trunc(xv, sv, zv, iv, ov, rm, out); });
}

OutArray trunc_v2(const InArray& x, const InArray& scale, const InArray& zeropt, const InArray& in_bitwidth,
                  const InArray& out_scale, const InArray& out_bitwidth, bool is_signed, bool narrow,
                  const std::string& rounding_mode) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale"), zv = view(zeropt, "zeropt"),
                       iv = view(in_bitwidth, "in_bitwidth"), osv = view(out_scale, "out_scale"),
                       ov = view(out_bitwidth, "out_bitwidth");
  const pq::qonnx::TruncV2Attrs attrs{is_signed, narrow, mode(rounding_mode)};
  return run([&] { return pq::qonnx::trunc_v2_spec(xv, sv, zv, iv, osv, ov); },
             [&](const pq::MutableTensorView& out) { pq::qonnx::trunc_v2(xv, sv, zv, iv, osv, ov, attrs, out); });
}

OutArray float_quant(const InArray& x, const InArray& scale, const InArray& exponent_bitwidth,
                     const InArray& mantissa_bitwidth, const InArray& exponent_bias, const InArray& max_val,
                     bool has_inf, bool has_nan, bool has_subnormal, bool saturation,
                     const std::string& rounding_mode) {
  const pq::TensorView xv = view(x, "x"), sv = view(scale, "scale"), ev = view(exponent_bitwidth, "exponent_bitwidth"),
                       mv = view(mantissa_bitwidth, "mantissa_bitwidth"), bv = view(exponent_bias, "exponent_bias"),
                       maxv = view(max_val, "max_val");
  const pq::qonnx::FloatQuantAttrs attrs{has_inf, has_nan, has_subnormal, saturation, mode(rounding_mode)};
  return run([&] { return pq::qonnx::float_quant_spec(xv, sv, ev, mv, bv, maxv, attrs); },
             [&](const pq::MutableTensorView& out) { pq::qonnx::float_quant(xv, sv, ev, mv, bv, maxv, attrs, out); });
}

nb::dict runtime_info() {
  const pq::RuntimeInfo info = pq::runtime_info();
  nb::list supported;
  for (const std::string& isa : info.supported) supported.append(nb::str(isa.c_str(), isa.size()));
  nb::dict d;
  d["version"] = nb::str(info.version.c_str(), info.version.size());
  d["isa"] = nb::str(info.isa.c_str(), info.isa.size());
  d["supported"] = supported;
  d["num_threads"] = info.num_threads;
  return d;
}

// Plain memcpy between two C-contiguous buffers of equal byte size: the benchmark's in-process
// bandwidth baseline, so it runs with the GIL released like the ops do.
using ContigIn = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using ContigOut = nb::ndarray<nb::c_contig, nb::device::cpu>;

void copy(const ContigIn& src, const ContigOut& dst) {
  if (src.nbytes() != dst.nbytes()) {
    fail(pq::ErrorKind::kValue, "copy: dst has " + std::to_string(dst.nbytes()) + " bytes but src has " +
                                    std::to_string(src.nbytes()));
  }
  const void* from = src.data();
  void* to = dst.data();
  const std::size_t bytes = src.nbytes();
  nb::gil_scoped_release release;
  if (bytes != 0) std::memcpy(to, from, bytes);
}

}  // namespace

NB_MODULE(_polyquant_ext, m) {
  m.doc() = "polyquant's compiled core (private; use polyquant.qonnx)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pq::Error& e) {
      PyErr_SetString(e.kind() == pq::ErrorKind::kType ? PyExc_TypeError : PyExc_ValueError, e.what());
    }
  });

  // Tensor arguments: numpy arrays only (polyquant.qonnx converts everything else first).
  auto tensor = [](const char* name) { return nb::arg(name).noconvert(); };
  m.def("int_quant", &int_quant, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("bitwidth"), nb::arg("signed"),
        nb::arg("narrow"), nb::arg("rounding_mode"), "IntQuant/Quant (see polyquant.qonnx.int_quant).");
  m.def("bipolar_quant", &bipolar_quant, tensor("x"), tensor("scale"),
        "BipolarQuant (see polyquant.qonnx.bipolar_quant).");
  m.def("trunc", &trunc_v1, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_bitwidth"), nb::arg("rounding_mode"), "Trunc v1 (see polyquant.qonnx.trunc).");
  m.def("trunc_v2", &trunc_v2, tensor("x"), tensor("scale"), tensor("zeropt"), tensor("in_bitwidth"),
        tensor("out_scale"), tensor("out_bitwidth"), nb::arg("signed"), nb::arg("narrow"), nb::arg("rounding_mode"),
        "Trunc v2 (see polyquant.qonnx.trunc_v2).");
  m.def("float_quant", &float_quant, tensor("x"), tensor("scale"), tensor("exponent_bitwidth"),
        tensor("mantissa_bitwidth"), tensor("exponent_bias"), tensor("max_val"), nb::arg("has_inf"),
        nb::arg("has_nan"), nb::arg("has_subnormal"), nb::arg("saturation"), nb::arg("rounding_mode"),
        "FloatQuant (see polyquant.qonnx.float_quant).");
  m.def("version", [] { return std::string(POLYQUANT_PY_VERSION); },
        "The polyquant version this module was built from.");
  m.def("runtime_info", &runtime_info,
        "Version, kernel set in use, kernel sets this CPU supports, worker threads.");
  m.def("copy", &copy, nb::arg("src").noconvert(), nb::arg("dst").noconvert(),
        "memcpy of C-contiguous src into dst (same byte size), GIL released.");
}
