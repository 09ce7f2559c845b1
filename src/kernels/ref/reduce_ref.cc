// Scalar reference kernels of the grouped reductions (reduce_kernels.h): the spec and fallback.
#include "kernels/registry.h"

namespace polyquant::detail::ref {

void group_max_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const GroupMaxParams*>(params);
  const float* x = a.input<float>(0);
  auto* acc = static_cast<float*>(a.out);
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) acc[j] = group_max_fold(acc[j], group_max_value(x[j], p.absolute));
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
  for (std::int64_t j = 0; j < a.n; ++j) {
    const float v = product_sums_v(x[j], p);
    const double pv = static_cast<double>(v * z[j]);
    const double qv = static_cast<double>(z[j] * z[j]);
    if (p.per_element) {
      acc[2 * j] += pv;
      acc[2 * j + 1] += qv;
    } else {
      acc[j & 7] += pv;
      acc[8 + (j & 7)] += qv;
    }
  }
}

}  // namespace polyquant::detail::ref
