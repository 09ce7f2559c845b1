// Quantizes a small NCHW activation per channel with QONNX IntQuant (4-bit signed, HALF_UP) and
// checks a few values, using only the public API of the installed package.
#include <polyquant/polyquant.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace polyquant;
  const std::vector<float> x = {0.26f, -0.74f, 1.9f, 3.0f,    // channel 0 (scale 0.5)
                                0.26f, -0.74f, 1.9f, 3.0f};   // channel 1 (scale 0.25)
  const std::vector<float> scale = {0.5f, 0.25f};
  const float zeropt = 0.0f, bitwidth = 4.0f;
  const TensorView xv(x.data(), DType::kFloat32, Dims{1, 2, 2, 2});
  const TensorView sv(scale.data(), DType::kFloat32, Dims{1, 2, 1, 1});
  const TensorView zv(&zeropt, DType::kFloat32, Dims{});
  const TensorView bv(&bitwidth, DType::kFloat32, Dims{});
  const qonnx::IntQuantAttrs attrs{/*is_signed=*/true, /*narrow=*/false, RoundingMode::kHalfUp};

  const TensorSpec spec = qonnx::int_quant_spec(xv, sv, zv, bv, attrs);
  std::vector<float> out(static_cast<std::size_t>(spec.shape.numel()));
  qonnx::int_quant(xv, sv, zv, bv, attrs, MutableTensorView(out.data(), spec.dtype, spec.shape));

  const std::vector<float> want = {0.5f, -0.5f, 2.0f, 3.0f, 0.25f, -0.75f, 1.75f, 1.75f};
  const RuntimeInfo info = runtime_info();
  std::printf("polyquant %s, kernels: %s, threads: %d\n", info.version.c_str(), info.isa.c_str(), info.num_threads);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::printf("%g -> %g\n", static_cast<double>(x[i]), static_cast<double>(out[i]));
    if (out[i] != want[i]) {
      std::printf("unexpected value at %zu: want %g\n", i, static_cast<double>(want[i]));
      return 1;
    }
  }
  try {
    qonnx::int_quant_spec(xv, sv, zv, bv, {true, false, parse_rounding_mode("NEAREST")});
  } catch (const Error& e) {
    std::printf("bad input is reported: %s\n", e.what());
  }
  return 0;
}
