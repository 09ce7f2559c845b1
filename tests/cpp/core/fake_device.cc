// The host stand-in for the CUDA library (see fake_device.h).
#include "core/fake_device.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "backends/cuda/backend_abi.h"
#include "backends/cuda/row_elements.cuh"
#include "backends/cuda/row_layout.h"
#include "core/device_elementwise.h"
#include "core/fpenv.h"
#include "kernels/convert/element.h"
#include "kernels/registry.h"

namespace polyquant::test {
namespace {

using detail::kNumKernelOps;
using detail::kNumWorkTypes;
using detail::KernelOp;
using detail::WorkType;

struct Block {
  std::size_t bytes = 0;
  int device = 0;
  bool temporary = false;
};

struct State {
  std::mutex mutex;
  std::map<std::uintptr_t, Block> blocks;  // start address -> block
  FakeDeviceStats stats;
  int current = 0;
};

State& state() {
  static State s;
  return s;
}

// The device whose memory holds [p, p + bytes), or -1.
int device_of(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  State& s = state();
  auto it = s.blocks.upper_bound(a);
  if (it == s.blocks.begin()) return -1;
  --it;
  if (a + (bytes > 0 ? bytes : 1) > it->first + it->second.bytes) return -1;
  return it->second.device;
}

void require_on_current_device(const void* p, std::size_t bytes, const char* what) {
  State& s = state();
  if (device_of(p, bytes) != s.current) {
    s.stats.faults.push_back(std::string(what) + " at " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                             " is not memory of device " + std::to_string(s.current));
  }
}

int device_count(char*, std::size_t) {
  ++state().stats.device_queries;
  return FakeDevice::kDevices;
}
int device_description(int device, char* name, std::size_t size) {
  std::snprintf(name, size, "polyquant fake device %d (host memory)", device);
  return 0;
}
const char* error_string(int error) { return error == 0 ? "no error" : "fake device error"; }
int get_device(int* device) {
  *device = state().current;
  return 0;
}
int set_device(int device) {
  if (device < 0 || device >= FakeDevice::kDevices) return 101;  // cudaErrorInvalidDevice
  state().current = device;
  return 0;
}
int pointer_device(const void* p, int* device) {
  const std::lock_guard<std::mutex> lock(state().mutex);
  *device = device_of(p, 1);
  return 0;
}
int allocate(void** p, std::size_t bytes, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  *p = std::calloc(bytes, 1);
  s.blocks[reinterpret_cast<std::uintptr_t>(*p)] = Block{bytes, s.current, true};
  ++s.stats.allocations;
  s.stats.last_stream = stream;
  return 0;
}
int release(void* p, void*) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.blocks.erase(reinterpret_cast<std::uintptr_t>(p));
  std::free(p);
  return 0;
}
int release_now(void* p) { return release(p, nullptr); }
int order_after(void* waiting, void* producer) {  // the stand-in runs everything at once: recorded only
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.orderings.emplace_back(waiting, producer);
  return 0;
}
int copy(void* dst, const void* src, std::size_t bytes, void* stream, int wait) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  std::memcpy(dst, src, bytes);
  s.stats.host_reads += wait != 0 && device_of(src, bytes) >= 0 && device_of(dst, bytes) < 0;
  s.stats.last_stream = stream;
  return 0;
}
int convert(const PolyquantCudaConvert* c, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.conversions;
  s.stats.last_stream = stream;
  std::int64_t n = 1;
  for (int d = 0; d < c->rank; ++d) n *= c->shape[d];
  for (std::int64_t j = 0; j < n; ++j) {
    std::int64_t rest = j, so = 0, dof = 0;
    for (int d = c->rank - 1; d >= 0; --d) {
      const std::int64_t i = rest % c->shape[d];
      rest /= c->shape[d];
      so += i * c->src_strides[d];
      dof += i * c->dst_strides[d];
    }
    const auto* src = static_cast<const unsigned char*>(c->src) + so * static_cast<std::int64_t>(dtype_size(c->src_dtype));
    auto* dst = static_cast<unsigned char*>(c->dst) + dof * static_cast<std::int64_t>(dtype_size(c->dst_dtype));
    require_on_current_device(src, dtype_size(c->src_dtype), "a conversion's source element");
    require_on_current_device(dst, dtype_size(c->dst_dtype), "a conversion's destination element");
    detail::convert_element(src, c->src_dtype, 0, dst, c->dst_dtype, 0);
  }
  return 0;
}

