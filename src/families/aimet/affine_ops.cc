// AIMET's affine ops: argument checks with AIMET's messages and exception classes, the working
// precision rule, the parameter layout (broadcast or blocked, both as broadcasting over a view of
// x with each blocked dimension split in two), the no-grad shortcut's eligibility, and the
// gradients' reduction. Numerics are the kernels' (families/aimet/kernels.h).
#include <algorithm>
#include <array>
#include <bit>
#include <bitset>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device_elementwise.h"
#include "core/elementwise.h"
#include "core/exact_sums.h"
#include "core/parallel.h"
#include "core/scalar_math.h"
#include "kernels/registry.h"
#include "polyquant/aimet.h"
#include "polyquant/error.h"

namespace polyquant::aimet {
namespace {

using detail::AffineKind;
using detail::QuotientRounding;
using detail::WorkType;

[[noreturn]] void runtime_error(const std::string& message) { throw Error(ErrorKind::kRuntime, message); }

std::string shape_str(const Dims& d) {
  // torch.Size([2, 3]), as AIMET's messages print shapes
  std::string s = "torch.Size([";
  for (int i = 0; i < d.rank; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "])";
}

bool is_affine_dtype(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

void require_float(const TensorView& v, const char* op, const char* name) {
  if (!is_affine_dtype(v.dtype)) {
    throw Error(ErrorKind::kType, std::string(op) + ": " + name + " has dtype " + dtype_name(v.dtype) +
                                      "; allowed: float16, bfloat16, float32, float64");
  }
}

// ---- working precision (torch_builtins._is_value_representable / _is_numerically_stable) --------
int mantissa_bits(DType t) {
  switch (t) {
    case DType::kFloat16: return 10;
    case DType::kBFloat16: return 7;
    case DType::kFloat32: return 23;
    default: return 52;
  }
}
double finfo_max(DType t) {
  switch (t) {
    case DType::kFloat16: return 65504.0;
    case DType::kBFloat16: return 3.3895313892515355e38;
    case DType::kFloat32: return static_cast<double>(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}
double finfo_eps(DType t) { return std::ldexp(1.0, -mantissa_bits(t)); }

int bit_length(unsigned __int128 v) {
  int n = 0;
  while (v != 0) {
    ++n;
    v >>= 1;
  }
  return n;
}

// An integer is exact in `t` when it lies within the finite range and its highest and lowest set
// bits are at most the mantissa width apart.
bool value_representable(DType t, __int128 value) {
  const double mag = static_cast<double>(value);
  if (mag < -finfo_max(t) || mag > finfo_max(t)) return false;
  const unsigned __int128 a = value < 0 ? static_cast<unsigned __int128>(-value) : static_cast<unsigned __int128>(value);
  const int msb = std::max(0, bit_length(a) - 1);
  const int lsb = std::max(0, bit_length(a & (~a + 1)) - 1);
  return msb - lsb <= mantissa_bits(t);
}

bool grid_representable(DType t, const Grid& g) {
  const __int128 lo = g.qmin, hi = g.qmax;
  return value_representable(t, hi) && value_representable(t, hi - 1) && value_representable(t, lo + 1) &&
         value_representable(t, lo);
}

bool numerically_stable(DType t, const Grid& g) {
  if (!grid_representable(t, g)) return false;
  if (g.qmin == g.qmax) return true;
  const double steps = static_cast<double>(static_cast<__int128>(g.qmax) - static_cast<__int128>(g.qmin));
  return !(finfo_eps(t) > 0.25 / steps);
}

// x's dtype, else float32, else float64 (stability), as quantize / quantize_dequantize choose it.
DType working_dtype(DType x, const Grid& g) {
  if (numerically_stable(x, g)) return x;
  if (numerically_stable(DType::kFloat32, g)) return DType::kFloat32;
  return DType::kFloat64;
}

struct Work {
  WorkType work;            // kernel
  DType kernel_dtype;       // operands as the kernel reads them
  QuotientRounding narrow;  // float16 / bfloat16 precision inside the float32 kernel
};
Work work_for(DType w) {
  switch (w) {
    case DType::kFloat16: return {WorkType::kF32, DType::kFloat32, QuotientRounding::kFloat16};
    case DType::kBFloat16: return {WorkType::kF32, DType::kFloat32, QuotientRounding::kBFloat16};
    case DType::kFloat32: return {WorkType::kF32, DType::kFloat32, QuotientRounding::kNone};
    default: return {WorkType::kF64, DType::kFloat64, QuotientRounding::kNone};
  }
}

// Appends instead of `"[" + std::to_string(...)`: GCC 12 reports a false -Wrestrict on
// operator+(const char*, std::string&&) once this is inlined (GCC bug 105329).
std::string grid_str(const Grid& g) {
  std::string s = "[";
  s += std::to_string(g.qmin);
  s += ", ";
  s += std::to_string(g.qmax);
  s += "]";
  return s;
}

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::kFloat16: return "torch.float16";
    case DType::kBFloat16: return "torch.bfloat16";
    case DType::kFloat32: return "torch.float32";
    default: return "torch.float64";
  }
}

// ---- parameter layout --------------------------------------------------------------------------
// x (and out) viewed for the engine, with the parameters as broadcasting views of the same rank.
// `acc_strides`: for the gradients' sums, each parameter's element index over that rank (0 where
// a dimension is broadcast).
struct AffineLayout {
  Dims shape;                 // the engine's shape
  Dims x_strides;             // x over `shape`
  std::array<TensorView, 2> params;  // scale, offset over `shape` (stride 0 where broadcast)
  std::array<Dims, 2> acc_strides;   // row-major index of the parameter's own elements
  std::array<std::int64_t, kMaxRank> split{};  // per x dim: 0, or the block length it is split by
};

// Whether `src` expands to `dst` (aimet_torch.utils._is_expandable): right-aligned, each dim 1 or equal.
bool expandable(const Dims& src, const Dims& dst) {
  if (src.rank > dst.rank) return false;
  for (int i = 1; i <= src.rank; ++i) {
    const std::int64_t s = src[src.rank - i];
    if (s != 1 && s != dst[dst.rank - i]) return false;
  }
  return true;
}

// Validates the block size and returns it concretized (-1 -> x's size / scale's size).
std::vector<std::int64_t> concretize_blocks(const Dims& x, const Dims& scale, std::span<const std::int64_t> block_size) {
  if (static_cast<int>(block_size.size()) != scale.rank) {
    std::string b = "(";
    for (std::size_t i = 0; i < block_size.size(); ++i) b += (i ? ", " : "") + std::to_string(block_size[i]);
    b += block_size.size() == 1 ? ",)" : ")";
    runtime_error("Length of scale shape " + shape_str(scale) + " must equal length of block size " + b +
                  " (block_size: one entry per scale dimension)");
  }
  if (scale.rank > x.rank) {
    runtime_error("block_size: input shape " + shape_str(x) + " must have at least as many dimensions as scale shape " +
                  shape_str(scale));
  }
  std::vector<std::int64_t> blocks(block_size.begin(), block_size.end());
  for (int i = 1; i <= scale.rank; ++i) {
    const std::int64_t xd = x[x.rank - i], sd = scale[scale.rank - i];
    std::int64_t& b = blocks[blocks.size() - static_cast<std::size_t>(i)];
    if (b == -1) {
      if (sd == 0 || xd % sd != 0) {
        runtime_error("Each tensor dimension size for tensor shape " + shape_str(x) +
                      " must divide evenly with corresponding scale dimension value for scale shape " + shape_str(scale) +
                      " (block_size -1)");
      }
      b = xd / sd;
    } else if (b <= 0 || b * sd != xd) {
      std::string bs = "[";
      for (std::size_t k = 0; k < block_size.size(); ++k) bs += (k ? ", " : "") + std::to_string(block_size[k]);
      runtime_error("Each tensor dimension size for tensor shape " + shape_str(x) +
                    " must equal the corresponding scale dimension size * block size for scale shape " + shape_str(scale) +
                    " and block size " + bs + "] (block_size: positive entries or -1)");
    }
  }
  return blocks;
}

// A parameter view over `shape`: `param_dim_of[k]` is the parameter dimension engine dimension k
// reads (-1: none, broadcast).
void place_param(const TensorView& p, const Dims& shape, const std::vector<int>& scale_dim_of, int scale_rank,
                 TensorView& view, Dims& acc) {
  view = p;
  view.shape.rank = view.strides.rank = acc.rank = shape.rank;
  const Dims own = contiguous_strides(p.shape);
  for (int k = 0; k < shape.rank; ++k) {
    // The parameter's dims align right with the scale's.
    const int sd = scale_dim_of[static_cast<std::size_t>(k)];
    const int pd = sd < 0 ? -1 : sd - (scale_rank - p.shape.rank);
    if (pd < 0 || p.shape[pd] == 1) {
      view.shape[k] = 1;
      view.strides[k] = 0;
      acc[k] = 0;
    } else {
      view.shape[k] = p.shape[pd];
      view.strides[k] = p.strides[pd];
      acc[k] = own[pd];
    }
  }
}

AffineLayout make_layout(const TensorView& x, const TensorView& scale, const TensorView& offset,
                         std::span<const std::int64_t> block_size) {
  AffineLayout L;
  std::vector<int> scale_dim_of;  // engine dim -> scale dim, or -1
  int scale_rank;
  if (!block_size.empty()) {
    const std::vector<std::int64_t> blocks = concretize_blocks(x.shape, scale.shape, block_size);
    if (!expandable(offset.shape, scale.shape)) {
      runtime_error("offset of shape " + shape_str(offset.shape) + " must have scale's shape " + shape_str(scale.shape) +
                    " (or broadcast to it)");
    }
    const int lead = x.shape.rank - scale.shape.rank;
    std::vector<std::int64_t> shape, strides;
    for (int i = 0; i < lead; ++i) {
      shape.push_back(x.shape[i]);
      strides.push_back(x.strides[i]);
      scale_dim_of.push_back(-1);
    }
    for (int i = 0; i < scale.shape.rank; ++i) {
      const std::int64_t n = scale.shape[i], b = blocks[static_cast<std::size_t>(i)], st = x.strides[lead + i];
      if (n == 1 || b == 1) {  // one block (the parameter broadcasts) or blocks of one (per index)
        shape.push_back(x.shape[lead + i]);
        strides.push_back(st);
        scale_dim_of.push_back(n == 1 ? -1 : i);
      } else {  // (n, b): the block index, then the position inside the block
        L.split[static_cast<std::size_t>(lead + i)] = b;
        shape.push_back(n);
        strides.push_back(b * st);
        scale_dim_of.push_back(i);
        shape.push_back(b);
        strides.push_back(st);
        scale_dim_of.push_back(-1);
      }
    }
    if (static_cast<int>(shape.size()) > kMaxRank) {
      runtime_error("block_size: x of rank " + std::to_string(x.shape.rank) + " with " + std::to_string(shape.size() - x.shape.rank) +
                    " blocked dimensions needs " + std::to_string(shape.size()) + " dimensions; at most " +
                    std::to_string(kMaxRank) + " are supported");
    }
    L.shape = Dims(std::span<const std::int64_t>(shape));
    L.x_strides = Dims(std::span<const std::int64_t>(strides));
    scale_rank = scale.shape.rank;
  } else {
    if (!expandable(scale.shape, x.shape)) {
      std::string msg = "Scale of shape " + shape_str(scale.shape) + " cannot be expanded like input tensor of shape " +
                        shape_str(x.shape) + ". ";
      if (x.numel() == 0) msg += "Detected that the tensor is empty.";
      runtime_error(msg);
    }
    if (!expandable(offset.shape, x.shape)) {
      runtime_error("Offset of shape " + shape_str(offset.shape) + " cannot be expanded like input tensor of shape " +
                    shape_str(x.shape) + ".");
    }
    L.shape = x.shape;
    L.x_strides = x.strides;
    for (int k = 0; k < x.shape.rank; ++k) scale_dim_of.push_back(k);
    scale_rank = x.shape.rank;
  }
  place_param(scale, L.shape, scale_dim_of, scale_rank, L.params[0], L.acc_strides[0]);
  place_param(offset, L.shape, scale_dim_of, scale_rank, L.params[1], L.acc_strides[1]);
  return L;
}

// A tensor of x's shape (out, grad_output) viewed like x in `layout`.
Dims strides_like_x(const Dims& strides, const AffineLayout& L) {
  Dims v;
  v.rank = 0;
  for (int i = 0; i < strides.rank; ++i) {
    const std::int64_t b = L.split[static_cast<std::size_t>(i)];
    if (b == 0) {
      v[v.rank++] = strides[i];
    } else {  // (n, b)
      v[v.rank++] = b * strides[i];
      v[v.rank++] = strides[i];
    }
  }
  return v;
}
MutableTensorView out_view(const MutableTensorView& out, const AffineLayout& L) {
  MutableTensorView v = out;
  v.shape = L.shape;
  v.strides = strides_like_x(out.strides, L);
  return v;
}

void require_output(const MutableTensorView& out, const TensorSpec& spec, const char* op, const char* name = "out") {
  if (!(out.shape == spec.shape) || out.dtype != spec.dtype) {
    throw Error(ErrorKind::kValue, std::string(op) + ": " + name + " must have shape " + spec.shape.str() + " and dtype " +
                                       dtype_name(spec.dtype) + " (got " + out.shape.str() + ", " + dtype_name(out.dtype) + ")");
  }
}

void check_grid(const Grid& g) {
  if (g.qmin > g.qmax) {
    runtime_error("qmin (" + std::to_string(g.qmin) + ") must be smaller than or equal to qmax (" + std::to_string(g.qmax) + ")");
  }
}

// Whether an op runs on CUDA devices as well (docs/cuda.md lists the ops that do).
enum class Devices { kHostOnly, kHostOrCuda };

void check_common(const char* op, const TensorView& x, const TensorView& scale, const TensorView& offset,
                  Devices devices = Devices::kHostOrCuda) {
  const detail::NamedView operands[] = {{&x, "tensor"}, {&scale, "scale"}, {&offset, "offset"}};
  if (devices == Devices::kHostOrCuda) detail::op_device(operands, nullptr, op);
  else detail::require_host(operands, op);
  require_float(x, op, "tensor");
  require_float(scale, op, "scale");
  require_float(offset, op, "offset");
}

// Runs an affine kernel over x and the parameters of `layout`.
void run_affine(const AffineLayout& L, const TensorView& x, const MutableTensorView& out, const Work& w,
                detail::KernelOp op, const void* params, std::span<const DType> param_dtypes) {
  TensorView xv = x;
  xv.shape = L.shape;
  xv.strides = L.x_strides;
  const std::array<TensorView, 3> inputs{xv, L.params[0], L.params[1]};
  const std::array<DType, 3> dtypes{w.kernel_dtype, param_dtypes[0], param_dtypes[1]};
  detail::ElementwiseCall call;
  call.inputs = inputs;
  call.kernel_dtypes = dtypes;
  call.out = out_view(out, L);
  call.kernel_out_dtype = w.kernel_dtype;
  call.kernel = detail::best_kernel(op, w.work);
  call.op = op;
  call.work = w.work;
  call.params = params;
  call.per_row_operands = op == detail::KernelOp::kAffine;  // blocked parameters passed compact
  call.repeated_row_operands = true;                        // per-channel parameters, channels last
  detail::run_elementwise(call);
}

// ---- the no-grad shortcut ----------------------------------------------------------------------
// -offset.to(torch.int32): truncation toward zero; NaN, infinities and values beyond int32 convert
// to INT32_MIN (x86), whose negation wraps to itself.
double zero_point_of(double offset) {
  std::int32_t t;
  if (!(offset > -2147483649.0 && offset < 2147483648.0)) t = std::numeric_limits<std::int32_t>::min();
  else t = static_cast<std::int32_t>(offset);
  const auto neg = static_cast<std::int32_t>(static_cast<std::uint32_t>(0) - static_cast<std::uint32_t>(t));
  return static_cast<double>(neg);
}

struct Shortcut {
  bool taken = false;
  bool per_channel = false;
  int axis = 0;
};

Shortcut shortcut_for(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args,
                      std::vector<double>* zero_points) {
  Shortcut s;
  if (!args.block_size.empty()) return s;
  // The zero points decide the path: offsets on a device are copied back once (torch's own check
  // of them synchronises too).
  std::vector<unsigned char> storage;
  const TensorView offset_values = detail::host_readable(offset, storage);
  const auto fill = [&] {
    if (zero_points == nullptr) return;
    zero_points->resize(static_cast<std::size_t>(offset.numel()));
    for (std::int64_t i = 0; i < offset.numel(); ++i) (*zero_points)[static_cast<std::size_t>(i)] = zero_point_of(detail::read_as_double(offset_values, i));
  };
  if (scale.numel() == 1 && offset.numel() == 1) {
    s.taken = true;
    fill();
    return s;
  }
  // Left-padded to x's rank, equal shapes, each dim 1 or x's, exactly one non-singleton axis.
  const int rank = x.shape.rank;
  if (scale.shape.rank > rank || offset.shape.rank > rank) return s;
  auto padded = [&](const Dims& d, int k) { const int i = k - (rank - d.rank); return i < 0 ? std::int64_t{1} : d[i]; };
  int axes = 0;
  for (int k = 0; k < rank; ++k) {
    const std::int64_t sd = padded(scale.shape, k), od = padded(offset.shape, k);
    if (sd != od) return s;
    if (sd != 1 && sd != x.shape[k]) return s;
    if (sd != 1) {
      ++axes;
      s.axis = k;
    }
  }
  if (axes != 1) return s;
  // torch.fake_quantize_per_channel_affine raises for a zero point outside [qmin, qmax]; AIMET
  // then falls back to the formula.
  std::vector<double> zp(static_cast<std::size_t>(offset.numel()));
  for (std::int64_t i = 0; i < offset.numel(); ++i) {
    zp[static_cast<std::size_t>(i)] = zero_point_of(detail::read_as_double(offset_values, i));
    if (zp[static_cast<std::size_t>(i)] < static_cast<double>(args.grid.qmin) ||
        zp[static_cast<std::size_t>(i)] > static_cast<double>(args.grid.qmax)) {
      return s;
    }
  }
  s.taken = true;
  s.per_channel = true;
  if (zero_points != nullptr) *zero_points = std::move(zp);
  return s;
}

void run_shortcut(const TensorView& x, const TensorView& scale, const TensorView& offset, const Grid& grid,
                  const Shortcut& s, const std::vector<double>& zero_points, const MutableTensorView& out,
                  const TensorView* grad_output = nullptr) {
  detail::FakeQuantizeParams p;
  p.per_channel = s.per_channel;
  p.qmin = grid.qmin;
  p.qmax = grid.qmax;
  constexpr double kExact = 8388608.0;  // 2^23
  p.canonical_nan = x.dtype == DType::kBFloat16;
  p.exact_in_float = std::abs(static_cast<double>(p.qmin)) <= kExact && std::abs(static_cast<double>(p.qmax)) <= kExact &&
                     std::all_of(zero_points.begin(), zero_points.end(), [&](double z) { return std::abs(z) <= kExact; });
  // The zero points as a contiguous tensor of the offset's shape: float32 when every one is exact
  // in it (the vector kernels read them so, with no conversion per row), else float64.
  p.zero_point_f32 = p.exact_in_float;
  const std::vector<float> zero_points_f32(zero_points.begin(), zero_points.end());
  const TensorView zp = p.zero_point_f32 ? TensorView(zero_points_f32.data(), DType::kFloat32, offset.shape)
                                         : TensorView(zero_points.data(), DType::kFloat64, offset.shape);
  const AffineLayout L = make_layout(x, scale, zp, {});
  const Work w = x.dtype == DType::kFloat64 ? Work{WorkType::kF64, DType::kFloat64, QuotientRounding::kNone}
                                            : Work{WorkType::kF32, DType::kFloat32, QuotientRounding::kNone};
  const std::array<DType, 2> param_dtypes{DType::kFloat32, p.zero_point_f32 ? DType::kFloat32 : DType::kFloat64};
  if (grad_output == nullptr) {
    run_affine(L, x, out, w, detail::KernelOp::kFakeQuantize, &p, param_dtypes);
    return;
  }
  p.gradient = true;
  p.canonical_nan = false;
  TensorView xv = x, gv = *grad_output;
  xv.shape = gv.shape = L.shape;
  xv.strides = L.x_strides;
  gv.strides = strides_like_x(grad_output->strides, L);
  const std::array<TensorView, 4> inputs{xv, L.params[0], L.params[1], gv};
  const std::array<DType, 4> dtypes{w.kernel_dtype, DType::kFloat32, param_dtypes[1], w.kernel_dtype};
  detail::ElementwiseCall call;
  call.inputs = inputs;
  call.kernel_dtypes = dtypes;
  call.out = out_view(out, L);
  call.kernel_out_dtype = w.kernel_dtype;
  call.kernel = detail::best_kernel(detail::KernelOp::kFakeQuantize, w.work);
  call.op = detail::KernelOp::kFakeQuantize;
  call.work = w.work;
  call.params = &p;
  call.repeated_row_operands = true;
  detail::run_elementwise(call);
}

// ---- gradients ---------------------------------------------------------------------------------
// grad_scale and grad_offset sum per-element terms over the elements that share a parameter
// element. Each sum is exact and rounded once: to float32 where the terms are float32 (the float32
// kernel: float32, float16 and bfloat16 working precision; the result is then rounded to float16 /
// bfloat16 as torch's cast back does), to float64 for float64 terms. An exact sum does not depend
// on the order of its terms, so the threads, the vector lanes and (later) the GPU may split it
// any way and still give the same bits; it is also the most accurate value any order could give.
// torch sums in the working precision in an order of its own, which no other implementation
// reproduces (docs/aimet.md: departures).
//
// The sign of a zero follows torch's autograd: the per-element gradient has x's shape (split into
// blocks) and is reduced to the parameter's with sum_to, which sums only when the shapes differ.
// An exact zero sum is +0.0 (as torch's sum from +0.0 gives it: -0.0 + -0.0, a sum over one
// element of a size-1 leading dimension and an empty sum all give +0.0); with equal shapes and no
// blocks (`no_reduction`: per-element parameters) there is no sum and each element keeps its own
// value, -0.0 and a NaN's bits included. Blocks of one are summed (+0.0), as aimet-torch does. A
// NaN sum (a NaN term, or +inf and -inf) is the quiet NaN 0x7FC00000 / 0x7FF8000000000000.

// The parameters' values in the working precision, through a float64 tensor of the parameter's
// shape, into `out` (float16 / bfloat16 working precision: the float32 sum rounded once more).
void write_sums(std::vector<double>& sums, DType g_dtype, QuotientRounding narrow, const TensorView& param,
                const MutableTensorView& out) {
  if (g_dtype == DType::kFloat32) {
    for (double& a : sums) a = static_cast<double>(detail::narrow_to<float>(static_cast<float>(a), narrow));
  }
  detail::convert_into(TensorView(sums.data(), DType::kFloat64, param.shape), out);
}

// Visits every element of the engine's shape in C order with the index of its parameter element
// (`strides`: the parameter's element strides over the engine's shape).
template <class F>
void for_each_target(const Dims& shape, const Dims& strides, F&& visit) {
  const std::int64_t n = shape.numel();
  std::array<std::int64_t, kMaxRank> idx{};
  std::int64_t target = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    visit(e, target);
    for (int k = shape.rank - 1; k >= 0; --k) {  // odometer over the engine's shape
      if (++idx[static_cast<std::size_t>(k)] < shape[k]) {
        target += strides[k];
        break;
      }
      target -= strides[k] * (shape[k] - 1);
      idx[static_cast<std::size_t>(k)] = 0;
    }
  }
}

// The exact sums of per-element values `g` (contiguous over layout.shape, T = float or double)
// per parameter element: the values sorted by parameter element (a counting sort), then each
// element's run summed exactly and rounded once. Any layout (transposed parameters, strided x,
// float64 working precision); the fused walk below is the fast path.
template <class T>
std::vector<double> exact_sums_per_target(const T* g, const AffineLayout& L, int which, std::int64_t targets) {
  using Acc = std::conditional_t<sizeof(T) == 4, detail::ExactSumFloat32, detail::ExactSumFloat64>;
  const Dims& strides = L.acc_strides[static_cast<std::size_t>(which)];
  std::vector<std::int64_t> first(static_cast<std::size_t>(targets) + 1, 0);
  for_each_target(L.shape, strides, [&](std::int64_t, std::int64_t t) { ++first[static_cast<std::size_t>(t) + 1]; });
  for (std::size_t t = 0; t < static_cast<std::size_t>(targets); ++t) first[t + 1] += first[t];
  std::vector<T> sorted(static_cast<std::size_t>(L.shape.numel()));
  std::vector<std::int64_t> next(first.begin(), first.end() - 1);
  for_each_target(L.shape, strides, [&](std::int64_t e, std::int64_t t) {
    sorted[static_cast<std::size_t>(next[static_cast<std::size_t>(t)]++)] = g[e];
  });
  std::vector<double> sums(static_cast<std::size_t>(targets));
  for (std::size_t t = 0; t < sums.size(); ++t) {
    sums[t] = static_cast<double>(detail::ExactSums<Acc>::template sum_of<T>(sorted.data() + first[t], first[t + 1] - first[t]));
  }
  return sums;
}

// Sums per-element values `g` (contiguous over layout.shape, dtype float32 or float64) into the
// parameter's elements, then writes them rounded to `out`'s dtype.
void reduce_into(const std::vector<unsigned char>& g, DType g_dtype, QuotientRounding narrow, const AffineLayout& L,
                 int which, const TensorView& param, bool no_reduction, const MutableTensorView& out) {
  const std::int64_t targets = std::max<std::int64_t>(param.numel(), 1);
  std::vector<double> sums;
  if (no_reduction) {  // each parameter element has its one term: the term itself
    sums.assign(static_cast<std::size_t>(targets), 0.0);
    for_each_target(L.shape, L.acc_strides[static_cast<std::size_t>(which)], [&](std::int64_t e, std::int64_t t) {
      sums[static_cast<std::size_t>(t)] = g_dtype == DType::kFloat32 ? static_cast<double>(reinterpret_cast<const float*>(g.data())[e])
                                                                     : reinterpret_cast<const double*>(g.data())[e];
    });
  } else if (g_dtype == DType::kFloat32) {
    sums = exact_sums_per_target(reinterpret_cast<const float*>(g.data()), L, which, targets);
  } else {
    sums = exact_sums_per_target(reinterpret_cast<const double*>(g.data()), L, which, targets);
  }
  write_sums(sums, g_dtype, narrow, param, out);
}

// ---- the backward in one pass ------------------------------------------------------------------
// reduce_into's sums without its per-element buffers: where x, grad_output and grad_x are
// C-contiguous and the working precision runs in the float32 kernel, x is walked once, in chunks
// of the engine's shape's innermost run. Each chunk's operands are read from memory once (and
// converted to float32 once, for float16 / bfloat16 / float64 tensors); the kernel's three calls
// on it (scale terms, offset terms, then grad_x) and the exact-sums kernel (kernels/reduce:
// float64 accumulators that take a term only where the add is exact, spilling otherwise) work
// out of the L1 cache. The accumulators and spills become contributions (parameter element, exact
// float64 value), which core/exact_sums.h adds and rounds once: the result is reduce_into's, bit
// for bit, for any split between threads.

// Elements per chunk: the chunk's operands, terms and conversions stay in the L1 cache.
constexpr std::int64_t kGradChunk = 2048;
// Short runs batched into one chunk: at most this many (each an exact-sums segment, whose spills
// need room: detail::exact_sums_spill_room).
constexpr std::int64_t kMaxSegments = 128;
// Parameter elements per task when the exact sums are rounded into a float32 gradient.
constexpr std::int64_t kRoundingGrain = 16384;

// The engine's shape for the walk: the innermost run (the trailing dimensions along which both
// parameters' element indices advance by a fixed 0 or 1 per element, merged) and the dimensions
// outside it.
struct GradWalk {
  std::int64_t run = 1;                        // elements of the innermost run
  std::array<std::int64_t, 2> run_stride{};    // parameter index step along the run: 0 or 1
  int outer_rank = 0;
  std::array<std::int64_t, kMaxRank> outer_shape{};
  std::array<std::array<std::int64_t, kMaxRank>, 2> outer_stride{};  // parameter index steps
};

// The walk of `L`, or false where a parameter's index advances along the run by neither 0 nor 1
// (a transposed parameter: reduce_into's odometer handles those).
bool make_walk(const AffineLayout& L, GradWalk& w) {
  int k = L.shape.rank - 1;
  while (k >= 0 && L.shape[k] == 1) --k;  // size-1 dimensions move no index
  if (k < 0) return true;                 // one element
  w.run = L.shape[k];
  for (int p = 0; p < 2; ++p) w.run_stride[static_cast<std::size_t>(p)] = L.acc_strides[static_cast<std::size_t>(p)][k];
  for (int p = 0; p < 2; ++p) {
    if (w.run_stride[static_cast<std::size_t>(p)] != 0 && w.run_stride[static_cast<std::size_t>(p)] != 1) return false;
  }
  for (--k; k >= 0; --k) {
    if (L.shape[k] == 1) continue;
    const bool merges = L.acc_strides[0][k] == w.run_stride[0] * w.run && L.acc_strides[1][k] == w.run_stride[1] * w.run;
    if (!merges) break;
    w.run *= L.shape[k];
  }
  for (int d = 0; d <= k; ++d) {
    if (L.shape[d] == 1) continue;
    w.outer_shape[static_cast<std::size_t>(w.outer_rank)] = L.shape[d];
    for (int p = 0; p < 2; ++p) w.outer_stride[static_cast<std::size_t>(p)][static_cast<std::size_t>(w.outer_rank)] = L.acc_strides[static_cast<std::size_t>(p)][d];
    ++w.outer_rank;
  }
  return true;
}

// Exact float64 values owed to parameter elements: what one task of the walk leaves for the final
// sums.
using Contributions = std::vector<std::pair<std::int64_t, double>>;

// The 32 lane accumulators of a run (ExactSumsParams' whole-run mode) as contributions to
// `target`: folded pairwise where the adds are exact (exact_sums_fold_lanes; the common case leaves
// one value), each add that would round contributing its left operand instead. Clears the lanes.
void contribute_lanes(double* lanes, std::int64_t target, Contributions& out) {
  double spill_value[detail::kExactSumVirtualLanes];
  std::int32_t spill_index[detail::kExactSumVirtualLanes];
  std::int64_t spills = 0;
  detail::ExactSumsParams p;
  p.spill_value = spill_value;
  p.spill_index = spill_index;
  p.spill_count = &spills;
  const double folded = detail::exact_sums_fold_lanes(lanes, 0, p);
  for (std::int64_t i = 0; i < spills; ++i) out.emplace_back(target, spill_value[i]);
  if (folded != 0.0) out.emplace_back(target, folded);  // an exact zero adds nothing
  std::fill(lanes, lanes + detail::kExactSumVirtualLanes, 0.0);
}

bool byte_ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// Whether distinct runs of the walk feed distinct elements of parameter k: no dimension outside
// the run broadcasts it (stride 0), and the strides, smallest first, each pass every element the
// smaller ones reach (no two index combinations meet). AIMET's blocks along the last axis: each
// run is one block, its own element.
bool runs_own_elements(const GradWalk& w, std::size_t k) {
  std::array<std::pair<std::int64_t, std::int64_t>, kMaxRank> dims{};  // (|stride|, extent)
  const auto rank = static_cast<std::size_t>(w.outer_rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t stride = w.outer_stride[k][d];
    if (stride == 0) return false;
    dims[d] = {stride < 0 ? -stride : stride, w.outer_shape[d]};
  }
  std::sort(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(rank));
  std::int64_t reach = 0;  // the largest index the smaller strides give
  for (std::size_t d = 0; d < rank; ++d) {
    if (dims[d].first <= reach) return false;
    reach += dims[d].first * (dims[d].second - 1);
  }
  return true;
}

// The gradients in one pass, or false (nothing written) where the layout or the dtypes are not
// this walk's: the caller then runs the kernel per gradient and reduce_into.
bool fused_backward(const AffineLayout& L, const Work& w, detail::AffineGradParams p, const TensorView& grad_output,
                    const TensorView& x, const TensorView& scale, const TensorView& offset, bool no_reduction,
                    const MutableTensorView& grad_x, const MutableTensorView& grad_scale,
                    const MutableTensorView& grad_offset, const MutableTensorView& output) {
  if (w.kernel_dtype != DType::kFloat32 || !x.is_contiguous() || !grad_output.is_contiguous()) return false;
  const bool want_x = grad_x.data != nullptr, want_value = output.data != nullptr;
  const std::array<bool, 2> want{grad_scale.data != nullptr, grad_offset.data != nullptr};
  const std::int64_t n = x.numel();
  if (n == 0) return false;
  if (want_value && !(want_x && want[0] && want[1])) return false;  // the forward rides on the all-gradients pass
  // Outputs written chunk by chunk must be contiguous and clear of the inputs they would overwrite.
  for (const MutableTensorView* o : {&grad_x, &output}) {
    if (o->data == nullptr) continue;
    if (!o->is_contiguous()) return false;
    const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(o->dtype);
    if (byte_ranges_overlap(o->data, bytes, x.data, static_cast<std::size_t>(n) * dtype_size(x.dtype)) ||
        byte_ranges_overlap(o->data, bytes, grad_output.data, static_cast<std::size_t>(n) * dtype_size(grad_output.dtype))) {
      return false;
    }
  }
  GradWalk walk;
  if (!make_walk(L, walk)) return false;

  // The parameters as float32 tensors of their own shapes (as the engine converts them), indexed
  // by the sums' element indices: read in place where they are already that, else converted.
  std::array<std::vector<float>, 2> converted_params;
  std::array<const float*, 2> params{};
  std::array<std::int64_t, 2> param_count{};
  const std::array<const TensorView*, 2> views{&scale, &offset};
  const std::array<const MutableTensorView*, 4> outputs{&grad_x, &output, &grad_scale, &grad_offset};
  // Bytes from a view's first element to past its last as a contiguous tensor (the views checked
  // here: the contiguous ones this walk reads or writes in place).
  auto view_bytes = [](const auto& v) { return static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype); };
  // Whether an output other than `self` overlaps the bytes of `v` (an output is written during the
  // walk).
  auto output_overlaps = [&](const auto& v, const MutableTensorView* self = nullptr) {
    for (const MutableTensorView* o : outputs) {
      if (o != self && o->data != nullptr && byte_ranges_overlap(o->data, view_bytes(*o), v.data, view_bytes(v))) return true;
    }
    return false;
  };
  for (std::size_t k = 0; k < 2; ++k) {
    param_count[k] = std::max<std::int64_t>(views[k]->numel(), 1);
    if (views[k]->dtype == DType::kFloat32 && views[k]->is_contiguous() && views[k]->numel() > 0 && !output_overlaps(*views[k])) {
      params[k] = static_cast<const float*>(views[k]->data);
      continue;
    }
    converted_params[k].resize(static_cast<std::size_t>(param_count[k]));
    detail::convert_into(*views[k], MutableTensorView(converted_params[k].data(), DType::kFloat32, views[k]->shape));
    params[k] = converted_params[k].data();
  }
  // no_reduction: each parameter element's one term, written during the walk (no sum, no task
  // shares an element).
  std::array<std::vector<double>, 2> terms_kept;
  for (std::size_t k = 0; k < 2; ++k) {
    if (want[k] && no_reduction) terms_kept[k].assign(static_cast<std::size_t>(param_count[k]), 0.0);
  }
  std::array<Contributions, 2> contributions;
  std::mutex contributions_mutex;

  const detail::RowKernel kernel = detail::best_kernel(detail::KernelOp::kAffineGrad, w.work);
  const detail::RowKernel sum_kernel = detail::best_kernel(detail::KernelOp::kExactSums, detail::WorkType::kF32);
  const bool convert_dy = grad_output.dtype != DType::kFloat32, convert_x = x.dtype != DType::kFloat32;
  const bool convert_gx = want_x && grad_x.dtype != DType::kFloat32;
  const bool convert_value = want_value && output.dtype != DType::kFloat32;
  const bool stream = static_cast<std::size_t>(n) * sizeof(float) > (std::size_t{8} << 20);  // far beyond the caches

  // One task's buffers (each task runs on one thread).
  struct TaskBuffers {
    alignas(64) float dy[kGradChunk], x[kGradChunk], terms[2][kGradChunk], gx[kGradChunk], value[kGradChunk];
    alignas(64) double lanes[2][detail::kExactSumVirtualLanes];
    double spill_value[detail::exact_sums_spill_room(kGradChunk, kMaxSegments)];
    std::int32_t spill_index[detail::exact_sums_spill_room(kGradChunk, kMaxSegments)];
    // batched short runs: each run's parameters, parameter elements and sum
    float row_param[2][kGradChunk];
    std::int64_t row_target[2][kGradChunk];
    double segment_acc[kGradChunk];
    // the scale and offset terms' blocks, summed by the gradient kernel as it writes them
    detail::PresummedBlocks presummed[2];
    // the spills of the terms the gradient kernel adds into their columns itself (ColumnSums)
    double column_spill_value[2][kGradChunk];
    std::int32_t column_spill_index[2][kGradChunk];
  };

  // The kernel's operands for elements [e, e + cn) of the run whose parameter indices start at
  // `base`, c0 elements into it.
  auto operands = [&](TaskBuffers& b, detail::RowArgs& a, const std::array<std::int64_t, 2>& base, std::int64_t e,
                      std::int64_t c0, std::int64_t cn, std::array<std::int64_t, 2>& at) {
    const float* dy = static_cast<const float*>(grad_output.data) + e;
    if (convert_dy) {
      detail::convert_values(static_cast<const unsigned char*>(grad_output.data) + e * dtype_size(grad_output.dtype),
                             grad_output.dtype, 1, b.dy, DType::kFloat32, 1, cn);
      dy = b.dy;
    }
    const float* xs = static_cast<const float*>(x.data) + e;
    if (convert_x) {
      detail::convert_values(static_cast<const unsigned char*>(x.data) + e * dtype_size(x.dtype), x.dtype, 1, b.x,
                             DType::kFloat32, 1, cn);
      xs = b.x;
    }
    a.in[0] = dy;
    a.in[1] = xs;
    for (std::size_t k = 0; k < 2; ++k) {
      at[k] = base[k] + walk.run_stride[k] * c0;
      a.in[k + 2] = params[k] + at[k];
      if (walk.run_stride[k] == 0) a.broadcast_mask |= 1u << (k + 2);
    }
    a.n = cn;
    a.index = e;
  };
  // The parameters' element indices at the start of run r (the odometer's, from scratch).
  auto run_base = [&](std::int64_t r, std::array<std::int64_t, kMaxRank>& idx, std::array<std::int64_t, 2>& base) {
    base = {};
    for (std::int64_t rest = r, d = walk.outer_rank - 1; d >= 0; --d) {
      const auto du = static_cast<std::size_t>(d);
      idx[du] = rest % walk.outer_shape[du];
      rest /= walk.outer_shape[du];
      for (std::size_t k = 0; k < 2; ++k) base[k] += idx[du] * walk.outer_stride[k][du];
    }
  };
  auto next_run = [&](std::array<std::int64_t, kMaxRank>& idx, std::array<std::int64_t, 2>& base) {
    for (int d = walk.outer_rank - 1; d >= 0; --d) {  // odometer over the dimensions outside the run
      const auto du = static_cast<std::size_t>(d);
      if (++idx[du] < walk.outer_shape[du]) {
        for (std::size_t k = 0; k < 2; ++k) base[k] += walk.outer_stride[k][du];
        return;
      }
      for (std::size_t k = 0; k < 2; ++k) base[k] -= walk.outer_stride[k][du] * (walk.outer_shape[du] - 1);
      idx[du] = 0;
    }
  };

  // Short runs whose sums gather along the run (AIMET's blocks: one parameter element per run) go
  // `batch` runs to a kernel call: the parameters per run (RowArgs' per-row operands), the sums one
  // segment per run (ExactSumsParams::segment).
  // Both parameters must be one value per run (the kernel reads them per row), wanted or not.
  const bool short_runs = !no_reduction && walk.run <= kGradChunk / 2 && walk.run_stride[0] == 0 && walk.run_stride[1] == 0;
  const std::int64_t batch = short_runs ? std::min(kGradChunk / walk.run, kMaxSegments) : 1;
  // Both sums gather along the run (32 lanes per run, or one segment per batched run; not columns):
  // the kernel may sum the terms' blocks or segments as it writes them (ExactSumsParams::presummed).
  const bool presum = !no_reduction && walk.run_stride[0] == 0 && walk.run_stride[1] == 0;
  // Both sums per element of the run (channels last: every run adds into the same row of sums): the
  // kernel may add the terms into those sums as it writes them (ColumnSums).
  const bool sum_columns = !no_reduction && walk.run_stride[0] == 1 && walk.run_stride[1] == 1;
  static_assert(kGradChunk <= 512 * detail::PresummedBlocks::kMaxBlocks, "a chunk's blocks fit PresummedBlocks");
  static_assert(kMaxSegments <= detail::PresummedBlocks::kMaxSegments, "a chunk's segments fit PresummedBlocks");
  // Batched short runs that each own their parameter element (runs_own_elements): a segment whose
  // exact sums spilled nothing holds its element's whole sum, which the task rounds and writes
  // itself (owned_out[k]: the float32 gradient, or a float32 copy of it), as the final step would;
  // spilled segments go with their spills to the final step. That step then builds no per-element
  // sums, and the walk keeps no contribution per run. The walk writes the gradient in place where
  // it is a contiguous float32 array of the parameter's shape clear of every input and other
  // output; any other gradient (bfloat16 parameters' bfloat16 gradient, a strided or overlapping
  // view) through the copy, converted into it at the end as the final step writes its sums.
  std::array<float*, 2> owned_out{};
  std::array<std::vector<float>, 2> owned_copy;
  for (std::size_t k = 0; k < 2; ++k) {
    const MutableTensorView& out = k == 0 ? grad_scale : grad_offset;
    if (!want[k] || no_reduction || batch == 1 || !runs_own_elements(walk, k) || n / walk.run != param_count[k]) continue;
    bool in_place = out.dtype == DType::kFloat32 && out.is_contiguous() && out.numel() == param_count[k] && !output_overlaps(out, &out);
    for (const TensorView* v : {&x, &grad_output, &scale, &offset}) {
      in_place = in_place && !byte_ranges_overlap(out.data, view_bytes(out), v->data, view_bytes(*v));
    }
    if (!in_place) owned_copy[k].resize(static_cast<std::size_t>(param_count[k]));
    owned_out[k] = in_place ? static_cast<float*>(out.data) : owned_copy[k].data();
  }

  // Chunks that start aligned for streaming: where grad_x (else the forward output) is written in
  // place and streamed, a run's chunks start where that output is 64-byte aligned, the run's first
  // chunk shorter (its head, under 16 elements). Otherwise every chunk of a run misaligned so (a
  // numpy array sits 16 bytes past such a boundary) would peel a partial vector and step aside
  // from the kernel's block sums. The sums are exact, so the chunks' bounds do not change them.
  const void* aligned_output = want_x && !convert_gx ? grad_x.data : want_value && !convert_value ? output.data : nullptr;
  auto run_head = [&](std::int64_t r) -> std::int64_t {
    if (!stream || aligned_output == nullptr || batch > 1) return 0;
    const auto at = reinterpret_cast<std::uintptr_t>(static_cast<const float*>(aligned_output) + r * walk.run);
    if (at % sizeof(float) != 0) return 0;
    return static_cast<std::int64_t>((64 - at % 64) % 64 / sizeof(float));
  };
  // The chunk start after c in a run whose head is `head`: the run's chunks start at 0, then at
  // head + kGradChunk i (i >= 0).
  auto next_chunk_start = [](std::int64_t c, std::int64_t head) {
    return c < head ? head : head + ((c - head) / kGradChunk + 1) * kGradChunk;
  };

  // Elements [c_begin, c_end) of runs [r_begin, r_end), in order, with a copy of the kernel's
  // parameters (one per task), in chunks that start at the run's chunk starts (head < 0: each
  // run's own, run_head; else `head` for every run). c_begin is a chunk start. A sum along the run
  // (stride 0) gathers in 32 lane accumulators, contributed at the end of each run (batched short
  // runs: one segment each); sums across runs (stride 1: element j of the run feeds parameter
  // element base + j) gather in one accumulator per element of [c_begin, c_end), contributed
  // whenever the run's base moves and at the end.
  auto walk_runs = [&](std::int64_t r_begin, std::int64_t r_end, std::int64_t c_begin, std::int64_t c_end, std::int64_t head,
                       detail::AffineGradParams gp) {
    // Default-initialised (not make_unique's zeroing of ~190 KB per task): every buffer is written
    // before it is read, the lanes just below.
    const std::unique_ptr<TaskBuffers> buffers(new TaskBuffers);
    TaskBuffers& b = *buffers;
    std::array<Contributions, 2> mine;
    std::array<std::vector<double>, 2> columns;
    std::array<std::int64_t, 2> column_base{-1, -1};
    for (std::size_t k = 0; k < 2; ++k) {
      std::fill(std::begin(b.lanes[k]), std::end(b.lanes[k]), 0.0);
      if (want[k] && !no_reduction && walk.run_stride[k] == 1) columns[k].assign(static_cast<std::size_t>(c_end - c_begin), 0.0);
    }
    auto contribute_columns = [&](std::size_t k) {
      for (std::size_t j = 0; j < columns[k].size(); ++j) {
        if (columns[k][j] != 0.0) mine[k].emplace_back(column_base[k] + c_begin + static_cast<std::int64_t>(j), columns[k][j]);
        columns[k][j] = 0.0;
      }
    };
    std::int64_t spill_count = 0;
    detail::ExactSumsParams sp;
    sp.spill_value = b.spill_value;
    sp.spill_index = b.spill_index;
    sp.spill_count = &spill_count;
    // The chunk's columns for the kernel (sum_columns): set before each chunk, each sum's spills in
    // its own list.
    std::array<detail::ColumnSums, 2> column_sums;
    std::array<detail::ExactSumsParams, 2> column_params;
    std::array<std::int64_t, 2> column_spill_count{};
    for (std::size_t k = 0; k < 2; ++k) {
      column_params[k].per_element = true;
      column_params[k].spill_value = b.column_spill_value[k];
      column_params[k].spill_index = b.column_spill_index[k];
      column_params[k].spill_count = &column_spill_count[k];
      column_sums[k].sums = &column_params[k];
    }

    // The gradients of the chunk `a` (elements [e, e + cn)): grad_x written, then take(k) for each
    // wanted sum with its terms in b.terms[k].
    auto gradients = [&](detail::RowArgs& a, std::int64_t e, std::int64_t cn, auto&& take) {
      auto x_out = [&] {
        a.out = convert_gx ? static_cast<void*>(b.gx) : static_cast<void*>(static_cast<float*>(grad_x.data) + e);
        a.stream = stream && !convert_gx;
      };
      auto x_done = [&] {
        if (convert_gx) {
          detail::convert_values(b.gx, DType::kFloat32, 1, static_cast<unsigned char*>(grad_x.data) + e * dtype_size(grad_x.dtype),
                                 grad_x.dtype, 1, cn, stream);
        }
      };
      for (detail::PresummedBlocks& pre : b.presummed) pre.blocks = pre.segments = 0;
      if (want_x && want[0] && want[1]) {  // the usual call: all three (and the forward) in one kernel pass
        gp.of = detail::AffineGradOf::kAll;
        gp.scale_terms = b.terms[0];
        gp.offset_terms = b.terms[1];
        gp.scale_blocks = presum ? &b.presummed[0] : nullptr;
        gp.offset_blocks = presum ? &b.presummed[1] : nullptr;
        gp.scale_columns = sum_columns ? &column_sums[0] : nullptr;
        gp.offset_columns = sum_columns ? &column_sums[1] : nullptr;
        if (want_value) {
          gp.value_out = convert_value ? static_cast<void*>(b.value) : static_cast<void*>(static_cast<float*>(output.data) + e);
        }
        x_out();
        kernel(&gp, a);
        x_done();
        if (convert_value) {
          detail::convert_values(b.value, DType::kFloat32, 1, static_cast<unsigned char*>(output.data) + e * dtype_size(output.dtype),
                                 output.dtype, 1, cn, stream);
        }
        take(0);
        take(1);
        return;
      }
      for (std::size_t k = 0; k < 2; ++k) {
        if (!want[k]) continue;
        gp.of = k == 0 ? detail::AffineGradOf::kScale : detail::AffineGradOf::kOffset;
        a.out = b.terms[k];
        a.stream = false;
        kernel(&gp, a);
        take(k);
      }
      if (want_x) {
        gp.of = detail::AffineGradOf::kX;
        x_out();
        kernel(&gp, a);
        x_done();
      }
    };
    // The exact-sums kernel over terms [first, cn) of b.terms[k] into `acc` (32 lanes, columns from
    // term `first` on, or one per segment), its spills owed to target(index from `first`).
    auto sum_terms = [&](std::size_t k, std::int64_t first, std::int64_t cn, void* acc, auto&& target) {
      detail::RowArgs s;
      s.in[0] = b.terms[k] + first;
      s.n = cn - first;
      s.out = acc;
      spill_count = 0;
      sp.mostly_zeros = k == 1;  // the offset terms: zero at every element inside the grid
      sp.presummed = b.presummed[k].blocks > 0 || b.presummed[k].segments > 0 ? &b.presummed[k] : nullptr;
      sum_kernel(&sp, s);
      for (std::int64_t i = 0; i < spill_count; ++i) mine[k].emplace_back(target(b.spill_index[i]), b.spill_value[i]);
    };

    std::array<std::int64_t, kMaxRank> idx{};
    std::array<std::int64_t, 2> base{};
    run_base(r_begin, idx, base);
    if (batch > 1) {
      sp.segment = walk.run;
      for (std::int64_t r0 = r_begin; r0 < r_end; r0 += batch) {
        const std::int64_t rows = std::min(batch, r_end - r0), e = r0 * walk.run, cn = rows * walk.run;
        for (std::int64_t i = 0; i < rows; ++i, next_run(idx, base)) {
          for (std::size_t k = 0; k < 2; ++k) {
            b.row_param[k][i] = params[k][base[k]];
            b.row_target[k][i] = base[k];
          }
        }
        detail::RowArgs a;
        std::array<std::int64_t, 2> at{};
        operands(b, a, base, e, 0, cn, at);
        a.in[2] = b.row_param[0];
        a.in[3] = b.row_param[1];
        a.broadcast_mask = 0;
        a.per_row_mask = 0b1100u;
        a.row_len = walk.run;
        gradients(a, e, cn, [&](std::size_t k) {
          std::fill(b.segment_acc, b.segment_acc + rows, 0.0);
          sum_terms(k, 0, cn, b.segment_acc, [&](std::int32_t i) { return b.row_target[k][i]; });
          if (owned_out[k] != nullptr) {
            std::bitset<kMaxSegments> spilled;
            for (std::int64_t c = 0; c < spill_count; ++c) spilled.set(static_cast<std::size_t>(b.spill_index[c]));
            for (std::int64_t i = 0; i < rows; ++i) {
              if (spilled.test(static_cast<std::size_t>(i))) {
                mine[k].emplace_back(b.row_target[k][i], b.segment_acc[i]);
              } else {
                owned_out[k][b.row_target[k][i]] =
                    detail::narrow_to<float>(detail::ExactSums<detail::ExactSumFloat32>::rounded_single<float>(b.segment_acc[i]), w.narrow);
              }
            }
            return;
          }
          for (std::int64_t i = 0; i < rows; ++i) {
            if (b.segment_acc[i] != 0.0) mine[k].emplace_back(b.row_target[k][i], b.segment_acc[i]);
          }
        });
      }
    } else {
      for (std::int64_t r = r_begin; r < r_end; ++r, next_run(idx, base)) {
        for (std::size_t k = 0; k < 2; ++k) {
          if (columns[k].empty() || base[k] == column_base[k]) continue;
          if (column_base[k] >= 0) contribute_columns(k);
          column_base[k] = base[k];
        }
        const std::int64_t run_chunks_head = head >= 0 ? head : run_head(r);
        for (std::int64_t c0 = c_begin, c1; c0 < c_end; c0 = c1) {
          c1 = std::min(c_end, next_chunk_start(c0, run_chunks_head));
          const std::int64_t cn = c1 - c0, e = r * walk.run + c0;
          detail::RowArgs a;
          std::array<std::int64_t, 2> at{};
          operands(b, a, base, e, c0, cn, at);
          for (std::size_t k = 0; k < 2 && sum_columns; ++k) {
            column_sums[k].acc = columns[k].data() + (c0 - c_begin);
            column_sums[k].done = 0;
            column_spill_count[k] = 0;
          }
          gradients(a, e, cn, [&](std::size_t k) {
            if (no_reduction) {  // each term is its parameter element's value
              for (std::int64_t j = 0; j < cn; ++j) terms_kept[k][static_cast<std::size_t>(at[k] + walk.run_stride[k] * j)] = b.terms[k][j];
              return;
            }
            sp.per_element = walk.run_stride[k] == 1;
            if (sp.per_element) {
              // the terms the kernel added into the columns itself (none on the scalar rows, or
              // where only one sum is wanted), their spills; the rest here
              const std::int64_t first = sum_columns ? column_sums[k].done : 0;
              for (std::int64_t i = 0; i < (sum_columns ? column_spill_count[k] : 0); ++i) {
                mine[k].emplace_back(at[k] + b.column_spill_index[k][i], b.column_spill_value[k][i]);
              }
              if (first < cn) {
                sum_terms(k, first, cn, columns[k].data() + (c0 - c_begin) + first, [&](std::int32_t j) { return at[k] + first + j; });
              }
            } else {
              sum_terms(k, 0, cn, b.lanes[k], [&](std::int32_t) { return base[k]; });
            }
          });
        }
        for (std::size_t k = 0; k < 2; ++k) {
          if (want[k] && !no_reduction && walk.run_stride[k] == 0) contribute_lanes(b.lanes[k], base[k], mine[k]);
        }
      }
    }
    for (std::size_t k = 0; k < 2; ++k) {
      if (!columns[k].empty() && column_base[k] >= 0) contribute_columns(k);
    }
    const std::lock_guard<std::mutex> lock(contributions_mutex);
    for (std::size_t k = 0; k < 2; ++k) contributions[k].insert(contributions[k].end(), mine[k].begin(), mine[k].end());
  };
  // Threads take runs of their own where every run's parameter elements along it are its own
  // (no_reduction writes each element once) or the sums gather along the run; with sums across runs
  // (channels last: every run adds into the same row of sums) they take chunks of the run across
  // all runs, so each column's accumulator stays one thread's. The sums are exact, so the split
  // does not change them.
  bool split = true;
  for (std::size_t k = 0; k < 2; ++k) {
    if (want[k] && !no_reduction && walk.run_stride[k] == 1) split = false;
  }
  // Few long runs (per tensor: one) split by chunks of the run instead, so every thread has work.
  const std::int64_t runs = n / walk.run;
  if (split && walk.run >= 2 * kGradChunk && runs < 4 * detail::num_threads()) split = false;
  if (split && runs * walk.run >= 2 * kGradChunk) {
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / walk.run);
    detail::parallel_for(runs, grain, [&](std::int64_t b, std::int64_t e) { walk_runs(b, e, 0, walk.run, -1, p); });
  } else if (walk.run >= 2 * kGradChunk) {
    // Every run's chunks start alike: one head for all (aligned where every run starts the same
    // distance past a 64-byte boundary). A thread's share begins at a chunk start (task i at
    // head + kGradChunk i, the first at 0: the head goes with the first full chunk).
    const std::int64_t head = runs == 1 || (walk.run * static_cast<std::int64_t>(sizeof(float))) % 64 == 0 ? run_head(0) : 0;
    const std::int64_t chunks = (walk.run - head + kGradChunk - 1) / kGradChunk;
    auto share_start = [&](std::int64_t i) { return i == 0 ? 0 : i == chunks ? walk.run : head + i * kGradChunk; };
    detail::parallel_for(chunks, 1, [&](std::int64_t b, std::int64_t e) { walk_runs(0, runs, share_start(b), share_start(e), head, p); });
  } else {
    walk_runs(0, runs, 0, walk.run, -1, p);
  }

