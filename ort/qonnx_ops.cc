// ONNX Runtime kernels for the QONNX ops: IntQuant (and its legacy name Quant), BipolarQuant,
// Trunc and FloatQuant, registered in the domains qonnx.custom_op.general, finn.custom_op.general
// and onnx.brevitas. Each kernel reads its attributes once, at session creation, and at run time
// maps the ORT tensors to polyquant views, asks the op's *_spec for the output, and runs the op.
//
// Trunc versions. qonnx picks Trunc v1 (5 inputs) or v2 (6 inputs) from the model's opset import
// of the node's domain. ONNX Runtime cannot express that for custom ops: it builds one schema per
// op name (whose since-version is the first registered overload's start version) and matches
// kernels against that schema's since-version, not against the imported opset, so a [1,1] and a
// [2,max] overload always resolve to the same one; and a model without an import of the domain is
// given the domain's latest version. The kernel therefore reads the node's input count, which is
// what distinguishes the two versions in every export: 5 inputs run v1, 6 inputs run v2.
#include <array>
#include <string>
#include <vector>

#include "ops.h"
#include "ort_glue.h"
#include "polyquant/qonnx.h"
#include "polyquant/rounding.h"

namespace polyquant::ort {
namespace {

enum class OpKind { kIntQuant, kBipolarQuant, kTrunc, kFloatQuant };

// ---- kernels ---------------------------------------------------------------------------------
// The IntQuant and FloatQuant *nodes* output float32 whatever their functions return: qonnx's
// execute_node casts the function's result (float64 for float_quant of float32 input, float64 for
// int_quant of float64 input) with astype(np.float32), and the ops' declared output type is FLOAT.
// polyquant's ops round their result into the out view's floating dtype, which is that cast.
TensorSpec float32_node_output(TensorSpec spec) {
  spec.dtype = DType::kFloat32;
  return spec;
}

class IntQuantKernel final : public Kernel {
 public:
  IntQuantKernel(std::string prefix, const AttributeReader& attrs) : Kernel(std::move(prefix)) {
    attrs_.is_signed = attrs.required_int("signed") != 0;
    attrs_.narrow = attrs.required_int("narrow") != 0;
    attrs_.rounding_mode = parse_rounding_mode(attrs.optional_string("rounding_mode", "ROUND"));
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "scale"), zeropt = in.get(2, "zeropt"),
                     bitwidth = in.get(3, "bitwidth");
    const PlannedCall call = qonnx::int_quant_plan(x, scale, zeropt, bitwidth, attrs_);
    call.run(allocate_output(context, float32_node_output(call.spec())));
  }
  qonnx::IntQuantAttrs attrs_;
};

class BipolarQuantKernel final : public Kernel {
 public:
  using Kernel::Kernel;

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context);  // a third input, as some qonnx tests give, is ignored like there
    const TensorView x = in.get(0, "x"), scale = in.get(1, "scale");
    const PlannedCall call = qonnx::bipolar_quant_plan(x, scale);
    call.run(allocate_output(context, call.spec()));
  }
};

class TruncKernel final : public Kernel {
 public:
  TruncKernel(std::string prefix, const AttributeReader& attrs, bool v2) : Kernel(std::move(prefix)), v2_(v2) {
    attrs_.rounding_mode = parse_rounding_mode(attrs.required_string("rounding_mode"));
    if (v2_) {  // v1 declares neither attribute and ignores them
      attrs_.is_signed = flag(attrs.optional_int("signed", 1), "signed");
      attrs_.narrow = flag(attrs.optional_int("narrow", 0), "narrow");
    }
  }

 private:
  static bool flag(int64_t value, const char* name) {
    if (value != 0 && value != 1) {
      throw Error(ErrorKind::kValue, std::string(name) + ": must be 0 or 1 in Trunc (version 2), got " +
                                         std::to_string(value));
    }
    return value == 1;
  }

  void compute(OrtKernelContext* context) override {
    Inputs in(context);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "scale"), zeropt = in.get(2, "zeropt"),
                     in_bitwidth = in.get(3, "in_bitwidth");
    if (!v2_) {
      const TensorView out_bitwidth = in.get(4, "out_bitwidth");
      const PlannedCall call = qonnx::trunc_plan(x, scale, zeropt, in_bitwidth, out_bitwidth, attrs_.rounding_mode);
      call.run(allocate_output(context, call.spec()));
    } else {
      const TensorView out_scale = in.get(4, "out_scale"), out_bitwidth = in.get(5, "out_bitwidth");
      const PlannedCall call = qonnx::trunc_v2_plan(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth, attrs_);
      call.run(allocate_output(context, call.spec()));
    }
  }
  bool v2_;
  qonnx::TruncV2Attrs attrs_;
};

