// Exact sums into many targets (the elements of a parameter whose gradient sums over x, the groups
// of a statistic), each rounded once at the end: the same bits for any order of the values, any
// split between threads, kernel sets or backends (core/exact_sum.h says why that matters).
//
// How: a target holds a float64 head, its exact sum for as long as every add into it is exact
// (exact_float64_add); an add that would round instead moves the head into the target's exact
// accumulator (an ExactSum, made on first need) and restarts the head at the value. So the common
// case costs one float64 add and two checks per value, and the head plus the accumulator always
// hold the exact sum. Non-finite values fail the check, so they reach the accumulator's flags.
//
// Precondition of add(): every value is a multiple of Acc's unit below its magnitude limit
// (ExactSumFloat32: float32 terms and exact float64 sums of them; ExactSumFloat64: any float64).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/exact_sum.h"

namespace polyquant::detail {

template <class Acc>
class ExactSums {
 public:
  explicit ExactSums(std::int64_t targets)
      : head_(static_cast<std::size_t>(targets), 0.0), spill_(static_cast<std::size_t>(targets), -1) {}

  void add(std::int64_t target, double v) {
    double& h = head_[static_cast<std::size_t>(target)];
    double s;
    if (exact_float64_add(h, v, s)) {
      h = s;
      return;
    }
    accumulator(target).add(h);
    h = v;
  }

  // The exact sum of everything added to `target`, rounded once (an exact zero is +0, a NaN the
  // quiet NaN, after +inf and -inf too).
  float to_float(std::int64_t target) const { return round<float>(target); }
  double to_double(std::int64_t target) const { return round<double>(target); }

  // What to_float / to_double give for a target whose values all joined its head: that exact
  // value rounded once (an exact zero is +0). So a caller holding a target's whole exact sum in
  // one float64 (every add exact) rounds it without the per-target storage.
  template <class T>
  static T rounded_single(double exact) {
    return rounded_head<T>(exact);
  }

  // The exact sum of n values (one target), rounded once: the same rule without the per-target
  // storage.
  template <class T, class V>
  static T sum_of(const V* values, std::int64_t n) {
    double h = 0.0;
    Acc acc;
    bool spilled = false;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(values[i]);
      double s;
      if (exact_float64_add(h, v, s)) {
        h = s;
      } else {
        acc.add(h);
        h = v;
        spilled = true;
      }
    }
    if (!spilled) return rounded_head<T>(h);
    acc.add(h);
    return rounded<T>(acc);
  }

 private:
  Acc& accumulator(std::int64_t target) {
    std::int32_t& index = spill_[static_cast<std::size_t>(target)];
    if (index < 0) {
      index = static_cast<std::int32_t>(pool_.size());
      pool_.emplace_back();
    }
    return pool_[static_cast<std::size_t>(index)];
  }

  // A head that never spilled is finite (a non-finite value always spills) and exact.
  template <class T>
  static T rounded_head(double h) {
    return h == 0.0 ? T(0) : static_cast<T>(h);  // float: one rounding of the exact value
  }
  template <class T>
  static T rounded(const Acc& acc) {
    if constexpr (sizeof(T) == 4) return acc.to_float();
    else return acc.to_double();
  }
  template <class T>
  T round(std::int64_t target) const {
    const double h = head_[static_cast<std::size_t>(target)];
    const std::int32_t index = spill_[static_cast<std::size_t>(target)];
    if (index < 0) return rounded_head<T>(h);
    Acc acc = pool_[static_cast<std::size_t>(index)];
    acc.add(h);
    return rounded<T>(acc);
  }

  std::vector<double> head_;
  std::vector<std::int32_t> spill_;  // index into pool_, or -1
  std::vector<Acc> pool_;
};

}  // namespace polyquant::detail