  for (std::size_t k = 0; k < 2; ++k) {
    if (!want[k]) continue;
    const MutableTensorView& out = k == 0 ? grad_scale : grad_offset;
    std::vector<double> sums;
    if (no_reduction) {
      sums = std::move(terms_kept[k]);
    } else if (owned_out[k] != nullptr) {
      // written by the walk, but for the elements whose segment spilled: theirs here
      if (!contributions[k].empty()) {
        detail::ExactSums<detail::ExactSumFloat32> exact(param_count[k]);
        for (const auto& [target, value] : contributions[k]) exact.add(target, value);
        for (const auto& [target, value] : contributions[k]) owned_out[k][target] = detail::narrow_to<float>(exact.to_float(target), w.narrow);
      }
      // the copy into the gradient, as write_sums converts (the float32 values exactly)
      if (!owned_copy[k].empty()) detail::convert_into(TensorView(owned_copy[k].data(), DType::kFloat32, (k == 0 ? scale : offset).shape), out);
      continue;
    } else {
      detail::ExactSums<detail::ExactSumFloat32> exact(param_count[k]);
      for (const auto& [target, value] : contributions[k]) exact.add(target, value);
      if (out.dtype == DType::kFloat32 && out.is_contiguous() && out.numel() == param_count[k]) {
        // write_sums' values without its float64 staging (per block: 131072 of them at 16 Mi),
        // rounded by every thread: each element's rounding reads only its own sum
        auto* o = static_cast<float*>(out.data);
        detail::parallel_for(out.numel(), kRoundingGrain, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t t = begin; t < end; ++t) o[t] = detail::narrow_to<float>(exact.to_float(t), w.narrow);
        });
        continue;
      }
      sums.resize(static_cast<std::size_t>(param_count[k]));
      for (std::size_t t = 0; t < sums.size(); ++t) sums[t] = static_cast<double>(exact.to_float(static_cast<std::int64_t>(t)));
    }
    write_sums(sums, DType::kFloat32, w.narrow, k == 0 ? scale : offset, out);
  }
  return true;
}

