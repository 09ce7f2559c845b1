// Broadcasting iteration over any number of operands, converting and packing only where needed.
#include "core/elementwise.h"
#include "core/elementwise_plan.h"
#include "core/device_elementwise.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/minifloat.h"
#include "core/parallel.h"
#include "kernels/convert/element.h"
#include "kernels/registry.h"
#include "polyquant/error.h"

namespace polyquant::detail {
namespace {

// Elements per packed block when an operand must be gathered or converted: small enough for L1.
constexpr std::int64_t kBlock = 2048;
// Elements per thread below which threading does not pay.
constexpr std::int64_t kParallelGrain = 1 << 16;
// Contiguous conversions at least this long go to the conversion kernel (shorter: a scalar loop).
constexpr std::int64_t kMinVectorConvert = 16;
// Output bytes above which stores bypass the cache (about the size of a large L3).
constexpr std::int64_t kStreamBytes = std::int64_t{32} << 20;
// Bytes of the widest element a kernel reads or writes (float64, int64): scratch for `count`
// converted elements of any dtype.
constexpr std::size_t kWidestElementBytes = 8;
constexpr std::size_t scratch_bytes(std::int64_t count) { return static_cast<std::size_t>(count) * kWidestElementBytes; }

}  // namespace

// Contiguous runs go to the conversion kernel of the kernel set in use (kernels/convert), which
// vectorises float16 / bfloat16 <-> float32 and hands every other pair back to the spec below.
void convert_values(const void* src, DType st, std::int64_t ss, void* dst, DType dt, std::int64_t ds,
                    std::int64_t n, bool stream) {
  if (ss == 1 && ds == 1 && st != dt && n >= kMinVectorConvert) {
    const RowKernel kernel = best_kernel(KernelOp::kConvert, WorkType::kF32);  // the set in use now
    const ConvertParams params{st, dt};
    RowArgs a;
    a.in[0] = src;
    a.out = dst;
    a.n = n;
    a.stream = stream;
    kernel(&params, a);
    return;
  }
  convert_values_scalar(src, st, ss, dst, dt, ds, n);
}

void convert_values_scalar(const void* src, DType st, std::int64_t ss, void* dst, DType dt, std::int64_t ds,
                           std::int64_t n) {
  // convert_element (kernels/convert/element.h) per element, the target's case hoisted out of the
  // loops.
  if (st == dt) {
    const std::size_t esize = dtype_size(st);
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(static_cast<char*>(dst) + i * ds * static_cast<std::int64_t>(esize),
                  static_cast<const char*>(src) + i * ss * static_cast<std::int64_t>(esize), esize);
    }
    return;
  }
  switch (dt) {
    case DType::kFloat64: {
      auto* d = static_cast<double*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i * ds] = load_as_double(src, st, i * ss);
      return;
    }
    case DType::kFloat32: {
      auto* d = static_cast<float*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i * ds] = load_as_float32(src, st, i * ss);
      return;
    }
    case DType::kFloat16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i * ds] = half_from_double(load_as_double(src, st, i * ss)).bits;
      return;
    }
    default:
      if (is_conversion_target(dt)) {
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint16_t bits = onnx_only_bits(dt, load_as_double(src, st, i * ss));
          if (dt == DType::kBFloat16) static_cast<std::uint16_t*>(dst)[i * ds] = bits;
          else static_cast<std::uint8_t*>(dst)[i * ds] = static_cast<std::uint8_t>(bits);
        }
        return;
      }
      throw Error(ErrorKind::kType, std::string("internal: cannot convert to ") + dtype_name(dt));
  }
}

std::int64_t element_offset(const Layout& view, std::int64_t index) {
  std::int64_t offset = 0;
  for (int d = view.shape.rank - 1; d >= 0; --d) {
    const std::int64_t extent = view.shape[d];
    offset += (index % extent) * view.strides[d];
    index /= extent;
  }
  return offset;
}

double read_as_double(const TensorView& view, std::int64_t index) {
  if (!view.device.is_cpu()) return read_device_element_as_double(view, index);
  return load_as<double>(view.data, view.dtype, element_offset(view, index));
}

