// The CUDA library the device tests load: $POLYQUANT_CUDA_LIBRARY where set (a build tree copied
// to another path, as scripts/gpu_check.sh --prebuilt does on the GPU machine), else the one built
// beside them (POLYQUANT_CUDA_LIBRARY_FILE, an absolute path in the build tree).
#pragma once

#include <cstdlib>

inline const char* cuda_library_under_test() {
  const char* chosen = std::getenv("POLYQUANT_CUDA_LIBRARY");
  return chosen != nullptr && *chosen != '\0' ? chosen : POLYQUANT_CUDA_LIBRARY_FILE;
}
