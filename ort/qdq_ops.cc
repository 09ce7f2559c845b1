// ONNX Runtime kernels for the linear quantize / dequantize ops:
//
//   com.amd.quark      ExtendedQuantizeLinear, ExtendedDequantizeLinear (AMD Quark's ops, bit-exact
//                      with Quark's CPU kernel: polyquant::quark with Semantics::kQuarkCpu)
//   com.vai.quantize   VitisQuantizeLinear, VitisDequantizeLinear (Quark's deprecated names, same
//                      kernels)
//   polyquant.onnx     QuantizeLinear, DequantizeLinear with the attributes and types of ONNX opset 28
//                      (polyquant::onnx, bit-exact with onnx's reference evaluator), for runtimes
//                      whose own kernels lack a type or attribute
//
// All three domains are opset version 1 (ONNX Runtime accepts any import version of a custom domain).
//
// The Extended ops declare Quark's interface: Q takes x and y_scale float32 and an optional
// y_zero_point of any type, and outputs the zero point's type (uint8 when absent); DQ takes x of any
// type, x_scale float32 and an optional x_zero_point, and outputs float32. An absent `axis` attribute
// is 0, as in Quark's CPU kernel (its documentation says 1). The types the ops accept are checked by
// polyquant, whose messages name the parameter.
//
// Types ONNX Runtime holds packed (int4, uint4, float4e2m1 two to a byte, int2, uint2 four to a
// byte) are unpacked into one element per byte for polyquant and packed back (ort_glue's Inputs and
// Output).
//
// Declared types of the polyquant.onnx ops. A custom op input declared UNDEFINED accepts ONNX
// Runtime's list of "all types", which (1.32) lacks uint2, int2 and float8e8m0. Where the runtime
// holds those (probed at registration, see register.cc), the ops are registered as overloads with
// explicit types instead: Q once per (y_scale type, output type), with y_zero_point of the output
// type; DQ once per (x type, x_scale type), with x_zero_point of x's type. ORT then checks the types
// itself (a zero point of another type than x is "no implementation found"); uint8 is the first
// output type so that ORT's own type guess for a Q without zero point is uint8, as the op's.
#include <array>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ops.h"
#include "ort_glue.h"
#include "polyquant/onnx_qdq.h"
#include "polyquant/quark.h"

namespace polyquant::ort {
namespace {

enum class OpKind { kExtendedQuantize, kExtendedDequantize, kQuantize, kDequantize };

bool is_extended(OpKind kind) { return kind == OpKind::kExtendedQuantize || kind == OpKind::kExtendedDequantize; }

// Declared element types of the three inputs and the output (UNDEFINED: any).
struct Signature {
  std::array<ONNXTensorElementDataType, 3> inputs{};
  ONNXTensorElementDataType output = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
};

bool runtime_holds(DType dtype, const RuntimeTypes& runtime) {
  switch (dtype) {
    case DType::kUInt2: return runtime.uint2;
    case DType::kInt2: return runtime.int2;
    case DType::kFloat8E8M0: return runtime.float8e8m0;
    default: return to_onnx(dtype) != ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  }
}

// An ONNX TensorProto.DataType attribute (output_dtype, precision): 0 is unset.
std::optional<DType> onnx_dtype_attribute(const AttributeReader& attrs, const char* name, const RuntimeTypes& runtime) {
  const int64_t value = attrs.optional_int(name, 0);
  if (value == 0) return std::nullopt;
  const std::optional<DType> dtype =
      value > 0 && value <= 1000 ? onnx::dtype_from_onnx(static_cast<int>(value)) : std::nullopt;
  if (!dtype) {
    throw Error(ErrorKind::kValue, std::string(name) + ": " + std::to_string(value) +
                                       " is not an ONNX element type (TensorProto.DataType) that polyquant knows");
  }
  if (!runtime_holds(*dtype, runtime)) {
    throw Error(ErrorKind::kType, std::string(name) + ": " + dtype_name(*dtype) + " (" + std::to_string(value) +
                                      ") is not an element type this ONNX Runtime can hold");
  }
  return dtype;
}

// ---- kernels ---------------------------------------------------------------------------------
const TensorView* ptr(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

class ExtendedQuantizeKernel final : public Kernel {
 public:
  ExtendedQuantizeKernel(std::string prefix, const AttributeReader& attrs) : Kernel(std::move(prefix)) {
    attrs_.axis = attrs.optional_int("axis", 0);  // Quark's CPU kernel: absent means 0
    attrs_.semantics = quark::Semantics::kQuarkCpu;
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context, InputTypes::kAll);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "y_scale");
    const std::optional<TensorView> zero_point = in.get_optional(2, "y_zero_point");
    const PlannedCall call = quark::extended_quantize_linear_plan(x, scale, ptr(zero_point), attrs_);
    Output out(context, call.spec(), zero_point ? "y_zero_point's dtype" : "the dtype without y_zero_point");
    call.run(out.view());
    out.commit();
  }
  quark::ExtendedAttrs attrs_;
};

class ExtendedDequantizeKernel final : public Kernel {
 public:
  ExtendedDequantizeKernel(std::string prefix, const AttributeReader& attrs) : Kernel(std::move(prefix)) {
    attrs_.axis = attrs.optional_int("axis", 0);
    attrs_.semantics = quark::Semantics::kQuarkCpu;
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context, InputTypes::kAll);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "x_scale");
    const std::optional<TensorView> zero_point = in.get_optional(2, "x_zero_point");
    const PlannedCall call = quark::extended_dequantize_linear_plan(x, scale, ptr(zero_point), attrs_);
    Output out(context, call.spec(), "the op's output dtype");
    call.run(out.view());
    out.commit();
  }
  quark::ExtendedAttrs attrs_;
};

