// Whole ops through the public API (include/polyquant/qonnx.h: validation, derived parameters,
// engine, threads) at 64 Mi float32 elements, with per-tensor (0-d) parameters and with per-element
// ones (full-size float32 arrays: runs of equal values, as per-channel parameters expanded, or
// random valid values), beside a threaded memcpy that moves the same bytes (every full-size input
// read and the output written). Compare an op with the copy of the same number of arrays:
//   polyquant_bench_ops --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//                       --benchmark_report_aggregates_only=true
//
// Measured at 152b422 against its parent's kernels (ed1236c, baseline built from `git archive`),
// 2-core AVX-512 VM shared with other builds, medians of 3 interleaved runs, ms (x copy of the
// same arrays). Two sessions, load differed (the baseline's per-element times varied 3x):
//                       baseline, session 1 / 2     fused, session 1 / 2
//   Trunc v1 per-tensor    18.0 (1.28) / 17.1          17.6 (1.23) / 17.2
//   Trunc v1 runs         210 (5.1) / 617 (16.3)       101 (2.5) / 96 (2.6)
//   Trunc v1 random       203 (4.9) / 625 (16.5)       450 (11.0) / 402 (11.0)
//   Trunc v2 per-tensor    19.7 / 18.1                 19.6 / 18.2
//   Trunc v2 runs         985 (21) / 2628 (55)         268 (6.0) / 316 (7.2)
//   Trunc v2 random       962 (21) / 2618 (54)         1637 (37) / 1275 (29)
//   FloatQuant per-tensor  22.1 / 20.4                 21.3 / 20.6
//   FloatQuant runs      2269 (55) / 4187 (111)        622 (15) / 623 (17)
//   FloatQuant random    2432 (58) / 4212 (111)        2388 (58) / 2309 (63)
// (session 1 fused numbers are from d7bd903; random per-element FloatQuant is bound by the scalar
// reference kernel, which per-element min_exp / max_value rows take.)
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "polyquant/polyquant.h"

namespace polyquant {
namespace {

constexpr std::int64_t kN = std::int64_t{64} << 20;
const Dims kShape{kN};

enum class Params { kPerTensor, kRuns, kRandom };

// A parameter: one value (0-d) or kN values drawn by `draw`, in runs of 4096 or one per element.
struct Param {
  std::vector<float> v;
  template <class Draw>
  Param(Params kind, std::mt19937& rng, Draw draw) {
    if (kind == Params::kPerTensor) {
      v.assign(1, draw(rng));
      return;
    }
    v.resize(static_cast<std::size_t>(kN));
    const std::size_t run = kind == Params::kRuns ? 4096 : 1;
    for (std::size_t i = 0; i < v.size(); i += run) {
      const float value = draw(rng);
      for (std::size_t j = i; j < i + run && j < v.size(); ++j) v[j] = value;
    }
  }
  TensorView view() const {
    return v.size() == 1 ? TensorView(v.data(), DType::kFloat32, Dims{}) : TensorView(v.data(), DType::kFloat32, kShape);
  }
};

std::vector<float> make_x() {
  std::vector<float> x(static_cast<std::size_t>(kN));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  for (auto& v : x) v = d(rng);
  return x;
}

template <class T>
auto pick(std::initializer_list<T> values) {
  return [values](std::mt19937& rng) { return *(values.begin() + rng() % values.size()); };
}

void set_bytes(benchmark::State& state, int arrays) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kN * 4 * arrays);
}

