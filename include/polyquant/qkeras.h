// QKeras quantizers (quantized_bits, quantized_relu, quantized_linear), bit-exact with QKeras at
// google/qkeras commit 78ea90fc (TensorFlow CPU, float32).
//
// QKeras evaluates each quantizer as a chain of float32 TensorFlow ops with denormals flushed to
// zero; polyquant evaluates the same ops in the same order under the same flush rule (x86-64 and
// AArch64; elsewhere subnormals are computed). Inputs of any float dtype are rounded to float32
// (QKeras' K.cast_to_floatx); outputs are float32.
//
// The data-dependent scales of alpha="auto"/"auto_po2" are found by reductions in the core: a
// per-group maximum, then (auto_po2) least-squares rounds, each one pass over the data, every
// group summed in a fixed order (identical for any thread count and kernel set). QKeras' float32
// means are reproduced by float64 sums rounded once to float32: equal to TensorFlow's own
// summation order whenever the mean's rounding does not move a power-of-two decision.
//
// Errors are polyquant::Error (kValue / kType) naming the parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "polyquant/export.h"
#include "polyquant/plan.h"
#include "polyquant/tensor.h"

namespace polyquant::qkeras {

// Keras' global settings that QKeras reads, made explicit (defaults are Keras').
enum class DataFormat { kChannelsLast, kChannelsFirst };
struct Settings {
  float epsilon = 1e-7f;                                // keras.backend.epsilon()
  DataFormat image_data_format = DataFormat::kChannelsLast;  // keras.backend.image_data_format()
};

// Training mode (QKeras: Keras learning phase 1). Quantizers built with use_stochastic_rounding
// then round stochastically: element i rounds down when its fraction f < U_i, else up, with U_i
// on the 2^-23 lattice of [0, 1) drawn by Philox4x32-10 from (seed, i, round). Deterministic for a
// seed, independent of threads and kernel sets.
struct Training {
  bool enabled = false;
  std::uint64_t seed = 0;
};

// qnoise_factor q of the blend x + q * (xq - x). QKeras converts a Python float to float32 where
// it meets a tensor, except in (1 - q) with use_ste=False, computed in double first; with
// use_variables=True q is a float32 variable and 1 - q is float32 arithmetic.
struct QNoise {
  double factor = 1.0;
  bool float32_variable = false;  // use_variables=True
};

enum class Alpha {
  kNone,     // scale 1
  kValue,    // a number or per-channel array, passed as the `alpha` tensor
  kAuto,     // max-based scale per channel
  kAutoPo2,  // power-of-two scale per channel, refined by least squares
};

// scale_axis: None (the image data format decides), one int, or a list of ints (the axes that
// keep their own scales; [] means one scale for the whole tensor). A negative int counts from the
// end (QKeras fails on it).
struct ScaleAxis {
  enum class Kind { kNone, kInt, kList } kind = Kind::kNone;
  std::vector<int> axes;
};

// elements_per_scale of quantized_bits(alpha="auto_po2"): groups of that many consecutive
// channels share one least-squares scale.
struct ElementsPerScale {
  enum class Kind { kNone, kInt, kList } kind = Kind::kNone;
  std::vector<std::int64_t> values;
};

// What the data-dependent scale search of an alpha="auto"/"auto_po2" call did: the passes it made
// over x before the quantizing pass (benchmarks compare a call with that many reads plus a copy).
// A least-squares round that returns its input scale bit for bit is a fixed point: QKeras'
// remaining rounds would repeat it, so polyquant stops there.
struct SearchInfo {
  int max_passes = 0;            // 1 when the max-based starting scale was computed from x
  int least_squares_rounds = 0;  // auto_po2 rounds run (at most 5; 1 for the sign function)
  // Of those, the rounds whose sums a CUDA device computed (x there): the others read a host copy
  // of x (docs/cuda.md, "QKeras' least-squares rounds on the device").
  int least_squares_rounds_on_device = 0;
};

// ---------------------------------------------------------------------------------------------
// quantized_bits(bits, integer, symmetric, keep_negative, alpha, use_stochastic_rounding,
//                scale_axis, qnoise_factor, use_ste, elements_per_scale, min_po2_exponent,
//                max_po2_exponent, post_training_scale)
//
// Fixed point (alpha None or a value), m = 2^(bits - keep_negative), m_i = 2^integer:
//   xq  = m_i * clip(round_through(x * m / m_i), keep_negative * (symmetric - m), m - 1) / m
//   (bits - keep_negative <= 0: xq = sign(x) with 0 -> +1, mapped to {0, 1} when unsigned)
//   out = x + q * (alpha * xq - x)        (use_ste=False: (1 - q) * x + q * alpha * xq)
// alpha "auto"/"auto_po2" (symmetric forced, keep_negative ignored), xs = x / m_i,
// L = 2^(bits-1) - 1:
//   s   = max(|xs|) * 2 / (2 L)  per group (auto), then (auto_po2) s = 2^round(log2(s + eps)) and
//         five least-squares rounds s = po2(mean(xs z) / (mean(z z) + eps)) with
//         z = sign(xs) * min(floor(|xs| / s + 0.5), L)  (rank-1 inputs: one scale per element)
//   out = m_i xs + q * ((s m) (m_i z / m) - m_i xs);   reported scale = s * m.
// post_training_scale (frozen): s = post_training_scale / m, no search.
struct QuantizedBitsAttrs {
  double bits = 8;
  double integer = 0;
  bool symmetric = false;
  bool keep_negative = true;
  Alpha alpha = Alpha::kNone;
  bool use_stochastic_rounding = false;
  ScaleAxis scale_axis;
  QNoise qnoise;
  bool use_ste = true;
  ElementsPerScale elements_per_scale;
  std::optional<double> min_po2_exponent;
  std::optional<double> max_po2_exponent;
  bool frozen_scale = false;  // post_training_scale given (alpha must be a string)
};

// The output's shape (x's, broadcast with a value alpha) and dtype (float32), after validating
// every attribute. `alpha` as for quantized_bits().
POLYQUANT_API TensorSpec quantized_bits_spec(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                                             const Settings& settings = {});
// Shape of the reported scale of an auto/auto_po2 call on x (QKeras' kept dimensions).
POLYQUANT_API Dims quantized_bits_scale_shape(const TensorView& x, const QuantizedBitsAttrs& attrs,
                                              const Settings& settings = {});
// `alpha`: the alpha tensor for Alpha::kValue, the post_training_scale for a frozen auto call,
// ignored otherwise (pass an empty view). `scale_out` (auto, not frozen): receives the reported
// scale, float32 of quantized_bits_scale_shape(); may be null.
// `info`: receives what the scale search did; may be null.
POLYQUANT_API void quantized_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                                  const Settings& settings, const Training& training, const MutableTensorView& out,
                                  const MutableTensorView* scale_out = nullptr, SearchInfo* info = nullptr);
