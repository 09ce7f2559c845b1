// Scalar reference kernels of the grouped reductions (reduce_kernels.h): the spec and fallback.
#include "kernels/registry.h"

namespace polyquant::detail::ref {

void group_max_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const GroupMaxParams*>(params);
  const float* x = a.input<float>(0);
  auto* acc = static_cast<float*>(a.out);
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) acc[j] = group_max_fold(acc[j], group_max_value(x[r * p.x_row_stride + j], p.absolute));
    }
  } else {
    float m = acc[0];
    for (std::int64_t j = 0; j < a.n; ++j) m = group_max_fold(m, group_max_value(x[j], p.absolute));
    acc[0] = m;
  }
}

void product_sums_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const ProductSumsParams*>(params);
  const float* x = a.input<float>(0);
  const float* z = a.input<float>(1);
  auto* acc = static_cast<double*>(a.out);
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) {
        const float zr = z[r * p.z_row_stride + j];
        acc[2 * j] += static_cast<double>(product_sums_v(x[r * p.x_row_stride + j], p) * zr);
        acc[2 * j + 1] += static_cast<double>(zr * zr);
      }
    }
    return;
  }
  for (std::int64_t j = 0; j < a.n; ++j) {
    const float v = product_sums_v(x[j], p);
    acc[j & 7] += static_cast<double>(v * z[j]);
    acc[8 + (j & 7)] += static_cast<double>(z[j] * z[j]);
  }
}

}  // namespace polyquant::detail::ref
