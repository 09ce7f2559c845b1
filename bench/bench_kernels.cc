// Single-thread throughput of each kernel row (no engine, no threads) on in-cache and out-of-cache
// sizes, with memcpy of the same bytes as the yardstick. Bytes counted: read X + write out (8 per
// element, whatever the op's types, for comparison with memcpy of float32). Each op's call is the
// benchmark call of its kernel cases (tests/cpp/<family>/kernel_cases.cc).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_cases.h"
#include "kernels/registry.h"

namespace polyquant::detail {
namespace {

struct Buffers {
  std::vector<float> x, out;
  std::vector<double> sums;
  std::vector<std::int8_t> x_int8;
  explicit Buffers(std::size_t n) : x(n), out(n), sums(2 * n), x_int8(n) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-20.0f, 20.0f);
    for (auto& v : x) v = d(rng);
    for (auto& v : x_int8) v = static_cast<std::int8_t>(rng());
  }
};

void bench_memcpy(benchmark::State& state) {
  Buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::memcpy(b.out.data(), b.x.data(), b.x.size() * sizeof(float));
    benchmark::DoNotOptimize(b.out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 8);
}

void bench_kernel(benchmark::State& state, KernelEntry e) {
  Buffers b(static_cast<std::size_t>(state.range(0)));
  const test::KernelCases cases = test::kernel_cases(e.op);
  test::BenchRow row(state.range(0), b.x.data(), b.x_int8.data(), b.out.data(), b.sums.data());
  cases.bench(row);
  RowArgs& a = row.args();
  a.stream = state.range(0) * 4 >= (32 << 20);
  for (auto _ : state) {
    e.fn(row.params(), a);
    benchmark::DoNotOptimize(b.out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 8);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("memcpy", bench_memcpy)->Arg(1 << 14)->Arg(1 << 24);
  for (const auto& e : all_kernels()) {
    if (e.work != WorkType::kF32) continue;
    bool supported = false;
    for (Isa s : supported_isas()) supported = supported || s == e.isa;
    if (!supported) continue;
    benchmark::RegisterBenchmark(e.name, bench_kernel, e)->Arg(1 << 14)->Arg(1 << 24);
  }
  return true;
}();

}  // namespace
}  // namespace polyquant::detail

BENCHMARK_MAIN();