// The exact group sums as the CUDA kernel computes them: one ExactSumFloat32 per run of terms of a
// group, its parts added limb-wise into the group's (here in term order: the parts do not depend
// on it).
int exact_sums(const PolyquantCudaExactSums* e, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.reductions;
  s.stats.last_stream = stream;
  constexpr int K = kPolyquantCudaExactLimbs;
  const auto groups = static_cast<std::size_t>(e->groups);
  require_on_current_device(e->limbs, groups * K * sizeof(std::int64_t), "exact sums' limbs");
  require_on_current_device(e->flags, groups * sizeof(std::uint32_t), "exact sums' flags");
  std::fill(e->limbs, e->limbs + groups * K, 0);
  std::fill(e->flags, e->flags + groups, 0u);
  std::int64_t n = 1;
  for (int d = 0; d < e->rank; ++d) n *= e->shape[d];
  detail::ExactSumFloat32 acc;
  std::int64_t group = -1;
  auto flush = [&] {
    std::int64_t parts[K];
    e->flags[group] |= acc.to_parts(parts);
    for (int i = 0; i < K; ++i) {
      e->limbs[group * K + i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(e->limbs[group * K + i]) +
                                                          static_cast<std::uint64_t>(parts[i]));
    }
  };
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t g = polyquant_group_of(j, e->rank, e->shape, e->group_strides);
    require_on_current_device(e->terms + j, sizeof(float), "an exact sum's term");
    if (g < 0 || g >= e->groups) {
      s.stats.faults.push_back("exact sums: term " + std::to_string(j) + " maps to group " + std::to_string(g) + " of " +
                               std::to_string(e->groups));
      return 0;
    }
    if (g != group) {
      if (group >= 0) flush();
      acc.clear();
      group = g;
    }
    acc.add(e->terms[j]);
  }
  if (group >= 0) flush();
  return 0;
}

// The group minimum and maximum as the CUDA kernel folds them (order keys, flags).
int group_min_max(const PolyquantCudaGroupMinMax* m, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.reductions;
  s.stats.last_stream = stream;
  const auto groups = static_cast<std::size_t>(m->groups);
  require_on_current_device(m->keys, 2 * groups * sizeof(std::uint64_t), "min / max keys");
  require_on_current_device(m->flags, groups * sizeof(std::uint32_t), "min / max flags");
  for (std::size_t g = 0; g < groups; ++g) m->keys[2 * g] = ~std::uint64_t{0}, m->keys[2 * g + 1] = 0, m->flags[g] = 0;
  std::int64_t n = 1;
  for (int d = 0; d < m->rank; ++d) n *= m->shape[d];
  const std::size_t size = dtype_size(m->dtype);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t g = polyquant_group_of(j, m->rank, m->shape, m->group_strides);
    require_on_current_device(static_cast<const unsigned char*>(m->x) + j * static_cast<std::int64_t>(size), size, "a min / max element");
    if (g < 0 || g >= m->groups) {
      s.stats.faults.push_back("min / max: element " + std::to_string(j) + " maps to group " + std::to_string(g));
      return 0;
    }
    const double v = detail::load_as_double(m->x, m->dtype, j);
    if (m->finite_only && !(v - v == 0.0)) continue;
    if (v != v) {
      m->flags[g] |= kPolyquantCudaMinMaxNaN;
      continue;
    }
    if (v == 0.0 && std::signbit(v)) m->flags[g] |= kPolyquantCudaMinMaxNegativeZero;
    const std::uint64_t k = polyquant_order_key(v);
    m->keys[2 * g] = std::min(m->keys[2 * g], k);
    m->keys[2 * g + 1] = std::max(m->keys[2 * g + 1], k);
  }
  return 0;
}

// The group histogram as the CUDA kernel counts it (the same slots; the order of integer adds is
// free).
int group_histogram(const PolyquantCudaGroupHistogram* h, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.reductions;
  s.stats.last_stream = stream;
  const auto groups = static_cast<std::size_t>(h->groups);
  const std::size_t slots = groups * static_cast<std::size_t>(h->bins + 2);
  require_on_current_device(h->counts, slots * sizeof(std::uint64_t), "histogram counts");
  require_on_current_device(h->binning, groups * sizeof(PolyquantCudaHistogramBinning), "histogram binning");
  if (h->bins < 1 || h->bins > detail::kHistcMaxCountingBins) {
    s.stats.faults.push_back("histogram: " + std::to_string(h->bins) + " bins");
    return 0;
  }
  std::fill(h->counts, h->counts + slots, std::uint64_t{0});
  std::int64_t n = 1;
  for (int d = 0; d < h->rank; ++d) n *= h->shape[d];
  const std::size_t size = dtype_size(h->dtype);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t g = polyquant_group_of(j, h->rank, h->shape, h->group_strides);
    require_on_current_device(static_cast<const unsigned char*>(h->x) + j * static_cast<std::int64_t>(size), size, "a histogram element");
    if (g < 0 || g >= h->groups) {
      s.stats.faults.push_back("histogram: element " + std::to_string(j) + " maps to group " + std::to_string(g));
      return 0;
    }
    const PolyquantCudaHistogramBinning& b = h->binning[g];
    const double v = detail::load_as_double(h->x, h->dtype, j);
    std::uint64_t* c = h->counts + g * (h->bins + 2);
    const std::int64_t slot = polyquant_histogram_slot(v, b);
    if (slot >= 0) ++c[slot];
    if (v < b.below) ++c[h->bins];
    if (v > b.above) ++c[h->bins + 1];
  }
  return 0;
}

