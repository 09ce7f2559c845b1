// AIMET's encoding analyzers (aimet-torch 2.42.0, torch 2.15 CPU), bit-exact (aimet_analyzers.h).
//
// Every arithmetic step below is rounded to the dtype torch computes it in. The notation in the
// comments: T is the statistics' dtype; a Python number meeting a tensor is rounded to the
// tensor's dtype (float32 for float16/bfloat16 tensors, whose ops compute in float32 and round the
// result back); `rT(v)` rounds to T, `f32(v)` to float32.
#include "polyquant/aimet_analyzers.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <utility>

#include "core/grouped_reduce.h"
#include "core/half.h"
#include "core/histogram.h"
#include "core/minifloat.h"
#include "core/parallel.h"
#include "kernels/registry.h"

namespace polyquant::aimet {

namespace {

using detail::GroupedLayout;

[[noreturn]] void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

std::string dims_list(std::span<const std::int64_t> d) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << "]";
  return os.str();
}

// ---- dtypes -------------------------------------------------------------------------------------
bool is_analyzer_dtype(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}
void check_dtype(DType t) {
  if (!is_analyzer_dtype(t))
    fail(ErrorKind::kType, std::string("x: dtype ") + dtype_name(t) + " is not supported (float16, bfloat16, float32, float64)");
}

// v (a float32 or exact value) rounded to dtype t.
double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat64: return v;
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat16: return static_cast<float>(detail::Half(static_cast<float>(v)));
    case DType::kBFloat16: return detail::bfloat16_bits_to_float(detail::float_to_bfloat16_bits(static_cast<float>(v)));
    default: return v;
  }
}
double f32(double v) { return static_cast<float>(v); }
// One binary op of torch in dtype t: float32 arithmetic rounded to t for 16-bit floats.
double op_in(DType t, double exact_or_f32) {
  return t == DType::kFloat64 ? exact_or_f32 : round_to(t, f32(exact_or_f32));
}
double finfo_max(DType t) {
  switch (t) {
    case DType::kFloat64: return DBL_MAX;
    case DType::kFloat32: return FLT_MAX;
    case DType::kFloat16: return 65504.0;
    case DType::kBFloat16: return 3.3895313892515355e38;
    default: return DBL_MAX;
  }
}
// torch's type promotion between two floating dtypes of dimensioned tensors.
DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;  // f16 with bf16, or either with f32
}

// AIMET's minimum scale: min(float32 eps, 0.01 / num_steps), in Python (double) arithmetic.
double minimum_scale(double num_steps) { return std::min(static_cast<double>(FLT_EPSILON), (0.005 - -0.005) / num_steps); }

// torch.maximum / torch.minimum of floats on the CPU: NaN propagates. On a tie (only +0 against -0
// can tell) the result depends on which of torch's two loops handled the element: cpu_kernel_vec
// runs a contiguous row (or a row against a broadcast scalar) in whole blocks of two float vectors
// (vmaxps / vminps: the second operand wins a tie) and the row's remaining n mod block elements in
// a scalar loop (std::max / std::min: the first operand wins). The block is two vectors of torch's
// CPU build. (Rows of 32768 elements or more are also split between torch's threads; each part has
// its own tail. The analyzers' rows are shorter.)
//
// torch's vector width, in elements of t: its CPU kernels run 256-bit vectors (torch 2.15 measured
// on AVX2 and AVX-512 machines: 8 float32, 4 float64, 16 float16 / bfloat16), or 512-bit ones when
// float_lanes is 16. Every torch loop modelled in this file takes its lanes from here.
int torch_vector_lanes(DType t, int float_lanes = 8) {
  return 4 * float_lanes / static_cast<int>(dtype_size(t));
}
std::int64_t torch_binary_block(DType t, int float_lanes = 8) { return 2 * torch_vector_lanes(t, float_lanes); }
bool torch_vector_loop(std::int64_t index, std::int64_t row, std::int64_t block) { return index < row - row % block; }
double torch_maximum(double a, double b, bool vector_loop = true) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return vector_loop ? b : a;
  return a > b ? a : b;
}
double torch_minimum(double a, double b, bool vector_loop = true) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return vector_loop ? b : a;
  return a < b ? a : b;
}
// torch.clamp(x, lo, hi) with scalar bounds: min(max(x, lo), hi), NaN kept, ties keep x.
double torch_clamp(double x, double lo, double hi) {
  if (std::isnan(x)) return x;
  double r = x < lo ? lo : x;
  return hi < r ? hi : r;
}
// round half to even (torch.round), in double (exact for float32 values too).
// Adding and subtracting 2^(p-1) rounds in IEEE's default mode (nothing in polyquant changes it);
// the sign is put back so that round(-0.3) = -0, as torch's.
template <class W>
W rint_even(W v) {
  const W big = sizeof(W) == 8 ? W(4503599627370496.0) : W(8388608.0f);
  const W a = std::fabs(v);
  if (!(a < big)) return v;
  const W r = static_cast<W>(static_cast<W>(a + big) - big);
  return std::copysign(r, v);
}
double round_half_even(double v) { return rint_even(v); }

// ---- geometry -----------------------------------------------------------------------------------
// x's view as the analyzer reduces it: `view` (x's shape, or (-1, n0, B0, n1, B1, ...) with a
// block size) and which of its dimensions are kept (select the encoding element).
struct ReducedView {
  Dims view;
  std::vector<bool> keep;
  std::int64_t num_elements = 1;
};

std::vector<std::int64_t> concretize_block_size(const Dims& x_shape, const Dims& shape, const std::vector<std::int64_t>& block) {
  if (x_shape.rank < shape.rank)
    fail(ErrorKind::kValue, "Input shape " + x_shape.str() + " must have at least as many dimensions as scale shape " + shape.str() + ".");
  if (shape.rank < static_cast<int>(block.size()))
    fail(ErrorKind::kValue, "Scale shape " + shape.str() + " must have at least as many dimensions as block size " + dims_list(block) + ".");
  const int k = shape.rank - static_cast<int>(block.size());
  std::vector<std::int64_t> full;
  for (int d = 0; d < k; ++d) full.push_back(shape[d] > 1 ? 1 : -1);
  full.insert(full.end(), block.begin(), block.end());
  std::vector<std::int64_t> out;
  for (int d = 0; d < shape.rank; ++d) {
    const std::int64_t xd = x_shape[x_shape.rank - shape.rank + d];
    out.push_back(full[static_cast<std::size_t>(d)] != -1 ? full[static_cast<std::size_t>(d)] : (shape[d] == 0 ? 0 : xd / shape[d]));
  }
  return out;
}

ReducedView reduced_view(const Dims& x_shape, const AnalyzerShape& a, bool histogram) {
  ReducedView r;
  const Dims& shape = a.shape;
  for (int d = 0; d < shape.rank; ++d)
    if (shape[d] < 1) fail(ErrorKind::kValue, "shape: every entry must be >= 1, got " + shape.str());
  r.num_elements = shape.numel();
  if (a.block_size) {
    const auto block = concretize_block_size(x_shape, shape, *a.block_size);
    std::int64_t per = 1;
    for (int d = 0; d < shape.rank; ++d) per *= shape[d] * block[static_cast<std::size_t>(d)];
    const std::int64_t n = x_shape.numel();
    if (per <= 0 || n % per != 0) {
      std::vector<std::int64_t> want{-1};
      for (int d = 0; d < shape.rank; ++d) want.push_back(shape[d]), want.push_back(block[static_cast<std::size_t>(d)]);
      fail(ErrorKind::kRuntime, "shape '" + dims_list(want) + "' is invalid for input of size " + std::to_string(n) +
                                      " (block_size must divide the input's dimensions)");
    }
    if (1 + 2 * shape.rank > kMaxRank * 2) fail(ErrorKind::kValue, "shape: too many dimensions");
    r.view.rank = 0;
    std::vector<std::int64_t> v{n / per};
    r.keep.push_back(false);
    for (int d = 0; d < shape.rank; ++d) {
      v.push_back(shape[d]);
      r.keep.push_back(shape[d] > 1);
      v.push_back(block[static_cast<std::size_t>(d)]);
      r.keep.push_back(false);
    }
    // Dims holds kMaxRank entries: merge the leading reduced dimension with the next reduced
    // ones is not needed for correctness of grouping, so collapse runs of reduced dims instead.
    std::vector<std::int64_t> cv;
    std::vector<bool> ck;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!cv.empty() && !ck.back() && !r.keep[i]) {
        cv.back() *= v[i];
      } else {
        cv.push_back(v[i]);
        ck.push_back(r.keep[i]);
      }
    }
    if (static_cast<int>(cv.size()) > kMaxRank) fail(ErrorKind::kValue, "block_size: the blocked view has more than 8 dimensions");
    r.view = Dims(std::span<const std::int64_t>(cv));
    r.keep = ck;
    return r;
  }
  bool ok = shape.rank <= x_shape.rank;
  for (int i = 1; ok && i <= shape.rank; ++i) {
    const std::int64_t s = shape[shape.rank - i], xd = x_shape[x_shape.rank - i];
    if (s != 1 && s != xd) ok = false;
  }
  if (!ok) {
    if (histogram)
      fail(ErrorKind::kRuntime, "Shape " + shape.str() + " is incompatible with input of shape " + x_shape.str());
    fail(ErrorKind::kRuntime, "Input of shape " + dims_list(x_shape.span()) + " can't be reduced to shape " + dims_list(shape.span()));
  }
  r.view = x_shape;
  r.keep.assign(static_cast<std::size_t>(x_shape.rank), false);
  for (int i = 1; i <= shape.rank; ++i) r.keep[static_cast<std::size_t>(x_shape.rank - i)] = shape[shape.rank - i] > 1;
  return r;
}

// ---- input data ---------------------------------------------------------------------------------
// x in C order as float32 (exact for float16 / bfloat16 / float32) or float64.
struct Data {
  DType dtype = DType::kFloat32;
  const float* f = nullptr;
  const double* d = nullptr;
  std::vector<float> f_own;
  std::vector<double> d_own;
  std::int64_t n = 0;
  double at(std::int64_t i) const { return f ? static_cast<double>(f[i]) : d[i]; }
};

template <class Load>
void gather(const TensorView& x, const Load& load) {
  const int r = x.shape.rank;
  const std::int64_t n = x.numel();
  if (n == 0) return;
  std::array<std::int64_t, kMaxRank> idx{};
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    load(i, off);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < x.shape[d]) {
        off += x.strides[d];
        break;
      }
      off -= (x.shape[d] - 1) * x.strides[d];
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

