// torch's CPU loops as the AIMET analyzers reproduce them, bit for bit: vector widths and which loop
// (vector or scalar) handles an element, which decides the ties of maximum / minimum (+0 against
// -0); clamp and round; the lane order of min_all / max_all; arange's per-vector bases.
//
// (The order in which amin / amax settle the sign of a zero min / max lives with its only user,
// minmax.cc.)
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "polyquant/tensor.h"

namespace polyquant::aimet::analyzers_detail {

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
// float_lanes is 16. Every torch loop modelled by the analyzers takes its lanes from here.
inline int torch_vector_lanes(DType t, int float_lanes = 8) {
  return 4 * float_lanes / static_cast<int>(dtype_size(t));
}
inline std::int64_t torch_binary_block(DType t, int float_lanes = 8) { return 2 * torch_vector_lanes(t, float_lanes); }
inline bool torch_vector_loop(std::int64_t index, std::int64_t row, std::int64_t block) { return index < row - row % block; }
inline double torch_maximum(double a, double b, bool vector_loop = true) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return vector_loop ? b : a;
  return a > b ? a : b;
}
inline double torch_minimum(double a, double b, bool vector_loop = true) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return vector_loop ? b : a;
  return a < b ? a : b;
}
// torch.clamp(x, lo, hi) with scalar bounds: min(max(x, lo), hi), NaN kept, ties keep x.
inline double torch_clamp(double x, double lo, double hi) {
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
inline double round_half_even(double v) { return rint_even(v); }

// ---- min_all / max_all --------------------------------------------------------------------------
// A finite min and max (+inf / -inf when there is none).
struct MinMaxPart {
  double mn = INFINITY, mx = -INFINITY;
};

// torch.where(isfinite(x), x, +-inf).min() / .max() (AIMET's _get_min_max) of a slice, bit for bit
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
inline TorchMinAllShape torch_min_all_shape(DType t) {
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

// ---- arange -------------------------------------------------------------------------------------
// torch.arange(start, end, step, dtype=float32) on the CPU: length ceil((end - start) / step) in
// double. torch's kernel works in double and its compiler fuses the multiply-add (measured: the
// element -255 + 19 * (255 / 19) comes out as the fused residual -2^-47 * 1.25, not 0): element i
// of the scalar loop is f32(fma(step, i, start)); the vector loop runs whole blocks of two vectors
// of `lanes` elements, each vector from its own base b = f32(fma(step, i, start)), its element j
// f32(fma(j, step, b)). (Checked against torch 2.15 on 3000 random (n, offset_candidates).)
std::vector<float> torch_arange_f32(double start, double end, double step, int lanes);

}  // namespace polyquant::aimet::analyzers_detail