class QuantizeKernel final : public Kernel {
 public:
  QuantizeKernel(std::string prefix, const AttributeReader& attrs, const RuntimeTypes& runtime)
      : Kernel(std::move(prefix)) {
    attrs_.axis = attrs.optional_int("axis", 1);
    attrs_.block_size = attrs.optional_int("block_size", 0);
    attrs_.output_dtype = onnx_dtype_attribute(attrs, "output_dtype", runtime);
    const int64_t saturate = attrs.optional_int("saturate", 1);
    if (saturate != 0 && saturate != 1) {
      throw Error(ErrorKind::kValue, "saturate: must be 0 or 1, got " + std::to_string(saturate));
    }
    attrs_.saturate = saturate == 1;
    attrs_.precision = onnx_dtype_attribute(attrs, "precision", runtime);
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context, InputTypes::kAll);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "y_scale");
    const std::optional<TensorView> zero_point = in.get_optional(2, "y_zero_point");
    const PlannedCall call = onnx::quantize_linear_plan(x, scale, ptr(zero_point), attrs_);
    Output out(context, call.spec(),
               zero_point ? "y_zero_point's dtype" : attrs_.output_dtype ? "output_dtype" : "the default uint8");
    call.run(out.view());
    out.commit();
  }
  onnx::QuantizeLinearAttrs attrs_;
};

class DequantizeKernel final : public Kernel {
 public:
  DequantizeKernel(std::string prefix, const AttributeReader& attrs, const RuntimeTypes& runtime)
      : Kernel(std::move(prefix)) {
    attrs_.axis = attrs.optional_int("axis", 1);
    attrs_.block_size = attrs.optional_int("block_size", 0);
    attrs_.output_dtype = onnx_dtype_attribute(attrs, "output_dtype", runtime);
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context, InputTypes::kAll);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "x_scale");
    const std::optional<TensorView> zero_point = in.get_optional(2, "x_zero_point");
    const PlannedCall call = onnx::dequantize_linear_plan(x, scale, ptr(zero_point), attrs_);
    Output out(context, call.spec(), attrs_.output_dtype ? "output_dtype" : "x_scale's dtype");
    call.run(out.view());
    out.commit();
  }
  onnx::DequantizeLinearAttrs attrs_;
};

// ---- the ops ---------------------------------------------------------------------------------
class QdqOp : public Ort::CustomOpBase<QdqOp, Kernel, /*WithStatus=*/true> {
 public:
  QdqOp(const char* name, OpKind kind, const Signature& signature, const RuntimeTypes& runtime)
      : name_(name), kind_(kind), signature_(signature), runtime_(runtime) {
    OrtCustomOp::version = kOrtApiVersion;  // the struct layout of API 17 whatever the headers
    start_ver_ = 1;
    OrtCustomOp::InferOutputShapeFn = &QdqOp::infer_callback;
  }

  const char* GetName() const { return name_; }
  const char* GetExecutionProviderType() const { return nullptr; }  // CPU