// AIMET refuses a batch without values (its reductions over an empty tensor raise).
void check_not_empty(const TensorView& x) {
  if (x.numel() == 0)
    fail(ErrorKind::kValue, "x: the batch is empty (shape " + x.shape.str() + "); the analyzers need at least one value per batch");
}

Data read_data(const TensorView& x) {
  check_dtype(x.dtype);
  Data data;
  data.dtype = x.dtype;
  data.n = x.numel();
  if (x.dtype == DType::kFloat32 && x.is_contiguous()) {
    data.f = static_cast<const float*>(x.data);
    return data;
  }
  if (x.dtype == DType::kFloat64 && x.is_contiguous()) {
    data.d = static_cast<const double*>(x.data);
    return data;
  }
  if (x.dtype == DType::kFloat64) {
    data.d_own.resize(static_cast<std::size_t>(data.n));
    const auto* p = static_cast<const double*>(x.data);
    gather(x, [&](std::int64_t i, std::int64_t off) { data.d_own[static_cast<std::size_t>(i)] = p[off]; });
    data.d = data.d_own.data();
    return data;
  }
  data.f_own.resize(static_cast<std::size_t>(data.n));
  float* out = data.f_own.data();
  if (x.dtype == DType::kFloat32) {
    const auto* p = static_cast<const float*>(x.data);
    gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = p[off]; });
  } else {
    const auto* p = static_cast<const std::uint16_t*>(x.data);
    if (x.dtype == DType::kFloat16)
      gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = detail::half_bits_to_float(p[off]); });
    else
      gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = detail::bfloat16_bits_to_float(p[off]); });
  }
  data.f = out;
  return data;
}

// ---- grouped min / max (MinMax statistics) -------------------------------------------------------
struct MinMaxAcc {
  float lo = INFINITY, hi = -INFINITY;
  std::uint8_t negative_zero = 0;  // a -0.0 was folded in (GroupMinMaxParams::negative_zero)
};

struct MinMaxReducer {
  using Acc = MinMaxAcc;
  struct ThreadEnv {
    ThreadEnv() {}  // no floating-point environment to set
  };
  detail::RowKernel kernel = detail::best_kernel(detail::KernelOp::kGroupMinMax, detail::WorkType::kF32);

  // Runs the kernel per element over `rows` rows of n groups (acc interleaved {lo, hi}).
  void per_element(Acc* acc, const float* x, std::int64_t x_row_stride, std::int64_t n, std::int64_t rows) const {
    thread_local std::vector<float> lo, hi;
    thread_local std::vector<std::uint8_t> negative_zero;
    lo.resize(static_cast<std::size_t>(n));
    hi.resize(static_cast<std::size_t>(n));
    negative_zero.resize(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      const auto u = static_cast<std::size_t>(j);
      lo[u] = acc[j].lo, hi[u] = acc[j].hi, negative_zero[u] = acc[j].negative_zero;
    }
    const std::int64_t tile = std::max<std::int64_t>(4, 1024 / std::max<std::int64_t>(n, 1));
    for (std::int64_t r = 0; r < rows; r += tile) {
      detail::GroupMinMaxParams p;
      p.per_element = true;
      p.rows = std::min(tile, rows - r);
      p.x_row_stride = x_row_stride;
      p.max_out = hi.data();
      p.negative_zero = negative_zero.data();
      detail::RowArgs a;
      a.in[0] = x + r * x_row_stride;
      a.out = lo.data();
      a.n = n;
      kernel(&p, a);
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const auto u = static_cast<std::size_t>(j);
      acc[j].lo = lo[u], acc[j].hi = hi[u], acc[j].negative_zero = negative_zero[u];
    }
  }
  void row(Acc* acc, std::int64_t group_stride, const float* x, const float*, std::int64_t, std::int64_t n) const {
    if (group_stride == 0) {
      detail::GroupMinMaxParams p;
      p.max_out = &acc->hi;
      p.negative_zero = &acc->negative_zero;
      detail::RowArgs a;
      a.in[0] = x;
      a.out = &acc->lo;
      a.n = n;
      kernel(&p, a);
      return;
    }
    if (group_stride == 1) {
      per_element(acc, x, 0, n, 1);
      return;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      Acc& g = acc[j * group_stride];
      g.lo = detail::group_min_fold(g.lo, x[j]);
      g.hi = detail::group_max_fold_keep(g.hi, x[j]);
      g.negative_zero |= static_cast<std::uint8_t>(detail::is_negative_zero(x[j]));
    }
  }
  void rows(Acc* acc, std::int64_t group_stride, const float* x, std::int64_t x_row_stride, const float* aux, std::int64_t aux_stride,
            std::int64_t n, std::int64_t nrows) const {
    if (group_stride != 1) {
      for (std::int64_t r = 0; r < nrows; ++r) row(acc, group_stride, x + r * x_row_stride, aux, aux_stride, n);
      return;
    }
    per_element(acc, x, x_row_stride, n, nrows);
  }
  void merge(Acc& into, const Acc& from) const {
    into.lo = detail::group_min_fold(into.lo, from.lo);
    into.hi = detail::group_max_fold_keep(into.hi, from.hi);
    into.negative_zero |= from.negative_zero;
  }
};

// Per-group min and max of x (float32 data through the kernels, float64 by a plain loop), and
// whether the group holds a -0.0 (settle_zero_signs replays only those groups).
void grouped_min_max(const Data& data, const ReducedView& rv, std::vector<double>& mn, std::vector<double>& mx,
                     std::vector<std::uint8_t>& negative_zero) {
  const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  const std::int64_t g = L.num_groups;
  mn.assign(static_cast<std::size_t>(g), INFINITY);
  mx.assign(static_cast<std::size_t>(g), -INFINITY);
  negative_zero.assign(static_cast<std::size_t>(g), 0);
  if (data.f) {
    std::vector<MinMaxAcc> acc(static_cast<std::size_t>(g));
    detail::grouped_reduce(data.f, nullptr, L, MinMaxReducer{}, acc.data());
    for (std::int64_t i = 0; i < g; ++i) {
      const auto u = static_cast<std::size_t>(i);
      mn[u] = acc[u].lo, mx[u] = acc[u].hi, negative_zero[u] = acc[u].negative_zero;
    }
    return;
  }
  // float64: a plain loop.
  detail::for_each_element_group(L, [&](std::int64_t i, std::int64_t group) {
    const auto ug = static_cast<std::size_t>(group);
    const double v = data.d[i];
    double& lo = mn[ug];
    double& hi = mx[ug];
    if (v < lo || std::isnan(v)) lo = std::isnan(lo) ? lo : v;
    if (v > hi || std::isnan(v)) hi = std::isnan(hi) ? hi : v;
    if (v == 0 && std::signbit(v)) negative_zero[ug] = 1;
  });
}

// ---- the sign of a zero min / max (MinMax statistics) ---------------------------------------------
// AIMET's reduce() permutes the reduced dimensions of a contiguous x first, reshapes to
// (-1, *shape) (a view when the reduced dimensions are adjacent in memory, else a contiguous copy)
// and calls torch.amin / amax over dimension 0. The values are the min / max whatever the order;
// which of several zeros of different signs comes out depends on torch's reduction loops
// (measured against torch 2.15 on every layout AIMET produces, single-threaded):
//   inner (the reduced run is x's innermost, stride 1; or one group): per group, 4 vectors of V
//     lanes take elements k < 4V * floor(n / 4V) (lane k mod 4V, the later of equal values wins),
//     folded as f(f(a0, a1), f(a2, a3)) lane by lane, then lanes 1..V-1 into lane 0 by the scalar
//     rule (the earlier wins), then the remaining elements one by one by the scalar rule;
//   outer (a kept run is innermost): groups are columns of that run of W; columns below
//     W - W mod 4V run in vectors (the last of equal values down the column wins), the others in
//     the scalar loop (the first wins).
// V = torch_vector_lanes(dtype).
// Only groups whose min (max) is exactly 0 and that hold a -0.0 are replayed (settle_zero_signs),
// and only zeros can win there (every other value is larger (smaller), NaN would have made the
// result NaN): a loop tracks the last zero of each lane (NaN: none yet), the folds keep the later
// or the earlier zero as torch's loops do.
template <class T>
T later_zero(T a, T b) { return std::isnan(b) ? a : b; }
template <class T>
T earlier_zero(T a, T b) { return std::isnan(a) ? b : a; }

// z = x when x is a zero, else z, without branches (zeros are frequent: ReLU outputs).
template <class T>
inline T take_if_zero(T x, T z) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const U mask = U{0} - static_cast<U>(x == 0);
  return std::bit_cast<T>((std::bit_cast<U>(x) & mask) | (std::bit_cast<U>(z) & ~mask));
}

// The inner loop over a contiguous run of n values (the group's elements in torch's order).
template <class T>
T inner_zero(const T* p, std::int64_t n, int v) {
  const T none = std::numeric_limits<T>::quiet_NaN();
  const std::int64_t block = 4 * static_cast<std::int64_t>(v), count = n / block;
  T r = none;
  if (count > 0) {
    T lane[64];
    for (std::int64_t l = 0; l < block; ++l) lane[l] = none;
    for (std::int64_t i = 0; i < count; ++i) {
      const T* q = p + i * block;
      for (std::int64_t l = 0; l < block; ++l) lane[l] = take_if_zero(q[l], lane[l]);
    }
    T b0 = none;
    for (int l = 0; l < v; ++l) {
      const T b = later_zero(later_zero(lane[l], lane[v + l]), later_zero(lane[2 * v + l], lane[3 * v + l]));
      b0 = l == 0 ? b : earlier_zero(b0, b);
    }
    r = b0;
  }
  for (std::int64_t k = count * block; k < n && std::isnan(r); ++k)
    if (p[k] == 0) r = p[k];
  return r;
}

