// Glue between the ONNX Runtime custom-op C API and polyquant: tensors in and out, attributes,
// statuses and shape inference. No numerics live here; every op is one polyquant call.
//
// The library is built against the ORT 1.17 headers and asks the runtime for API version 17
// (kOrtApiVersion), the oldest table that has everything used here (shape inference and op
// version ranges arrived in 17), so it loads in ONNX Runtime 1.17 and all later versions.
#pragma once

#ifndef ORT_API_MANUAL_INIT
#define ORT_API_MANUAL_INIT
#endif
#include <onnxruntime_cxx_api.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "polyquant/error.h"
#include "polyquant/tensor.h"

namespace polyquant::ort {

inline constexpr uint32_t kOrtApiVersion = 17;
static_assert(ORT_API_VERSION >= kOrtApiVersion, "the ONNX Runtime headers must be version 1.17 or later");

// The API table handed to RegisterCustomOps; set once, before any op is used.
const OrtApi& api();
void set_api(const OrtApi* table);

// A failure that already is an ORT status (taken from an API call), carried to the ABI boundary.
class OrtFailure : public std::exception {
 public:
  OrtFailure(OrtErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  OrtErrorCode code() const { return code_; }

 private:
  OrtErrorCode code_;
  std::string message_;
};

// Throws OrtFailure (releasing `status`) when `status` is an error; `context` prefixes the message.
void check(OrtStatus* status, const std::string& context = {});

// Turns the exception in flight into a status whose message starts with `prefix`
// (e.g. "IntQuant node 'q0': "). Call only inside a catch block.
OrtStatus* status_from_current_exception(const std::string& prefix) noexcept;

// ---- element types --------------------------------------------------------------------------
// ONNX Runtime's element types after the 1.17 headers' last one (FLOAT8E5M2FNUZ = 20). ORT keeps its
// C enum values stable; they equal ONNX's TensorProto numbers up to FLOAT4E2M1 (23) and differ after
// it (ONNX: FLOAT8E8M0 24, UINT2 25, INT2 26; ORT: UINT2 24, INT2 25, FLOAT8E8M0 26). ONNX's float6
// types (27, 28) have no ORT element type at all (ORT 1.32).
inline constexpr auto kOrtUInt4 = static_cast<ONNXTensorElementDataType>(21);
inline constexpr auto kOrtInt4 = static_cast<ONNXTensorElementDataType>(22);
inline constexpr auto kOrtFloat4E2M1 = static_cast<ONNXTensorElementDataType>(23);
inline constexpr auto kOrtUInt2 = static_cast<ONNXTensorElementDataType>(24);
inline constexpr auto kOrtInt2 = static_cast<ONNXTensorElementDataType>(25);
inline constexpr auto kOrtFloat8E8M0 = static_cast<ONNXTensorElementDataType>(26);

// ONNX Runtime element types <-> polyquant dtypes, every type both know (bfloat16, float8, the packed
// 4- and 2-bit types included). to_dtype throws polyquant::Error (kType) naming `what` for the others
// (string, complex, ...); to_onnx gives UNDEFINED for dtypes ORT has no element type for (float6).
DType to_dtype(ONNXTensorElementDataType type, const char* what);
std::optional<DType> try_to_dtype(ONNXTensorElementDataType type);
ONNXTensorElementDataType to_onnx(DType dtype);
const char* onnx_type_name(ONNXTensorElementDataType type);

// Elements per byte in ORT's storage: 2 for int4/uint4/float4e2m1, 4 for int2/uint2, else 1 (the
// element takes dtype_size bytes). Packed elements fill a byte from its low bits up, the tail of the
// last byte zero.
int elements_per_byte(DType dtype);

// Whether the runtime can hold tensors of `type` (creates a one-element tensor with the default
// allocator). Used before registering ops whose declared types name element types an older runtime
// lacks, which would fail the registration.
bool runtime_has_element_type(ONNXTensorElementDataType type);

// The runtime's version from OrtApiBase::GetVersionString ("1.32.0" -> {1, 32}); {0, 0} if unreadable.
struct RuntimeVersion {
  int major = 0;
  int minor = 0;
  bool at_least(int ma, int mi) const { return major > ma || (major == ma && minor >= mi); }
};
RuntimeVersion parse_runtime_version(const char* text);

// ---- kernel creation -----------------------------------------------------------------------
// Reads the node's attributes. A present attribute of another type than expected is an error; an
// absent required one is too. Messages name the attribute; the kernel's prefix names op and node.
class AttributeReader {
 public:
  explicit AttributeReader(const OrtKernelInfo* info) : info_(info) {}
  int64_t required_int(const char* name) const;
  int64_t optional_int(const char* name, int64_t fallback) const;
  std::string required_string(const char* name) const;
  std::string optional_string(const char* name, const std::string& fallback) const;
  // nullopt when the node lacks the attribute (an attribute of another type is an error).
  std::optional<int64_t> try_int(const char* name) const;