Plan make_plan(const ElementwiseCall& call) {
  const Dims& os = call.out.shape;
  const int r = os.rank;
  const int nin = static_cast<int>(call.inputs.size());
  // Full-rank strides (0 on broadcast dimensions).
  std::int64_t st[kMaxOperands + 1][kMaxRank] = {};
  for (int k = 0; k < nin; ++k) {
    const TensorView& v = call.inputs[static_cast<std::size_t>(k)];
    for (int d = 0; d < v.shape.rank; ++d) {
      const int o = r - v.shape.rank + d;
      st[k][o] = (v.shape[d] == 1) ? 0 : v.strides[d];
    }
  }
  for (int d = 0; d < r; ++d) st[nin][d] = call.out.strides[d];

  Plan p;
  p.num_inputs = nin;
  // Drop size-1 dimensions, then merge neighbours that are contiguous for every operand.
  for (int d = 0; d < r; ++d) {
    if (os[d] == 1) continue;
    if (p.rank > 0) {
      const int q = p.rank - 1;
      bool mergeable = true;
      for (int k = 0; k <= nin; ++k) {
        const std::int64_t outer = (k == nin) ? p.out_strides[q] : p.in_strides[k][q];
        if (outer != st[k][d] * os[d]) mergeable = false;
      }
      if (mergeable) {
        p.shape[q] *= os[d];
        for (int k = 0; k < nin; ++k) p.in_strides[k][q] = st[k][d];
        p.out_strides[q] = st[nin][d];
        continue;
      }
    }
    p.shape[p.rank] = os[d];
    for (int k = 0; k < nin; ++k) p.in_strides[k][p.rank] = st[k][d];
    p.out_strides[p.rank] = st[nin][d];
    ++p.rank;
  }
  if (p.rank == 0) {  // a single element
    p.rank = 1;
    p.shape[0] = 1;
  }
  return p;
}

namespace {

// Per-thread scratch for packed operands and the output.
struct Scratch {
  std::vector<unsigned char> in[kMaxOperands];
  std::vector<unsigned char> out;
  // Fused short rows: an operand that repeats every row (a per-channel parameter, channels last),
  // replicated over the fused rows; `tiled_from` is the row it was copied from.
  std::vector<unsigned char> tiled[kMaxOperands];
  const char* tiled_from[kMaxOperands] = {};
};

template <class T>
void fill_repeated(unsigned char* dst, const char* value, std::int64_t n) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  T* d = reinterpret_cast<T*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = v;
}

// Rows shorter than this are fused (see Runner::fuse_rows_), up to kFusedElements a call when an
// operand is copied over the fused rows (the copies stay in L1), up to kFusedElementsInPlace when
// every operand is read in place, compact or as one repeated row (calls long enough that their
// fixed cost vanishes).
constexpr std::int64_t kShortRow = 256;
constexpr std::int64_t kFusedElements = 2048;
constexpr std::int64_t kFusedElementsInPlace = std::int64_t{1} << 16;

