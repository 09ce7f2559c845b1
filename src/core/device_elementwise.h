// The elementwise engine on a device: the same calls as run_elementwise (core/elementwise.h), with
// operands and output in the memory of a CUDA device, run by the launchers of the CUDA backend
// (backends/cuda/backend_abi.h) on the calling thread's stream, without synchronising.
//
// A call becomes one launch of the op's per-element row over the whole output (RowArgs with device
// pointers), plus conversion launches only where an operand or the output cannot be used as it is:
//   - an operand of the output's layout, or one value (a broadcast), is read in place;
//   - a parameter that repeats along the leading dimensions (per channel, channels last) is read
//     as one repeated row (RowArgs::repeated_row_mask), one that holds one value per trailing block
//     (per channel on a leading axis, blockwise) as per-row values (RowArgs::per_row_mask): in
//     place when its elements are laid out so, else gathered into a compact temporary;
//   - anything else (another dtype than the kernel reads, a transposed or strided tensor) is
//     gathered and converted by the backend's conversion kernel (kernels/convert/element.h) into a
//     temporary of the size it needs;
//   - a 0-d operand in host memory (a Python scalar) travels inside the launch
//     (PolyquantCudaHostScalars): no allocation, no copy;
//   - an output of another dtype or layout, or one that overlaps an input other than in place, is
//     written to a temporary and converted into place.
// Temporaries are stream-ordered allocations (cudaMallocAsync), released on the stream after the
// launches that read them. Results are bit for bit those of the host engine: the same per-element
// row runs on the same operand values, and the conversions follow the same spec.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/elementwise.h"
#include "polyquant/tensor.h"

struct PolyquantCudaBackend;
struct PolyquantCudaHistogramBinning;

namespace polyquant::detail {

// An input, or any tensor (outputs too), with the parameter name error messages use.
using NamedView = std::pair<const TensorView*, const char*>;
using NamedLayout = std::pair<const Layout*, const char*>;

// The device an op runs on: the device of its operands and output. Host memory everywhere: the
// CPU. Every operand on one CUDA device, except 0-d host operands (scalars), which may join it:
// that device. Anything else throws Error naming the parameters and their devices, and so does a
// pointer labelled as a device's that is not its memory. `out` may be null (ops that have not been
// given their output yet).
Device op_device(std::span<const NamedView> operands, const MutableTensorView* out, const char* op);

// For ops that run on the host only: throws Error naming `op` and the first operand on a device.
void require_host(std::span<const NamedLayout> operands, const char* op, const char* why = nullptr);
void require_host(std::span<const NamedView> operands, const char* op, const char* why = nullptr);

// The backend that runs device ops: the loaded CUDA library (core/cuda_backend.h), or the table a
// test installed. Throws Error naming `device` and the reason when it is unavailable.
const PolyquantCudaBackend& device_backend(const Device& device);

// For tests: runs device ops on `table` (a host stand-in for the CUDA library) instead of the
// loaded library; nullptr restores the library. Not to be called while an op runs.
void set_device_backend_for_testing(const PolyquantCudaBackend* table);

// run_elementwise of a call whose output lives on `device` (op_device's rules).
void run_elementwise_on_device(const ElementwiseCall& call, const Device& device);

// convert_into (core/elementwise.h) for an output on a device: `from` (on that device, or in host
// memory: staged and copied over) broadcast to out's shape and converted by the backend's
// conversion kernel.
void convert_into_on_device(const TensorView& from, const MutableTensorView& out);

// Device memory polyquant owns, for results whose framework cannot allocate one (JAX arrays are
// immutable): `bytes` on `device`, ordered on this thread's current stream; released by
// release_device_memory after all work on the device (it may run from any thread, any time).
void* allocate_device_memory(const Device& device, std::size_t bytes);
void release_device_memory(const Device& device, void* pointer) noexcept;
// Stream `waiting` on `device` ordered after the work queued on `producer` so far (no host wait).
void order_stream_after(const Device& device, void* waiting, void* producer);

// Stream-ordered device memory for a call's intermediate values (a family's per-element terms):
// `bytes` on `device`, released on the calling thread's current stream when the object goes, so
// after the launches queued before that.
class DeviceScratch {
 public:
  DeviceScratch(const Device& device, std::size_t bytes);
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* data() const { return pointer_; }

