// torch.arange(dtype=float32) on the CPU, as torch's vector and scalar loops compute it (torch_cpu.h).
#include "families/aimet/analyzers/torch_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace polyquant::aimet::analyzers_detail {

std::vector<float> torch_arange_f32(double start, double end, double step, int lanes) {
  const double size_d = std::ceil((end - start) / step);
  const auto n = static_cast<std::int64_t>(size_d);
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  std::int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (std::int64_t v = i; v < i + 2 * lanes; v += lanes) {
      const double base = static_cast<float>(std::fma(step, static_cast<double>(v), start));
      for (int j = 0; j < lanes; ++j) out[static_cast<std::size_t>(v + j)] = static_cast<float>(std::fma(static_cast<double>(j), step, base));
    }
  }
  for (; i < n; ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(std::fma(step, static_cast<double>(i), start));
  return out;
}

}  // namespace polyquant::aimet::analyzers_detail
