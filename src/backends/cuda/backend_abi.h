// The C ABI between polyquant's core and the separately loaded CUDA library libpolyquant_cuda.so
// (core/cuda_backend.cc loads it with dlopen; backends/cuda/backend.cu defines it). The library
// exports one symbol, polyquant_cuda_backend_v1, returning a PolyquantCudaBackend: plain C types
// only, so no CUDA header reaches the core or any public header, and a machine without the CUDA
// driver still loads the core (the library links the CUDA runtime statically and needs only the
// driver, libcuda, when a device is actually queried or used).
//
// The launcher table is indexed by KernelOp and WorkType (kernels/ops.h): both sides are compiled
// from the same ops.inc, and the core refuses a library whose abi_version, op count, work-type
// count or RowArgs size differ from its own (a library from another build).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/exact_sum.h"
#include "core/histogram.h"
#include "kernels/ops.h"
#include "kernels/row.h"
#include "polyquant/tensor.h"

// Bumped whenever PolyquantCudaBackend, RowArgs' meaning or a launcher's contract changes.
// v5: AffineGradParams (a launcher's params) gained scale_blocks and offset_blocks, host-only pointers (null on a device).
// v6: AffineGradParams gained scale_columns and offset_columns (host-only, null on a device);
//     release_now waits for the device's work; order_after.
// v7: RowArgs gained in_bytes (operand element sizes: per-row and repeated-row operands resolved per thread).
#define POLYQUANT_CUDA_ABI_VERSION 7u
#define POLYQUANT_CUDA_ENTRY_POINT "polyquant_cuda_backend_v1"

// The function of row_kernels.cu's build for a flavour (ieee, flushing) and a working precision
// (kF16, kF32, kF64) that fills its part of the table.
#define POLYQUANT_CUDA_FILL_FUNCTION(flavour, work) POLYQUANT_CUDA_FILL_FUNCTION_(flavour, work)
#define POLYQUANT_CUDA_FILL_FUNCTION_(flavour, work) fill_row_launchers_##flavour##_##work

