#include "ort_glue.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <set>

#include "polyquant/onnx_qdq.h"

namespace polyquant::ort {

namespace {
const OrtApi* g_api = nullptr;

struct InfoDeleter {
  void operator()(OrtTensorTypeAndShapeInfo* info) const { api().ReleaseTensorTypeAndShapeInfo(info); }
};
using OwnedInfo = std::unique_ptr<OrtTensorTypeAndShapeInfo, InfoDeleter>;

void release(OrtStatus* status) {
  if (status) api().ReleaseStatus(status);
}

// Element type and dimensions of a tensor type-and-shape description.
ONNXTensorElementDataType element_type(const OrtTensorTypeAndShapeInfo* info, const std::string& what) {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  check(api().GetTensorElementType(info, &type), what);
  return type;
}

std::vector<int64_t> dimensions(const OrtTensorTypeAndShapeInfo* info, const std::string& what) {
  size_t rank = 0;
  check(api().GetDimensionsCount(info, &rank), what);
  std::vector<int64_t> dims(rank);
  if (rank > 0) check(api().GetDimensions(info, dims.data(), rank), what);
  return dims;
}
}  // namespace

const OrtApi& api() { return *g_api; }
void set_api(const OrtApi* table) {
  g_api = table;
  Ort::InitApi(table);
}

void check(OrtStatus* status, const std::string& context) {
  if (status == nullptr) return;
  const OrtErrorCode code = api().GetErrorCode(status);
  std::string message = api().GetErrorMessage(status);
  api().ReleaseStatus(status);
  throw OrtFailure(code, context.empty() ? message : context + ": " + message);
}

namespace {
// The core's messages start with its op label ("ExtendedQuantizeLinear: y_scale must be ...") so
// that C++ and Python callers see which op failed. A kernel's prefix already names the op and the
// node ("VitisQuantizeLinear node 'q': "), so the label is dropped there instead of repeated.
std::string without_core_op_label(std::string message) {
  static constexpr const char* kLabels[] = {"ExtendedQuantizeLinear", "ExtendedDequantizeLinear", "QuantizeLinear",
                                            "DequantizeLinear", "IntQuant", "BipolarQuant", "Trunc", "FloatQuant"};
  for (const char* label : kLabels) {
    const std::string lead = std::string(label) + ": ";
    if (message.compare(0, lead.size(), lead) == 0) return message.substr(lead.size());
  }
  return message;
}
}  // namespace

OrtStatus* status_from_current_exception(const std::string& prefix) noexcept {
  OrtErrorCode code = ORT_FAIL;
  try {
    std::string message;
    try {
      throw;
    } catch (const polyquant::Error& e) {
      code = ORT_INVALID_ARGUMENT;
      message = prefix.empty() ? std::string(e.what()) : without_core_op_label(e.what());
    } catch (const OrtFailure& e) {
      code = e.code();
      message = e.what();
    } catch (const Ort::Exception& e) {
      code = e.GetOrtErrorCode();
      message = e.what();
    } catch (const std::bad_alloc&) {
      message = "out of memory";
    } catch (const std::exception& e) {
      message = std::string("internal error: ") + e.what();
    } catch (...) {
      message = "internal error: unknown exception";
    }
    return api().CreateStatus(code, (prefix + message).c_str());
  } catch (...) {
    return api().CreateStatus(ORT_FAIL, "polyquant: out of memory while reporting an error");
  }
}

// ---- element types ---------------------------------------------------------------------------
std::optional<DType> try_to_dtype(ONNXTensorElementDataType type) {
  switch (static_cast<int>(type)) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return DType::kFloat16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return DType::kFloat32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return DType::kFloat64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return DType::kInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return DType::kInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return DType::kInt32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return DType::kInt64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return DType::kUInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return DType::kUInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return DType::kUInt32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return DType::kUInt64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return DType::kBool;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return DType::kBFloat16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: return DType::kFloat8E4M3FN;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ: return DType::kFloat8E4M3FNUZ;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2: return DType::kFloat8E5M2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ: return DType::kFloat8E5M2FNUZ;
    case kOrtUInt4: return DType::kUInt4;
    case kOrtInt4: return DType::kInt4;
    case kOrtFloat4E2M1: return DType::kFloat4E2M1;
    case kOrtUInt2: return DType::kUInt2;
    case kOrtInt2: return DType::kInt2;
    case kOrtFloat8E8M0: return DType::kFloat8E8M0;
    default: return std::nullopt;
  }
}