// Launches the CUDA library runs in a layout that reads ahead (per-tensor parameters beside a
// contiguous x, per-row or repeated-row operands resolved per thread) run through that kernel's
// thread loop, with this many threads (a stride that leaves a carry on some steps of most rows).
constexpr std::int64_t kLayoutThreads = 13;

template <KernelOp kOp, class Row, WorkType kWork, detail::cuda::RowLayout kLayout>
void run_row_threads(const void* params, const detail::RowArgs& a, std::int64_t threads_in_launch) {
  using P = typename detail::RowElementTraits<kOp>::Params;
  const P& p = *static_cast<const P*>(params);
  const auto threads = [&] {
    detail::cuda::with_mode_of(p, [&]<RoundingMode kMode>() {
      for (std::int64_t t = 0; t < threads_in_launch; ++t) {
        detail::cuda::run_row_thread<Row, detail::WorkT<kWork>, kMode, kLayout>(p, a, t, threads_in_launch);
      }
    });
  };
  if constexpr (detail::kRowElementFlushesDenormals<kOp>) {
    const detail::ScopedFlushDenormals flush;  // as the reference row and the -ftz=true build
    threads();
  } else {
    threads();
  }
}

}  // namespace

bool run_row_threads_on_host(KernelOp op, WorkType work, const void* params, const detail::RowArgs& a,
                             std::int64_t threads, detail::cuda::RowLayout layout) {
  using detail::cuda::RowLayout;
  if (layout != RowLayout::kFirstStreams && layout != RowLayout::kRowsResolved) return false;
#define POLYQUANT_RESOLVED_WORK(Enum, name, work_name, W)                                                                     \
  if constexpr (detail::kHasRowElement<KernelOp::Enum>) {                                                                     \
    if (work == WorkType::W) {                                                                                                \
      if (layout == RowLayout::kFirstStreams) {                                                                               \
        run_row_threads<KernelOp::Enum, detail::cuda::name##_row, WorkType::W, RowLayout::kFirstStreams>(params, a, threads); \
      } else {                                                                                                                \
        run_row_threads<KernelOp::Enum, detail::cuda::name##_row, WorkType::W, RowLayout::kRowsResolved>(params, a, threads); \
      }                                                                                                                       \
      return true;                                                                                                            \
    }                                                                                                                         \
  }
#define POLYQUANT_OP(Enum, name, works, vector)                      \
  case KernelOp::Enum: {                                             \
    POLYQUANT_WORKS_##works(POLYQUANT_RESOLVED_WORK, Enum, name);    \
    return false;                                                    \
  }
  switch (op) {
#include "kernels/ops.inc"
  }
#undef POLYQUANT_OP
#undef POLYQUANT_RESOLVED_WORK
  return false;
}

