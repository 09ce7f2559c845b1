// The fused row adapter: derived kernel operands computed per block of a row (core/fused.h).
#include "core/fused.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/device_elementwise.h"
#include "polyquant/error.h"

namespace polyquant::detail {

namespace {
template <class U>
std::int64_t run_end_as(const U* p, std::int64_t from, std::int64_t end) {
  const U v = p[from];
  std::int64_t i = from + 1;
  // Whole chunks first: an OR of XORs the compiler vectorizes, so long runs cost a fraction of a
  // cycle per element; the chunk that differs is then searched element by element.
  constexpr std::int64_t kChunk = 64 / sizeof(U) * 2;
  for (; i + kChunk <= end; i += kChunk) {
    U diff = 0;
    for (std::int64_t k = 0; k < kChunk; ++k) diff |= static_cast<U>(p[i + k] ^ v);
    if (diff != 0) break;
  }
  for (; i < end; ++i) {
    if (p[i] != v) return i;
  }
  return end;
}
}  // namespace

std::int64_t run_end(const SourceRun& run, std::int64_t from, std::int64_t end) {
  switch (run.size) {
    case 1: return run_end_as(static_cast<const std::uint8_t*>(run.data), from, end);
    case 2: return run_end_as(static_cast<const std::uint16_t*>(run.data), from, end);
    case 4: return run_end_as(static_cast<const std::uint32_t*>(run.data), from, end);
    default: return run_end_as(static_cast<const std::uint64_t*>(run.data), from, end);
  }
}

namespace {

constexpr std::int64_t kBlock = kDeriveBlock;

// Stores m derived values (exact in their own dtype) in the kernel's dtype, rounded once as the
// engine's conversion of a tensor of that dtype would.
void store_as(DType t, const double* v, std::int64_t m, void* dst) {
  switch (t) {
    case DType::kFloat16:
      for (std::int64_t i = 0; i < m; ++i) static_cast<std::uint16_t*>(dst)[i] = half_from_double(v[i]).bits;
      return;
    case DType::kFloat32:
      for (std::int64_t i = 0; i < m; ++i) static_cast<float*>(dst)[i] = static_cast<float>(v[i]);
      return;
    default:
      std::memcpy(dst, v, static_cast<std::size_t>(m) * sizeof(double));
      return;
  }
}

// Per-thread buffers, grown on first use and kept (a row call must not allocate).
struct Scratch {
  std::vector<double> values[kMaxDerived];     // derived values, exact in their dtype
  std::vector<double> kernel_in[kMaxDerived];  // kBlock values of up to 8 bytes
  double broadcast_values[kMaxDerived] = {};
  alignas(8) unsigned char broadcast_kernel_in[kMaxDerived][8] = {};
  alignas(16) unsigned char row_params[kRowParamsBytes] = {};
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

struct Job {
  const FusedCall* call;
};

void fused_row(const void* p, const RowArgs& a) {
  const Job& job = *static_cast<const Job*>(p);
  const FusedCall& c = *job.call;
  const int nd = static_cast<int>(c.derived.size());
  Scratch& s = scratch();

  // Which derived operands are one value for this row, and those values; and which are one value
  // for the current block (written to values[d][0]).
  std::uint32_t derived_broadcast = 0;
  std::uint32_t uniform_blocks = 0;
  auto is_broadcast = [&](int src) {
    return src < kMaxOperands ? a.is_broadcast(src)
                              : (((derived_broadcast | uniform_blocks) >> (src - kMaxOperands)) & 1u) != 0;
  };
  SourceRun runs[kMaxDerivedSources];
  // Source q of derivation dv for the elements from b on.
  auto source_run = [&](const Derivation& dv, int q, std::int64_t b) {
    const int src = dv.sources[static_cast<std::size_t>(q)];
    SourceRun r;
    r.broadcast = is_broadcast(src);
    if (src < kMaxOperands) {
      r.dtype = c.input_dtypes[static_cast<std::size_t>(src)];
      r.size = static_cast<std::uint8_t>(dtype_size(r.dtype));
      const auto* row = static_cast<const unsigned char*>(a.in[static_cast<std::size_t>(src)]);
      r.data = r.broadcast ? row : row + b * static_cast<std::int64_t>(r.size);
    } else {
      const int d = src - kMaxOperands;
      r.data = ((derived_broadcast >> d) & 1u) ? &s.broadcast_values[d] : static_cast<const void*>(s.values[d].data());
    }
    return r;
  };
  for (int d = 0; d < nd; ++d) {
    const Derivation& dv = c.derived[static_cast<std::size_t>(d)];
    bool all = true;
    for (int q = 0; q < dv.num_sources; ++q) all = all && is_broadcast(dv.sources[static_cast<std::size_t>(q)]);
    if (!all) continue;
    derived_broadcast |= 1u << d;
    for (int q = 0; q < dv.num_sources; ++q) runs[q] = source_run(dv, q, 0);
    (void)dv.fn(dv.ctx, runs, 1, &s.broadcast_values[d]);
    store_as(dv.kernel_dtype, &s.broadcast_values[d], 1, s.broadcast_kernel_in[d]);
  }

  RowArgs k;
  k.stream = a.stream;
  const int nk = static_cast<int>(c.kernel_operands.size());
  for (int j = 0; j < nk; ++j) {
    const int op = c.kernel_operands[static_cast<std::size_t>(j)];
    if (is_broadcast(op)) k.broadcast_mask |= 1u << j;
  }
  const std::size_t out_size = dtype_size(c.kernel_out_dtype);
  auto call_kernel = [&]() {
    const void* params = c.row_params ? c.row_params(c.params, k, s.row_params) : c.params;
    c.kernel(params, k);
  };
  const std::uint32_t all_derived = (1u << nd) - 1u;
  if (derived_broadcast == all_derived) {  // per-tensor and per-channel rows: one kernel call
    for (int j = 0; j < nk; ++j) {
      const int op = c.kernel_operands[static_cast<std::size_t>(j)];
      k.in[static_cast<std::size_t>(j)] = op < kMaxOperands ? a.in[static_cast<std::size_t>(op)]
                                                             : s.broadcast_kernel_in[op - kMaxOperands];
    }
    k.out = a.out;
    k.n = a.n;
    call_kernel();
    return;
  }

  for (int d = 0; d < nd; ++d) {
    if ((derived_broadcast >> d) & 1u) continue;
    s.values[d].resize(kBlock);
    s.kernel_in[d].resize(kBlock);
  }
  for (std::int64_t b = 0; b < a.n; b += kBlock) {
    const std::int64_t m = std::min(kBlock, a.n - b);
    for (int d = 0; d < nd; ++d) {
      if ((derived_broadcast >> d) & 1u) continue;
      const Derivation& dv = c.derived[static_cast<std::size_t>(d)];
      for (int q = 0; q < dv.num_sources; ++q) runs[q] = source_run(dv, q, b);
      // A block of one value (a run of equal parameters) goes to the kernel, and to the
      // derivations that read it, as a broadcast.
      const bool uniform = dv.fn(dv.ctx, runs, m, s.values[d].data());
      store_as(dv.kernel_dtype, s.values[d].data(), uniform ? 1 : m, s.kernel_in[d].data());
      uniform_blocks = uniform ? (uniform_blocks | 1u << d) : (uniform_blocks & ~(1u << d));
    }
    for (int j = 0; j < nk; ++j) {
      const int op = c.kernel_operands[static_cast<std::size_t>(j)];
      const auto slot = static_cast<std::size_t>(j);
      if (op < kMaxOperands) {
        const auto* row = static_cast<const unsigned char*>(a.in[static_cast<std::size_t>(op)]);
        k.in[slot] = a.is_broadcast(op) ? row : row + b * static_cast<std::int64_t>(dtype_size(c.input_dtypes[static_cast<std::size_t>(op)]));
      } else {
        const int d = op - kMaxOperands;
        k.in[slot] = ((derived_broadcast >> d) & 1u) ? static_cast<const void*>(s.broadcast_kernel_in[d])
                                                     : static_cast<const void*>(s.kernel_in[d].data());
        if ((uniform_blocks >> d) & 1u) k.broadcast_mask |= 1u << j;
        else if (!((derived_broadcast >> d) & 1u)) k.broadcast_mask &= ~(1u << j);
      }
    }
    k.out = static_cast<unsigned char*>(a.out) + b * static_cast<std::int64_t>(out_size);
    k.n = m;
    call_kernel();
  }
}

}  // namespace

// On a device: every derived operand is computed on the host over the broadcast shape of its
// sources (parameters: bit widths, scales; a few values, or one per channel), with the same
// derivation functions and rounding into the kernel's dtype as the host rows, and the call becomes
// one elementwise call whose kernel operands are the inputs and these host tensors (the device
// engine copies them over). A device source is read back first (it decides values, as a bit width
// read by the reference does). Per-row parameters (row_params) only select vector fast paths, which
// per-element device rows do not have.
void run_fused_on_device(const FusedCall& call) {
  const int nd = static_cast<int>(call.derived.size());
  std::vector<unsigned char> kernel_storage[kMaxDerived];
  std::vector<double> values[kMaxDerived];
  Dims shapes[kMaxDerived];
  for (int d = 0; d < nd; ++d) {
    const Derivation& dv = call.derived[static_cast<std::size_t>(d)];
    // The sources as host views (derived ones: float64, exact in their dtype).
    std::vector<unsigned char> readable[kMaxDerivedSources];
    TensorView source[kMaxDerivedSources];
    DType read_as[kMaxDerivedSources] = {};
    std::array<Dims, kMaxDerivedSources> source_shapes;
    for (int q = 0; q < dv.num_sources; ++q) {
      const int src = dv.sources[static_cast<std::size_t>(q)];
      if (src < kMaxOperands) {
        source[q] = host_readable(call.inputs[static_cast<std::size_t>(src)], readable[q]);
        read_as[q] = call.input_dtypes[static_cast<std::size_t>(src)];
      } else {
        const int e = src - kMaxOperands;
        source[q] = TensorView(values[e].data(), DType::kFloat64, shapes[e]);
        read_as[q] = DType::kFloat64;
      }
      source_shapes[static_cast<std::size_t>(q)] = source[q].shape;
    }
    shapes[d] = broadcast_shapes(std::span<const Dims>(source_shapes.data(), static_cast<std::size_t>(dv.num_sources)),
                                 "a derived operand");
    const std::int64_t n = shapes[d].numel();
    // Each source expanded to the derived shape, contiguous, in the dtype the derivation reads.
    std::vector<unsigned char> expanded[kMaxDerivedSources];
    SourceRun runs[kMaxDerivedSources];
    for (int q = 0; q < dv.num_sources; ++q) {
      expanded[q].resize(static_cast<std::size_t>(n > 0 ? n : 1) * dtype_size(read_as[q]));
      convert_into(source[q], MutableTensorView(expanded[q].data(), read_as[q], shapes[d]));
      runs[q].dtype = read_as[q];
      runs[q].size = static_cast<std::uint8_t>(dtype_size(read_as[q]));
    }
    values[d].assign(static_cast<std::size_t>(n > 0 ? n : 1), 0.0);
    for (std::int64_t b = 0; b < n; b += kBlock) {
      const std::int64_t m = std::min(kBlock, n - b);
      for (int q = 0; q < dv.num_sources; ++q) runs[q].data = expanded[q].data() + b * static_cast<std::int64_t>(runs[q].size);
      double* out = values[d].data() + b;
      if (dv.fn(dv.ctx, runs, m, out)) std::fill(out + 1, out + m, out[0]);  // a block of one value
    }
    kernel_storage[d].resize(static_cast<std::size_t>(n > 0 ? n : 1) * dtype_size(dv.kernel_dtype));
    store_as(dv.kernel_dtype, values[d].data(), n, kernel_storage[d].data());
  }
  const int nk = static_cast<int>(call.kernel_operands.size());
  std::vector<TensorView> inputs(static_cast<std::size_t>(nk));
  std::vector<DType> kernel_dtypes(static_cast<std::size_t>(nk));
  for (int j = 0; j < nk; ++j) {
    const int op = call.kernel_operands[static_cast<std::size_t>(j)];
    if (op < kMaxOperands) {
      inputs[static_cast<std::size_t>(j)] = call.inputs[static_cast<std::size_t>(op)];
      kernel_dtypes[static_cast<std::size_t>(j)] = call.input_dtypes[static_cast<std::size_t>(op)];
    } else {
      const int d = op - kMaxOperands;
      const DType kd = call.derived[static_cast<std::size_t>(d)].kernel_dtype;
      inputs[static_cast<std::size_t>(j)] = TensorView(kernel_storage[d].data(), kd, shapes[d]);
      kernel_dtypes[static_cast<std::size_t>(j)] = kd;
    }
  }
  ElementwiseCall engine;
  engine.inputs = inputs;
  engine.kernel_dtypes = kernel_dtypes;
  engine.out = call.out;
  engine.kernel_out_dtype = call.kernel_out_dtype;
  engine.kernel = call.kernel;
  engine.params = call.params;
  engine.op = call.op;
  engine.work = call.work;
  run_elementwise_on_device(engine, call.out.device);
}

void run_fused(const FusedCall& call) {
  auto bad = [](const std::string& what) { return Error(ErrorKind::kValue, "internal: fused call: " + what); };
  if (call.derived.size() > static_cast<std::size_t>(kMaxDerived)) throw bad("too many derived operands");
  if (call.kernel_operands.size() > static_cast<std::size_t>(kMaxOperands)) throw bad("too many kernel operands");
  // The tensors of one call share a device (0-d host values may join a device call).
  std::vector<NamedView> operands;
  for (const TensorView& v : call.inputs) operands.emplace_back(&v, "an operand");
  if (op_device(operands, &call.out, "this op").kind != DeviceKind::kCpu) {
    run_fused_on_device(call);
    return;
  }
  const Job job{&call};
  const int nin = static_cast<int>(call.inputs.size());
  auto check_source = [&](int src, int d) {
    if (src >= 0 && src < nin) return;
    if (src >= kMaxOperands && src - kMaxOperands < d) return;
    throw bad("operand " + std::to_string(src) + " out of range");
  };
  for (std::size_t d = 0; d < call.derived.size(); ++d) {
    const Derivation& dv = call.derived[d];
    if (dv.num_sources < 1 || dv.num_sources > kMaxDerivedSources || dv.fn == nullptr) throw bad("bad derivation");
    for (int k = 0; k < dv.num_sources; ++k) {
      const int src = dv.sources[static_cast<std::size_t>(k)];
      check_source(src, static_cast<int>(d));
    }
  }
  for (const int op : call.kernel_operands) check_source(op, static_cast<int>(call.derived.size()));

  ElementwiseCall engine;
  engine.inputs = call.inputs;
  engine.kernel_dtypes = call.input_dtypes;
  engine.out = call.out;
  engine.kernel_out_dtype = call.kernel_out_dtype;
  engine.kernel = &fused_row;
  engine.params = &job;
  run_elementwise(engine);
}

}  // namespace polyquant::detail
