// Fuzz harness over polyquant's public C++ API: the QKeras quantizers (polyquant/qkeras.h).
//
// Each case draws a quantizer (quantized_bits, quantized_relu, quantized_linear) or its gradient,
// attributes from their whole domain and beyond it (bits <= 0, fractional and non-finite widths,
// negative `integer`, alpha None / a per-channel tensor / "auto" / "auto_po2" / a post-training
// scale, scale_axis None / int / list with out-of-range entries, elements_per_scale, po2 exponent
// limits, negative slopes that are not powers of two, upper bounds, qnoise factors, use_ste, fast
// inference, epsilon and the data format, training mode with a seed), an input of any rank (0 to
// 8, empty dimensions, now and then 65,536+ elements so threads split it) and dtype with drawn
// strides (zero, negative, gapped, transposed), an alpha that broadcasts (or does not), and an
// output dtype (float32; float64 and float16 round into; an integer one must be rejected). Then:
//   * the *_spec and *_scale_shape functions; a rejection must be polyquant::Error (anything
//     else, a crash or a sanitizer report fails the run);
//   * the call on every kernel set the CPU has, each output and scale compared with the scalar
//     set's bit for bit, NaN payloads and signs included (the kernels specify their NaN results,
//     qk_nan_result, and a NaN scale is +NaN); an error must be the same on every set;
//   * again with one thread, on contiguous copies of x and alpha, into a reversed output, and in
//     place (out = x), each compared with the scalar result.
//
// `polyquant_fuzz_qkeras [--seed N] [--seconds S] [--iterations N] [--start I] [--well-formed]`
// replays case I with `--seed N --start I --iterations 1`. Cases also draw ScaleAxis and
// ElementsPerScale values whose vectors do not fit their kind (an int kind with no entry or two),
// which must be errors; --well-formed leaves them out.
// With -DPOLYQUANT_LIBFUZZER, LLVMFuzzerTestOneInput draws the case from libFuzzer's bytes.
#include <polyquant/polyquant.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"

namespace pq = polyquant;
namespace qk = polyquant::qkeras;

namespace {

using namespace polyquant::fuzz;

enum class Quantizer { kBits, kRelu, kLinear };
constexpr const char* kQuantizerNames[] = {"quantized_bits", "quantized_relu", "quantized_linear"};

bool g_malformed = true;  // cleared by --well-formed

struct Case {
  Quantizer q = Quantizer::kBits;
  bool gradient = false;
  Tensor x;
  std::optional<Tensor> alpha;  // the alpha tensor, or quantized_bits' post_training_scale
  qk::QuantizedBitsAttrs bits;
  qk::QuantizedReluAttrs relu;
  qk::QuantizedLinearAttrs linear;
  qk::Settings settings;
  qk::Training training;
  pq::DType out_dtype = pq::DType::kFloat32;
  bool want_scale = false;

