// Scalar reference kernels of the linear quantize / dequantize ops: plain loops over the
// per-element spec in families/onnx/kernels.h. The portable fallback, the only kernels for the rarer
// targets, and the oracle of the kernel tests.
#include "kernels/registry.h"

namespace polyquant::detail::ref {
namespace {

inline std::int64_t at(const RowArgs& a, int i, std::int64_t j) { return a.index_of(i, j); }

template <class W>
void quantize_linear_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QuantizeLinearParams*>(params);
  const bool zp_f64 = std::is_same_v<W, double> || p.zero_point_f64;
  for (std::int64_t j = 0; j < a.n; ++j) {
    double zp = 0.0;
    if (p.has_zero_point) zp = zp_f64 ? a.at<double>(2, j) : static_cast<double>(a.at<float>(2, j));
    quantize_linear_element<W>(p, a.at<W>(0, j), a.at<W>(1, j), zp, a.out, j);
  }
}

template <class Out>
void dequantize_linear_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const DequantizeLinearParams*>(params);
  auto* out = static_cast<Out*>(a.out);
  for (std::int64_t j = 0; j < a.n; ++j) {
    const double x = read_integer(a.in[0], at(a, 0, j), p.x_dtype);
    const double zp = p.has_zero_point ? read_integer(a.in[2], at(a, 2, j), p.x_dtype) : 0.0;
    out[j] = static_cast<Out>(dequantize_linear_element(p, x, a.at<float>(1, j), zp));
  }
}

}  // namespace

void quantize_linear_f32(const void* params, const RowArgs& a) { quantize_linear_row<float>(params, a); }
void quantize_linear_f64(const void* params, const RowArgs& a) { quantize_linear_row<double>(params, a); }
void dequantize_linear_f32(const void* params, const RowArgs& a) { dequantize_linear_row<float>(params, a); }
void dequantize_linear_f64(const void* params, const RowArgs& a) { dequantize_linear_row<double>(params, a); }

}  // namespace polyquant::detail::ref
