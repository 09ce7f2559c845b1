// Compiles every family's per-element formula (the scalar spec in families/<family>/kernels.h) as
// device code with nvcc: the proof that the CUDA backend can include the CPU's spec instead of a
// copy. Built whenever a CUDA compiler is found (no GPU needed); the kernel is never launched here.
// A formula that calls something a device cannot run (a host-only library function, an exception,
// an allocation) fails this build. every_row_element does the same for every per-element row
// (kernels/row.h) of the op list, in every working precision ops.inc lists for it; exact_sums for the
// exact sums (core/exact_sum.h) that the device's reductions are to share with the CPU.
#include "backends/cuda/row_elements.cuh"
#include "core/exact_sum.h"
#include "families/aimet/kernels.h"
#include "families/onnx/kernels.h"
#include "families/qkeras/kernels.h"
#include "families/qonnx/kernels.h"

// FloatQuant's floor(log2) table, which device code reads (core/floor_log2.h); never filled here.
POLYQUANT_DEFINE_FLOOR_LOG2_TABLE()

namespace polyquant::detail {

struct DeviceParams {
  IntQuantParams int_quant;
  FloatQuantParams float_quant;
  QkBitsParams qk_bits;
  QkBitsAutoParams qk_bits_auto;
  QkReluParams qk_relu;
  QkLinearParams qk_linear;
  QuantizeLinearParams quantize_linear;
  DequantizeLinearParams dequantize_linear;
  AffineParams affine;
  FakeQuantizeParams fake_quantize;
  AffineGradParams affine_grad;
};

template <class T>
__device__ void qonnx_formulas(const DeviceParams& p, T x, T s, T z, T t, double* out) {
  constexpr RoundingMode kMode = RoundingMode::kHalfEven;
  out[0] = to_double(int_quant_element<kMode>(x, s, z, false, T(-128.0f), T(127.0f), work_type_v<T>, work_type_v<T>));
  out[1] = to_double(bipolar_quant_element(x, s));
  out[2] = to_double(trunc_v1_element<RoundingMode::kFloor>(x, s, z, t, work_type_v<T>, work_type_v<T>));
  out[3] = to_double(trunc_v2_element<RoundingMode::kFloor>(x, s, z, t, s, T(-8.0f), T(7.0f), z, work_type_v<T>, work_type_v<T>));
  out[4] = float_quant_element<kMode>(x, s, T(-9.0f), 448.0, p.float_quant);
}

__global__ void every_formula(DeviceParams p, const float* x, const double* xd, double* out, std::uint16_t* out16) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  qonnx_formulas<float>(p, x[i], 0.5f, 0.0f, 16.0f, out + 16 * i);
  qonnx_formulas<double>(p, xd[i], 0.5, 0.0, 16.0, out + 16 * i + 5);
  qonnx_formulas<Half>(p, Half(x[i]), Half(0.5f), Half(0.0f), Half(16.0f), out + 16 * i + 10);
  out[16 * i + 15] = qk_bits_element(x[i], 1.0f, p.qk_bits, i) + qk_bits_auto_element(x[i], 0.5f, p.qk_bits_auto) +
                     qk_relu_element(x[i], p.qk_relu, i) + qk_linear_element(x[i], 0.5f, p.qk_linear, i);
  quantize_linear_element<float>(p.quantize_linear, x[i], 0.5f, 3.0, out16, i);
  quantize_linear_element<double>(p.quantize_linear, xd[i], 0.5, 3.0, out16, i);
  out[16 * i + 14] = dequantize_linear_element(p.dequantize_linear, xd[i], 0.5f, 3.0) +
                     affine_element<float>(p.affine, x[i], 0.5f, -3.0f) + affine_element<double>(p.affine, xd[i], 0.5, -3.0) +
                     fake_quantize_element<float>(p.fake_quantize, x[i], 0.5f, 3.0) +
                     fake_quantize_grad_element<float>(p.fake_quantize, 1.0f, x[i], 0.5f, 3.0) +
                     affine_grad_element<float>(p.affine_grad, 1.0f, x[i], 0.5f, -3.0f);
}

// Every per-element row of the op list (generated from ops.inc; one rounding mode suffices to compile
// a row's code), each on its own parameters and the row's operands.
template <KernelOp kOp, class Row, WorkType kWork>
__device__ void row_element_on_device(const void* params, const RowArgs& a, std::int64_t j) {
  if constexpr (kHasRowElement<kOp>) {
    Row::template element<WorkT<kWork>, RoundingMode::kHalfEven>(*static_cast<const typename RowElementTraits<kOp>::Params*>(params), a, j);
  }
}

__global__ void every_row_element(const void* const* params, RowArgs a) {
  const std::int64_t j = blockIdx.x * blockDim.x + threadIdx.x;
#define POLYQUANT_ROW_ON_DEVICE(Enum, name, work, W) \
  row_element_on_device<KernelOp::Enum, cuda::name##_row, WorkType::W>(params[static_cast<int>(KernelOp::Enum)], a, j);
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_ROW_ON_DEVICE, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#undef POLYQUANT_ROW_ON_DEVICE
}

// The exact sum of each thread's run of terms, merged, rounded both ways.
__global__ void exact_sums(const float* t, const double* block_sums, std::int64_t n, float* out_f, double* out_d) {
  const std::int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
  ExactSumFloat32 s, other;
  for (std::int64_t j = i; j < n; j += gridDim.x * blockDim.x) s.add(t[j]);
  if (ExactSumFloat32::fits(block_sums[i])) other.add(block_sums[i]);
  s.merge(other);
  out_f[i] = s.to_float();
  out_d[i] = s.to_double();
  if (float32_block_sum_is_exact(1, 254, n)) out_d[i] += 1.0;
}

}  // namespace polyquant::detail
