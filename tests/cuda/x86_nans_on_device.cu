// Device side of test_x86_nans_on_device.cc: every pair of a set of special operands through the
// x86_* operations of core/x86_nan.h on the GPU, and through the device's own operators (what the
// hardware does without them, reported by the test). Compiled by nvcc with the backend's numerics
// flags and linked into polyquant_cuda_tests.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/scalar_math.h"
#include "x86_nans_on_device.h"

namespace polyquant::detail {
namespace {

template <class T>
__global__ void pair_kernel(const T* a, const T* b, int n, T* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n * n) return;
  const T x = a[i / n], y = b[i % n];
  T* o = out + static_cast<std::int64_t>(i) * kPairResults;
  o[kX86Add] = x86_add(x, y);
  o[kX86Sub] = x86_sub(x, y);
  o[kX86Mul] = x86_mul(x, y);
  o[kX86Div] = x86_div(x, y);
  o[kDeviceAdd] = x + y;
  o[kDeviceSub] = x - y;
  o[kDeviceMul] = x * y;
  o[kDeviceDiv] = x / y;
  o[kX86Nearbyint] = x86_nearbyint(x);
  o[kDeviceNearbyint] = std::nearbyint(x);
  o[kX86Neg] = x86_neg(x);
  o[kDeviceNeg] = -x;
  o[kX86Abs] = x86_abs(x);
  o[kDeviceAbs] = std::fabs(x);
  o[kFloorT] = floor_t(x);
  o[kDeviceFloor] = std::floor(x);
  o[kMulFirstNan] = mul_first_nan(x, y);
  o[kLog2T] = log2_t(x);
  // Through the other precision and back: float -> double -> float, double -> float -> double.
  if constexpr (sizeof(T) == 4) {
    o[kConvertX86] = x86_to_float(x86_to_double(x));
    o[kConvertDevice] = static_cast<float>(static_cast<double>(x));
  } else {
    o[kConvertX86] = x86_to_double(x86_to_float(x));
    o[kConvertDevice] = static_cast<double>(static_cast<float>(x));
  }
}

template <class T>
int run(const T* a, const T* b, int n, T* out) {
  const std::size_t in_bytes = sizeof(T) * static_cast<std::size_t>(n);
  const std::size_t out_bytes = sizeof(T) * static_cast<std::size_t>(n) * n * kPairResults;
  T *da = nullptr, *db = nullptr, *dout = nullptr;
  cudaError_t e = cudaMalloc(&da, in_bytes);
  if (e == cudaSuccess) e = cudaMalloc(&db, in_bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dout, out_bytes);
  if (e == cudaSuccess) e = cudaMemcpy(da, a, in_bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(db, b, in_bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    pair_kernel<T><<<(n * n + 127) / 128, 128>>>(da, db, n, dout);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(out, dout, out_bytes, cudaMemcpyDeviceToHost);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  return static_cast<int>(e);
}

}  // namespace

int x86_nans_on_device(const float* a, const float* b, int n, float* out) { return run(a, b, n, out); }
int x86_nans_on_device(const double* a, const double* b, int n, double* out) { return run(a, b, n, out); }

}  // namespace polyquant::detail
