// libpolyquant_fake_cuda.so: the host stand-in for the CUDA library (fake_device.h) as a library the
// core loads like the real one (POLYQUANT_CUDA_LIBRARY=.../libpolyquant_fake_cuda.so), so the Python
// package's device calls (DLPack with the stream protocol, outputs allocated by the caller's
// framework) are tested end to end on every machine (tests/python/test_device_calls.py). Besides
// the entry point it exports what a test's fake DLPack producer needs: device memory, and what the
// engine asked for.
#include "backends/cuda/backend_abi.h"
#include "core/fake_device.h"

namespace {

polyquant::test::FakeDevice& fake() {
  static polyquant::test::FakeDevice device;  // owns the memory handed out below
  return device;
}

}  // namespace

#define POLYQUANT_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

POLYQUANT_FAKE_EXPORT const PolyquantCudaBackend* polyquant_cuda_backend_v1() {
  (void)fake();
  return &polyquant::test::fake_device_table();
}

// Zero-filled memory of fake device `device`, valid while the library stays loaded.
POLYQUANT_FAKE_EXPORT void* polyquant_fake_cuda_allocate(std::size_t bytes, int device) { return fake().allocate(bytes, device); }

// What the engine asked for since the last reset.
POLYQUANT_FAKE_EXPORT int polyquant_fake_cuda_launches() { return fake().stats().launches; }
POLYQUANT_FAKE_EXPORT int polyquant_fake_cuda_device_queries() { return fake().stats().device_queries; }
POLYQUANT_FAKE_EXPORT int polyquant_fake_cuda_faults() { return static_cast<int>(fake().stats().faults.size()); }
POLYQUANT_FAKE_EXPORT void* polyquant_fake_cuda_last_stream() { return fake().stats().last_stream; }
POLYQUANT_FAKE_EXPORT int polyquant_fake_cuda_outstanding_temporaries() { return fake().outstanding_temporaries(); }
POLYQUANT_FAKE_EXPORT void polyquant_fake_cuda_reset_stats() { fake().reset_stats(); }
// order_after's calls since the last reset; the last one's streams in *waiting and *producer.
POLYQUANT_FAKE_EXPORT int polyquant_fake_cuda_orderings(void** waiting, void** producer) {
  const auto& o = fake().stats().orderings;
  if (!o.empty()) {
    *waiting = o.back().first;
    *producer = o.back().second;
  }
  return static_cast<int>(o.size());
}
