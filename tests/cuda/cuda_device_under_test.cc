// DeviceUnderTest (tests/cpp/core/device_under_test.h) on a real GPU: the engine's device-path
// tests (tests/cpp/core/test_device_engine.cc) run through the built libpolyquant_cuda.so, with
// device memory from cudaMalloc. Without a device they are skipped with CUDA's reason.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cuda_backend.h"
#include "core/device_elementwise.h"
#include "core/device_under_test.h"
#include "library_under_test.h"

namespace polyquant::test {

struct DeviceUnderTest::Impl {
  detail::CudaBackendStatus status;
  std::vector<std::pair<void*, int>> blocks;
  cudaStream_t stream = nullptr;
};

DeviceUnderTest::DeviceUnderTest() : impl_(new Impl) {
  impl_->status = detail::load_cuda_backend(cuda_library_under_test());
  if (impl_->status.available()) detail::set_device_backend_for_testing(impl_->status.table);
}

DeviceUnderTest::~DeviceUnderTest() {
  if (impl_->status.available()) {
    cudaDeviceSynchronize();
    for (const auto& [p, device] : impl_->blocks) {
      cudaSetDevice(device);
      cudaFree(p);
    }
    cudaSetDevice(0);
    if (impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
    detail::set_device_backend_for_testing(nullptr);
  }
  delete impl_;
}

std::string DeviceUnderTest::unavailable_reason() const {
  if (impl_->status.table == nullptr) return "the built CUDA library does not load: " + impl_->status.reason;
  return impl_->status.available() ? std::string() : "CUDA unavailable: " + impl_->status.reason;
}

int DeviceUnderTest::device_count() const { return static_cast<int>(impl_->status.devices.size()); }

void* DeviceUnderTest::allocate(std::size_t bytes, int device) {
  void* p = nullptr;
  cudaSetDevice(device);
  if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess || cudaMemset(p, 0, bytes > 0 ? bytes : 1) != cudaSuccess) p = nullptr;
  cudaSetDevice(0);
  impl_->blocks.emplace_back(p, device);
  return p;
}

void* DeviceUnderTest::upload(const void* host, std::size_t bytes, int device) {
  void* p = allocate(bytes, device);
  cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
  return p;
}

void DeviceUnderTest::download(void* host, const void* device, std::size_t bytes) {
  cudaDeviceSynchronize();
  cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost);
}

void* DeviceUnderTest::stream() {
  if (impl_->stream == nullptr) cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking);
  return impl_->stream;
}

FakeDevice* DeviceUnderTest::fake() { return nullptr; }

}  // namespace polyquant::test
