// libpolyquant_fake_nvml.so: a stand-in for the driver's NVML (libnvidia-ml.so.1) with the functions
// core/nvml_devices.cc calls, its GPUs set by the test (polyquant_fake_nvml_*), so the NVML device
// query is tested on machines without a driver (tests/cpp/core/test_nvml_devices.cc).
#include <cstdio>
#include <string>

namespace {

constexpr int kMaxGpus = 8;
struct Gpu {
  std::string name = "NVIDIA H100 80GB HBM3";
  int major = 9, minor = 0;
  bool mig = false;
};
struct State {
  int init_error = 0;       // nvmlInit_v2's result
  int driver_cuda = 13000;  // nvmlSystemGetCudaDriverVersion_v2
  int count = 0;
  Gpu gpus[kMaxGpus];
  int open = 0;  // nvmlInit_v2 calls not yet shut down
  int inits = 0;
};
State& state() {
  static State s;
  return s;
}
struct Handle {
  int index;
};
Handle handles[kMaxGpus] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

constexpr int kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kInsufficientSize = 7;

}  // namespace

#define POLYQUANT_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

// The test's controls: `count` identical GPUs (the defaults above), the driver's CUDA version and
// nvmlInit_v2's result; then GPU `index` renamed or put in MIG mode.
POLYQUANT_FAKE_EXPORT void polyquant_fake_nvml_reset(int count, int driver_cuda, int init_error) {
  State& s = state();
  s = State{};
  s.count = count;
  s.driver_cuda = driver_cuda;
  s.init_error = init_error;
}
POLYQUANT_FAKE_EXPORT void polyquant_fake_nvml_set_gpu(int index, const char* name, int major, int minor, int mig) {
  Gpu& g = state().gpus[index];
  g.name = name;
  g.major = major;
  g.minor = minor;
  g.mig = mig != 0;
}
POLYQUANT_FAKE_EXPORT int polyquant_fake_nvml_inits() { return state().inits; }
POLYQUANT_FAKE_EXPORT int polyquant_fake_nvml_open() { return state().open; }

// NVML's functions, as far as polyquant uses them.
POLYQUANT_FAKE_EXPORT int nvmlInit_v2() {
  State& s = state();
  ++s.inits;
  if (s.init_error != 0) return s.init_error;
  ++s.open;
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlShutdown() {
  State& s = state();
  if (s.open == 0) return kUninitialized;
  --s.open;
  return 0;
}
POLYQUANT_FAKE_EXPORT const char* nvmlErrorString(int r) {
  switch (r) {
    case 0: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
POLYQUANT_FAKE_EXPORT int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (state().open == 0) return kUninitialized;
  *version = state().driver_cuda;
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned* count) {
  if (state().open == 0) return kUninitialized;
  *count = static_cast<unsigned>(state().count);
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (state().open == 0) return kUninitialized;
  if (index >= static_cast<unsigned>(state().count)) return kInvalidArgument;
  *device = &handles[index];
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  const Gpu& g = state().gpus[static_cast<Handle*>(device)->index];
  if (length < g.name.size() + 1) return kInsufficientSize;
  std::snprintf(name, length, "%s", g.name.c_str());
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlDeviceGetCudaComputeCapability(void* device, int* major, int* minor) {
  const Gpu& g = state().gpus[static_cast<Handle*>(device)->index];
  *major = g.major;
  *minor = g.minor;
  return 0;
}
POLYQUANT_FAKE_EXPORT int nvmlDeviceGetMigMode(void* device, unsigned* current, unsigned* pending) {
  const Gpu& g = state().gpus[static_cast<Handle*>(device)->index];
  if (!g.mig && g.major < 8) return kNotSupported;  // no MIG before Ampere
  *current = *pending = g.mig ? 1u : 0u;
  return 0;
}