  size_t GetInputTypeCount() const { return 3; }
  ONNXTensorElementDataType GetInputType(size_t index) const { return signature_.inputs.at(index); }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index < 2 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;  // the zero point is optional
  }

  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return signature_.output; }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const {
    // Quark declares a required output (its Q's UNDEFINED output follows the one UNDEFINED input,
    // the zero point). The polyquant.onnx ops without explicit types have several UNDEFINED inputs,
    // for which ORT 1.17 and 1.18 accept an UNDEFINED output only when it is optional; all overloads
    // of an op must agree, so both forms of those ops declare it optional.
    return is_extended(kind_) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const noexcept {
    std::string prefix = std::string(name_) + ": ";
    try {
      const std::string node = node_name(info);
      if (!node.empty()) prefix = std::string(name_) + " node '" + node + "': ";
      const AttributeReader attrs(info);
      const size_t inputs = node_input_count(info);
      if (inputs < 2 || inputs > 3) {
        throw Error(ErrorKind::kValue, "inputs: the node has " + std::to_string(inputs) + " inputs, the op takes 2 or 3");
      }
      switch (kind_) {
        case OpKind::kExtendedQuantize: *kernel = new ExtendedQuantizeKernel(prefix, attrs); break;
        case OpKind::kExtendedDequantize: *kernel = new ExtendedDequantizeKernel(prefix, attrs); break;
        case OpKind::kQuantize: *kernel = new QuantizeKernel(prefix, attrs, runtime_); break;
        case OpKind::kDequantize: *kernel = new DequantizeKernel(prefix, attrs, runtime_); break;
      }
      return nullptr;
    } catch (...) {
      *kernel = nullptr;
      return status_from_current_exception(prefix);
    }
  }

 private:
  // Output type and shape: the shape is x's; the type the zero point's (Q; uint8 without one, or
  // output_dtype in polyquant.onnx), float32 (Extended DQ), or output_dtype else x_scale's type
  // (polyquant.onnx DQ). Never fails: where the inputs cannot be judged nothing is set and the run
  // reports the problem.
  static OrtStatusPtr ORT_API_CALL infer_callback(const OrtCustomOp* op, OrtShapeInferContext* context) noexcept {
    try {
      static_cast<const QdqOp*>(op)->infer(context);
    } catch (...) {
      // ORT (as of 1.32) ignores this function's status; the run reports any real problem.
    }
    return nullptr;
  }

  std::optional<DType> attribute_dtype(OrtShapeInferContext* context, const char* name) const {
    const std::optional<int64_t> value = infer_int_attribute(context, name);
    if (!value || *value <= 0 || *value > 1000) return std::nullopt;
    return onnx::dtype_from_onnx(static_cast<int>(*value));
  }

  void infer(OrtShapeInferContext* context) const {
    const std::vector<InferredInput> in = inferred_inputs(context);
    if (in.size() < 2) return;
    const bool has_zero_point = in.size() >= 3 && in[2].dtype.has_value();
    bool has_output_dtype = false;
    std::optional<DType> dtype;
    switch (kind_) {
      case OpKind::kExtendedQuantize: dtype = has_zero_point ? in[2].dtype : DType::kUInt8; break;
      case OpKind::kExtendedDequantize: dtype = DType::kFloat32; break;
      case OpKind::kQuantize: {
        const std::optional<DType> output_dtype = attribute_dtype(context, "output_dtype");
        has_output_dtype = output_dtype.has_value();
        if (has_zero_point) {
          if (output_dtype && output_dtype != in[2].dtype) return;  // the run reports the mismatch
          dtype = in[2].dtype;
        } else {
          dtype = output_dtype ? output_dtype : DType::kUInt8;
        }
        break;
      }
      case OpKind::kDequantize: {
        const std::optional<DType> output_dtype = attribute_dtype(context, "output_dtype");
        has_output_dtype = output_dtype.has_value();
        dtype = output_dtype ? output_dtype : in[1].dtype;
        break;
      }
    }
    if (!dtype || !runtime_holds(*dtype, runtime_)) return;
    // x of rank 0 may be an x of unknown rank (ORT reports both alike), and claiming rank 0 for it
    // fails the inference of a node downstream that needs a rank. So then nothing is set where ORT's
    // own guess (made before this function) is the right type already; elsewhere rank 0 is the only
    // way to give the output its type, without which the model cannot load at all.
    if (in[0].dims.empty() && ort_guesses_right(has_zero_point, has_output_dtype, *dtype)) return;
    set_output(context, *dtype, in[0].dims);
  }

  // Whether ORT's default type inference for custom ops types the output `dtype`: it takes a single
  // declared output type, else the type of the last input declared with several (UNDEFINED: any).
  bool ort_guesses_right(bool has_zero_point, bool has_output_dtype, DType dtype) const {
    const bool explicit_types = signature_.inputs[1] != ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    switch (kind_) {
      case OpKind::kExtendedQuantize: return has_zero_point;  // without it, x and y_scale are typed: none
      case OpKind::kExtendedDequantize: return true;          // declared float32
      case OpKind::kQuantize:
        // Overloads: the first whose inputs match, uint8 first for each y_scale type.
        return has_zero_point || (explicit_types && dtype == DType::kUInt8);
      case OpKind::kDequantize:
        // Overloads: every input has one type, so the UNDEFINED output gets none.
        return !explicit_types && !has_zero_point && !has_output_dtype;
    }
    return false;
  }

  const char* name_;
  OpKind kind_;
  Signature signature_;
  RuntimeTypes runtime_;
};

