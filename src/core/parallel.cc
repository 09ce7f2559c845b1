// Fixed-size thread pool: workers sleep on a condition variable and are woken per parallel_for.
#include "core/parallel.h"

#include "polyquant/error.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace polyquant::detail {
namespace {

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }
  // Pools are never destroyed, only stopped (see PoolOwner).
  ~Pool() = delete;

  // Ends and joins the workers. Each first runs its part of a region already started, so a caller
  // inside run() finishes; run() after the stop executes every part in the caller.
  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(i) for i in [0, size()); the caller runs index 0.
  void run(const std::function<void(int)>& task) {
    std::lock_guard<std::mutex> serial(run_mu_);  // one parallel region at a time
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) {
        lock.unlock();
        for (int i = 0; i < size(); ++i) task(i);
        return;
      }
      task_ = &task;
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
      error_ = nullptr;
    }
    wake_.notify_all();
    try {
      task(0);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void worker_loop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (generation_ == seen) return;  // stopped, with no part of a started region left to run
        seen = generation_;
        task = task_;
      }
      try {
        (*task)(index);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

constexpr int kMaxThreads = 256;

int configured_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  if (n < 1) n = 1;
  if (const char* env = std::getenv("POLYQUANT_NUM_THREADS"); env != nullptr && *env != '\0') {
    n = std::min(n, parse_thread_count(env, "POLYQUANT_NUM_THREADS"));
  }
  return std::min(n, kMaxThreads);
}

// Set by set_num_threads(); 0 means "as configured".
std::atomic<int> g_requested_threads{0};

// The pool is created on first use. A child process made by fork() inherits the pool object but
// none of its threads, so the child drops it (leaking it on purpose: its mutexes may be held and its
// threads cannot be joined) and builds a fresh one on its next parallel_for.
std::atomic<Pool*> g_pool{nullptr};

void forget_pool_in_child() { g_pool.store(nullptr, std::memory_order_relaxed); }

// The workers must be gone before this code is: ONNX Runtime dlclose()s the custom-op library when
// its sessions end, and a worker left sleeping in unmapped code crashes the process. Joining them
// at unload and at exit runs here. The pool object itself is kept, still reachable from g_pool (so
// leak checkers stay quiet): at process exit a thread the exit does not wait for (a Python daemon
// thread in a call) can be waiting on its condition variables, and pthread_cond_destroy with a
// waiter blocks the exit forever.
struct PoolOwner {
  ~PoolOwner() {
    if (Pool* p = g_pool.load(std::memory_order_acquire)) p->stop_workers();
  }
};
PoolOwner g_pool_owner;

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  static std::mutex create_mu;  // not held across fork: creation is short and single-shot
  static const bool registered = [] { return pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0; }();
  (void)registered;
  std::lock_guard<std::mutex> lock(create_mu);
  p = g_pool.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = new Pool(configured_threads());
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

int parse_thread_count(std::string_view text, const char* what) {
  // Strictly a positive decimal count: atoi's "2x" -> 2 and "abc" -> 0 would hide a typo.
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > kMaxThreads) {
    throw Error(ErrorKind::kValue, std::string(what) + ": '" + std::string(text) +
                                       "' is not a thread count; allowed: a whole number from 1 to " +
                                       std::to_string(kMaxThreads));
  }
  return value;
}

int num_threads() {
  const int requested = g_requested_threads.load(std::memory_order_relaxed);
  const int size = pool().size();
  return requested > 0 ? std::min(requested, size) : size;
}

void set_thread_limit(int n) {
  if (n < 1 || n > kMaxThreads) {
    throw Error(ErrorKind::kValue, "num_threads: " + std::to_string(n) + " is not a thread count; allowed: 1 to " +
                                       std::to_string(kMaxThreads));
  }
  g_requested_threads.store(n, std::memory_order_relaxed);
}

void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const int threads = static_cast<int>(std::min<std::int64_t>(num_threads(), n / grain));
  if (threads <= 1) {
    body(0, n);
    return;
  }
  pool().run([&](int i) {
    if (i >= threads) return;
    const std::int64_t begin = n * i / threads;
    const std::int64_t end = n * (i + 1) / threads;
    if (begin < end) body(begin, end);
  });
}

}  // namespace polyquant::detail
