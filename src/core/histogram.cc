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

// torch's multi_row_sum: `size` rows of `nrows` items (item = a vector of `lanes` values), rows
// `row_stride` items apart, summed into nrows results through a 4-level cascade whose level size
// is 2^max(4, ceil(log2(size)) / 4) rows.
template <class T>
struct Cascade {
  static constexpr int kLevels = 4;
  static constexpr int kIlp = 4;
  // acc[level][row item][lane]
  template <class Load>
  static void run(std::int64_t size, int lanes, const Load& load, T* out /* kIlp * lanes */) {
    std::vector<T> acc(static_cast<std::size_t>(kLevels * kIlp * lanes), T(0));
    auto at = [&](int level, int k, int l) -> T& { return acc[static_cast<std::size_t>((level * kIlp + k) * lanes + l)]; };
    const std::int64_t level_power = std::max<std::int64_t>(4, ceil_log2(size) / kLevels);
    const std::int64_t level_step = std::int64_t{1} << level_power;
    const std::int64_t level_mask = level_step - 1;
    std::int64_t i = 0;
    while (i + level_step <= size) {
      for (std::int64_t j = 0; j < level_step; ++j, ++i) {
        for (int k = 0; k < kIlp; ++k)
          for (int l = 0; l < lanes; ++l) at(0, k, l) += load(i, k, l);
      }
      for (int j = 1; j < kLevels; ++j) {
        for (int k = 0; k < kIlp; ++k)
          for (int l = 0; l < lanes; ++l) {
            at(j, k, l) += at(j - 1, k, l);
            at(j - 1, k, l) = T(0);
          }
        const std::int64_t mask = level_mask << (j * level_power);
        if ((i & mask) != 0) break;
      }
    }
    for (; i < size; ++i) {
      for (int k = 0; k < kIlp; ++k)
        for (int l = 0; l < lanes; ++l) at(0, k, l) += load(i, k, l);
    }
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < kIlp; ++k)
        for (int l = 0; l < lanes; ++l) at(0, k, l) += at(j, k, l);
    }
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < lanes; ++l) out[k * lanes + l] = at(0, k, l);
  }
};

// torch's row_sum over `size` items of `lanes` values each (item i starts at v + i * lanes).
template <class T>
void row_sum_items(const T* v, std::int64_t size, int lanes, T* result /* lanes */) {
  constexpr int kIlp = Cascade<T>::kIlp;
  const std::int64_t size_ilp = size / kIlp;
  std::vector<T> partial(static_cast<std::size_t>(kIlp * lanes));
  Cascade<T>::run(size_ilp, lanes, [&](std::int64_t i, int k, int l) { return v[(i * kIlp + k) * lanes + l]; }, partial.data());
  for (std::int64_t i = size_ilp * kIlp; i < size; ++i)
    for (int l = 0; l < lanes; ++l) partial[static_cast<std::size_t>(l)] += v[i * lanes + l];
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < lanes; ++l) partial[static_cast<std::size_t>(l)] += partial[static_cast<std::size_t>(k * lanes + l)];
  for (int l = 0; l < lanes; ++l) result[l] = partial[static_cast<std::size_t>(l)];
}

template <class T>
T torch_sum_row_impl(const T* v, std::int64_t n, int lanes) {
  if (n >= lanes) {  // vectorized_inner_sum
    const std::int64_t vec_size = n / lanes;
    std::vector<T> vec_acc(static_cast<std::size_t>(lanes));
    row_sum_items(v, vec_size, lanes, vec_acc.data());
    T final_acc = 0;
    for (std::int64_t k = vec_size * lanes; k < n; ++k) final_acc += v[k];
    for (int l = 0; l < lanes; ++l) final_acc += vec_acc[static_cast<std::size_t>(l)];
    return final_acc;
  }
  if (n == 1) return T(0) + v[0];  // torch takes its outer-reduction path: 0 + v
  T r = 0;  // scalar_inner_sum: the same cascade over single values
  row_sum_items(v, n, 1, &r);
  return r;
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
  if (!std::isfinite(lo) || !std::isfinite(hi)) throw Error(ErrorKind::kRuntime, histc_range_message(lo, hi));
  if (!(lo < hi)) throw Error(ErrorKind::kRuntime, "torch.histc: max must be larger than min");
  const float left = static_cast<float>(lo), right = static_cast<float>(hi);
  const float nbins = static_cast<float>(bins);
  const float width = right - left;
  for (float v : x) {
    if (!(v >= left && v <= right)) continue;
    const float scaled = (v - left) * nbins;
    std::int64_t pos = static_cast<std::int64_t>(scaled / width);
    if (pos >= bins) pos = bins - 1;
    if (pos < 0) pos = 0;
    ++counts[pos];
  }
}

float torch_sum_row(const float* v, std::int64_t n, int lanes) { return torch_sum_row_impl(v, n, lanes); }
double torch_sum_row(const double* v, std::int64_t n, int lanes) { return torch_sum_row_impl(v, n, lanes); }

}  // namespace polyquant::detail