// The outer loops: one walk of x in C order (each group's rows come in torch's order), keeping per
// group its last zero (vector columns) or its first (scalar columns). `zero[g]` starts as NaN.
// The innermost dimension is a run of `run` values: one group each (kept: groups g0, g0 + 1, ...,
// column (g0 + j) mod columns, vector below vec_columns), or all of group g0 (reduced).
template <class T>
void zeros_in_run(const T* p, std::int64_t run, std::int64_t g0, bool kept, std::int64_t columns, std::int64_t vec_columns, T* zero) {
  if (kept) {
    std::int64_t j = 0;
    while (j < run) {
      const std::int64_t c = (g0 + j) % columns;
      const bool vector = c < vec_columns;
      const std::int64_t end = std::min(run, j + (vector ? vec_columns - c : columns - c));
      T* z = zero + g0;
      if (vector) {
        for (std::int64_t k = j; k < end; ++k) z[k] = take_if_zero(p[k], z[k]);
      } else {
        for (std::int64_t k = j; k < end; ++k)
          if (std::isnan(z[k]) && p[k] == 0) z[k] = p[k];
      }
      j = end;
    }
    return;
  }
  T& z = zero[g0];
  if (g0 % columns < vec_columns) {  // the last zero of the run, if any
    for (std::int64_t k = run - 1; k >= 0; --k)
      if (p[k] == 0) {
        z = p[k];
        break;
      }
  } else if (std::isnan(z)) {  // the first zero, if none yet
    for (std::int64_t k = 0; k < run; ++k)
      if (p[k] == 0) {
        z = p[k];
        break;
      }
  }
}

// Only groups whose min or max is a zero and that hold a -0.0 are replayed: in a group without
// one every zero is +0, and the kernel's extreme, one of the group's zeros, is +0 already (ReLU
// outputs: no pass at all).
void settle_zero_signs(const Data& data, const ReducedView& rv, std::vector<double>& mn, std::vector<double>& mx,
                       const std::vector<std::uint8_t>& negative_zero) {
  const auto groups = static_cast<std::int64_t>(mn.size());
  auto needs_replay = [&](std::int64_t g) {
    const auto u = static_cast<std::size_t>(g);
    return negative_zero[u] != 0 && (mn[u] == 0 || mx[u] == 0);
  };
  bool any = false;
  for (std::int64_t g = 0; g < groups && !any; ++g) any = needs_replay(g);
  if (!any) return;
  // The dimensions of extent > 1 of the grouped layout (x's C strides, group strides: 0 when reduced).
  const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  struct Dim {
    std::int64_t size, stride, group_stride;
    bool keep;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < L.rank; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    if (L.shape[ud] > 1) dims.push_back(Dim{L.shape[ud], L.x_stride[ud], L.group_stride[ud], L.group_stride[ud] != 0});
  }
  std::vector<Dim> kept, reduced;
  int first_reduced = -1, last_reduced = -1;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    const Dim& d = dims[static_cast<std::size_t>(i)];
    (d.keep ? kept : reduced).push_back(d);
    if (!d.keep) {
      if (first_reduced < 0) first_reduced = i;
      last_reduced = i;
    }
  }
  const bool adjacent = reduced.empty() || last_reduced - first_reduced + 1 == static_cast<int>(reduced.size());
  // inner: the group's elements are one contiguous run (the reduced dimensions trail, adjacent)
  const bool inner = reduced.empty() || (adjacent && last_reduced == static_cast<int>(dims.size()) - 1);
  std::int64_t columns = groups;  // outer: the innermost kept run
  if (!inner && adjacent) {
    columns = 1;
    for (std::size_t i = static_cast<std::size_t>(last_reduced) + 1; i < dims.size(); ++i) columns *= dims[i].size;
  }
  const int v = torch_vector_lanes(data.dtype);
  const std::int64_t vec_columns = columns - columns % (4 * v);
  std::int64_t n = 1;
  for (const Dim& d : reduced) n *= d.size;
  auto settle = [&](std::int64_t g, double z) {
    const auto u = static_cast<std::size_t>(g);
    if (std::isnan(z)) return;  // (cannot happen: the extreme is a zero of the group)
    if (mn[u] == 0) mn[u] = z;
    if (mx[u] == 0) mx[u] = z;
  };
  auto run_typed = [&](auto type_tag) {
    using T = decltype(type_tag);
    const T* x = std::is_same_v<T, float> ? reinterpret_cast<const T*>(data.f) : reinterpret_cast<const T*>(data.d);
    if (inner) {
      for (std::int64_t g = 0; g < groups; ++g) {
        if (!needs_replay(g)) continue;
        std::int64_t base = 0;
        for (const Dim& d : kept) base += (g / d.group_stride) % d.size * d.stride;
        settle(g, inner_zero(x + base, n, v));
      }
      return;
    }
    // outer: rows are the reduced dimensions (when they are not adjacent AIMET's reshape copies,
    // and the copy's rows follow x's C order too).
    std::vector<T> zero(static_cast<std::size_t>(groups), std::numeric_limits<T>::quiet_NaN());
    const int last = static_cast<int>(dims.size()) - 1;
    const std::int64_t run = dims[static_cast<std::size_t>(last)].size;
    const bool kept_run = dims[static_cast<std::size_t>(last)].keep;
    std::vector<std::int64_t> idx(dims.size(), 0);
    std::int64_t off = 0, g0 = 0;
    for (;;) {
      zeros_in_run(x + off, run, g0, kept_run, columns, vec_columns, zero.data());
      int d = last - 1;
      for (; d >= 0; --d) {
        const auto ud = static_cast<std::size_t>(d);
        off += dims[ud].stride;
        g0 += dims[ud].group_stride;
        if (++idx[ud] < dims[ud].size) break;
        off -= dims[ud].size * dims[ud].stride;
        g0 -= dims[ud].size * dims[ud].group_stride;
        idx[ud] = 0;
      }
      if (d < 0) break;
    }
    for (std::int64_t g = 0; g < groups; ++g)
      if (needs_replay(g)) settle(g, zero[static_cast<std::size_t>(g)]);
  };
  if (data.f) run_typed(0.0f);
  else run_typed(0.0);
}

// Element indices of encoding element k's slice, in C order (the histogram input).
struct SliceIndex {
  GroupedLayout L;
  // For each group, the flat indices of its elements in C order.
  std::vector<std::int64_t> offsets;  // group-major: group g's elements at [g * size, (g+1) * size)
};
SliceIndex slice_index(const ReducedView& rv, std::int64_t numel) {
  SliceIndex s;
  s.L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  const auto& L = s.L;
  s.offsets.resize(static_cast<std::size_t>(numel));
  std::vector<std::int64_t> fill(static_cast<std::size_t>(L.num_groups), 0);
  detail::for_each_element_group(L, [&](std::int64_t i, std::int64_t group) {
    s.offsets[static_cast<std::size_t>(group * L.group_size + fill[static_cast<std::size_t>(group)]++)] = i;
  });
  return s;
}

EncodingRange make_range(DType dtype, const Dims& shape, std::int64_t n) {
  EncodingRange r;
  r.dtype = dtype;
  r.shape = shape;
  r.min.resize(static_cast<std::size_t>(n));
  r.max.resize(static_cast<std::size_t>(n));
  return r;
}

void check_num_steps(double num_steps) {
  if (!(num_steps > 0)) fail(ErrorKind::kValue, "The number of quantization bins cannot be less than or equal to 0 (num_steps must be > 0).");
}

}  // namespace

// ================================================================================================
// MinMax
// ================================================================================================
MinMaxEncodingAnalyzer::MinMaxEncodingAnalyzer(AnalyzerShape shape) : shape_(std::move(shape)) {}

MinMaxEncodingAnalyzer::State MinMaxEncodingAnalyzer::batch_stats(const TensorView& x) const {
  check_dtype(x.dtype);
  const ReducedView rv = reduced_view(x.shape, shape_, false);
  check_not_empty(x);
  const Data data = read_data(x);
  State s;
  s.dtype = x.dtype;
  std::vector<std::uint8_t> negative_zero;
  grouped_min_max(data, rv, s.min, s.max, negative_zero);
  settle_zero_signs(data, rv, s.min, s.max, negative_zero);
  return s;
}

