// Device throughput of every per-element op's CUDA kernel (libpolyquant_cuda.so's launcher table),
// beside a device-to-device copy, on one large row (default 64 Mi float32 = 256 MiB of x): medians
// of CUDA-event-timed launches after warm-up. Each op runs its benchmark call (the kernel cases'
// `bench`, tests/cpp/<family>/kernel_cases.cc) with its parameters per tensor and, where it has a
// broadcast parameter, per channel on the first axis (256 channels, RowArgs::per_row_mask), per
// channel on the last axis (1024 channels, repeated_row_mask) and blockwise (blocks of 32 along the
// row, per_row_mask). A few extra calls mirror torch's fused ops for the comparison in
// scripts/gpu_bench_torch.py: AIMET's fake quantization per channel and ONNX's FP8 quantize. Then
// the grouped reductions (the analyzers' min / max and histograms, the gradients' exact sums),
// their bytes x's read.
//
// Bytes counted: every operand read (x, and the parameter arrays of the layout) plus the output
// written, at its real width (measured: the bytes the kernel writes on a short row). "of copy" is
// the op's bytes per second over the copy's (cudaMemcpyAsync of x, read + write).
//
//   polyquant_cuda_bench [--elements N] [--reps R] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "core/cuda_backend.h"
#include "core/histogram.h"
#include "kernel_cases.h"
#include "kernels/registry.h"
#include "library_under_test.h"

namespace polyquant::detail {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "polyquant_cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

// Median milliseconds of `reps` CUDA-event-timed runs of `run` after 3 warm-up runs.
template <class Run>
double median_ms(int reps, Run run) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) run();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    run();
    cudaEventRecord(stop);
    check(cudaEventSynchronize(stop), "timed run");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

enum class Layout { kPerTensor, kPerChannelFirst, kPerChannelLast, kBlockwise };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kPerTensor: return "per-tensor";
    case Layout::kPerChannelFirst: return "per-channel axis 0";
    case Layout::kPerChannelLast: return "per-channel last axis";
    case Layout::kBlockwise: return "blockwise 32";
  }
  return "";
}

struct Result {
  std::string op, layout;
  double ms, bytes, of_copy;
};

class Bench {
 public:
  Bench(const PolyquantCudaBackend* table, std::int64_t n, int reps) : table_(table), n_(n), reps_(reps) {
    std::vector<float> x(static_cast<std::size_t>(n));
    std::vector<std::int8_t> x8(static_cast<std::size_t>(n));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-20.0f, 20.0f);
    for (auto& v : x) v = d(rng);
    for (auto& v : x8) v = static_cast<std::int8_t>(rng());
    x_ = static_cast<float*>(device_alloc(x.size() * 4));
    x8_ = static_cast<std::int8_t*>(device_alloc(x8.size()));
    out_ = device_alloc(static_cast<std::size_t>(n) * 8);
    sums_ = static_cast<double*>(device_alloc(static_cast<std::size_t>(n) * 16));
    check(cudaMemcpy(x_, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "x");
    check(cudaMemcpy(x8_, x8.data(), x8.size(), cudaMemcpyHostToDevice), "x int8");
    const std::size_t copy_bytes = static_cast<std::size_t>(n) * 4;
    const double ms = median_ms(reps_, [&] { cudaMemcpyAsync(out_, x_, copy_bytes, cudaMemcpyDeviceToDevice); });
    copy_bytes_per_ms_ = 2.0 * static_cast<double>(copy_bytes) / ms;
    results_.push_back({"copy (cudaMemcpyAsync)", "", ms, 2.0 * static_cast<double>(copy_bytes), 1.0});
  }