// RuntimeError unless the working dtype `t` holds every integer of the grid (AIMET's message).
void require_grid_in(DType t, const Grid& g) {
  if (!grid_representable(t, g)) {
    runtime_error(std::string(torch_dtype_name(t)) + " is unable to represent quantized output of range " + grid_str(g) + ".");
  }
}

// The formula kernel's parameters for `kind` in working precision `w` (bfloat16 outputs carry
// torch's canonical NaN).
detail::AffineParams formula_params(AffineKind kind, const Work& w, const Grid& grid, DType x_dtype) {
  detail::AffineParams p;
  p.kind = kind;
  p.narrow = w.narrow;
  p.canonical_nan = x_dtype == DType::kBFloat16;
  p.qmin = static_cast<double>(grid.qmin);
  p.qmax = static_cast<double>(grid.qmax);
  return p;
}

// ---- planned calls -----------------------------------------------------------------------------
// A validated affine call: its output and what running it needs. The formula (quantize, the
// training path of quantize_dequantize, dequantize): the parameter layout, the working precision
// (AIMET's rule; dequantize: x's dtype) and the kernel's parameters. quantize_dequantize's no-grad
// path where torch's fake quantization runs (`shortcut.taken`): the zero points, read from offset
// when the call is planned (they decide the path, and so which checks apply).
struct AffinePlan {
  TensorSpec spec;
  const char* op = "";  // names the call in the output's error
  AffineLayout layout;
  Work work{};
  detail::AffineParams params;
  Grid grid;
  Shortcut shortcut;
  std::vector<double> zero_points;
};