  std::string describe() const;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string alpha_name(qk::Alpha a) {
  switch (a) {
    case qk::Alpha::kNone: return "None";
    case qk::Alpha::kValue: return "value";
    case qk::Alpha::kAuto: return "auto";
    case qk::Alpha::kAutoPo2: return "auto_po2";
  }
  return "?";
}

std::string axis_name(const qk::ScaleAxis& a) {
  if (a.kind == qk::ScaleAxis::Kind::kNone) return "None";
  std::string s = a.kind == qk::ScaleAxis::Kind::kInt ? "int[" : "list[";
  for (int v : a.axes) s += std::to_string(v) + ",";
  return s + "]";
}

std::string eps_name(const qk::ElementsPerScale& e) {
  if (e.kind == qk::ElementsPerScale::Kind::kNone) return "None";
  std::string s = e.kind == qk::ElementsPerScale::Kind::kInt ? "int[" : "list[";
  for (auto v : e.values) s += std::to_string(v) + ",";
  return s + "]";
}

std::string qnoise_name(const qk::QNoise& q) { return num(q.factor) + (q.float32_variable ? "(variable)" : ""); }

std::string Case::describe() const {
  std::string d = kQuantizerNames[static_cast<int>(q)];
  if (gradient) d += "_gradient";
  d += std::string(" x ") + pq::dtype_name(x.dtype) + x.shape.str() + "/" + x.strides.str();
  if (alpha) d += std::string(" alpha ") + pq::dtype_name(alpha->dtype) + alpha->shape.str() + "/" + alpha->strides.str();
  switch (q) {
    case Quantizer::kBits:
      d += " bits=" + num(bits.bits) + " integer=" + num(bits.integer) + " symmetric=" + std::to_string(bits.symmetric) +
           " keep_negative=" + std::to_string(bits.keep_negative) + " alpha=" + alpha_name(bits.alpha) +
           (bits.frozen_scale ? " post_training_scale" : "") + " stochastic=" + std::to_string(bits.use_stochastic_rounding) +
           " scale_axis=" + axis_name(bits.scale_axis) + " qnoise=" + qnoise_name(bits.qnoise) +
           " use_ste=" + std::to_string(bits.use_ste) + " elements_per_scale=" + eps_name(bits.elements_per_scale) +
           " min_po2=" + (bits.min_po2_exponent ? num(*bits.min_po2_exponent) : "None") +
           " max_po2=" + (bits.max_po2_exponent ? num(*bits.max_po2_exponent) : "None");
      break;
    case Quantizer::kRelu:
      d += " bits=" + num(relu.bits) + " integer=" + num(relu.integer) + " use_sigmoid=" + std::to_string(relu.use_sigmoid) +
           " negative_slope=" + num(relu.negative_slope) + " stochastic=" + std::to_string(relu.use_stochastic_rounding) +
           " relu_upper_bound=" + (relu.relu_upper_bound ? num(*relu.relu_upper_bound) : "None") +
           " is_quantized_clip=" + std::to_string(relu.is_quantized_clip) + " qnoise=" + qnoise_name(relu.qnoise) +
           " use_ste=" + std::to_string(relu.use_ste) + " fast=" + std::to_string(relu.enable_fast_inference);
      break;
    case Quantizer::kLinear:
      d += " bits=" + num(linear.bits) + " integer=" + num(linear.integer) + " symmetric=" + std::to_string(linear.symmetric) +
           " keep_negative=" + std::to_string(linear.keep_negative) + " alpha=" + alpha_name(linear.alpha) +
           " stochastic=" + std::to_string(linear.use_stochastic_rounding) + " scale_axis=" + axis_name(linear.scale_axis) +
           " qnoise=" + qnoise_name(linear.qnoise);
      break;
  }
  d += " epsilon=" + num(settings.epsilon) +
       (settings.image_data_format == qk::DataFormat::kChannelsFirst ? " channels_first" : " channels_last");
  d += " training=" + std::to_string(training.enabled) + " seed=" + std::to_string(training.seed);
  d += std::string(" out=") + pq::dtype_name(out_dtype) + (want_scale ? " +scale" : "");
  return d;
}

// ---- drawing a case ---------------------------------------------------------------------------

pq::Dims draw_x_shape(Source& s) {
  pq::Dims d;
  if (s.chance(6)) {  // large enough to be split over threads and reduction chunks
    switch (s.below(3)) {
      case 0: return pq::Dims{static_cast<std::int64_t>(20000 + s.below(50000)), static_cast<std::int64_t>(1 + s.below(5))};
      case 1: return pq::Dims{static_cast<std::int64_t>(2 + s.below(3)), static_cast<std::int64_t>(40000 + s.below(40000))};
      default: return pq::Dims{static_cast<std::int64_t>(65537 + s.below(100000))};
    }
  }
  d.rank = static_cast<int>(s.chance(10) ? s.below(pq::kMaxRank + 1) : s.below(5));
  static const std::int64_t dims[] = {1, 1, 2, 3, 4, 0, 5, 7, 6, 12};
  static const std::int64_t rows[] = {16, 17, 31, 33, 64, 65, 130, 257};
  for (int i = 0; i < d.rank; ++i) d[i] = s.pick(dims);
  if (d.rank > 0 && s.chance(50)) d[d.rank - 1] = s.pick(rows);
  while (checked_numel(d) > 4096) d[static_cast<int>(s.below(static_cast<std::uint64_t>(d.rank)))] = 1;
  return d;
}

Tensor draw_x(Source& s) {
  static const pq::DType others[] = {pq::DType::kFloat16, pq::DType::kFloat64, pq::DType::kInt32, pq::DType::kInt8,
                                     pq::DType::kBool};
  const pq::DType dtype = s.chance(80) ? pq::DType::kFloat32 : s.pick(others);
  const pq::Dims shape = draw_x_shape(s);
  const bool raw_bits = s.chance(8);
  // Per-tensor magnitude, so that the auto searches see varied scales.
  const double magnitude = std::ldexp(1.0, static_cast<int>(s.below(24)) - 12);
  return make_tensor(s, dtype, shape, true, [&](void* buf, std::int64_t i) {
    if (raw_bits) {
      store_bits(buf, dtype, i, s.u64());
    } else {
      store(buf, dtype, i, s.chance(70) ? data_value(s) * magnitude : data_value(s));
    }
  });
}

// A parameter tensor (alpha, post_training_scale) of `shape` with values from `choices`.
template <std::size_t N>
Tensor param_tensor(Source& s, const pq::Dims& shape, const double (&choices)[N]) {
  const pq::DType dtype = s.chance(85) ? pq::DType::kFloat32 : s.pick(kAllTypes);
  const bool per_tensor = s.chance(40);
  const double v0 = s.pick(choices);
  return make_tensor(s, dtype, shape, true,
                     [&](void* buf, std::int64_t i) { store(buf, dtype, i, per_tensor ? v0 : s.pick(choices)); });
}

// The kept-dimension shape of a scale over x (last axis, or an axis of the drawn scale_axis).
pq::Dims kept_shape(Source& s, const pq::Dims& x) {
  pq::Dims d = x;
  const int keep = x.rank == 0 ? -1 : s.chance(70) ? x.rank - 1 : static_cast<int>(s.below(static_cast<std::uint64_t>(x.rank)));
  for (int i = 0; i < d.rank; ++i) {
    if (i != keep) d[i] = 1;
  }
  return d;
}

const double kAlphas[] = {1, 0.5, 2, 0.001, -2, 0, 3, 0.1, 1e-40, 1e30, kNaN, kInf, -kInf};
const double kPostTrainingScales[] = {0.25, 1, 4, 64, 1024, 0.5, 0, -1, 3, kNaN, kInf};

double draw_qnoise(Source& s) {
  static const double q[] = {1, 1, 1, 0, 0.5, 0.25, 0.3, 0.75, 1.5, -0.5};
  if (s.chance(1)) return s.chance(50) ? kNaN : kInf;
  return s.pick(q);
}

qk::ScaleAxis draw_scale_axis(Source& s, int rank) {
  qk::ScaleAxis a;
  const int k = static_cast<int>(s.below(4));
  if (k <= 1) return a;
  if (k == 2) {
    a.kind = qk::ScaleAxis::Kind::kInt;
    // Mostly in range, sometimes -rank - 1 or rank (out of range).
    a.axes = {static_cast<int>(s.below(static_cast<std::uint64_t>(2 * rank + 3))) - rank - 1};
    if (g_malformed && s.chance(20)) a.axes = s.chance(50) ? std::vector<int>{} : std::vector<int>{0, 1};
    return a;
  }
  a.kind = qk::ScaleAxis::Kind::kList;
  for (int d = 0; d < rank; ++d) {
    if (s.chance(40)) a.axes.push_back(d);
  }
  if (s.chance(10)) a.axes.push_back(static_cast<int>(s.below(12)) - 4);  // negative or beyond the rank
  if (s.chance(5) && !a.axes.empty()) a.axes.push_back(a.axes.front());   // a duplicate
  return a;
}

qk::ElementsPerScale draw_elements_per_scale(Source& s, const qk::ScaleAxis& axis) {
  qk::ElementsPerScale e;
  if (s.chance(75)) return e;
  static const std::int64_t values[] = {1, 2, 3, 4, 1, 2, 0, -2, 5};
  if (axis.kind == qk::ScaleAxis::Kind::kList && s.chance(60)) {
    e.kind = qk::ElementsPerScale::Kind::kList;
    std::size_t n = axis.axes.size();
    if (s.chance(10)) n += 1;  // lengths that do not match
    for (std::size_t i = 0; i < n; ++i) e.values.push_back(s.pick(values));
  } else {
    e.kind = s.chance(90) ? qk::ElementsPerScale::Kind::kInt : qk::ElementsPerScale::Kind::kList;
    e.values = {s.pick(values)};
  }
  if (g_malformed && s.chance(20)) e.values.clear();
  return e;
}

std::optional<double> draw_exponent(Source& s) {
  static const double e[] = {-12, -6, -3, -1, 0, 2, 5, -30, 1e9, kNaN};
  if (!s.chance(15)) return std::nullopt;
  return s.pick(e);
}

void draw_alpha(Source& s, Case& c, qk::Alpha alpha) {
  if (alpha != qk::Alpha::kValue || s.chance(3)) return;  // (3%: the tensor is missing)
  c.alpha = param_tensor(s, s.chance(40) ? operand_shape(s, c.x.shape, true) : operand_shape(s, c.x.shape, false), kAlphas);
}

Case draw_case(Source& s) {
  Case c;
  c.q = static_cast<Quantizer>(s.below(3));
  c.gradient = s.chance(12);
  c.x = draw_x(s);
  const int rank = c.x.shape.rank;
  static const double bit_widths[] = {2, 3, 4, 5, 6, 8, 8, 8, 16, 24, 1, 1, 0, -1, 0.5, 2.5, 32, 100};
  static const double integers[] = {0, 0, 0, 1, 2, 3, -2, -8, 0.5, 10, 100, -140};
  auto draw_bits = [&] { return s.chance(2) ? (s.chance(50) ? kNaN : kInf) : s.pick(bit_widths); };
  auto draw_integer = [&] { return s.chance(1) ? kNaN : s.pick(integers); };
  static const qk::Alpha alphas[] = {qk::Alpha::kNone, qk::Alpha::kNone,    qk::Alpha::kValue,
                                     qk::Alpha::kAuto, qk::Alpha::kAutoPo2, qk::Alpha::kAutoPo2};
  switch (c.q) {
    case Quantizer::kBits: {
      qk::QuantizedBitsAttrs& a = c.bits;
      a.bits = draw_bits();
      a.integer = draw_integer();
      a.alpha = s.pick(alphas);
      const bool auto_alpha = a.alpha == qk::Alpha::kAuto || a.alpha == qk::Alpha::kAutoPo2;
      a.symmetric = auto_alpha ? s.chance(90) : s.chance(50);
      a.keep_negative = s.chance(75);
      a.use_stochastic_rounding = s.chance(30);
      a.scale_axis = draw_scale_axis(s, rank);
      a.qnoise = {draw_qnoise(s), s.chance(50)};
      a.use_ste = s.chance(80);
      // elements_per_scale and the exponent limits: mostly with auto_po2, sometimes without (error).
      if (a.alpha == qk::Alpha::kAutoPo2 || s.chance(5)) {
        a.elements_per_scale = draw_elements_per_scale(s, a.scale_axis);
        a.min_po2_exponent = draw_exponent(s);
        a.max_po2_exponent = draw_exponent(s);
      }
      a.frozen_scale = auto_alpha ? s.chance(12) : s.chance(2);
      if (a.frozen_scale && !s.chance(3)) {
        c.alpha = param_tensor(s, s.chance(30) ? pq::Dims{} : kept_shape(s, c.x.shape), kPostTrainingScales);
      } else {
        draw_alpha(s, c, a.alpha);
      }
      c.want_scale = auto_alpha && !a.frozen_scale && s.chance(80);
      break;
    }
    case Quantizer::kRelu: {
      qk::QuantizedReluAttrs& a = c.relu;
      static const double relu_bits[] = {1, 2, 3, 4, 5, 6, 8, 10, 16, 0, -2, 0.5};
      static const double relu_integers[] = {0, 1, 2, 3, -1, -3, 0.5, 8};
      static const double slopes[] = {0, 0, 0, 0.125, 0.25, 0.5, 1, 2, 0.1, -0.25, 0.3, 0x1p-20};
      static const double bounds[] = {1.5, 0, 3, -1, 0.75, 100, kInf, kNaN};
      a.bits = s.chance(2) ? kNaN : s.pick(relu_bits);
      a.integer = s.chance(1) ? kInf : s.pick(relu_integers);
      a.use_sigmoid = s.chance(30);
      a.negative_slope = s.chance(1) ? kNaN : s.pick(slopes);
      a.use_stochastic_rounding = s.chance(30);
      if (s.chance(30)) a.relu_upper_bound = s.pick(bounds);
      a.is_quantized_clip = s.chance(60);
      a.qnoise = {draw_qnoise(s), s.chance(50)};
      a.use_ste = s.chance(80);
      a.enable_fast_inference = s.chance(10);
      break;
    }
    case Quantizer::kLinear: {
      qk::QuantizedLinearAttrs& a = c.linear;
      a.bits = draw_bits();
      a.integer = draw_integer();
      a.symmetric = s.chance(70);
      a.keep_negative = s.chance(75);
      a.alpha = s.pick(alphas);
      a.use_stochastic_rounding = s.chance(30);
      a.scale_axis = draw_scale_axis(s, rank);
      a.qnoise = {draw_qnoise(s), s.chance(50)};
      draw_alpha(s, c, a.alpha);
      c.want_scale = s.chance(60);
      break;
    }
  }
  if (s.chance(15)) {
    static const float eps[] = {1e-3f, 0.0f, 1e-30f, 0.5f, 1e-7f};
    c.settings.epsilon = s.pick(eps);
  }
  if (s.chance(20)) c.settings.image_data_format = qk::DataFormat::kChannelsFirst;
  c.training = {s.chance(50), s.u64()};
  static const pq::DType outs[] = {pq::DType::kFloat64, pq::DType::kFloat16, pq::DType::kInt32};
  if (s.chance(15)) c.out_dtype = s.pick(outs);
  return c;
}

// ---- running a case ---------------------------------------------------------------------------

struct Shapes {
  pq::Dims out, scale;
};

// The spec (and the scale's shape) of a case; throws what the library throws.
Shapes shapes_of(const Case& c, const pq::TensorView& x, const pq::TensorView& alpha) {
  Shapes sh;
  switch (c.q) {
    case Quantizer::kBits:
      sh.out = qk::quantized_bits_spec(x, alpha, c.bits, c.settings).shape;
      if (c.want_scale) sh.scale = qk::quantized_bits_scale_shape(x, c.bits, c.settings);
      break;
    case Quantizer::kRelu: sh.out = qk::quantized_relu_spec(x, c.relu).shape; break;
    case Quantizer::kLinear:
      sh.out = qk::quantized_linear_spec(x, alpha, c.linear, c.settings).shape;
      if (c.want_scale) sh.scale = qk::quantized_linear_scale_shape(x, alpha, c.linear, c.settings);
      break;
  }
  return sh;
}

void run_op(const Case& c, const pq::TensorView& x, const pq::TensorView& alpha, const pq::MutableTensorView& out,
            const pq::MutableTensorView* scale) {
  switch (c.q) {
    case Quantizer::kBits:
      if (c.gradient) return qk::quantized_bits_gradient(x, alpha, c.bits, c.settings, out);
      return qk::quantized_bits(x, alpha, c.bits, c.settings, c.training, out, scale);
    case Quantizer::kRelu:
      if (c.gradient) return qk::quantized_relu_gradient(x, c.relu, out);
      return qk::quantized_relu(x, c.relu, c.training, out);
    case Quantizer::kLinear:
      if (c.gradient) return qk::quantized_linear_gradient(x, alpha, c.linear, c.settings, out);
      return qk::quantized_linear(x, alpha, c.linear, c.settings, c.training, out, scale);
  }
}

// One execution: the output and scale tensors, or the polyquant::Error message.
struct Outcome {
  std::string error;
  Tensor out;
  std::optional<Tensor> scale;
};

Outcome execute(const Case& c, const pq::TensorView& x, const pq::TensorView& alpha, const Shapes& sh, bool strided_out,
                const std::string& where) {
  Outcome o;
  o.out = output_for(pq::TensorSpec{c.out_dtype, sh.out}, strided_out);
  const bool with_scale = c.want_scale && !c.gradient;
  if (with_scale) o.scale = output_for(pq::TensorSpec{pq::DType::kFloat32, sh.scale}, strided_out);
  const pq::MutableTensorView scale_view = with_scale ? o.scale->mutable_view() : pq::MutableTensorView();
  try {
    run_op(c, x, alpha, o.out.mutable_view(), with_scale ? &scale_view : nullptr);
  } catch (const pq::Error& e) {
    o.error = e.what();
  } catch (const std::exception& e) {
    fail(c.describe(), where + " threw a non-polyquant exception: " + e.what());
  }
  return o;
}

void check_same(const Case& c, const Outcome& got, const Outcome& want, const std::string& what, Stats& st) {
  if (got.error != want.error) {
    fail(c.describe(), what + ": error '" + got.error + "' differs from the reference's '" + want.error + "'");
  }
  if (!want.error.empty()) return;
  compare_bits(c.describe(), got.out, want.out, what + " (output)", st);
  if (want.scale) compare_bits(c.describe(), *got.scale, *want.scale, what + " (scale)", st);
}

void run_case(Source& s, Stats& st) {
  Case c = draw_case(s);
  ++st.cases;
  ++st.per_op[static_cast<std::size_t>(c.q)];
  const pq::TensorView x = c.x.view();
  const pq::TensorView alpha = c.alpha ? c.alpha->view() : pq::TensorView();
  Shapes sh;
  try {
    sh = shapes_of(c, x, alpha);
  } catch (const pq::Error&) {
    ++st.rejected;
    return;
  } catch (const std::exception& e) {
    fail(c.describe(), std::string("the spec threw a non-polyquant exception: ") + e.what());
  }
  if (checked_numel(sh.out) > (std::int64_t{1} << 22)) {
    ++st.rejected;  // a huge broadcast: the spec is all we can check without the memory
    return;
  }
  const bool strided_out = s.chance(20);
  // Every kernel set with the pool's threads, the scalar set first (the reference).
  std::optional<Outcome> reference;
  for (const std::string& set : g_sets) {
    select_set(set);
    Outcome o = execute(c, x, alpha, sh, strided_out, "kernel set " + set);
    ++st.executions;
    if (!reference) {
      reference = std::move(o);
      continue;
    }
    check_same(c, o, *reference, "kernel set " + set + " vs scalar", st);
  }
  if (!reference->error.empty()) ++st.rejected;
  const std::int64_t n = checked_numel(c.x.shape);
  // One thread (the active set): reductions and the elementwise engine split differently.
  if (n >= (std::int64_t{1} << 15) || s.chance(20)) {
    pq::set_num_threads(1);
    const Outcome o = execute(c, x, alpha, sh, false, "one thread");
    pq::set_num_threads(256);  // back to the pool's size
    ++st.executions;
    check_same(c, o, *reference, "one thread on kernel set " + g_sets.back() + " vs scalar", st);
  }
  // Contiguous copies of x and alpha.
  if (s.chance(50)) {
    Tensor xc = contiguous_copy(c.x);
    std::optional<Tensor> ac;
    if (c.alpha) ac = contiguous_copy(*c.alpha);
    const Outcome o = execute(c, xc.view(), ac ? ac->view() : pq::TensorView(), sh, false, "contiguous copies");
    ++st.executions;
    check_same(c, o, *reference, "contiguous copies on kernel set " + g_sets.back() + " vs the strided inputs on scalar", st);
  }
  // In place: the output is x's own memory (a contiguous float32 copy of x of the output's shape).
  if (reference->error.empty() && c.x.dtype == pq::DType::kFloat32 && c.out_dtype == pq::DType::kFloat32 && c.x.shape == sh.out &&
      s.chance(20)) {
    Tensor buf = contiguous_copy(c.x);
    try {
      run_op(c, buf.view(), alpha, buf.mutable_view(), nullptr);
    } catch (const std::exception& e) {
      fail(c.describe(), std::string("in place threw: ") + e.what());
    }
    ++st.executions;
    compare_bits(c.describe(), buf, reference->out, "in place on kernel set " + g_sets.back() + " vs scalar", st);
  }
}

// The deterministic driver (or libFuzzer) over run_case.
Driver make_driver() {
  Driver d;
  d.name = "polyquant_fuzz_qkeras";
  d.op_names.assign(std::begin(kQuantizerNames), std::end(kQuantizerNames));
  d.run_case = run_case;
  d.extra_flag = [](const std::string& flag) {
    if (flag != "--well-formed") return false;
    g_malformed = false;
    return true;
  };
  d.extra_usage = " [--well-formed]";
  return d;
}

}  // namespace

POLYQUANT_FUZZ_ENTRY_POINT(make_driver)
