// Dims, dtype facts, numpy type promotion and broadcasting.
#include <algorithm>
#include <limits>
#include <sstream>

#include "kernels/convert/element.h"
#include "polyquant/error.h"
#include "polyquant/tensor.h"

namespace polyquant {

Dims::Dims(std::initializer_list<std::int64_t> values) : Dims(std::span<const std::int64_t>(values.begin(), values.size())) {}

Dims::Dims(std::span<const std::int64_t> values) {
  if (values.size() > static_cast<std::size_t>(kMaxRank)) {
    throw Error(ErrorKind::kValue, "tensor rank " + std::to_string(values.size()) + " exceeds the maximum of " +
                                       std::to_string(kMaxRank));
  }
  rank = static_cast<int>(values.size());
  std::copy(values.begin(), values.end(), v.begin());
}

std::int64_t Dims::numel() const {
  // A zero extent makes the product 0 whatever the others are; otherwise the product must fit an
  // int64 (a broadcast of huge extents would overflow it, which is undefined behaviour).
  for (int i = 0; i < rank; ++i) {
    if (v[static_cast<std::size_t>(i)] == 0) return 0;
  }
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(n, v[static_cast<std::size_t>(i)], &n)) {
      throw Error(ErrorKind::kValue, "shape " + str() + " has more than 2^63 - 1 elements");
    }
  }
  return n;
}

bool Dims::operator==(const Dims& o) const {
  return rank == o.rank && std::equal(v.begin(), v.begin() + rank, o.v.begin());
}

std::string Dims::str() const {
  std::ostringstream s;
  s << '(';
  for (int i = 0; i < rank; ++i) s << (i ? ", " : "") << v[static_cast<std::size_t>(i)];
  if (rank == 1) s << ',';
  s << ')';
  return s.str();
}

// Products of extents below saturate instead of overflowing (undefined behaviour): a shape whose
// element count exceeds int64 is rejected by numel() when a view is made of it, and the strides of
// an empty tensor (some extent 0, the others huge) are never used to address memory.
static std::int64_t saturating_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::int64_t>::max() : r;
}

Dims contiguous_strides(const Dims& shape) {
  Dims strides;
  strides.rank = shape.rank;
  std::int64_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    strides[i] = s;
    s = saturating_mul(s, std::max<std::int64_t>(shape[i], 1));
  }
  return strides;
}

std::string Device::str() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

bool Layout::is_contiguous() const {
  std::int64_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s = saturating_mul(s, shape[i]);
  }
  return true;
}

static void check_layout(const Dims& shape, const Dims& strides) {
  if (shape.rank != strides.rank) {
    throw Error(ErrorKind::kValue, "tensor shape " + shape.str() + " and strides " + strides.str() +
                                       " have different ranks");
  }
  for (int i = 0; i < shape.rank; ++i) {
    if (shape[i] < 0) throw Error(ErrorKind::kValue, "tensor shape " + shape.str() + " has a negative dimension");
  }
  (void)shape.numel();  // throws when the element count overflows int64
}

TensorView::TensorView(const void* d, DType t, const Dims& s) : TensorView(d, t, s, contiguous_strides(s)) {}
TensorView::TensorView(const void* d, DType t, const Dims& s, const Dims& st) {
  check_layout(s, st);
  dtype = t;
  shape = s;
  strides = st;
  data = d;
}
MutableTensorView::MutableTensorView(void* d, DType t, const Dims& s) : MutableTensorView(d, t, s, contiguous_strides(s)) {}
MutableTensorView::MutableTensorView(void* d, DType t, const Dims& s, const Dims& st) {
  check_layout(s, st);
  dtype = t;
  shape = s;
  strides = st;
  data = d;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "float16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kUInt16: return "uint16";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt4: return "int4";
    case DType::kUInt4: return "uint4";
    case DType::kInt2: return "int2";
    case DType::kUInt2: return "uint2";
    case DType::kFloat8E4M3FN: return "float8_e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8_e4m3fnuz";
    case DType::kFloat8E5M2: return "float8_e5m2";
    case DType::kFloat8E5M2FNUZ: return "float8_e5m2fnuz";
    case DType::kFloat8E8M0: return "float8_e8m0fnu";
    case DType::kFloat6E2M3: return "float6_e2m3fn";
    case DType::kFloat6E3M2: return "float6_e3m2fn";
    case DType::kFloat4E2M1: return "float4_e2m1fn";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) { return detail::element_size(dtype); }

bool is_floating(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kFloat32 || dtype == DType::kFloat64;
}

bool is_onnx_only(DType dtype) { return static_cast<int>(dtype) > static_cast<int>(DType::kBool); }

bool is_minifloat(DType dtype) {
  return is_onnx_only(dtype) && dtype != DType::kInt4 && dtype != DType::kUInt4 && dtype != DType::kInt2 &&
         dtype != DType::kUInt2;
}

namespace {
bool is_signed_int(DType t) { return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64; }

// The smallest float type that holds every value of an integer type, as numpy chooses it.
DType float_for_int(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8: return DType::kFloat16;
    case DType::kInt16:
    case DType::kUInt16: return DType::kFloat32;
    default: return DType::kFloat64;
  }
}

int float_rank(DType t) { return t == DType::kFloat16 ? 0 : t == DType::kFloat32 ? 1 : 2; }
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_onnx_only(a) || is_onnx_only(b)) {
    throw Error(ErrorKind::kType, std::string("no numpy promotion is defined here for ") + dtype_name(a) + " with " +
                                      dtype_name(b));
  }
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa || fb) {
    const DType x = fa ? a : float_for_int(a);
    const DType y = fb ? b : float_for_int(b);
    return float_rank(x) >= float_rank(y) ? x : y;
  }
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  // Integers: same signedness -> wider; mixed -> a signed type wide enough, or float64 for
  // uint64 with a signed type (numpy's rule).
  const std::size_t sa = dtype_size(a), sb = dtype_size(b);
  const bool ia = is_signed_int(a), ib = is_signed_int(b);
  if (ia == ib) return sa >= sb ? a : b;
  const DType s = ia ? a : b, u = ia ? b : a;
  const std::size_t ss = dtype_size(s), su = dtype_size(u);
  if (ss > su) return s;
  switch (su) {
    case 1: return DType::kInt16;
    case 2: return DType::kInt32;
    case 4: return DType::kInt64;
    default: return DType::kFloat64;
  }
}

Dims broadcast_shapes(std::span<const Dims> shapes, const char* what, std::span<const char* const> names) {
  Dims out;
  for (const Dims& s : shapes) out.rank = std::max(out.rank, s.rank);
  for (int i = 0; i < out.rank; ++i) out[i] = 1;
  for (const Dims& s : shapes) {
    for (int i = 0; i < s.rank; ++i) {
      const int o = out.rank - s.rank + i;
      const std::int64_t d = s[i];
      if (d == out[o] || d == 1) continue;
      if (out[o] == 1) {
        out[o] = d;
        continue;
      }
      std::string list;
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        if (!list.empty()) list += ", ";
        if (names.size() == shapes.size()) list += std::string(names[k]) + " ";
        list += shapes[k].str();
      }
      throw Error(ErrorKind::kValue, std::string(what) + ": shapes " + list +
                                         " cannot be broadcast together (numpy rules: trailing dimensions must "
                                         "be equal or 1)");
    }
  }
  try {
    (void)out.numel();
  } catch (const Error& e) {
    throw Error(ErrorKind::kValue, std::string(what) + ": the broadcast output " + e.what());
  }
  return out;
}

}  // namespace polyquant