// Validates once and returns the plan: its spec() is quantized_bits_spec's result, its run(out) is
// quantized_bits (the scale search, which reads x, runs in run()). The plan keeps `scale_out` and
// `info` as pointers and writes through them each time it runs, reading *scale_out then (so a
// caller may size the scale after planning, from quantized_bits_scale_shape): both must outlive
// the runs.
POLYQUANT_API PlannedCall quantized_bits_plan(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                                              const Settings& settings, const Training& training,
                                              const MutableTensorView* scale_out = nullptr, SearchInfo* info = nullptr);
// d out / d x as QKeras' graph defines it: 1 (use_ste), 1 - q (use_ste=False).
// Every *_gradient takes an optional `grad_output`, the upstream gradient (float32, float16 or
// bfloat16, of the output's shape, on x's device): then out = grad_output * (d out / d x), the
// chain rule's product of the backward (TensorFlow's and torch autograd's), in the same pass, with
// x86's float32 multiply under TensorFlow's flush to zero on every kernel set and on the GPU.
POLYQUANT_API void quantized_bits_gradient(const TensorView& x, const TensorView& alpha,
                                           const QuantizedBitsAttrs& attrs, const Settings& settings,
                                           const MutableTensorView& out, const TensorView* grad_output = nullptr);
// Validates once and returns the plan: its spec() is quantized_bits_spec's result, its run(out) is
// quantized_bits_gradient (grad_output, when given, is kept by value: its data must outlive the runs).
POLYQUANT_API PlannedCall quantized_bits_gradient_plan(const TensorView& x, const TensorView& alpha,
                                                       const QuantizedBitsAttrs& attrs, const Settings& settings,
                                                       const TensorView* grad_output = nullptr);

// ---------------------------------------------------------------------------------------------
// quantized_relu(bits, integer, use_sigmoid, negative_slope, use_stochastic_rounding,
//                relu_upper_bound, is_quantized_clip, qnoise_factor, use_ste,
//                enable_fast_inference)
//
// nsb = bits - (negative_slope != 0), m = 2^nsb, m_i = 2^integer, m_f = 2^(integer - nsb):
//   x_u = leaky_relu(x, ns) capped at m_i - m_f (is_quantized_clip) or at relu_upper_bound
//   xq  = m_i * clip(round_through(x m / m_i) / m, 0, 1 - 1/m)
//         (+ m_i ns clip(round_through(x m / m_i * ns) / (ns m), -1, 0) when ns > 0;
//          use_sigmoid: through the hard sigmoid, one level coarser)
//   out = x_u + q * (xq - x_u)      (use_ste=False: (1 - q) x_u + q xq)
// Stochastic rounding here rounds to multiples of 0.5 (QKeras' default precision).
struct QuantizedReluAttrs {
  double bits = 8;
  double integer = 0;
  bool use_sigmoid = false;
  double negative_slope = 0;
  bool use_stochastic_rounding = false;
  std::optional<double> relu_upper_bound;
  bool is_quantized_clip = true;
  QNoise qnoise;
  bool use_ste = true;
  bool enable_fast_inference = false;
};
POLYQUANT_API TensorSpec quantized_relu_spec(const TensorView& x, const QuantizedReluAttrs& attrs);
POLYQUANT_API void quantized_relu(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training,
                                  const MutableTensorView& out);