class FloatQuantKernel final : public Kernel {
 public:
  FloatQuantKernel(std::string prefix, const AttributeReader& attrs) : Kernel(std::move(prefix)) {
    attrs_.has_inf = attrs.required_int("has_inf") != 0;
    attrs_.has_nan = attrs.required_int("has_nan") != 0;
    attrs_.has_subnormal = attrs.required_int("has_subnormal") != 0;
    attrs_.saturation = attrs.required_int("saturation") != 0;
    attrs_.rounding_mode = parse_rounding_mode(attrs.optional_string("rounding_mode", "ROUND"));
  }

 private:
  void compute(OrtKernelContext* context) override {
    Inputs in(context);
    const TensorView x = in.get(0, "x"), scale = in.get(1, "scale"), e = in.get(2, "exponent_bitwidth"),
                     m = in.get(3, "mantissa_bitwidth"), bias = in.get(4, "exponent_bias"),
                     max_val = in.get(5, "max_val");
    const PlannedCall call = qonnx::float_quant_plan(x, scale, e, m, bias, max_val, attrs_);
    call.run(allocate_output(context, float32_node_output(call.spec())));
  }
  qonnx::FloatQuantAttrs attrs_;
};

// ---- the ops ---------------------------------------------------------------------------------
// Inputs: all of any element type (parameters are often int64 in QKeras exports; X must be a
// float type, which the op itself checks with a clear message). IntQuant and FloatQuant always
// output float32; BipolarQuant and Trunc output numpy's promotion of their inputs, which their
// shape inference sets.
class QonnxOp : public Ort::CustomOpBase<QonnxOp, Kernel, /*WithStatus=*/true> {
 public:
  QonnxOp(const char* name, OpKind kind) : name_(name), kind_(kind) {
    // Request the struct layout of API 17 whatever headers this is built with.
    OrtCustomOp::version = kOrtApiVersion;
    // One version range for every opset of the domain (see the top of this file).
    start_ver_ = 1;
    // The C API lets shape inference set the element type too, which the C++ wrapper does not
    // (ONNX Runtime honours it since 1.19; 1.17 and 1.18 type the output like the last input).
    OrtCustomOp::InferOutputShapeFn = &QonnxOp::infer_callback;
  }

  const char* GetName() const { return name_; }
  const char* GetExecutionProviderType() const { return nullptr; }  // CPU

