// Compile-time layouts of a CUDA row launch. A per-element row reads operand i at element j through
// RowArgs::index_of, which tests the operand's per-row, repeated-row and broadcast bits at every
// read: in a grid-stride loop over a few instructions per element, those tests (and the 64-bit
// division of a per-row operand) are a large part of the work. Most launches need none of them:
// a launch whose masks are known when it starts runs a kernel in which they are constants, so the
// compiler drops the tests; a launch with per-row or repeated-row operands (per channel, blockwise)
// resolves them once per thread and steps them by additions (RowCursor).
//
// Those two kernels also keep loads in flight (run_row_thread): each thread reads x (operand 0)
// kLoadsAhead elements ahead of the one it computes, into registers, and a per-tensor launch reads
// its parameters once per thread. A grid-stride loop that reads x[j] where element j needs it has
// one load in flight per thread (the store of element j may overwrite what the next element reads,
// so neither the compiler nor the hardware may start that read earlier); at full occupancy that is
// 2048 loads of 4 bytes per multiprocessor, no more than an H100's bandwidth at its latency needs,
// and these kernels run below full occupancy (docs/cuda.md, "Reading x ahead"). The element then
// reads its x from the register (the operand rebased to the held value, marked broadcast, as
// RowCursor rebases row operands).
//
// The element code, its arithmetic and the value each read returns are unchanged (row_layout_test
// checks the addresses on the CPU and runs rows through every layout against the reference rows),
// so every layout gives the same bits.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/target.h"
#include "kernels/row.h"
#include "polyquant/rounding.h"

