// The row driver shared by every float32 SIMD kernel: the vector forms of numpy's sign and of the
// rounding modes, the output policies, and for_each_vector, which walks a row (contiguous or
// broadcast operands) a vector at a time. Written once against the `Vec` vocabulary and compiled
// per kernel set inside that set's namespace. Include after defining `Vec`.
//
// Guarded per kernel set: several kernel files of one set may include it into the same namespace.
#ifndef POLYQUANT_ROW_LOOP_INCLUDED
#define POLYQUANT_ROW_LOOP_INCLUDED

// Vector bodies are lambdas; they must be inlined into the row loop or every vector pays a call.
#define POLYQUANT_ALWAYS_INLINE __attribute__((always_inline))

// numpy.sign in vector form: +1, -1, +0 for zeros, NaN for NaN.
inline Vec::F sign_v(Vec::F x) {
  const Vec::F zero = Vec::zero();
  Vec::F s = Vec::select(Vec::isnan(x), x, zero);
  s = Vec::select(Vec::lt(x, zero), Vec::splat(-1.0f), s);
  return Vec::select(Vec::gt(x, zero), Vec::splat(1.0f), s);
}

// A mask with every lane set (true) or none (false): a per-row choice inside a vector body.
inline Vec::M all_lanes(bool set) {
  const Vec::F zero = Vec::zero();
  return set ? Vec::le(zero, zero) : Vec::lt(zero, zero);
}

// The float16 working precision inside the float32 kernels (QONNX's half_steps: numpy's float16
// arithmetic, which rounds every float32 result to float16): the lanes rounded to float16 and back
// (the hardware's round trip); without it, the lanes as they are.
template <bool kHalf>
POLYQUANT_ALWAYS_INLINE inline Vec::F half_step(Vec::F v) {
  if constexpr (kHalf) return Vec::round_to_half(v);
  else return v;
}

// The rounding modes in vector form, as rounding functors. The two modes QONNX models use by
// default have their own type, one instruction in their loops: half-even (Quant's ROUND, numpy's
// round) and floor (Trunc's FLOOR). The five others share one type whose choice is in lane masks
// set once per row,
//   R(x) = sign(x) * F(|x| + offset)  (UP: ceil, no offset; HALF_UP: floor, +0.5; HALF_DOWN: ceil, -0.5)
//   R(x) = F(x)                       (CEIL, DOWN: ceil, trunc),
// so a kernel compiles three loops per rounding site instead of seven, for a few selects per vector
// on the rarer modes. |x| - 0.5 and |x| + (-0.5) are the same IEEE operation, so the results equal
// the per-mode forms bit for bit, the sign of zero and NaN's payload (taken from x) included.
// Every mode's F of a float16 value is a float16 value, so float16 work (kHalf) changes only the
// sign-magnitude modes: |x| +- 0.5 rounds to float16 (above 1024 it is a tie, which goes to even),
// and numpy's float16 product sign * magnitude returns the second operand's NaN (round_t's
// numpy_sign_times_magnitude<Half>): a NaN x comes back as |x|, quieted.
template <RoundingMode kMode>
struct FixedRoundingV {
  static_assert(kMode == RoundingMode::kHalfEven || kMode == RoundingMode::kFloor);
  RoundingMode mode = kMode;
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F x) const {
    if constexpr (kMode == RoundingMode::kHalfEven) return Vec::rint(x);
    else return Vec::floor(x);
  }
};
template <bool kHalf = false>
struct AnyRoundingV {
  RoundingMode mode;
  Vec::M by_magnitude, with_offset, by_ceil, by_floor;  // neither ceil nor floor: trunc
  Vec::F offset;
  explicit AnyRoundingV(RoundingMode m)
      : mode(m),
        by_magnitude(all_lanes(m == RoundingMode::kUp || m == RoundingMode::kHalfUp || m == RoundingMode::kHalfDown)),
        with_offset(all_lanes(m == RoundingMode::kHalfUp || m == RoundingMode::kHalfDown)),
        by_ceil(all_lanes(m == RoundingMode::kCeil || m == RoundingMode::kUp || m == RoundingMode::kHalfDown)),
        by_floor(all_lanes(m == RoundingMode::kFloor || m == RoundingMode::kHalfUp)),
        offset(Vec::splat(m == RoundingMode::kHalfDown ? -0.5f : 0.5f)) {}
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F x) const {
    const Vec::F magnitude = Vec::abs(x);
    const Vec::F shifted = half_step<kHalf>(Vec::add(magnitude, offset));
    const Vec::F y = Vec::select(by_magnitude, Vec::select(with_offset, shifted, magnitude), x);
    const Vec::F r = Vec::select(by_ceil, Vec::ceil(y), Vec::select(by_floor, Vec::floor(y), Vec::trunc(y)));
    // numpy_sign_times_magnitude of scalar_math.h: a NaN sign (NaN x) comes back as itself,
    // quieted; in float16, the magnitude's NaN (r is NaN exactly where x is, so the first NaN of
    // r * sign is r's)
    const Vec::F signed_r = kHalf ? Vec::mul_first_nan(r, sign_v(x)) : Vec::mul_first_nan(sign_v(x), r);
    return Vec::select(by_magnitude, signed_r, r);
  }
};
// f(rounding): the row's mode as one of the three functor types (kHalf: for float16 work).
template <bool kHalf = false, class F>
POLYQUANT_ALWAYS_INLINE inline void with_vector_rounding(RoundingMode mode, F&& f) {
  if (mode == RoundingMode::kHalfEven) f(FixedRoundingV<RoundingMode::kHalfEven>{});
  else if (mode == RoundingMode::kFloor) f(FixedRoundingV<RoundingMode::kFloor>{});
  else f(AnyRoundingV<kHalf>(mode));
}