DType to_dtype(ONNXTensorElementDataType type, const char* what) {
  if (auto dtype = try_to_dtype(type)) return *dtype;
  throw Error(ErrorKind::kType, std::string(what) + ": element type " + onnx_type_name(type) +
                                    " is not supported (floating, integer, bool, bfloat16, float8 and the "
                                    "4- and 2-bit types are)");
}

ONNXTensorElementDataType to_onnx(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case DType::kFloat32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case DType::kFloat64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
    case DType::kInt8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
    case DType::kInt16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16;
    case DType::kInt32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case DType::kInt64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case DType::kUInt8: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case DType::kUInt16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16;
    case DType::kUInt32: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;
    case DType::kUInt64: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64;
    case DType::kBool: return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    case DType::kBFloat16: return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
    case DType::kFloat8E4M3FN: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN;
    case DType::kFloat8E4M3FNUZ: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ;
    case DType::kFloat8E5M2: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2;
    case DType::kFloat8E5M2FNUZ: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ;
    case DType::kUInt4: return kOrtUInt4;
    case DType::kInt4: return kOrtInt4;
    case DType::kFloat4E2M1: return kOrtFloat4E2M1;
    case DType::kUInt2: return kOrtUInt2;
    case DType::kInt2: return kOrtInt2;
    case DType::kFloat8E8M0: return kOrtFloat8E8M0;
    case DType::kFloat6E2M3:
    case DType::kFloat6E3M2: break;  // no ORT element type
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

const char* onnx_type_name(ONNXTensorElementDataType type) {
  switch (static_cast<int>(type)) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED: return "undefined";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return "string";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64: return "complex64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128: return "complex128";
    default: break;
  }
  if (auto dtype = try_to_dtype(type)) return dtype_name(*dtype);
  return "(an element type unknown to this library)";
}

int elements_per_byte(DType dtype) {
  switch (dtype) {
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kFloat4E2M1: return 2;
    case DType::kInt2:
    case DType::kUInt2: return 4;
    default: return 1;
  }
}

namespace {
struct ValueDeleter {
  void operator()(OrtValue* value) const { api().ReleaseValue(value); }
};

}  // namespace

bool runtime_has_element_type(ONNXTensorElementDataType type) {
  OrtAllocator* allocator = nullptr;
  if (OrtStatus* s = api().GetAllocatorWithDefaultOptions(&allocator); s != nullptr) {
    release(s);
    return false;
  }
  const int64_t shape = 1;
  OrtValue* raw = nullptr;
  if (OrtStatus* s = api().CreateTensorAsOrtValue(allocator, &shape, 1, type, &raw); s != nullptr) {
    release(s);
    return false;
  }
  const std::unique_ptr<OrtValue, ValueDeleter> value(raw);
  OrtTensorTypeAndShapeInfo* info_raw = nullptr;
  if (OrtStatus* s = api().GetTensorTypeAndShape(value.get(), &info_raw); s != nullptr) {
    release(s);
    return false;
  }
  const OwnedInfo info(info_raw);
  ONNXTensorElementDataType got = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  if (OrtStatus* s = api().GetTensorElementType(info.get(), &got); s != nullptr) {
    release(s);
    return false;
  }
  return got == type;
}

RuntimeVersion parse_runtime_version(const char* text) {
  RuntimeVersion v;
  if (text == nullptr) return v;
  int parts[2] = {0, 0};
  int part = 0;
  bool digits = false;
  for (const char* p = text; *p != '\0' && part < 2; ++p) {
    if (*p >= '0' && *p <= '9') {
      parts[part] = parts[part] * 10 + (*p - '0');
      digits = true;
      if (parts[part] > 100000) return {};
    } else if (*p == '.' && digits) {
      ++part;
      digits = false;
    } else {
      break;
    }
  }
  if (part < 1) return {};
  v.major = parts[0];
  v.minor = parts[1];
  return v;
}

