// Every per-element op of the op list launched on the GPU through libpolyquant_cuda.so's table,
// compared bit for bit (every output byte, NaN payloads and signs of zero included) with the CPU
// scalar reference kernel ref::<op>_f32 on the same operands. Skipped, with the reason, where the
// library finds no driver or no device: the build machines and CI compile this test, a GPU
// machine runs it (scripts that run the GPU suite: see docs/cuda.md).
//
// Operands: every kernel case of the op (tests/cpp/<family>/kernel_cases.cc: the grids, ties and
// specials its vector kernels are checked on), once as given and once with x replaced by a
// stratified float32 set (ties of several scales and one ulp either side, IEEE specials, NaN
// payloads, subnormals, +-0, powers of two and random magnitudes); contiguous parameters and all
// parameters broadcast; blocked (per-row) parameters where the op's cases have them. Linear
// quantize / dequantize, whose kernel checks live in QdqKernelTest, get their own cases here.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "backends/cuda/row_elements.cuh"
#include "core/cuda_backend.h"
#include "kernel_cases.h"
#include "kernels/registry.h"
#include "test_values.h"
#include "library_under_test.h"

namespace polyquant::detail {
namespace {

using test::KernelCheck;
using test::Operand;

constexpr std::int64_t kRowLength = 4099;
constexpr std::size_t kOutBytesPerElement = 8;  // the widest element any kernel writes (float64)
constexpr unsigned char kUntouched = 0xA5;      // fills both outputs: bytes a kernel skips stay equal

// One operand's bytes on the host (as the kernel reads them) and its copy on the device.
struct HostOperand {
  std::vector<unsigned char> bytes;
  std::uint8_t element_size = 4;
};

HostOperand host_bytes(const Operand& o) {
  HostOperand h;
  h.element_size = static_cast<std::uint8_t>(o.element_size());
  h.bytes.assign(o.bytes(), o.bytes() + (o.f64.empty() ? o.f32.size() : o.f64.size()) * o.element_size());
  return h;
}

// `a` with its operands' element sizes (RowArgs::in_bytes): a launch with per-row or repeated-row
// operands then resolves them per thread (RowLayout::kRowsResolved) instead of per read, and a
// launch whose operands after x are one value each holds them once per thread
// (RowLayout::kFirstStreams); both read x ahead.
RowArgs with_sizes(RowArgs a, const std::vector<HostOperand>& operands) {
  for (std::size_t k = 0; k < operands.size(); ++k) a.in_bytes[k] = operands[k].element_size;
  return a;
}

// x for the stratified runs: kRowLength + 16 float32 values.
std::vector<float> stratified_float32() {
  std::vector<float> v = test::special_values();
  for (float s : {1.0f, 0.5f, 0.1f, 3.0f, 0.0078125f}) {
    const auto ties = test::near_ties(s, 130);
    v.insert(v.end(), ties.begin(), ties.end());
  }
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (int k : {1, 2, 3, 1000, 4194303, 4194304, 8388607}) {
    v.push_back(tiny * static_cast<float>(k));
    v.push_back(-tiny * static_cast<float>(k));
  }
  for (int e = -149; e <= 127; e += 3) {
    const float p = std::ldexp(1.0f, e);
    v.push_back(p);
    v.push_back(-std::nextafter(p, 0.0f));
  }
  const auto mixed = test::mixed_values(test::kOperandLength, 77, 0.5f);
  for (std::size_t i = 0; v.size() < test::kOperandLength; ++i) v.push_back(mixed[i]);
  v.resize(test::kOperandLength);
  return v;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class RowsOnDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    status_ = load_cuda_backend(cuda_library_under_test());
    if (status_.table == nullptr) FAIL() << "the built CUDA library does not load: " << status_.reason;
    if (!status_.available()) GTEST_SKIP() << "CUDA unavailable: " << status_.reason;
  }

