// The cache of idle output buffers (buffer_cache.h).
#include "buffer_cache.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "polyquant/polyquant.h"

namespace polyquant::python {
namespace {

namespace pq = polyquant;

constexpr std::size_t kHugePage = std::size_t{2} << 20;         // 2 MiB, the x86-64 transparent huge page
constexpr std::size_t kDefaultMaxLimit = std::size_t{2} << 30;  // 2 GiB
constexpr const char* kEnvName = "POLYQUANT_BUFFER_CACHE";

// The size class of `bytes`: rounded up to 1/8 of the next power of two, so a class is at most
// 12.5% larger than any request it serves and requests of nearby sizes share buffers. Requests are
// >= 1 MiB, so classes are multiples of 128 KiB (whole pages).
std::size_t size_class(std::size_t bytes) {
  std::size_t pow2 = kMinCachedBytes;
  while (pow2 < bytes) pow2 <<= 1;
  const std::size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

// A mapping of exactly `bytes` (a size class), 2 MiB-aligned when it spans huge pages and advised
// to use them, which is what numpy's allocator does for large arrays: its first-touch faults (the
// one time a buffer is faulted in) cost a fraction of 4 KiB pages'. nullptr when out of memory.
void* map_buffer(std::size_t bytes) {
  const bool huge = bytes >= kHugePage;
  const std::size_t span = huge ? bytes + kHugePage : bytes;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (!huge) return p;
  // Trim the unaligned head and the tail beyond `bytes`.
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (start + kHugePage - 1) & ~(std::uintptr_t{kHugePage} - 1);
  if (aligned != start) munmap(p, aligned - start);
  const std::size_t tail = (start + span) - (aligned + bytes);
  if (tail != 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* data = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  madvise(data, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing but speed
#endif
  return data;
}

void unmap_buffer(void* data, std::size_t bytes) { munmap(data, bytes); }

struct Block {
  void* data;
  std::size_t bytes;  // its size class
};

// POLYQUANT_BUFFER_CACHE: "<digits>[K|M|G]" (binary units, case-insensitive) or unset / empty for
// the default. Throws pq::Error naming the variable and what it accepts.
std::size_t limit_from_environment() {
  const char* text = std::getenv(kEnvName);
  if (text == nullptr || *text == '\0') {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return kDefaultMaxLimit;
    const std::size_t ram = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
    return std::min(kDefaultMaxLimit, ram / 8);
  }
  const std::string s(text);
  std::size_t i = 0, value = 0;
  bool overflow = false;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    const std::size_t digit = static_cast<std::size_t>(s[i] - '0');
    if (value > (SIZE_MAX - digit) / 10) overflow = true;
    value = value * 10 + digit;
  }
  int shift = -1;
  if (i > 0 && i + 1 >= s.size()) {
    if (i == s.size()) shift = 0;
    else if (s[i] == 'k' || s[i] == 'K') shift = 10;
    else if (s[i] == 'm' || s[i] == 'M') shift = 20;
    else if (s[i] == 'g' || s[i] == 'G') shift = 30;
  }
  if (shift < 0 || overflow || (shift > 0 && value > (SIZE_MAX >> shift))) {
    throw pq::Error(pq::ErrorKind::kValue,
                    std::string(kEnvName) + "='" + s +
                        "': expected the buffer cache's limit in bytes, a whole number with an optional K, M or G "
                        "suffix (e.g. 1073741824 or 1G), or 0 to turn the cache off");
  }
  return value << shift;
}

class BufferCache {
 public:
  BufferCache() { pthread_atfork(&BufferCache::before_fork, &BufferCache::after_fork_parent, &BufferCache::after_fork_child); }

  // A block of `bytes`' class (from the idle list or freshly mapped), or {nullptr, 0} when the
  // cache is off or out of memory.
  Block take(std::size_t bytes) {
    const std::size_t cls = size_class(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      configure_locked();
      if (limit_ == 0 || closed_) return {nullptr, 0};
      // The most recently cached block of the class: the likeliest to be in the CPU's caches.
      for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
        if (it->bytes != cls) continue;
        const Block b = *it;
        idle_.erase(std::next(it).base());
        idle_bytes_ -= b.bytes;
        ++hits_;
        return b;
      }
      ++misses_;
    }
    void* data = map_buffer(cls);
    return data ? Block{data, cls} : Block{nullptr, 0};
  }

  // The capsule's deleter: `b`'s array was freed. Keeps it idle unless the cache is off, closed
  // or `b` alone exceeds the limit; evicts the least recently cached blocks to make room.
  void give_back(Block b) noexcept {
    std::vector<Block> evicted;
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!closed_ && b.bytes <= limit_) {
        try {
          // The oldest blocks that must go for `b` to fit (b.bytes <= limit_, so they suffice).
          std::size_t n = 0, freed = 0;
          while (idle_bytes_ - freed + b.bytes > limit_) freed += idle_[n++].bytes;
          const auto first_kept = idle_.begin() + static_cast<std::ptrdiff_t>(n);
          // Everything that can throw comes first, so a bad_alloc leaves the cache as it was.
          evicted.assign(idle_.begin(), first_kept);
          idle_.reserve(idle_.size() + 1);
          idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(n));
          idle_.push_back(b);
          idle_bytes_ = idle_bytes_ - freed + b.bytes;
          keep = true;
        } catch (const std::bad_alloc&) {
          evicted.clear();  // nothing evicted; `b` is unmapped below
        }
      }
    }
    for (const Block& e : evicted) unmap_buffer(e.data, e.bytes);
    if (!keep) unmap_buffer(b.data, b.bytes);
  }