class Runner {
 public:
  Runner(const ElementwiseCall& call, const Plan& plan) : call_(call), plan_(plan) {
    const int nin = plan.num_inputs;
    const int inner = plan.rank - 1;
    const std::int64_t total = call.out.numel();
    stream_ = total * static_cast<std::int64_t>(dtype_size(call.out.dtype)) >= kStreamBytes;
    for (int k = 0; k < nin; ++k) {
      const TensorView& v = call.inputs[static_cast<std::size_t>(k)];
      const std::int64_t s = plan.in_strides[k][inner];
      const bool same = v.dtype == call.kernel_dtypes[static_cast<std::size_t>(k)];
      // Direct: the kernel can read the operand in place.
      direct_[k] = same && (s == 0 || s == 1);
    }
    out_direct_ = plan.out_strides[inner] == 1 && call.out.dtype == call.kernel_out_dtype;
    // A broadcast operand of another dtype is one value per segment: converted on the fly, it
    // never forces the blocked path (which gives up streaming stores).
    needs_blocks_ = !out_direct_;
    for (int k = 0; k < nin; ++k) {
      const bool broadcast = plan.in_strides[k][inner] == 0;
      convert_scalar_[k] = broadcast && !direct_[k];
      needs_blocks_ = needs_blocks_ || (!direct_[k] && !broadcast);
    }
    // Short rows (a per-channel parameter on a channels-last tensor: x (N, C), scale (C,); a
    // blocked parameter: x viewed as (N, D / B, B), scale (N, D / B, 1)) would cost one kernel call
    // per row of C (or B) elements. When the output and every operand run on contiguously from one
    // row to the next, or repeat the same row (the per-channel parameter), or hold one value per
    // row (the blocked parameter), or are one value, consecutive rows of the dimension above are
    // fused into one call: repeating operands are passed as one row (RowArgs::repeated_row_mask)
    // to kernels that read them so, else read from a copy tiled over the fused rows; one value per
    // row compact (RowArgs::per_row_mask) or from a copy that repeats each row's value over its
    // row. Each element gets the same operands and flat index as unfused. An operand that runs on,
    // or the output, in another dtype than the kernel's (a float16 / bfloat16 tensor) is converted
    // a fused call at a time through the scratch buffers, as the blocked path converts a segment.
    const std::int64_t len = plan.shape[inner];
    fuse_rows_ = plan.rank >= 2 && len < kShortRow && plan.out_strides[inner] == 1 && plan.out_strides[inner - 1] == len;
    bool repeats = false;
    converts_rows_ = !out_direct_;
    for (int k = 0; k < nin && fuse_rows_; ++k) {
      const std::int64_t si = plan.in_strides[k][inner], so = plan.in_strides[k][inner - 1];
      if (si == 1 && so == len) {                               // runs on across rows
        converts_rows_ = converts_rows_ || !direct_[k];
        continue;
      }
      if (si == 0 && so == 0) continue;                         // one value (converted per call)
      if (si == 1 && so == 0 && direct_[k]) {                   // the same row every row
        tiled_[k] = true;
        repeats = true;
        continue;
      }
      if (si == 0 && so != 0) {                                 // one value per row (converted per call)
        expanded_[k] = true;
        repeats = true;
        continue;
      }
      fuse_rows_ = false;
    }
    fuse_rows_ = fuse_rows_ && repeats;
    bool copies = converts_rows_;  // an operand converted, expanded or tiled over the fused rows
    for (int k = 0; k < nin; ++k) {
      copies = copies || (expanded_[k] && !call.per_row_operands) || (tiled_[k] && !call.repeated_row_operands);
    }
    fused_rows_ = fuse_rows_ ? std::max<std::int64_t>(2, (copies ? kFusedElements : kFusedElementsInPlace) / len) : 1;
  }

  void run_range(std::int64_t begin, std::int64_t end) const {
    const int rank = plan_.rank;
    const int inner = rank - 1;
    const std::int64_t len = plan_.shape[inner];
    // Decompose `begin` into an outer multi-index and an inner offset.
    std::int64_t idx[kMaxRank] = {};
    std::int64_t rem = begin / len;
    std::int64_t j = begin % len;
    for (int d = inner - 1; d >= 0; --d) {
      idx[d] = rem % plan_.shape[d];
      rem /= plan_.shape[d];
    }
    Scratch scratch;
    std::int64_t pos = begin;
    while (pos < end) {
      if (fuse_rows_ && j == 0 && end - pos >= 2 * len) {
        // Whole rows, not past the end of the dimension above the row (strides may change there).
        const std::int64_t rows = std::min({fused_rows_, (end - pos) / len, plan_.shape[inner - 1] - idx[inner - 1]});
        if (rows >= 2) {
          run_fused_rows(idx, rows, pos, scratch);
          pos += rows * len;
          idx[inner - 1] += rows;
          if (idx[inner - 1] == plan_.shape[inner - 1]) {
            idx[inner - 1] = 0;
            for (int d = inner - 2; d >= 0; --d) {
              if (++idx[d] < plan_.shape[d]) break;
              idx[d] = 0;
            }
          }
          continue;
        }
      }
      const std::int64_t n = std::min(len - j, end - pos);
      run_segment(idx, j, n, pos, scratch);
      pos += n;
      j += n;
      if (j == len) {
        j = 0;
        for (int d = inner - 1; d >= 0; --d) {
          if (++idx[d] < plan_.shape[d]) break;
          idx[d] = 0;
        }
      }
    }
  }

