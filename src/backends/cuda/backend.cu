// libpolyquant_cuda.so's one exported entry point, polyquant_cuda_backend_v1 (backend_abi.h): the
// ABI description, the device queries, and the launcher table filled by the builds of
// row_kernels.cu (one per flavour and working precision). Everything else in the library is hidden (-fvisibility=hidden).
#include <cuda_runtime.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backends/cuda/backend_abi.h"
#include "backends/cuda/launch_status.cuh"
#include "backends/cuda/row_layout.h"
#include "kernels/convert/element.h"

namespace polyquant::detail::cuda {

// The builds of row_kernels.cu, one per flavour and working precision.
#define POLYQUANT_CUDA_DECLARE_FILL(flavour, work) void POLYQUANT_CUDA_FILL_FUNCTION(flavour, work)(PolyquantCudaBackend& table);
#define POLYQUANT_CUDA_EVERY_PART(X) X(ieee, kF16) X(ieee, kF32) X(ieee, kF64) X(flushing, kF16) X(flushing, kF32) X(flushing, kF64)
POLYQUANT_CUDA_EVERY_PART(POLYQUANT_CUDA_DECLARE_FILL)

namespace {

void write_reason(char* out, std::size_t size, const char* what, cudaError_t e) {
  if (out != nullptr && size > 0) std::snprintf(out, size, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int device_count(char* reason, std::size_t reason_size) {
  int count = 0;
  // cudaGetDeviceCount loads the driver: without one it returns cudaErrorInsufficientDriver or
  // cudaErrorNoDevice instead of aborting.
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // CUDA says "driver version is insufficient" both when libcuda is missing and when it is too old.
    write_reason(reason, reason_size,
                 e == cudaErrorInsufficientDriver ? "no usable CUDA driver (libcuda.so.1 missing or older than the runtime "
                                                    "this library links); cudaGetDeviceCount"
                                                  : "cudaGetDeviceCount",
                 e);
    return e == cudaErrorNoDevice ? 0 : -1;
  }
  if (count == 0 && reason != nullptr && reason_size > 0) std::snprintf(reason, reason_size, "no CUDA device");
  return count;
}

int device_description(int device, char* name, std::size_t name_size) {
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    write_reason(name, name_size, "cudaGetDeviceProperties", e);
    return static_cast<int>(e);
  }
  if (name != nullptr && name_size > 0) std::snprintf(name, name_size, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  return 0;
}

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

int get_device(int* device) { return static_cast<int>(cudaGetDevice(device)); }
int set_device(int device) { return static_cast<int>(cudaSetDevice(device)); }

int pointer_device(const void* pointer, int* device) {
  cudaPointerAttributes attributes{};
  const cudaError_t e = cudaPointerGetAttributes(&attributes, pointer);
  if (e != cudaSuccess) return static_cast<int>(e);
  const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  *device = on_device ? attributes.device : -1;
  return 0;
}

int allocate(void** pointer, std::size_t bytes, void* stream) {
  return static_cast<int>(cudaMallocAsync(pointer, bytes, static_cast<cudaStream_t>(stream)));
}
int release(void* pointer, void* stream) { return static_cast<int>(cudaFreeAsync(pointer, static_cast<cudaStream_t>(stream))); }
int release_now(void* pointer) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaFree(pointer);
  return static_cast<int>(e);
}
int order_after(void* waiting, void* producer) {
  const auto w = static_cast<cudaStream_t>(waiting), p = static_cast<cudaStream_t>(producer);
  if (w == p) return 0;
  cudaEvent_t done;
  cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = cudaEventRecord(done, p);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(w, done, 0);
  // (the wait keeps what it needs: an event may be destroyed while a stream still waits for it)
  const cudaError_t destroyed = cudaEventDestroy(done);
  return static_cast<int>(e != cudaSuccess ? e : destroyed);
}

int copy(void* dst, const void* src, std::size_t bytes, void* stream, int wait) {
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (e == cudaSuccess && wait != 0) e = cudaStreamSynchronize(s);
  return static_cast<int>(e);
}

// One element per thread and step (grid-stride): the flat C-order index j decomposed into the
// element's offsets in src and dst.
__global__ void convert_kernel(PolyquantCudaConvert c, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += step) {
    std::int64_t rest = j, src_offset = 0, dst_offset = 0;
    for (int d = c.rank - 1; d >= 0; --d) {
      const std::int64_t i = rest % c.shape[d];
      rest /= c.shape[d];
      src_offset += i * c.src_strides[d];
      dst_offset += i * c.dst_strides[d];
    }
    convert_element(c.src, c.src_dtype, src_offset, c.dst, c.dst_dtype, dst_offset);
  }
}

int convert(const PolyquantCudaConvert* c, void* stream) {
  std::int64_t n = 1;
  for (int d = 0; d < c->rank; ++d) n *= c->shape[d];
  if (n <= 0) return 0;
  constexpr int kThreadsPerBlock = 256;
  constexpr std::int64_t kMaxBlocks = 65536;
  const std::int64_t wanted = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const dim3 grid(static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks));
  return launch_status([&] { convert_kernel<<<grid, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(*c, n); });
}

