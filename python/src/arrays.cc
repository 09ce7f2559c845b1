// Numpy arrays to polyquant tensor views and back (arrays.h).
#include "arrays.h"

#include <cstddef>
#include <cstdint>

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
  if (a.stride_ptr() == nullptr) return pq::TensorView(a.data(), dtype, shape);  // DLPack: C order
  pq::Dims strides;
  strides.rank = rank;
  for (int i = 0; i < rank; ++i) strides[i] = a.stride(static_cast<std::size_t>(i));
  return pq::TensorView(a.data(), dtype, shape, strides);
}

pq::TensorView view(const InArray& a, const char* name, unsigned weak, int bit) {
  pq::TensorView v = view(a, name);
  v.weak = ((weak >> bit) & 1u) != 0;
  return v;
}

pq::MutableTensorView out_view(const nb::object& out) {
  OutArray array;
  if (!nb::try_cast(out, array)) fail(pq::ErrorKind::kType, "out: expected a writable numpy array on the CPU");
  return mutable_view(array);
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

// A fresh C-contiguous result of `spec`, allocated by numpy itself: its allocator caches and
// hugepage-advises large blocks, which makes first-touch page faults far cheaper than a plain
// operator new for outputs of hundreds of MiB.
nb::object allocate(const pq::TensorSpec& spec) {
  static nb::object empty = nb::module_::import_("numpy").attr("empty");
  nb::list shape;
  for (int i = 0; i < spec.shape.rank; ++i) shape.append(spec.shape[i]);
  return empty(nb::tuple(shape), pq::dtype_name(spec.dtype));
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