// How a row's results are stored. FloatOut: the body returns the float32 result vector.
// WideProductOut: the body returns two float32 vectors whose product is the result, stored as
// float64 (the product of two floats is exact in double: the reference's float64 outputs; of two
// NaNs, the first's, as mul_first_nan). ScaledOut's float64 product keeps the same rule.
struct FloatOut {
  using T = float;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  static void store(float* p, const Result& r) { Vec::storeu(p, r); }
  static void stream(float* p, const Result& r) { Vec::stream(p, r); }
};
struct WideProduct {
  Vec::F a, b;
};
struct WideProductOut {
  using T = double;
  using Result = WideProduct;
  static constexpr bool kCanStream = false;
  static void store(double* p, const Result& r) { Vec::store_product_f64(p, r.a, r.b); }
  static void stream(double* p, const Result& r) { store(p, r); }
};
// ScaledOut<T>: the body returns float32 values c, stored as c * factor computed in float64 (then
// rounded to float32 for a float32 output): the product with a weak Python-float scale that
// float32 does not hold (FloatQuantParams::product_scale).
template <class OutT>
struct ScaledOut {
  using T = OutT;
  using Result = Vec::F;
  static constexpr bool kCanStream = false;
  double factor;
  void store(T* p, const Result& r) const {
    if constexpr (std::is_same_v<T, double>) Vec::store_scaled_f64(p, r, factor);
    else Vec::store_scaled_f32(p, r, factor);
  }
  void stream(T* p, const Result& r) const { store(p, r); }
};