namespace {
// torch.minimum / maximum of the running statistics with a batch's (both contiguous, one row of
// all channels): the result in the promoted dtype, NaN propagating, ties (+0 against -0) as torch's
// loops give them.
void fold_min_max(MinMaxEncodingAnalyzer::State& into, const MinMaxEncodingAnalyzer::State& from) {
  const auto n = static_cast<std::int64_t>(into.min.size());
  const std::int64_t block = torch_binary_block(promote(into.dtype, from.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const bool vector_loop = torch_vector_loop(i, n, block);
    into.min[u] = torch_minimum(into.min[u], from.min[u], vector_loop);
    into.max[u] = torch_maximum(into.max[u], from.max[u], vector_loop);
  }
  into.dtype = promote(into.dtype, from.dtype);
}

// a.merge(b) for either analyzer kind: b's statistics are read under its shared lock while a's are
// written under its exclusive one, both taken at once (std::lock: deadlock-free against a concurrent
// b.merge(a)); a.merge(a) folds a copy taken under a's lock. `fold(state)` is the kind's
// merge_locked.
template <class State, class Fold>
void merge_under_locks(std::shared_mutex& mine, std::shared_mutex& theirs, const State& their_state, bool self,
                       Fold fold) {
  if (self) {
    std::unique_lock lock(mine);
    const State copy = their_state;
    fold(copy);
    return;
  }
  std::unique_lock write(mine, std::defer_lock);
  std::shared_lock read(theirs, std::defer_lock);
  std::lock(write, read);
  fold(their_state);
}
}  // namespace

void MinMaxEncodingAnalyzer::update_stats(const TensorView& x) {
  // The batch's statistics need no lock (shape_ never changes); only the fold does.
  State s = batch_stats(x);
  std::unique_lock lock(mutex_);
  if (state_.min.empty()) {
    state_ = std::move(s);
    return;
  }
  fold_min_max(state_, s);
}

void MinMaxEncodingAnalyzer::reset_stats() {
  std::unique_lock lock(mutex_);
  state_ = {};
}

bool MinMaxEncodingAnalyzer::has_stats() const {
  std::shared_lock lock(mutex_);
  return !state_.min.empty();
}

MinMaxEncodingAnalyzer::State MinMaxEncodingAnalyzer::state() const {
  std::shared_lock lock(mutex_);
  return state_;
}

void MinMaxEncodingAnalyzer::merge_locked(const State& other) {
  if (other.min.empty()) return;
  if (state_.min.empty()) {
    state_ = other;
    return;
  }
  fold_min_max(state_, other);
}

void MinMaxEncodingAnalyzer::merge(const MinMaxEncodingAnalyzer& other) {
  if (!(other.shape_.shape == shape_.shape)) fail(ErrorKind::kValue, "merge: the analyzers' shapes differ");
  // a.merge(a): min / max of equal values leave them as they are
  merge_under_locks(mutex_, other.mutex_, other.state_, &other == this,
                            [this](const State& s) { merge_locked(s); });
}

void MinMaxEncodingAnalyzer::set_state(State state) {
  if (!state.min.empty() || !state.max.empty()) {
    if (!is_analyzer_dtype(state.dtype))
      fail(ErrorKind::kValue, std::string("state: dtype ") + dtype_name(state.dtype) + " is not supported (float16, bfloat16, float32, float64)");
    const auto n = static_cast<std::size_t>(shape_.shape.numel());
    if (state.min.size() != n || state.max.size() != n)
      fail(ErrorKind::kValue, "state: min and max must have " + std::to_string(n) + " values (the analyzer's shape), got " +
                                  std::to_string(state.min.size()) + " and " + std::to_string(state.max.size()));
  }
  std::unique_lock lock(mutex_);
  state_ = std::move(state);
}

namespace {
// MinMaxEncodingAnalyzer.compute_encodings_from_stats, per element (T = the statistics' dtype,
// P = T promoted with float32):
//   mwz = clamp(min, max=0), xwz = clamp(max, min=0)                          (T; -0 and NaN kept)
//   diff = (xwz - mwz) / N                                                     (T)
//   adj = min_scale * (diff < min_scale)                                       (float32: a Python
//                                                           float times a bool tensor)
//   symmetric:  max' = xwz + f32(floor(N/2) * adj), min' = mwz - f32(ceil(N/2) * adj)   (P)
//               delta = maximum(max' / (floor(N/2) + [N == 3]), -min' / ceil(N/2))    (P)
//               min' = -ceil(N/2) * delta, max' = floor(N/2) * delta                   (P)
//   asymmetric: max' = xwz + f32(N * adj), min' = mwz                          (P, T)
//   max = clamp(max', max=finfo(T).max) -> T, min = clamp(min', min=finfo(T).min) -> T
void minmax_encoding(DType t, double mn, double mx, double n, bool symmetric, double& out_min, double& out_max) {
  const DType p = promote(t, DType::kFloat32);
  const double ms = minimum_scale(n);
  const double mwz = mn > 0 ? 0.0 : mn;
  const double xwz = mx < 0 ? 0.0 : mx;
  const double diff = op_in(t, op_in(t, xwz - mwz) / op_in(t == DType::kFloat64 ? t : DType::kFloat32, n));
  const double adj = diff < round_to(t, ms) ? f32(ms) : 0.0;
  double umin, umax;
  if (symmetric) {
    const double pos = std::floor(n / 2), neg = std::ceil(n / 2);
    umax = op_in(p, xwz + f32(f32(pos) * adj));
    umin = op_in(p, mwz - f32(f32(neg) * adj));
    const double den = pos + (n == 3 ? 1 : 0);
    const double a = op_in(p, umax / round_to(p, den));
    const double b = op_in(p, -umin / round_to(p, neg));
    const double delta = torch_maximum(a, b);
    umin = op_in(p, round_to(p, -neg) * delta);
    umax = op_in(p, round_to(p, pos) * delta);
  } else {
    umax = op_in(p, xwz + f32(f32(n) * adj));
    umin = mwz;
  }
  const double fmax = finfo_max(t);
  out_max = round_to(t, std::isnan(umax) ? umax : std::min(umax, round_to(p, fmax)));
  out_min = round_to(t, std::isnan(umin) ? umin : std::max(umin, -round_to(p, fmax)));
}
}  // namespace

EncodingRange MinMaxEncodingAnalyzer::compute_encodings(double num_steps, bool is_symmetric) const {
  check_num_steps(num_steps);
  std::shared_lock lock(mutex_);
  if (state_.min.empty()) throw StatisticsNotFoundError();
  const auto n = static_cast<std::int64_t>(state_.min.size());
  EncodingRange r = make_range(state_.dtype, shape_.shape, n);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    minmax_encoding(state_.dtype, state_.min[u], state_.max[u], num_steps, is_symmetric, r.min[u], r.max[u]);
  }
  return r;
}

EncodingRange MinMaxEncodingAnalyzer::compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const {
  MinMaxEncodingAnalyzer batch(shape_);
  batch.state_ = batch_stats(x);
  return batch.compute_encodings(num_steps, is_symmetric);
}

// ================================================================================================
// Histograms
// ================================================================================================
HistogramEncodingAnalyzer::HistogramEncodingAnalyzer(AnalyzerShape shape, HistogramOptions options)
    : shape_(std::move(shape)), options_(options) {
  if (options_.num_bins <= 0) fail(ErrorKind::kValue, "Number of bins cannot be less than or equal to 0 (num_bins must be > 0).");
  if (options_.num_bins > std::numeric_limits<std::int32_t>::max())
    fail(ErrorKind::kValue, "num_bins: must be below 2^31, got " + std::to_string(options_.num_bins));
  if (!(options_.growth_limit >= 1.0)) {
    std::ostringstream os;
    os << "Growth limit must be at least 1.0. Got " << options_.growth_limit << " (histogram_growth_limit must be >= 1)";
    fail(ErrorKind::kRuntime, os.str());
  }
}

namespace {

// _create_bin_edges: [lo, hi] (in dtype t; lo == hi widened by 0.5 in t), edges
// f32(f32(i * step) + lo) with step = f32((hi - lo) / bins), all float32.
void create_edges(DType t, double lo, double hi, std::int64_t bins, float* edges) {
  if (lo == hi) {
    lo = op_in(t, lo - 0.5);
    hi = op_in(t, hi + 0.5);
  }
  const float l = static_cast<float>(lo), h = static_cast<float>(hi);
  const float step = (h - l) / static_cast<float>(bins);
  for (std::int64_t i = 0; i <= bins; ++i) edges[i] = static_cast<float>(i) * step + l;
}

// ---- one histogram's input -----------------------------------------------------------------------
// `n` values of the data: contiguous from flat index `first`, or at the flat indices `idx`.
struct Slice {
  const Data* data = nullptr;
  std::int64_t first = 0;
  const std::int64_t* idx = nullptr;
  std::int64_t n = 0;
};

template <class T>
struct RunLoad {
  const T* p;
  T operator()(std::int64_t i) const { return p[i]; }
};
template <class T>
struct IndexLoad {
  const T* p;
  const std::int64_t* idx;
  T operator()(std::int64_t i) const { return p[idx[i]]; }
};

// f(load, T{}) with load(i) = the slice's i-th value in its storage type T (float or double).
template <class F>
void visit(const Slice& s, const F& f) {
  if (s.data->f) {
    if (s.idx) f(IndexLoad<float>{s.data->f, s.idx}, 0.0f);
    else f(RunLoad<float>{s.data->f + s.first}, 0.0f);
  } else {
    if (s.idx) f(IndexLoad<double>{s.data->d, s.idx}, 0.0);
    else f(RunLoad<double>{s.data->d + s.first}, 0.0);
  }
}

// Slices at least this long are split across threads when the histograms are not.
constexpr std::int64_t kSliceGrain = std::int64_t{1} << 16;

struct MinMaxPart {
  double mn = INFINITY, mx = -INFINITY;
};

// _get_min_max: torch.where(isfinite(x), x, +-inf).min() / .max() of the slice, bit for bit
// including the sign of a zero result. torch reduces a contiguous run (as one piece below 32768
// elements: longer runs are split between torch's threads, and polyquant follows a single-threaded
// torch) in `period` lanes, element i in lane i mod period, each lane keeping the LAST of equal
// values (vminps(acc, x) returns x on a tie of +0 and -0); then combines the lanes in a fixed tree:
//   float32   8 lanes, then the butterfly f(v_i, v_i^4), f(., ._i^2), f(u_0, u_1)
//   f16/bf16  16 lanes (two float vectors of one 16-element load), f(a_l, a_l+8), then the butterfly
//   float64   4 lanes, then a left-to-right chain
// and a run shorter than one load is a left-to-right chain over its elements (the 16-lane case of
// 9..15 elements first folds lane l + 8 into lane l). f(a, b) = a < b ? a : b (b on a tie).
struct TorchMinAllShape {
  int period;       // lanes of the accumulating loop
  bool fold_halves; // f16/bf16: lanes l and l + 8 first
  bool butterfly;   // float lanes: the shuffle tree; float64: a chain
};
TorchMinAllShape torch_min_all_shape(DType t) {
  const bool half = t == DType::kFloat16 || t == DType::kBFloat16;
  return {torch_vector_lanes(t), half, t != DType::kFloat64};
}

constexpr int kMaxPeriod = 16;
template <class T>
struct LaneMinMax {
  T lo[kMaxPeriod], hi[kMaxPeriod];
};

// min / max with ties taken by the second operand (the later element).
template <class T>
T min_later(T a, T b) { return a < b ? a : b; }
template <class T>
T max_later(T a, T b) { return a > b ? a : b; }

// The lanes over values [b, e) (b a multiple of the period): vectorisable.
template <class T, int P, class Load>
void lane_min_max(const Load& at, std::int64_t b, std::int64_t e, LaneMinMax<T>& acc) {
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  T lo[P], hi[P];
  for (int l = 0; l < P; ++l) lo[l] = inf, hi[l] = -inf;
  std::int64_t i = b;
  for (; i + P <= e; i += P) {
    for (int l = 0; l < P; ++l) {
      const T v = at(i + l);
      const bool finite = std::fabs(v) <= big;
      lo[l] = min_later(lo[l], finite ? v : inf);
      hi[l] = max_later(hi[l], finite ? v : -inf);
    }
  }
  for (int l = 0; i + l < e; ++l) {
    const T v = at(i + l);
    const bool finite = std::fabs(v) <= big;
    lo[l] = min_later(lo[l], finite ? v : inf);
    hi[l] = max_later(hi[l], finite ? v : -inf);
  }
  for (int l = 0; l < P; ++l) acc.lo[l] = lo[l], acc.hi[l] = hi[l];
}

template <class T>
T combine_lanes(const T* v, const TorchMinAllShape& shape, bool is_min) {
  auto f = [is_min](T a, T b) { return is_min ? min_later(a, b) : max_later(a, b); };
  T w[kMaxPeriod] = {};
  int n = shape.period;
  for (int l = 0; l < n; ++l) w[l] = v[l];
  if (shape.fold_halves) {
    for (int l = 0; l < 8; ++l) w[l] = f(w[l], w[l + 8]);
    n = 8;
  }
  if (!shape.butterfly) {
    T r = w[0];
    for (int l = 1; l < n; ++l) r = f(r, w[l]);
    return r;
  }
  T x[8], u[8];
  for (int l = 0; l < 8; ++l) x[l] = f(w[l], w[l ^ 4]);
  for (int l = 0; l < 8; ++l) u[l] = f(x[l], x[l ^ 2]);
  return f(u[0], u[1]);
}

// A run shorter than one load: a chain over its elements (16-lane loads of 9..15 elements first
// fold element l + 8 into element l).
template <class T, class Load>
MinMaxPart short_min_max(const Load& at, std::int64_t n, const TorchMinAllShape& shape) {
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  T lo[kMaxPeriod] = {}, hi[kMaxPeriod] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    const T v = at(i);
    const bool finite = std::fabs(v) <= big;
    lo[i] = finite ? v : inf;
    hi[i] = finite ? v : -inf;
  }
  std::int64_t m = n;
  if (shape.fold_halves && n > 8) {
    for (std::int64_t l = 0; l < n - 8; ++l) lo[l] = min_later(lo[l], lo[l + 8]), hi[l] = max_later(hi[l], hi[l + 8]);
    m = 8;
  }
  MinMaxPart r;
  T a = lo[0], c = hi[0];
  for (std::int64_t l = 1; l < m; ++l) a = min_later(a, lo[l]), c = max_later(c, hi[l]);
  r.mn = a, r.mx = c;
  return r;
}