// ---- attributes ------------------------------------------------------------------------------
// Whether a failed typed read of attribute `name` means the attribute is absent (as opposed to
// present with another type). The C API (version 17) has getters for int, float, string, their int
// and float lists, and tensors, but none for a list of strings or graphs, so a present attribute of
// such a type is recognised by the getter's message: ONNX Runtime says "No attribute with name"
// only when the attribute is absent (1.17 to 1.32), anything else is a type mismatch. Should that
// wording change, an unrecognised failure counts as absent, the behaviour before this check.
bool AttributeReader::absent(const char* /*name*/, OrtStatus* status) const {
  const std::string message = api().GetErrorMessage(status);
  release(status);
  if (message.find("No attribute with name") != std::string::npos) return true;
  return message.find("type") == std::string::npos && message.find("match") == std::string::npos;
}

// Present as some type other than `except`: probes every getter the API has.
bool AttributeReader::present_as_other_type(const char* name, const char* except) const {
  const std::string skip = except;
  int64_t i = 0;
  float f = 0;
  size_t size = 0;
  auto found = [](OrtStatus* status) {
    if (status == nullptr) return true;
    release(status);
    return false;
  };
  if (skip != "int" && found(api().KernelInfoGetAttribute_int64(info_, name, &i))) return true;
  if (skip != "float" && found(api().KernelInfoGetAttribute_float(info_, name, &f))) return true;
  size = 0;
  if (skip != "string" && found(api().KernelInfoGetAttribute_string(info_, name, nullptr, &size))) return true;
  size = 0;
  if (found(api().KernelInfoGetAttributeArray_int64(info_, name, nullptr, &size))) return true;
  size = 0;
  if (found(api().KernelInfoGetAttributeArray_float(info_, name, nullptr, &size))) return true;
  return false;
}

std::optional<int64_t> AttributeReader::try_int(const char* name) const {
  int64_t value = 0;
  OrtStatus* status = api().KernelInfoGetAttribute_int64(info_, name, &value);
  if (status == nullptr) return value;
  // Absent, or present with another type (a list, a string, a tensor, ...): tell them apart.
  const bool missing = absent(name, status);
  if (!missing || present_as_other_type(name, "int")) wrong_type(name, "an int");
  return std::nullopt;
}

std::optional<std::string> AttributeReader::try_string(const char* name) const {
  size_t size = 0;
  OrtStatus* status = api().KernelInfoGetAttribute_string(info_, name, nullptr, &size);
  if (status != nullptr) {
    // A rounding_mode given as an int, a float, a list or a tensor must not fall back to the
    // default silently: the model asked for something, and it is not what would run.
    const bool missing = absent(name, status);
    if (!missing || present_as_other_type(name, "string")) wrong_type(name, "a string");
    return std::nullopt;
  }
  std::string value(size, '\0');
  if (size > 0) check(api().KernelInfoGetAttribute_string(info_, name, value.data(), &size), name);
  // size counts the terminating NUL; ONNX strings are byte strings and may hold NULs of their own,
  // which a C-string reading would cut at ('ROUND\0X' read as 'ROUND'): reject them instead.
  value.resize(size > 0 ? size - 1 : 0);
  if (value.find('\0') != std::string::npos) {
    std::string shown;
    for (char c : value) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw Error(ErrorKind::kValue, std::string(name) + ": attribute '" + shown + "' contains a NUL character");
  }
  return value;
}

void AttributeReader::wrong_type(const char* name, const char* expected) const {
  throw Error(ErrorKind::kType, std::string(name) + ": attribute must be " + expected +
                                    ", but the node gives another attribute type");
}

int64_t AttributeReader::required_int(const char* name) const {
  if (auto v = try_int(name)) return *v;
  throw Error(ErrorKind::kValue, std::string(name) + ": required attribute is missing");
}

int64_t AttributeReader::optional_int(const char* name, int64_t fallback) const {
  return try_int(name).value_or(fallback);
}

