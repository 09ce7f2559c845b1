// The error of one kernel launch, alone. cudaGetLastError reports (and clears) the last error of any
// runtime call on the calling thread, in the runtime this library links statically: one that an
// earlier call left (an allocation out of memory, a refused cudaSetDevice: each already reported
// by its own call) would otherwise be returned as the next, correct launch's. So the state is
// cleared first; a sticky error (the context is lost) is reported again whatever is cleared.
#pragma once

#include <cuda_runtime.h>

namespace polyquant::detail::cuda {

template <class Launch>
int launch_status(Launch&& launch) {
  (void)cudaGetLastError();
  launch();
  return static_cast<int>(cudaGetLastError());
}

}  // namespace polyquant::detail::cuda
