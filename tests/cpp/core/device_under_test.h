// The device the engine's device-path tests (core/test_device_engine.cc) run on, chosen by the
// executable that links them: the host stand-in for the CUDA library (fake_device.cc, in
// polyquant_tests, on every machine) or a real GPU through the CUDA runtime
// (tests/cuda/cuda_device_under_test.cc, in polyquant_cuda_tests, skipped without a device).
#pragma once

#include <cstddef>
#include <string>

namespace polyquant::test {

class FakeDevice;

class DeviceUnderTest {
 public:
  DeviceUnderTest();
  ~DeviceUnderTest();
  DeviceUnderTest(const DeviceUnderTest&) = delete;
  DeviceUnderTest& operator=(const DeviceUnderTest&) = delete;

  // Why the tests cannot run here ("" when they can).
  std::string unavailable_reason() const;
  int device_count() const;
  // Zero-filled device memory of `device`, freed with this object; a device copy of host bytes.
  void* allocate(std::size_t bytes, int device = 0);
  void* upload(const void* host, std::size_t bytes, int device = 0);
  // Waits for all queued work, then copies device bytes to the host.
  void download(void* host, const void* device, std::size_t bytes);
  // A stream other than the default one (destroyed with this object).
  void* stream();
  // The stand-in's bookkeeping (launches, conversions, temporaries, faults); nullptr on a GPU.
  FakeDevice* fake();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace polyquant::test