// Finite min / max of a slice (+inf / -inf when it has none), as torch's min_all / max_all.
MinMaxPart finite_min_max(const Slice& s, DType dtype, bool parallel) {
  const TorchMinAllShape shape = torch_min_all_shape(dtype);
  MinMaxPart r;
  visit(s, [&](const auto& at, auto zero) {
    using T = decltype(zero);
    if (s.n == 0) return;
    if (s.n < shape.period) {
      r = short_min_max<T>(at, s.n, shape);
      return;
    }
    auto lanes = [&](std::int64_t b, std::int64_t e, LaneMinMax<T>& acc) {
      if (shape.period == 16) lane_min_max<T, 16>(at, b, e, acc);
      else if (shape.period == 8) lane_min_max<T, 8>(at, b, e, acc);
      else lane_min_max<T, 4>(at, b, e, acc);
    };
    LaneMinMax<T> acc;
    if (parallel && s.n >= 2 * kSliceGrain) {
      // Pieces of whole periods, folded lane by lane in order (the last of equal values wins, so
      // folding pieces in order equals one pass).
      const std::int64_t pieces = (s.n + kSliceGrain - 1) / kSliceGrain;
      std::vector<LaneMinMax<T>> part(static_cast<std::size_t>(pieces));
      detail::parallel_for(pieces, 1, [&](std::int64_t pb, std::int64_t pe) {
        for (std::int64_t q = pb; q < pe; ++q)
          lanes(q * kSliceGrain, std::min(s.n, (q + 1) * kSliceGrain), part[static_cast<std::size_t>(q)]);
      });
      acc = part[0];
      for (std::size_t q = 1; q < part.size(); ++q)
        for (int l = 0; l < shape.period; ++l)
          acc.lo[l] = min_later(acc.lo[l], part[q].lo[l]), acc.hi[l] = max_later(acc.hi[l], part[q].hi[l]);
    } else {
      lanes(0, s.n, acc);
    }
    r.mn = combine_lanes(acc.lo, shape, true);
    r.mx = combine_lanes(acc.hi, shape, false);
  });
  return r;
}

// torch.histc counts of values [b, e) (as float32) plus the values below `below` / above `above`
// (compared in the storage type), for bins <= 2^24: `counts` has bins + 1 slots, the last one
// taking the values outside the range. Blocks: bin indices are computed vectorised (the steps of
// HistcBinning::scaled and ::bin, written out so that they stay in this loop: with bins - 1
// exact in float32, trunc(min(q, bins - 1)) == min(trunc(q), bins - 1)), then counted.
template <class T, class Load>
void bin_part(const Load& at, std::int64_t b, std::int64_t e, const detail::HistcBinning& hb, T below, T above, std::int64_t* counts,
              std::int64_t& n_below, std::int64_t& n_above) {
  constexpr int kBlock = 256;
  const float left = hb.left, right = hb.right, nbins = hb.nbins, width = hb.width;
  const float last = static_cast<float>(hb.bins - 1);
  const auto outside = static_cast<std::int32_t>(hb.bins);
  std::int32_t idx[kBlock];
  std::int64_t nb = 0, na = 0;
  for (std::int64_t i = b; i < e; i += kBlock) {
    const int m = static_cast<int>(std::min<std::int64_t>(kBlock, e - i));
    std::int32_t bb = 0, ba = 0;
    for (int j = 0; j < m; ++j) {
      const T v = at(i + j);
      const float f = static_cast<float>(v);
      const float q = ((f - left) * nbins) / width;
      const bool valid = (q >= 0.0f) & (q < 9.2233720368547758e18f);  // else x86's int64 conversion gives INT64_MIN -> 0
      const float qc = valid ? (q < last ? q : last) : 0.0f;
      const bool in = (f >= left) & (f <= right);
      idx[j] = in ? static_cast<std::int32_t>(qc) : outside;
      bb += static_cast<std::int32_t>(v < below);
      ba += static_cast<std::int32_t>(v > above);
    }
    nb += bb;
    na += ba;
    for (int j = 0; j < m; ++j) ++counts[idx[j]];
  }
  n_below += nb;
  n_above += na;
}

// Counts of one histogram over [lo, hi] (torch.histc of the float32 data) plus the values below
// `below` / above `above` (compared in the data's dtype) into the end bins; float32 counts. With
// `parallel`, a long slice is split across threads; the integer counts add exactly.
void bin_slice(const Slice& s, std::int64_t bins, double lo, double hi, double below, double above, bool parallel, float* counts_out) {
  const Data& d = *s.data;
  thread_local std::vector<std::int64_t> counts;
  counts.assign(static_cast<std::size_t>(bins + 1), 0);  // + the slot of values outside the range
  std::int64_t n_below = 0, n_above = 0;
  const double bl = round_to(d.dtype, below), ab = round_to(d.dtype, above);
  if (lo == hi || bins > (std::int64_t{1} << 24)) {
    // torch.histc over the data's own extremes, or too many bins for bin_part: the reference loop.
    std::vector<float> xs(static_cast<std::size_t>(s.n));
    visit(s, [&](const auto& at, auto) {
      for (std::int64_t i = 0; i < s.n; ++i) {
        xs[static_cast<std::size_t>(i)] = static_cast<float>(at(i));
        n_below += at(i) < bl;
        n_above += at(i) > ab;
      }
    });
    detail::torch_histc_f32(xs, bins, lo, hi, counts.data());
  } else {
    const detail::HistcBinning hb(lo, hi, bins);
    visit(s, [&](const auto& at, auto zero) {
      using T = decltype(zero);
      const T tb = static_cast<T>(bl), ta = static_cast<T>(ab);
      if (parallel && s.n >= 2 * kSliceGrain) {
        std::mutex mu;
        std::int64_t* total = counts.data();
        detail::parallel_for(s.n, kSliceGrain, [&](std::int64_t b, std::int64_t e) {
          std::vector<std::int64_t> part(static_cast<std::size_t>(bins + 1), 0);
          std::int64_t pb = 0, pa = 0;
          bin_part<T>(at, b, e, hb, tb, ta, part.data(), pb, pa);
          std::lock_guard<std::mutex> lock(mu);
          for (std::int64_t k = 0; k < bins; ++k) total[k] += part[static_cast<std::size_t>(k)];
          n_below += pb;
          n_above += pa;
        });
      } else {
        bin_part<T>(at, 0, s.n, hb, tb, ta, counts.data(), n_below, n_above);
      }
    });
  }
  for (std::int64_t k = 0; k < bins; ++k) counts_out[k] = static_cast<float>(counts[static_cast<std::size_t>(k)]);
  counts_out[0] = counts_out[0] + static_cast<float>(n_below);
  counts_out[bins - 1] = counts_out[bins - 1] + static_cast<float>(n_above);
}

// Whether every encoding element's slice is one contiguous run of x in C order (no kept
// dimension after a reduced one), so histogram k reads elements [k * size, (k + 1) * size).
bool slices_contiguous(const ReducedView& rv) {
  bool reduced_seen = false;
  for (std::size_t d = 0; d < rv.keep.size(); ++d) {
    if (rv.view[static_cast<int>(d)] == 1) continue;
    if (!rv.keep[d]) reduced_seen = true;
    else if (reduced_seen) return false;
  }
  return true;
}

