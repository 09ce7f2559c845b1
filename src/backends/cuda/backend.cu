// libpolyquant_cuda.so's one exported entry point, polyquant_cuda_backend_v1 (backend_abi.h): the
// ABI description, the device queries, and the launcher table filled by the builds of
// row_kernels.cu (one per flavour and working precision). Everything else in the library is hidden (-fvisibility=hidden).
#include <cuda_runtime.h>

#include <cstdio>

#include "backends/cuda/backend_abi.h"

namespace polyquant::detail::cuda {

// The builds of row_kernels.cu, one per flavour and working precision.
#define POLYQUANT_CUDA_DECLARE_FILL(flavour, work) void POLYQUANT_CUDA_FILL_FUNCTION(flavour, work)(PolyquantCudaBackend& table);
#define POLYQUANT_CUDA_EVERY_PART(X) X(ieee, kF16) X(ieee, kF32) X(ieee, kF64) X(flushing, kF16) X(flushing, kF32) X(flushing, kF64)
POLYQUANT_CUDA_EVERY_PART(POLYQUANT_CUDA_DECLARE_FILL)

namespace {

void write_reason(char* out, std::size_t size, const char* what, cudaError_t e) {
  if (out != nullptr && size > 0) std::snprintf(out, size, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int device_count(char* reason, std::size_t reason_size) {
  int count = 0;
  // cudaGetDeviceCount loads the driver: without one it returns cudaErrorInsufficientDriver or
  // cudaErrorNoDevice instead of aborting.
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // CUDA says "driver version is insufficient" both when libcuda is missing and when it is too old.
    write_reason(reason, reason_size,
                 e == cudaErrorInsufficientDriver ? "no usable CUDA driver (libcuda.so.1 missing or older than the runtime "
                                                    "this library links); cudaGetDeviceCount"
                                                  : "cudaGetDeviceCount",
                 e);
    return e == cudaErrorNoDevice ? 0 : -1;
  }
  if (count == 0 && reason != nullptr && reason_size > 0) std::snprintf(reason, reason_size, "no CUDA device");
  return count;
}

int device_description(int device, char* name, std::size_t name_size) {
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    write_reason(name, name_size, "cudaGetDeviceProperties", e);
    return static_cast<int>(e);
  }
  if (name != nullptr && name_size > 0) std::snprintf(name, name_size, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  return 0;
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

PolyquantCudaBackend make_backend() {
  PolyquantCudaBackend b{};
  b.abi_version = POLYQUANT_CUDA_ABI_VERSION;
  b.num_kernel_ops = kNumKernelOps;
  b.num_work_types = kNumWorkTypes;
  b.row_args_size = sizeof(RowArgs);
  b.runtime_version = 0;
  cudaRuntimeGetVersion(&b.runtime_version);  // the linked runtime's version; needs no driver
  b.device_count = &device_count;
  b.device_description = &device_description;
  b.error_string = &error_string;
#define POLYQUANT_CUDA_CALL_FILL(flavour, work) POLYQUANT_CUDA_FILL_FUNCTION(flavour, work)(b);
  POLYQUANT_CUDA_EVERY_PART(POLYQUANT_CUDA_CALL_FILL)
#undef POLYQUANT_CUDA_CALL_FILL
  return b;
}

}  // namespace
}  // namespace polyquant::detail::cuda

extern "C" __attribute__((visibility("default"))) const PolyquantCudaBackend* polyquant_cuda_backend_v1() {
  static const PolyquantCudaBackend backend = polyquant::detail::cuda::make_backend();
  return &backend;
}