// ---- grouped reductions -------------------------------------------------------------------------
// The walk of a grouped reduction over the n elements of `shape` (C order; grouped_walk_kernel
// below). By rows, the usual case: each warp takes `span` consecutive elements, lane l every `lane_stride`-th
// from its l-th (coalesced reads), so a lane stays in one group over a run of its group's elements.
// By columns, where the group changes along the innermost axis and that axis holds 32 elements or
// more (a per-channel parameter on the last axis): each warp takes a tile of 32 consecutive columns
// by kRowsPerTile rows, lane l walking down column l of it, so a lane stays in one group where the
// group depends on the column (a warp's step still reads 32 consecutive elements). Where that axis
// is shorter (C channels last, C < 32), the walk by rows steps by the largest multiple of C up to
// 32 (`lane_stride`; the lanes past it idle), so lane l keeps column l % C.
struct GroupedWalk {
  static constexpr int kThreadsPerBlock = 256;
  static constexpr std::int64_t kStepsPerSpan = 64;  // steps of a warp by rows
  static constexpr std::int64_t kRowsPerTile = 64;
  std::int64_t n = 1;
  std::int64_t lane_stride = 32;  // by rows: elements per step of a warp
  std::int64_t span = 32 * kStepsPerSpan;  // by rows: elements per warp
  std::int64_t columns = 0;       // by columns: the innermost extent; 0: by rows
  std::int64_t column_tiles = 0;  // by columns: tiles of 32 columns across a row
  dim3 blocks;
};
GroupedWalk grouped_walk(int rank, const std::int64_t* shape, const std::int64_t* group_strides, std::int64_t groups) {
  GroupedWalk w;
  for (int d = 0; d < rank; ++d) w.n *= shape[d];
  const bool inner_grouped = rank > 0 && groups > 1 && group_strides[rank - 1] != 0;
  if (inner_grouped && shape[rank - 1] > 1 && shape[rank - 1] < 32) {
    w.lane_stride = 32 / shape[rank - 1] * shape[rank - 1];
    w.span = w.lane_stride * GroupedWalk::kStepsPerSpan;
  }
  std::int64_t warps = (w.n + w.span - 1) / w.span;
  if (inner_grouped && shape[rank - 1] >= 32) {
    w.columns = shape[rank - 1];
    w.column_tiles = (w.columns + 31) / 32;
    const std::int64_t rows = w.n / w.columns;
    warps = (rows + GroupedWalk::kRowsPerTile - 1) / GroupedWalk::kRowsPerTile * w.column_tiles;
  }
  w.blocks = dim3(static_cast<unsigned>((warps * 32 + GroupedWalk::kThreadsPerBlock - 1) / GroupedWalk::kThreadsPerBlock));
  return w;
}

// polyquant_group_of for the kernels: 0 without a division where there is one group (per tensor),
// in 32-bit arithmetic where the elements number fewer than 2^31 (a 64-bit division is a long
// software sequence on the GPU; every index, extent and group then fits 32 bits), else in 64 bits.
__device__ __forceinline__ std::int64_t group_of_element(std::int64_t j, std::int64_t n, int rank, const std::int64_t* shape,
                                                         const std::int64_t* group_strides, std::int64_t groups) {
  if (groups == 1) return 0;
  if (n >= (std::int64_t{1} << 31)) return polyquant_group_of(j, rank, shape, group_strides);
  std::uint32_t rest = static_cast<std::uint32_t>(j), g = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const auto extent = static_cast<std::uint32_t>(shape[d]);
    g += (rest % extent) * static_cast<std::uint32_t>(group_strides[d]);
    rest /= extent;
  }
  return g;
}

