// torch.histc and torch's float32 row sum, reproduced in their rounding and order (histogram.h).
#include "core/histogram.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <string>

#include "polyquant/error.h"

namespace polyquant::detail {

namespace {

std::string histc_range_message(double lo, double hi) {
  std::ostringstream os;
  os << "torch.histc: range of [" << lo << ", " << hi << "] is not finite";
  return os.str();
}

// ceil(log2(x)) for x >= 1 (torch's utils::CeilLog2 on the positive sizes it meets).
std::int64_t ceil_log2(std::int64_t x) {
  std::int64_t r = 0;
  while ((std::int64_t{1} << r) < x) ++r;
  return r;
}

// torch's multi_row_sum: `size` rows of kIlp items (item = a vector of `Lanes` values), summed
// into kIlp items through a 4-level cascade whose level size is 2^max(4, ceil(log2(size)) / 4)
// rows. Fixed-size accumulators: no allocation, and loops over lanes the compiler vectorises.
template <class T, int Lanes>
struct Cascade {
  static constexpr int kLevels = 4;
  static constexpr int kIlp = 4;
  static constexpr int kWidth = kIlp * Lanes;
  // Row i's kWidth values start at row(i).
  template <class Row>
  static void run(std::int64_t size, const Row& row, T* out /* kWidth */) {
    T acc[kLevels][kWidth] = {};
    const std::int64_t level_power = std::max<std::int64_t>(4, ceil_log2(size) / kLevels);
    const std::int64_t level_step = std::int64_t{1} << level_power;
    const std::int64_t level_mask = level_step - 1;
    std::int64_t i = 0;
    while (i + level_step <= size) {
      for (std::int64_t j = 0; j < level_step; ++j, ++i) {
        const T* r = row(i);
        for (int l = 0; l < kWidth; ++l) acc[0][l] += r[l];
      }
      for (int j = 1; j < kLevels; ++j) {
        for (int l = 0; l < kWidth; ++l) {
          acc[j][l] += acc[j - 1][l];
          acc[j - 1][l] = T(0);
        }
        const std::int64_t mask = level_mask << (j * level_power);
        if ((i & mask) != 0) break;
      }
    }
    for (; i < size; ++i) {
      const T* r = row(i);
      for (int l = 0; l < kWidth; ++l) acc[0][l] += r[l];
    }
    for (int j = 1; j < kLevels; ++j)
      for (int l = 0; l < kWidth; ++l) acc[0][l] += acc[j][l];
    for (int l = 0; l < kWidth; ++l) out[l] = acc[0][l];
  }
};

// torch's row_sum over `size` items of `Lanes` values each (item i starts at v + i * Lanes).
template <class T, int Lanes>
void row_sum_items(const T* v, std::int64_t size, T* result /* Lanes */) {
  using C = Cascade<T, Lanes>;
  const std::int64_t size_ilp = size / C::kIlp;
  T partial[C::kWidth];
  C::run(size_ilp, [&](std::int64_t i) { return v + i * C::kWidth; }, partial);
  for (std::int64_t i = size_ilp * C::kIlp; i < size; ++i)
    for (int l = 0; l < Lanes; ++l) partial[l] += v[i * Lanes + l];
  for (int k = 1; k < C::kIlp; ++k)
    for (int l = 0; l < Lanes; ++l) partial[l] += partial[k * Lanes + l];
  for (int l = 0; l < Lanes; ++l) result[l] = partial[l];
}

template <class T, int Lanes>
T torch_sum_row_lanes(const T* v, std::int64_t n) {
  if (n >= Lanes) {  // vectorized_inner_sum
    const std::int64_t vec_size = n / Lanes;
    T vec_acc[Lanes];
    row_sum_items<T, Lanes>(v, vec_size, vec_acc);
    T final_acc = 0;
    for (std::int64_t k = vec_size * Lanes; k < n; ++k) final_acc += v[k];
    for (int l = 0; l < Lanes; ++l) final_acc += vec_acc[l];
    return final_acc;
  }
  if (n == 1) return T(0) + v[0];  // torch takes its outer-reduction path: 0 + v
  T r = 0;  // scalar_inner_sum: the same cascade over single values
  row_sum_items<T, 1>(v, n, &r);
  return r;
}

template <class T>
T torch_sum_row_impl(const T* v, std::int64_t n, int lanes) {
  switch (lanes) {
    case 4: return torch_sum_row_lanes<T, 4>(v, n);
    case 8: return torch_sum_row_lanes<T, 8>(v, n);
    case 16: return torch_sum_row_lanes<T, 16>(v, n);
    default: throw Error(ErrorKind::kValue, "torch_sum_row: lanes must be 4, 8 or 16, got " + std::to_string(lanes));
  }
}

}  // namespace

void torch_histc_f32(std::span<const float> x, std::int64_t bins, double lo, double hi, std::int64_t* counts) {
  if (lo == hi && !x.empty()) {
    // torch.aminmax: NaN propagates.
    float mn = x[0], mx = x[0];
    for (float v : x) {
      if (std::isnan(v) || std::isnan(mn)) mn = NAN;
      else mn = std::min(mn, v);
      if (std::isnan(v) || std::isnan(mx)) mx = NAN;
      else mx = std::max(mx, v);
    }
    lo = mn;
    hi = mx;
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const HistcBinning hb(lo, hi, bins);
  for (float v : x) {
    if (!hb.contains(v)) continue;
    ++counts[hb.bin(hb.scaled(v))];
  }
}

HistcBinning::HistcBinning(double lo, double hi, std::int64_t n) : bins(n) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) throw Error(ErrorKind::kRuntime, histc_range_message(lo, hi));
  if (!(lo < hi)) throw Error(ErrorKind::kRuntime, "torch.histc: max must be larger than min");
  left = static_cast<float>(lo);
  right = static_cast<float>(hi);
  nbins = static_cast<float>(n);
  width = right - left;
}

float torch_sum_row(const float* v, std::int64_t n, int lanes) { return torch_sum_row_impl(v, n, lanes); }
double torch_sum_row(const double* v, std::int64_t n, int lanes) { return torch_sum_row_impl(v, n, lanes); }

}  // namespace polyquant::detail
