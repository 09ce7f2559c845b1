// AIMET's affine ops: argument checks with AIMET's messages and exception classes, the working
// precision rule, the parameter layout (broadcast or blocked, both as broadcasting over a view of
// x with each blocked dimension split in two), the no-grad shortcut's eligibility, and the
// gradients' reduction. Numerics are the kernels' (families/aimet/kernels.h).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/elementwise.h"
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

void check_common(const char* op, const TensorView& x, const TensorView& scale, const TensorView& offset) {
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
  const auto fill = [&] {
    if (zero_points == nullptr) return;
    zero_points->resize(static_cast<std::size_t>(offset.numel()));
    for (std::int64_t i = 0; i < offset.numel(); ++i) (*zero_points)[static_cast<std::size_t>(i)] = zero_point_of(detail::read_as_double(offset, i));
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
    zp[static_cast<std::size_t>(i)] = zero_point_of(detail::read_as_double(offset, i));
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
  call.params = &p;
  call.repeated_row_operands = true;
  detail::run_elementwise(call);
}

// ---- gradients ---------------------------------------------------------------------------------
// The sums in the working precision (torch's sum_to runs there, before the cast back), then the
// parameter's dtype through a float64 tensor of its shape.
void write_sums(std::vector<double>& acc, DType g_dtype, QuotientRounding narrow, const TensorView& param,
                const MutableTensorView& out) {
  if (g_dtype == DType::kFloat32) {
    for (double& a : acc) a = static_cast<double>(detail::narrow_to<float>(static_cast<float>(a), narrow));
  }
  detail::convert_into(TensorView(acc.data(), DType::kFloat64, param.shape), out);
}

// Sums per-element values `g` (contiguous over layout.shape, dtype float32 or float64) into the
// parameter's elements, in float64, then writes them rounded to `out`'s dtype.
//
// The sign of a zero follows torch's autograd: the per-element gradient has x's shape (split into
// blocks) and is reduced to the parameter's with sum_to, which sums only when the shapes differ.
// A sum starts from +0.0 (so -0.0 + -0.0, a sum over one element of a size-1 leading dimension and
// an empty sum all give +0.0); with equal shapes and no blocks (`no_reduction`: per-element
// parameters) there is no sum and each element keeps its own value, -0.0 included. Blocks of one
// are summed (+0.0), as aimet-torch does.
void reduce_into(const std::vector<unsigned char>& g, DType g_dtype, QuotientRounding narrow, const AffineLayout& L,
                 int which, const TensorView& param, bool no_reduction, const MutableTensorView& out) {
  std::vector<double> acc(static_cast<std::size_t>(std::max<std::int64_t>(param.numel(), 1)), 0.0);
  const Dims& shape = L.shape;
  const Dims& st = L.acc_strides[static_cast<std::size_t>(which)];
  const std::int64_t n = shape.numel();
  std::array<std::int64_t, kMaxRank> idx{};
  std::int64_t target = 0;
  for (std::int64_t e = 0; e < n; ++e) {
    const double v = g_dtype == DType::kFloat32 ? static_cast<double>(reinterpret_cast<const float*>(g.data())[e])
                                                : reinterpret_cast<const double*>(g.data())[e];
    double& a = acc[static_cast<std::size_t>(target)];
    a = no_reduction ? v : detail::add_first_nan(a, v);  // both may be NaN: x86's first-operand rule
    for (int k = shape.rank - 1; k >= 0; --k) {  // odometer over the engine's shape
      if (++idx[static_cast<std::size_t>(k)] < shape[k]) {
        target += st[k];
        break;
      }
      target -= st[k] * (shape[k] - 1);
      idx[static_cast<std::size_t>(k)] = 0;
    }
  }
  write_sums(acc, g_dtype, narrow, param, out);
}

// ---- the backward in one pass ------------------------------------------------------------------
// reduce_into's sums without its per-element buffers: where x, grad_output and grad_x are
// C-contiguous and the working precision runs in the float32 kernel, x is walked once, in chunks
// of the engine's shape's innermost run. Each chunk's operands are read from memory once (and
// converted to float32 once, for float16 / bfloat16 / float64 tensors); the kernel's three calls
// on it (scale terms, offset terms, then grad_x) and the sums of the terms work out of the L1
// cache. Every sum adds the same float32 terms in the same order as reduce_into (the C order of
// the engine's shape, one float64 accumulator per parameter element, starting from +0.0), so the
// results are those of reduce_into bit for bit.

// Elements per chunk: the chunk's operands, terms and conversions stay in the L1 cache.
constexpr std::int64_t kGradChunk = 2048;

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

// Sums of one accumulator over consecutive terms, each term added to the float64 sum in order
// (reduce_into's chain: each add waits for the previous one). Where a block's adds are provably
// exact, the block is summed in any order instead, which gives the same value:
//   every float32 term is a multiple of its ulp, and the sum `a` so far of its lowest set bit, so every partial
//   sum a + t_0 + ... + t_k (in any order, of any subset) is a multiple of G, the smallest of those
//   ulps; a multiple of G below 2^53 G in magnitude is a float64, so when |a| + sum |t| < 2^53 G no
//   add of the chain rounds and the chain's result is the exact sum, whatever the order. sum |t|
//   is computed in float64 (relative error below n 2^-53, covered by a 2^-40 margin); NaN or
//   infinite terms, and blocks the bound does not clear, take the chain. The sum is never -0 (it starts at +0 and
//   rounds to nearest), so an exact block sum of -0 added to it changes nothing, as the chain's
//   adds of -0 do not.
constexpr std::int64_t kExactBlock = 256;

[[gnu::noinline]] double chain_sum(double a, const float* t, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) a = detail::add_first_nan(a, static_cast<double>(t[j]));
  return a;
}
// The block's facts for the proof: float32 exponent fields of its largest term and of its least
// nonzero one (0xFF: none), sum |t| (a bound, float64) and the float64 sum of the terms in some
// order (the value, once proved exact).
struct BlockFacts {
  std::uint32_t e_min = 0xFFu, e_max = 0u;
  double abs_sum = 0.0, sum = 0.0;
};
void add_facts_scalar(BlockFacts& f, const float* t, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    std::uint32_t bits;
    std::memcpy(&bits, t + j, sizeof bits);
    const std::uint32_t e = (bits >> 23) & 0xFFu;
    f.e_max = std::max(f.e_max, e);
    f.e_min = std::min(f.e_min, (bits << 1) == 0 ? 0xFFu : e);  // zeros: no constraint
    f.abs_sum += std::fabs(static_cast<double>(t[j]));
    f.sum += static_cast<double>(t[j]);
  }
}
BlockFacts block_facts(const float* t, std::int64_t n) {
  BlockFacts f;
#if defined(__SSE2__)
  // Four terms a step (SSE2, every x86-64): exponent fields as 32-bit lanes below 256, so the
  // 16-bit min / max see them whole; the sums as two float64 pairs each.
  const __m128i zero = _mm_setzero_si128(), all_ff = _mm_set1_epi32(0xFF);
  const __m128d magnitude = _mm_castsi128_pd(_mm_set1_epi64x(0x7FFFFFFFFFFFFFFFLL));
  __m128i lane_min = all_ff, lane_max = zero;
  __m128d sum_lo = _mm_setzero_pd(), sum_hi = _mm_setzero_pd(), abs_lo = _mm_setzero_pd(), abs_hi = _mm_setzero_pd();
  std::int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m128 v = _mm_loadu_ps(t + j);
    const __m128i doubled = _mm_slli_epi32(_mm_castps_si128(v), 1);  // sign out
    const __m128i e = _mm_srli_epi32(doubled, 24);
    lane_max = _mm_max_epi16(lane_max, e);
    lane_min = _mm_min_epi16(lane_min, _mm_or_si128(e, _mm_and_si128(_mm_cmpeq_epi32(doubled, zero), all_ff)));
    const __m128d lo = _mm_cvtps_pd(v), hi = _mm_cvtps_pd(_mm_movehl_ps(v, v));
    sum_lo = _mm_add_pd(sum_lo, lo);
    sum_hi = _mm_add_pd(sum_hi, hi);
    abs_lo = _mm_add_pd(abs_lo, _mm_and_pd(lo, magnitude));
    abs_hi = _mm_add_pd(abs_hi, _mm_and_pd(hi, magnitude));
  }
  alignas(16) std::uint32_t mins[4], maxs[4];
  alignas(16) double sums[4], abss[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(mins), lane_min);
  _mm_store_si128(reinterpret_cast<__m128i*>(maxs), lane_max);
  _mm_store_pd(sums, sum_lo);
  _mm_store_pd(sums + 2, sum_hi);
  _mm_store_pd(abss, abs_lo);
  _mm_store_pd(abss + 2, abs_hi);
  for (int k = 0; k < 4; ++k) {
    f.e_min = std::min(f.e_min, mins[k]);
    f.e_max = std::max(f.e_max, maxs[k]);
    f.sum += sums[k];
    f.abs_sum += abss[k];
  }
  add_facts_scalar(f, t + j, n - j);
