// The contract between the elementwise engine and every kernel: one call processes a run of n
// output elements whose operands are either contiguous (stride 1) or one broadcast value.
#pragma once

#include <array>
#include <cstdint>

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

  bool is_broadcast(int i) const { return (broadcast_mask >> i) & 1u; }
  bool is_per_row(int i) const { return (per_row_mask >> i) & 1u; }
  bool is_repeated_row(int i) const { return (repeated_row_mask >> i) & 1u; }
  template <class T>
  const T* input(int i) const { return static_cast<const T*>(in[static_cast<std::size_t>(i)]); }
  // Element index of operand i for output element j, honouring broadcast, per-row and repeated-row
  // operands.
  std::int64_t index_of(int i, std::int64_t j) const {
    if (is_per_row(i)) return j / row_len;
    if (is_repeated_row(i)) return j % row_len;
    return is_broadcast(i) ? 0 : j;
  }
  // Operand i at element j, honouring broadcast, per-row and repeated-row operands.
  template <class T>
  T at(int i, std::int64_t j) const { return input<T>(i)[index_of(i, j)]; }
};

// A kernel: `params` points at the op's parameter struct (see the families' kernels.h).
using RowKernel = void (*)(const void* params, const RowArgs& args);

}  // namespace polyquant::detail