  size_t GetInputTypeCount() const {
    switch (kind_) {
      case OpKind::kIntQuant: return 4;
      case OpKind::kBipolarQuant: return 3;  // the third is optional and ignored
      case OpKind::kTrunc: return 6;         // the sixth makes it version 2
      case OpKind::kFloatQuant: return 6;
    }
    return 0;
  }
  size_t required_inputs() const {
    switch (kind_) {
      case OpKind::kBipolarQuant: return 2;
      case OpKind::kTrunc: return 5;
      default: return GetInputTypeCount();
    }
  }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index < required_inputs() ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }

  size_t GetOutputTypeCount() const { return 1; }
  bool float32_output() const { return kind_ == OpKind::kIntQuant || kind_ == OpKind::kFloatQuant; }
  ONNXTensorElementDataType GetOutputType(size_t) const {
    return float32_output() ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const {
    // ONNX Runtime 1.17 and 1.18 refuse a *required* output of undefined type unless exactly one
    // input is of undefined type; declared optional, it is accepted and typed by shape inference.
    return float32_output() ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }

  OrtStatusPtr CreateKernelV2(const OrtApi& /*api*/, const OrtKernelInfo* info, void** kernel) const noexcept {
    std::string prefix = std::string(name_) + ": ";
    try {
      const std::string node = node_name(info);
      if (!node.empty()) prefix = std::string(name_) + " node '" + node + "': ";
      const AttributeReader attrs(info);
      const size_t inputs = node_input_count(info);
      if (inputs < required_inputs() || inputs > GetInputTypeCount()) {
        const size_t lo = required_inputs(), hi = GetInputTypeCount();
        throw Error(ErrorKind::kValue, "inputs: the node has " + std::to_string(inputs) + " inputs, the op takes " +
                                           std::to_string(lo) +
                                           (hi > lo ? " or " + std::to_string(hi) : std::string()));
      }
      switch (kind_) {
        case OpKind::kIntQuant: *kernel = new IntQuantKernel(prefix, attrs); break;
        case OpKind::kBipolarQuant: *kernel = new BipolarQuantKernel(prefix); break;
        case OpKind::kTrunc: *kernel = new TruncKernel(prefix, attrs, inputs == 6); break;
        case OpKind::kFloatQuant: *kernel = new FloatQuantKernel(prefix, attrs); break;
      }
      return nullptr;
    } catch (...) {
      *kernel = nullptr;
      return status_from_current_exception(prefix);
    }
  }

 private:
  // Output type and shape. Never fails: where the inputs cannot be judged (unknown or unsupported
  // types, incompatible shapes), nothing is set and the run reports the problem. A rank-0 X may be
  // an X of unknown rank (ORT reports both alike), so it sets no shape either.
  static OrtStatusPtr ORT_API_CALL infer_callback(const OrtCustomOp* op, OrtShapeInferContext* context) noexcept {
    try {
      static_cast<const QonnxOp*>(op)->infer(context);
    } catch (...) {
      // ORT (as of 1.31) ignores this function's status, so failures would only leak; the run
      // reports any real problem with the inputs.
    }
    return nullptr;
  }

  void infer(OrtShapeInferContext* context) const {
    std::vector<InferredInput> in = inferred_inputs(context);
    if (in.size() < required_inputs() || in.empty() || in[0].dims.empty()) return;
    if (kind_ == OpKind::kBipolarQuant) in.resize(2);  // the optional third input plays no part
    for (const auto& input : in) {
      if (!input.dtype || is_onnx_only(*input.dtype)) return;  // the run reports such inputs
    }
    const bool trunc_v2 = kind_ == OpKind::kTrunc && in.size() == 6;
    // Which inputs broadcast into the output (as the *_spec functions broadcast them).
    std::vector<size_t> which;
    switch (kind_) {
      case OpKind::kIntQuant: which = {0, 1, 2, 3}; break;
      case OpKind::kBipolarQuant: which = {0, 1}; break;
      case OpKind::kTrunc:  // v2 ignores in_bitwidth (input 3)
        which = trunc_v2 ? std::vector<size_t>{0, 1, 2, 4, 5} : std::vector<size_t>{0, 1, 2, 3, 4};
        break;
      case OpKind::kFloatQuant: which = {0, 1, 2, 3, 4, 5}; break;
    }
    if (kind_ == OpKind::kIntQuant) {
      // A 1-bit signed IntQuant does not broadcast with bitwidth (one element); which path runs
      // depends on bitwidth's value, unknown here, so its rank must not decide the output rank.
      const std::array<size_t, 3> others{0, 1, 2};
      const auto base = broadcast_symbolic(in, others);
      if (!base || in[3].dims.size() > base->size()) return;
    }
    const auto dims = broadcast_symbolic(in, which);
    if (!dims) return;

    DType dtype = DType::kFloat32;
    if (!float32_output()) {
      std::vector<TensorView> units;
      for (const auto& input : in) units.push_back(unit_tensor(*input.dtype, input.dims.size()));
      if (kind_ == OpKind::kBipolarQuant) {
        dtype = qonnx::bipolar_quant_spec(units[0], units[1]).dtype;
      } else if (trunc_v2) {
        dtype = qonnx::trunc_v2_spec(units[0], units[1], units[2], units[3], units[4], units[5]).dtype;
      } else {
        dtype = qonnx::trunc_spec(units[0], units[1], units[2], units[3], units[4]).dtype;
      }
    }
    set_output(context, dtype, *dims);
  }

  const char* name_;
  OpKind kind_;
};

// The op objects live as long as the library: ORT keeps pointers to them in every session.
QonnxOp g_int_quant{"IntQuant", OpKind::kIntQuant};
QonnxOp g_quant{"Quant", OpKind::kIntQuant};
QonnxOp g_bipolar_quant{"BipolarQuant", OpKind::kBipolarQuant};
QonnxOp g_trunc{"Trunc", OpKind::kTrunc};
QonnxOp g_float_quant{"FloatQuant", OpKind::kFloatQuant};

constexpr std::array<const char*, 3> kDomains{"qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas"};

}  // namespace

void add_qonnx_domains(std::vector<OrtCustomOpDomain*>& domains) {
  for (const char* name : kDomains) {
    OrtCustomOpDomain* domain = add_domain(domains, name);
    for (QonnxOp* op : {&g_int_quant, &g_quant, &g_bipolar_quant, &g_trunc, &g_float_quant}) {
      check(api().CustomOpDomain_Add(domain, op), name);
    }
  }
}

}  // namespace polyquant::ort