// Validates once and returns the plan: its spec() is quantized_relu_spec's result, its run(out) is quantized_relu.
POLYQUANT_API PlannedCall quantized_relu_plan(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training);
// d out / d x: d x_u / d x (1 above 0, ns or 0 at and below 0, 0 above the cap), times 1 - q
// without use_ste.
// `grad_output`: as quantized_bits_gradient's.
POLYQUANT_API void quantized_relu_gradient(const TensorView& x, const QuantizedReluAttrs& attrs,
                                           const MutableTensorView& out, const TensorView* grad_output = nullptr);
// Validates once and returns the plan: its spec() is quantized_relu_spec's result, its run(out) is
// quantized_relu_gradient.
POLYQUANT_API PlannedCall quantized_relu_gradient_plan(const TensorView& x, const QuantizedReluAttrs& attrs,
                                                       const TensorView* grad_output = nullptr);

// ---------------------------------------------------------------------------------------------
// quantized_linear(bits, integer, symmetric, keep_negative, alpha, use_stochastic_rounding,
//                  scale_axis, qnoise_factor)
//
// data_type_scale d = 2^(integer - bits + keep_negative); quantization scale s = d (alpha None),
// alpha * d (a value), or from the data ("auto": max |x| * 2 / (clip_max - clip_min) per group,
// at least eps; "auto_po2": its power of two refined by up to five least-squares rounds, stopping
// when no scale changes; one round for the sign function):
//   c   = clip(x / s, clip_min, clip_max)      clip = [keep_negative (symmetric - u), u - 1],
//                                               u = 2^(bits - keep_negative); [-0.5, 0.5] for
//                                               bits == 1 with keep_negative (sign function)
//   xq  = (round_through(c - shift) + shift) * s     shift = 0.5 for the sign function, else 0
//   out = x + q * (xq - x)
struct QuantizedLinearAttrs {
  double bits = 8;
  double integer = 0;
  bool symmetric = true;
  bool keep_negative = true;
  Alpha alpha = Alpha::kNone;
  bool use_stochastic_rounding = false;
  ScaleAxis scale_axis;
  QNoise qnoise;
};
POLYQUANT_API TensorSpec quantized_linear_spec(const TensorView& x, const TensorView& alpha,
                                               const QuantizedLinearAttrs& attrs, const Settings& settings = {});
// Shape of the quantization scale of a call on x: alpha's shape (a value), () for None, the kept
// dimensions for auto/auto_po2.
POLYQUANT_API Dims quantized_linear_scale_shape(const TensorView& x, const TensorView& alpha,
                                                const QuantizedLinearAttrs& attrs, const Settings& settings = {});
// `alpha`: the alpha tensor for Alpha::kValue (else ignored). `quantization_scale_out`: receives
// the quantization scale (float32 of quantized_linear_scale_shape()); may be null.
// `info`: receives what the scale search did; may be null.
POLYQUANT_API void quantized_linear(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                    const Settings& settings, const Training& training, const MutableTensorView& out,
                                    const MutableTensorView* quantization_scale_out = nullptr, SearchInfo* info = nullptr);
// Validates once and returns the plan: its spec() is quantized_linear_spec's result, its run(out)
// is quantized_linear (the scale, from alpha or the search over x, is found in run()).
// `quantization_scale_out` and `info` are kept as pointers, as quantized_bits_plan keeps its own.
POLYQUANT_API PlannedCall quantized_linear_plan(const TensorView& x, const TensorView& alpha,
                                                const QuantizedLinearAttrs& attrs, const Settings& settings,
                                                const Training& training,
                                                const MutableTensorView* quantization_scale_out = nullptr,
                                                SearchInfo* info = nullptr);
// d out / d x = (1 - q) + q [clip_min <= x / s <= clip_max] (bounds inclusive). `grad_output`: as
// quantized_bits_gradient's.
POLYQUANT_API void quantized_linear_gradient(const TensorView& x, const TensorView& alpha,
                                             const QuantizedLinearAttrs& attrs, const Settings& settings,
                                             const MutableTensorView& out, const TensorView* grad_output = nullptr);
// Validates once and returns the plan: its spec() is quantized_linear_spec's result, its run(out)
// is quantized_linear_gradient.
POLYQUANT_API PlannedCall quantized_linear_gradient_plan(const TensorView& x, const TensorView& alpha,
                                                         const QuantizedLinearAttrs& attrs, const Settings& settings,
                                                         const TensorView* grad_output = nullptr);

// Float32 helpers QKeras derives its constants with (exposed for bindings and tests).
// 2^e as tf.pow(2.0, e) computes it in float32.
POLYQUANT_API float pow2f(float e);
// The data-type scale of quantized_linear: 2^((float32(integer) - bits) + keep_negative).
POLYQUANT_API float linear_data_type_scale(double bits, double integer, bool keep_negative);

}  // namespace polyquant::qkeras
