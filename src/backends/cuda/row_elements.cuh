// Typed access to every op's per-element row (kernels/row.h), generated from the op list:
// <name>_row::element<T, kMode>(params, args, j) calls <name>_row_element<T, kMode> for ops whose
// parameters carry a RoundingMode `mode`, and <name>_row_element<T> for the others. Defined for
// every op of ops.inc; only ops with a per-element row (kHasRowElement) may be instantiated.
// Host and device code: included by backends/cuda/row_kernels.cu, tests/cuda/formulas_on_device.cu
// and the host stand-in (tests/cpp/core/fake_device.cc), which runs the kernels' thread loops.
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

// f.template operator()<kMode>() with the op's rounding mode (ops whose parameters carry one: a
// kernel per mode), or with kHalfEven, unused, for the others (one kernel).
template <class P, class F>
void with_mode_of(const P& p, F&& f) {
  if constexpr (RoundsByMode<P>) with_rounding_mode(p.mode, f);
  else f.template operator()<RoundingMode::kHalfEven>();
}

// kSecondStream: the operand the op reads per element besides x in its common use, or -1
// (RowElementTraits::kSecondStream; the layouts that read ahead read it ahead too).
#define POLYQUANT_OP(Enum, name, works, vector)                                      \
  struct name##_row {                                                                \
    static constexpr int kSecondStream = kRowElementSecondStream<KernelOp::Enum>;    \
    template <class T, RoundingMode kMode, class P>                                  \
    POLYQUANT_HD static void element(const P& p, const RowArgs& a, std::int64_t j) { \
      if constexpr (RoundsByMode<P>) name##_row_element<T, kMode>(p, a, j);          \
      else name##_row_element<T>(p, a, j);                                           \
    }                                                                                \
  };
#include "kernels/ops.inc"
#undef POLYQUANT_OP

// name##_row::kSecondStream of an op known at run time (host code: the host stand-in's launches).
inline int second_stream_of(KernelOp op) {
  switch (op) {
#define POLYQUANT_OP(Enum, name, works, vector) \
  case KernelOp::Enum: return name##_row::kSecondStream;
#include "kernels/ops.inc"
#undef POLYQUANT_OP
  }
  return -1;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail::cuda