extern "C" {

// Operand values that travel inside a launch instead of in device memory: a broadcast operand
// held on the host (a Python scalar, a 0-d host array beside device tensors), already converted to
// the dtype the kernel reads. Bit i of `mask` set: operand i is value[i] (its first bytes; the
// engine marks it broadcast in RowArgs), and RowArgs::in[i] is ignored. No allocation, no copy, no
// synchronisation.
struct PolyquantCudaHostScalars {
  std::uint32_t mask;
  std::uint64_t value[polyquant::detail::kMaxOperands];  // the bytes of one element, at the start
};

// Runs one row (RowArgs with device pointers: in[i], out) on the current device, asynchronously on
// `stream` (a cudaStream_t; nullptr: the legacy default stream). `params` is a host pointer to the
// op's parameter struct (RowElementTraits<op>::Params) and `scalars` (nullable) host values of
// broadcast operands, both copied into the launch. Returns 0, or the cudaError_t of the failed
// launch (PolyquantCudaBackend::error_string names it).
typedef int (*PolyquantCudaLaunch)(const void* params, const polyquant::detail::RowArgs* args,
                                   const PolyquantCudaHostScalars* scalars, void* stream);

// A strided copy with dtype conversion (kernels/convert/element.h, convert_element): element
// (i_0, ..., i_{rank-1}) of `src` (dtype src_dtype, strides in elements, any sign, 0 allowed) into
// the same element of `dst`. Every element is written once (dst has no zero stride); src and dst
// do not overlap. rank 0 is one element.
struct PolyquantCudaConvert {
  const void* src;
  void* dst;
  polyquant::DType src_dtype;
  polyquant::DType dst_dtype;
  int rank;
  std::int64_t shape[polyquant::kMaxRank];
  std::int64_t src_strides[polyquant::kMaxRank];
  std::int64_t dst_strides[polyquant::kMaxRank];
};

// Exact sums of float32 terms per group (core/exact_sum.h, ExactSumFloat32): term j (C order over
// `shape`, contiguous) belongs to group sum_d i_d * group_strides[d]. The library zeroes `limbs`
// (groups * kPolyquantCudaExactLimbs int64 values) and `flags` (groups), then adds every term's
// exact value into its group's parts (ExactSum::to_parts: limb-wise integer adds, so any order and
// any split between threads give the same parts); the host rounds them once
// (ExactSum::from_parts). Every group must receive fewer than 2^31 partial sums (the library
// flushes one per run of terms of a group a thread walks).
inline constexpr int kPolyquantCudaExactLimbs = polyquant::detail::ExactSumFloat32::kLimbCount;
struct PolyquantCudaExactSums {
  const float* terms;
  int rank;
  std::int64_t shape[polyquant::kMaxRank];
  std::int64_t group_strides[polyquant::kMaxRank];
  std::int64_t groups;
  std::int64_t* limbs;
  std::uint32_t* flags;
};

// Per-group minimum and maximum of x (float16, bfloat16, float32 or float64, contiguous, C order over
// `shape`): element j belongs to group sum_d i_d * group_strides[d]. The library sets keys[2 g]
// (the minimum's) to all ones, keys[2 g + 1] (the maximum's) and flags[g] to zero, then folds every
// element in with integer atomics on its order key (polyquant_order_key: unsigned order is value
// order, -0.0 just below +0.0), so any schedule gives the same keys; a NaN sets flag 1 and leaves
// the keys, a -0.0 sets flag 2. The host decodes (polyquant_from_order_key) and decides what the
// keys cannot tell (which NaN, the sign of a zero where the reference's order picks it). With
// `finite_only` set, NaN and infinite elements are skipped (no key, no flag): the finite extremes.
inline constexpr int kPolyquantCudaMaxGroupedRank = 2 * polyquant::kMaxRank;
inline constexpr std::uint32_t kPolyquantCudaMinMaxNaN = 1, kPolyquantCudaMinMaxNegativeZero = 2;
struct PolyquantCudaGroupMinMax {
  const void* x;
  polyquant::DType dtype;
  int rank;
  std::int64_t shape[kPolyquantCudaMaxGroupedRank];
  std::int64_t group_strides[kPolyquantCudaMaxGroupedRank];
  std::int64_t groups;
  std::uint64_t* keys;
  std::uint32_t* flags;
  int finite_only;
};

// Per-group torch.histc counts of x (float16, bfloat16, float32 or float64, contiguous, C order over
// `shape`; element j in group sum_d i_d * group_strides[d]), each group over its own range:
// binning[g] (device memory) holds group g's histc_bin_of parameters (core/histogram.h; `outside`
// is bins) and the two thresholds `below` / `above` (values of x's dtype, as float64). The library
// zeroes `counts` (groups * (bins + 2) values, device memory), then for every element v adds one to
// counts[g (bins + 2) + histc_bin_of(float32(v))] unless the value is outside, to slot bins when
// v < below and to slot bins + 1 when v > above (compared as float64). Integer counts: any order
// and any split give the same counts.
struct PolyquantCudaHistogramBinning {
  polyquant::detail::HistcBins bins;
  double below, above;
};
struct PolyquantCudaGroupHistogram {
  const void* x;
  polyquant::DType dtype;
  int rank;
  std::int64_t shape[kPolyquantCudaMaxGroupedRank];
  std::int64_t group_strides[kPolyquantCudaMaxGroupedRank];
  std::int64_t groups;
  std::int64_t bins;  // at most polyquant::detail::kHistcMaxCountingBins
  const PolyquantCudaHistogramBinning* binning;
  std::uint64_t* counts;
};
// Group g's slot of element value v in PolyquantCudaGroupHistogram's counts, or -1 for none
// (outside the range); below / above say whether v also counts in slots bins and bins + 1.
POLYQUANT_HD inline std::int64_t polyquant_histogram_slot(double v, const PolyquantCudaHistogramBinning& b) {
  const std::int32_t k = polyquant::detail::histc_bin_of(static_cast<float>(v), b.bins);
  return k == b.bins.outside ? -1 : k;
}
// The group of element j (C order over `shape`) of a grouped reduction: sum_d i_d * group_strides[d].
POLYQUANT_HD inline std::int64_t polyquant_group_of(std::int64_t j, int rank, const std::int64_t* shape,
                                                    const std::int64_t* group_strides) {
  std::int64_t g = 0;
  for (int d = rank - 1; d >= 0; --d) {
    g += (j % shape[d]) * group_strides[d];
    j /= shape[d];
  }
  return g;
}
POLYQUANT_HD inline std::uint64_t polyquant_order_key(double v) {
  const auto b = std::bit_cast<std::uint64_t>(v);
  return (b >> 63) != 0 ? ~b : (b | (std::uint64_t{1} << 63));
}
POLYQUANT_HD inline double polyquant_from_order_key(std::uint64_t k) {
  return std::bit_cast<double>((k >> 63) != 0 ? (k & ~(std::uint64_t{1} << 63)) : ~k);
}

struct PolyquantCudaBackend {
  std::uint32_t abi_version;     // POLYQUANT_CUDA_ABI_VERSION the library was built with
  std::uint32_t num_kernel_ops;  // kNumKernelOps of its ops.inc
  std::uint32_t num_work_types;  // kNumWorkTypes
  std::uint32_t row_args_size;   // sizeof(RowArgs)
  // The CUDA runtime the library links (cudaRuntimeGetVersion: 1000 * major + 10 * minor).
  int runtime_version;
  // Number of CUDA devices, or -1 when the driver is missing or fails (no driver installed, driver
  // too old for the runtime, no device node): then `reason` holds CUDA's error name and string.
  // 0 devices is not an error (reason: "no CUDA device"). Never aborts.
  int (*device_count)(char* reason, std::size_t reason_size);
  // The name and compute capability of device `device` ("NVIDIA H100 80GB HBM3 (sm_90)"); returns
  // 0, or a cudaError_t (and the error's text in `name`).
  int (*device_description)(int device, char* name, std::size_t name_size);
  // The text of a cudaError_t a launcher or query returned.
  const char* (*error_string)(int error);
  // The calling thread's current device (cudaGetDevice) and a switch to another (cudaSetDevice).
  int (*get_device)(int* device);
  int (*set_device)(int device);
  // Where `pointer` lives: *device = the CUDA device of device (or managed) memory, -1 for host
  // memory the device cannot address as its own (cudaPointerGetAttributes).
  int (*pointer_device)(const void* pointer, int* device);
  // Stream-ordered device memory on the current device (cudaMallocAsync / cudaFreeAsync): the
  // engine's temporaries, freed on the stream after the launches that use them.
  int (*allocate)(void** pointer, std::size_t bytes, void* stream);
  int (*release)(void* pointer, void* stream);
  // Memory handed to another owner, freed by its deleter at a time no stream orders:
  // cudaDeviceSynchronize (the current device), then cudaFree. cudaFree alone does not wait for
  // work still queued on memory from cudaMallocAsync, which could then be handed out again while
  // a kernel still writes it.
  int (*release_now)(void* pointer);
  // Work queued on stream `waiting` from now on runs after the work queued on `producer` so far
  // (an event recorded on `producer`, waited for on `waiting`), the host not waiting: DLPack's
  // stream protocol for an output polyquant owns, whose consumer names its stream. Streams as
  // cudaStream_t values; 1 and 2 are the legacy and per-thread default streams, as in DLPack.
  int (*order_after)(void* waiting, void* producer);
  // cudaMemcpyAsync with cudaMemcpyDefault (unified addressing: any direction), then, when
  // `wait` is set, cudaStreamSynchronize: a host reading device values (a bit width that decides
  // the kernel) waits for the copy.
  int (*copy)(void* dst, const void* src, std::size_t bytes, void* stream, int wait);
  // Runs a PolyquantCudaConvert asynchronously on `stream`.
  int (*convert)(const PolyquantCudaConvert* c, void* stream);
  // Runs a PolyquantCudaExactSums asynchronously on `stream`.
  int (*exact_sums)(const PolyquantCudaExactSums* s, void* stream);
  // Runs a PolyquantCudaGroupMinMax asynchronously on `stream`.
  int (*group_min_max)(const PolyquantCudaGroupMinMax* m, void* stream);
  // Runs a PolyquantCudaGroupHistogram asynchronously on `stream`.
  int (*group_histogram)(const PolyquantCudaGroupHistogram* h, void* stream);
  // launch[op][work]: the launcher of an op's per-element row in a working precision, nullptr
  // where there is none (the ops without a per-element row, RowElementTraits, and the working
  // precisions ops.inc does not list for the op).
  PolyquantCudaLaunch launch[polyquant::detail::kNumKernelOps][polyquant::detail::kNumWorkTypes];
};

// The one exported symbol: the library's table (static storage, valid while it stays loaded).
typedef const PolyquantCudaBackend* (*PolyquantCudaEntryPoint)();

}  // extern "C"
