// Numpy arrays to polyquant tensor views and back (arrays.h).
#include "arrays.h"

#include "buffer_cache.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace polyquant::python {

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
      case Code::Bfloat:
        if (dt.bits == 16) return pq::DType::kBFloat16;
        break;
      default:
        break;
    }
  }
  fail(pq::ErrorKind::kType, std::string(name) + ": unsupported element type (DLPack code " +
                                 std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
                                 " bits); expected float16/32/64, (u)int8/16/32/64 or bool");
}

pq::TensorView view(const InArray& a, const char* name) {
  pq::TensorView v = any_view(a, name);
  if (pq::is_onnx_only(v.dtype)) {
    fail(pq::ErrorKind::kType, std::string(name) + ": unsupported element type " + pq::dtype_name(v.dtype) +
                                   "; expected float16/32/64, (u)int8/16/32/64 or bool");
  }
  return v;
}

pq::TensorView any_view(const InArray& a, const char* name) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank > pq::kMaxRank) {
    fail(pq::ErrorKind::kValue, std::string(name) + ": rank " + std::to_string(rank) + " exceeds the maximum of " +
                                    std::to_string(pq::kMaxRank) + " dimensions");
  }
  pq::Dims shape;
  shape.rank = rank;
  for (int i = 0; i < rank; ++i) shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
  const pq::DType dtype = to_dtype(a.dtype(), name);
  const pq::Device device = device_of(a.device_type(), a.device_id(), name);
  pq::TensorView v;
  if (a.stride_ptr() == nullptr) {
    v = pq::TensorView(a.data(), dtype, shape);  // DLPack: C order
  } else {
    pq::Dims strides;
    strides.rank = rank;
    for (int i = 0; i < rank; ++i) strides[i] = a.stride(static_cast<std::size_t>(i));
    v = pq::TensorView(a.data(), dtype, shape, strides);
  }
  v.device = device;
  return v;
}

pq::TensorView view(const InArray& a, const char* name, unsigned weak, int bit) {
  pq::TensorView v = view(a, name);
  v.weak = ((weak >> bit) & 1u) != 0;
  return v;
}

pq::MutableTensorView out_view(const nb::object& out) {
  OutArray array;
  if (nb::try_cast(out, array)) return mutable_view(array);
  DeviceOutArray device_array;
  if (in_device_call() && nb::try_cast(out, device_array)) {
    const auto rank = static_cast<int>(device_array.ndim());
    if (rank > pq::kMaxRank) fail(pq::ErrorKind::kValue, "out: rank " + std::to_string(rank) + " exceeds the maximum");
    pq::Dims shape, strides;
    shape.rank = strides.rank = rank;
    for (int i = 0; i < rank; ++i) {
      shape[i] = static_cast<std::int64_t>(device_array.shape(static_cast<std::size_t>(i)));
      strides[i] = device_array.stride_ptr() != nullptr ? device_array.stride(static_cast<std::size_t>(i)) : 0;
    }
    if (device_array.stride_ptr() == nullptr) strides = pq::contiguous_strides(shape);
    pq::MutableTensorView v(device_array.data(), to_dtype(device_array.dtype(), "out"), shape, strides);
    v.device = device_of(device_array.device_type(), device_array.device_id(), "out");
    return v;
  }
  fail(pq::ErrorKind::kType, in_device_call() ? "out: expected a writable array on the inputs' CUDA device (a torch tensor, a CuPy array)"
                                              : "out: expected a writable numpy array on the CPU");
}

pq::Device device_of(std::int32_t device_type, std::int32_t device_id, const char* name) {
  // DLPack device types: 1 CPU, 3 CUDA host (pinned, host-readable), 2 CUDA, 13 CUDA managed.
  if (device_type == 1 || device_type == 3) return pq::kCpuDevice;
  if (device_type == 2 || device_type == 13) return pq::cuda_device(device_id);
  fail(pq::ErrorKind::kType, std::string(name) + ": arrays on DLPack device type " + std::to_string(device_type) +
                                 " are not supported (host memory and CUDA devices are)");
}

namespace {
thread_local std::vector<std::unique_ptr<pq::ScopedStream>> t_device_calls;
}  // namespace

bool in_device_call() { return !t_device_calls.empty(); }

nb::object allocate_on_device(const pq::TensorSpec& spec) {
  // Never released: a static nb::object would be destroyed after the interpreter (without the GIL).
  static const nb::handle allocate = nb::object(nb::module_::import_("polyquant._common.device").attr("_allocate")).release();
  nb::list shape;
  for (int i = 0; i < spec.shape.rank; ++i) shape.append(spec.shape[i]);
  return allocate(nb::tuple(shape), pq::dtype_name(spec.dtype));
}

nb::dlpack::dtype dlpack_dtype(pq::DType t);  // below

// A C-contiguous array of `shape` and `dtype` in memory polyquant owns on CUDA device `device`
// (allocate_device_memory), freed when the last DLPack consumer lets it go.
nb::object device_empty(const std::vector<std::int64_t>& shape, const std::string& dtype, int device) {
  const int code = dtype_code(dtype);
  if (code < 0) fail(pq::ErrorKind::kType, "dtype: unknown " + dtype);
  const auto t = static_cast<pq::DType>(code);
  std::size_t bytes = pq::dtype_size(t);
  std::vector<std::size_t> extents;
  for (const std::int64_t e : shape) {
    if (e < 0) fail(pq::ErrorKind::kValue, "shape: negative extent");
    extents.push_back(static_cast<std::size_t>(e));
    bytes *= static_cast<std::size_t>(e);
  }
  const pq::Device where = pq::cuda_device(device);
  void* p = pq::allocate_device_memory(where, bytes);
  struct Owned {
    pq::Device device;
    void* pointer;
  };
  nb::capsule owner(new Owned{where, p}, [](void* o) noexcept {
    auto* owned = static_cast<Owned*>(o);
    pq::free_device_memory(owned->device, owned->pointer);
    delete owned;
  });
  return nb::ndarray<nb::array_api>(p, extents.size(), extents.data(), owner, nullptr, dlpack_dtype(t), nb::device::cuda::value, device).cast();
}

