// The cases every kernel of the op list (src/kernels/ops.inc) is checked and timed on: for each op,
// the parameter sets and operands its optimized kernels must match the scalar reference on, bit for
// bit (tests/cpp/core/test_kernels.cc runs them on every kernel set), and one typical call the
// kernel benchmark times (bench/bench_kernels.cc). Each family defines its ops' cases next to its
// other tests, in tests/cpp/<family>/kernel_cases.cc; the grouped reductions' are in
// tests/cpp/core/kernel_cases_reduce.cc. The list below declares kernel_cases_<name>() for every op
// of ops.inc, and kernel_cases(op) calls them, so an op added without its cases does not link.
//
// No test framework here: the benchmark links these files too.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "test_values.h"
#include "test_values.h"

namespace polyquant::test {

using detail::KernelOp;
using detail::RowArgs;

// One operand of a kernel row: its values (enough for the longest row the checks run), float32 or,
// when f64 is non-empty, float64; and whether the checks may broadcast it (a parameter). x is
// operand 0; the checks broadcast it too, as a zero-stride x reaches the kernels.
struct Operand {
  std::vector<float> f32;
  std::vector<double> f64;  // used instead of f32 when non-empty
  bool param = true;

  std::size_t element_size() const { return f64.empty() ? sizeof(float) : sizeof(double); }
  // Its values' bytes, in its own type.
  const unsigned char* bytes() const {
    return f64.empty() ? static_cast<const unsigned char*>(static_cast<const void*>(f32.data()))
                       : static_cast<const unsigned char*>(static_cast<const void*>(f64.data()));
  }
  // Operand k's repeated row (RowArgs::repeated_row_mask): row_len of its values from element 37 k
  // on (so the rows of different operands differ), continued cyclically to `count` values.
  std::vector<unsigned char> repeated_row(std::size_t k, std::int64_t row_len, std::int64_t count) const {
    return cyclic_copy(bytes() + k * 37 * element_size(), element_size(), row_len, count);
  }
};

// The longest row a check runs (4099 elements) plus room for misaligned starts.
constexpr std::size_t kOperandLength = 4099 + 16;

// A parameter struct of any op, owned (cases are built once and shared between checks).
class Params {
 public:
  template <class P>
  static Params of(P p) {
    Params r;
    r.owner_ = std::make_shared<P>(std::move(p));
    return r;
  }
  const void* get() const { return owner_.get(); }

 private:
  std::shared_ptr<const void> owner_;
};

// One check of an op's optimized kernel against its scalar reference (test_kernels.cc):
//   kRows          rows of 1..70, 127..129, 255, 1000 and 4099 elements, misaligned starts, every
//                  broadcast pattern of the operands, streaming stores on and off;
//   kPerRowParams  blocked parameters: the parameter operands (Operand::param) one value per row
//                  of row_len elements (RowArgs::per_row_mask, AIMET's blockwise encodings);
//   kRepeatedRows  repeated-row operands (RowArgs::repeated_row_mask: a per-channel parameter on
//                  channels-last rows, fused into one call), every mask of them, x included.
// Every result must equal the reference's bit for bit, NaN payloads and signs included.
struct KernelCheck {
  enum class Kind { kRows, kPerRowParams, kRepeatedRows };
  Kind kind = Kind::kRows;
  std::string what;  // printed with a failure: the parameters that matter
  Params params;
  std::shared_ptr<const std::vector<Operand>> operands;
  bool double_output = false;  // the kernel writes float64 (FloatQuant's function output)
};

// What the benchmark of one kernel set's kernel runs: one call on a row of n elements, with the
// benchmark's buffers. A case's bench function picks the operands (the row x, or one broadcast
// value) and the parameters, and says where the kernel writes.
class BenchRow {
 public:
  BenchRow(std::int64_t n, const float* x, const std::int8_t* x_int8, float* out, double* sums)
      : n_(n), x_(x), x_int8_(x_int8), out_(out), sums_(sums) {}

  struct Input {
    const void* data;
    bool broadcast;
    std::size_t element_size;  // bytes of one value
  };
  Input x() const { return {x_, false, sizeof(float)}; }
  Input x_int8() const { return {x_int8_, false, 1}; }
  // One value every element of the row sees (a per-tensor parameter).
  template <class T>
  Input value(T v) {
    auto& slot = values_.emplace_back();
    static_assert(sizeof(T) <= sizeof(slot));
    std::memcpy(slot.data(), &v, sizeof(T));
    return {slot.data(), true, sizeof(T)};
  }
  void* out_row() const { return out_; }
  double* sums() const { return sums_; }  // 2 n doubles
  std::int64_t n() const { return n_; }

  // The call: the parameters (alive as long as the case), the operands in order, and the output.
  void call(const void* params, std::initializer_list<Input> inputs, void* out = nullptr) {
    params_ = params;
    int k = 0;
    for (const Input& in : inputs) {
      args_.in[static_cast<std::size_t>(k)] = in.data;
      if (in.broadcast) args_.broadcast_mask |= 1u << k;
      element_sizes_[static_cast<std::size_t>(k)] = in.element_size;
      args_.in_bytes[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(in.element_size);
      ++k;
    }
    operand_count_ = k;
    args_.out = out ? out : out_;
    args_.n = n_;
  }
  const void* params() const { return params_; }
  RowArgs& args() { return args_; }
  int operand_count() const { return operand_count_; }
  std::size_t element_size(int k) const { return element_sizes_[static_cast<std::size_t>(k)]; }

 private:
  std::int64_t n_;
  const float* x_;
  const std::int8_t* x_int8_;
  float* out_;
  double* sums_;
  std::deque<std::array<unsigned char, 8>> values_;  // stable addresses
  const void* params_ = nullptr;
  RowArgs args_;
  int operand_count_ = 0;
  std::array<std::size_t, detail::kMaxOperands> element_sizes_{};
};

struct KernelCases {
  // The checks of the optimized kernels; empty when another test owns the op (tested_elsewhere).
  std::vector<KernelCheck> checks;
  const char* tested_elsewhere = nullptr;
  // Sets up the benchmark's call (owns its parameters through the function's captures).
  std::function<void(BenchRow&)> bench;
};

// Builders for the family files.
inline std::vector<float> fill(float v) { return std::vector<float>(kOperandLength, v); }
inline std::vector<float> random_params(std::uint64_t salt, std::vector<float> choices) {
  auto rng = make_rng(salt);
  std::vector<float> v(kOperandLength);
  for (auto& x : v) x = choices[rng() % choices.size()];
  return v;
}
inline std::shared_ptr<const std::vector<Operand>> operands(std::vector<Operand> ops) {
  return std::make_shared<const std::vector<Operand>>(std::move(ops));
}
// NaNs of both signs, with and without a payload, and a signalling one, every `step` elements from
// `start` (the QKeras kernels specify which NaN they return: qk_nan_result).
inline void sprinkle_nans(std::vector<float>& v, std::size_t start, std::size_t step) {
  const std::uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFC54321u, 0x7F812345u, 0xFF800001u};
  std::size_t k = 0;
  for (std::size_t i = start; i < v.size(); i += step) v[i] = std::bit_cast<float>(nans[k++ % std::size(nans)]);
}

#define POLYQUANT_OP(Enum, name, works, vector) KernelCases kernel_cases_##name();
#include "kernels/ops.inc"
#undef POLYQUANT_OP

// The cases of `op` (calls its kernel_cases_<name>()).
KernelCases kernel_cases(KernelOp op);

}  // namespace polyquant::test