// FloatOuts<N>: the body returns N float32 vectors (Vectors<N>): the first stored at the row's
// output (as FloatOut, streamed where the call asks), the others at the same element of their own
// arrays (`extra`; the AIMET backward's forward value, scale and offset terms). An extra marked
// `big` is streamed with the row's output where its own address is aligned; the others (buffers
// read again at once, in L1) are always stored.
template <int N>
struct Vectors {
  Vec::F v[N];  // a plain array: std::array<__m512, N> drops the vector type's alignment attribute
};
template <int N>
struct FloatOuts {
  using T = float;
  using Result = Vectors<N>;
  static constexpr bool kCanStream = true;
  const float* row;  // the row's output: element j of a store at p is p - row
  std::array<float*, N - 1> extra;
  std::array<bool, N - 1> big{};
  void store(float* p, const Result& r) const {
    const std::ptrdiff_t j = p - row;
    Vec::storeu(p, r.v[0]);
    for (int i = 0; i + 1 < N; ++i) Vec::storeu(extra[i] + j, r.v[i + 1]);
  }
  void stream(float* p, const Result& r) const {
    const std::ptrdiff_t j = p - row;
    Vec::stream(p, r.v[0]);
    for (int i = 0; i + 1 < N; ++i) {
      float* q = extra[i] + j;
      if (big[i] && reinterpret_cast<std::uintptr_t>(q) % (Vec::kLanes * sizeof(float)) == 0) Vec::stream(q, r.v[i + 1]);
      else Vec::storeu(q, r.v[i + 1]);
    }
  }
  // Elements [j, j + count) of a partial vector.
  void store_partial(std::int64_t j, std::int64_t count, const Result& r) const {
    alignas(64) float lanes[N][Vec::kLanes];
    for (int i = 0; i < N; ++i) Vec::storeu(lanes[i], r.v[i]);
    float* out = const_cast<float*>(row);
    for (std::int64_t l = 0; l < count; ++l) out[j + l] = lanes[0][l];
    for (int i = 0; i + 1 < N; ++i) {
      for (std::int64_t l = 0; l < count; ++l) extra[i][j + l] = lanes[i + 1][l];
    }
  }
};