void bind_device_calls(nb::module_& m) {
  m.def("_device_empty", &device_empty, nb::arg("shape"), nb::arg("dtype"), nb::arg("device"),
        "Internal (polyquant._common.device): an output array in device memory polyquant owns (for JAX).");
  m.def("_device_order_after", [](int device, std::uintptr_t waiting, std::uintptr_t producer) {
    pq::order_stream_after(pq::cuda_device(device), reinterpret_cast<void*>(waiting), reinterpret_cast<void*>(producer));
  }, nb::arg("device"), nb::arg("waiting"), nb::arg("producer"),
        "Internal (polyquant._common.device): CUDA stream `waiting` runs after the work queued on `producer` so far.");
  m.def("_device_call_enter", [](std::uintptr_t stream) {
    t_device_calls.push_back(std::make_unique<pq::ScopedStream>(reinterpret_cast<void*>(stream)));
  }, nb::arg("stream"), "Internal (polyquant._common.device): this thread's ops run on CUDA stream `stream` (0: the legacy default).");
  m.def("_device_call_exit", [] {
    if (!t_device_calls.empty()) t_device_calls.pop_back();
  }, "Internal: ends the innermost _device_call_enter.");
}

pq::MutableTensorView mutable_view(const OutArray& a) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank > pq::kMaxRank) {
    fail(pq::ErrorKind::kValue, "out: rank " + std::to_string(rank) + " exceeds the maximum of " +
                                    std::to_string(pq::kMaxRank) + " dimensions");
  }
  pq::Dims shape, strides;
  shape.rank = strides.rank = rank;
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    strides[i] = a.stride(static_cast<std::size_t>(i));
  }
  return pq::MutableTensorView(a.data(), to_dtype(a.dtype(), "out"), shape, strides);
}

// The DLPack type of a dtype numpy has (every DType but the ONNX-only ones, which callers allocate
// as their storage dtype).
nb::dlpack::dtype dlpack_dtype(pq::DType t) {
  using Code = nb::dlpack::dtype_code;
  const auto bits = static_cast<std::uint8_t>(8 * pq::dtype_size(t));
  switch (t) {
    case pq::DType::kFloat16:
    case pq::DType::kFloat32:
    case pq::DType::kFloat64:
      return {static_cast<std::uint8_t>(Code::Float), bits, 1};
    case pq::DType::kInt8:
    case pq::DType::kInt16:
    case pq::DType::kInt32:
    case pq::DType::kInt64:
      return {static_cast<std::uint8_t>(Code::Int), bits, 1};
    case pq::DType::kUInt8:
    case pq::DType::kUInt16:
    case pq::DType::kUInt32:
    case pq::DType::kUInt64:
      return {static_cast<std::uint8_t>(Code::UInt), bits, 1};
    case pq::DType::kBool:
      return {static_cast<std::uint8_t>(Code::Bool), 8, 1};
    default:
      fail(pq::ErrorKind::kRuntime, std::string("allocate: no numpy dtype for ") + pq::dtype_name(t));
  }
}

// A fresh C-contiguous result of `spec`. Large ones (buffer_cache.h) take a reused buffer whose
// pages are already faulted in, owned by the array through the cache's capsule; small ones, and
// every one with the cache off, are numpy's (its allocator hugepage-advises large blocks too).
nb::object allocate(const pq::TensorSpec& spec) {
  std::size_t bytes = pq::dtype_size(spec.dtype);
  std::size_t shape[pq::kMaxRank];
  for (int i = 0; i < spec.shape.rank; ++i) {
    shape[i] = static_cast<std::size_t>(spec.shape[i]);
    bytes *= shape[i];
  }
  if (bytes >= kMinCachedBytes) {
    CachedBuffer buffer = cached_buffer(bytes);
    if (buffer.data != nullptr) {
      return OutArray(buffer.data, static_cast<std::size_t>(spec.shape.rank), shape, buffer.owner, nullptr,
                      dlpack_dtype(spec.dtype))
          .cast();
    }
  }
  static nb::object empty = nb::module_::import_("numpy").attr("empty");
  nb::list shape_list;
  for (int i = 0; i < spec.shape.rank; ++i) shape_list.append(spec.shape[i]);
  return empty(nb::tuple(shape_list), pq::dtype_name(spec.dtype));
}

pq::TensorView qdq_view(const InArray& a, const char* name, int dtype_code) {
  pq::TensorView v = any_view(a, name);
  if (dtype_code < 0) return v;
  const auto t = static_cast<pq::DType>(dtype_code);
  if (dtype_code > static_cast<int>(pq::DType::kFloat4E2M1) || pq::dtype_size(t) != pq::dtype_size(v.dtype)) {
    fail(pq::ErrorKind::kType, std::string(name) + ": internal dtype code " + std::to_string(dtype_code) + " does not fit the array");
  }
  v.dtype = t;
  return v;
}

pq::DType storage_dtype(pq::DType t) {
  if (!pq::is_onnx_only(t)) return t;
  return pq::dtype_size(t) == 2 ? pq::DType::kUInt16 : pq::DType::kUInt8;
}

int dtype_code(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(pq::DType::kFloat4E2M1); ++c) {
    if (name == pq::dtype_name(static_cast<pq::DType>(c))) return c;
  }
  return -1;
}

}  // namespace polyquant::python