#else
  add_facts_scalar(f, t, n);
#endif
  return f;
}
// a + the block's terms when the proof above holds for the block's facts (`proved` set), else a
// unchanged (`proved` cleared: the caller adds the terms one after the other).
double proved_sum(double a, const BlockFacts& f, bool& proved) {
  proved = false;
  if (f.e_max == 0xFFu || !std::isfinite(a)) return a;  // NaN / infinite terms or sum: the chain
  proved = true;
  if (f.e_min == 0xFFu) return a;  // every term +-0
  // log2 G: a float32 of exponent field e has ulp 2^(max(e, 1) - 150); the float64 sum with field
  // E and significand m (implicit bit included) is a multiple of 2^(max(E, 1) - 1075 + ctz(m)).
  int g = static_cast<int>(std::max(f.e_min, 1u)) - 150;
  if (a != 0.0) {
    std::uint64_t abits;
    std::memcpy(&abits, &a, sizeof abits);
    const std::uint64_t field = (abits >> 52) & 0x7FFu;
    const std::uint64_t significand = (abits & ((std::uint64_t{1} << 52) - 1)) | (field != 0 ? std::uint64_t{1} << 52 : 0);
    g = std::min(g, static_cast<int>(std::max<std::uint64_t>(field, 1u)) - 1075 + std::countr_zero(significand));
  }
  const double bound = (std::fabs(a) + f.abs_sum) * (1.0 + 0x1p-40);
  proved = bound < std::ldexp(1.0, 53 + g);
  return proved ? a + f.sum : a;  // exact: the order of the sum did not matter
}
double ordered_sum(double a, const float* t, std::int64_t n) {
  for (std::int64_t j = 0; j < n; j += kExactBlock) {
    const std::int64_t m = std::min(kExactBlock, n - j);
    bool proved;
    a = proved_sum(a, block_facts(t + j, m), proved);
    if (!proved) a = chain_sum(a, t + j, m);
  }
  return a;
}