// Runs body(k) for k in [0, h), across threads when `parallel`; an error is that of the lowest k
// that failed, as a loop in order would report (later histograms may have run).
void for_each_histogram(std::int64_t h, bool parallel, const std::function<void(std::int64_t)>& body) {
  if (!parallel) {
    for (std::int64_t k = 0; k < h; ++k) body(k);
    return;
  }
  std::mutex mu;
  std::int64_t failed = h;
  std::exception_ptr error;
  detail::parallel_for(h, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      try {
        body(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (k < failed) failed = k, error = std::current_exception();
        return;
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

// Histograms run one per thread when there are several and enough data; otherwise each long
// slice is split across threads.
bool histograms_in_parallel(std::int64_t h, std::int64_t numel) {
  return h > 1 && numel >= 2 * kSliceGrain && detail::num_threads() > 1;
}

}  // namespace

HistogramState HistogramEncodingAnalyzer::batch_stats(const TensorView& x) const { return batch_stats_impl(x, true); }

// The batch's histograms (with_counts) or only its ranges and edges, raising the errors binning
// would raise either way.
HistogramState HistogramEncodingAnalyzer::batch_stats_impl(const TensorView& x, bool with_counts) const {
  check_dtype(x.dtype);
  const ReducedView rv = reduced_view(x.shape, shape_, true);
  check_not_empty(x);
  const Data data = read_data(x);
  const bool contiguous = data.n > 0 && slices_contiguous(rv);
  SliceIndex si;
  if (contiguous) si.L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  else si = slice_index(rv, data.n);
  const std::int64_t h = si.L.num_groups, size = si.L.group_size, bins = options_.num_bins;
  HistogramState s;
  s.dtype = x.dtype;
  s.num_bins = bins;
  s.counts.assign(static_cast<std::size_t>(h * bins), 0.0f);
  s.edges.assign(static_cast<std::size_t>(h * (bins + 1)), 0.0f);
  s.min.resize(static_cast<std::size_t>(h));
  s.max.resize(static_cast<std::size_t>(h));
  const bool across = histograms_in_parallel(h, data.n);
  for_each_histogram(h, across, [&](std::int64_t k) {
    Slice sl;
    sl.data = &data;
    sl.n = size;
    if (contiguous) sl.first = k * size;
    else sl.idx = si.offsets.data() + k * size;
    const MinMaxPart r = finite_min_max(sl, data.dtype, !across);
    float* edges = s.edges.data() + k * (bins + 1);
    create_edges(data.dtype, r.mn, r.mx, bins, edges);
    if (with_counts || edges[0] == edges[bins]) {
      thread_local std::vector<float> scratch;
      float* out = s.counts.data() + k * bins;
      if (!with_counts) scratch.resize(static_cast<std::size_t>(bins)), out = scratch.data();
      bin_slice(sl, bins, edges[0], edges[bins], edges[0], edges[bins], !across, out);
    } else {
      detail::HistcBinning(edges[0], edges[bins], bins);  // torch.histc's range checks
    }
    s.min[static_cast<std::size_t>(k)] = r.mn;
    s.max[static_cast<std::size_t>(k)] = r.mx;
  });
  // The growth limits AIMET fixes at the first batch: lo - range * g / 2, hi + range * g / 2 (f32).
  s.limit_lo.resize(static_cast<std::size_t>(h));
  s.limit_hi.resize(static_cast<std::size_t>(h));
  const float g = static_cast<float>(options_.growth_limit);
  for (std::int64_t k = 0; k < h; ++k) {
    const float lo = s.edges[static_cast<std::size_t>(k * (bins + 1))], hi = s.edges[static_cast<std::size_t>(k * (bins + 1) + bins)];
    const float range = hi - lo;
    const float half = (range * g) / 2.0f;
    s.limit_lo[static_cast<std::size_t>(k)] = lo - half;
    s.limit_hi[static_cast<std::size_t>(k)] = hi + half;
  }
  return s;
}

namespace {

// One histogram of AIMET's merge_stats: grows [min, max] to the batch's (clamped to the limits),
// re-binning the counts when it grew, then bins `xs` (the batch's data for this histogram) over the
// new range. W = the working dtype (float32, or float64 for a float64 batch).
void merge_histogram(DType batch_dtype, double new_min, double new_max, std::int64_t bins, float* counts, float* edges, double& cur_min,
                     double& cur_max, float limit_lo, float limit_hi, const Slice* batch, bool parallel, const float* other_counts,
                     const float* other_edges) {
  const DType w = batch_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  auto rw = [&](double v) { return round_to(w, v); };
  auto clamp_t = [](double x, double lo, double hi) {
    if (std::isnan(lo) || std::isnan(hi)) return static_cast<double>(NAN);
    const double r = x < lo ? lo : x;
    return hi < r ? hi : r;
  };
  const double umin = clamp_t(new_min, limit_lo, edges[0]);
  const double umax = clamp_t(new_max, edges[bins], limit_hi);
  std::vector<float> updates(static_cast<std::size_t>(bins), 0.0f);
  if (umin == cur_min && umax == cur_max) {
    std::copy(counts, counts + bins, updates.begin());
  } else {
    if (w == DType::kFloat64) fail(ErrorKind::kRuntime, "index_add_(): self (Float) and source (Double) must have the same scalar type");
    const double dest_w = rw(rw(umax - umin) / static_cast<double>(static_cast<float>(bins)));
    const float src_w = edges[1] - edges[0];
    const float umin32 = static_cast<float>(umin), dw32 = static_cast<float>(dest_w);
    auto bin_num = [&](float start) {
      const float q = (start - umin32) / dw32;
      // int32 conversion as x86 does it (out of range / NaN: INT32_MIN), then min(., bins - 1).
      std::int64_t i = (std::isnan(q) || q >= 2147483648.0f || q < -2147483648.0f) ? std::int64_t{INT32_MIN} : static_cast<std::int32_t>(q);
      i = std::min<std::int64_t>(i, bins - 1);
      if (i < 0) fail(ErrorKind::kRuntime, "index out of range in self");
      return i;
    };
    std::vector<double> dest_upd(static_cast<std::size_t>(bins));
    std::vector<std::int64_t> dest_idx(static_cast<std::size_t>(bins));
    for (std::int64_t j = 0; j < bins; ++j) {
      const float a = edges[j];
      const std::int64_t k = bin_num(a);
      const double dest_end = rw(umin + rw(dest_w * static_cast<double>(k + 1)));
      const double split = round_half_even(rw(rw(rw(dest_end - a) / src_w) * counts[j]));
      dest_idx[static_cast<std::size_t>(j)] = k;
      dest_upd[static_cast<std::size_t>(j)] = torch_minimum(split, counts[j]);
    }
    for (std::int64_t j = 0; j < bins; ++j)
      updates[static_cast<std::size_t>(dest_idx[static_cast<std::size_t>(j)])] += static_cast<float>(dest_upd[static_cast<std::size_t>(j)]);
    for (std::int64_t j = 0; j < bins; ++j) {
      if (!(dest_upd[static_cast<std::size_t>(j)] < counts[j])) continue;
      const std::int64_t k = bin_num(edges[j] + dw32);
      updates[static_cast<std::size_t>(k)] += static_cast<float>(rw(counts[j] - dest_upd[static_cast<std::size_t>(j)]));
    }
  }
  std::vector<float> fresh(static_cast<std::size_t>(bins), 0.0f);
  if (other_counts == nullptr) {
    bin_slice(*batch, bins, umin, umax, umin, umax, parallel, fresh.data());
  } else {
    // Another analyzer's histogram as the batch: its counts moved into [umin, umax] by the same
    // proportional split (exact when its edges are the new edges).
    const float dw32 = static_cast<float>(rw(rw(umax - umin) / static_cast<double>(static_cast<float>(bins))));
    std::vector<float> new_edges(static_cast<std::size_t>(bins + 1));
    create_edges(w, umin, umax, bins, new_edges.data());
    if (std::equal(new_edges.begin(), new_edges.end(), other_edges)) {
      std::copy(other_counts, other_counts + bins, fresh.begin());
    } else {
      const float src_w = other_edges[1] - other_edges[0];
      const float umin32 = static_cast<float>(umin);
      for (std::int64_t j = 0; j < bins; ++j) {
        const float a = other_edges[j];
        const float q = (a - umin32) / dw32;
        const std::int64_t k = std::clamp<std::int64_t>(static_cast<std::int64_t>(q), 0, bins - 1);
        const double dest_end = rw(umin + rw(static_cast<double>(dw32) * static_cast<double>(k + 1)));
        const double split = round_half_even(rw(rw(rw(dest_end - a) / src_w) * other_counts[j]));
        const double du = std::min<double>(split, other_counts[j]);
        fresh[static_cast<std::size_t>(k)] += static_cast<float>(du);
        if (du < other_counts[j]) {
          const std::int64_t k2 = std::clamp<std::int64_t>(static_cast<std::int64_t>(((a + dw32) - umin32) / dw32), 0, bins - 1);
          fresh[static_cast<std::size_t>(k2)] += static_cast<float>(other_counts[j] - du);
        }
      }
    }
  }
  for (std::int64_t k = 0; k < bins; ++k) counts[k] = fresh[static_cast<std::size_t>(k)] + updates[static_cast<std::size_t>(k)];
  create_edges(w, umin, umax, bins, edges);
  cur_min = umin;
  cur_max = umax;
}

}  // namespace

void HistogramEncodingAnalyzer::update_stats(const TensorView& x) {
  // Held for the whole update: later batches are binned into the running ranges. The core's
  // thread pool never takes an analyzer's lock, so the parallel loops below cannot deadlock on it.
  std::unique_lock lock(mutex_);
  if (state_.empty()) {
    state_ = batch_stats(x);
    return;
  }
  // The batch's ranges (validated as AIMET's binning validates them; its histograms are unused).
  const HistogramState batch = batch_stats_impl(x, false);
  const Data data = read_data(x);
  const std::int64_t h = static_cast<std::int64_t>(state_.min.size()), bins = options_.num_bins;
  const std::int64_t chunk = data.n / h;  // AIMET: reshape(x, (num_histograms, -1))
  const bool across = histograms_in_parallel(h, data.n);
  for_each_histogram(h, across, [&](std::int64_t k) {
    const auto u = static_cast<std::size_t>(k);
    Slice sl;
    sl.data = &data;
    sl.first = k * chunk;
    sl.n = chunk;
    merge_histogram(x.dtype, batch.min[u], batch.max[u], bins, state_.counts.data() + k * bins, state_.edges.data() + k * (bins + 1),
                    state_.min[u], state_.max[u], state_.limit_lo[u], state_.limit_hi[u], &sl, !across, nullptr, nullptr);
  });
  state_.dtype = x.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

void HistogramEncodingAnalyzer::reset_stats() {
  std::unique_lock lock(mutex_);
  state_ = {};
}

bool HistogramEncodingAnalyzer::has_stats() const {
  std::shared_lock lock(mutex_);
  return !state_.empty();
}

HistogramState HistogramEncodingAnalyzer::state() const {
  std::shared_lock lock(mutex_);
  return state_;
}

EncodingRange HistogramEncodingAnalyzer::compute_encodings(double num_steps, bool is_symmetric) const {
  std::shared_lock lock(mutex_);
  return compute_from_stats(state_, num_steps, is_symmetric);
}

void HistogramEncodingAnalyzer::merge_locked(const HistogramState& other) {
  if (other.empty()) return;
  if (state_.empty()) {
    state_ = other;
    return;
  }
  const std::int64_t h = static_cast<std::int64_t>(state_.min.size()), bins = options_.num_bins;
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    merge_histogram(other.dtype, other.min[u], other.max[u], bins, state_.counts.data() + k * bins, state_.edges.data() + k * (bins + 1),
                    state_.min[u], state_.max[u], state_.limit_lo[u], state_.limit_hi[u], nullptr, false, other.counts.data() + k * bins,
                    other.edges.data() + k * (bins + 1));
  }
  state_.dtype = other.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

void HistogramEncodingAnalyzer::merge(const HistogramEncodingAnalyzer& other) {
  if (!(other.shape_.shape == shape_.shape) || other.options_.num_bins != options_.num_bins)
    fail(ErrorKind::kValue, "merge: the analyzers' shapes or bin counts differ");
  // a.merge(a): the statistics fed twice (same edges: the counts double)
  merge_under_locks(mutex_, other.mutex_, other.state_, &other == this,
                            [this](const HistogramState& s) { merge_locked(s); });
}

void HistogramEncodingAnalyzer::set_state(HistogramState s) {
  if (!s.empty()) {
    if (!is_analyzer_dtype(s.dtype))
      fail(ErrorKind::kValue, std::string("state: dtype ") + dtype_name(s.dtype) + " is not supported (float16, bfloat16, float32, float64)");
    const auto h = static_cast<std::size_t>(shape_.shape.numel());
    const auto b = static_cast<std::size_t>(options_.num_bins);
    auto expect = [](const char* what, std::size_t got, std::size_t want) {
      if (got != want)
        fail(ErrorKind::kValue, std::string("state: ") + what + " has " + std::to_string(got) + " values, expected " + std::to_string(want) +
                                    " (the analyzer's shape and num_bins)");
    };
    if (s.num_bins != options_.num_bins)
      fail(ErrorKind::kValue, "state: num_bins is " + std::to_string(s.num_bins) + ", the analyzer's is " + std::to_string(options_.num_bins));
    expect("min", s.min.size(), h);
    expect("max", s.max.size(), h);
    expect("histogram", s.counts.size(), h * b);
    expect("bin_edges", s.edges.size(), h * (b + 1));
    expect("range_limit (low)", s.limit_lo.size(), h);
    expect("range_limit (high)", s.limit_hi.size(), h);
  } else if (!s.max.empty() || !s.counts.empty() || !s.edges.empty() || !s.limit_lo.empty() || !s.limit_hi.empty()) {
    fail(ErrorKind::kValue, "state: min is empty but other statistics are not (an empty state has none)");
  }
  std::unique_lock lock(mutex_);
  state_ = std::move(s);
}

EncodingRange HistogramEncodingAnalyzer::compute_from(const HistogramState& s, double num_steps, bool is_symmetric) const {
  return compute_from_stats(s, num_steps, is_symmetric);
}

EncodingRange HistogramEncodingAnalyzer::compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const {
  return compute_from_stats(batch_stats(x), num_steps, is_symmetric);
}

// ================================================================================================
// Percentile
// ================================================================================================
PercentileEncodingAnalyzer::PercentileEncodingAnalyzer(AnalyzerShape shape, std::int64_t num_bins, double percentile)
    : HistogramEncodingAnalyzer(std::move(shape), HistogramOptions{num_bins, std::numeric_limits<double>::infinity()}) {
  set_percentile(percentile);
}

void PercentileEncodingAnalyzer::set_percentile(double percentile) {
  if (!(percentile >= 50 && percentile <= 100)) fail(ErrorKind::kValue, "Percentile value must be within 50-100 range");
  percentile_ = percentile;
}

namespace {
// adjust_min_max on float32 scalars (0-d tensors: torch's scalar loops, so ties keep the first
// operand): include 0, clamp finite, widen narrow ranges, symmetric grid.
void adjust_min_max(double cmin, double cmax, double n, bool symmetric, double& out_min, double& out_max) {
  const double ms = minimum_scale(n);
  cmin = (std::isnan(cmin)) ? cmin : (0.0 < cmin ? 0.0 : cmin);
  cmax = (std::isnan(cmax)) ? cmax : (cmax < 0.0 ? 0.0 : cmax);
  cmin = torch_clamp(cmin, -FLT_MAX, 0.0);
  cmax = torch_clamp(cmax, 0.0, FLT_MAX);
  const double thr = f32(f32(cmax - cmin) / f32(n));
  if (thr < f32(ms)) {
    if (symmetric) {
      cmin = f32(cmin - f32(ms * std::ceil(n / 2)));
      cmax = f32(cmax + f32(ms * std::floor(n / 2)));
    } else {
      cmax = f32(cmax + f32(ms * n));
    }
  }
  if (symmetric) {
    const double pos = std::floor(n / 2), neg = std::ceil(n / 2);
    const double a = f32(cmax / f32(pos)), b = f32(-cmin / f32(neg));
    const double delta = b > a ? b : a;  // Python's max(a, b)
    cmin = f32(f32(-neg) * delta);
    cmax = f32(f32(pos) * delta);
  }
  out_min = cmin;
  out_max = cmax;
}
}  // namespace

EncodingRange PercentileEncodingAnalyzer::compute_from_stats(const HistogramState& s, double num_steps, bool is_symmetric) const {
  check_num_steps(num_steps);
  if (s.empty()) throw StatisticsNotFoundError();
  const std::int64_t h = static_cast<std::int64_t>(s.min.size()), bins = s.num_bins;
  EncodingRange r = make_range(s.dtype, shape().shape, h);
  std::vector<float> cum(static_cast<std::size_t>(bins));
  const double p = percentile_;
  for (std::int64_t k = 0; k < h; ++k) {
    const float* c = s.counts.data() + k * bins;
    const float* e = s.edges.data() + k * (bins + 1);
    double run = 0;  // torch's cumsum accumulates in double, rounding each output to float32
    for (std::int64_t i = 0; i < bins; ++i) {
      run += c[i];
      cum[static_cast<std::size_t>(i)] = static_cast<float>(run);
    }
    std::int64_t min_index = 0, max_index = bins;
    if (p != 100) {
      const float total = cum[static_cast<std::size_t>(bins - 1)];
      const float t_max = (total * static_cast<float>(p)) / 100.0f;
      const float t_min = total * static_cast<float>(1 - p / 100);
      auto left = [&](float t) { return std::lower_bound(cum.begin(), cum.end(), t) - cum.begin(); };
      max_index = left(t_max);
      min_index = left(t_min);
    }
    double mn, mx;
    adjust_min_max(e[min_index], e[max_index], num_steps, is_symmetric, mn, mx);
    r.min[static_cast<std::size_t>(k)] = round_to(s.dtype, mn);
    r.max[static_cast<std::size_t>(k)] = round_to(s.dtype, mx);
  }
  return r;
}

// ================================================================================================
// SQNR
// ================================================================================================
SqnrOptions tf_enhanced_options(int torch_sum_lanes) {
  SqnrOptions o;
  o.num_bins = 512;
  o.asymmetric_delta_candidates = 17;
  o.symmetric_delta_candidates = 101;
  o.offset_candidates = 21;
  o.gamma = 3.0;
  o.histogram_growth_limit = 3.0;
  o.torch_sum_lanes = torch_sum_lanes;
  return o;
}

SqnrEncodingAnalyzer::SqnrEncodingAnalyzer(AnalyzerShape shape, SqnrOptions options)
    : HistogramEncodingAnalyzer(std::move(shape), HistogramOptions{options.num_bins, options.histogram_growth_limit}), sqnr_(options) {
  if (sqnr_.torch_sum_lanes != 8 && sqnr_.torch_sum_lanes != 16)
    fail(ErrorKind::kValue, "torch_sum_lanes: must be 8 (AVX2) or 16 (AVX-512), got " + std::to_string(sqnr_.torch_sum_lanes));
  // AIMET chunks with range(0, n, max_parallelism): 0 raises ValueError there (at compute time).
  if (sqnr_.max_parallelism < 1)
    fail(ErrorKind::kValue, "max_parallelism: must be a positive integer, got " + std::to_string(sqnr_.max_parallelism));
  // The delta candidates are max_delta * k / (count - 1), k = 1..count: AIMET divides by zero for
  // 1 (inf / NaN encodings) and has no candidate for 0 or less. The upper bound keeps the
  // candidate tables (histograms x deltas x offsets) addressable.
  constexpr std::int64_t kMaxCandidates = std::int64_t{1} << 24;
  auto check_deltas = [&](const char* name, std::int64_t v) {
    if (v < 2 || v > kMaxCandidates)
      fail(ErrorKind::kValue, std::string(name) + ": must be an integer from 2 to " + std::to_string(kMaxCandidates) + ", got " + std::to_string(v));
  };
  check_deltas("asymmetric_delta_candidates", sqnr_.asymmetric_delta_candidates);
  check_deltas("symmetric_delta_candidates", sqnr_.symmetric_delta_candidates);
  // The offset grid has min(N + 2, count) - 1 values spaced N / (count - 2): 2 divides by zero
  // in AIMET, 0 or less gives a backward range torch.arange refuses; 1 leaves only the observed
  // offset (AIMET's grid is empty then).
  const std::int64_t oc = sqnr_.offset_candidates;
  if (oc != 1 && (oc < 3 || oc > kMaxCandidates))
    fail(ErrorKind::kValue, "offset_candidates: must be 1 or an integer from 3 to " + std::to_string(kMaxCandidates) + ", got " + std::to_string(oc));
}

namespace {

// torch.arange(start, end, step, dtype=float32) on the CPU: length ceil((end - start) / step) in
// double. torch's kernel works in double and its compiler fuses the multiply-add (measured: the
// element -255 + 19 * (255 / 19) comes out as the fused residual -2^-47 * 1.25, not 0): element i
// of the scalar loop is f32(fma(step, i, start)); the vector loop runs whole blocks of two vectors
// of `lanes` elements, each vector from its own base b = f32(fma(step, i, start)), its element j
// f32(fma(j, step, b)). (Checked against torch 2.15 on 3000 random (n, offset_candidates).)
std::vector<float> torch_arange_f32(double start, double end, double step, int lanes) {
  const double size_d = std::ceil((end - start) / step);
  const auto n = static_cast<std::int64_t>(size_d);
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  std::int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (std::int64_t v = i; v < i + 2 * lanes; v += lanes) {
      const double base = static_cast<float>(std::fma(step, static_cast<double>(v), start));
      for (int j = 0; j < lanes; ++j) out[static_cast<std::size_t>(v + j)] = static_cast<float>(std::fma(static_cast<double>(j), step, base));
    }
  }
  for (; i < n; ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(std::fma(step, static_cast<double>(i), start));
  return out;
}

// GCC if-converts (and so vectorises) the comparisons of these loops only without trapping math;
// results are unchanged (only floating-point exception flags could differ, and none are read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
// The estimated noise of one histogram for one (delta, offset) candidate, in W (float, or double
// for the asymmetric candidates of float64 statistics), each step rounded as torch's:
//   m_b = (e0 + hd / 2) + hd * b   (hd = e1 - e0; the first sum float32, the rest in W)
//   q = clamp(rne(m_b / delta - off), 0, N); err_b = |(q + off) * delta - m_b|^2 * count_b
//   (times gamma where q was clipped), summed in torch's vector order. `err` is bins of scratch.
// Builtins rather than std::fabs / std::copysign: GCC does not inline functions compiled with
// other optimisation options into these loops.
inline float abs_of(float v) { return __builtin_fabsf(v); }
inline double abs_of(double v) { return __builtin_fabs(v); }
inline float sign_from(float r, float v) { return __builtin_copysignf(r, v); }
inline double sign_from(double r, double v) { return __builtin_copysign(r, v); }

template <class W>
W candidate_noise(const float* counts, float base, float hd, std::int64_t bins, W delta, W off, W wn, W wg, bool use_gamma, int w_lanes,
                  W* err) {
  const W big = sizeof(W) == 8 ? W(4503599627370496.0) : W(8388608.0f);
  const W wg1 = use_gamma ? wg : W(1);
  const auto nb = static_cast<std::int32_t>(bins);  // < 2^31 (constructor); int32 -> W converts vectorised
  for (std::int32_t b = 0; b < nb; ++b) {
    const W m = static_cast<W>(base) + static_cast<W>(static_cast<W>(hd) * static_cast<W>(b));
    const W t = m / delta;
    W q = static_cast<W>(t - off);
    const W a = abs_of(q);
    const W r = static_cast<W>(static_cast<W>(a + big) - big);
    q = a < big ? sign_from(r, q) : q;  // rint_even, branch-free
    const bool clipped = (q < 0) | (q > wn);
    q = q < 0 ? W(0) : (wn < q ? wn : q);
    W e = static_cast<W>(q + off);
    e = static_cast<W>(e * delta);
    e = static_cast<W>(e - m);
    e = abs_of(e);
    e = static_cast<W>(e * e);
    e = static_cast<W>(e * static_cast<W>(counts[b]));
    err[b] = static_cast<W>(e * (clipped ? wg1 : W(1)));  // e * 1 == e exactly
  }
  return detail::torch_sum_row(err, bins, w_lanes);
}

template float candidate_noise<float>(const float*, float, float, std::int64_t, float, float, float, float, bool, int, float*);
template double candidate_noise<double>(const float*, float, float, std::int64_t, double, double, double, double, bool, int, double*);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The noise of every candidate of every histogram (h histograms of nc candidates, deltas / offsets
// flat in `cd` / `co`), computed across threads, then per histogram the index of the first minimum
// (torch.min: NaN wins, then the smallest, the first of equals).
template <class W>
std::vector<std::int64_t> best_candidates(const HistogramState& s, std::int64_t nc, const std::vector<double>& cd,
                                          const std::vector<double>& co, double n, double gamma, int lanes) {
  const std::int64_t h = static_cast<std::int64_t>(s.min.size()), bins = s.num_bins;
  std::vector<W> noise(static_cast<std::size_t>(h * nc));
  const W wn = static_cast<W>(n), wg = static_cast<W>(gamma);
  const bool use_gamma = gamma != 1.0;
  const int w_lanes = sizeof(W) == 8 ? lanes / 2 : lanes;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(bins, 1));
  detail::parallel_for(h * nc, grain, [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<W> err;
    err.resize(static_cast<std::size_t>(bins));
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t k = i / nc;
      const float* edges = s.edges.data() + k * (bins + 1);
      const float hd = edges[1] - edges[0];
      const float base = edges[0] + hd / 2.0f;
      noise[static_cast<std::size_t>(i)] =
          candidate_noise<W>(s.counts.data() + k * bins, base, hd, bins, static_cast<W>(cd[static_cast<std::size_t>(i)]),
                             static_cast<W>(co[static_cast<std::size_t>(i)]), wn, wg, use_gamma, w_lanes, err.data());
    }
  });
  std::vector<std::int64_t> best(static_cast<std::size_t>(h), 0);
  for (std::int64_t k = 0; k < h; ++k) {
    const W* nk = noise.data() + k * nc;
    W best_noise = nk[0];
    for (std::int64_t c = 1; c < nc; ++c) {
      if (!std::isnan(best_noise) && (std::isnan(nk[c]) || nk[c] < best_noise)) {
        best[static_cast<std::size_t>(k)] = c;
        best_noise = nk[c];
      }
    }
  }
  return best;
}

}  // namespace

// _LpNormEncodingAnalyzer.compute_encodings_from_stats with p = 2 (see the header comment): the
// candidates of every histogram first, then all noises across threads, then the picks.
EncodingRange SqnrEncodingAnalyzer::compute_from_stats(const HistogramState& s, double n, bool is_symmetric) const {
  if (s.empty()) throw StatisticsNotFoundError();
  check_num_steps(n);
  const DType t = s.dtype;
  const std::int64_t h = static_cast<std::int64_t>(s.min.size());
  const double ms = minimum_scale(n);
  const int lanes = sqnr_.torch_sum_lanes;
  EncodingRange r = make_range(t, shape().shape, h);
  const DType w = promote(t, DType::kFloat32);
  auto rw = [&](double v) { return round_to(w, v); };
  // Offsets of the asymmetric grid (the same for every histogram but the observed one).
  const double num_offsets = std::min(n + 2, static_cast<double>(sqnr_.offset_candidates));
  std::vector<double> grid_offsets;
  if (!is_symmetric) {
    const double step = n / (num_offsets - 2);
    for (float g : torch_arange_f32(-n, step, step, lanes)) grid_offsets.push_back(round_half_even(g));
  }
  const std::int64_t na = sqnr_.asymmetric_delta_candidates;
  const std::int64_t nd = sqnr_.symmetric_delta_candidates;
  const std::int64_t no = static_cast<std::int64_t>(grid_offsets.size()) + 1;
  const std::int64_t nc = is_symmetric ? nd : na * no;
  std::vector<double> cd(static_cast<std::size_t>(h * nc)), co(static_cast<std::size_t>(h * nc));
  std::vector<double> test_deltas(static_cast<std::size_t>(na)), test_offsets(static_cast<std::size_t>(no));
  // Ties of torch.maximum / minimum (+0 against -0, which decide the sign of a zero min): the
  // per-histogram operations run on rows of one chunk of max_parallelism histograms, the clamp of
  // the candidates on rows of nc candidates per histogram.
  const std::int64_t block_t = torch_binary_block(t, lanes), block_w = torch_binary_block(w, lanes);
  const std::int64_t chunk = sqnr_.max_parallelism;
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    double* kd = cd.data() + k * nc;
    double* ko = co.data() + k * nc;
    const bool chunk_vector = torch_vector_loop(k % chunk, std::min(chunk, h - k / chunk * chunk), block_t);
    // min_v = minimum(min, 0), max_v = maximum(max, 0), max_v = maximum(max_v, min_v + ms * N) (T)
    const double min_v = torch_minimum(s.min[u], 0.0, chunk_vector);
    double max_v = torch_maximum(s.max[u], 0.0, chunk_vector);
    max_v = torch_maximum(max_v, op_in(t, min_v + (t == DType::kFloat64 ? ms * n : f32(ms * n))), chunk_vector);
    if (is_symmetric) {
      // delta_max = 2 * f32(maximum(max_v, -min_v)) / N; deltas f32(f32(delta_max * k) / (D - 1)),
      // at least min_scale; one offset floor(-N / 2).
      const double mm = round_to(DType::kFloat32, torch_maximum(max_v, -min_v));
      const float dmax = static_cast<float>(f32(2.0 * mm) / f32(n));
      const float off = static_cast<float>(std::floor(-n / 2));
      for (std::int64_t i = 0; i < nd; ++i) {
        float d = (dmax * static_cast<float>(i + 1)) / static_cast<float>(nd - 1);
        kd[i] = static_cast<float>(torch_maximum(d, f32(ms)));
        ko[i] = off;
      }
      continue;
    }
    // Asymmetric candidates: each (delta, offset) pair clamped into the observed range.
    const double md = f32(f32(op_in(t, max_v - min_v)) / f32(n));
    const double obs_off = round_half_even(rw(min_v / md));
    const double obs_min = rw(md * obs_off);
    const double obs_max = rw(obs_min + f32(md * f32(n)));
    for (std::int64_t i = 0; i < na; ++i) test_deltas[static_cast<std::size_t>(i)] = f32(f32(md * f32(static_cast<double>(i + 1))) / f32(static_cast<double>(na - 1)));
    std::copy(grid_offsets.begin(), grid_offsets.end(), test_offsets.begin());
    test_offsets.back() = obs_off;
    for (std::size_t a = 0; a < test_deltas.size(); ++a) {
      for (std::size_t o = 0; o < test_offsets.size(); ++o) {
        const double delta = test_deltas[a];
        double tmin = rw(delta * test_offsets[o]);
        double tmax = rw(tmin + f32(delta * f32(n)));
        const bool vector_loop = torch_vector_loop(static_cast<std::int64_t>(a * test_offsets.size() + o), nc, block_w);
        tmin = torch_maximum(obs_min, tmin, vector_loop);
        tmax = torch_minimum(obs_max, tmax, vector_loop);
        double d2 = rw(rw(tmax - tmin) / rw(n));
        d2 = torch_maximum(d2, rw(ms));  // torch.tensor([min_scale], dtype=W)
        kd[a * test_offsets.size() + o] = d2;
        ko[a * test_offsets.size() + o] = round_half_even(rw(tmin / d2));
      }
    }
  }
  const std::vector<std::int64_t> best = (!is_symmetric && w == DType::kFloat64)
                                             ? best_candidates<double>(s, nc, cd, co, n, sqnr_.gamma, lanes)
                                             : best_candidates<float>(s, nc, cd, co, n, sqnr_.gamma, lanes);
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const auto c = static_cast<std::size_t>(k * nc + best[u]);
    const double best_delta = cd[c], best_offset = co[c];
    if (is_symmetric) {
      const double mn = f32(best_offset * best_delta);
      r.min[u] = round_to(t, mn);
      r.max[u] = round_to(t, f32(mn + f32(f32(n) * best_delta)));
    } else {
      const double mn = rw(best_offset * best_delta);
      r.min[u] = round_to(t, mn);
      r.max[u] = round_to(t, rw(mn + rw(rw(n) * best_delta)));
    }
  }
  return r;
}

}  // namespace polyquant::aimet