  // Runs op on one row of n elements with the CPU reference and on the device and compares every
  // output byte. `args` holds the row's masks; its pointers are filled here.
  ::testing::AssertionResult same_on_device(KernelOp op, const void* params, const std::vector<HostOperand>& operands,
                                            RowArgs args, WorkType work = WorkType::kF32) const {
    const PolyquantCudaLaunch launch = status_.table->launch[static_cast<int>(op)][static_cast<int>(work)];
    if (launch == nullptr) return ::testing::AssertionFailure() << "no launcher in this working precision";
    const std::size_t out_bytes = static_cast<std::size_t>(args.n) * kOutBytesPerElement;
    std::vector<std::unique_ptr<DeviceBuffer>> device;
    RowArgs on_device = args, on_host = args;
    for (std::size_t k = 0; k < operands.size(); ++k) {
      device.push_back(std::make_unique<DeviceBuffer>(operands[k].bytes.size()));
      cudaMemcpy(device.back()->get(), operands[k].bytes.data(), operands[k].bytes.size(), cudaMemcpyHostToDevice);
      on_device.in[k] = device.back()->get();
      on_host.in[k] = operands[k].bytes.data();
    }
    std::vector<unsigned char> want(out_bytes, kUntouched);
    on_host.out = want.data();
    reference_kernel(op, work)(params, on_host);
    DeviceBuffer out(out_bytes);
    cudaMemset(out.get(), kUntouched, out_bytes);
    on_device.out = out.get();
    const int launched = launch(params, &on_device, nullptr, nullptr);
    if (launched != 0) return ::testing::AssertionFailure() << "launch: " << status_.table->error_string(launched);
    const cudaError_t done = cudaDeviceSynchronize();
    if (done != cudaSuccess) return ::testing::AssertionFailure() << "kernel: " << cudaGetErrorString(done);
    std::vector<unsigned char> got(out_bytes);
    cudaMemcpy(got.data(), out.get(), out_bytes, cudaMemcpyDeviceToHost);
    ::testing::AssertionResult same = same_bytes(got, want);
    if (!same) return same;
    auto& [rows, elements] = checked_[std::string(op_name(op)) + (work == WorkType::kF16 ? " (float16 work)" : "")];
    ++rows;
    elements += args.n;
    return ::testing::AssertionSuccess();
  }

  static ::testing::AssertionResult same_bytes(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
    const std::size_t out_bytes = got.size();
    for (std::size_t b = 0; b < out_bytes; ++b) {
      if (got[b] != want[b]) {
        // The 8 bytes around the first difference, as little-endian words (gtest streams each item
        // of a message separately, so the hex is formatted here).
        const std::size_t start = b - b % 8;
        const auto word = [&](const std::vector<unsigned char>& v) {
          std::ostringstream s;
          s << "0x" << std::hex;
          for (std::size_t k = start + 8; k-- > start;) s << (v[k] < 16 ? "0" : "") << int(v[k]);
          return s.str();
        };
        return ::testing::AssertionFailure() << "output byte " << b << ": device " << word(got) << ", CPU " << word(want)
                                             << " (bytes " << start << ".." << start + 7 << ")";
      }
    }
    return ::testing::AssertionSuccess();
  }

  // One row of n elements of a kernel case on the given operands: parameters contiguous, every
  // parameter operand broadcast (one value), and every operand after x broadcast with the element
  // sizes (the kernel that reads x ahead and holds the parameters, RowLayout::kFirstStreams).
  void check_both_layouts(KernelOp op, const KernelCheck& check, const std::vector<HostOperand>& operands,
                          std::int64_t n, WorkType work, const char* what) const {
    std::uint32_t params_mask = 0;
    for (std::size_t k = 1; k < check.operands->size(); ++k) {
      if (check.operands->at(k).param) params_mask |= 1u << k;
    }
    for (std::uint32_t mask : {0u, params_mask}) {
      RowArgs a;
      a.n = n;
      a.broadcast_mask = mask;
      EXPECT_TRUE(same_on_device(op, check.params.get(), operands, a, work))
          << op_name(op) << " " << check.what << " " << what << " mask=" << mask;
    }
    RowArgs a;
    a.n = n;
    a.broadcast_mask = ((1u << check.operands->size()) - 1) & ~1u;
    EXPECT_TRUE(same_on_device(op, check.params.get(), operands, with_sizes(a, operands), work))
        << op_name(op) << " " << check.what << " " << what << " per-tensor operands, x read ahead";
    // The op's second stream (a gradient's other operand) contiguous beside x, read ahead too.
    if (const int second = cuda::second_stream_of(op); second > 0 && static_cast<std::size_t>(second) < check.operands->size()) {
      a.broadcast_mask &= ~(1u << second);
      EXPECT_TRUE(same_on_device(op, check.params.get(), operands, with_sizes(a, operands), work))
          << op_name(op) << " " << check.what << " " << what << " per-tensor operands, x and operand " << second << " read ahead";
    }
  }

