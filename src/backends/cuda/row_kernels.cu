// The CUDA kernels of every op with a per-element row, generated from the op list (kernels/ops.inc):
// for each op and each working precision ops.inc lists, one __global__ kernel per rounding mode (ops
// whose parameters carry a RoundingMode `mode`) or one kernel (the others), each a grid-stride loop
// over j calling the op's <name>_row_element, the very function the CPU scalar reference row loops
// over (families/<family>/kernels.h): CPU and GPU compile one spec, never a copy. Next to each
// kernel, a host launcher with the table's signature (backend_abi.h).
//
// Ops without a per-element row (RowElementTraits unspecialised: the grouped reductions group_max,
// product_sums, group_min_max and exact_sums, and convert) have no CUDA kernel yet; their table entries stay
// null.
//
// This file is compiled once per flavour and working precision (backends/cuda/CMakeLists.txt).
// Flavour, because flushing denormals is a compile-time property of device code: the `flushing`
// build (POLYQUANT_CUDA_FLUSH_DENORMALS=1, nvcc -ftz=true) holds the ops whose reference row runs
// under ScopedFlushDenormals (RowElementTraits::kFlushDenormals: QKeras, TensorFlow's FTZ / DAZ),
// the `ieee` build (0, -ftz=false) every other op. Working precision (POLYQUANT_CUDA_WORK), so the
// builds run in parallel. All use -fmad=false, -prec-div=true and -prec-sqrt=true (IEEE division
// and square root) and never fast math.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "backends/cuda/backend_abi.h"
#include "backends/cuda/launch_status.cuh"
#include "backends/cuda/row_elements.cuh"
#include "backends/cuda/row_layout.h"
#include "core/floor_log2.h"

#if !defined(POLYQUANT_CUDA_FLUSH_DENORMALS) || !defined(POLYQUANT_CUDA_FLAVOUR) || !defined(POLYQUANT_CUDA_WORK)
#error "compile with -DPOLYQUANT_CUDA_FLUSH_DENORMALS=0 -DPOLYQUANT_CUDA_FLAVOUR=ieee (nvcc -ftz=false) or =1 and flushing (-ftz=true), and -DPOLYQUANT_CUDA_WORK=kF16|kF32|kF64"
#endif

// This unit's device copy of FloatQuant's floor(log2) table (core/floor_log2.h).
POLYQUANT_DEFINE_FLOOR_LOG2_TABLE()