std::string AttributeReader::required_string(const char* name) const {
  if (auto v = try_string(name)) return *v;
  throw Error(ErrorKind::kValue, std::string(name) + ": required attribute is missing");
}

std::string AttributeReader::optional_string(const char* name, const std::string& fallback) const {
  return try_string(name).value_or(fallback);
}

size_t node_input_count(const OrtKernelInfo* info) {
  size_t count = 0;
  check(api().KernelInfo_GetInputCount(info, &count), "input count");
  return count;
}

std::string node_name(const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* s = api().KernelInfo_GetNodeName(info, nullptr, &size); s != nullptr) {
    release(s);
    return {};
  }
  std::string name(size, '\0');
  if (size > 0) check(api().KernelInfo_GetNodeName(info, name.data(), &size), "node name");
  name.resize(std::strlen(name.c_str()));
  return name;
}

// ---- kernel execution ------------------------------------------------------------------------
Inputs::Inputs(OrtKernelContext* context, InputTypes types) : context_(context), types_(types) {
  check(api().KernelContext_GetInputCount(context, &count_), "input count");
}

const OrtValue* Inputs::value(size_t index, const char* name) const {
  const OrtValue* value = nullptr;
  if (index < count_) check(api().KernelContext_GetInput(context_, index, &value), name);
  return value;
}

TensorView Inputs::get(size_t index, const char* name) {
  const OrtValue* v = value(index, name);
  if (v == nullptr) {
    throw Error(ErrorKind::kValue, std::string(name) + ": input " + std::to_string(index) +
                                       " is missing (the node has " + std::to_string(count_) + " inputs)");
  }
  return view(v, name);
}

std::optional<TensorView> Inputs::get_optional(size_t index, const char* name) {
  const OrtValue* v = value(index, name);
  if (v == nullptr) return std::nullopt;
  return view(v, name);
}

TensorView Inputs::view(const OrtValue* value, const char* name) {
  OrtTensorTypeAndShapeInfo* raw = nullptr;
  check(api().GetTensorTypeAndShape(value, &raw), name);
  const OwnedInfo info(raw);
  const ONNXTensorElementDataType type = element_type(info.get(), name);
  const std::optional<DType> known = try_to_dtype(type);
  if (!known || (types_ == InputTypes::kNumpy && is_onnx_only(*known))) {
    throw Error(ErrorKind::kType, std::string(name) + ": element type " + onnx_type_name(type) +
                                      " is not supported (float16, float32, float64, bool and 8- to 64-bit "
                                      "integers are)");
  }
  const DType dtype = *known;
  const std::vector<int64_t> dims = dimensions(info.get(), name);
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    throw Error(ErrorKind::kValue, std::string(name) + ": rank " + std::to_string(dims.size()) +
                                       " exceeds the maximum of " + std::to_string(kMaxRank));
  }
  const Dims shape{std::span<const int64_t>(dims)};
  void* data = nullptr;
  check(api().GetTensorMutableData(const_cast<OrtValue*>(value), &data), name);
  const int per = elements_per_byte(dtype);
  if (per == 1) return TensorView(data, dtype, shape);
  const int64_t n = shape.numel();
  std::vector<uint8_t>& buffer = scratch_.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (n > 0) polyquant::onnx::unpack_sub_byte(static_cast<const uint8_t*>(data), n, 8 / per, buffer.data());
  return TensorView(buffer.data(), dtype, shape);
}

namespace {
// Output 0 of `spec`'s shape: its data and ORT's element type for it.
void* get_output(OrtKernelContext* context, const TensorSpec& spec, ONNXTensorElementDataType& type) {
  OrtValue* value = nullptr;
  check(api().KernelContext_GetOutput(context, 0, spec.shape.v.data(), static_cast<size_t>(spec.shape.rank), &value),
        "output");
  if (value == nullptr) throw OrtFailure(ORT_FAIL, "output: ONNX Runtime returned no output tensor");
  OrtTensorTypeAndShapeInfo* raw = nullptr;
  check(api().GetTensorTypeAndShape(value, &raw), "output");
  const OwnedInfo info(raw);
  type = element_type(info.get(), "output");
  void* data = nullptr;
  check(api().GetTensorMutableData(value, &data), "output");
  return data;
}
}  // namespace