  // The row checks of one kernel case: as given and with x stratified.
  void check_rows(KernelOp op, const KernelCheck& check) const {
    std::vector<HostOperand> given;
    for (const Operand& o : *check.operands) given.push_back(host_bytes(o));
    std::vector<HostOperand> stratified = given;
    if (check.operands->at(0).f64.empty()) {
      Operand x;
      x.f32 = stratified_float32();
      stratified[0] = host_bytes(x);
    }
    check_both_layouts(op, check, given, kRowLength, WorkType::kF32, "(case x)");
    check_both_layouts(op, check, stratified, kRowLength, WorkType::kF32, "(stratified x)");
  }

  // Blocked parameters: operands 1 and 2 one value per row; read per element (no element sizes: the
  // general kernel) and resolved per thread (the kRowsResolved kernel).
  void check_per_row(KernelOp op, const KernelCheck& check) const {
    std::vector<HostOperand> operands;
    for (const Operand& o : *check.operands) operands.push_back(host_bytes(o));
    for (std::int64_t row_len : {1, 17, 32, 100, 4096}) {
      RowArgs a;
      a.row_len = row_len;
      a.n = (kRowLength / row_len) * row_len;
      a.per_row_mask = 6u;
      EXPECT_TRUE(same_on_device(op, check.params.get(), operands, a)) << op_name(op) << " per-row row_len=" << row_len;
      EXPECT_TRUE(same_on_device(op, check.params.get(), operands, with_sizes(a, operands)))
          << op_name(op) << " per-row row_len=" << row_len << " resolved per thread";
    }
  }

  // Repeated-row operands (a per-channel parameter on channels-last rows): each operand alone, x
  // included, and all of them, the others contiguous; general and resolved per thread. Rows of 1,
  // 17 and 1024 elements. (Every mask runs through the same thread loop on the CPU,
  // RowLayout.ResolvedThreadLoopsEqualTheReferenceRows; here a few keep memcheck's run short.)
  void check_repeated_rows(KernelOp op, const KernelCheck& check) const {
    const std::vector<Operand>& ops = *check.operands;
    const std::size_t nops = ops.size();
    for (std::int64_t row_len : {1, 17, 1024}) {
      const std::int64_t n = (kRowLength / row_len) * row_len;
      std::vector<HostOperand> repeated(nops), expanded(nops);
      for (std::size_t k = 0; k < nops; ++k) {
        repeated[k].bytes = ops[k].repeated_row(k, row_len, row_len + kRepeatedRowPad);
        expanded[k].bytes = ops[k].repeated_row(k, row_len, n);
        repeated[k].element_size = expanded[k].element_size = static_cast<std::uint8_t>(ops[k].element_size());
      }
      std::vector<std::uint32_t> masks;
      for (std::size_t k = 0; k < nops; ++k) masks.push_back(1u << k);
      if (nops > 1) masks.push_back((1u << nops) - 1);
      for (std::uint32_t repeat : masks) {
        std::vector<HostOperand> operands(nops);
        for (std::size_t k = 0; k < nops; ++k) operands[k] = ((repeat >> k) & 1u) != 0 ? repeated[k] : expanded[k];
        RowArgs a;
        a.row_len = row_len;
        a.n = n;
        a.repeated_row_mask = repeat;
        EXPECT_TRUE(same_on_device(op, check.params.get(), operands, a))
            << op_name(op) << " " << check.what << " repeated rows " << repeat << " row_len=" << row_len;
        EXPECT_TRUE(same_on_device(op, check.params.get(), operands, with_sizes(a, operands)))
            << op_name(op) << " " << check.what << " repeated rows " << repeat << " row_len=" << row_len << " resolved per thread";
      }
    }
  }

  // The rows (and elements) compared per op, printed after each test: the GPU suite's summary.
  void TearDown() override {
    for (const auto& [op, count] : checked_) {
      std::cout << "  " << op << ": " << count.first << " rows, " << count.second << " elements compared\n";
    }
  }