// ---- the grouped walk -----------------------------------------------------------------------------
// One walk for every grouped reduction whose per-group results meet by atomics in any order (exact
// sums, minimum and maximum). A reduction R describes its part:
//   R::Lane                 a lane's running result over terms of one group (R::Lane{}: empty);
//   R::Partial              what lanes combine and flush: trivially copyable, whole 64-bit words;
//   add(Lane&, j)           element j into the lane's result;
//   partial(const Lane&)    the lane's result as a Partial; none() the empty one;
//   combine(Partial&, const Partial&)   exact and order-free (integer adds, min / max, or);
//   flush(const Partial&, group)        into the group's result in global memory, with atomics;
//   group_of(j, n)          element j's group.
// Where any lane's next element starts another group, the warp flushes together (flush_warp):
// lanes holding the same group combine their partials with shuffles and one lane flushes the
// total, so per tensor every warp adds one flush per span instead of 32 on the same words, and a
// row or block one per run. Past kMaxGroupsCombinedInAWarp groups among the lanes (columns walked
// down or few channels on the last axis, one group per lane; a group per element) each lane
// flushes its own.
// kLaneFlushes (POLYQUANT_CUDA_LANE_FLUSHES=1, for A/B benchmarks) keeps the walk without warp
// flushes: each lane flushes when its own group changes.
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kMaxGroupsCombinedInAWarp = 4;

// `p` of lane (this lane + offset), or this lane's own where that is past the warp.
template <class Partial>
__device__ Partial shuffle_down(const Partial& p, unsigned offset) {
  static_assert(std::is_trivially_copyable_v<Partial> && sizeof(Partial) % 8 == 0);
  struct Words {
    unsigned long long w[sizeof(Partial) / 8];
  };
  const Words in = std::bit_cast<Words>(p);
  Words out;
  for (std::size_t i = 0; i < sizeof(Partial) / 8; ++i) out.w[i] = __shfl_down_sync(kFullWarp, in.w[i], offset);
  return std::bit_cast<Partial>(out);
}

// Every lane's result (`group` -1: none) into its group's; called by the whole warp together.
template <class R>
__device__ void flush_warp(const R& r, const typename R::Lane& result, std::int64_t group) {
  using Partial = typename R::Partial;
  const unsigned holding = __ballot_sync(kFullWarp, group >= 0);
  if (holding == 0) return;
  const Partial own = group >= 0 ? r.partial(result) : R::none();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const unsigned alike = __match_any_sync(kFullWarp, group);  // the lanes holding this lane's group
  const bool first_of_group = group >= 0 && __ffs(alike) - 1 == lane;
  if (__popc(__ballot_sync(kFullWarp, first_of_group)) > kMaxGroupsCombinedInAWarp) {
    if (group >= 0) r.flush(own, group);
    return;
  }
  for (unsigned pending = holding; pending != 0;) {  // the same on every lane: the loop is warp-uniform
    const std::int64_t g = __shfl_sync(kFullWarp, group, __ffs(pending) - 1);
    const bool mine = group == g;
    Partial total = mine ? own : R::none();
    for (unsigned offset = 16; offset > 0; offset /= 2) R::combine(total, shuffle_down(total, offset));
    if (lane == 0) r.flush(total, g);  // lane 0's total is the warp's
    pending &= ~__ballot_sync(kFullWarp, mine);
  }
}

template <class R, bool kLaneFlushes>
__global__ void grouped_walk_kernel(R r, GroupedWalk w) {
  const std::int64_t thread = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t warp = thread / 32;
  const int lane = static_cast<int>(thread % 32);
  typename R::Lane result{};
  std::int64_t group = -1;
  // Element j (in_span: this lane has one at this step; every lane of the warp steps together).
  auto visit = [&](std::int64_t j, bool in_span) {
    if constexpr (kLaneFlushes) {
      if (!in_span) return;
      const std::int64_t g = r.group_of(j, w.n);
      if (g != group) {
        if (group >= 0) r.flush(r.partial(result), group);
        result = typename R::Lane{};
        group = g;
      }
      r.add(result, j);
    } else {
      // A lane without an element keeps its group and adds nothing.
      const std::int64_t g = in_span ? r.group_of(j, w.n) : group;
      if (__any_sync(kFullWarp, g != group)) {
        flush_warp(r, result, group);
        result = typename R::Lane{};
        group = g;
      }
      if (in_span) r.add(result, j);
    }
  };
  if (w.columns == 0) {
    const std::int64_t begin = warp * w.span;
    const std::int64_t end = begin + w.span < w.n ? begin + w.span : w.n;
    for (std::int64_t base = begin; base < end; base += w.lane_stride) {
      visit(base + lane, lane < w.lane_stride && base + lane < end);
    }
  } else {
    const std::int64_t rows = w.n / w.columns;
    const std::int64_t column = (warp % w.column_tiles) * 32 + lane;
    const std::int64_t first = (warp / w.column_tiles) * GroupedWalk::kRowsPerTile;
    const std::int64_t last = first + GroupedWalk::kRowsPerTile < rows ? first + GroupedWalk::kRowsPerTile : rows;
    for (std::int64_t row = first; row < last; ++row) visit(row * w.columns + column, column < w.columns);
  }
  if constexpr (kLaneFlushes) {
    if (group >= 0) r.flush(r.partial(result), group);
  } else {
    flush_warp(r, result, group);
  }
}

