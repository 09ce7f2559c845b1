// QKeras internals shared by the quantizers: argument validation, messages and the kernel call.
//
// One file per quantizer (quantized_bits.cc, quantized_relu.cc, quantized_linear.cc): validation,
// QKeras' derived constants (each computed as its float32 TensorFlow op computes it) and the kernel
// calls; the alpha="auto"/"auto_po2" searches run over the grouped reductions of scale_search.h.
// No numerics beyond the constants: the per-element work is in the kernels (kernels.h).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "polyquant/qkeras.h"

namespace polyquant::qkeras::internal {

using detail::KernelOp;
using detail::WorkType;

// Throws the kValue error with `message`.
[[noreturn]] void value_error(const std::string& message);
// A double as std::to_string writes it (six decimals) without trailing zeros: 0.5, 3, 0.000001.
std::string number(double v);
// Names the argument when v is infinite or NaN.
void require_finite(double v, const char* name);

// The shapes of the variant-like attribute structs: one entry for an int kind.
void require_well_formed(const ScaleAxis& axis);
void require_well_formed(const ElementsPerScale& eps);
void require_settings(const Settings& settings);

// x's dtype is one the engine reads, and its data is there when it has elements.
void require_x(const TensorView& x);

// The devices of x and alpha for quantizer `op`: x in host memory or on a CUDA device (alpha
// 'auto': its maximum pass runs there, scale_search.h's group_max_on_device; 'auto_po2': its
// least-squares rounds read a host copy of x), and alpha, the quantizer's configuration (a value,
// a post_training_scale), in host memory or on x's device (the engine copies it over; a
// post_training_scale is read on the host).
void require_devices(const TensorView& x, const TensorView& alpha, const char* op);

// 2^e in float32 as tf.pow(2.0, e) (exact for integral e; powf otherwise).
inline float pow2_float32(float e) { return std::pow(2.0f, e); }

// The upstream gradient of a gradient call (kernels.h, qk_chain): float32, float16 or bfloat16 (exact
// in float32), of exactly the gradient's shape `spec`, on x's device; throws naming grad_output.
void require_grad_output(const TensorView& grad_output, const TensorView& x, const TensorSpec& spec, const char* op);

// Everything the elementwise engine needs to run one kernel over x and up to two float32 operands
// (a scale, an upstream gradient).
void run_kernel(KernelOp op, const TensorView* inputs, int count, const MutableTensorView& out, const void* params);

// QKeras' qnoise blend of the quantized value with x (see QkBlend).
detail::QkBlend make_blend(const QNoise& q, bool use_ste);
// Stochastic rounding when requested and training (seeded by `training`); `scale` = 1 / precision.
detail::QkStochastic make_stochastic(bool requested, const Training& training, float scale);

// x as C-contiguous float32 (converted or copied only when it is not already).
struct ContiguousF32 {
  std::vector<float> storage;
  const float* data = nullptr;
};
ContiguousF32 contiguous_f32(const TensorView& x);

}  // namespace polyquant::qkeras::internal
