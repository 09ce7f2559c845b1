// Reused output buffers for allocating calls (no `out=`). A fresh result of hundreds of MiB costs
// more to fault in page by page than the op costs to fill it (256 MiB: ~80 ms of first-touch
// faults against ~16 ms of copying), so large results come from a cache of idle buffers, the way
// onnxruntime's arena and PyTorch's caching allocator work. Each result is still a fresh numpy
// array that owns its buffer (through an owner capsule); the buffer returns to the cache only
// when that array is freed, and the next call of the same size class takes it back with its pages
// already faulted in. No numerics here.
//
//   - Only buffers of at least kMinCachedBytes go through the cache; smaller ones are numpy's.
//   - Sizes round up to a size class (1/8 of the next power of two, at most 12.5% more), so calls
//     of nearby sizes share buffers.
//   - The idle bytes held are capped: POLYQUANT_BUFFER_CACHE=<bytes> (suffix K, M or G allowed;
//     0 turns the cache off), read at first use; default min(2 GiB, physical memory / 8). A buffer
//     that does not fit evicts the least recently cached ones; one larger than the cap is freed.
//   - Thread-safe (one mutex, never held across a system call that maps or unmaps memory nor
//     across a call into Python, whose garbage collector may free a cached array meanwhile);
//     fork-safe (pthread_atfork: the child unmaps its copies of the parent's idle buffers).
//   - At interpreter exit (atexit) the cache unmaps its idle buffers and stops caching: buffers of
//     arrays freed later are unmapped directly. The cache object itself is never destroyed (a
//     capsule may be freed after static destructors run), so it stays reachable for LeakSanitizer.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nanobind/nanobind.h>

namespace polyquant::python {

namespace nb = nanobind;

inline constexpr std::size_t kMinCachedBytes = std::size_t{1} << 20;  // 1 MiB

// A buffer of at least `bytes` (bytes >= kMinCachedBytes; 2 MiB-aligned, so at least 64-byte
// aligned), from the cache or freshly mapped, with the capsule that gives it back when freed; or
// nullptr / an empty capsule when the cache is off (the caller allocates with numpy). Needs the
// GIL (the capsule is a Python object). Throws pq::Error (kValue) for a bad POLYQUANT_BUFFER_CACHE.
struct CachedBuffer {
  void* data = nullptr;
  nb::capsule owner;
};
CachedBuffer cached_buffer(std::size_t bytes);

// polyquant.empty_cache(): unmaps every idle buffer (buffers of live arrays are untouched and
// return to the cache when freed).
void empty_buffer_cache();

// polyquant.buffer_cache_info(): cached_bytes, cached_buffers, limit_bytes, min_buffer_bytes,
// hits, misses.
nb::dict buffer_cache_info();

// Registers empty_cache, buffer_cache_info and the interpreter-exit shutdown on the module.
void bind_buffer_cache(nb::module_& m);

}  // namespace polyquant::python
