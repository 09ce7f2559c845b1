// A persistent worker pool for splitting large elementwise loops into static chunks.
#pragma once

#include <cstdint>
#include <functional>

namespace polyquant::detail {

// Number of threads parallel_for may use (workers + the caller); fixed at first use from the
// hardware concurrency, capped by POLYQUANT_NUM_THREADS.
int num_threads();

// Calls body(begin, end) on disjoint chunks covering [0, n). Work smaller than 2 * grain runs
// on the calling thread. Chunks are contiguous and about equal, one per thread, so each thread
// streams through one range. Exceptions from body are rethrown on the caller.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace polyquant::detail
