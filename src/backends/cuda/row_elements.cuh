// Device-side access to every op's per-element row (kernels/row.h), generated from the op list:
// <name>_row::element<T, kMode>(params, args, j) calls <name>_row_element<T, kMode> for ops whose
// parameters carry a RoundingMode `mode`, and <name>_row_element<T> for the others. Defined for
// every op of ops.inc; only ops with a per-element row (kHasRowElement) may be instantiated.
// Included by backends/cuda/row_kernels.cu and tests/cuda/formulas_on_device.cu.
#pragma once

#include <concepts>
#include <cstdint>

#include "families/aimet/kernels.h"
#include "families/onnx/kernels.h"
#include "families/qkeras/kernels.h"
#include "families/qonnx/kernels.h"

namespace polyquant::detail::cuda {
inline namespace POLYQUANT_TARGET_NAMESPACE {  // one copy per build flavour (core/target.h)

// Ops whose parameters choose a rounding mode at run time: a launcher resolves it once per launch
// to a template argument, as the reference row does once per row (with_rounding_mode).
template <class P>
concept RoundsByMode = requires(const P& p) {
  { p.mode } -> std::convertible_to<RoundingMode>;
};

#define POLYQUANT_OP(Enum, name, works, vector)                                    \
  struct name##_row {                                                              \
    template <class T, RoundingMode kMode, class P>                                \
    __device__ static void element(const P& p, const RowArgs& a, std::int64_t j) { \
      if constexpr (RoundsByMode<P>) name##_row_element<T, kMode>(p, a, j);        \
      else name##_row_element<T>(p, a, j);                                         \
    }                                                                              \
  };
#include "kernels/ops.inc"
#undef POLYQUANT_OP

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail::cuda