namespace polyquant::detail::cuda {
inline namespace POLYQUANT_TARGET_NAMESPACE {  // one copy per build flavour (core/target.h)

enum class RowLayout : std::uint8_t {
  kGeneral,         // any masks (read at run time)
  kNoRowOperands,   // no per-row or repeated-row operand: each operand is contiguous or one value
  kFirstStreams,    // operand 0 contiguous, every other operand in use one value (per-tensor
                    // parameters; the op's second stream may be contiguous), each with its element
                    // size (RowArgs::in_bytes): x (and the second stream) read ahead, the
                    // parameters once per thread
  kRowsResolved,    // operand 0 contiguous, per-row or repeated-row operands, each with its element
                    // size: x (and the second stream, not a row operand) read ahead, the row
                    // operands resolved once per thread (RowCursor)
};

// The bits of x (operand 0) a thread holds in a register while it reads ahead (run_row_thread):
// 4 bytes in the float16 and float32 kernels (whose x is at most a float32), 8 in the float64 ones.
template <class T>
using HeldBits = std::conditional_t<(sizeof(T) > 4), std::uint64_t, std::uint32_t>;
// sizeof(HeldBits<WorkT<work>>), for launchers that know the working precision at run time.
inline constexpr std::size_t held_bytes(WorkType work) {
  return work == WorkType::kF64 ? sizeof(HeldBits<WorkT<WorkType::kF64>>)
                                : work == WorkType::kF32 ? sizeof(HeldBits<WorkT<WorkType::kF32>>)
                                                         : sizeof(HeldBits<WorkT<WorkType::kF16>>);
}

// The most specific layout of a launch's RowArgs (host code). `host_scalars`: the operands passed by
// value (PolyquantCudaHostScalars::mask; the engine marks them broadcast). An operand is in use when
// its pointer is set or it is passed by value. `held_bytes`: the most bytes an element of x may
// have for the layouts that read it ahead (sizeof(HeldBits<T>) of the kernel's working type).
// `second_stream`: the op's second operand read ahead (<name>_row::kSecondStream, -1: none), which
// in those layouts may be contiguous or one value but not a row operand.
inline RowLayout row_layout_of(const RowArgs& a, std::uint32_t host_scalars, std::size_t held_bytes = 8,
                               int second_stream = -1) {
  const auto size_of = [&](int i) { return static_cast<std::size_t>(a.in_bytes[static_cast<std::size_t>(i)]); };
  const auto in_use = [&](int i) { return a.in[static_cast<std::size_t>(i)] != nullptr || ((host_scalars >> i) & 1u) != 0; };
  const auto fits = [&](int i, std::size_t most) { return size_of(i) > 0 && size_of(i) <= most && std::has_single_bit(size_of(i)); };
  const bool x_streams = !a.is_broadcast(0) && !a.is_per_row(0) && !a.is_repeated_row(0) && fits(0, held_bytes);
  const bool second_streams = second_stream <= 0 || !in_use(second_stream) ||
                              (!a.is_per_row(second_stream) && !a.is_repeated_row(second_stream) && fits(second_stream, held_bytes));
  if (const std::uint32_t row_operands = a.per_row_mask | a.repeated_row_mask; row_operands != 0) {
    if (a.row_len <= 0 || !x_streams || !second_streams) return RowLayout::kGeneral;
    for (int i = 0; i < kMaxOperands; ++i) {
      if (((row_operands >> i) & 1u) != 0 && size_of(i) == 0) return RowLayout::kGeneral;
    }
    return RowLayout::kRowsResolved;
  }
  if (a.is_broadcast(0)) return RowLayout::kNoRowOperands;
  bool sizes_known = x_streams && second_streams;
  for (int i = 1; i < kMaxOperands; ++i) {
    if (i == second_stream || !in_use(i)) continue;
    if (!a.is_broadcast(i)) return RowLayout::kNoRowOperands;
    sizes_known = sizes_known && fits(i, 8);
  }
  return sizes_known ? RowLayout::kFirstStreams : RowLayout::kNoRowOperands;
}

// `a` with the masks `kLayout` fixes set to their constant values (host and device code; applied to
// the kernel's own copy of the launch's RowArgs, before its loop).
// (kRowsResolved: the RowCursor's RowArgs, whose row operands are resolved to one value each.)
template <RowLayout kLayout>
POLYQUANT_HD inline void fix_row_layout(RowArgs& a) {
  if constexpr (kLayout != RowLayout::kGeneral) {
    a.per_row_mask = 0;
    a.repeated_row_mask = 0;
  }
  if constexpr (kLayout == RowLayout::kFirstStreams) a.broadcast_mask = ~1u;
}

// One thread's walk over the elements first, first + stride, first + 2 stride, ... (< a.n) of a
// launch with per-row or repeated-row operands (RowLayout::kRowsResolved). args() is the launch's
// RowArgs with each of those operands resolved to the one value the current element reads, as
// index_of gives it: a per-row operand to in[i] + j / row_len elements, a repeated-row one to
// in[i] + j % row_len elements, both then read as broadcast (so no read tests or divides). The
// element's row j / row_len and column j % row_len are divided once, here; each step adds the
// stride's quotient and remainder, with one carry. The rebased RowArgs is rebuilt at each element
// rather than carried: carrying eight pointers from step to step took 46 to 57 registers in sm_90
// code where rebuilding takes 28 to 48 (docs/cuda.md).
class RowCursor {
 public:
  POLYQUANT_HD RowCursor(const RowArgs& a, std::int64_t first, std::int64_t stride) : launch_(a) {
    row_ = first / a.row_len;
    column_ = first - row_ * a.row_len;
    row_step_ = stride / a.row_len;
    column_step_ = stride - row_step_ * a.row_len;
  }
  // The launch's RowArgs for the current element: built afresh at each element from the launch's
  // own (so the only state a thread carries from element to element is its row and column).
  POLYQUANT_HD RowArgs args() const {
    RowArgs view = launch_;
    view.broadcast_mask |= launch_.per_row_mask | launch_.repeated_row_mask;
    fix_row_layout<RowLayout::kRowsResolved>(view);
    for (int i = 0; i < kMaxOperands; ++i) {
      const std::uint32_t bit = 1u << i;
      const auto k = static_cast<std::size_t>(i);
      const std::int64_t at = (launch_.per_row_mask & bit) != 0 ? row_ : (launch_.repeated_row_mask & bit) != 0 ? column_ : 0;
      view.in[k] = static_cast<const unsigned char*>(launch_.in[k]) + at * launch_.in_bytes[k];
    }
    return view;
  }
  // To the element `stride` further on.
  POLYQUANT_HD void advance() {
    row_ += row_step_;
    column_ += column_step_;
    if (column_ >= launch_.row_len) {
      column_ -= launch_.row_len;
      ++row_;
    }
  }

 private:
  const RowArgs& launch_;
  std::int64_t row_ = 0, column_ = 0, row_step_ = 0, column_step_ = 0;
};

// The RowArgs of every element of a thread whose launch has no row operands (RowCursor's interface).
struct SameRowArgs {
  const RowArgs& launch;
  POLYQUANT_HD const RowArgs& args() const { return launch; }
  POLYQUANT_HD void advance() {}
};

// One operand value held in a register, as an integer: the bytes of element j of an operand whose
// elements have `size` bytes (1, 2, 4 or 8; at most sizeof(Bits)), zero-extended. The read is an
// integer of the element's size, which may alias the operand's own type; the bytes travel as an
// integer (never through a float register, so NaN payloads and signalling NaNs are kept).
template <class Bits>
POLYQUANT_HD inline Bits read_operand_bits(const void* operand, std::int64_t j, std::uint8_t size) {
  using U8 [[gnu::may_alias]] = std::uint8_t;
  using U16 [[gnu::may_alias]] = std::uint16_t;
  using U32 [[gnu::may_alias]] = std::uint32_t;
  using U64 [[gnu::may_alias]] = std::uint64_t;
  if (size == 4) return static_cast<Bits>(static_cast<const U32*>(operand)[j]);
  if (size == 1) return static_cast<const U8*>(operand)[j];
  if (size == 2) return static_cast<const U16*>(operand)[j];
  if (sizeof(Bits) == 8 && size == 8) return static_cast<Bits>(static_cast<const U64*>(operand)[j]);
  return 0;
}

// The same read of an operand the caller knows lies in device (global) memory (x of the layouts
// that read ahead): in device code a global load. Through a generic pointer the compiler must allow
// for the kernel's parameter space, where a host scalar lies, and emits generic loads.
template <class Bits>
POLYQUANT_HD inline Bits read_global_operand_bits(const void* operand, std::int64_t j, std::uint8_t size) {
#if defined(__CUDA_ARCH__)
  std::uint32_t v = 0;
  if (size == 4) {
    asm("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(static_cast<const std::uint32_t*>(operand) + j));
  } else if (size == 1) {
    asm("ld.global.u8 %0, [%1];" : "=r"(v) : "l"(static_cast<const std::uint8_t*>(operand) + j));
  } else if (size == 2) {
    asm("ld.global.u16 %0, [%1];" : "=r"(v) : "l"(static_cast<const std::uint16_t*>(operand) + j));
  } else if (sizeof(Bits) == 8 && size == 8) {
    std::uint64_t wide;
    asm("ld.global.u64 %0, [%1];" : "=l"(wide) : "l"(static_cast<const std::uint64_t*>(operand) + j));
    return static_cast<Bits>(wide);
  }
  return v;
#else
  return read_operand_bits<Bits>(operand, j, size);
#endif
}

// A held value as an element reads it: its bytes (the object representation, copied whole;
// little-endian, as x86-64 and every CUDA device are), read through a pointer to `bytes` as the
// type the element reads that operand as. Made where the element runs, from the integer the thread
// carried, so the compiler keeps it in the integer's register.
template <class Bits>
struct HeldOperand {
  alignas(Bits) unsigned char bytes[sizeof(Bits)];

  POLYQUANT_HD explicit HeldOperand(Bits bits) { std::memcpy(bytes, &bits, sizeof bits); }
  POLYQUANT_HD HeldOperand() : HeldOperand(Bits{0}) {}
};

// Elements of input a thread has asked for beyond the one it computes (grid_stride_reading_ahead):
// with its own element, five loads in flight per thread.
inline constexpr int kLoadsAhead = 4;

// One thread's grid-stride loop over elements first, first + stride, ... (< n), each element's input
// read kLoadsAhead strides before it is used: read(j) returns element j's input as a Value held in
// registers (an integer of its bytes, or a struct of them), called once for every element, in
// order; body(j, value) then computes element j. Between them the thread has kLoadsAhead reads in
// flight, which a loop that reads where it computes cannot have when its stores may alias its
// inputs (the compiler must keep each read after the previous element's store). Used by the row
// kernels (run_row_thread) and the histogram kernel (backend.cu).
template <class Value, class Read, class Body>
POLYQUANT_HD inline void grid_stride_reading_ahead(std::int64_t first, std::int64_t stride, std::int64_t n, Read&& read,
                                                   Body&& body) {
  if (first >= n) return;
  Value ahead[kLoadsAhead] = {};
  for (int k = 0; k < kLoadsAhead; ++k) {
    const std::int64_t j = first + k * stride;
    if (j < n) ahead[k] = read(j);
  }
  for (std::int64_t j = first; j < n; j += stride) {
    const Value current = ahead[0];
    for (int k = 0; k + 1 < kLoadsAhead; ++k) ahead[k] = ahead[k + 1];
    const std::int64_t next = j + kLoadsAhead * stride;
    ahead[kLoadsAhead - 1] = next < n ? read(next) : Value{};
    body(j, current);
  }
}

// The work of one thread of a row launch in layout kLayout: elements first, first + stride, ...
// (a grid-stride loop; the CUDA kernel runs it per thread, the host stand-in for every thread in
// turn). Row::element<T, kMode>(p, args, j) is the op's per-element row (backends/cuda/row_elements.cuh).
//
// kFirstStreams and kRowsResolved read ahead: x (operand 0, contiguous in those layouts) of the
// elements kLoadsAhead strides on is read into registers before the current element runs, so each
// thread has that many loads in flight while it computes; the element reads its x from the held
// value; so for the op's second operand read per element (Row::kSecondStream: a gradient's
// grad_output or x; contiguous or one value). kFirstStreams also reads each parameter (every other
// operand in use, one value) once, into registers. The values are the bytes the element would have read where it reads them (x[j] is read
// once, before element j stores anything: an output may be x itself, element for element, and only
// element j writes out[j]).
template <class Row, class T, RoundingMode kMode, RowLayout kLayout, class P>
POLYQUANT_HD inline void run_row_thread(const P& p, const RowArgs& a, std::int64_t first, std::int64_t stride) {
  if constexpr (kLayout == RowLayout::kFirstStreams || kLayout == RowLayout::kRowsResolved) {
    if (first >= a.n) return;
    using X = HeldBits<T>;
    constexpr int kSecond = Row::kSecondStream;
    const void* const x = a.in[0];
    const std::uint8_t x_size = a.in_bytes[0];
    // The second operand read ahead (kSecond >= 0): contiguous, or one value (read at 0), or unused;
    // read through a generic pointer (a host scalar lies in the kernel's parameter space).
    const void* const second = kSecond >= 0 ? a.in[static_cast<std::size_t>(kSecond)] : nullptr;
    const std::uint8_t second_size = kSecond >= 0 ? a.in_bytes[static_cast<std::size_t>(kSecond)] : 0;
    const std::int64_t second_step = kSecond >= 0 && !a.is_broadcast(kSecond) ? 1 : 0;
    struct Inputs {
      X x = 0, second = 0;
    };
    const auto read = [&](std::int64_t j) {
      Inputs in;
      in.x = read_global_operand_bits<X>(x, j, x_size);
      if constexpr (kSecond >= 0) {
        if (second != nullptr) in.second = read_operand_bits<X>(second, j * second_step, second_size);
      }
      return in;
    };
    RowArgs launch = a;
    HeldOperand<std::uint64_t> parameters[kMaxOperands];
    if constexpr (kLayout == RowLayout::kFirstStreams) {
      fix_row_layout<RowLayout::kFirstStreams>(launch);
      for (int i = 1; i < kMaxOperands; ++i) {
        if (i == kSecond) continue;
        const auto k = static_cast<std::size_t>(i);
        if (a.in[k] != nullptr) parameters[k] = HeldOperand<std::uint64_t>(read_operand_bits<std::uint64_t>(a.in[k], 0, a.in_bytes[k]));
        launch.in[k] = parameters[k].bytes;  // unused operands too: a constant pointer the compiler can follow
      }
    }
    // Each element's RowArgs: the launch's (kFirstStreams), or the cursor's with the row operands
    // resolved for that element (kRowsResolved), with x (and the second stream) the held values.
    const auto loop = [&](auto& source) {
      grid_stride_reading_ahead<Inputs>(first, stride, a.n, read, [&](std::int64_t j, const Inputs& in) {
        const HeldOperand<X> held_x(in.x), held_second(in.second);
        RowArgs view = source.args();
        view.in[0] = held_x.bytes;
        view.broadcast_mask |= 1u;
        if constexpr (kSecond >= 0) {
          view.in[static_cast<std::size_t>(kSecond)] = held_second.bytes;
          view.broadcast_mask |= 1u << kSecond;
        }
        Row::template element<T, kMode>(p, view, j);
        source.advance();  // after the last element too: integer steps, no memory
      });
    };
    if constexpr (kLayout == RowLayout::kRowsResolved) {
      RowCursor cursor(launch, first, stride);
      loop(cursor);
    } else {
      SameRowArgs same{launch};
      loop(same);
    }
  } else {
    RowArgs fixed = a;
    fix_row_layout<kLayout>(fixed);
    for (std::int64_t j = first; j < a.n; j += stride) Row::template element<T, kMode>(p, fixed, j);
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail::cuda