// Launches R's walk over `shape` (grouped by `group_strides` into `groups`) on `stream`.
template <class R>
int launch_grouped_walk(const R& r, int rank, const std::int64_t* shape, const std::int64_t* group_strides, std::int64_t groups,
                        cudaStream_t stream) {
  const GroupedWalk w = grouped_walk(rank, shape, group_strides, groups);
  if (w.n <= 0) return 0;
  static const bool lane_flushes = [] {
    const char* v = std::getenv("POLYQUANT_CUDA_LANE_FLUSHES");
    return v != nullptr && v[0] == '1';
  }();
  return launch_status([&] {
    if (lane_flushes) grouped_walk_kernel<R, true><<<w.blocks, GroupedWalk::kThreadsPerBlock, 0, stream>>>(r, w);
    else grouped_walk_kernel<R, false><<<w.blocks, GroupedWalk::kThreadsPerBlock, 0, stream>>>(r, w);
  });
}

// ---- exact group sums ---------------------------------------------------------------------------
// A lane sums exactly (ExactSumFloat32); partials are its normalized limbs, below 2^32 each, so 32
// of them add in int64 without overflow, and integer adds in any order and grouping give the same
// parts. A flush adds them limb-wise into the group's parts with 64-bit atomics (two's complement:
// a negative limb adds as its unsigned bits) and ORs the NaN / infinity flags.
struct ExactSumsWalk {
  PolyquantCudaExactSums s;
  using Lane = ExactSumFloat32;
  struct Partial {
    std::int64_t limbs[kPolyquantCudaExactLimbs];
    std::uint64_t flags;
  };
  __device__ std::int64_t group_of(std::int64_t j, std::int64_t n) const {
    return group_of_element(j, n, s.rank, s.shape, s.group_strides, s.groups);
  }
  __device__ void add(Lane& lane, std::int64_t j) const { lane.add(s.terms[j]); }
  __device__ static Partial none() { return Partial{}; }
  __device__ Partial partial(const Lane& lane) const {
    Partial p;
    p.flags = lane.to_parts(p.limbs);
    return p;
  }
  __device__ static void combine(Partial& a, const Partial& b) {
    for (int i = 0; i < kPolyquantCudaExactLimbs; ++i) {
      a.limbs[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(a.limbs[i]) + static_cast<std::uint64_t>(b.limbs[i]));
    }
    a.flags |= b.flags;
  }
  __device__ void flush(const Partial& p, std::int64_t group) const {
    std::int64_t* limbs = s.limbs + group * kPolyquantCudaExactLimbs;
    for (int i = 0; i < kPolyquantCudaExactLimbs; ++i) {
      if (p.limbs[i] != 0) atomicAdd(reinterpret_cast<unsigned long long*>(limbs + i), static_cast<unsigned long long>(p.limbs[i]));
    }
    if (p.flags != 0) atomicOr(reinterpret_cast<unsigned int*>(s.flags + group), static_cast<unsigned int>(p.flags));
  }
};

int exact_sums(const PolyquantCudaExactSums* s, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const auto groups = static_cast<std::size_t>(s->groups);
  cudaError_t e = cudaMemsetAsync(s->limbs, 0, groups * kPolyquantCudaExactLimbs * sizeof(std::int64_t), st);
  if (e == cudaSuccess) e = cudaMemsetAsync(s->flags, 0, groups * sizeof(std::uint32_t), st);
  if (e != cudaSuccess) return static_cast<int>(e);
  return launch_grouped_walk(ExactSumsWalk{*s}, s->rank, s->shape, s->group_strides, s->groups, st);
}

