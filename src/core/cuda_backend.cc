// Finding, loading and checking libpolyquant_cuda.so (see cuda_backend.h and
// backends/cuda/backend_abi.h).
#include "core/cuda_backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>

#include "backends/cuda/backend_abi.h"
#include "core/nvml_devices.h"

namespace polyquant::detail {
namespace {

constexpr const char* kLibraryName = "libpolyquant_cuda.so";

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The directory of the module (shared object or executable) this function was linked into.
std::string own_module_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&own_module_directory), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string last_dl_error() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// dlopen: RTLD_LOCAL keeps the library's symbols (one entry point; the CUDA runtime is local to it
// anyway) out of the global namespace.
void* open_library(const std::string& path) { return ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL); }

// Checks the table against this build and asks it for the devices.
void check_and_query(CudaBackendStatus& s, const PolyquantCudaBackend* table) {
  if (table == nullptr) {
    s.reason = std::string(POLYQUANT_CUDA_ENTRY_POINT) + " returned no table";
    return;
  }
  if (table->abi_version != POLYQUANT_CUDA_ABI_VERSION || table->num_kernel_ops != static_cast<std::uint32_t>(kNumKernelOps) ||
      table->num_work_types != static_cast<std::uint32_t>(kNumWorkTypes) || table->row_args_size != sizeof(RowArgs)) {
    s.reason = "built for another polyquant (ABI " + std::to_string(table->abi_version) + " with " +
               std::to_string(table->num_kernel_ops) + " ops; this build: ABI " + std::to_string(POLYQUANT_CUDA_ABI_VERSION) +
               " with " + std::to_string(kNumKernelOps) + " ops)";
    return;
  }
  s.table = table;
  // NVML first: it lists the devices without initialising CUDA in this process (nvml_devices.h).
  const NvmlDeviceQuery nvml = query_devices_with_nvml(nvml_library_setting(), std::getenv("CUDA_VISIBLE_DEVICES"), table->runtime_version);
  if (nvml.answered) {
    s.device_query = "nvml";
    s.devices = nvml.devices;
    if (!nvml.reason.empty()) {
      s.devices.clear();
      s.reason = nvml.reason;
    } else if (s.devices.empty()) {
      s.reason = "no CUDA device";
    }
    return;
  }
  s.device_query = "cuda runtime (NVML: " + nvml.why_not + ")";
  char reason[512] = {};
  const int count = table->device_count(reason, sizeof reason);
  if (count <= 0) {
    s.reason = reason[0] != '\0' ? reason : "no CUDA device";
    return;
  }
  for (int d = 0; d < count; ++d) {
    char name[512] = {};
    table->device_description(d, name, sizeof name);
    s.devices.emplace_back(name);
  }
}

}  // namespace

CudaBackendStatus load_cuda_backend(const std::string& library) {
  CudaBackendStatus s;
  void* handle = nullptr;
  if (!library.empty()) {
    s.library = library;
    handle = open_library(library);
    if (handle == nullptr) {
      s.reason = "POLYQUANT_CUDA_LIBRARY=" + library + " cannot be loaded: " + last_dl_error();
      return s;
    }
  } else {
    const std::string beside = own_module_directory() + "/" + kLibraryName;
    if (is_file(beside)) {
      s.library = beside;
      handle = open_library(beside);
      if (handle == nullptr) {
        s.reason = beside + " cannot be loaded: " + last_dl_error();
        return s;
      }
    } else {
      handle = open_library(kLibraryName);
      if (handle == nullptr) {
        s.reason = std::string(kLibraryName) + " not found (looked beside " + beside.substr(0, beside.rfind('/')) +
                   " and on the loader's search path): this build has no CUDA backend (nvcc was not found, or "
                   "POLYQUANT_CUDA=OFF); set POLYQUANT_CUDA_LIBRARY to its path otherwise";
        return s;
      }
      s.library = kLibraryName;
      char origin[4096] = {};
      if (::dlinfo(handle, RTLD_DI_ORIGIN, origin) == 0 && origin[0] != '\0') s.library = std::string(origin) + "/" + kLibraryName;
    }
  }
  ::dlerror();
  const auto entry = reinterpret_cast<PolyquantCudaEntryPoint>(::dlsym(handle, POLYQUANT_CUDA_ENTRY_POINT));
  if (entry == nullptr) {
    s.reason = s.library + " has no " + POLYQUANT_CUDA_ENTRY_POINT + ": not a polyquant CUDA backend (" + last_dl_error() + ")";
    return s;
  }
  check_and_query(s, entry());
  return s;
}

const CudaBackendStatus& cuda_backend() {
  static const CudaBackendStatus status = [] {
    const char* env = std::getenv("POLYQUANT_CUDA_LIBRARY");
    return load_cuda_backend(env != nullptr ? env : "");
  }();
  return status;
}

}  // namespace polyquant::detail
