// NVML's view of the CUDA devices (see nvml_devices.h). NVML is loaded with dlopen and declared here
// with plain C types (its functions take ints, unsigned ints, char buffers and an opaque device
// handle), so the core needs neither NVML's header nor the driver at build time.
#include "core/nvml_devices.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace polyquant::detail {
namespace {

using NvmlReturn = int;  // nvmlReturn_t
using NvmlDevice = void*;  // nvmlDevice_t, an opaque handle
constexpr NvmlReturn kNvmlSuccess = 0, kNvmlNotSupported = 3;
constexpr unsigned kNameBufferBytes = 256;  // NVML asks for at least 96 (NVML_DEVICE_NAME_V2_BUFFER_SIZE)

struct Nvml {
  NvmlReturn (*init)() = nullptr;                                   // nvmlInit_v2
  NvmlReturn (*shutdown)() = nullptr;                               // nvmlShutdown
  const char* (*error_string)(NvmlReturn) = nullptr;                // nvmlErrorString
  NvmlReturn (*count)(unsigned*) = nullptr;                         // nvmlDeviceGetCount_v2
  NvmlReturn (*handle)(unsigned, NvmlDevice*) = nullptr;            // nvmlDeviceGetHandleByIndex_v2
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;        // nvmlDeviceGetName
  NvmlReturn (*capability)(NvmlDevice, int*, int*) = nullptr;       // nvmlDeviceGetCudaComputeCapability
  NvmlReturn (*driver_cuda)(int*) = nullptr;                        // nvmlSystemGetCudaDriverVersion_v2
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned*, unsigned*) = nullptr;  // nvmlDeviceGetMigMode (optional: older drivers lack MIG)

  std::string error(NvmlReturn r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return (s != nullptr ? std::string(s) : std::string("NVML error")) + " (" + std::to_string(r) + ")";
  }
};

template <class F>
bool bind(void* handle, const char* symbol, F& f) {
  f = reinterpret_cast<F>(::dlsym(handle, symbol));
  return f != nullptr;
}

// The library's functions, or why not.
bool load(const std::string& library, Nvml& n, std::string& why_not) {
  // RTLD_LOCAL: NVML's symbols stay out of the global namespace. Never unloaded (dlclose of a
  // driver library is not worth the risk; one handle per process).
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    why_not = library + " cannot be loaded: " + (e != nullptr ? e : "unknown dlopen error");
    return false;
  }
  bind(handle, "nvmlDeviceGetMigMode", n.mig_mode);
  if (!bind(handle, "nvmlInit_v2", n.init) || !bind(handle, "nvmlShutdown", n.shutdown) ||
      !bind(handle, "nvmlErrorString", n.error_string) || !bind(handle, "nvmlDeviceGetCount_v2", n.count) ||
      !bind(handle, "nvmlDeviceGetHandleByIndex_v2", n.handle) || !bind(handle, "nvmlDeviceGetName", n.name) ||
      !bind(handle, "nvmlDeviceGetCudaComputeCapability", n.capability) ||
      !bind(handle, "nvmlSystemGetCudaDriverVersion_v2", n.driver_cuda)) {
    why_not = library + " lacks a function polyquant needs (an NVML older than CUDA 11's)";
    return false;
  }
  return true;
}