MutableTensorView allocate_output(OrtKernelContext* context, const TensorSpec& spec) {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  void* data = get_output(context, spec, type);
  if (try_to_dtype(type) != spec.dtype) {
    throw Error(ErrorKind::kType,
                std::string("output: the op produces ") + dtype_name(spec.dtype) +
                    " for these input dtypes (numpy promotion, as in the reference), but ONNX Runtime typed "
                    "the output " + onnx_type_name(type) +
                    " (ONNX Runtime < 1.19 ignores the element type set by custom-op shape inference and "
                    "takes the last input's); give the inputs one dtype or use ONNX Runtime >= 1.19");
  }
  return MutableTensorView(data, spec.dtype, spec.shape);
}

Output::Output(OrtKernelContext* context, const TensorSpec& spec, const std::string& typed_by) {
  if (to_onnx(spec.dtype) == ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED) {
    throw Error(ErrorKind::kType, std::string("output: ") + typed_by + " " + dtype_name(spec.dtype) +
                                      " has no ONNX Runtime element type; ONNX Runtime cannot hold the output");
  }
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  ort_data_ = get_output(context, spec, type);
  if (try_to_dtype(type) != spec.dtype) {
    throw Error(ErrorKind::kType, std::string("output: the op produces ") + dtype_name(spec.dtype) + " (" + typed_by +
                                      "), but ONNX Runtime typed the output " + onnx_type_name(type) +
                                      " (ONNX Runtime < 1.19 ignores the element type set by custom-op shape "
                                      "inference)");
  }
  if (elements_per_byte(spec.dtype) == 1) {
    view_ = MutableTensorView(ort_data_, spec.dtype, spec.shape);
  } else {
    scratch_.assign(static_cast<size_t>(std::max<int64_t>(spec.shape.numel(), 1)), 0);
    view_ = MutableTensorView(scratch_.data(), spec.dtype, spec.shape);
  }
}

void Output::commit() {
  const int per = elements_per_byte(view_.dtype);
  const int64_t n = view_.shape.numel();
  if (per > 1 && n > 0) polyquant::onnx::pack_sub_byte(scratch_.data(), n, 8 / per, static_cast<uint8_t*>(ort_data_));
}

// ---- shape inference -------------------------------------------------------------------------
std::vector<InferredInput> inferred_inputs(OrtShapeInferContext* context) {
  size_t count = 0;
  check(api().ShapeInferContext_GetInputCount(context, &count));
  std::vector<InferredInput> inputs(count);
  for (size_t i = 0; i < count; ++i) {
    OrtTensorTypeAndShapeInfo* info = nullptr;  // owned by the context
    check(api().ShapeInferContext_GetInputTypeShape(context, i, &info));
    if (info == nullptr) continue;
    inputs[i].dtype = try_to_dtype(element_type(info, "input"));
    const std::vector<int64_t> values = dimensions(info, "input");
    std::vector<const char*> symbols(values.size(), nullptr);
    if (!values.empty()) check(api().GetSymbolicDimensions(info, symbols.data(), symbols.size()));
    for (size_t d = 0; d < values.size(); ++d) {
      SymDim dim;
      dim.value = values[d];
      if (symbols[d] != nullptr && symbols[d][0] != '\0') {
        dim.value = -1;
        dim.symbol = symbols[d];
      }
      inputs[i].dims.push_back(std::move(dim));
    }
  }
  return inputs;
}

std::optional<std::vector<SymDim>> broadcast_symbolic(const std::vector<InferredInput>& inputs,
                                                      std::span<const size_t> which) {
  size_t rank = 0;
  for (size_t i : which) rank = std::max(rank, inputs.at(i).dims.size());
  std::vector<SymDim> out(rank);
  for (size_t o = 0; o < rank; ++o) {
    std::set<int64_t> values;  // known sizes other than 1
    std::set<std::string> symbols;
    bool unknown = false;
    for (size_t i : which) {
      const auto& dims = inputs[i].dims;
      if (o + dims.size() < rank) continue;  // right-aligned: this input has no such axis
      const SymDim& d = dims[o + dims.size() - rank];
      if (d.known()) {
        if (d.value != 1) values.insert(d.value);
      } else if (!d.symbol.empty()) {
        symbols.insert(d.symbol);
      } else {
        unknown = true;
      }
    }
    if (values.size() > 1) return std::nullopt;
    if (values.size() == 1) {
      out[o].value = *values.begin();
    } else if (symbols.empty() && !unknown) {
      out[o].value = 1;
    } else if (symbols.size() == 1 && !unknown) {
      out[o].symbol = *symbols.begin();
    }  // else: unknown (a symbol that may be 1, or several candidates)
  }
  return out;
}

