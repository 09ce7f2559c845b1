// Kernel cases of ONNX's linear quantize / dequantize (src/families/onnx; Quark's Extended ops run
// on the same kernels). Their outputs and inputs are integers and narrow floats of many widths, so
// QdqKernelTest (tests/cpp/onnx/test_api.cc) checks them with its own sweep of formats; here only
// the benchmark's calls, whose bytes are counted as float32 in and out for comparison with memcpy.
#include "kernel_cases.h"

namespace polyquant::test {

using namespace polyquant::detail;

// float32 -> int8, x / 0.5 with zero point 0.
KernelCases kernel_cases_quantize_linear() {
  KernelCases c;
  c.tested_elsewhere = "QdqKernelTest (tests/cpp/onnx/test_api.cc)";
  QuantizeLinearParams p;
  p.out_dtype = DType::kInt8;
  p.qmin = -128;
  p.qmax = 127;
  p.has_zero_point = true;
  c.bench = [p = std::make_shared<QuantizeLinearParams>(p)](BenchRow& r) {
    r.call(p.get(), {r.x(), r.value(0.5f), r.value(0.0f)});
  };
  return c;
}

// int8 -> float32, scale 0.5 and zero point 3.
KernelCases kernel_cases_dequantize_linear() {
  KernelCases c;
  c.tested_elsewhere = "QdqKernelTest (tests/cpp/onnx/test_api.cc)";
  DequantizeLinearParams p;
  p.x_dtype = DType::kInt8;
  p.has_zero_point = true;
  c.bench = [p = std::make_shared<DequantizeLinearParams>(p)](BenchRow& r) {
    r.call(p.get(), {r.x_int8(), r.value(0.5f), r.value(std::int8_t{3})});
  };
  return c;
}

}  // namespace polyquant::test