  CudaBackendStatus status_;
  mutable std::map<std::string, std::pair<int, std::int64_t>> checked_;
};

// Every op with a per-element row and a float32 launcher, over its kernel cases.
TEST_F(RowsOnDevice, EveryKernelCaseEqualsTheCpuReferenceBitForBit) {
  int ops_checked = 0;
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    if (status_.table->launch[k][static_cast<int>(WorkType::kF32)] == nullptr) continue;
    const test::KernelCases cases = test::kernel_cases(op);
    for (const KernelCheck& check : cases.checks) {
      switch (check.kind) {
        case KernelCheck::Kind::kRows: check_rows(op, check); break;
        case KernelCheck::Kind::kPerRowParams: check_per_row(op, check); break;
        case KernelCheck::Kind::kRepeatedRows: check_repeated_rows(op, check); break;
      }
    }
    ops_checked += !cases.checks.empty();
  }
  EXPECT_GT(ops_checked, 0);
}

// The float16 working precision (QONNX's ops on float16 tensors): every one of the 65536 float16
// values as x, with each kernel case's parameters rounded to float16, contiguous and broadcast.
TEST_F(RowsOnDevice, EveryFloat16XInTheFloat16WorkingPrecision) {
  constexpr std::int64_t kAllHalves = 65536;
  int ops_checked = 0;
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    if (status_.table->launch[k][static_cast<int>(WorkType::kF16)] == nullptr) continue;
    const test::KernelCases cases = test::kernel_cases(op);
    for (const KernelCheck& check : cases.checks) {
      if (check.kind != KernelCheck::Kind::kRows) continue;
      std::vector<HostOperand> operands;
      for (std::size_t i = 0; i < check.operands->size(); ++i) {
        const Operand& o = check.operands->at(i);
        HostOperand h;
        if (!o.f64.empty()) {  // float64 operands (FloatQuant's bound) stay float64
          h = host_bytes(o);
          h.bytes.resize(kAllHalves * 8);
          for (std::int64_t j = static_cast<std::int64_t>(o.f64.size()); j < kAllHalves; ++j) {
            std::memcpy(h.bytes.data() + j * 8, o.f64.data() + j % o.f64.size(), 8);
          }
        } else {
          h.element_size = 2;
          h.bytes.resize(kAllHalves * 2);
          for (std::int64_t j = 0; j < kAllHalves; ++j) {
            const std::uint16_t v = i == 0 ? static_cast<std::uint16_t>(j) : float_to_half_bits(o.f32[j % o.f32.size()]);
            std::memcpy(h.bytes.data() + j * 2, &v, 2);
          }
        }
        operands.push_back(std::move(h));
      }
      check_both_layouts(op, check, operands, kAllHalves, WorkType::kF16, "(every float16 x)");
    }
    ++ops_checked;
  }
  EXPECT_GT(ops_checked, 0);
}

// QuantizeLinear to several targets on the stratified x, against the CPU reference.
TEST_F(RowsOnDevice, QuantizeLinearEqualsTheCpuReferenceBitForBit) {
  Operand x, scale, zero_point;
  x.f32 = stratified_float32();
  scale.f32 = test::fill(0.5f);
  zero_point.f32 = test::fill(3.0f);
  const std::vector<HostOperand> operands = {host_bytes(x), host_bytes(scale), host_bytes(zero_point)};
  std::vector<std::pair<std::string, QuantizeLinearParams>> cases;
  QuantizeLinearParams p;
  p.has_zero_point = true;
  cases.emplace_back("uint8", p);
  p.out_dtype = DType::kInt8, p.qmin = -128, p.qmax = 127;
  cases.emplace_back("int8", p);
  p.non_finite = NonFinitePolicy::kInt64Cast;
  cases.emplace_back("int8 (Quark's int64 cast)", p);
  p = QuantizeLinearParams{};
  p.out_dtype = DType::kInt4, p.qmin = -8, p.qmax = 7, p.has_zero_point = true;
  cases.emplace_back("int4", p);
  for (DType t : {DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat4E2M1}) {
    for (bool saturate : {true, false}) {
      p = QuantizeLinearParams{};
      p.target = QuantTarget::kMinifloat;
      p.out_dtype = t;
      p.format = minifloat_format(t);
      p.saturate = saturate;
      cases.emplace_back(std::string(dtype_name(t)) + (saturate ? " saturate" : ""), p);
    }
  }
  p = QuantizeLinearParams{};
  p.target = QuantTarget::kBFloat16;
  cases.emplace_back("bfloat16", p);
  p.target = QuantTarget::kFloat16;
  cases.emplace_back("float16", p);
  p.target = QuantTarget::kFloat16Clamp;
  cases.emplace_back("float16 clamped", p);
  for (const auto& [what, params] : cases) {
    for (std::uint32_t mask : {0u, 6u}) {
      RowArgs a;
      a.n = kRowLength;
      a.broadcast_mask = mask;
      EXPECT_TRUE(same_on_device(KernelOp::kQuantizeLinear, &params, operands, a)) << what << " mask=" << mask;
    }
    RowArgs a;
    a.n = kRowLength;
    a.broadcast_mask = 6u;
    EXPECT_TRUE(same_on_device(KernelOp::kQuantizeLinear, &params, operands, with_sizes(a, operands)))
        << what << " per tensor, x read ahead";
  }
}