 private:
  const PolyquantCudaBackend* backend_;
  Device device_;
  void* pointer_ = nullptr;
};

// The exact sums of float32 terms per group on `device`, each rounded once to float32 as the
// host's ExactSums::to_float rounds the same exact value (core/exact_sums.h), so the host's bits:
// `terms` is device memory, contiguous over `shape`, and term j (C order) belongs to group
// sum_d i_d * group_strides[d], in [0, groups). The backend adds exact parts with integer atomics
// (backend_abi.h, PolyquantCudaExactSums); this waits for the stream to read them back.
std::vector<float> exact_group_sums_on_device(const Device& device, const float* terms, const Dims& shape,
                                              const Dims& group_strides, std::int64_t groups);
// The same exact sums, each rounded once to float64 instead (a caller that bounds what other
// summation orders would give: QKeras' least-squares rounds, scale_search.h).
std::vector<double> exact_group_sums_on_device_as_double(const Device& device, const float* terms, const Dims& shape,
                                                         const Dims& group_strides, std::int64_t groups);

// Per-group minimum and maximum of a float16 / bfloat16 / float32 / float64 tensor on a device (any
// strides: a non-contiguous one is gathered first), by order-key atomics (backend_abi.h,
// PolyquantCudaGroupMinMax): element j of x in C order belongs to group
// sum_d i_d * group_strides[d] over the C-order `shape` (x's elements, regrouped; rank up to
// 2 kMaxRank). Waits for the stream. min / max are the values as float64 (+inf / -inf for a group
// of NaNs only); `nan` and `negative_zero` say whether the group holds a NaN or a -0.0, which the
// keys leave to the caller (which NaN, the sign of a zero the reference's order picks).
// `finite_only`: NaN and infinite elements are skipped (min / max of the finite ones; +inf / -inf
// for a group without any).
struct GroupMinMax {
  std::vector<double> min, max;
  std::vector<std::uint8_t> nan, negative_zero;
};
GroupMinMax group_min_max_on_device(const TensorView& x, int rank, const std::int64_t* shape,
                                    const std::int64_t* group_strides, std::int64_t groups, bool finite_only = false);

// Per-group torch.histc counts of a float16 / bfloat16 / float32 / float64 tensor on a device (any
// strides), grouped as group_min_max_on_device groups, group g binned by binning[g]
// (backend_abi.h, PolyquantCudaGroupHistogram; bins <= kHistcMaxCountingBins). Waits for the
// stream. Returns groups * (bins + 2) counts: group g's bins, then its values below and above the
// thresholds. Integer counts, so the host's counts of the same values.
std::vector<std::uint64_t> group_histogram_on_device(const TensorView& x, int rank, const std::int64_t* shape,
                                                     const std::int64_t* group_strides, std::int64_t groups, std::int64_t bins,
                                                     std::span<const PolyquantCudaHistogramBinning> binning);

// Element `index` (flat, row-major) of a view on a device, copied to the host: the copy waits for
// the stream, so a parameter that decides the kernel (a bit width) can be read like a host one.
double read_device_element_as_double(const TensorView& view, std::int64_t index);
// The same element's bytes (dtype_size(view.dtype) of them) into `value`.
void copy_device_element_to_host(const TensorView& view, std::int64_t index, void* value);

// A view the host can read: `view` itself in host memory, else a C-contiguous copy of it in
// `storage` (waits for the stream). For parameters whose values a family checks on the host.
TensorView host_readable(const TensorView& view, std::vector<unsigned char>& storage);

}  // namespace polyquant::detail
