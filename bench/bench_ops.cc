// Whole ops through the public API (include/polyquant/qonnx.h: validation, derived parameters,
// engine, threads) at 64 Mi float32 elements, with per-tensor (0-d) parameters and with per-element
// ones (full-size float32 arrays: runs of equal values, as per-channel parameters expanded, or
// random valid values), beside a threaded memcpy that moves the same bytes (every full-size input
// read and the output written). Compare an op with the copy of the same number of arrays:
//   polyquant_bench_ops --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//                       --benchmark_report_aggregates_only=true
//
// Per-element derived parameters, before (4920ce2) and after the dense derivations and the
// per-element FloatQuant vector path: both built Release, run back to back on the 2-core AVX-512
// VM while it was quiet (medians of 5 interleaved repetitions, --benchmark_min_time=0.3), ms and
// (x the copy of the same number of arrays in the same run; copy 2 / 6 / 7 arrays: 12.4 / 37.9 /
// 44.8 ms before, 13.7 / 40.2 / 46.3 ms after):
//                          before (4920ce2)    after (80b3bd1)
//   Trunc v1 per-tensor     17.0 (1.37)        17.8 (1.30)
//   Trunc v1 runs           95.5 (2.52)        69.6 (1.73)
//   Trunc v1 random        395  (10.4)         87.3 (2.17)
//   Trunc v2 per-tensor     18.9 (1.52)        18.8 (1.37)
//   Trunc v2 runs          275  (6.14)        110   (2.38)
//   Trunc v2 random       1218  (27.2)        244   (5.27)
//   FloatQuant per-tensor   20.6 (1.66)        21.0 (1.53)
//   FloatQuant runs        608  (16.0)        126   (3.13)
//   FloatQuant random     2159  (57.0)        246   (6.12)
// Where the rest goes (perf): runs read each parameter array once in the vectorized run scan
// (memory-bound, the first touch of those bytes) and the validation of FloatQuant's exponent widths
// and biases and Trunc v2's float output widths reads those arrays once more before anything is
// written (errors must leave out untouched): FloatQuant runs move 8 arrays' worth where the copy
// moves 6. Random rows compute 2-4 derived values per element in SSE2 loops (the op layer is built
// for the baseline ISA), stored as float64 and narrowed to the kernel's dtype per block.
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


// ---- QKeras quantizers (include/polyquant/qkeras.h) on a (4096, 16384) float32 tensor, channels
// last: fixed alpha (one pass), alpha "auto" (a max pass, then the quantizing pass) and "auto_po2"
// (a max pass, least-squares rounds until the scale is a fixed point, then the quantizing pass).
// BM_read is the read-only pass those reductions are measured against (a sum, as x.sum()).
const Dims kQkShape{4096, 16384};

std::vector<float> make_normal_x() {
  std::vector<float> x(static_cast<std::size_t>(kN));
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x) v = d(rng);
  return x;
}

void BM_read(benchmark::State& state) {
  const std::vector<float> x = make_normal_x();
  const int threads = runtime_info().num_threads;
  std::vector<double> sums(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> pool;
    const std::size_t chunk = static_cast<std::size_t>(kN) / static_cast<std::size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float* p = x.data() + chunk * static_cast<std::size_t>(t);
        float acc[16] = {};
        for (std::size_t i = 0; i < chunk; i += 16) {
          for (int k = 0; k < 16; ++k) acc[k] += p[i + static_cast<std::size_t>(k)];
        }
        double s = 0;
        for (float a : acc) s += a;
        sums[static_cast<std::size_t>(t)] = s;
      });
    }
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(sums.data());
  }
  set_bytes(state, 1);
}
BENCHMARK(BM_read)->UseRealTime()->Unit(benchmark::kMillisecond);

enum class QkAlpha { kFixed, kAuto, kAutoPo2 };

void BM_qkeras_bits(benchmark::State& state) {
  const auto kind = static_cast<QkAlpha>(state.range(0));
  const std::vector<float> x = make_normal_x();
  std::vector<float> out(static_cast<std::size_t>(kN));
  std::vector<float> scale(16384);
  qkeras::QuantizedBitsAttrs attrs;
  attrs.alpha = kind == QkAlpha::kFixed ? qkeras::Alpha::kValue : kind == QkAlpha::kAuto ? qkeras::Alpha::kAuto : qkeras::Alpha::kAutoPo2;
  if (kind != QkAlpha::kFixed) attrs.symmetric = true;
  const float one = 1.0f;
  const TensorView alpha(&one, DType::kFloat32, Dims{});
  const MutableTensorView scale_out(scale.data(), DType::kFloat32, Dims{1, 16384});
  qkeras::SearchInfo info;
  for (auto _ : state) {
    qkeras::quantized_bits(TensorView(x.data(), DType::kFloat32, kQkShape), alpha, attrs, {}, {},
                           MutableTensorView(out.data(), DType::kFloat32, kQkShape), kind == QkAlpha::kFixed ? nullptr : &scale_out,
                           &info);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, 2);
  state.counters["reads"] = info.max_passes + info.least_squares_rounds;
}

void BM_qkeras_linear(benchmark::State& state) {
  const auto kind = static_cast<QkAlpha>(state.range(0));
  const std::vector<float> x = make_normal_x();
  std::vector<float> out(static_cast<std::size_t>(kN));
  std::vector<float> scale(16384);
  qkeras::QuantizedLinearAttrs attrs;
  attrs.alpha = kind == QkAlpha::kFixed ? qkeras::Alpha::kValue : kind == QkAlpha::kAuto ? qkeras::Alpha::kAuto : qkeras::Alpha::kAutoPo2;
  const float one = 1.0f;
  const TensorView alpha(&one, DType::kFloat32, Dims{});
  const MutableTensorView scale_out(scale.data(), DType::kFloat32, kind == QkAlpha::kFixed ? Dims{} : Dims{1, 16384});
  qkeras::SearchInfo info;
  for (auto _ : state) {
    qkeras::quantized_linear(TensorView(x.data(), DType::kFloat32, kQkShape), alpha, attrs, {}, {},
                             MutableTensorView(out.data(), DType::kFloat32, kQkShape), &scale_out, &info);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, 2);
  state.counters["reads"] = info.max_passes + info.least_squares_rounds;
}

void BM_qkeras_relu(benchmark::State& state) {
  const std::vector<float> x = make_normal_x();
  std::vector<float> out(static_cast<std::size_t>(kN));
  const qkeras::QuantizedReluAttrs attrs;
  for (auto _ : state) {
    qkeras::quantized_relu(TensorView(x.data(), DType::kFloat32, kQkShape), attrs, {},
                           MutableTensorView(out.data(), DType::kFloat32, kQkShape));
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, 2);
}

void alpha_args(benchmark::internal::Benchmark* b) {
  b->ArgName("alpha")->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_qkeras_bits)->Apply(alpha_args);
BENCHMARK(BM_qkeras_linear)->Apply(alpha_args);
BENCHMARK(BM_qkeras_relu)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace polyquant

BENCHMARK_MAIN();
