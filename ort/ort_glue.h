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

// ONNX element types <-> polyquant dtypes. to_dtype throws polyquant::Error (kType) naming `what`
// for element types polyquant has no counterpart for (bfloat16, float8, string, complex, ...).
DType to_dtype(ONNXTensorElementDataType type, const char* what);
std::optional<DType> try_to_dtype(ONNXTensorElementDataType type);
ONNXTensorElementDataType to_onnx(DType dtype);
const char* onnx_type_name(ONNXTensorElementDataType type);

// ---- kernel creation -----------------------------------------------------------------------
// Reads the node's attributes. `op` names the op in messages. A present attribute of another
// type than expected is an error; an absent required one is too.
class AttributeReader {
 public:
  AttributeReader(const OrtKernelInfo* info, const char* op) : info_(info), op_(op) {}
  int64_t required_int(const char* name) const;
  int64_t optional_int(const char* name, int64_t fallback) const;
  std::string required_string(const char* name) const;
  std::string optional_string(const char* name, const std::string& fallback) const;

 private:
  std::optional<int64_t> try_int(const char* name) const;
  std::optional<std::string> try_string(const char* name) const;
  bool absent(const char* name, OrtStatus* status) const;  // releases status
  bool present_as_other_type(const char* name, const char* except) const;
  [[noreturn]] void wrong_type(const char* name, const char* expected) const;
  const OrtKernelInfo* info_;
  const char* op_;
};

size_t node_input_count(const OrtKernelInfo* info);
std::string node_name(const OrtKernelInfo* info);

// ---- kernel execution ----------------------------------------------------------------------
// The inputs of one Compute call as polyquant views (ORT tensors are dense, row-major).
class Inputs {
 public:
  explicit Inputs(OrtKernelContext* context);
  size_t count() const { return count_; }
  // Input `index`, named `name` in messages; throws if the node lacks it.
  TensorView get(size_t index, const char* name) const;

 private:
  OrtKernelContext* context_;
  size_t count_ = 0;
};

// Allocates output 0 with the spec's shape and checks that ORT typed it as polyquant produces it.
MutableTensorView allocate_output(OrtKernelContext* context, const TensorSpec& spec);

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

// A stand-in tensor for a spec function: the input's dtype and rank with every dimension 1, holding
// the value 1. Lets the *_spec functions compute an output dtype from dtypes alone.
TensorView unit_tensor(DType dtype, size_t rank);

}  // namespace polyquant::ort
