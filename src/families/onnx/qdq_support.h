// The parameter layouts of linear quantization — per-tensor, per-axis, blocked — as broadcasting
// over views, shared by the ONNX Q/DQ ops and Quark's Extended ops (AIMET's affine ops have their
// own layouts in families/aimet).
//
// A per-axis parameter of length C becomes a view of x's rank with C on `axis` and 1 elsewhere. A
// blocked parameter (x's shape except ceil(D / B) on `axis`) is applied to x viewed with `axis`
// split in two, (D / B, B), the parameter's block dimension repeating with stride 0; a last,
// shorter block (D % B elements) is a second view against the parameter's last slice. The engine
// then sees ordinary broadcasting: no layout has its own code path.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/device_elementwise.h"
#include "core/elementwise.h"
#include "families/onnx/kernels.h"
#include "kernels/registry.h"
#include "kernels/row.h"
#include "polyquant/plan.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

enum class ParamGranularity : std::uint8_t { kTensor, kAxis, kBlocked };

struct ParamLayout {
  ParamGranularity granularity = ParamGranularity::kTensor;
  int axis = 0;                // normalized (kAxis, kBlocked)
  std::int64_t block_size = 0; // kBlocked
};

// Names used in error messages.
struct QdqNames {
  const char* op;     // "QuantizeLinear"
  const char* scale;  // "y_scale"
  const char* zero_point;
};

// Validates scale (and the zero point, when given) against x for `axis` / `block_size` and returns
// the layout. `one_element_is_tensor`: a scale of one element is per-tensor whatever its rank
// (onnx); otherwise only 0-d and shape (1,) are (Quark / ORT's IsScalarOr1ElementVector).
ParamLayout check_param_layout(const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                               std::int64_t axis, std::int64_t block_size, const QdqNames& names,
                               bool one_element_is_tensor);

// Runs `call` (its kernel, params, kernel dtypes, out) over x and the parameters laid out by
// `layout`: call.inputs is ignored and replaced by {x, scale[, zero_point]} views.
void run_with_layout(const ElementwiseCall& call, const TensorView& x, const TensorView& scale,
                     const TensorView* zero_point, const ParamLayout& layout);

// Throws unless `out` has exactly the spec's shape and dtype.
void require_exact_output(const MutableTensorView& out, const TensorSpec& spec, const char* op);

// A Q/DQ call resolved once from its operands and attributes: a family's plan_* function validates
// everything and derives the rest (output spec, parameter layout, kernel parameters, the dtypes
// the kernel reads and writes, the kernel); `*_spec` returns plan.spec, and the op itself runs the
// plan. `Params` is QuantizeLinearParams or DequantizeLinearParams.
template <class Params>
struct QdqPlan {
  const char* op = "";               // for error messages, with the parameters' names
  const char* scale_name = "scale";
  const char* zero_point_name = "zero_point";
  TensorSpec spec;                   // the output's shape and dtype
  ParamLayout layout;                // per-tensor, per-axis or blocked
  Params params;                     // the kernel's parameters
  std::array<DType, 3> kernel_dtypes{};  // x, scale, zero point as the kernel reads them
  DType kernel_out_dtype = DType::kFloat32;
  RowKernel kernel = nullptr;
  KernelOp kernel_op = KernelOp::kQuantizeLinear;  // the kernel's op and working precision: the
  WorkType kernel_work = WorkType::kF32;            // CUDA backend's launcher of the same row
  bool with_zero_point = false;      // the zero point is an operand of the kernel

  // The kernel of `op` in working precision `work` (dispatch's best kernel set, or on a device
  // the CUDA backend's).
  void use_kernel(KernelOp op, WorkType work) {
    kernel = best_kernel(op, work);
    kernel_op = op;
    kernel_work = work;
  }
};

// Runs `plan` over x and its parameters into `out` (which must match plan.spec exactly).
template <class Params>
void run_plan(const QdqPlan<Params>& plan, const TensorView& x, const TensorView& scale, const TensorView* zero_point,
              const MutableTensorView& out) {
  require_exact_output(out, plan.spec, plan.op);
  const NamedView operands[] = {{&x, "x"}, {&scale, plan.scale_name}, {zero_point != nullptr ? zero_point : &x, plan.zero_point_name}};
  op_device(operands, &out, plan.op);
  ElementwiseCall call;
  call.op = plan.kernel_op;
  call.work = plan.kernel_work;
  call.kernel_dtypes = plan.kernel_dtypes;
  call.out = out;
  call.kernel_out_dtype = plan.kernel_out_dtype;
  call.kernel = plan.kernel;
  call.params = &plan.params;
  run_with_layout(call, x, scale, plan.with_zero_point ? zero_point : nullptr, plan.layout);
}

// The public form of a plan: its spec, and a run over copies of the operands' views.
template <class Params>
PlannedCall planned_call(QdqPlan<Params> plan, const TensorView& x, const TensorView& scale, const TensorView* zero_point) {
  TensorSpec spec = plan.spec;
  std::optional<TensorView> zp;
  if (zero_point != nullptr) zp = *zero_point;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, scale, zp](const MutableTensorView& out) {
    run_plan(plan, x, scale, zp ? &*zp : nullptr, out);
  });
}

}  // namespace polyquant::detail