  // One op's benchmark call (`setup` fills a BenchRow) in `layout`. `label` names it in the table.
  void run(KernelOp op, const std::string& label, Layout layout, const std::function<void(test::BenchRow&)>& setup) {
    const PolyquantCudaLaunch launch = table_->launch[static_cast<int>(op)][static_cast<int>(WorkType::kF32)];
    if (launch == nullptr) return;
    test::BenchRow row(n_, x_, x8_, static_cast<float*>(out_), sums_);
    setup(row);
    RowArgs a = row.args();
    std::vector<void*> owned;
    double read_bytes = 0;
    bool has_parameter = false;
    for (int k = 0; k < row.operand_count(); ++k) {
      const std::size_t size = row.element_size(k);
      if (!a.is_broadcast(k)) {
        read_bytes += static_cast<double>(size) * static_cast<double>(n_);
        continue;
      }
      // A broadcast operand: its one value (host memory) becomes a device array of the layout.
      std::int64_t count = 1, row_len = 0;
      if (k > 0 && layout != Layout::kPerTensor) {
        has_parameter = true;
        row_len = layout == Layout::kPerChannelFirst ? n_ / 256 : layout == Layout::kPerChannelLast ? 1024 : 32;
        count = layout == Layout::kPerChannelLast ? row_len + kRepeatedRowPad : n_ / row_len;
        a.broadcast_mask &= ~(1u << k);
        (layout == Layout::kPerChannelLast ? a.repeated_row_mask : a.per_row_mask) |= 1u << k;
        a.row_len = row_len;
      }
      std::vector<unsigned char> values(static_cast<std::size_t>(count) * size);
      for (std::int64_t i = 0; i < count; ++i) std::memcpy(values.data() + i * size, a.in[static_cast<std::size_t>(k)], size);
      void* d = device_alloc(values.size());
      check(cudaMemcpy(d, values.data(), values.size(), cudaMemcpyHostToDevice), "parameter");
      owned.push_back(d);
      a.in[static_cast<std::size_t>(k)] = d;
      if (count > 1) read_bytes += static_cast<double>(values.size());
    }
    if (layout != Layout::kPerTensor && !has_parameter) {
      for (void* d : owned) cudaFree(d);
      return;
    }
    const double bytes = read_bytes + written_bytes_per_element(launch, row.params(), a) * static_cast<double>(n_);
    const double ms = median_ms(reps_, [&] { launch(row.params(), &a, nullptr, nullptr); });
    check(cudaGetLastError(), label.c_str());
    results_.push_back({label, layout_name(layout), ms, bytes, bytes / ms / copy_bytes_per_ms_});
    for (void* d : owned) cudaFree(d);
  }

  // The reductions that read x and write per-group results (AIMET's analyzers and gradient sums):
  // bytes counted are x's, read once. The group minimum / maximum is the read-only pass the
  // histogram is measured against (issue 20: a histogram update at 50% of a read-only pass or more).
  void run_reductions() {
    struct Grouping {
      const char* name;
      std::int64_t groups;
    };
    const double x_bytes = static_cast<double>(n_) * 4.0;
    auto add = [&](const std::string& label, const char* layout, double ms) {
      results_.push_back({label, layout, ms, x_bytes, x_bytes / ms / copy_bytes_per_ms_});
    };
    for (const Grouping g : {Grouping{"per-tensor", 1}, Grouping{"per-channel axis 0", 256}}) {
      PolyquantCudaGroupMinMax m{};
      m.x = x_;
      m.dtype = DType::kFloat32;
      m.rank = 2;
      m.shape[0] = g.groups, m.shape[1] = n_ / g.groups;
      m.group_strides[0] = 1, m.group_strides[1] = 0;
      m.groups = g.groups;
      m.keys = static_cast<std::uint64_t*>(device_alloc(static_cast<std::size_t>(g.groups) * 16));
      m.flags = static_cast<std::uint32_t*>(device_alloc(static_cast<std::size_t>(g.groups) * 4));
      m.finite_only = 1;
      add("group min / max (finite)", g.name, median_ms(reps_, [&] { table_->group_min_max(&m, nullptr); }));
      for (const std::int64_t bins : {std::int64_t{512}, std::int64_t{2048}}) {
        PolyquantCudaGroupHistogram h{};
        h.x = x_;
        h.dtype = DType::kFloat32;
        h.rank = 2;
        h.shape[0] = g.groups, h.shape[1] = n_ / g.groups;
        h.group_strides[0] = 1, h.group_strides[1] = 0;
        h.groups = g.groups;
        h.bins = bins;
        // x spans [-20, 20): the range AIMET's first batch would take
        const HistcBinning hb(-20.0, 20.0, bins);
        std::vector<PolyquantCudaHistogramBinning> binning(static_cast<std::size_t>(g.groups), {hb.counting(), -20.0, 20.0});
        void* b = device_alloc(binning.size() * sizeof(PolyquantCudaHistogramBinning));
        check(cudaMemcpy(b, binning.data(), binning.size() * sizeof(PolyquantCudaHistogramBinning), cudaMemcpyHostToDevice), "binning");
        h.binning = static_cast<const PolyquantCudaHistogramBinning*>(b);
        h.counts = static_cast<std::uint64_t*>(device_alloc(static_cast<std::size_t>(g.groups * (bins + 2)) * 8));
        add("group histogram " + std::to_string(bins) + " bins", g.name, median_ms(reps_, [&] { table_->group_histogram(&h, nullptr); }));
        check(cudaGetLastError(), "group histogram");
        cudaFree(b);
        cudaFree(h.counts);
      }
      add("exact sums", g.name, median_ms(reps_, [&] { exact_sums(Dims{g.groups, n_ / g.groups}, Dims{1, 0}, g.groups); }));
      check(cudaGetLastError(), "reductions");
      for (void* p : {static_cast<void*>(m.keys), static_cast<void*>(m.flags)}) cudaFree(p);
    }
    // The gradients' sums on the other layouts: a group that changes with every term (per channel on
    // the last axis), and blocks of 128 (blockwise AIMET).
    add("exact sums", "per-channel last axis", median_ms(reps_, [&] { exact_sums(Dims{n_ / 256, 256}, Dims{0, 1}, 256); }));
    add("exact sums", "blockwise 128", median_ms(reps_, [&] { exact_sums(Dims{n_ / 4096, 32, 128}, Dims{32, 1, 0}, n_ / 128); }));
    check(cudaGetLastError(), "exact sums");
  }