  void empty() {
    std::vector<Block> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.swap(idle_);
      idle_bytes_ = 0;
    }
    for (const Block& b : all) unmap_buffer(b.data, b.bytes);
  }

  // Interpreter exit: unmaps the idle blocks; blocks given back later are unmapped directly.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    empty();
  }

  void set_limit(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      configured_ = true;
      limit_ = bytes;
    }
    empty();
  }

  nb::dict info() {
    std::size_t cached_bytes, cached_buffers, limit, hits, misses;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      configure_locked();
      cached_bytes = idle_bytes_;
      cached_buffers = idle_.size();
      limit = closed_ ? std::size_t{0} : limit_;
      hits = hits_;
      misses = misses_;
    }
    // The dict is built without the mutex: making Python objects can run the garbage collector,
    // whose frees of cached arrays come back here (give_back) and would wait on it forever.
    nb::dict d;
    d["cached_bytes"] = cached_bytes;
    d["cached_buffers"] = cached_buffers;
    d["limit_bytes"] = limit;
    d["min_buffer_bytes"] = kMinCachedBytes;
    d["hits"] = hits;
    d["misses"] = misses;
    return d;
  }

 private:
  // Reads POLYQUANT_BUFFER_CACHE once it parses (a bad value throws at every use until fixed,
  // like a bad POLYQUANT_ISA).
  void configure_locked() {
    if (configured_) return;
    limit_ = limit_from_environment();
    configured_ = true;
  }

  // Fork: the forking thread holds the mutex across fork(), so the child's copy is consistent;
  // the child then unmaps its copies of the idle blocks (munmap only; no allocation) and starts
  // empty. Blocks of the child's live arrays come back to the child's own cache when freed.
  static void before_fork() { instance().mutex_.lock(); }
  static void after_fork_parent() { instance().mutex_.unlock(); }
  static void after_fork_child() {
    BufferCache& c = instance();
    for (const Block& b : c.idle_) unmap_buffer(b.data, b.bytes);
    c.idle_.clear();  // keeps its capacity: no deallocation here
    c.idle_bytes_ = 0;
    c.hits_ = c.misses_ = 0;
    c.mutex_.unlock();
  }

 public:
  // Never destroyed: a capsule can be freed after static destructors run (see buffer_cache.h).
  static BufferCache& instance() {
    static BufferCache* cache = new BufferCache;
    return *cache;
  }

 private:
  std::mutex mutex_;
  std::vector<Block> idle_;  // least recently cached first
  std::size_t idle_bytes_ = 0;
  std::size_t limit_ = 0;
  bool configured_ = false;
  bool closed_ = false;
  std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace

CachedBuffer cached_buffer(std::size_t bytes) {
  BufferCache& cache = BufferCache::instance();
  const Block b = cache.take(bytes);
  if (b.data == nullptr) return {};
  Block* owned = nullptr;
  try {
    owned = new Block(b);
    nb::capsule owner(owned, [](void* p) noexcept {
      Block* block = static_cast<Block*>(p);
      BufferCache::instance().give_back(*block);
      delete block;
    });
    return {b.data, std::move(owner)};
  } catch (...) {
    // The capsule's constructor deletes nothing when it throws: give the block back here.
    cache.give_back(b);
    delete owned;
    throw;
  }
}

void empty_buffer_cache() { BufferCache::instance().empty(); }

nb::dict buffer_cache_info() { return BufferCache::instance().info(); }

void bind_buffer_cache(nb::module_& m) {
  m.def("empty_cache", &empty_buffer_cache,
        "Unmaps the idle output buffers kept for reuse (buffers of live arrays return to the cache when freed).");
  m.def("buffer_cache_info", &buffer_cache_info,
        "The output buffer cache: cached_bytes, cached_buffers, limit_bytes, min_buffer_bytes, hits, misses.");
  m.def("_set_buffer_cache_limit", [](std::size_t bytes) { BufferCache::instance().set_limit(bytes); }, nb::arg("bytes"),
        "Tests only: set the cache's limit in bytes (0: off), as POLYQUANT_BUFFER_CACHE does, and empty it.");
  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { BufferCache::instance().close(); }));
}

}  // namespace polyquant::python
