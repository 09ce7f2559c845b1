// Kernel cases of the grouped reductions (src/kernels/reduce): their kernels fold rows into
// accumulators instead of writing rows, so ReductionKernelTest (core/test_kernels.cc) checks them;
// here only the benchmark's calls.
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

}  // namespace polyquant::test