void set_output(OrtShapeInferContext* context, DType dtype, const std::vector<SymDim>& dims) {
  // ORT writes a dimension without a symbol as a value, so an unknown one gets a fresh symbol.
  static std::atomic<uint64_t> next_unknown{0};
  std::vector<int64_t> values(dims.size());
  std::vector<std::string> symbols(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    values[d] = dims[d].known() ? dims[d].value : -1;
    if (!dims[d].known()) {
      symbols[d] = dims[d].symbol.empty() ? "polyquant_unk_" + std::to_string(next_unknown++) : dims[d].symbol;
    }
  }
  std::vector<const char*> symbol_ptrs(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) symbol_ptrs[d] = symbols[d].c_str();

  OrtTensorTypeAndShapeInfo* raw = nullptr;
  check(api().CreateTensorTypeAndShapeInfo(&raw));
  const OwnedInfo info(raw);
  check(api().SetTensorElementType(info.get(), to_onnx(dtype)));
  check(api().SetDimensions(info.get(), values.data(), values.size()));
  check(api().SetSymbolicDimensions(info.get(), symbol_ptrs.data(), symbol_ptrs.size()));
  check(api().ShapeInferContext_SetOutputTypeShape(context, 0, info.get()));
}

std::optional<int64_t> infer_int_attribute(OrtShapeInferContext* context, const char* name) {
  const OrtOpAttr* attr = nullptr;
  if (OrtStatus* s = api().ShapeInferContext_GetAttribute(context, name, &attr); s != nullptr) {
    release(s);
    return std::nullopt;
  }
  if (attr == nullptr) return std::nullopt;
  int64_t value = 0;
  size_t size = 0;
  if (OrtStatus* s = api().ReadOpAttr(attr, ORT_OP_ATTR_INT, &value, sizeof(value), &size); s != nullptr) {
    release(s);
    return std::nullopt;
  }
  if (size != sizeof(value)) return std::nullopt;
  return value;
}

TensorView unit_tensor(DType dtype, size_t rank) {
  static const uint16_t half_one = 0x3C00;
  static const float f32_one = 1.0f;
  static const double f64_one = 1.0;
  static const int8_t i8_one = 1;
  static const int16_t i16_one = 1;
  static const int32_t i32_one = 1;
  static const int64_t i64_one = 1;
  static const uint8_t u8_one = 1;
  static const uint16_t u16_one = 1;
  static const uint32_t u32_one = 1;
  static const uint64_t u64_one = 1;
  static const bool bool_one = true;
  const void* data = nullptr;
  switch (dtype) {
    case DType::kFloat16: data = &half_one; break;
    case DType::kFloat32: data = &f32_one; break;
    case DType::kFloat64: data = &f64_one; break;
    case DType::kInt8: data = &i8_one; break;
    case DType::kInt16: data = &i16_one; break;
    case DType::kInt32: data = &i32_one; break;
    case DType::kInt64: data = &i64_one; break;
    case DType::kUInt8: data = &u8_one; break;
    case DType::kUInt16: data = &u16_one; break;
    case DType::kUInt32: data = &u32_one; break;
    case DType::kUInt64: data = &u64_one; break;
    case DType::kBool: data = &bool_one; break;
    default: break;
  }
  Dims shape;
  shape.rank = static_cast<int>(std::min(rank, static_cast<size_t>(kMaxRank)));
  for (int d = 0; d < shape.rank; ++d) shape[d] = 1;
  return TensorView(data, dtype, shape);
}

}  // namespace polyquant::ort