// The formula's working precision `w` and kernel parameters for `kind`.
void plan_formula(AffinePlan& plan, AffineKind kind, DType w, const Grid& grid, DType x_dtype) {
  plan.work = work_for(w);
  plan.params = formula_params(kind, plan.work, grid, x_dtype);
}

AffinePlan plan_quantize(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args) {
  AffinePlan plan;
  plan.op = "quantize";
  check_common(plan.op, x, scale, offset);
  plan.layout = make_layout(x, scale, offset, args.block_size);
  check_grid(args.grid);
  require_grid_in(x.dtype, args.grid);
  plan.spec = {x.dtype, x.shape};
  plan.grid = args.grid;
  plan_formula(plan, AffineKind::kQuantize, working_dtype(x.dtype, args.grid), args.grid, x.dtype);
  return plan;
}

AffinePlan plan_quantize_dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                    const AffineArgs& args, QdqPath path) {
  AffinePlan plan;
  plan.op = "quantize_dequantize";
  check_common(plan.op, x, scale, offset);
  plan.layout = make_layout(x, scale, offset, args.block_size);
  check_grid(args.grid);
  plan.spec = {x.dtype, x.shape};
  plan.grid = args.grid;
  if (path == QdqPath::kNoGrad) plan.shortcut = shortcut_for(x, scale, offset, args, &plan.zero_points);
  if (!plan.shortcut.taken) {
    const DType w = working_dtype(x.dtype, args.grid);
    require_grid_in(w, args.grid);
    plan_formula(plan, AffineKind::kQuantizeDequantize, w, args.grid, x.dtype);
  }
  return plan;
}