 private:
  // `first` is the flat C-order output index of the segment's first element (RowArgs::index).
  void run_segment(const std::int64_t* idx, std::int64_t j, std::int64_t n, std::int64_t first, Scratch& scratch) const {
    const int nin = plan_.num_inputs;
    const int inner = plan_.rank - 1;
    const char* in_base[kMaxOperands];
    for (int k = 0; k < nin; ++k) {
      const TensorView& v = call_.inputs[static_cast<std::size_t>(k)];
      std::int64_t off = j * plan_.in_strides[k][inner];
      for (int d = 0; d < inner; ++d) off += idx[d] * plan_.in_strides[k][d];
      in_base[k] = static_cast<const char*>(v.data) + off * static_cast<std::int64_t>(dtype_size(v.dtype));
    }
    std::int64_t out_off = j * plan_.out_strides[inner];
    for (int d = 0; d < inner; ++d) out_off += idx[d] * plan_.out_strides[d];
    char* out_base = static_cast<char*>(call_.out.data) + out_off * static_cast<std::int64_t>(dtype_size(call_.out.dtype));

    RowArgs args;
    for (int k = 0; k < nin; ++k) {
      if (plan_.in_strides[k][inner] == 0) args.broadcast_mask |= 1u << k;
    }
    if (!needs_blocks_) {
      alignas(8) unsigned char scalars[kMaxOperands][8];
      for (int k = 0; k < nin; ++k) {
        args.in[static_cast<std::size_t>(k)] = in_base[k];
        if (convert_scalar_[k]) {
          convert_one(k, in_base[k], scalars[k]);
          args.in[static_cast<std::size_t>(k)] = scalars[k];
        }
      }
      args.out = out_base;
      args.n = n;
      args.index = first;
      args.stream = stream_;
      call_.kernel(call_.params, args);
      return;
    }
    // Blocked path: convert/gather the operands that need it, scatter/convert the output.
    for (int k = 0; k < nin; ++k) {
      if (direct_[k]) continue;
      const std::int64_t count = args.is_broadcast(k) ? 1 : std::min(n, kBlock);
      scratch.in[k].resize(scratch_bytes(count));
      if (args.is_broadcast(k)) {  // one value for the whole segment: convert it once
        convert_one(k, in_base[k], scratch.in[k].data());
        args.in[static_cast<std::size_t>(k)] = scratch.in[k].data();
      }
    }
    if (!out_direct_) scratch.out.resize(scratch_bytes(std::min(n, kBlock)));
    const std::int64_t os = plan_.out_strides[inner];
    const auto out_size = static_cast<std::int64_t>(dtype_size(call_.out.dtype));
    // A streamed output, converted or written by the kernel in place (a 16-bit x into a float32
    // output: QKeras' 16-bit inputs): the first block ends where the output is 64-byte aligned, so
    // every later block's stores (the conversion's, or the kernel's) write whole cache lines
    // non-temporally (a line that one block's stores start and the next one's finish is read
    // from memory first, and a 16-bit output 16 bytes past such a boundary, as numpy allocates,
    // spent 15% of a bfloat16 call on those lines). Elementwise, so the blocks' bounds change no
    // result. A kernel writing in place streams as it does without blocks: with plain stores a
    // float16 x into float32 took 20% longer on one AVX-512 thread (every output line read first).
    std::int64_t first_block = kBlock;
    if (stream_ && os == 1) {
      const auto at = reinterpret_cast<std::uintptr_t>(out_base);
      static_assert(kBlock * 8 % 64 == 0, "whole blocks keep the alignment");
      if (at % static_cast<std::uintptr_t>(out_size) == 0) first_block = kBlock - static_cast<std::int64_t>(at % 64) / out_size;
    }
    for (std::int64_t b = 0; b < n; b += b == 0 ? first_block : kBlock) {
      const std::int64_t m = std::min(b == 0 ? first_block : kBlock, n - b);
      for (int k = 0; k < nin; ++k) {
        const TensorView& v = call_.inputs[static_cast<std::size_t>(k)];
        const std::int64_t s = plan_.in_strides[k][inner];
        if (args.is_broadcast(k)) {
          if (direct_[k]) args.in[static_cast<std::size_t>(k)] = in_base[k];
          continue;
        }
        const char* p = in_base[k] + b * s * static_cast<std::int64_t>(dtype_size(v.dtype));
        if (direct_[k]) {
          args.in[static_cast<std::size_t>(k)] = p;
        } else {
          convert_values(p, v.dtype, s, scratch.in[k].data(), call_.kernel_dtypes[static_cast<std::size_t>(k)], 1, m);
          args.in[static_cast<std::size_t>(k)] = scratch.in[k].data();
        }
      }
      char* op = out_base + b * os * out_size;
      args.out = out_direct_ ? static_cast<void*>(op) : static_cast<void*>(scratch.out.data());
      args.n = m;
      args.index = first + b;
      args.stream = stream_ && out_direct_;
      call_.kernel(call_.params, args);
      if (!out_direct_) convert_values(scratch.out.data(), call_.kernel_out_dtype, 1, op, call_.out.dtype, os, m, stream_);
    }
  }