// One chunk's terms into the sums. stride 0: every term into acc[0], in order (ordered_sum).
// stride 1: term j into acc[j]. `assign`: no reduction (per-element parameters), each sum is its
// one term.
void add_terms(double* acc, std::int64_t stride, const float* t, std::int64_t n, bool assign) {
  if (assign) {
    for (std::int64_t j = 0; j < n; ++j) acc[j * stride] = static_cast<double>(t[j]);
  } else if (stride == 0) {
    acc[0] = ordered_sum(acc[0], t, n);
  } else {
    for (std::int64_t j = 0; j < n; ++j) acc[j] = detail::add_first_nan(acc[j], static_cast<double>(t[j]));
  }
}

bool byte_ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The gradients in one pass, or false (nothing written) where the layout or the dtypes are not
// this walk's: the caller then runs the kernel per gradient and reduce_into.
bool fused_backward(const AffineLayout& L, const Work& w, detail::AffineGradParams p, const TensorView& grad_output,
                    const TensorView& x, const TensorView& scale, const TensorView& offset, bool no_reduction,
                    const MutableTensorView& grad_x, const MutableTensorView& grad_scale,
                    const MutableTensorView& grad_offset) {
  if (w.kernel_dtype != DType::kFloat32 || !x.is_contiguous() || !grad_output.is_contiguous()) return false;
  const bool want_x = grad_x.data != nullptr;
  const std::array<bool, 2> want{grad_scale.data != nullptr, grad_offset.data != nullptr};
  const std::int64_t n = x.numel();
  if (n == 0) return false;
  if (want_x) {
    if (!grad_x.is_contiguous()) return false;
    const std::size_t gx_bytes = static_cast<std::size_t>(n) * dtype_size(grad_x.dtype);
    if (byte_ranges_overlap(grad_x.data, gx_bytes, x.data, static_cast<std::size_t>(n) * dtype_size(x.dtype)) ||
        byte_ranges_overlap(grad_x.data, gx_bytes, grad_output.data, static_cast<std::size_t>(n) * dtype_size(grad_output.dtype))) {
      return false;
    }
  }
  GradWalk walk;
  if (!make_walk(L, walk)) return false;

  // The parameters as float32 tensors of their own shapes (as the engine converts them), indexed
  // by the sums' element indices.
  std::array<std::vector<float>, 2> params;
  const std::array<const TensorView*, 2> views{&scale, &offset};
  for (std::size_t k = 0; k < 2; ++k) {
    params[k].resize(static_cast<std::size_t>(std::max<std::int64_t>(views[k]->numel(), 1)));
    detail::convert_into(*views[k], MutableTensorView(params[k].data(), DType::kFloat32, views[k]->shape));
  }
  std::array<std::vector<double>, 2> acc;
  for (std::size_t k = 0; k < 2; ++k) {
    if (want[k]) acc[k].assign(params[k].size(), 0.0);
  }
  // A sum over a run (stride 0) is deferred: the walk records each block's facts, and a second,
  // sequential pass adds the blocks to the sums in order (the proved ones at once, the others term
  // by term, their terms computed again).
  std::array<bool, 2> deferred{};
  for (std::size_t k = 0; k < 2; ++k) deferred[k] = want[k] && walk.run_stride[k] == 0 && !no_reduction;
  const std::int64_t runs = n / walk.run, blocks_per_run = (walk.run + kExactBlock - 1) / kExactBlock;
  std::array<std::vector<BlockFacts>, 2> facts;
  for (std::size_t k = 0; k < 2; ++k) {
    if (deferred[k]) facts[k].resize(static_cast<std::size_t>(runs * blocks_per_run));
  }

  const detail::RowKernel kernel = detail::best_kernel(detail::KernelOp::kAffineGrad, w.work);
  alignas(64) static thread_local float chunk_dy[kGradChunk], chunk_x[kGradChunk], terms[2][kGradChunk], chunk_gx[kGradChunk];
  const bool convert_dy = grad_output.dtype != DType::kFloat32, convert_x = x.dtype != DType::kFloat32;
  const bool convert_gx = want_x && grad_x.dtype != DType::kFloat32;
  const bool stream = static_cast<std::size_t>(n) * sizeof(float) > (std::size_t{8} << 20);  // far beyond the caches

  // The kernel's operands for elements [e, e + cn) of the run whose parameter indices start at
  // `base`, c0 elements into it.
  auto operands = [&](detail::RowArgs& a, const std::array<std::int64_t, 2>& base, std::int64_t e, std::int64_t c0,
                      std::int64_t cn, std::array<std::int64_t, 2>& at) {
    const float* dy = static_cast<const float*>(grad_output.data) + e;
    if (convert_dy) {
      detail::convert_values(static_cast<const unsigned char*>(grad_output.data) + e * dtype_size(grad_output.dtype),
                             grad_output.dtype, 1, chunk_dy, DType::kFloat32, 1, cn);
      dy = chunk_dy;
    }
    const float* xs = static_cast<const float*>(x.data) + e;
    if (convert_x) {
      detail::convert_values(static_cast<const unsigned char*>(x.data) + e * dtype_size(x.dtype), x.dtype, 1, chunk_x,
                             DType::kFloat32, 1, cn);
      xs = chunk_x;
    }
    a.in[0] = dy;
    a.in[1] = xs;
    for (std::size_t k = 0; k < 2; ++k) {
      at[k] = base[k] + walk.run_stride[k] * c0;
      a.in[k + 2] = params[k].data() + at[k];
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

  // Elements [c_begin, c_end) of runs [r_begin, r_end), in order, with a copy of the kernel's
  // parameters (one per thread). c_begin is a multiple of kGradChunk.
  auto walk_runs = [&](std::int64_t r_begin, std::int64_t r_end, std::int64_t c_begin, std::int64_t c_end,
                       detail::AffineGradParams gp) {
    std::array<std::int64_t, kMaxRank> idx{};
    std::array<std::int64_t, 2> base{};
    run_base(r_begin, idx, base);
    for (std::int64_t r = r_begin; r < r_end; ++r, next_run(idx, base)) {
      for (std::int64_t c0 = c_begin; c0 < c_end; c0 += kGradChunk) {
        const std::int64_t cn = std::min(kGradChunk, c_end - c0), e = r * walk.run + c0;
        detail::RowArgs a;
        std::array<std::int64_t, 2> at{};
        operands(a, base, e, c0, cn, at);
        for (std::size_t k = 0; k < 2; ++k) {
          if (!want[k]) continue;
          gp.of = k == 0 ? detail::AffineGradOf::kScale : detail::AffineGradOf::kOffset;
          a.out = terms[k];
          kernel(&gp, a);
          if (deferred[k]) {
            BlockFacts* f = facts[k].data() + r * blocks_per_run + c0 / kExactBlock;
            for (std::int64_t b0 = 0; b0 < cn; b0 += kExactBlock) *f++ = block_facts(terms[k] + b0, std::min(kExactBlock, cn - b0));
          } else {
            add_terms(acc[k].data() + at[k], walk.run_stride[k], terms[k], cn, no_reduction);
          }
        }
        if (want_x) {
          gp.of = detail::AffineGradOf::kX;
          a.out = convert_gx ? static_cast<void*>(chunk_gx) : static_cast<void*>(static_cast<float*>(grad_x.data) + e);
          a.stream = stream && !convert_gx;
          kernel(&gp, a);
          if (convert_gx) {
            detail::convert_values(chunk_gx, DType::kFloat32, 1, static_cast<unsigned char*>(grad_x.data) + e * dtype_size(grad_x.dtype),
                                   grad_x.dtype, 1, cn);
          }
        }
      }
    }
  };
  // Threads take runs of their own unless a sum added during the walk spans runs (channels last:
  // every run adds into the same row of sums); then they take chunks of the run of their own
  // across all runs (each sum is still one thread's, in order). The deferred sums are added in
  // order afterwards.
  bool split = true;
  for (std::size_t k = 0; k < 2; ++k) {
    if (!want[k] || deferred[k]) continue;
    for (int d = 0; d < walk.outer_rank; ++d) split = split && walk.outer_stride[k][static_cast<std::size_t>(d)] != 0;
  }
  if (split && runs * walk.run >= 2 * kGradChunk) {
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / walk.run);
    detail::parallel_for(runs, grain, [&](std::int64_t b, std::int64_t e) { walk_runs(b, e, 0, walk.run, p); });
  } else if (walk.run >= 2 * kGradChunk) {
    const std::int64_t chunks = (walk.run + kGradChunk - 1) / kGradChunk;
    detail::parallel_for(chunks, 1, [&](std::int64_t b, std::int64_t e) {
      walk_runs(0, runs, b * kGradChunk, std::min(e * kGradChunk, walk.run), p);
    });
  } else {
    walk_runs(0, runs, 0, walk.run, p);
  }

  // The deferred sums, block by block in the C order of x.
  if (deferred[0] || deferred[1]) {
    std::array<std::int64_t, kMaxRank> idx{};
    std::array<std::int64_t, 2> base{};
    for (std::int64_t r = 0; r < runs; ++r, next_run(idx, base)) {
      for (std::size_t k = 0; k < 2; ++k) {
        if (!deferred[k]) continue;
        double sum = acc[k][static_cast<std::size_t>(base[k])];
        const BlockFacts* f = facts[k].data() + r * blocks_per_run;
        for (std::int64_t b0 = 0; b0 < walk.run; b0 += kExactBlock, ++f) {
          bool proved;
          sum = proved_sum(sum, *f, proved);
          if (proved) continue;
          // The block's terms again (the same kernel on the same operands), one after the other.
          const std::int64_t m = std::min(kExactBlock, walk.run - b0);
          detail::RowArgs a;
          std::array<std::int64_t, 2> at{};
          operands(a, base, r * walk.run + b0, b0, m, at);
          p.of = k == 0 ? detail::AffineGradOf::kScale : detail::AffineGradOf::kOffset;
          a.out = terms[k];
          kernel(&p, a);
          sum = chain_sum(sum, terms[k], m);
        }
        acc[k][static_cast<std::size_t>(base[k])] = sum;
      }
    }
  }
  if (want[0]) write_sums(acc[0], DType::kFloat32, w.narrow, scale, grad_scale);
  if (want[1]) write_sums(acc[1], DType::kFloat32, w.narrow, offset, grad_offset);
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
                     const MutableTensorView& grad_scale, const MutableTensorView& grad_offset) {
  const char* name = op == AffineOp::kQuantize ? "quantize" : op == AffineOp::kDequantize ? "dequantize" : "quantize_dequantize";
  check_common(name, x, scale, offset);
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
      return;
    }
    check_grad_output();
    if (grad_x.data != nullptr) {
      require_output(grad_x, {x.dtype, x.shape}, name, "grad_x");
      run_shortcut(x, scale, offset, args.grid, s, zero_points, grad_x, &grad_output);
    }
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
    call.params = &p;
    call.repeated_row_operands = true;
    detail::run_elementwise(call);
  };
  // torch's sum_to is the identity where the parameter has x's shape (same rank and sizes) and
  // there are no blocks; blockwise, aimet-torch 2.42.0 sums over each block even when it holds
  // one element (its golden data: +0.0 for a lone -0.0 term with blocks of one)
  const auto no_reduction = [&](const TensorView& param) { return param.shape == x.shape && args.block_size.empty(); };
  if (no_reduction(scale) == no_reduction(offset) &&
      fused_backward(L, w, p, grad_output, x, scale, offset, no_reduction(scale), grad_x, grad_scale, grad_offset)) {
    return;
  }
  if (grad_x.data != nullptr) run(detail::AffineGradOf::kX, out_view(grad_x, L));
  const std::int64_t n = L.shape.numel();
  std::vector<unsigned char> buffer;
  auto reduced = [&](detail::AffineGradOf of, int which, const TensorView& param, const MutableTensorView& out) {
    buffer.assign(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * dtype_size(w.kernel_dtype), 0);
    run(of, MutableTensorView(buffer.data(), w.kernel_dtype, L.shape));
    reduce_into(buffer, w.kernel_dtype, w.narrow, L, which, param, no_reduction(param), out);
  };
  if (grad_scale.data != nullptr) reduced(detail::AffineGradOf::kScale, 0, scale, grad_scale);
  if (grad_offset.data != nullptr) reduced(detail::AffineGradOf::kOffset, 1, offset, grad_offset);
}

}  // namespace polyquant::aimet
