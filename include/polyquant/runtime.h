// What the library detected about the machine it runs on.
#pragma once

#include <string>
#include <vector>

#include "polyquant/export.h"

namespace polyquant {

struct RuntimeInfo {
  std::string version;                   // "0.1.0"
  std::string isa;                       // kernel set in use: "avx512", "avx2" or "scalar"
  std::vector<std::string> supported;    // every kernel set this CPU can run, best first
  int num_threads = 1;                   // worker threads used for large tensors
};

// Kernel selection happens once, at first use. POLYQUANT_ISA=scalar|avx2|avx512 (environment)
// forces a kernel set (it must be supported); POLYQUANT_NUM_THREADS caps the threads.
POLYQUANT_API RuntimeInfo runtime_info();

}  // namespace polyquant