  // Operand k's element at `at`, converted to the kernel's dtype into `into` (8 bytes: any dtype).
  void convert_one(int k, const void* at, void* into) const {
    convert_values(at, call_.inputs[static_cast<std::size_t>(k)].dtype, 0, into, call_.kernel_dtypes[static_cast<std::size_t>(k)], 1, 1);
  }

  // `rows` whole rows starting at row `idx` (the kernel sees rows * len elements; see fuse_rows_).
  void run_fused_rows(const std::int64_t* idx, std::int64_t rows, std::int64_t first, Scratch& scratch) const {
    const int nin = plan_.num_inputs;
    const int inner = plan_.rank - 1;
    const std::int64_t len = plan_.shape[inner];
    RowArgs args;
    alignas(8) unsigned char scalars[kMaxOperands][8];
    for (int k = 0; k < nin; ++k) {
      const TensorView& v = call_.inputs[static_cast<std::size_t>(k)];
      std::int64_t off = 0;
      for (int d = 0; d < inner; ++d) off += idx[d] * plan_.in_strides[k][d];
      const std::int64_t size = static_cast<std::int64_t>(dtype_size(v.dtype));
      const char* base = static_cast<const char*>(v.data) + off * size;
      // One value, or one per row, in another dtype than the kernel reads (convert_scalar_: a
      // bfloat16 scale of a bfloat16 tensor): its values converted for this call.
      const DType kernel_dtype = call_.kernel_dtypes[static_cast<std::size_t>(k)];
      const bool converts = convert_scalar_[k];
      if (plan_.in_strides[k][inner] == 0 && !expanded_[k]) {
        args.broadcast_mask |= 1u << k;
        args.in[static_cast<std::size_t>(k)] = base;
        if (converts) {
          convert_one(k, base, scalars[k]);
          args.in[static_cast<std::size_t>(k)] = scalars[k];
        }
      } else if (expanded_[k] && call_.per_row_operands) {
        // One value per row, compact: in place when the rows' values are adjacent (in the kernel's
        // dtype), else gathered (converted).
        const std::int64_t step = plan_.in_strides[k][inner - 1];
        args.per_row_mask |= 1u << k;
        args.row_len = len;
        if (step == 1 && !converts) {
          args.in[static_cast<std::size_t>(k)] = base;
        } else {
          std::vector<unsigned char>& t = scratch.tiled[k];
          t.resize(static_cast<std::size_t>(rows) * dtype_size(kernel_dtype));
          convert_values(base, v.dtype, step, t.data(), kernel_dtype, 1, rows);  // (a copy where the dtypes agree)
          scratch.tiled_from[k] = nullptr;
          args.in[static_cast<std::size_t>(k)] = t.data();
        }
      } else if (expanded_[k]) {
        // Row r's value (at base + r * stride, converted) repeated over its len elements.
        std::vector<unsigned char>& t = scratch.tiled[k];
        const auto esize = dtype_size(kernel_dtype);
        t.resize(static_cast<std::size_t>(rows * len) * esize);
        const std::int64_t step = plan_.in_strides[k][inner - 1] * size;
        for (std::int64_t r = 0; r < rows; ++r) {
          const char* v = base + r * step;
          if (converts) {
            convert_one(k, v, scalars[k]);
            v = reinterpret_cast<const char*>(scalars[k]);
          }
          unsigned char* dst = t.data() + static_cast<std::size_t>(r * len) * esize;
          switch (esize) {
            case 1: std::memset(dst, *v, static_cast<std::size_t>(len)); break;
            case 2: fill_repeated<std::uint16_t>(dst, v, len); break;
            case 4: fill_repeated<std::uint32_t>(dst, v, len); break;
            default: fill_repeated<std::uint64_t>(dst, v, len); break;
          }
        }
        scratch.tiled_from[k] = nullptr;
        args.in[static_cast<std::size_t>(k)] = t.data();
      } else if (tiled_[k] && call_.repeated_row_operands) {
        // The row once, continued cyclically over kRepeatedRowPad more values (RowArgs).
        std::vector<unsigned char>& t = scratch.tiled[k];
        const auto esize = static_cast<std::size_t>(size);
        const auto count = static_cast<std::size_t>(len + kRepeatedRowPad);
        if (scratch.tiled_from[k] != base || t.size() != count * esize) {
          t.resize(count * esize);
          for (std::size_t i = 0; i < count; ++i) std::memcpy(t.data() + i * esize, base + (i % static_cast<std::size_t>(len)) * esize, esize);
          scratch.tiled_from[k] = base;
        }
        args.repeated_row_mask |= 1u << k;
        args.row_len = len;
        args.in[static_cast<std::size_t>(k)] = t.data();
      } else if (tiled_[k]) {
        std::vector<unsigned char>& t = scratch.tiled[k];
        const auto row_bytes = static_cast<std::size_t>(len * size);
        if (scratch.tiled_from[k] != base || t.size() < row_bytes * static_cast<std::size_t>(fused_rows_)) {
          t.resize(row_bytes * static_cast<std::size_t>(fused_rows_));
          for (std::int64_t r = 0; r < fused_rows_; ++r) std::memcpy(t.data() + static_cast<std::size_t>(r) * row_bytes, base, row_bytes);
          scratch.tiled_from[k] = base;
        }
        args.in[static_cast<std::size_t>(k)] = t.data();
      } else if (!direct_[k]) {  // runs on in another dtype: converted for this call
        std::vector<unsigned char>& c = scratch.in[k];
        c.resize(scratch_bytes(rows * len));
        convert_values(base, v.dtype, 1, c.data(), call_.kernel_dtypes[static_cast<std::size_t>(k)], 1, rows * len);
        args.in[static_cast<std::size_t>(k)] = c.data();
      } else {
        args.in[static_cast<std::size_t>(k)] = base;
      }
    }
    std::int64_t out_off = 0;
    for (int d = 0; d < inner; ++d) out_off += idx[d] * plan_.out_strides[d];
    char* out = static_cast<char*>(call_.out.data) + out_off * static_cast<std::int64_t>(dtype_size(call_.out.dtype));
    args.n = rows * len;
    args.index = first;
    if (out_direct_) {
      args.out = out;
      args.stream = stream_;
      call_.kernel(call_.params, args);
      return;
    }
    scratch.out.resize(scratch_bytes(rows * len));
    args.out = scratch.out.data();
    args.stream = false;
    call_.kernel(call_.params, args);
    convert_values(scratch.out.data(), call_.kernel_out_dtype, 1, out, call_.out.dtype, 1, rows * len, stream_);
  }