AffinePlan plan_dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                           std::span<const std::int64_t> block_size) {
  AffinePlan plan;
  plan.op = "dequantize";
  check_common(plan.op, x, scale, offset);
  plan.layout = make_layout(x, scale, offset, block_size);
  plan.spec = {x.dtype, x.shape};
  plan.grid = Grid{0, 0};  // unused: dequantize has no grid
  plan_formula(plan, AffineKind::kDequantize, x.dtype, plan.grid, x.dtype);
  return plan;
}

// The call `plan` validated, into `out`.
void run_plan(const AffinePlan& plan, const TensorView& x, const TensorView& scale, const TensorView& offset,
              const MutableTensorView& out) {
  require_output(out, plan.spec, plan.op);
  const detail::NamedView operands[] = {{&x, "tensor"}, {&scale, "scale"}, {&offset, "offset"}};
  detail::op_device(operands, &out, plan.op);
  if (plan.shortcut.taken) {
    run_shortcut(x, scale, offset, plan.grid, plan.shortcut, plan.zero_points, out);
    return;
  }
  const std::array<DType, 2> param_dtypes{plan.work.kernel_dtype, plan.work.kernel_dtype};
  run_affine(plan.layout, x, out, plan.work, detail::KernelOp::kAffine, &plan.params, param_dtypes);
}

