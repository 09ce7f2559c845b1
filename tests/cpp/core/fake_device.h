// A stand-in for the CUDA library that runs on the host, so the engine's device path (core/
// device_elementwise.cc) is tested on every machine: its table has the real ABI, its "device
// memory" is host memory registered per device, its launchers run the registry's scalar reference
// row of the op (the spec the CUDA kernels equal), or, where the CUDA kernel resolves per-row and
// repeated-row operands per thread, that kernel's own thread loop (backends/cuda/row_layout.h),
// and its conversion kernel the same
// convert_element the CUDA one calls. It checks what a GPU would fault on: every pointer a launch
// or conversion dereferences must lie inside memory of the current device. It counts what the
// engine asked for (launches, conversions, allocations, the stream), so tests can check the plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/row_layout.h"
#include "kernels/row.h"
#include "polyquant/tensor.h"

struct PolyquantCudaBackend;

namespace polyquant::test {

struct FakeDeviceStats {
  int launches = 0;
  int conversions = 0;
  int reductions = 0;  // exact group sums
  int allocations = 0;  // by the engine (stream-ordered temporaries)
  int host_scalar_launches = 0;
  int resolved_launches = 0;  // launches with per-row / repeated-row operands run as the kRowsResolved kernel
  int read_ahead_launches = 0;  // per-tensor launches run as the kFirstStreams kernel
  int host_reads = 0;  // device -> host copies that waited for the stream
  int device_queries = 0;  // device_count calls (cudaGetDeviceCount: the query that initialises CUDA)
  void* last_stream = nullptr;
  std::vector<std::pair<void*, void*>> orderings;  // order_after's (waiting, producer) streams
  std::vector<std::string> faults;  // pointers outside the current device's memory
};

// The stand-in's table (the same one FakeDevice installs).
const PolyquantCudaBackend& fake_device_table();

class FakeDevice {
 public:
  static constexpr int kDevices = 2;

  // Installs the fake as the engine's backend (set_device_backend_for_testing) for the object's
  // lifetime; the current device starts at 0 and the statistics at zero.
  FakeDevice();
  ~FakeDevice();
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  // Device memory of `device`, zero-filled; freed with the FakeDevice.
  void* allocate(std::size_t bytes, int device = 0);
  // A device copy of host bytes.
  void* upload(const void* host, std::size_t bytes, int device = 0);

  const FakeDeviceStats& stats() const;
  void reset_stats();
  // Engine temporaries not yet released.
  int outstanding_temporaries() const;
  int current_device() const;
  const PolyquantCudaBackend& table() const;
};

// The CUDA kernels' thread loop in `layout` (backends/cuda/row_layout.h: run_row_thread;
// kFirstStreams, per-tensor parameters beside a contiguous x, or kRowsResolved, per-row and
// repeated-row operands resolved per thread; both read x ahead), run on the host for `threads`
// threads in turn (the stride of the grid-stride loop). False, with nothing written, where (op,
// work) has no per-element row or the layout is another.
bool run_row_threads_on_host(detail::KernelOp op, detail::WorkType work, const void* params,
                             const detail::RowArgs& a, std::int64_t threads, detail::cuda::RowLayout layout);

}  // namespace polyquant::test