// Drives a row: loads kN operands (contiguous, broadcast, repeated-row or per-row), applies `body`
// to whole vectors and stores. Partial vectors (the tail, and the head peeled for aligned
// streaming stores) go through the same body on a zero-padded copy, so every element sees
// identical arithmetic. Any operand may be broadcast, x included (a zero-stride x: every element
// is the same value). A repeated-row operand (RowArgs::repeated_row_mask) is loaded at the
// element's offset within its row, which the loop carries along instead of dividing. With
// per-row operands (RowArgs::per_row_mask: one value per row of row_len elements) the row is
// walked row by row, each per-row operand a splat of its row's value, each row's tail a partial
// vector; a kernel whose vector path is for_each_vector may so declare
// ElementwiseCall::per_row_operands.
template <int kN, class Out = FloatOut, class Body>
POLYQUANT_ALWAYS_INLINE inline void for_each_vector(const RowArgs& a, Body&& body, const Out& policy = Out{}) {
  using T = typename Out::T;
  constexpr int L = Vec::kLanes;
  const float* src[kN];
  Vec::F splats[kN];
  for (int k = 0; k < kN; ++k) {
    src[k] = a.input<float>(k);
    splats[k] = Vec::splat(src[k][0]);
  }
  T* out = static_cast<T*>(a.out);
  const std::int64_t n = a.n;

  static_assert(L <= kRepeatedRowPad, "a repeated-row operand is padded for the widest vector");
  auto partial = [&](std::int64_t j, std::int64_t count) {
    alignas(64) float buf[kN][L];
    alignas(64) T res[L];
    Vec::F v[kN];
    for (int k = 0; k < kN; ++k) {
      if (a.is_broadcast(k) || a.is_per_row(k)) {  // per-row: splats[k] holds the row's value
        v[k] = splats[k];
        continue;
      }
      const float* from = a.is_repeated_row(k) ? src[k] + j % a.row_len : src[k] + j;
      for (int l = 0; l < L; ++l) buf[k][l] = l < count ? from[l] : 0.0f;
      v[k] = Vec::loadu(buf[k]);
    }
    if constexpr (requires { policy.store_partial(j, count, body(v)); }) {
      policy.store_partial(j, count, body(v));  // several outputs: the policy knows where
    } else {
      policy.store(res, body(v));
      for (std::int64_t l = 0; l < count; ++l) out[j + l] = res[l];
    }
  };

  Vec::F v[kN];
  constexpr std::uint32_t kAllMask = (1u << kN) - 1u;
  constexpr std::uint32_t kParamsMask = kAllMask & ~1u;
  if (a.per_row_mask != 0) {
    // Row by row: whole vectors of the row, then the row's tail as a partial vector. Streamed
    // when every row's vectors are aligned (aligned output, rows a whole number of vectors).
    const std::int64_t len = a.row_len;
    const bool stream = Out::kCanStream && a.stream && len % L == 0 &&
                        reinterpret_cast<std::uintptr_t>(out) % (L * sizeof(T)) == 0;
    const std::uint32_t per_row = a.per_row_mask & kAllMask;
    if (((per_row | a.broadcast_mask) & 1u) == 0 && ((per_row | a.broadcast_mask) & kParamsMask) == kParamsMask &&
        a.repeated_row_mask == 0) {
      // x runs on; every parameter is one value or one per row (a scale per short row).
      for (std::int64_t row = 0, start = 0; start < n; ++row, start += len) {
        for (int k = 1; k < kN; ++k) {
          if ((per_row >> k) & 1u) splats[k] = Vec::splat(src[k][row]);
          v[k] = splats[k];
        }
        std::int64_t j = start;
        if (stream) {
          for (; j + L <= start + len; j += L) {
            v[0] = Vec::loadu(src[0] + j);
            policy.stream(out + j, body(v));
          }
        } else {
          for (; j + L <= start + len; j += L) {
            v[0] = Vec::loadu(src[0] + j);
            policy.store(out + j, body(v));
          }
        }
        if (j < start + len) partial(j, start + len - j);
      }
    } else if (kN > 2 && ((per_row | a.broadcast_mask) & 3u) == 0 &&
               ((per_row | a.broadcast_mask) & kParamsMask & ~2u) == (kParamsMask & ~2u) && a.repeated_row_mask == 0) {
      // Two operands run on (a gradient and x: AIMET's blockwise backward), every parameter one
      // value or one per row: the parameters in registers, as in the row loop without rows.
      const float* s0 = src[0];
      const float* s1 = src[1];
      const Out local_policy = policy;  // local copies: see the loop without rows below
      auto local_body = body;
      for (std::int64_t row = 0, start = 0; start < n; ++row, start += len) {
        for (int k = 2; k < kN; ++k) {
          if ((per_row >> k) & 1u) splats[k] = Vec::splat(src[k][row]);
          v[k] = splats[k];
        }
        std::int64_t j = start;
        if (stream) {
          for (; j + L <= start + len; j += L) {
            v[0] = Vec::loadu(s0 + j);
            v[1] = Vec::loadu(s1 + j);
            local_policy.stream(out + j, local_body(v));
          }
        } else {
          for (; j + L <= start + len; j += L) {
            v[0] = Vec::loadu(s0 + j);
            v[1] = Vec::loadu(s1 + j);
            local_policy.store(out + j, local_body(v));
          }
        }
        if (j < start + len) partial(j, start + len - j);
      }
    } else {
      // Any mix (several operands run on, e.g. a gradient and x); repeated-row operands are read at
      // the offset within the row.
      const std::uint32_t splat_mask = per_row | (a.broadcast_mask & kAllMask);
      const std::uint32_t repeated = a.repeated_row_mask & kAllMask;
      for (std::int64_t row = 0, start = 0; start < n; ++row, start += len) {
        for (int k = 0; k < kN; ++k) {
          if ((per_row >> k) & 1u) splats[k] = Vec::splat(src[k][row]);
        }
        std::int64_t j = start;
        for (; j + L <= start + len; j += L) {
          for (int k = 0; k < kN; ++k) {
            if ((splat_mask >> k) & 1u) v[k] = splats[k];
            else v[k] = Vec::loadu(src[k] + (((repeated >> k) & 1u) ? j - start : j));
          }
          const typename Out::Result r = body(v);
          if (stream) policy.stream(out + j, r);
          else policy.store(out + j, r);
        }
        if (j < start + len) partial(j, start + len - j);
      }
    }
    if (stream) Vec::fence();
    return;
  }
  std::int64_t j = 0;
  const bool stream = Out::kCanStream && a.stream && (reinterpret_cast<std::uintptr_t>(out) % sizeof(T)) == 0;
  if (stream) {
    const std::uintptr_t misalign = reinterpret_cast<std::uintptr_t>(out) % (L * sizeof(T));
    if (misalign != 0) {
      const std::int64_t head = std::min<std::int64_t>(n, (L * sizeof(T) - misalign) / sizeof(T));
      partial(0, head);
      j = head;
    }
  }
  if ((a.broadcast_mask & kAllMask) == kAllMask) {
    // Every operand, x included, is one value (a zero-stride x: np.broadcast_to, torch expand(),
    // a 0-d x against zero-stride parameters): one result fills the row.
    for (int k = 0; k < kN; ++k) v[k] = splats[k];
    const typename Out::Result r = body(v);
    if (stream) {
      for (; j + L <= n; j += L) policy.stream(out + j, r);
    } else {
      for (; j + L <= n; j += L) policy.store(out + j, r);
    }
  } else if ((a.broadcast_mask & kAllMask) == kParamsMask && !a.is_repeated_row(0)) {
    // Per-tensor and per-channel rows, the common case: parameters stay in registers.
    for (int k = 1; k < kN; ++k) v[k] = splats[k];
    if (stream) {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(src[0] + j);
        policy.stream(out + j, body(v));
      }
    } else {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(src[0] + j);
        policy.store(out + j, body(v));
      }
    }
  } else if (kN > 2 && (a.broadcast_mask & kAllMask) == (kParamsMask & ~2u) && a.repeated_row_mask == 0) {
    // Two running operands (a gradient and x) against parameters in registers: the gradients'
    // rows (AIMET's backward), with the loop's choices made once.
    for (int k = 2; k < kN; ++k) v[k] = splats[k];
    const float* s0 = src[0];
    const float* s1 = src[1];
    // Local copies of the output policy and the body: `partial` takes both by reference, so the
    // originals' members (the extra outputs' pointers, a body's captured constants) were reloaded
    // from the stack after every store (a float store may alias them); the copies stay in
    // registers where the body captures by value.
    const Out local_policy = policy;
    auto local_body = body;
    if (stream) {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(s0 + j);
        v[1] = Vec::loadu(s1 + j);
        local_policy.stream(out + j, local_body(v));
      }
    } else {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(s0 + j);
        v[1] = Vec::loadu(s1 + j);
        local_policy.store(out + j, local_body(v));
      }
    }
  } else if ((a.broadcast_mask & kAllMask) == 0 && a.repeated_row_mask == 0) {
    // Every operand runs on (parameters with one value per element: AIMET's per-channel gradient
    // on the last axis, whose scale and offset are rows of the sums' columns).
    const Out local_policy = policy;  // local copies: see the two-operand loop above
    auto local_body = body;
    if (stream) {
      for (; j + L <= n; j += L) {
        for (int k = 0; k < kN; ++k) v[k] = Vec::loadu(src[k] + j);
        local_policy.stream(out + j, local_body(v));
      }
    } else {
      for (; j + L <= n; j += L) {
        for (int k = 0; k < kN; ++k) v[k] = Vec::loadu(src[k] + j);
        local_policy.store(out + j, local_body(v));
      }
    }
  } else if (a.repeated_row_mask == 0) {
    for (; j + L <= n; j += L) {
      for (int k = 0; k < kN; ++k) v[k] = a.is_broadcast(k) ? splats[k] : Vec::loadu(src[k] + j);
      const typename Out::Result r = body(v);
      if (stream) policy.stream(out + j, r);
      else policy.store(out + j, r);
    }
  } else {
    // Repeated-row operands read at `in_row` = j % row_len, advanced by L % row_len per vector.
    const std::int64_t len = a.row_len, step = L % len;
    std::int64_t in_row = j % len;
    for (; j + L <= n; j += L) {
      for (int k = 0; k < kN; ++k) {
        if (a.is_broadcast(k)) v[k] = splats[k];
        else v[k] = Vec::loadu(src[k] + (a.is_repeated_row(k) ? in_row : j));
      }
      const typename Out::Result r = body(v);
      if (stream) policy.stream(out + j, r);
      else policy.store(out + j, r);
      in_row += step;
      if (in_row >= len) in_row -= len;
    }
  }
  if (j < n) partial(j, n - j);
  if (stream) Vec::fence();
}

#endif  // POLYQUANT_ROW_LOOP_INCLUDED
