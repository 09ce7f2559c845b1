// The elementwise engine on a device (see device_elementwise.h).
#include "core/device_elementwise.h"

#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <optional>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "core/cuda_backend.h"
#include "core/elementwise_plan.h"
#include "kernels/convert/element.h"
#include "polyquant/error.h"
#include "polyquant/runtime.h"

namespace polyquant {

namespace {
thread_local void* g_current_stream = nullptr;
}  // namespace

ScopedStream::ScopedStream(void* cuda_stream) : previous_(g_current_stream) { g_current_stream = cuda_stream; }
ScopedStream::~ScopedStream() { g_current_stream = previous_; }
void* current_stream() { return g_current_stream; }

void* allocate_device_memory(Device device, std::size_t bytes) { return detail::allocate_device_memory(device, bytes); }
void free_device_memory(Device device, void* pointer) noexcept { detail::release_device_memory(device, pointer); }
void order_stream_after(Device device, void* waiting, void* producer) { detail::order_stream_after(device, waiting, producer); }

namespace detail {
namespace {

std::atomic<const PolyquantCudaBackend*> g_test_backend{nullptr};

bool is_scalar_on_host(const Layout& v) { return v.device.is_cpu() && v.shape.rank == 0; }

[[noreturn]] void fail(const PolyquantCudaBackend& b, int error, const std::string& what) {
  throw Error(ErrorKind::kRuntime, "CUDA backend: " + what + " failed: " + b.error_string(error) + " (error " +
                                       std::to_string(error) + ")");
}

void check(const PolyquantCudaBackend& b, int error, const char* what) {
  if (error != 0) fail(b, error, what);
}

// Makes `index` the calling thread's current device for the scope (the launches, allocations and
// copies of an op run on the device its tensors live on), then restores the caller's.
class DeviceSelection {
 public:
  DeviceSelection(const PolyquantCudaBackend& b, int index) : b_(b) {
    check(b, b.get_device(&previous_), "cudaGetDevice");
    if (previous_ != index) check(b, b.set_device(index), "cudaSetDevice");
  }
  ~DeviceSelection() {
    int now = previous_;
    if (b_.get_device(&now) == 0 && now != previous_) b_.set_device(previous_);
  }
  DeviceSelection(const DeviceSelection&) = delete;
  DeviceSelection& operator=(const DeviceSelection&) = delete;

 private:
  const PolyquantCudaBackend& b_;
  int previous_ = 0;
};

// Stream-ordered temporaries of one call, released on the stream when the call returns (after
// every launch that reads them was queued), or when it throws.
class Temporaries {
 public:
  Temporaries(const PolyquantCudaBackend& b, void* stream) : b_(b), stream_(stream) {}
  ~Temporaries() {
    for (void* p : blocks_) b_.release(p, stream_);
  }
  Temporaries(const Temporaries&) = delete;
  Temporaries& operator=(const Temporaries&) = delete;
  void* allocate(std::int64_t count, DType dtype) {
    void* p = nullptr;
    const auto bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
    check(b_, b_.allocate(&p, bytes > 0 ? bytes : 1, stream_), "cudaMallocAsync");
    blocks_.push_back(p);
    return p;
  }

