// Scalar reference kernels of the grouped reductions (kernels/reduce/kernels.h): the spec and fallback.
#include <cmath>

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

void group_min_max_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const GroupMinMaxParams*>(params);
  const float* x = a.input<float>(0);
  auto* mn = static_cast<float*>(a.out);
  float* mx = p.max_out;
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) {
        const float v = x[r * p.x_row_stride + j];
        mn[j] = group_min_fold(mn[j], v);
        mx[j] = group_max_fold_keep(mx[j], v);
        if (p.negative_zero != nullptr && is_negative_zero(v)) p.negative_zero[j] = 1;
      }
    }
    return;
  }
  bool negative_zero = false;
  constexpr int kL = kMinMaxVirtualLanes;
  float lane_min[kL], lane_max[kL];
  for (int l = 0; l < kL; ++l) lane_min[l] = INFINITY, lane_max[l] = -INFINITY;
  const std::int64_t body = a.n - a.n % kL;
  for (std::int64_t j = 0; j < body; ++j) {
    lane_min[j % kL] = group_min_fold(lane_min[j % kL], x[j]);
    lane_max[j % kL] = group_max_fold_keep(lane_max[j % kL], x[j]);
    negative_zero = negative_zero || is_negative_zero(x[j]);
  }
  float m0 = mn[0], m1 = mx[0];
  for (int l = 0; l < kL; ++l) m0 = group_min_fold(m0, lane_min[l]), m1 = group_max_fold_keep(m1, lane_max[l]);
  for (std::int64_t j = body; j < a.n; ++j) {
    m0 = group_min_fold(m0, x[j]), m1 = group_max_fold_keep(m1, x[j]);
    negative_zero = negative_zero || is_negative_zero(x[j]);
  }
  mn[0] = m0;
  mx[0] = m1;
  if (p.negative_zero != nullptr && negative_zero) p.negative_zero[0] = 1;
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
