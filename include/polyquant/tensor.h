// Tensor views, element types and numpy-style broadcasting: the vocabulary of every polyquant op.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "polyquant/export.h"

namespace polyquant {

// Element types a tensor view may carry. Parameters (scales, zero points, bit widths) may be any of
// numpy's (float16 .. bool); the data tensor X of a QONNX or QKeras op must be one of numpy's
// floating types.
//
// The types after kBool are the ONNX types numpy lacks (ml_dtypes' bfloat16, int4, float8_e4m3fn,
// ...): the Q/DQ ops (onnx_qdq.h, quark.h) read and write them, and the engine converts them
// like any other dtype. Sub-byte types are stored one element per byte (unpacked, as ml_dtypes and
// onnx's reference evaluator hold them), in the byte's low bits with the high bits zero (int4 -1
// is 0x0F).
enum class DType : std::uint8_t {
  kFloat16,
  kFloat32,
  kFloat64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kBool,
  kBFloat16,         // 1-8-7, as float32's upper half
  kInt4,             // [-8, 7]
  kUInt4,            // [0, 15]
  kInt2,             // [-2, 1]
  kUInt2,            // [0, 3]
  kFloat8E4M3FN,     // bias 7, no inf, NaN S.1111.111, max 448
  kFloat8E4M3FNUZ,   // bias 8, no inf, no -0, NaN 0x80, max 240
  kFloat8E5M2,       // bias 15, IEEE-like (inf and NaN), max 57344
  kFloat8E5M2FNUZ,   // bias 16, no inf, no -0, NaN 0x80, max 57344
  kFloat8E8M0,       // unsigned powers of two 2^(e-127), NaN 0xFF (scales only)
  kFloat6E2M3,       // bias 1, finite only, max 7.5
  kFloat6E3M2,       // bias 3, finite only, max 28
  kFloat4E2M1,       // bias 1, finite only, max 6
};

// True for the types after kBool (see DType).
POLYQUANT_API bool is_onnx_only(DType dtype);
// Minifloats: bfloat16, float8, float6, float4 (not float16/32/64).
POLYQUANT_API bool is_minifloat(DType dtype);

POLYQUANT_API const char* dtype_name(DType dtype);  // numpy / ml_dtypes spelling: "float32", "float8_e4m3fn", ...
POLYQUANT_API std::size_t dtype_size(DType dtype);
POLYQUANT_API bool is_floating(DType dtype);  // numpy's float16, float32, float64

// numpy's type promotion for the binary arithmetic the references perform (`a / b`, `a + b`),
// e.g. float32 with int64 gives float64, float16 with uint8 gives float16 (numpy >= 2, NEP 50,
// both operands arrays).
POLYQUANT_API DType promote_types(DType a, DType b);

// The most dimensions a tensor may have (numpy allows 64; ONNX models stay far below 8). A larger
// rank is an Error naming it, from the Dims constructors and the bindings.
inline constexpr int kMaxRank = 8;

// A shape or a stride list of at most kMaxRank entries.
struct Dims {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> v{};

  Dims() = default;
  Dims(std::initializer_list<std::int64_t> values);
  explicit Dims(std::span<const std::int64_t> values);
  std::int64_t operator[](int i) const { return v[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return v[static_cast<std::size_t>(i)]; }
  std::span<const std::int64_t> span() const { return {v.data(), static_cast<std::size_t>(rank)}; }
  std::int64_t numel() const;
  bool operator==(const Dims& o) const;
  std::string str() const;  // "(2, 3)"
};

// Where a tensor's memory lives. kCpu: host memory (the default). kCuda: memory of CUDA device
// `index` (a pointer from cudaMalloc, a caching allocator, managed memory...): ops on such views run
// on the CUDA backend (docs/cuda.md), asynchronously on this thread's stream (runtime.h,
// ScopedStream), and never read the data on the host.
enum class DeviceKind : std::uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // the CUDA device ordinal; 0 for the host
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device& o) const { return kind == o.kind && (kind == DeviceKind::kCpu || index == o.index); }
  std::string str() const;  // "cpu", "cuda:0"
};

inline constexpr Device kCpuDevice{};
inline Device cuda_device(int index) { return Device{DeviceKind::kCuda, index}; }

// Row-major (C order) strides, in elements, of a contiguous tensor of `shape`.
POLYQUANT_API Dims contiguous_strides(const Dims& shape);

// Shape, dtype, strides (in elements, any sign, 0 allowed) and device of a tensor.
struct Layout {
  DType dtype = DType::kFloat32;
  Dims shape;
  Dims strides;
  Device device;  // host memory unless set (see Device)
  std::int64_t numel() const { return shape.numel(); }
  bool is_contiguous() const;
};

// Read-only view of an input tensor.
//
// `weak` marks a 0-d view holding a Python bool, int or float (its value exact in the view's
// dtype: bool, int64 or float64). numpy 2 (NEP 50) lets such a scalar take the dtype of the array
// it meets unless its kind (bool < integer < float) is higher: a Python float meeting a float32
// array is float32, meeting an int8 array float64, and two Python scalars combine in Python
// (double) arithmetic. The references meet one scalar with several dtypes (qonnx's float_quant
// divides X by `scale` in X's dtype, then multiplies the float64 result by the same `scale`), so
// the ops apply the rule at each step of the reference's expression, rounding the value to each
// step's dtype. Bindings set it for Python scalars; C++ callers normally leave it false.
struct TensorView : Layout {
  const void* data = nullptr;
  bool weak = false;
  TensorView() = default;
  TensorView(const void* data, DType dtype, const Dims& shape);                      // contiguous
  TensorView(const void* data, DType dtype, const Dims& shape, const Dims& strides);  // strided
};

// Writable view of an output tensor. Output views may be strided too. An output may share memory
// with any input: with the identical layout (in place) the op writes directly; in any other layout
// (x reversed, transposed, shifted) it computes into a temporary buffer first, as numpy ufuncs do,
// so the result always equals that of a separate output.
struct MutableTensorView : Layout {
  void* data = nullptr;
  MutableTensorView() = default;
  MutableTensorView(void* data, DType dtype, const Dims& shape);
  MutableTensorView(void* data, DType dtype, const Dims& shape, const Dims& strides);
};

// Shape and dtype an op will produce; the caller allocates an output of this spec.
struct TensorSpec {
  DType dtype = DType::kFloat32;
  Dims shape;
};

// numpy broadcasting of `shapes` (right-aligned, 1 stretches); throws Error naming `what` (and
// each operand, when `names` has one name per shape) when the shapes are incompatible.
POLYQUANT_API Dims broadcast_shapes(std::span<const Dims> shapes, const char* what,
                                    std::span<const char* const> names = {});

}  // namespace polyquant
