// Quantizes a small NCHW activation per channel with QONNX IntQuant (4-bit signed, HALF_UP) and
// checks a few values, using only the public API of the installed package.
#include <polyquant/polyquant.h>

#include <cstdint>
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
  // ONNX QuantizeLinear (opset 28) to int4, blocked along the last axis (blocks of 2), and back.
  const std::vector<float> w = {0.1f, -0.3f, 0.7f, 1.1f, -0.2f, 0.05f};
  const std::vector<float> block_scales = {0.1f, 0.2f, 0.05f};  // one per block of 2
  const TensorView wv(w.data(), DType::kFloat32, Dims{1, 6});
  const TensorView bsv(block_scales.data(), DType::kFloat32, Dims{1, 3});
  onnx::QuantizeLinearAttrs qa;
  qa.block_size = 2;
  qa.output_dtype = DType::kInt4;
  const TensorSpec qspec = onnx::quantize_linear_spec(wv, bsv, nullptr, qa);
  std::vector<std::uint8_t> q(6);  // one int4 per byte, in the low bits
  onnx::quantize_linear(wv, bsv, nullptr, qa, MutableTensorView(q.data(), qspec.dtype, qspec.shape));
  onnx::DequantizeLinearAttrs da;
  da.block_size = 2;
  std::vector<float> back(6);
  onnx::dequantize_linear(TensorView(q.data(), DType::kInt4, qspec.shape), bsv, nullptr, da,
                          MutableTensorView(back.data(), DType::kFloat32, qspec.shape));
  // 0.7f / 0.2f rounds to 3.5 in float32, a tie: to even, 4.
  const std::vector<float> want_back = {0.1f, -0.3f, 0.8f, 1.2f, -0.2f, 0.05f};
  for (std::size_t i = 0; i < back.size(); ++i) {
    std::printf("int4 blocked: %g -> %d -> %g\n", static_cast<double>(w[i]), (q[i] ^ 8) - 8, static_cast<double>(back[i]));
    if (back[i] != want_back[i]) {
      std::printf("unexpected value at %zu: want %g\n", i, static_cast<double>(want_back[i]));
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
