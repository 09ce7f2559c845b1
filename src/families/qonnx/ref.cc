// Scalar reference kernels of the QONNX ops: a plain loop over the per-element spec. They are the
// portable fallback, the only kernels for float16/float64 work, and the oracle of the kernel tests.
#include <type_traits>

#include "kernels/registry.h"

namespace polyquant::detail::ref {
namespace {

template <class T>
using Storage = std::conditional_t<std::is_same_v<T, Half>, std::uint16_t, T>;

template <class T>
T get(const RowArgs& a, int i, std::int64_t j) {
  if constexpr (std::is_same_v<T, Half>) return Half::from_bits(a.at<std::uint16_t>(i, j));
  else return a.at<T>(i, j);
}

template <class T>
void put(const RowArgs& a, std::int64_t j, T v) {
  if constexpr (std::is_same_v<T, Half>) static_cast<std::uint16_t*>(a.out)[j] = v.bits;
  else static_cast<T*>(a.out)[j] = v;
}

template <class T>
void int_quant_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const IntQuantParams*>(params);
  const T lo = from_double<T>(p.lo), hi = from_double<T>(p.hi);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) {
      put<T>(a, j, int_quant_element<kMode>(get<T>(a, 0, j), get<T>(a, 1, j), get<T>(a, 2, j), p.bipolar, lo, hi,
                                            p.divide_as, p.add_as));
    }
  });
}

template <class T>
void bipolar_quant_row(const void*, const RowArgs& a) {
  for (std::int64_t j = 0; j < a.n; ++j) put<T>(a, j, bipolar_quant_element(get<T>(a, 0, j), get<T>(a, 1, j)));
}

template <class T>
void trunc_v1_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) {
      put<T>(a, j, trunc_v1_element<kMode>(get<T>(a, 0, j), get<T>(a, 1, j), get<T>(a, 2, j), get<T>(a, 3, j),
                                           p.divide_as, p.add_as));
    }
  });
}

template <class T>
void trunc_v2_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) {
      put<T>(a, j, trunc_v2_element<kMode>(get<T>(a, 0, j), get<T>(a, 1, j), get<T>(a, 2, j), get<T>(a, 3, j),
                                           get<T>(a, 4, j), get<T>(a, 5, j), get<T>(a, 6, j), get<T>(a, 7, j),
                                           p.divide_as, p.add_as));
    }
  });
}

template <class T>
void float_quant_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FloatQuantParams*>(params);
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for (std::int64_t j = 0; j < a.n; ++j) {
      const double v = float_quant_element<kMode>(get<T>(a, 0, j), get<T>(a, 1, j), get<T>(a, 2, j), a.at<double>(3, j), p);
      if (p.double_output) static_cast<double*>(a.out)[j] = v;
      else static_cast<float*>(a.out)[j] = static_cast<float>(v);
    }
  });
}

}  // namespace

#define POLYQUANT_REF_KERNELS(suffix, T)                                                            \
  void int_quant_##suffix(const void* p, const RowArgs& a) { int_quant_row<T>(p, a); }             \
  void bipolar_quant_##suffix(const void* p, const RowArgs& a) { bipolar_quant_row<T>(p, a); }     \
  void trunc_v1_##suffix(const void* p, const RowArgs& a) { trunc_v1_row<T>(p, a); }               \
  void trunc_v2_##suffix(const void* p, const RowArgs& a) { trunc_v2_row<T>(p, a); }               \
  void float_quant_##suffix(const void* p, const RowArgs& a) { float_quant_row<T>(p, a); }
POLYQUANT_REF_KERNELS(f16, Half)
POLYQUANT_REF_KERNELS(f32, float)
POLYQUANT_REF_KERNELS(f64, double)
#undef POLYQUANT_REF_KERNELS

}  // namespace polyquant::detail::ref