// ---- group minimum and maximum ----------------------------------------------------------------------
// A lane keeps its group's smallest and largest order keys and its flags; partials combine by
// min / max / or, and a flush is atomicMin / atomicMax / atomicOr.
struct MinMaxWalk {
  PolyquantCudaGroupMinMax m;
  struct Partial {
    std::uint64_t lo = ~std::uint64_t{0}, hi = 0, flags = 0;
  };
  using Lane = Partial;
  __device__ std::int64_t group_of(std::int64_t j, std::int64_t n) const {
    return group_of_element(j, n, m.rank, m.shape, m.group_strides, m.groups);
  }
  __device__ void add(Lane& lane, std::int64_t j) const {
    const double v = load_as_double(m.x, m.dtype, j);
    if (m.finite_only && !(v - v == 0.0)) return;  // NaN or an infinity: not a finite extreme
    if (v != v) {
      lane.flags |= kPolyquantCudaMinMaxNaN;
      return;
    }
    if (v == 0.0 && std::signbit(v)) lane.flags |= kPolyquantCudaMinMaxNegativeZero;
    const std::uint64_t k = polyquant_order_key(v);
    lane.lo = k < lane.lo ? k : lane.lo;
    lane.hi = k > lane.hi ? k : lane.hi;
  }
  __device__ static Partial none() { return Partial{}; }
  __device__ Partial partial(const Lane& lane) const { return lane; }
  __device__ static void combine(Partial& a, const Partial& b) {
    a.lo = b.lo < a.lo ? b.lo : a.lo;
    a.hi = b.hi > a.hi ? b.hi : a.hi;
    a.flags |= b.flags;
  }
  __device__ void flush(const Partial& p, std::int64_t group) const {
    std::uint64_t* keys = m.keys + 2 * group;
    if (p.lo != ~std::uint64_t{0}) atomicMin(reinterpret_cast<unsigned long long*>(keys), static_cast<unsigned long long>(p.lo));
    if (p.hi != 0) atomicMax(reinterpret_cast<unsigned long long*>(keys + 1), static_cast<unsigned long long>(p.hi));
    if (p.flags != 0) atomicOr(reinterpret_cast<unsigned int*>(m.flags + group), static_cast<unsigned int>(p.flags));
  }
};

int group_min_max(const PolyquantCudaGroupMinMax* m, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const auto groups = static_cast<std::size_t>(m->groups);
  // Keys interleaved {min, max}: all ones for every minimum, zero for every maximum.
  cudaError_t e = cudaMemset2DAsync(m->keys, 2 * sizeof(std::uint64_t), 0xFF, sizeof(std::uint64_t), groups, st);
  if (e == cudaSuccess) e = cudaMemset2DAsync(m->keys + 1, 2 * sizeof(std::uint64_t), 0, sizeof(std::uint64_t), groups, st);
  if (e == cudaSuccess) e = cudaMemsetAsync(m->flags, 0, groups * sizeof(std::uint32_t), st);
  if (e != cudaSuccess) return static_cast<int>(e);
  return launch_grouped_walk(MinMaxWalk{*m}, m->rank, m->shape, m->group_strides, m->groups, st);
}

// ---- group histograms ----------------------------------------------------------------------------
// Counts are integers, so the order of the adds is free. Where every group's slots fit in shared
// memory (the common case: one histogram, or a few channels of a few hundred bins), each block
// counts into its own copy with shared-memory atomics and adds it into the global counts once;
// otherwise every element's count is a global atomic add. Blocks walk the elements grid-stride,
// each thread reading kLoadsAhead elements ahead of the one it counts (row_layout.h).
constexpr int kHistogramThreads = 256;
constexpr std::int64_t kHistogramSharedSlots = 8192;  // 32 KiB of 32-bit counters