  const ElementwiseCall& call_;
  const Plan& plan_;
  bool fuse_rows_ = false;
  bool converts_rows_ = false;  // fused rows convert an operand or the output (see fuse_rows_)
  bool tiled_[kMaxOperands] = {};
  bool expanded_[kMaxOperands] = {};
  std::int64_t fused_rows_ = 1;
  bool direct_[kMaxOperands] = {};
  bool convert_scalar_[kMaxOperands] = {};
  bool out_direct_ = false;
  bool needs_blocks_ = false;
  bool stream_ = false;
};

}  // namespace

namespace {

// Byte range [first, last] touched by a view (strides of any sign; extents of 1 never move).
struct ByteRange {
  std::uintptr_t first = 0, last = 0;
};

ByteRange byte_range(const void* data, const Layout& v) {
  const auto esize = static_cast<std::int64_t>(dtype_size(v.dtype));
  std::int64_t lo = 0, hi = 0;
  for (int d = 0; d < v.shape.rank; ++d) {
    if (v.shape[d] <= 1) continue;
    const std::int64_t span = (v.shape[d] - 1) * v.strides[d] * esize;
    (span < 0 ? lo : hi) += span;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  return {base + static_cast<std::uintptr_t>(lo), base + static_cast<std::uintptr_t>(hi) + static_cast<std::uintptr_t>(esize) - 1};
}

// True when input `in` (broadcast onto out's shape) reads each element at exactly the address
// where out writes the same element, with the same element size: an elementwise op may then run in
// place, as every element is read before it is written.
bool same_elements(const TensorView& in, const MutableTensorView& out) {
  if (in.data != out.data || dtype_size(in.dtype) != dtype_size(out.dtype)) return false;
  const int r = out.shape.rank;
  for (int d = 0; d < r; ++d) {
    if (out.shape[d] <= 1) continue;
    const int i = d - (r - in.shape.rank);
    const std::int64_t in_stride = (i < 0 || in.shape[i] == 1) ? 0 : in.strides[i];
    if (in_stride != out.strides[d]) return false;
  }
  return true;
}

}  // namespace

bool output_overlaps_inputs(const ElementwiseCall& call) {
  const ByteRange o = byte_range(call.out.data, call.out);
  for (const TensorView& in : call.inputs) {
    if (in.numel() == 0) continue;
    const ByteRange r = byte_range(in.data, in);
    if (r.last < o.first || o.last < r.first) continue;
    if (!same_elements(in, call.out)) return true;
  }
  return false;
}

void copy_into(const unsigned char* src, const MutableTensorView& out) {
  convert_into(TensorView(src, out.dtype, out.shape, contiguous_strides(out.shape)), out);
}

void convert_into(const TensorView& from, const MutableTensorView& out) {
  if (!out.device.is_cpu()) {
    convert_into_on_device(from, out);
    return;
  }
  // The engine converts `from` to out's dtype on the way in; the kernel only moves bytes.
  const std::array<TensorView, 1> inputs{from};
  const std::array<DType, 1> kernel_dtypes{out.dtype};
  ElementwiseCall copy;
  copy.inputs = inputs;
  copy.kernel_dtypes = kernel_dtypes;
  copy.out = out;
  copy.kernel_out_dtype = out.dtype;
  const std::size_t esize = dtype_size(out.dtype);
  copy.params = &esize;
  copy.kernel = [](const void* params, const RowArgs& a) {
    const std::size_t size = *static_cast<const std::size_t*>(params);
    const auto* in = static_cast<const unsigned char*>(a.in[0]);
    auto* dst = static_cast<unsigned char*>(a.out);
    if (a.is_broadcast(0)) {
      for (std::int64_t j = 0; j < a.n; ++j) std::memcpy(dst + static_cast<std::size_t>(j) * size, in, size);
    } else {
      std::memcpy(dst, in, static_cast<std::size_t>(a.n) * size);
    }
  };
  run_elementwise(copy);
}

bool views_overlap(const void* a_data, const Layout& a, const void* b_data, const Layout& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const ByteRange ra = byte_range(a_data, a), rb = byte_range(b_data, b);
  return !(ra.last < rb.first || rb.last < ra.first);
}

void run_elementwise(const ElementwiseCall& call) {
  if (call.inputs.size() > static_cast<std::size_t>(kMaxOperands) || call.inputs.size() != call.kernel_dtypes.size()) {
    throw Error(ErrorKind::kValue, "internal: bad operand count");
  }
  if (!call.out.device.is_cpu()) {  // families have checked their operands' devices (op_device)
    run_elementwise_on_device(call, call.out.device);
    return;
  }
  for (const TensorView& v : call.inputs) {
    if (!v.device.is_cpu()) {
      throw Error(ErrorKind::kValue, "out is on cpu but an operand is on " + v.device.str() +
                                         " (the output must be on the inputs' device)");
    }
  }
  const std::int64_t total = call.out.numel();
  if (total == 0) return;
  if (output_overlaps_inputs(call)) {
    // Compute into a private contiguous buffer, then copy it over the overlapping output.
    std::vector<unsigned char> buffer(static_cast<std::size_t>(total) * dtype_size(call.out.dtype));
    ElementwiseCall buffered = call;
    buffered.out = MutableTensorView(buffer.data(), call.out.dtype, call.out.shape);
    run_elementwise(buffered);
    copy_into(buffer.data(), call.out);
    return;
  }
  const Plan plan = make_plan(call);
  const Runner runner(call, plan);
  parallel_for(total, kParallelGrain, [&](std::int64_t b, std::int64_t e) { runner.run_range(b, e); });
}

}  // namespace polyquant::detail
