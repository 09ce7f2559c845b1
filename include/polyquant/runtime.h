// What the library detected about the machine it runs on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "polyquant/export.h"
#include "polyquant/tensor.h"

namespace polyquant {

// One compute backend: "cpu" (always available) or "cuda" (the optional GPU library).
struct BackendInfo {
  std::string name;                      // "cpu", "cuda"
  bool available = false;                // ops can run on it
  std::string library;                   // cuda: the libpolyquant_cuda.so loaded or tried ("" if none found)
  std::vector<std::string> devices;      // cuda: one description per GPU ("NVIDIA H100 80GB HBM3 (sm_90)")
  std::string reason;                    // why it is unavailable ("" when available): no library, no
                                         // driver, no device, a library from another build
};

struct RuntimeInfo {
  std::string version;                   // "0.1.0"
  std::string isa;                       // kernel set in use: "avx512", "avx2" or "scalar"
  std::vector<std::string> supported;    // every kernel set this CPU can run, best first
  int num_threads = 1;                   // worker threads used for large tensors
  std::vector<BackendInfo> backends;     // "cpu", then "cuda" (present whether or not it is available)
};

// Kernel selection happens once, at first use. POLYQUANT_ISA=scalar|avx2|avx512 (environment)
// forces a kernel set (it must be supported); POLYQUANT_NUM_THREADS=N (1..256) caps the threads.
// A bad value of either makes the first op (and runtime_info) throw Error naming the variable.
// The CUDA backend is looked for on the first call (never at load time; see docs/cuda.md):
// POLYQUANT_CUDA_LIBRARY=/path/libpolyquant_cuda.so names the library to load. Its absence, or
// a missing driver or GPU, is reported in `backends`, never thrown.
POLYQUANT_API RuntimeInfo runtime_info();

// For tests and benchmarks: switch the kernel set ("scalar", "avx2", "avx512"; it must be one this
// CPU supports, else Error lists those) or cap the thread count (1..256) of later calls, inside one
// process. Every kernel set gives the same bits; these change only speed. Not to be called while
// another thread is running an op.
POLYQUANT_API void set_kernel_set(std::string_view name);
POLYQUANT_API void set_num_threads(int n);

// CUDA streams. An op on device views (Device, tensor.h) is queued on the calling thread's current
// stream and returns without waiting for the device, like a CUDA launch: the caller orders and
// synchronises its work on that stream as it would its own kernels. The stream is a cudaStream_t
// passed as void* (no CUDA type appears in polyquant's headers); nullptr, the default, is CUDA's
// legacy default stream. A ScopedStream makes `cuda_stream` this thread's current stream until it
// is destroyed (scopes nest; each thread has its own).
class POLYQUANT_API ScopedStream {
 public:
  explicit ScopedStream(void* cuda_stream);
  ~ScopedStream();
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;

 private:
  void* previous_;
};

// This thread's current stream (nullptr: the legacy default stream).
POLYQUANT_API void* current_stream();

// Memory of a CUDA device from the CUDA backend, ordered on this thread's current stream, for
// results a caller's framework cannot allocate (JAX arrays are immutable). Throws Error when the
// backend or the device is unavailable. free_device_memory waits for the device's work first, may
// run on any thread at any time (a DLPack deleter), and never throws.
POLYQUANT_API void* allocate_device_memory(Device device, std::size_t bytes);
POLYQUANT_API void free_device_memory(Device device, void* pointer) noexcept;
// Orders CUDA stream `waiting` on `device` after the work queued on stream `producer` so far (an
// event recorded on one, waited for on the other; the host does not wait): for a consumer of
// memory from allocate_device_memory whose stream is not the one polyquant's work on it was
// queued on (DLPack's stream protocol). Streams as cudaStream_t values (nullptr or 1: the legacy
// default stream, 2: the per-thread one). Throws Error when the backend or the device is unavailable.
POLYQUANT_API void order_stream_after(Device device, void* waiting, void* producer);

}  // namespace polyquant