// The public form of a plan: its spec, and a run over copies of the operands' views.
PlannedCall planned_call(AffinePlan plan, const TensorView& x, const TensorView& scale, const TensorView& offset) {
  TensorSpec spec = plan.spec;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, scale, offset](const MutableTensorView& out) {
    run_plan(plan, x, scale, offset, out);
  });
}

}  // namespace

Grid grid_from_num_steps(std::int64_t num_steps, bool is_signed) {
  if (num_steps < 0) throw Error(ErrorKind::kValue, "num_steps must be >= 0 (got " + std::to_string(num_steps) + ")");
  if (is_signed) return {-((num_steps + 1) / 2), num_steps / 2};
  return {0, num_steps};
}

Grid grid_from_bitwidth(std::int64_t bitwidth, bool is_signed) {
  if (bitwidth < 1 || bitwidth > 62) {
    throw Error(ErrorKind::kValue, "bitwidth must be in [1, 62] (got " + std::to_string(bitwidth) + ")");
  }
  return grid_from_num_steps((std::int64_t{1} << bitwidth) - 1, is_signed);
}

TensorSpec quantize_spec(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args) {
  return plan_quantize(x, scale, offset, args).spec;
}

void quantize(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args,
              const MutableTensorView& out) {
  run_plan(plan_quantize(x, scale, offset, args), x, scale, offset, out);
}