// DequantizeLinear of every byte of 8-bit integer and minifloat inputs, against the CPU reference;
// the parameters contiguous, and one value each with the element sizes (1-byte x read ahead).
TEST_F(RowsOnDevice, DequantizeLinearEqualsTheCpuReferenceBitForBit) {
  HostOperand codes, scale, zero_point;
  codes.element_size = zero_point.element_size = 1;
  codes.bytes.resize(kRowLength);
  for (std::size_t i = 0; i < codes.bytes.size(); ++i) codes.bytes[i] = static_cast<unsigned char>(i * 37);
  Operand s;
  s.f32 = test::fill(0.1f);
  scale = host_bytes(s);
  zero_point.bytes.assign(kRowLength, 3);
  for (DType t : {DType::kUInt8, DType::kInt8, DType::kInt4, DType::kFloat8E4M3FN, DType::kFloat8E5M2}) {
    DequantizeLinearParams p;
    p.x_dtype = t;
    p.has_zero_point = !has_minifloat_format(t);
    RowArgs a;
    a.n = kRowLength;
    EXPECT_TRUE(same_on_device(KernelOp::kDequantizeLinear, &p, {codes, scale, zero_point}, a)) << dtype_name(t);
    a.broadcast_mask = 6u;
    EXPECT_TRUE(same_on_device(KernelOp::kDequantizeLinear, &p, {codes, scale, zero_point}, with_sizes(a, {codes, scale, zero_point})))
        << dtype_name(t) << " per tensor, x read ahead";
  }
}

// FloatQuant after cudaDeviceReset: the reset (here from this program's CUDA runtime, as a framework
// beside polyquant would make it) empties the library's floor(log2) table with the context; the
// next FloatQuant launch must fill it again in the new context (row_kernels.cu,
// upload_floor_log2_table) and equal the CPU. It resets the device, so it runs only when asked,
// alone: POLYQUANT_CUDA_DEVICE_RESET_TEST=1 polyquant_cuda_tests --gtest_filter='*DeviceReset*'
// (scripts/gpu_check.sh does, after the suite).
TEST_F(RowsOnDevice, FloatQuantAfterADeviceResetEqualsTheCpu) {
  const char* asked = std::getenv("POLYQUANT_CUDA_DEVICE_RESET_TEST");
  if (asked == nullptr || std::string(asked) != "1") GTEST_SKIP() << "resets the device: set POLYQUANT_CUDA_DEVICE_RESET_TEST=1 and run it alone";
  const test::KernelCases cases = test::kernel_cases(KernelOp::kFloatQuant);
  ASSERT_FALSE(cases.checks.empty());
  const KernelCheck& check = cases.checks.front();
  std::vector<HostOperand> operands;
  for (const Operand& o : *check.operands) operands.push_back(host_bytes(o));
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("after " + std::to_string(round) + " device resets");
    check_both_layouts(KernelOp::kFloatQuant, check, operands, kRowLength, WorkType::kF32, "(case x)");
    ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  }
}

}  // namespace
}  // namespace polyquant::detail
