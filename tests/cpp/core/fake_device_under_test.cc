// DeviceUnderTest (device_under_test.h) on the host stand-in for the CUDA library (fake_device.h):
// the engine's device-path tests in polyquant_tests, on every machine.
#include <cstring>
#include <string>

#include "core/device_under_test.h"
#include "core/fake_device.h"

namespace polyquant::test {

struct DeviceUnderTest::Impl {
  FakeDevice fake;
  int marker = 0;  // its address is the stream
};

DeviceUnderTest::DeviceUnderTest() : impl_(new Impl) {}
DeviceUnderTest::~DeviceUnderTest() { delete impl_; }
std::string DeviceUnderTest::unavailable_reason() const { return {}; }
int DeviceUnderTest::device_count() const { return FakeDevice::kDevices; }
void* DeviceUnderTest::allocate(std::size_t bytes, int device) { return impl_->fake.allocate(bytes, device); }
void* DeviceUnderTest::upload(const void* host, std::size_t bytes, int device) { return impl_->fake.upload(host, bytes, device); }
void DeviceUnderTest::download(void* host, const void* device, std::size_t bytes) { std::memcpy(host, device, bytes); }
void* DeviceUnderTest::stream() { return &impl_->marker; }
FakeDevice* DeviceUnderTest::fake() { return &impl_->fake; }

}  // namespace polyquant::test