PlannedCall quantize_plan(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args) {
  return planned_call(plan_quantize(x, scale, offset, args), x, scale, offset);
}

bool takes_no_grad_shortcut(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args) {
  check_common("quantize_dequantize", x, scale, offset);
  (void)make_layout(x, scale, offset, args.block_size);
  check_grid(args.grid);
  return shortcut_for(x, scale, offset, args, nullptr).taken;
}

TensorSpec quantize_dequantize_spec(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                    const AffineArgs& args, QdqPath path) {
  return plan_quantize_dequantize(x, scale, offset, args, path).spec;
}

void quantize_dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset, const AffineArgs& args,
                         QdqPath path, const MutableTensorView& out) {
  run_plan(plan_quantize_dequantize(x, scale, offset, args, path), x, scale, offset, out);
}

PlannedCall quantize_dequantize_plan(const TensorView& x, const TensorView& scale, const TensorView& offset,
                                     const AffineArgs& args, QdqPath path) {
  return planned_call(plan_quantize_dequantize(x, scale, offset, args, path), x, scale, offset);
}

TensorSpec dequantize_spec(const TensorView& x, const TensorView& scale, const TensorView& offset,
                           std::span<const std::int64_t> block_size) {
  return plan_dequantize(x, scale, offset, block_size).spec;
}

