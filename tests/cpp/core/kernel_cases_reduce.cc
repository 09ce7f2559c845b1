// Kernel cases of the grouped reductions (src/kernels/reduce): their kernels fold rows into
// accumulators instead of writing rows, so ReductionKernelTest (core/test_kernels.cc) checks them;
// here only the benchmark's calls.
#include <vector>

#include "kernel_cases.h"

namespace polyquant::test {

using namespace polyquant::detail;

// Per element (a kept innermost dimension) over |x|: QKeras' max-abs scales.
KernelCases kernel_cases_group_max() {
  KernelCases c;
  c.tested_elsewhere = "ReductionKernelTest";
  c.bench = [p = std::make_shared<GroupMaxParams>(GroupMaxParams{true, true})](BenchRow& r) {
    r.call(p.get(), {r.x()});
  };
  return c;
}

// Per element, x / 2 against z = x: the sums of QKeras' least-squares scale fit, into 2 n doubles.
KernelCases kernel_cases_product_sums() {
  KernelCases c;
  c.tested_elsewhere = "ReductionKernelTest";
  c.bench = [p = std::make_shared<ProductSumsParams>(ProductSumsParams{true, true, 2.0f, 0.5f})](BenchRow& r) {
    r.call(p.get(), {r.x(), r.x()}, r.sums());
  };
  return c;
}

// Per tensor, negative zeros tracked, as AIMET's MinMax analyzer runs it.
KernelCases kernel_cases_group_min_max() {
  struct State {
    GroupMinMaxParams params;
    float min_max[2] = {INFINITY, -INFINITY};
    std::uint8_t negative_zero = 0;
  };
  KernelCases c;
  c.tested_elsewhere = "ReductionKernelTest";
  c.bench = [s = std::make_shared<State>()](BenchRow& r) {
    s->params.max_out = &s->min_max[1];
    s->params.negative_zero = &s->negative_zero;
    r.call(&s->params, {r.x()}, &s->min_max[0]);
  };
  return c;
}

// One run into 32 lane accumulators, as AIMET's per-tensor gradient sums run it. The row holds
// multiples of 2^-10 in [-20, 20), so the sums stay exact through every repeat of the benchmark (no
// spill: the spill list would outgrow its room over millions of calls); spills are the rare path.
KernelCases kernel_cases_exact_sums() {
  struct State {
    ExactSumsParams params;
    std::vector<float> x;
    std::vector<double> spill_value;
    std::vector<std::int32_t> spill_index;
    std::int64_t spill_count = 0;
    double acc[kExactSumVirtualLanes] = {};
  };
  KernelCases c;
  c.tested_elsewhere = "ReductionKernelTest";
  c.bench = [s = std::make_shared<State>()](BenchRow& r) {
    const auto n = static_cast<std::size_t>(r.n());
    s->x.resize(n);
    for (std::size_t i = 0; i < n; ++i) s->x[i] = static_cast<float>(static_cast<int>((i * 2654435761u) % 40960u) - 20480) / 1024.0f;
    s->spill_value.resize(n);
    s->spill_index.resize(n);
    s->params.spill_value = s->spill_value.data();
    s->params.spill_index = s->spill_index.data();
    s->params.spill_count = &s->spill_count;
    r.call(&s->params, {{s->x.data(), false, sizeof(float)}}, s->acc);
  };
  return c;
}

}  // namespace polyquant::test
