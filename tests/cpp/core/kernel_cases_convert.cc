// Kernel cases of the dtype conversion (src/kernels/convert): ConvertKernelTest
// (core/test_convert.cc) checks it over every float16 / bfloat16 code and every float32 value; here
// only the benchmark's call (float16 -> float32, the widening every float16 input goes through).
#include "kernel_cases.h"

namespace polyquant::test {

using namespace polyquant::detail;

KernelCases kernel_cases_convert() {
  KernelCases c;
  c.tested_elsewhere = "ConvertKernelTest (tests/cpp/core/test_convert.cc)";
  c.bench = [p = std::make_shared<ConvertParams>(ConvertParams{DType::kFloat16, DType::kFloat32})](BenchRow& r) {
    r.call(p.get(), {r.x()});  // the row's bytes read as float16 codes
  };
  return c;
}

}  // namespace polyquant::test
