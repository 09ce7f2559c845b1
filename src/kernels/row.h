// The contract between the elementwise engine and every kernel: one call processes a run of n
// output elements whose operands are either contiguous (stride 1) or one broadcast value.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/target.h"
#include "kernels/ops.h"

namespace polyquant::detail {

inline constexpr int kMaxOperands = 8;
// Values past the row in a repeated-row operand's buffer (RowArgs::repeated_row_mask): the widest
// vector of any kernel set (16 float32 lanes).
inline constexpr std::int64_t kRepeatedRowPad = 16;

struct RowArgs {
  std::array<const void*, kMaxOperands> in{};  // operand i: in[i][j] (or in[i][0] if broadcast)
  std::uint32_t broadcast_mask = 0;            // bit i set: operand i is one value for the row
  void* out = nullptr;                         // contiguous output, n elements
  std::int64_t n = 0;
  // Flat (C-order) index in the whole output of the row's first element: keys counter-based
  // random draws to the element, whatever the thread split or the engine's blocking.
  std::int64_t index = 0;
  bool stream = false;  // output is far larger than the caches: non-temporal stores are allowed
  // Per-row operands (only for kernels that declare it, ElementwiseCall::per_row_operands): bit i
  // set, operand i holds one value per row_len consecutive elements, in[i][j / row_len] (a blocked
  // parameter over rows of one block each; n is a multiple of row_len).
  std::uint32_t per_row_mask = 0;
  std::int64_t row_len = 0;
  // Repeated-row operands (only for kernels that declare it, ElementwiseCall::repeated_row_operands):
  // bit i set, operand i holds one row that every row of row_len elements reuses, in[i][j % row_len]
  // (a per-channel parameter on channels-last rows; n is a multiple of row_len). The buffer holds
  // row_len + kRepeatedRowPad values, the row continued cyclically, so a vector of up to
  // kRepeatedRowPad lanes loads from any offset within the row without wrapping.
  std::uint32_t repeated_row_mask = 0;
  // Bytes per element of operand i, where the launcher knows them (the device engine, for every
  // operand): 0, unknown. A CUDA launch whose per-row and repeated-row operands all have theirs
  // resolves each of those operands to a pointer once per thread instead of dividing j by row_len
  // at every read (backends/cuda/row_layout.h, RowCursor). The CPU kernels ignore them.
  std::array<std::uint8_t, kMaxOperands> in_bytes{};

  // The accessors are host and device code: a CUDA kernel reads its operands through the same
  // RowArgs (holding device pointers) as the CPU row does.
  POLYQUANT_HD bool is_broadcast(int i) const { return (broadcast_mask >> i) & 1u; }
  POLYQUANT_HD bool is_per_row(int i) const { return (per_row_mask >> i) & 1u; }
  POLYQUANT_HD bool is_repeated_row(int i) const { return (repeated_row_mask >> i) & 1u; }
  template <class T>
  POLYQUANT_HD const T* input(int i) const { return static_cast<const T*>(in[static_cast<std::size_t>(i)]); }
  // Element index of operand i for output element j, honouring broadcast, per-row and repeated-row
  // operands.
  POLYQUANT_HD std::int64_t index_of(int i, std::int64_t j) const {
    if (is_per_row(i)) return j / row_len;
    if (is_repeated_row(i)) return j % row_len;
    return is_broadcast(i) ? 0 : j;
  }
  // Operand i at element j, honouring broadcast, per-row and repeated-row operands.
  template <class T>
  POLYQUANT_HD T at(int i, std::int64_t j) const { return input<T>(i)[index_of(i, j)]; }
};

// Per-element rows. An op whose scalar reference row is a plain loop `for j < n: element(j)` (every
// elementwise op) defines that element once, host and device code, in its family's kernels.h:
//   <name>_row_element<T, kMode>(const Params&, const RowArgs&, std::int64_t j)   (ops with a
//                                                       RoundingMode `mode`: the mode resolved once
//                                                       per row, outside, as a template argument)
//   <name>_row_element<T>(const Params&, const RowArgs&, std::int64_t j)          (the others)
// reads operand i at j through RowArgs, computes the formula and writes output element j. The CPU
// reference row loops over it; the CUDA backend (backends/cuda) runs the same function in a
// grid-stride loop, so both compile one spec. Next to it the family describes the row by
// specialising RowElementTraits: `Params`, the op's parameter struct, and kFlushDenormals, true
// where the reference row runs under ScopedFlushDenormals (QKeras: TensorFlow's FTZ / DAZ), which
// device code must reproduce at compile time (nvcc -ftz=true), and kSecondStream, where the op reads
// a second operand per element besides x in its common use (a gradient's grad_output or x): its
// index, so a CUDA kernel may read it ahead as it reads x (backends/cuda/row_layout.h; -1, the
// default: none). An op that does not specialise it
// (the grouped reductions, whose rows fold many elements into one accumulator, and convert, whose
// row is the engine's conversion routine) has no per-element row and stays host-only.
template <KernelOp>
struct RowElementTraits {};  // no `Params`: the op has no per-element row
template <KernelOp kOp>
inline constexpr bool kHasRowElement = requires { typename RowElementTraits<kOp>::Params; };
template <KernelOp kOp>
inline constexpr bool kRowElementFlushesDenormals = [] {
  if constexpr (requires { RowElementTraits<kOp>::kFlushDenormals; }) return RowElementTraits<kOp>::kFlushDenormals;
  else return false;
}();

template <KernelOp kOp>
inline constexpr int kRowElementSecondStream = [] {
  if constexpr (requires { RowElementTraits<kOp>::kSecondStream; }) return RowElementTraits<kOp>::kSecondStream;
  else return -1;
}();

// The C++ type of each working precision.
template <WorkType kWork>
using WorkT = std::conditional_t<kWork == WorkType::kF16, Half, std::conditional_t<kWork == WorkType::kF32, float, double>>;

// A kernel: `params` points at the op's parameter struct (see the families' kernels.h).
using RowKernel = void (*)(const void* params, const RowArgs& args);

}  // namespace polyquant::detail