// The op objects live as long as the library: ORT keeps pointers to them in every session.
std::deque<QdqOp>& op_store() {
  static std::deque<QdqOp> ops;
  return ops;
}

constexpr auto kUndefined = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
constexpr auto kFloat = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;

void add_op(OrtCustomOpDomain* domain, const char* domain_name, const char* name, OpKind kind,
            const Signature& signature, const RuntimeTypes& runtime) {
  QdqOp& op = op_store().emplace_back(name, kind, signature, runtime);
  check(api().CustomOpDomain_Add(domain, &op), domain_name);
}

// The types of the ONNX (opset 25+) schema that the runtime holds, in ORT's enum.
std::vector<ONNXTensorElementDataType> holdable(std::initializer_list<DType> dtypes, const RuntimeTypes& runtime) {
  std::vector<ONNXTensorElementDataType> types;
  for (DType d : dtypes) {
    if (runtime_holds(d, runtime)) types.push_back(to_onnx(d));
  }
  return types;
}

}  // namespace

void add_qdq_domains(std::vector<OrtCustomOpDomain*>& domains, const RuntimeTypes& runtime) {
  // Quark's domains: x (Q) and the scales are float32, the zero point (and so the Q output) any type.
  const Signature extended_q{{kFloat, kFloat, kUndefined}, kUndefined};
  const Signature extended_dq{{kUndefined, kFloat, kUndefined}, kFloat};
  const struct {
    const char* domain;
    const char* quantize;
    const char* dequantize;
  } quark_domains[] = {{"com.amd.quark", "ExtendedQuantizeLinear", "ExtendedDequantizeLinear"},
                       {"com.vai.quantize", "VitisQuantizeLinear", "VitisDequantizeLinear"}};
  for (const auto& d : quark_domains) {
    OrtCustomOpDomain* domain = add_domain(domains, d.domain);
    add_op(domain, d.domain, d.quantize, OpKind::kExtendedQuantize, extended_q, runtime);
    add_op(domain, d.domain, d.dequantize, OpKind::kExtendedDequantize, extended_dq, runtime);
  }

  const char* name = "polyquant.onnx";
  OrtCustomOpDomain* domain = add_domain(domains, name);
  if (!runtime.uint2 && !runtime.int2 && !runtime.float8e8m0) {
    // Every type the ops take is in ORT's list of all types: one op each, any types.
    const Signature any{{kUndefined, kUndefined, kUndefined}, kUndefined};
    add_op(domain, name, "QuantizeLinear", OpKind::kQuantize, any, runtime);
    add_op(domain, name, "DequantizeLinear", OpKind::kDequantize, any, runtime);
    return;
  }
  const auto q_scales = holdable({DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                                  DType::kFloat8E8M0}, runtime);
  const auto q_outputs = holdable({DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kUInt4,
                                   DType::kInt4, DType::kUInt2, DType::kInt2, DType::kFloat8E4M3FN,
                                   DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                                   DType::kFloat4E2M1}, runtime);
  const auto dq_inputs = holdable({DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kInt32,
                                   DType::kUInt4, DType::kInt4, DType::kUInt2, DType::kInt2, DType::kFloat8E4M3FN,
                                   DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                                   DType::kFloat4E2M1}, runtime);
  const auto dq_scales = holdable({DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E8M0}, runtime);
  for (auto scale : q_scales) {
    for (auto out : q_outputs) add_op(domain, name, "QuantizeLinear", OpKind::kQuantize, {{kUndefined, scale, out}, out}, runtime);
  }
  for (auto x : dq_inputs) {
    for (auto scale : dq_scales) {
      add_op(domain, name, "DequantizeLinear", OpKind::kDequantize, {{x, scale, x}, kUndefined}, runtime);
    }
  }
}

}  // namespace polyquant::ort