 private:
  const PolyquantCudaBackend& b_;
  void* stream_;
  std::vector<void*> blocks_;
};

// The backend's conversion kernel over a strided block of `rank` dimensions.
void convert_on_device(const PolyquantCudaBackend& b, void* stream, const void* src, DType src_dtype, void* dst,
                       DType dst_dtype, int rank, const std::int64_t* shape, const std::int64_t* src_strides,
                       const std::int64_t* dst_strides) {
  if (src_dtype != dst_dtype && !is_conversion_target(dst_dtype)) {
    throw Error(ErrorKind::kType, std::string("internal: the engine cannot convert ") + dtype_name(src_dtype) + " to " +
                                      dtype_name(dst_dtype));
  }
  PolyquantCudaConvert c{};
  c.src = src;
  c.dst = dst;
  c.src_dtype = src_dtype;
  c.dst_dtype = dst_dtype;
  c.rank = rank;
  for (int d = 0; d < rank; ++d) {
    c.shape[d] = shape[d];
    c.src_strides[d] = src_strides[d];
    c.dst_strides[d] = dst_strides[d];
  }
  check(b, b.convert(&c, stream), "the conversion kernel");
}

// How the launch reads one operand (see device_elementwise.h).
enum class Read { kInPlace, kBroadcast, kRepeatedRow, kPerRow, kGatherAll, kHostScalar };

struct OperandRead {
  Read read = Read::kInPlace;
  bool gathered = false;      // copied (and converted) into a temporary first
  std::int64_t count = 0;     // elements of that temporary
};

// The row split `d` of the coalesced shape: rows of R = shape[d] * ... * shape[rank - 1] elements,
// O = total / R of them. d == rank: no split (every operand is read in place, broadcast or
// gathered whole).
struct Split {
  int d = 0;
  std::int64_t row = 1, rows = 1;
};

OperandRead classify(const ElementwiseCall& call, const Plan& plan, const std::int64_t* cs, std::int64_t total,
                     const Split& split, int k) {
  const TensorView& v = call.inputs[static_cast<std::size_t>(k)];
  const std::int64_t* st = plan.in_strides[k];
  const int r = plan.rank;
  const bool same = v.dtype == call.kernel_dtypes[static_cast<std::size_t>(k)];
  if (is_scalar_on_host(v)) return {Read::kHostScalar, false, 0};
  bool all_zero = true, all_contiguous = true, prefix_zero = true, suffix_zero = true, suffix_contiguous = true,
       prefix_contiguous = true;
  for (int d = 0; d < r; ++d) {
    all_zero = all_zero && st[d] == 0;
    all_contiguous = all_contiguous && st[d] == cs[d];
    if (d < split.d) {
      prefix_zero = prefix_zero && st[d] == 0;
      prefix_contiguous = prefix_contiguous && st[d] == cs[d] / split.row;
    } else {
      suffix_zero = suffix_zero && st[d] == 0;
      suffix_contiguous = suffix_contiguous && st[d] == cs[d];
    }
  }
  if (all_zero) return {Read::kBroadcast, !same, 1};
  if (all_contiguous) return {Read::kInPlace, !same, total};
  if (split.d < r && prefix_zero) return {Read::kRepeatedRow, !same || !suffix_contiguous, split.row};
  if (split.d < r && suffix_zero) return {Read::kPerRow, !same || !prefix_contiguous, split.rows};
  return {Read::kGatherAll, true, total};
}

}  // namespace

Device op_device(std::span<const NamedView> operands, const MutableTensorView* out, const char* op) {
  const NamedView* first = nullptr;  // the first operand on a device
  for (const NamedView& o : operands) {
    if (!o.first->device.is_cpu()) {
      first = &o;
      break;
    }
  }
  if (first == nullptr && (out == nullptr || out->device.is_cpu())) return kCpuDevice;
  const Device device = first != nullptr ? first->first->device : out->device;
  const char* device_name = first != nullptr ? first->second : "out";
  for (const NamedView& o : operands) {
    const Device d = o.first->device;
    if (d == device || (d.is_cpu() && is_scalar_on_host(*o.first))) continue;
    throw Error(ErrorKind::kValue, std::string(op) + ": " + o.second + " is on " + d.str() + " but " + device_name +
                                       " is on " + device.str() +
                                       " (the tensors of one call share a device; only 0-d host values, such as "
                                       "Python scalars, may join device tensors)");
  }
  if (out != nullptr && !(out->device == device)) {
    throw Error(ErrorKind::kValue, std::string(op) + ": out is on " + out->device.str() + " but " + device_name + " is on " +
                                       device.str() + " (the output must be on the inputs' device)");
  }
  // Device pointers must be memory of that device: a host pointer labelled as device memory (or
  // memory of another GPU) would fault inside a kernel, which poisons the whole CUDA context.
  const PolyquantCudaBackend& b = device_backend(device);
  auto check_pointer = [&](const void* data, const Layout& v, const char* name) {
    if (v.device.is_cpu() || v.numel() == 0) return;
    int where = -1;
    const int e = b.pointer_device(data, &where);
    if (e != 0 || where != device.index) {
      throw Error(ErrorKind::kValue, std::string(op) + ": " + name + " is labelled " + device.str() +
                                         " but its data is " + (e != 0 ? std::string("not device memory (") + b.error_string(e) + ")"
                                                                       : where < 0 ? std::string("host memory")
                                                                                   : "memory of cuda:" + std::to_string(where)));
    }
  };
  for (const NamedView& o : operands) check_pointer(o.first->data, *o.first, o.second);
  if (out != nullptr) check_pointer(out->data, *out, "out");
  return device;
}

void require_host(std::span<const NamedView> operands, const char* op, const char* why) {
  std::vector<NamedLayout> layouts;
  for (const NamedView& o : operands) layouts.emplace_back(o.first, o.second);
  require_host(std::span<const NamedLayout>(layouts), op, why);
}

void require_host(std::span<const NamedLayout> operands, const char* op, const char* why) {
  for (const NamedLayout& o : operands) {
    if (o.first->device.is_cpu()) continue;
    throw Error(ErrorKind::kType, std::string(op) + ": " + o.second + " is on " + o.first->device.str() + ", but " + op +
                                      " runs on the host only" + (why != nullptr ? std::string(" (") + why + ")" : std::string()) +
                                      "; copy it to host memory first (the ops with a CUDA path are listed in docs/cuda.md)");
  }
}

const PolyquantCudaBackend& device_backend(const Device& device) {
  const PolyquantCudaBackend* table = g_test_backend.load();
  std::string reason;
  if (table == nullptr) {
    const CudaBackendStatus& status = cuda_backend();
    table = status.table;
    reason = status.reason;
  }
  if (table == nullptr || !reason.empty()) {
    throw Error(ErrorKind::kRuntime, "a tensor is on " + device.str() + " but the CUDA backend is unavailable: " + reason);
  }
  char why[512] = {};
  const int count = table->device_count(why, sizeof why);
  if (device.index < 0 || device.index >= count) {
    throw Error(ErrorKind::kValue, "a tensor is on " + device.str() + ", which does not exist: this machine has " +
                                       std::to_string(count < 0 ? 0 : count) + " CUDA device(s)");
  }
  return *table;
}

void set_device_backend_for_testing(const PolyquantCudaBackend* table) { g_test_backend.store(table); }

namespace {
void run_launches(const PolyquantCudaBackend& b, const ElementwiseCall& call, PolyquantCudaLaunch launch, void* stream,
                  Temporaries& temporaries);
}  // namespace

void run_elementwise_on_device(const ElementwiseCall& call, const Device& device) {
  if (!call.op.has_value()) {
    throw Error(ErrorKind::kType, "internal: this operation has no CUDA path (docs/cuda.md lists those that have)");
  }
  const PolyquantCudaBackend& b = device_backend(device);
  const PolyquantCudaLaunch launch = b.launch[static_cast<int>(*call.op)][static_cast<int>(call.work)];
  if (launch == nullptr) {
    throw Error(ErrorKind::kType, std::string("the CUDA backend has no kernel for ") + op_name(*call.op) + " in this working precision");
  }
  const std::int64_t total = call.out.numel();
  if (total == 0) return;
  const DeviceSelection selection(b, device.index);
  void* const stream = current_stream();
  Temporaries temporaries(b, stream);

  // Operands on the device, except 0-d host values (they travel inside the launch): another
  // device is an error, host operands a family derived (AIMET's zero points, a parameter of another
  // layout) are converted to the kernel's dtype on the host and copied over.
  std::vector<TensorView> inputs(call.inputs.begin(), call.inputs.end());
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    TensorView& v = inputs[k];
    if (v.device == device || is_scalar_on_host(v)) continue;
    if (!v.device.is_cpu()) {
      throw Error(ErrorKind::kValue, "an operand is on " + v.device.str() + " but out is on " + device.str() +
                                         " (the tensors of one call share a device)");
    }
    const DType kd = call.kernel_dtypes[k];
    const std::int64_t n = v.numel();
    std::vector<unsigned char> staged(static_cast<std::size_t>(n > 0 ? n : 1) * dtype_size(kd));
    convert_into(v, MutableTensorView(staged.data(), kd, v.shape));
    void* t = temporaries.allocate(n, kd);
    // From pageable host memory the copy is staged before it returns, so `staged` may go.
    check(b, b.copy(t, staged.data(), static_cast<std::size_t>(n) * dtype_size(kd), stream, 0), "cudaMemcpyAsync");
    v = TensorView(t, kd, v.shape);
    v.device = device;
  }
  ElementwiseCall on_device = call;
  on_device.inputs = inputs;
  run_launches(b, on_device, launch, stream, temporaries);
}

namespace {

void run_launches(const PolyquantCudaBackend& b, const ElementwiseCall& call, PolyquantCudaLaunch launch, void* stream,
                  Temporaries& temporaries) {
  const std::int64_t total = call.out.numel();
  const Plan plan = make_plan(call);
  const int r = plan.rank;
  std::int64_t cs[kMaxRank] = {};  // C-order strides of the coalesced shape
  for (int d = r - 1; d >= 0; --d) cs[d] = d == r - 1 ? 1 : cs[d + 1] * plan.shape[d + 1];
  const int nin = plan.num_inputs;

  // The split whose temporaries are smallest (no split first: it wins ties).
  Split best{r, 1, total};
  std::int64_t best_cost = -1;
  for (int d = r; d >= 1; --d) {
    Split split{d, 1, 1};
    for (int i = d; i < r; ++i) split.row *= plan.shape[i];
    split.rows = total / split.row;
    std::int64_t cost = 0;
    for (int k = 0; k < nin; ++k) {
      const OperandRead o = classify(call, plan, cs, total, split, k);
      if (o.gathered) cost += o.count * static_cast<std::int64_t>(dtype_size(call.kernel_dtypes[static_cast<std::size_t>(k)]));
    }
    if (best_cost < 0 || cost < best_cost) {
      best = split;
      best_cost = cost;
    }
  }

  RowArgs a;
  PolyquantCudaHostScalars scalars{};
  for (int k = 0; k < nin; ++k) {
    const TensorView& v = call.inputs[static_cast<std::size_t>(k)];
    const DType kd = call.kernel_dtypes[static_cast<std::size_t>(k)];
    const OperandRead o = classify(call, plan, cs, total, best, k);
    const std::int64_t* st = plan.in_strides[k];
    const void* in = v.data;
    switch (o.read) {
      case Read::kHostScalar:
        convert_values(v.data, v.dtype, 0, &scalars.value[k], kd, 1, 1);
        scalars.mask |= 1u << k;
        a.broadcast_mask |= 1u << k;
        in = nullptr;  // the launch points it at its copy of the value
        break;
      case Read::kBroadcast:
        a.broadcast_mask |= 1u << k;
        if (o.gathered) {
          void* t = temporaries.allocate(1, kd);
          convert_on_device(b, stream, v.data, v.dtype, t, kd, 0, nullptr, nullptr, nullptr);
          in = t;
        }
        break;
      case Read::kRepeatedRow:
        a.repeated_row_mask |= 1u << k;
        a.row_len = best.row;
        if (o.gathered) {
          void* t = temporaries.allocate(best.row, kd);
          convert_on_device(b, stream, v.data, v.dtype, t, kd, r - best.d, plan.shape + best.d, st + best.d, cs + best.d);
          in = t;
        }
        break;
      case Read::kPerRow:
        a.per_row_mask |= 1u << k;
        a.row_len = best.row;
        if (o.gathered) {
          std::int64_t prefix_strides[kMaxRank] = {};
          for (int d = 0; d < best.d; ++d) prefix_strides[d] = cs[d] / best.row;
          void* t = temporaries.allocate(best.rows, kd);
          convert_on_device(b, stream, v.data, v.dtype, t, kd, best.d, plan.shape, st, prefix_strides);
          in = t;
        }
        break;
      case Read::kInPlace:
      case Read::kGatherAll:
        if (o.gathered) {
          void* t = temporaries.allocate(total, kd);
          convert_on_device(b, stream, v.data, v.dtype, t, kd, r, plan.shape, st, cs);
          in = t;
        }
        break;
    }
    a.in[static_cast<std::size_t>(k)] = in;
    a.in_bytes[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(dtype_size(kd));
  }

  // The output: in place when the kernel can write it as it is and it overlaps no input other than
  // element for element; else a contiguous temporary converted into place afterwards.
  bool out_direct = call.out.dtype == call.kernel_out_dtype;
  for (int d = 0; d < r; ++d) out_direct = out_direct && plan.out_strides[d] == cs[d];
  out_direct = out_direct && !output_overlaps_inputs(call);
  void* const out = out_direct ? call.out.data : temporaries.allocate(total, call.kernel_out_dtype);
  a.out = out;
  a.n = total;
  a.index = 0;
  check(b, launch(call.params, &a, scalars.mask != 0 ? &scalars : nullptr, stream), op_name(*call.op));
  if (!out_direct) {
    convert_on_device(b, stream, out, call.kernel_out_dtype, call.out.data, call.out.dtype, r, plan.shape, cs,
                      plan.out_strides);
  }
}

}  // namespace

void copy_device_element_to_host(const TensorView& view, std::int64_t index, void* value) {
  const PolyquantCudaBackend& b = device_backend(view.device);
  const std::int64_t offset = element_offset(view, index);
  const DeviceSelection selection(b, view.device.index);
  const std::size_t size = dtype_size(view.dtype);
  check(b, b.copy(value, static_cast<const unsigned char*>(view.data) + offset * static_cast<std::int64_t>(size), size,
                  current_stream(), 1),
        "reading a device value (cudaMemcpyAsync)");
}

void convert_into_on_device(const TensorView& from, const MutableTensorView& out) {
  const PolyquantCudaBackend& b = device_backend(out.device);
  const std::int64_t n = out.numel();
  if (n == 0) return;
  if (!from.device.is_cpu() && !(from.device == out.device)) {
    throw Error(ErrorKind::kValue, "a tensor on " + from.device.str() + " cannot be written into one on " + out.device.str());
  }
  const DeviceSelection selection(b, out.device.index);
  void* const stream = current_stream();
  Temporaries temporaries(b, stream);
  const int r = out.shape.rank;
  std::int64_t src_strides[kMaxRank] = {};
  const void* src = from.data;
  DType src_dtype = from.dtype;
  if (from.device.is_cpu()) {
    // Staged on the host in out's dtype and shape (the host spec converts), then copied over.
    std::vector<unsigned char> staged(static_cast<std::size_t>(n) * dtype_size(out.dtype));
    convert_into(from, MutableTensorView(staged.data(), out.dtype, out.shape));
    void* t = temporaries.allocate(n, out.dtype);
    check(b, b.copy(t, staged.data(), staged.size(), stream, 0), "cudaMemcpyAsync");
    src = t;
    src_dtype = out.dtype;
    const Dims cs = contiguous_strides(out.shape);
    for (int d = 0; d < r; ++d) src_strides[d] = cs[d];
  } else {
    for (int d = 0; d < from.shape.rank; ++d) {
      const int o = r - from.shape.rank + d;
      src_strides[o] = from.shape[d] == 1 ? 0 : from.strides[d];
    }
    if (views_overlap(from.data, from, out.data, out)) {  // through a contiguous copy of `from`
      void* t = temporaries.allocate(n, from.dtype);
      const Dims cs = contiguous_strides(out.shape);
      convert_on_device(b, stream, from.data, from.dtype, t, from.dtype, r, out.shape.v.data(), src_strides, cs.v.data());
      src = t;
      for (int d = 0; d < r; ++d) src_strides[d] = cs[d];
    }
  }
  convert_on_device(b, stream, src, src_dtype, out.data, out.dtype, r, out.shape.v.data(), src_strides, out.strides.v.data());
}

DeviceScratch::DeviceScratch(const Device& device, std::size_t bytes) : backend_(&device_backend(device)), device_(device) {
  const PolyquantCudaBackend& b = *backend_;
  const DeviceSelection selection(b, device.index);
  check(b, b.allocate(&pointer_, bytes > 0 ? bytes : 1, current_stream()), "cudaMallocAsync");
}

DeviceScratch::~DeviceScratch() {
  // The table the memory came from (no lookup that could throw in a destructor); errors are
  // ignored, as a stream-ordered free has nothing to report to.
  const PolyquantCudaBackend& b = *backend_;
  int previous = 0;
  if (b.get_device(&previous) != 0) previous = device_.index;
  if (previous != device_.index) b.set_device(device_.index);
  b.release(pointer_, current_stream());
  if (previous != device_.index) b.set_device(previous);
}

namespace {
// The exact sums' parts per group, summed on the device and read back, then each rounded once by
// `round` (ExactSumFloat32's to_float or to_double).
template <class T, class Round>
std::vector<T> exact_group_sums(const Device& device, const float* terms, const Dims& shape, const Dims& group_strides,
                                std::int64_t groups, Round&& round) {
  const PolyquantCudaBackend& b = device_backend(device);
  if (b.exact_sums == nullptr) throw Error(ErrorKind::kRuntime, "CUDA backend: the library has no exact sums");
  const DeviceSelection selection(b, device.index);
  void* stream = current_stream();
  constexpr int K = kPolyquantCudaExactLimbs;
  Temporaries temporaries(b, stream);
  PolyquantCudaExactSums e{};
  e.terms = terms;
  e.rank = shape.rank;
  for (int d = 0; d < shape.rank; ++d) {
    e.shape[d] = shape[d];
    e.group_strides[d] = group_strides[d];
  }
  e.groups = groups;
  e.limbs = static_cast<std::int64_t*>(temporaries.allocate(groups * K, DType::kInt64));
  e.flags = static_cast<std::uint32_t*>(temporaries.allocate(groups, DType::kUInt32));
  check(b, b.exact_sums(&e, stream), "the exact sums kernel");
  std::vector<std::int64_t> limbs(static_cast<std::size_t>(groups) * K);
  std::vector<std::uint32_t> flags(static_cast<std::size_t>(groups));
  check(b, b.copy(limbs.data(), e.limbs, limbs.size() * sizeof(std::int64_t), stream, 0), "cudaMemcpyAsync");
  check(b, b.copy(flags.data(), e.flags, flags.size() * sizeof(std::uint32_t), stream, 1), "cudaMemcpyAsync");
  std::vector<T> sums(static_cast<std::size_t>(groups));
  for (std::size_t g = 0; g < sums.size(); ++g) sums[g] = round(ExactSumFloat32::from_parts(limbs.data() + g * K, flags[g]));
  return sums;
}
}  // namespace

std::vector<float> exact_group_sums_on_device(const Device& device, const float* terms, const Dims& shape,
                                              const Dims& group_strides, std::int64_t groups) {
  return exact_group_sums<float>(device, terms, shape, group_strides, groups, [](const ExactSumFloat32& s) { return s.to_float(); });
}

std::vector<double> exact_group_sums_on_device_as_double(const Device& device, const float* terms, const Dims& shape,
                                                         const Dims& group_strides, std::int64_t groups) {
  return exact_group_sums<double>(device, terms, shape, group_strides, groups, [](const ExactSumFloat32& s) { return s.to_double(); });
}

namespace {
// x's elements in C order on its device: x itself when contiguous, else a gathered copy (same dtype).
const void* c_order_on_device(const PolyquantCudaBackend& b, void* stream, Temporaries& temporaries, const TensorView& x) {
  if (x.is_contiguous()) return x.data;
  void* c = temporaries.allocate(x.numel(), x.dtype);
  const Dims cs = contiguous_strides(x.shape);
  convert_on_device(b, stream, x.data, x.dtype, c, x.dtype, x.shape.rank, x.shape.v.data(), x.strides.v.data(), cs.v.data());
  return c;
}
}  // namespace

GroupMinMax group_min_max_on_device(const TensorView& x, int rank, const std::int64_t* shape,
                                    const std::int64_t* group_strides, std::int64_t groups, bool finite_only) {
  const PolyquantCudaBackend& b = device_backend(x.device);
  if (b.group_min_max == nullptr) throw Error(ErrorKind::kRuntime, "CUDA backend: the library has no group min / max");
  if (rank > kPolyquantCudaMaxGroupedRank) throw Error(ErrorKind::kValue, "internal: group min / max of rank " + std::to_string(rank));
  const DeviceSelection selection(b, x.device.index);
  void* stream = current_stream();
  Temporaries temporaries(b, stream);
  PolyquantCudaGroupMinMax m{};
  m.x = c_order_on_device(b, stream, temporaries, x);
  m.finite_only = finite_only ? 1 : 0;
  m.dtype = x.dtype;
  m.rank = rank;
  for (int d = 0; d < rank; ++d) {
    m.shape[d] = shape[d];
    m.group_strides[d] = group_strides[d];
  }
  m.groups = groups;
  m.keys = static_cast<std::uint64_t*>(temporaries.allocate(2 * groups, DType::kUInt64));
  m.flags = static_cast<std::uint32_t*>(temporaries.allocate(groups, DType::kUInt32));
  check(b, b.group_min_max(&m, stream), "the group min / max kernel");
  std::vector<std::uint64_t> keys(2 * static_cast<std::size_t>(groups));
  std::vector<std::uint32_t> flags(static_cast<std::size_t>(groups));
  check(b, b.copy(keys.data(), m.keys, keys.size() * sizeof(std::uint64_t), stream, 0), "cudaMemcpyAsync");
  check(b, b.copy(flags.data(), m.flags, flags.size() * sizeof(std::uint32_t), stream, 1), "cudaMemcpyAsync");
  GroupMinMax r;
  r.min.resize(flags.size());
  r.max.resize(flags.size());
  r.nan.resize(flags.size());
  r.negative_zero.resize(flags.size());
  for (std::size_t g = 0; g < flags.size(); ++g) {
    const bool any = keys[2 * g + 1] != 0;  // a value other than NaN was folded in
    r.min[g] = any ? polyquant_from_order_key(keys[2 * g]) : std::numeric_limits<double>::infinity();
    r.max[g] = any ? polyquant_from_order_key(keys[2 * g + 1]) : -std::numeric_limits<double>::infinity();
    r.nan[g] = (flags[g] & kPolyquantCudaMinMaxNaN) != 0;
    r.negative_zero[g] = (flags[g] & kPolyquantCudaMinMaxNegativeZero) != 0;
  }
  return r;
}

std::vector<std::uint64_t> group_histogram_on_device(const TensorView& x, int rank, const std::int64_t* shape,
                                                     const std::int64_t* group_strides, std::int64_t groups, std::int64_t bins,
                                                     std::span<const PolyquantCudaHistogramBinning> binning) {
  const PolyquantCudaBackend& b = device_backend(x.device);
  if (b.group_histogram == nullptr) throw Error(ErrorKind::kRuntime, "CUDA backend: the library has no group histogram");
  if (rank > kPolyquantCudaMaxGroupedRank) throw Error(ErrorKind::kValue, "internal: group histogram of rank " + std::to_string(rank));
  if (bins < 1 || bins > kHistcMaxCountingBins || static_cast<std::int64_t>(binning.size()) != groups)
    throw Error(ErrorKind::kValue, "internal: group histogram of " + std::to_string(bins) + " bins, " + std::to_string(binning.size()) +
                                       " binnings for " + std::to_string(groups) + " groups");
  const DeviceSelection selection(b, x.device.index);
  void* stream = current_stream();
  Temporaries temporaries(b, stream);
  PolyquantCudaGroupHistogram h{};
  h.x = c_order_on_device(b, stream, temporaries, x);
  h.dtype = x.dtype;
  h.rank = rank;
  for (int d = 0; d < rank; ++d) {
    h.shape[d] = shape[d];
    h.group_strides[d] = group_strides[d];
  }
  h.groups = groups;
  h.bins = bins;
  const std::size_t binning_bytes = binning.size() * sizeof(PolyquantCudaHistogramBinning);
  auto* on_device = static_cast<PolyquantCudaHistogramBinning*>(temporaries.allocate(static_cast<std::int64_t>(binning_bytes), DType::kUInt8));
  // `binning` outlives the copy: the read-back below waits for the stream.
  check(b, b.copy(on_device, binning.data(), binning_bytes, stream, 0), "cudaMemcpyAsync");
  h.binning = on_device;
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(groups * (bins + 2)));
  h.counts = static_cast<std::uint64_t*>(temporaries.allocate(static_cast<std::int64_t>(counts.size()), DType::kUInt64));
  check(b, b.group_histogram(&h, stream), "the group histogram kernel");
  check(b, b.copy(counts.data(), h.counts, counts.size() * sizeof(std::uint64_t), stream, 1), "cudaMemcpyAsync");
  return counts;
}

void* allocate_device_memory(const Device& device, std::size_t bytes) {
  const PolyquantCudaBackend& b = device_backend(device);
  const DeviceSelection selection(b, device.index);
  void* p = nullptr;
  check(b, b.allocate(&p, bytes > 0 ? bytes : 1, current_stream()), "cudaMallocAsync");
  return p;
}

void order_stream_after(const Device& device, void* waiting, void* producer) {
  const PolyquantCudaBackend& b = device_backend(device);
  const DeviceSelection selection(b, device.index);
  check(b, b.order_after(waiting, producer), "ordering a stream after another (cudaStreamWaitEvent)");
}

void release_device_memory(const Device& device, void* pointer) noexcept {
  try {
    const PolyquantCudaBackend& b = device_backend(device);
    int previous = 0;
    if (b.get_device(&previous) != 0) return;
    if (previous != device.index) b.set_device(device.index);
    b.release_now(pointer);
    if (previous != device.index) b.set_device(previous);
  } catch (...) {  // the backend went away: nothing to release into
  }
}

TensorView host_readable(const TensorView& view, std::vector<unsigned char>& storage) {
  if (view.device.is_cpu()) return view;
  const std::int64_t n = view.numel();
  const std::size_t size = dtype_size(view.dtype);
  storage.assign(static_cast<std::size_t>(n > 0 ? n : 1) * size, 0);
  if (n == 0) return TensorView(storage.data(), view.dtype, view.shape);
  // A view that is not contiguous is gathered on the device first (the conversion kernel, the
  // dtype kept) into a contiguous temporary, then read in one copy: element by element, every
  // read would be a copy and a wait.
  std::optional<DeviceScratch> gathered;
  const void* from = view.data;
  if (!view.is_contiguous()) {
    gathered.emplace(view.device, static_cast<std::size_t>(n) * size);
    MutableTensorView contiguous(gathered->data(), view.dtype, view.shape);
    contiguous.device = view.device;
    convert_into_on_device(view, contiguous);
    from = gathered->data();
  }
  const PolyquantCudaBackend& b = device_backend(view.device);
  const DeviceSelection selection(b, view.device.index);
  check(b, b.copy(storage.data(), from, static_cast<std::size_t>(n) * size, current_stream(), 1),
        "reading device values (cudaMemcpyAsync)");
  return TensorView(storage.data(), view.dtype, view.shape);
}

double read_device_element_as_double(const TensorView& view, std::int64_t index) {
  alignas(8) unsigned char value[8] = {};
  copy_device_element_to_host(view, index, value);
  return load_as_double(value, view.dtype, 0);
}

}  // namespace detail
}  // namespace polyquant
