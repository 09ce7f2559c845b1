// Scalar reference kernels of AIMET's affine ops: plain loops over the per-element spec in
// families/aimet/kernels.h. The portable fallback, the only kernels of the float16 / bfloat16 working
// precisions, the gradients and the float64 work, and the oracle of the kernel tests.
#include "kernels/registry.h"

namespace polyquant::detail::ref {
namespace {

template <class W>
void affine_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const AffineParams*>(params);
  auto* out = static_cast<W*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) out[j] = affine_element<W>(p, a.at<W>(0, j), a.at<W>(1, j), a.at<W>(2, j));
}

template <class W>
void fake_quantize_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FakeQuantizeParams*>(params);
  auto* out = static_cast<W*>(a.out);
  auto zp = [&](std::int64_t j) { return p.zero_point_f32 ? static_cast<double>(a.at<float>(2, j)) : a.at<double>(2, j); };
  if (p.gradient) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      out[j] = fake_quantize_grad_element<W>(p, a.at<W>(3, j), a.at<W>(0, j), a.at<float>(1, j), zp(j));
    }
    return;
  }
  for (std::int64_t j = 0; j < a.n; ++j) out[j] = fake_quantize_element<W>(p, a.at<W>(0, j), a.at<float>(1, j), zp(j));
}

template <class W>
void affine_grad_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const AffineGradParams*>(params);
  auto* out = static_cast<W*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) {
    out[j] = affine_grad_element<W>(p, a.at<W>(0, j), a.at<W>(1, j), a.at<W>(2, j), a.at<W>(3, j));
  }
}

}  // namespace

void affine_f32(const void* params, const RowArgs& a) { affine_row<float>(params, a); }
void affine_f64(const void* params, const RowArgs& a) { affine_row<double>(params, a); }
void fake_quantize_f32(const void* params, const RowArgs& a) { fake_quantize_row<float>(params, a); }
void fake_quantize_f64(const void* params, const RowArgs& a) { fake_quantize_row<double>(params, a); }
void affine_grad_f32(const void* params, const RowArgs& a) { affine_grad_row<float>(params, a); }
void affine_grad_f64(const void* params, const RowArgs& a) { affine_grad_row<double>(params, a); }

}  // namespace polyquant::detail::ref