  // PolyquantCudaExactSums over x (the terms) with the given grouping; its buffers kept per grouping.
  void exact_sums(const Dims& shape, const Dims& group_strides, std::int64_t groups) {
    PolyquantCudaExactSums e{};
    e.terms = x_;
    e.rank = shape.rank;
    for (int d = 0; d < shape.rank; ++d) e.shape[d] = shape[d], e.group_strides[d] = group_strides[d];
    e.groups = groups;
    auto& [limbs, flags] = sums_buffers_[groups];
    if (limbs == nullptr) {
      limbs = device_alloc(static_cast<std::size_t>(groups) * kPolyquantCudaExactLimbs * 8);
      flags = device_alloc(static_cast<std::size_t>(groups) * 4);
    }
    e.limbs = static_cast<std::int64_t*>(limbs);
    e.flags = static_cast<std::uint32_t*>(flags);
    table_->exact_sums(&e, nullptr);
  }

  void print(const char* json_path) const {
    std::printf("%-32s %-22s %8s %8s %8s\n", "op", "parameters", "ms", "GB/s", "of copy");
    for (const Result& r : results_) {
      std::printf("%-32s %-22s %8.3f %8.1f %7.1f%%\n", r.op.c_str(), r.layout.c_str(), r.ms, r.bytes / r.ms / 1e6,
                  100.0 * r.of_copy);
    }
    if (json_path == nullptr) return;
    FILE* f = std::fopen(json_path, "w");
    if (f == nullptr) return;
    std::fprintf(f, "{\"elements\": %lld, \"reps\": %d, \"results\": [\n", static_cast<long long>(n_), reps_);
    for (std::size_t i = 0; i < results_.size(); ++i) {
      const Result& r = results_[i];
      std::fprintf(f, "  {\"op\": \"%s\", \"parameters\": \"%s\", \"ms\": %.6f, \"bytes\": %.0f, \"of_copy\": %.4f}%s\n",
                   r.op.c_str(), r.layout.c_str(), r.ms, r.bytes, r.of_copy, i + 1 < results_.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }

 private:
  // The bytes one output element takes: the extent the kernel writes on a short row (0.5 for
  // packed 4-bit outputs).
  double written_bytes_per_element(PolyquantCudaLaunch launch, const void* params, RowArgs a) const {
    constexpr std::int64_t kProbe = 1 << 12;
    constexpr unsigned char kUntouched = 0xA5;
    a.n = kProbe;
    check(cudaMemset(a.out, kUntouched, kProbe * 8), "probe");
    check(static_cast<cudaError_t>(launch(params, &a, nullptr, nullptr)), "probe launch");
    std::vector<unsigned char> got(kProbe * 8);
    check(cudaMemcpy(got.data(), a.out, got.size(), cudaMemcpyDeviceToHost), "probe copy");
    std::size_t last = 0;
    for (std::size_t b = 0; b < got.size(); ++b) {
      if (got[b] != kUntouched) last = b;
    }
    for (double size : {0.5, 1.0, 2.0, 4.0, 8.0}) {
      if (static_cast<double>(last) < size * kProbe) return size;
    }
    return 8.0;
  }

  const PolyquantCudaBackend* table_;
  std::int64_t n_;
  int reps_;
  float* x_ = nullptr;
  std::int8_t* x8_ = nullptr;
  void* out_ = nullptr;
  double* sums_ = nullptr;
  double copy_bytes_per_ms_ = 0;
  std::vector<Result> results_;
  std::map<std::int64_t, std::pair<void*, void*>> sums_buffers_;  // exact sums' limbs and flags by group count
};

int main_(int argc, char** argv) {
  std::int64_t n = std::int64_t{64} << 20;
  int reps = 15;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--elements" && i + 1 < argc) n = std::atoll(argv[++i]);
    else if (arg == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (arg == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: polyquant_cuda_bench [--elements N (a multiple of 8192)] [--reps R] [--json FILE]\n");
      return 2;
    }
  }
  if (n <= 0 || n % 8192 != 0 || reps <= 0) {
    std::fprintf(stderr, "polyquant_cuda_bench: --elements must be a positive multiple of 8192 and --reps positive\n");
    return 2;
  }
  const CudaBackendStatus status = load_cuda_backend(cuda_library_under_test());
  if (!status.available()) {
    std::fprintf(stderr, "polyquant_cuda_bench: CUDA unavailable: %s\n", status.reason.c_str());
    return 1;
  }
  std::printf("device: %s; %lld float32 elements (%.0f MiB), medians of %d runs\n", status.devices[0].c_str(),
              static_cast<long long>(n), static_cast<double>(n) * 4 / (1 << 20), reps);
  Bench bench(status.table, n, reps);
  const Layout layouts[] = {Layout::kPerTensor, Layout::kPerChannelFirst, Layout::kPerChannelLast, Layout::kBlockwise};
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    const test::KernelCases cases = test::kernel_cases(op);
    if (!cases.bench) continue;
    for (Layout l : layouts) bench.run(op, op_name(op), l, cases.bench);
  }
  // torch.fake_quantize_per_channel_affine's formula (AIMET's per-channel shortcut).
  FakeQuantizeParams per_channel;
  per_channel.per_channel = true;
  per_channel.exact_in_float = true;
  per_channel.zero_point_f32 = true;
  for (Layout l : {Layout::kPerChannelFirst, Layout::kPerChannelLast}) {
    bench.run(KernelOp::kFakeQuantize, "fake_quantize per_channel", l,
              [&](test::BenchRow& r) { r.call(&per_channel, {r.x(), r.value(0.5f), r.value(0.0f)}); });
  }
  // FP8 E4M3FN with saturation, as torch's (x / s).clamp(-448, 448).to(float8_e4m3fn).
  QuantizeLinearParams fp8;
  fp8.target = QuantTarget::kMinifloat;
  fp8.out_dtype = DType::kFloat8E4M3FN;
  fp8.format = minifloat_format(DType::kFloat8E4M3FN);
  fp8.saturate = true;
  bench.run(KernelOp::kQuantizeLinear, "quantize_linear float8_e4m3fn", Layout::kPerTensor,
            [&](test::BenchRow& r) { r.call(&fp8, {r.x(), r.value(0.5f)}); });
  bench.run_reductions();
  bench.print(json);
  return 0;
}

}  // namespace
}  // namespace polyquant::detail

int main(int argc, char** argv) { return polyquant::detail::main_(argc, argv); }
