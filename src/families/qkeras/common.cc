// Argument validation, messages and the kernel call shared by the QKeras quantizers; pow2f.
#include "families/qkeras/common.h"

#include <array>
#include <span>
#include <string>

#include "core/device_elementwise.h"
#include "core/elementwise.h"
#include "polyquant/error.h"

namespace polyquant::qkeras {
namespace internal {

[[noreturn]] void value_error(const std::string& message) { throw Error(ErrorKind::kValue, message); }

std::string number(double v) {
  std::string s = std::to_string(v);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

void require_finite(double v, const char* name) {
  if (!std::isfinite(v)) value_error(std::string(name) + ": must be a finite number, got " + number(v));
}

void require_well_formed(const ScaleAxis& axis) {
  if (axis.kind == ScaleAxis::Kind::kInt && axis.axes.size() != 1) {
    value_error("scale_axis: an int scale_axis holds exactly one axis, got " + std::to_string(axis.axes.size()));
  }
}
void require_well_formed(const ElementsPerScale& eps) {
  if (eps.kind == ElementsPerScale::Kind::kInt && eps.values.size() != 1) {
    value_error("elements_per_scale: an int elements_per_scale holds exactly one value, got " + std::to_string(eps.values.size()));
  }
}
void require_settings(const Settings& settings) {
  if (!(settings.epsilon >= 0.0f) || !std::isfinite(settings.epsilon)) {
    value_error("epsilon: must be a finite number >= 0, got " + number(settings.epsilon));
  }
}

void require_x(const TensorView& x) {
  if (!is_floating(x.dtype) && x.dtype != DType::kBool && dtype_size(x.dtype) == 0) {
    throw Error(ErrorKind::kType, "x: unsupported dtype");
  }
  if (x.numel() > 0 && x.data == nullptr) value_error("x: tensor has no data");
}

void require_devices(const TensorView& x, const TensorView& alpha, const char* op) {
  const detail::NamedView operands[] = {{&x, "x"}, {&alpha, "alpha"}};
  if (alpha.device.is_cpu()) {
    detail::op_device(std::span(operands, 1), nullptr, op);
  } else {
    detail::op_device(operands, nullptr, op);
  }
}

void require_grad_output(const TensorView& grad_output, const TensorView& x, const TensorSpec& spec, const char* op) {
  const DType d = grad_output.dtype;
  if (d != DType::kFloat32 && d != DType::kFloat16 && d != DType::kBFloat16) {
    throw Error(ErrorKind::kType, std::string("grad_output: dtype ") + dtype_name(d) +
                                      " is not supported; float32, float16 or bfloat16 (the gradient is float32)");
  }
  if (!(grad_output.shape == spec.shape)) {
    value_error("grad_output: shape " + grad_output.shape.str() + " must equal the gradient's shape " + spec.shape.str());
  }
  if (grad_output.numel() > 0 && grad_output.data == nullptr) value_error("grad_output: tensor has no data");
  const detail::NamedView operands[] = {{&x, "x"}, {&grad_output, "grad_output"}};
  detail::op_device(operands, nullptr, op);
}

void run_kernel(KernelOp op, const TensorView* inputs, int count, const MutableTensorView& out, const void* params) {
  // x and the output (the scale may be one the family derived on the host: the engine copies it).
  const detail::NamedView operands[] = {{&inputs[0], "x"}};
  detail::op_device(operands, &out, detail::op_name(op));
  std::array<DType, 3> kd{DType::kFloat32, DType::kFloat32, DType::kFloat32};
  detail::ElementwiseCall call;
  call.inputs = std::span<const TensorView>(inputs, static_cast<std::size_t>(count));
  call.kernel_dtypes = std::span<const DType>(kd.data(), static_cast<std::size_t>(count));
  call.out = out;
  call.kernel_out_dtype = DType::kFloat32;
  call.kernel = detail::best_kernel(op, WorkType::kF32);
  call.op = op;
  call.work = WorkType::kF32;
  call.params = params;
  call.repeated_row_operands = true;  // a per-channel scale (alpha), channels last
  call.per_row_operands = true;       // a scale per short row (scale_axis=0 on a tall, narrow x)
  detail::run_elementwise(call);
}

detail::QkBlend make_blend(const QNoise& q, bool use_ste) {
  require_finite(q.factor, "qnoise_factor");
  detail::QkBlend b;
  b.use_ste = use_ste;
  b.q = static_cast<float>(q.factor);
  // (1 - q): a Python float (double, rounded once) or float32 arithmetic on a float32 variable.
  b.one_minus_q = q.float32_variable ? 1.0f - b.q : static_cast<float>(1.0 - q.factor);
  return b;
}

detail::QkStochastic make_stochastic(bool requested, const Training& training, float scale) {
  detail::QkStochastic s;
  s.enabled = requested && training.enabled;
  s.seed = training.seed;
  s.scale = scale;
  return s;
}

ContiguousF32 contiguous_f32(const TensorView& x) {
  ContiguousF32 c;
  if (!x.device.is_cpu()) {  // a parameter on a device (alpha), read on the host: copied back
    std::vector<unsigned char> storage;
    const TensorView host = detail::host_readable(x, storage);
    c.storage.resize(static_cast<std::size_t>(x.numel()));
    detail::convert_into(host, MutableTensorView(c.storage.data(), DType::kFloat32, x.shape));
    c.data = c.storage.data();
    return c;
  }
  if (x.dtype == DType::kFloat32 && x.is_contiguous()) {
    c.data = static_cast<const float*>(x.data);
    return c;
  }
  c.storage.resize(static_cast<std::size_t>(x.numel()));
  detail::convert_into(x, MutableTensorView(c.storage.data(), DType::kFloat32, x.shape));
  c.data = c.storage.data();
  return c;
}

}  // namespace internal

float pow2f(float e) { return internal::pow2_float32(e); }

}  // namespace polyquant::qkeras
