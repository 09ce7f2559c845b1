// Listing the CUDA devices without initialising CUDA, through NVML (libnvidia-ml.so.1, which ships
// with the NVIDIA driver), as torch does for its fork-safe device count.
//
// Why: the CUDA runtime's own query (cudaGetDeviceCount) initialises the driver in the calling
// process, and a process that forks after that cannot use CUDA in the child (CUDA's rule). Every
// `polyquant` command and runtime_info() list the devices, so with the runtime's query a script that
// printed runtime_info() and then forked workers would lose the GPU in them. NVML reads the same
// facts without touching CUDA's state.
//
// NVML sees every GPU of the machine, CUDA only the visible ones, in its own order. The answer is
// taken from NVML only where it must equal what CUDA would list:
//   - CUDA_VISIBLE_DEVICES unset, empty (no device), or a list of distinct indices below NVML's
//     count (UUIDs, MIG names, negative or repeated indices: ask CUDA);
//   - every GPU with the same name and compute capability, so CUDA's enumeration order (fastest
//     first by default, bus order with CUDA_DEVICE_ORDER=PCI_BUS_ID) cannot change the list;
//   - no GPU in MIG mode (CUDA then lists the MIG instances, not the GPU).
// Otherwise the caller asks the CUDA runtime, which is always right.
#pragma once

#include <string>
#include <vector>

namespace polyquant::detail {

struct NvmlDeviceQuery {
  bool answered = false;             // false: NVML cannot answer exactly; ask the CUDA runtime
  std::vector<std::string> devices;  // CUDA's devices, "NAME (sm_XY)", as cudaGetDeviceProperties names them
  // Set (with answered) when the driver is older than the CUDA runtime the library links: the
  // library cannot run on it, whatever the devices.
  std::string reason;
  std::string why_not;  // when not answered: why (for tests and diagnostics)
};

// `library`: the NVML library to load (nvml_library_setting()); "off": none (not answered).
// `cuda_visible_devices`: CUDA_VISIBLE_DEVICES's value, nullptr when unset. `runtime_version`: the
// CUDA library's runtime (1000 * major + 10 * minor). Never throws; NVML is shut down on return.
NvmlDeviceQuery query_devices_with_nvml(const std::string& library, const char* cuda_visible_devices, int runtime_version);

// $POLYQUANT_NVML_LIBRARY when set and not empty ("off" turns the NVML query off), else
// "libnvidia-ml.so.1" (the driver's library, on the loader's search path).
std::string nvml_library_setting();

}  // namespace polyquant::detail