namespace polyquant::detail::cuda {
// The build's own namespace as well (core/target.h): nvcc names this file's anonymous namespace
// after the file, the same in all six builds, and its non-template functions would collide.
inline namespace POLYQUANT_TARGET_NAMESPACE {
namespace {

// The unique id of the calling thread's current CUDA context (the driver's cuCtxGetId, driver 12.0
// and later, reached through the runtime's entry-point query so the library links no driver
// symbol), or 0 where there is none yet or the driver cannot say. A device reset destroys the
// device's primary context and, with it, every __constant__ the module filled; the context that
// follows has a new id.
unsigned long long current_context_id() {
  using GetCurrent = int (*)(void** context);                         // CUresult cuCtxGetCurrent(CUcontext*)
  using GetId = int (*)(void* context, unsigned long long* id);       // CUresult cuCtxGetId(CUcontext, unsigned long long*)
  static const std::pair<GetCurrent, GetId> driver = [] {
    void* get_current = nullptr;
    void* get_id = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get_current, 4000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      get_current = nullptr;
    }
    found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetId", &get_id, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      get_id = nullptr;
    }
    return std::pair{reinterpret_cast<GetCurrent>(get_current), reinterpret_cast<GetId>(get_id)};
  }();
  if (driver.first == nullptr || driver.second == nullptr) return 0;
  void* context = nullptr;
  unsigned long long id = 0;
  if (driver.first(&context) != 0 || context == nullptr || driver.second(context, &id) != 0) return 0;
  return id;
}

// Fills this unit's device copy of the floor(log2) table on the current device, measured on the
// host from the C library the CPU reference calls, in this process. Once per context: each device
// remembers the id of the context it was filled in (current_context_id), so a device reset, which
// empties the table, fills it again on the next launch. Where the driver gives no id, once per
// device, as before the ids (a reset then leaves the table empty: docs/cuda.md).
[[maybe_unused]] int upload_floor_log2_table() {
  static const FloorLog2RoundUp measured = measure_floor_log2_round_up();
  constexpr unsigned long long kNoContextId = ~0ull;  // filled where the driver gave no id
  static std::mutex mutex;
  static unsigned long long filled_in[256] = {};  // 0: not filled
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return static_cast<int>(e);
  const bool tracked = device >= 0 && device < 256;
  const std::lock_guard<std::mutex> lock(mutex);
  if (tracked && filled_in[device] != 0) {
    const unsigned long long id = current_context_id();
    if (filled_in[device] == (id != 0 ? id : kNoContextId)) return 0;
  }
  e = cudaMemcpyToSymbol(floor_log2_round_up_on_device, &measured, sizeof measured);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();  // once: the copy is complete before any launch reads it
  if (e == cudaSuccess && tracked) {
    const unsigned long long id = current_context_id();  // the copy made the primary context current
    filled_in[device] = id != 0 ? id : kNoContextId;
  }
  return static_cast<int>(e);
}

// Output elements [0, a.n) of one row; `p` and `a` arrive by value in the kernel's parameter space.
// Element j is independent of every other, so any thread order gives the CPU's bits.
// Operands passed by value (PolyquantCudaHostScalars) are read where the launch parameters lie:
// __grid_constant__ lets a thread take their address without a copy of its own (a plain parameter
// whose address is taken is copied to every thread's local memory at entry, 72 bytes, on every
// launch, whether or not any operand is passed that way).
// kLayout (row_layout.h) fixes the masks the launch's layout makes constant, resolves its per-row
// and repeated-row operands once per thread, and reads x ahead (run_row_thread, which the host
// stand-in runs too).
template <class Row, class T, RoundingMode kMode, class P, RowLayout kLayout>
__global__ void row_kernel(P p, RowArgs a, const __grid_constant__ PolyquantCudaHostScalars scalars) {
  if (scalars.mask != 0) {
    for (int i = 0; i < kMaxOperands; ++i) {
      if ((scalars.mask >> i) & 1u) a.in[static_cast<std::size_t>(i)] = &scalars.value[i];
    }
  }
  run_row_thread<Row, T, kMode, kLayout>(p, a, static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                                         static_cast<std::int64_t>(blockDim.x) * gridDim.x);
}

// The blocks of kKernel, launched with `threads` threads each, that the current device holds at once
// (its multiprocessors times the kernel's occupancy on one), measured once per device; 0 where the
// runtime cannot say.
template <auto kKernel>
std::int64_t resident_blocks(int threads) {
  static std::atomic<int> per_device[256] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 256) return 0;
  int blocks = per_device[device].load(std::memory_order_relaxed);
  if (blocks == 0) {
    int multiprocessors = 0, per_multiprocessor = 0;
    if (cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kKernel, threads, 0) != cudaSuccess) {
      return 0;
    }
    blocks = multiprocessors * per_multiprocessor;
    per_device[device].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

template <KernelOp kOp, class Row, WorkType kWork>
int launch_row(const void* params, const RowArgs* args, const PolyquantCudaHostScalars* scalars, void* stream) {
  constexpr int kThreadsPerBlock = 256;
  constexpr std::int64_t kMaxBlocks = 65536;  // fills an H100 many times over; longer rows loop (grid-stride)
  using P = typename RowElementTraits<kOp>::Params;
  using T = WorkT<kWork>;
  const P& p = *static_cast<const P*>(params);
  const RowArgs& a = *args;
  if (a.n <= 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  if constexpr (kOp == KernelOp::kFloatQuant) {
    if (const int e = upload_floor_log2_table(); e != 0) return e;
  }
  const PolyquantCudaHostScalars by_value = scalars != nullptr ? *scalars : PolyquantCudaHostScalars{};
  // POLYQUANT_CUDA_GENERAL_ROWS=1 keeps every launch on the general kernel (A/B benchmarks).
  static const bool general_only = [] {
    const char* v = std::getenv("POLYQUANT_CUDA_GENERAL_ROWS");
    return v != nullptr && v[0] == '1';
  }();
  const RowLayout layout = general_only ? RowLayout::kGeneral : row_layout_of(a, by_value.mask, sizeof(HeldBits<T>), Row::kSecondStream);
  const std::int64_t wanted = (a.n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const dim3 grid(static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks));
  return launch_status([&] {
    with_mode_of(p, [&]<RoundingMode kMode>() {
      // The kernels that read ahead (kFirstStreams, kRowsResolved) get as many blocks as the device
      // holds at once, or kMaxBlocks where the runtime cannot say: each thread then loops over the
      // most elements, so its work before the loop (the reads ahead, the parameters, the cursor's
      // two divisions) is spread over hundreds of elements, and no block waits for a slot.
      const auto launch_resident = [&]<RowLayout kLayout>() {
        constexpr auto kernel = &row_kernel<Row, T, kMode, P, kLayout>;
        const std::int64_t resident = resident_blocks<kernel>(kThreadsPerBlock);
        const std::int64_t most = resident > 0 ? resident : kMaxBlocks;
        kernel<<<dim3(static_cast<unsigned>(wanted < most ? wanted : most)), kThreadsPerBlock, 0, s>>>(p, a, by_value);
      };
      switch (layout) {
        case RowLayout::kFirstStreams:
          launch_resident.template operator()<RowLayout::kFirstStreams>();
          break;
        case RowLayout::kRowsResolved:
          launch_resident.template operator()<RowLayout::kRowsResolved>();
          break;
        case RowLayout::kNoRowOperands:  // not instantiated: rare layouts, and it would add a third of the build
        case RowLayout::kGeneral:
          row_kernel<Row, T, kMode, P, RowLayout::kGeneral><<<grid, kThreadsPerBlock, 0, s>>>(p, a, by_value);
          break;
      }
    });
  });
}

}  // namespace
}  // namespace POLYQUANT_TARGET_NAMESPACE

// Fills the table entries this build holds: the ops of its flavour (see the file comment) in its
// working precision, POLYQUANT_CUDA_WORK.
void POLYQUANT_CUDA_FILL_FUNCTION(POLYQUANT_CUDA_FLAVOUR, POLYQUANT_CUDA_WORK)(PolyquantCudaBackend& table) {
  constexpr bool kFlushing = POLYQUANT_CUDA_FLUSH_DENORMALS != 0;
  constexpr WorkType kWork = WorkType::POLYQUANT_CUDA_WORK;
#define POLYQUANT_CUDA_LAUNCHER(Enum, name, work, W)                                                        \
  if constexpr (WorkType::W == kWork && kHasRowElement<KernelOp::Enum> &&                                   \
                kRowElementFlushesDenormals<KernelOp::Enum> == kFlushing) {                                 \
    table.launch[static_cast<int>(KernelOp::Enum)][static_cast<int>(WorkType::W)] =                        \
        &launch_row<KernelOp::Enum, name##_row, WorkType::W>;                                               \
  }
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_CUDA_LAUNCHER, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#undef POLYQUANT_CUDA_LAUNCHER
}

}  // namespace polyquant::detail::cuda
