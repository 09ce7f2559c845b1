// Scalar reference kernels of the QKeras quantizers: a plain loop over the per-element spec in
// families/qkeras/kernels.h, inside TensorFlow's flush-to-zero environment. They are the fallback, the
// stochastic-rounding and gradient paths of every kernel set, and the oracle of the kernel tests.
#include "core/fpenv.h"
#include "kernels/registry.h"

namespace polyquant::detail::ref {

void qk_bits_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsParams*>(params);
  const ScopedFlushDenormals flush;
  auto* out = static_cast<float*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) {
    out[j] = qk_bits_element(a.at<float>(0, j), a.at<float>(1, j), p, static_cast<std::uint64_t>(a.index + j));
  }
}

void qk_bits_auto_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsAutoParams*>(params);
  const ScopedFlushDenormals flush;
  auto* out = static_cast<float*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) out[j] = qk_bits_auto_element(a.at<float>(0, j), a.at<float>(1, j), p);
}

void qk_relu_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkReluParams*>(params);
  const ScopedFlushDenormals flush;
  auto* out = static_cast<float*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) out[j] = qk_relu_element(a.at<float>(0, j), p, static_cast<std::uint64_t>(a.index + j));
}

void qk_linear_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkLinearParams*>(params);
  const ScopedFlushDenormals flush;
  auto* out = static_cast<float*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) {
    out[j] = qk_linear_element(a.at<float>(0, j), a.at<float>(1, j), p, static_cast<std::uint64_t>(a.index + j));
  }
}

}  // namespace polyquant::detail::ref
