// The optional CUDA backend, found and loaded at run time: libpolyquant_cuda.so (backends/cuda)
// holds every CUDA kernel, so nothing here needs the CUDA toolkit or driver. Loading is lazy (the
// first call of cuda_backend(), from runtime_info() or a device op) and never throws: a missing
// library, a library from another build, a missing driver or no GPU all leave the backend
// unavailable with a reason, and every CPU op works as before.
#pragma once

#include <string>
#include <vector>

struct PolyquantCudaBackend;

namespace polyquant::detail {

struct CudaBackendStatus {
  std::string library;               // the file loaded (or, when loading failed, the one tried); "" if none
  const PolyquantCudaBackend* table = nullptr;  // the library's table once it loaded and matched this build
  std::vector<std::string> devices;  // one description per CUDA device ("NVIDIA H100 80GB HBM3 (sm_90)")
  std::string reason;                // why the backend is unavailable ("" when it is available)
  // Who listed the devices: "nvml" (CUDA not initialised), or "cuda runtime (NVML: why not)"
  // (cudaGetDeviceCount, which initialises CUDA); "" when the library did not load.
  std::string device_query;
  bool available() const { return table != nullptr && !devices.empty(); }
};

// Where the library is looked for, in order:
//   1. $POLYQUANT_CUDA_LIBRARY, when set and not empty: that file only;
//   2. libpolyquant_cuda.so in the directory of the module holding polyquant's core (the Python
//      extension in a wheel, a shared library or executable linking the core statically);
//   3. the dynamic loader's search path (LD_LIBRARY_PATH, the C++ package's lib directory via
//      rpath or ld.so.conf).
// Loaded once per process; the result stays valid for its lifetime (the library is never unloaded).
// The devices are listed through NVML where it answers exactly (core/nvml_devices.h), so listing
// them does not initialise CUDA; else through the library's cudaGetDeviceCount.
const CudaBackendStatus& cuda_backend();

// For tests: the same search and checks, uncached, with `library` standing in for
// $POLYQUANT_CUDA_LIBRARY ("" searches as if it were unset). A library loaded stays loaded.
CudaBackendStatus load_cuda_backend(const std::string& library);

}  // namespace polyquant::detail