void dequantize(const TensorView& x, const TensorView& scale, const TensorView& offset,
                std::span<const std::int64_t> block_size, const MutableTensorView& out) {
  run_plan(plan_dequantize(x, scale, offset, block_size), x, scale, offset, out);
}

PlannedCall dequantize_plan(const TensorView& x, const TensorView& scale, const TensorView& offset,
                            std::span<const std::int64_t> block_size) {
  return planned_call(plan_dequantize(x, scale, offset, block_size), x, scale, offset);
}

void affine_backward(AffineOp op, const TensorView& grad_output, const TensorView& x, const TensorView& scale,
                     const TensorView& offset, const AffineArgs& args, const MutableTensorView& grad_x,
                     const MutableTensorView& grad_scale, const MutableTensorView& grad_offset,
                     const MutableTensorView& output) {
  const char* name = op == AffineOp::kQuantize ? "quantize" : op == AffineOp::kDequantize ? "dequantize" : "quantize_dequantize";
  check_common(name, x, scale, offset);
  // Every tensor on one device (or the host): the inputs', then each output given against them.
  const detail::NamedView inputs_named[] = {{&grad_output, "grad_output"}, {&x, "tensor"}, {&scale, "scale"}, {&offset, "offset"}};
  const Device device = detail::op_device(inputs_named, nullptr, name);
  for (const auto& [o, what] : {std::pair{&grad_x, "grad_x"}, std::pair{&grad_scale, "grad_scale"},
                                std::pair{&grad_offset, "grad_offset"}, std::pair{&output, "output"}}) {
    if (o->data == nullptr) continue;
    if (!(o->device == device)) {
      throw Error(ErrorKind::kValue, std::string(name) + ": " + what + " is on " + o->device.str() + " but the inputs are on " +
                                         device.str() + " (the outputs must be on the inputs' device)");
    }
    (void)detail::op_device(inputs_named, o, name);  // its pointer really is that device's memory
  }
  if (output.data != nullptr) {
    require_output(output, {x.dtype, x.shape}, name, "output");
    const std::pair<const MutableTensorView*, const char*> others[] = {
        {&grad_x, "grad_x"}, {&grad_scale, "grad_scale"}, {&grad_offset, "grad_offset"}};
    for (const auto& [g, what] : others) {
      if (g->data != nullptr && detail::views_overlap(output.data, output, g->data, *g)) {
        throw Error(ErrorKind::kValue, std::string(name) + ": output must not overlap " + what);
      }
    }
  }
  // The forward into `output`, after the gradients have read x (output may be x itself).
  auto forward_into_output = [&] {
    if (output.data == nullptr) return;
    switch (op) {
      case AffineOp::kQuantize: quantize(x, scale, offset, args, output); return;
      case AffineOp::kDequantize: dequantize(x, scale, offset, args.block_size, output); return;
      case AffineOp::kQuantizeDequantize: quantize_dequantize(x, scale, offset, args, QdqPath::kTraining, output); return;
      case AffineOp::kQuantizeDequantizeNoGrad: quantize_dequantize(x, scale, offset, args, QdqPath::kNoGrad, output); return;
    }
  };
  const auto check_grad_output = [&] {
    require_float(grad_output, name, "grad_output");
    if (!(grad_output.shape == x.shape)) {
      throw Error(ErrorKind::kValue, std::string(name) + ": grad_output must have the input's shape " + x.shape.str() +
                                         " (got " + grad_output.shape.str() + ")");
    }
  };
  if (op == AffineOp::kQuantizeDequantizeNoGrad) {
    std::vector<double> zero_points;
    (void)quantize_dequantize_spec(x, scale, offset, args, QdqPath::kNoGrad);
    const Shortcut s = shortcut_for(x, scale, offset, args, &zero_points);
    if (!s.taken) {
      affine_backward(AffineOp::kQuantizeDequantize, grad_output, x, scale, offset, args, grad_x, MutableTensorView(),
                      MutableTensorView());
      forward_into_output();
      return;
    }
    check_grad_output();
    if (grad_x.data != nullptr) {
      require_output(grad_x, {x.dtype, x.shape}, name, "grad_x");
      run_shortcut(x, scale, offset, args.grid, s, zero_points, grad_x, &grad_output);
    }
    forward_into_output();
    return;
  }
  check_grad_output();
  DType wd = x.dtype;
  if (op != AffineOp::kDequantize) {
    if (op == AffineOp::kQuantize) (void)quantize_spec(x, scale, offset, args);
    else (void)quantize_dequantize_spec(x, scale, offset, args, QdqPath::kTraining);
    wd = working_dtype(x.dtype, args.grid);
  } else {
    (void)dequantize_spec(x, scale, offset, args.block_size);
  }
  if (grad_x.data != nullptr) require_output(grad_x, {x.dtype, x.shape}, name, "grad_x");
  if (grad_scale.data != nullptr) require_output(grad_scale, {scale.dtype, scale.shape}, name, "grad_scale");
  if (grad_offset.data != nullptr) require_output(grad_offset, {offset.dtype, offset.shape}, name, "grad_offset");
  const AffineLayout L = make_layout(x, scale, offset, args.block_size);
  const Work w = work_for(wd);
  detail::AffineGradParams p;
  p.op = formula_params(op == AffineOp::kQuantize     ? AffineKind::kQuantize
                        : op == AffineOp::kDequantize ? AffineKind::kDequantize
                                                      : AffineKind::kQuantizeDequantize,
                        w, args.grid, x.dtype);
  TensorView xv = x, gv = grad_output;
  xv.shape = gv.shape = L.shape;
  xv.strides = L.x_strides;
  gv.strides = strides_like_x(grad_output.strides, L);  // grad_output split like x
  const std::array<TensorView, 4> inputs{gv, xv, L.params[0], L.params[1]};
  const std::array<DType, 4> dtypes{w.kernel_dtype, w.kernel_dtype, w.kernel_dtype, w.kernel_dtype};
  auto run = [&](detail::AffineGradOf of, const MutableTensorView& out) {
    p.of = of;
    detail::ElementwiseCall call;
    call.inputs = inputs;
    call.kernel_dtypes = dtypes;
    call.out = out;
    call.kernel_out_dtype = w.kernel_dtype;
    call.kernel = detail::best_kernel(detail::KernelOp::kAffineGrad, w.work);
    call.op = detail::KernelOp::kAffineGrad;
    call.work = w.work;
    call.params = &p;
    call.per_row_operands = true;  // blocked parameters passed compact (not repeated over each block)
    call.repeated_row_operands = true;
    detail::run_elementwise(call);
  };
  // torch's sum_to is the identity where the parameter has x's shape (same rank and sizes) and
  // there are no blocks; blockwise, aimet-torch 2.42.0 sums over each block even when it holds
  // one element (its golden data: +0.0 for a lone -0.0 term with blocks of one)
  const auto no_reduction = [&](const TensorView& param) { return param.shape == x.shape && args.block_size.empty(); };
  if (device.is_cpu() && no_reduction(scale) == no_reduction(offset) &&
      fused_backward(L, w, p, grad_output, x, scale, offset, no_reduction(scale), grad_x, grad_scale, grad_offset, output)) {
    return;
  }
  if (grad_x.data != nullptr) run(detail::AffineGradOf::kX, out_view(grad_x, L));
  const std::int64_t n = L.shape.numel();
  std::vector<unsigned char> buffer;
  auto reduced = [&](detail::AffineGradOf of, int which, const TensorView& param, const MutableTensorView& out) {
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * dtype_size(w.kernel_dtype);
    if (device.is_cpu() || n == 0) {  // (no elements: every sum is +0, written by the host)
      buffer.assign(bytes, 0);
      if (n > 0) run(of, MutableTensorView(buffer.data(), w.kernel_dtype, L.shape));
      reduce_into(buffer, w.kernel_dtype, w.narrow, L, which, param, no_reduction(param), out);
      return;
    }
    // On a device: the terms there, then their exact sums per parameter element there (float32
    // terms; the parts are read back and rounded as the host rounds them). Per-element
    // parameters (no sum) and float64 terms are read back and reduced by the host's code.
    const detail::DeviceScratch terms(device, bytes);
    MutableTensorView terms_view(terms.data(), w.kernel_dtype, L.shape);
    terms_view.device = device;
    run(of, terms_view);
    if (w.kernel_dtype == DType::kFloat32 && !no_reduction(param)) {
      const std::int64_t targets = std::max<std::int64_t>(param.numel(), 1);
      const std::vector<float> sums32 = detail::exact_group_sums_on_device(
          device, static_cast<const float*>(terms.data()), L.shape, L.acc_strides[static_cast<std::size_t>(which)], targets);
      std::vector<double> sums(sums32.begin(), sums32.end());
      write_sums(sums, w.kernel_dtype, w.narrow, param, out);
      return;
    }
    std::vector<unsigned char> storage;
    TensorView device_terms(terms.data(), w.kernel_dtype, L.shape);
    device_terms.device = device;
    const TensorView host = detail::host_readable(device_terms, storage);
    buffer.assign(static_cast<const unsigned char*>(host.data), static_cast<const unsigned char*>(host.data) + bytes);
    reduce_into(buffer, w.kernel_dtype, w.narrow, L, which, param, no_reduction(param), out);
  };
  if (grad_scale.data != nullptr) reduced(detail::AffineGradOf::kScale, 0, scale, grad_scale);
  if (grad_offset.data != nullptr) reduced(detail::AffineGradOf::kOffset, 1, offset, grad_offset);
  forward_into_output();
}

}  // namespace polyquant::aimet