// Element j, whose bytes `bits` the thread read ahead (as load_as_double would read them).
__device__ void histogram_element(const PolyquantCudaGroupHistogram& h, std::int64_t j, std::int64_t n, std::uint64_t bits,
                                  unsigned int* shared, std::uint64_t* global) {
  const std::int64_t g = group_of_element(j, n, h.rank, h.shape, h.group_strides, h.groups);
  const PolyquantCudaHistogramBinning& b = h.binning[g];
  const HeldOperand<std::uint64_t> held(bits);
  const double v = load_as_double(held.bytes, h.dtype, 0);
  const std::int64_t base = g * (h.bins + 2);
  const std::int64_t slot = polyquant_histogram_slot(v, b);
  auto count = [&](std::int64_t i) {
    if (shared != nullptr) atomicAdd(shared + i, 1u);
    else atomicAdd(reinterpret_cast<unsigned long long*>(global + i), 1ull);
  };
  if (slot >= 0) count(base + slot);
  if (v < b.below) count(base + h.bins);
  if (v > b.above) count(base + h.bins + 1);
}

__global__ void group_histogram_kernel(PolyquantCudaGroupHistogram h, std::int64_t n, bool privatized) {
  extern __shared__ unsigned int block_counts[];
  const std::int64_t slots = h.groups * (h.bins + 2);
  if (privatized) {
    for (std::int64_t i = threadIdx.x; i < slots; i += blockDim.x) block_counts[i] = 0;
    __syncthreads();
  }
  // x read kLoadsAhead elements ahead (row_layout.h): its bytes, then counted as load_as_double
  // reads them.
  const auto size = static_cast<std::uint8_t>(element_size(h.dtype));
  grid_stride_reading_ahead<std::uint64_t>(
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, static_cast<std::int64_t>(gridDim.x) * blockDim.x, n,
      [&](std::int64_t j) { return read_global_operand_bits<std::uint64_t>(h.x, j, size); },
      [&](std::int64_t j, std::uint64_t bits) { histogram_element(h, j, n, bits, privatized ? block_counts : nullptr, h.counts); });
  if (privatized) {
    __syncthreads();
    for (std::int64_t i = threadIdx.x; i < slots; i += blockDim.x) {
      if (block_counts[i] != 0) atomicAdd(reinterpret_cast<unsigned long long*>(h.counts + i), static_cast<unsigned long long>(block_counts[i]));
    }
  }
}

int group_histogram(const PolyquantCudaGroupHistogram* h, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t slots = h->groups * (h->bins + 2);
  cudaError_t e = cudaMemsetAsync(h->counts, 0, static_cast<std::size_t>(slots) * sizeof(std::uint64_t), st);
  if (e != cudaSuccess) return static_cast<int>(e);
  std::int64_t n = 1;
  for (int d = 0; d < h->rank; ++d) n *= h->shape[d];
  if (n <= 0) return 0;
  // Enough blocks to fill the device a few times over; a block's 32-bit counters stay below 2^32
  // (each element adds at most 2 to a group's slots, and a block walks far fewer than 2^31).
  int device = 0, sms = 1;
  if ((e = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(e);
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return static_cast<int>(e);
  const std::int64_t wanted = (n + kHistogramThreads - 1) / kHistogramThreads;
  const std::int64_t most = static_cast<std::int64_t>(sms) * 8;
  const dim3 grid(static_cast<unsigned>(wanted < most ? wanted : most));
  const bool privatized = slots <= kHistogramSharedSlots;
  const std::size_t shared = privatized ? static_cast<std::size_t>(slots) * sizeof(unsigned int) : 0;
  return launch_status([&] { group_histogram_kernel<<<grid, kHistogramThreads, shared, st>>>(*h, n, privatized); });
}

PolyquantCudaBackend make_backend() {
  PolyquantCudaBackend b{};
  b.abi_version = POLYQUANT_CUDA_ABI_VERSION;
  b.num_kernel_ops = kNumKernelOps;
  b.num_work_types = kNumWorkTypes;
  b.row_args_size = sizeof(RowArgs);
  b.runtime_version = 0;
  cudaRuntimeGetVersion(&b.runtime_version);  // the linked runtime's version; needs no driver
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
#define POLYQUANT_CUDA_CALL_FILL(flavour, work) POLYQUANT_CUDA_FILL_FUNCTION(flavour, work)(b);
  POLYQUANT_CUDA_EVERY_PART(POLYQUANT_CUDA_CALL_FILL)
#undef POLYQUANT_CUDA_CALL_FILL
  return b;
}

}  // namespace
}  // namespace polyquant::detail::cuda

extern "C" __attribute__((visibility("default"))) const PolyquantCudaBackend* polyquant_cuda_backend_v1() {
  static const PolyquantCudaBackend backend = polyquant::detail::cuda::make_backend();
  return &backend;
}