namespace {

// Runs the registry's scalar reference row of (op, work), the spec the CUDA kernel equals, or, for
// a launch the CUDA library runs in a layout that reads ahead, that kernel's own loop.
int launch(KernelOp op, WorkType work, const void* params, const detail::RowArgs* args,
           const PolyquantCudaHostScalars* scalars, void* stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.launches;
  s.stats.last_stream = stream;
  detail::RowArgs a = *args;
  PolyquantCudaHostScalars values = scalars != nullptr ? *scalars : PolyquantCudaHostScalars{};
  if (values.mask != 0) ++s.stats.host_scalar_launches;
  for (int i = 0; i < detail::kMaxOperands; ++i) {
    if ((values.mask >> i) & 1u) {
      a.in[static_cast<std::size_t>(i)] = &values.value[i];
    } else if (a.in[static_cast<std::size_t>(i)] != nullptr) {
      const std::int64_t count = a.is_broadcast(i) ? 1 : a.is_per_row(i) ? a.n / a.row_len : a.is_repeated_row(i) ? a.row_len : a.n;
      const std::size_t size = a.in_bytes[static_cast<std::size_t>(i)];  // 0: unknown, bytes counted as elements
      require_on_current_device(a.in[static_cast<std::size_t>(i)], static_cast<std::size_t>(count) * (size > 0 ? size : 1),
                                "a launch operand");
    }
  }
  require_on_current_device(a.out, static_cast<std::size_t>(a.n), "a launch output");
  if (!s.stats.faults.empty()) return 700;  // cudaErrorIllegalAddress: do not touch the memory
  const detail::cuda::RowLayout layout = detail::cuda::row_layout_of(a, values.mask, detail::cuda::held_bytes(work),
                                                                           detail::cuda::second_stream_of(op));
  if (layout == detail::cuda::RowLayout::kRowsResolved) ++s.stats.resolved_launches;
  if (layout == detail::cuda::RowLayout::kFirstStreams) ++s.stats.read_ahead_launches;
  if (run_row_threads_on_host(op, work, params, a, kLayoutThreads, layout)) return 0;
  detail::reference_kernel(op, work)(params, a);
  return 0;
}

template <int kIndex>
int launch_entry(const void* params, const detail::RowArgs* args, const PolyquantCudaHostScalars* scalars, void* stream) {
  return launch(static_cast<KernelOp>(kIndex / kNumWorkTypes), static_cast<WorkType>(kIndex % kNumWorkTypes), params, args,
                scalars, stream);
}

bool has_row_element(KernelOp op) {
  switch (op) {
#define POLYQUANT_OP(Enum, name, works, vector) \
  case KernelOp::Enum: return detail::kHasRowElement<KernelOp::Enum>;
#include "kernels/ops.inc"
#undef POLYQUANT_OP
  }
  return false;
}

template <std::size_t... kIndex>
void fill_launchers(PolyquantCudaBackend& b, std::index_sequence<kIndex...>) {
  ((b.launch[kIndex / kNumWorkTypes][kIndex % kNumWorkTypes] =
        has_row_element(static_cast<KernelOp>(kIndex / kNumWorkTypes)) &&
                detail::reference_kernel(static_cast<KernelOp>(kIndex / kNumWorkTypes), static_cast<WorkType>(kIndex % kNumWorkTypes)) != nullptr
            ? &launch_entry<static_cast<int>(kIndex)>
            : nullptr),
   ...);
}

PolyquantCudaBackend make_table() {
  PolyquantCudaBackend b{};
  b.abi_version = POLYQUANT_CUDA_ABI_VERSION;
  b.num_kernel_ops = kNumKernelOps;
  b.num_work_types = kNumWorkTypes;
  b.row_args_size = sizeof(detail::RowArgs);
  b.runtime_version = 13000;
  b.device_count = &device_count;
  b.device_description = &device_description;
  b.error_string = &error_string;
  b.get_device = &get_device;
  b.set_device = &set_device;
  b.pointer_device = &pointer_device;
  b.allocate = &allocate;
  b.release = &release;
  b.release_now = &release_now;
  b.order_after = &order_after;
  b.copy = &copy;
  b.convert = &convert;
  b.exact_sums = &exact_sums;
  b.group_min_max = &group_min_max;
  b.group_histogram = &group_histogram;
  fill_launchers(b, std::make_index_sequence<static_cast<std::size_t>(kNumKernelOps * kNumWorkTypes)>());
  return b;
}

const PolyquantCudaBackend& fake_table() {
  static const PolyquantCudaBackend table = make_table();
  return table;
}

}  // namespace

const PolyquantCudaBackend& fake_device_table() { return fake_table(); }

FakeDevice::FakeDevice() {
  reset_stats();
  state().current = 0;
  detail::set_device_backend_for_testing(&fake_table());
}

FakeDevice::~FakeDevice() {
  detail::set_device_backend_for_testing(nullptr);
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (auto it = s.blocks.begin(); it != s.blocks.end();) {
    if (!it->second.temporary) {
      std::free(reinterpret_cast<void*>(it->first));
      it = s.blocks.erase(it);
    } else {
      ++it;
    }
  }
}

void* FakeDevice::allocate(std::size_t bytes, int device) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
  s.blocks[reinterpret_cast<std::uintptr_t>(p)] = Block{bytes > 0 ? bytes : 1, device, false};
  return p;
}

void* FakeDevice::upload(const void* host, std::size_t bytes, int device) {
  void* p = allocate(bytes, device);
  std::memcpy(p, host, bytes);
  return p;
}

const FakeDeviceStats& FakeDevice::stats() const { return state().stats; }
void FakeDevice::reset_stats() { state().stats = FakeDeviceStats{}; }

int FakeDevice::outstanding_temporaries() const {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  int n = 0;
  for (const auto& [start, block] : s.blocks) n += block.temporary;
  return n;
}

int FakeDevice::current_device() const { return state().current; }
const PolyquantCudaBackend& FakeDevice::table() const { return fake_table(); }

}  // namespace polyquant::test