 private:
  std::optional<std::string> try_string(const char* name) const;
  bool absent(const char* name, OrtStatus* status) const;  // releases status
  bool present_as_other_type(const char* name, const char* except) const;
  [[noreturn]] void wrong_type(const char* name, const char* expected) const;
  const OrtKernelInfo* info_;
};

size_t node_input_count(const OrtKernelInfo* info);
std::string node_name(const OrtKernelInfo* info);

// ---- kernel execution ----------------------------------------------------------------------
// The base of every kernel: ComputeV2 turns whatever compute() throws into a status whose message
// starts with `prefix` (e.g. "IntQuant node 'q0': ").
class Kernel {
 public:
  explicit Kernel(std::string prefix) : prefix_(std::move(prefix)) {}
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  OrtStatusPtr ComputeV2(OrtKernelContext* context) noexcept {
    try {
      compute(context);
      return nullptr;
    } catch (...) {
      return status_from_current_exception(prefix_);
    }
  }

 private:
  virtual void compute(OrtKernelContext* context) = 0;
  std::string prefix_;
};

// Which element types an op's inputs may have.
enum class InputTypes {
  kNumpy,  // numpy's (float16 .. bool); the ONNX-only ones are rejected naming the input
  kAll,    // every type polyquant and ORT share; packed inputs are unpacked into scratch memory
};

// The inputs of one Compute call as polyquant views (ORT tensors are dense, row-major). Views of
// packed inputs (int4, uint4, float4e2m1, int2, uint2) point at one-element-per-byte copies owned by
// this object.
class Inputs {
 public:
  explicit Inputs(OrtKernelContext* context, InputTypes types = InputTypes::kNumpy);
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;
  size_t count() const { return count_; }
  // Input `index`, named `name` in messages; throws if the node lacks it.
  TensorView get(size_t index, const char* name);
  // An optional input: nullopt when the node omits it (fewer inputs, or an empty name).
  std::optional<TensorView> get_optional(size_t index, const char* name);

 private:
  const OrtValue* value(size_t index, const char* name) const;
  TensorView view(const OrtValue* value, const char* name);
  OrtKernelContext* context_;
  InputTypes types_;
  size_t count_ = 0;
  std::vector<std::vector<uint8_t>> scratch_;
};

// Allocates output 0 with the spec's shape and checks that ORT typed it as polyquant produces it.
MutableTensorView allocate_output(OrtKernelContext* context, const TensorSpec& spec);

// Output 0 of any dtype ORT can hold: view() is where the op writes, commit() finishes it. A packed
// dtype is written one element per byte into scratch memory and packed into ORT's tensor by
// commit(). `typed_by` says in messages what decided the dtype ("y_zero_point's dtype", ...).
class Output {
 public:
  Output(OrtKernelContext* context, const TensorSpec& spec, const std::string& typed_by);
  const MutableTensorView& view() const { return view_; }
  void commit();

 private:
  MutableTensorView view_;
  void* ort_data_ = nullptr;
  std::vector<uint8_t> scratch_;
};

// ---- shape inference -----------------------------------------------------------------------
// One dimension as ONNX shape inference sees it: a value, a symbol, or unknown (value < 0 and no
// symbol).
struct SymDim {
  int64_t value = -1;
  std::string symbol;
  bool known() const { return value >= 0; }
};

struct InferredInput {
  std::optional<DType> dtype;  // nullopt: element type unknown or not supported by polyquant
  std::vector<SymDim> dims;    // rank 0 also stands for "rank unknown": ORT cannot tell them apart
};

std::vector<InferredInput> inferred_inputs(OrtShapeInferContext* context);

// numpy broadcasting over the inputs listed in `which`, on symbolic shapes. nullopt when the shapes
// certainly cannot broadcast (the run will then report it).
std::optional<std::vector<SymDim>> broadcast_symbolic(const std::vector<InferredInput>& inputs,
                                                      std::span<const size_t> which);

// Sets output 0's element type and shape.
void set_output(OrtShapeInferContext* context, DType dtype, const std::vector<SymDim>& dims);

// An int attribute of the node being inferred: nullopt when absent or not an int.
std::optional<int64_t> infer_int_attribute(OrtShapeInferContext* context, const char* name);

// A stand-in tensor for a spec function: the input's dtype and rank with every dimension 1, holding
// the value 1. Lets the *_spec functions compute an output dtype from dtypes alone.
TensorView unit_tensor(DType dtype, size_t rank);

}  // namespace polyquant::ort