// CUDA_VISIBLE_DEVICES as distinct indices below `count`, or false where CUDA's reading of it is
// more than that (UUIDs, MIG names, signs, spaces, repeats, an index past the end: CUDA stops at
// the first invalid entry, a rule not worth reproducing when the runtime can be asked).
bool visible_indices(const std::string& spec, unsigned count, std::vector<unsigned>& out) {
  out.clear();
  if (spec.empty()) return true;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = spec.find(',', start);
    const std::string token = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (token.empty() || token.size() > 9 || token.find_first_not_of("0123456789") != std::string::npos) return false;
    const auto index = static_cast<unsigned>(std::stoul(token));
    if (index >= count) return false;
    for (unsigned seen : out) {
      if (seen == index) return false;
    }
    out.push_back(index);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// The query itself, NVML initialised.
NvmlDeviceQuery query(const Nvml& n, const char* cuda_visible_devices, int runtime_version) {
  NvmlDeviceQuery q;
  int driver = 0;
  if (const NvmlReturn r = n.driver_cuda(&driver); r != kNvmlSuccess) {
    q.why_not = "nvmlSystemGetCudaDriverVersion_v2: " + n.error(r);
    return q;
  }
  unsigned count = 0;
  if (const NvmlReturn r = n.count(&count); r != kNvmlSuccess) {
    q.why_not = "nvmlDeviceGetCount_v2: " + n.error(r);
    return q;
  }
  std::vector<std::string> all;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice d = nullptr;
    char name[kNameBufferBytes] = {};
    int major = 0, minor = 0;
    if (const NvmlReturn r = n.handle(i, &d); r != kNvmlSuccess) {
      q.why_not = "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) + "): " + n.error(r);
      return q;
    }
    if (n.mig_mode != nullptr) {
      unsigned current = 0, pending = 0;
      const NvmlReturn r = n.mig_mode(d, &current, &pending);
      if (r == kNvmlSuccess && current != 0) {
        q.why_not = "GPU " + std::to_string(i) + " is in MIG mode (CUDA lists its instances)";
        return q;
      }
      if (r != kNvmlSuccess && r != kNvmlNotSupported) {
        q.why_not = "nvmlDeviceGetMigMode(" + std::to_string(i) + "): " + n.error(r);
        return q;
      }
    }
    if (const NvmlReturn r = n.name(d, name, kNameBufferBytes); r != kNvmlSuccess) {
      q.why_not = "nvmlDeviceGetName(" + std::to_string(i) + "): " + n.error(r);
      return q;
    }
    if (const NvmlReturn r = n.capability(d, &major, &minor); r != kNvmlSuccess) {
      q.why_not = "nvmlDeviceGetCudaComputeCapability(" + std::to_string(i) + "): " + n.error(r);
      return q;
    }
    name[kNameBufferBytes - 1] = '\0';
    // As backends/cuda/backend.cu's device_description words it.
    all.push_back(std::string(name) + " (sm_" + std::to_string(major) + std::to_string(minor) + ")");
    if (all.back() != all.front()) {
      q.why_not = "GPUs of different kinds (" + all.front() + ", " + all.back() + "): CUDA's order is its own";
      return q;
    }
  }
  std::vector<unsigned> visible;
  if (cuda_visible_devices == nullptr) {
    for (unsigned i = 0; i < count; ++i) visible.push_back(i);
  } else if (!visible_indices(cuda_visible_devices, count, visible)) {
    q.why_not = std::string("CUDA_VISIBLE_DEVICES=") + cuda_visible_devices + " is not a list of distinct device indices below " +
                std::to_string(count);
    return q;
  }
  q.answered = true;
  if (driver / 1000 < runtime_version / 1000) {
    q.reason = "the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
               ", older than the CUDA " + std::to_string(runtime_version / 1000) + "." +
               std::to_string(runtime_version % 1000 / 10) + " runtime libpolyquant_cuda.so links: update the driver";
    return q;
  }
  for (unsigned i : visible) q.devices.push_back(all[i]);
  return q;
}

}  // namespace

std::string nvml_library_setting() {
  const char* env = std::getenv("POLYQUANT_NVML_LIBRARY");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string("libnvidia-ml.so.1");
}

NvmlDeviceQuery query_devices_with_nvml(const std::string& library, const char* cuda_visible_devices, int runtime_version) {
  NvmlDeviceQuery q;
  if (library == "off") {
    q.why_not = "POLYQUANT_NVML_LIBRARY=off";
    return q;
  }
  Nvml n;
  if (!load(library, n, q.why_not)) return q;
  if (const NvmlReturn r = n.init(); r != kNvmlSuccess) {
    q.why_not = "nvmlInit_v2: " + n.error(r);
    return q;
  }
  q = query(n, cuda_visible_devices, runtime_version);
  n.shutdown();
  return q;
}

}  // namespace polyquant::detail
