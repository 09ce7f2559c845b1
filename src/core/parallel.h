// A persistent worker pool for splitting large elementwise loops into static chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace polyquant::detail {

// Number of threads parallel_for may use (workers + the caller); fixed at first use from the
// hardware concurrency, capped by POLYQUANT_NUM_THREADS (a bad value throws Error at first use,
// like a bad POLYQUANT_ISA), and lowered further by set_thread_limit.
int num_threads();

// Caps the threads of later parallel_for calls at n (1..256; at most the pool's size). For tests
// and benchmarks; not to be called while an op runs.
void set_thread_limit(int n);

// Parses a thread count ("1".."256", nothing else); throws Error naming `what` otherwise.
int parse_thread_count(std::string_view text, const char* what);

// Calls body(begin, end) on disjoint chunks covering [0, n). Work smaller than 2 * grain runs
// on the calling thread. Chunks are contiguous and about equal, one per thread, so each thread
// streams through one range. Exceptions from body are rethrown on the caller.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace polyquant::detail