// Reads arrays/2 and writes arrays/2 float32 arrays of kN elements: the traffic of an op with
// `arrays` full-size operands (inputs and output), split over the library's threads.
void BM_copy(benchmark::State& state) {
  const auto arrays = static_cast<int>(state.range(0));
  const std::size_t bytes = static_cast<std::size_t>(kN) * 4 * static_cast<std::size_t>(arrays) / 2;
  std::vector<unsigned char> src(bytes, 1), dst(bytes, 0);
  const int threads = runtime_info().num_threads;
  for (auto _ : state) {
    std::vector<std::thread> pool;
    const std::size_t chunk = (bytes / static_cast<std::size_t>(threads) + 63) / 64 * 64;
    for (int t = 0; t < threads; ++t) {
      const std::size_t begin = std::min(bytes, chunk * static_cast<std::size_t>(t));
      const std::size_t end = std::min(bytes, begin + chunk);
      pool.emplace_back([&, begin, end] { std::memcpy(dst.data() + begin, src.data() + begin, end - begin); });
    }
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(dst.data());
  }
  set_bytes(state, arrays);
}
BENCHMARK(BM_copy)->ArgName("arrays")->Arg(2)->Arg(6)->Arg(7)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_trunc_v1(benchmark::State& state) {
  const auto kind = static_cast<Params>(state.range(0));
  std::mt19937 rng(2);
  const std::vector<float> x = make_x();
  const Param scale(kind, rng, pick({0.5f, 0.25f, 0.125f, 0.75f}));
  const Param zeropt(kind, rng, pick({0.0f, 1.0f, -2.0f}));
  const Param in_bw(kind, rng, pick({8.0f, 10.0f, 12.0f, 16.0f}));
  const Param out_bw(kind, rng, pick({4.0f, 5.0f, 6.0f, 7.0f}));
  std::vector<float> out(static_cast<std::size_t>(kN));
  for (auto _ : state) {
    qonnx::trunc(TensorView(x.data(), DType::kFloat32, kShape), scale.view(), zeropt.view(), in_bw.view(),
                 out_bw.view(), RoundingMode::kFloor, MutableTensorView(out.data(), DType::kFloat32, kShape));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kind == Params::kPerTensor ? 2 : 6);
}

void BM_trunc_v2(benchmark::State& state) {
  const auto kind = static_cast<Params>(state.range(0));
  std::mt19937 rng(3);
  const std::vector<float> x = make_x();
  const Param scale(kind, rng, pick({0.5f, 0.25f, 0.125f, 0.75f}));
  const Param zeropt(kind, rng, pick({0.0f, 1.0f, -2.0f}));
  const Param in_bw(kind, rng, pick({8.0f, 16.0f}));
  const Param out_scale(kind, rng, pick({2.0f, 4.0f, 8.0f, 3.0f}));
  const Param out_bw(kind, rng, pick({4.0f, 5.0f, 6.0f, 8.0f}));
  std::vector<float> out(static_cast<std::size_t>(kN));
  const qonnx::TruncV2Attrs attrs{true, false, RoundingMode::kFloor};
  for (auto _ : state) {
    qonnx::trunc_v2(TensorView(x.data(), DType::kFloat32, kShape), scale.view(), zeropt.view(), in_bw.view(),
                    out_scale.view(), out_bw.view(), attrs, MutableTensorView(out.data(), DType::kFloat32, kShape));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kind == Params::kPerTensor ? 2 : 7);
}

void BM_float_quant(benchmark::State& state) {
  const auto kind = static_cast<Params>(state.range(0));
  std::mt19937 rng(4);
  const std::vector<float> x = make_x();
  const Param scale(kind, rng, pick({0.5f, 0.25f, 1.0f, 2.0f}));
  const Param exponent(kind, rng, pick({4.0f, 5.0f}));
  const float mantissa = 3.0f;  // a single value (the reference builds its series from it)
  const Param bias(kind, rng, pick({7.0f, 15.0f, 8.0f}));
  const Param max_val(kind, rng, pick({448.0f, 240.0f, 57344.0f}));
  std::vector<float> out(static_cast<std::size_t>(kN));
  const qonnx::FloatQuantAttrs attrs{};
  for (auto _ : state) {
    qonnx::float_quant(TensorView(x.data(), DType::kFloat32, kShape), scale.view(), exponent.view(),
                       TensorView(&mantissa, DType::kFloat32, Dims{}), bias.view(), max_val.view(), attrs,
                       MutableTensorView(out.data(), DType::kFloat32, kShape));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, kind == Params::kPerTensor ? 2 : 6);
}

void params_args(benchmark::internal::Benchmark* b) {
  b->ArgName("params")->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_trunc_v1)->Apply(params_args);
BENCHMARK(BM_trunc_v2)->Apply(params_args);
BENCHMARK(BM_float_quant)->Apply(params_args);

}  // namespace
}  // namespace polyquant

BENCHMARK_MAIN();
