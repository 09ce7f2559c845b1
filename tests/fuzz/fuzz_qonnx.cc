// Fuzz harness over polyquant's public C++ API (the QONNX ops).
//
// Each case draws an op, a data dtype, parameter dtypes, an output shape (rank 0..8, empty dims,
// rows long enough for the SIMD loops, now and then large enough to be split over threads or with
// dimensions whose product overflows), operand shapes that broadcast to it (or, rarely, do not),
// strides for every operand (zero, negative, odd multiples, transposed) and values (IEEE specials,
// subnormals, ties, huge, random bits), then:
//   * calls the *_spec function; a rejection must be polyquant::Error, identical on every kernel
//     set (any other exception, a crash or a sanitizer report fails the run);
//   * runs the op on every kernel set the CPU has (polyquant::set_kernel_set) and compares each output with the scalar set's, bit for bit (any NaN equals any NaN);
//   * runs it again on contiguous copies of every operand and compares (layout invariance: the
//     zero-stride and negative-stride paths against the plain one);
//   * writes into a strided (reversed) output now and then and compares.
//
// Two ways to build it:
//   * the deterministic driver (default): `polyquant_fuzz_qonnx [--seed N] [--seconds S] [--iterations N]
//     [--start I]`: case i is drawn from (seed, i) alone, so `--seed N --start I --iterations 1`
//     replays one case. It prints the kernel sets, executions per second and the total.
//   * a libFuzzer target (clang, -DPOLYQUANT_LIBFUZZER -fsanitize=fuzzer): LLVMFuzzerTestOneInput
//     draws the same case from the input bytes instead of the generator.
// The random source, tensors, comparison and driver are shared with fuzz_qkeras.cc (fuzz_support.h).
#include <polyquant/polyquant.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"

namespace pq = polyquant;
namespace qx = polyquant::qonnx;

namespace {

using namespace polyquant::fuzz;

// ---- cases ------------------------------------------------------------------------------------

enum class Op { kIntQuant, kBipolar, kTruncV1, kTruncV2, kFloatQuant };
constexpr const char* kOpNames[] = {"int_quant", "bipolar_quant", "trunc_v1", "trunc_v2", "float_quant"};

struct Case {
  Op op = Op::kIntQuant;
  std::vector<Tensor> in;  // x first
  qx::IntQuantAttrs iq;
  qx::TruncV2Attrs t2;
  qx::FloatQuantAttrs fq;
  pq::RoundingMode mode = pq::RoundingMode::kHalfEven;
  // Operand k is a Python scalar (TensorView::weak) when bit k is set: the core must take it for
  // a 0-d operand (numpy 2's promotion) and refuse it, naming the operand, for any other shape.
  unsigned weak = 0;
  pq::TensorView operand(std::vector<Tensor>& tensors, int i) const {
    pq::TensorView v = tensors[static_cast<std::size_t>(i)].view();
    v.weak = ((weak >> i) & 1u) != 0;
    return v;
  }
  std::string describe() const {
    std::string d = kOpNames[static_cast<int>(op)];
    if (weak != 0) d += " weak=" + std::to_string(weak);
    for (const auto& t : in) {
      d += std::string(" ") + pq::dtype_name(t.dtype) + t.shape.str() + "/" + t.strides.str();
    }
    d += std::string(" mode=") + pq::rounding_mode_name(mode);
    return d;
  }
};

bool g_overflow_shapes = true;  // --no-overflow-shapes: triage of other defects while numel overflows

pq::Dims draw_out_shape(Source& s) {
  pq::Dims d;
  int shape_kind = static_cast<int>(s.below(20));
  if (shape_kind == 1 && !g_overflow_shapes) shape_kind = 2;
  if (shape_kind == 0) {  // big enough for several threads
    d = pq::Dims{static_cast<std::int64_t>(2 + s.below(3)), static_cast<std::int64_t>(40000 + s.below(40000))};
    return d;
  }
  if (shape_kind == 1) {  // dimensions whose product overflows int64 (only ever broadcast views)
    d = pq::Dims{std::int64_t{1} << (31 + s.below(3)), std::int64_t{1} << (31 + s.below(3)), 3};
    return d;
  }
  d.rank = static_cast<int>(s.below(pq::kMaxRank + 1));
  static const std::int64_t dims[] = {1, 1, 2, 3, 4, 0, 5, 7};
  static const std::int64_t rows[] = {16, 17, 31, 33, 64, 65, 130, 257};
  for (int i = 0; i < d.rank; ++i) d[i] = s.pick(dims);
  if (d.rank > 0 && s.chance(50)) d[d.rank - 1] = s.pick(rows);
  while (checked_numel(d) > 4096) d[static_cast<int>(s.below(static_cast<std::uint64_t>(d.rank)))] = 1;
  return d;
}


template <class ValueFn>
Tensor param_tensor(Source& s, pq::DType x_dtype, const pq::Dims& shape, ValueFn value) {
  pq::DType dtype = x_dtype;
  if (s.chance(25)) dtype = s.pick(kAllTypes);
  const bool per_tensor = s.chance(60);
  const double v0 = value();
  const bool bits = s.chance(3);
  return make_tensor(s, dtype, shape, true, [&](void* buf, std::int64_t i) {
    if (bits) {
      store_bits(buf, dtype, i, s.u64());
    } else {
      store(buf, dtype, i, per_tensor ? v0 : value());
    }
  });
}

Case draw_case(Source& s) {
  Case c;
  c.op = static_cast<Op>(s.below(5));
  c.mode = static_cast<pq::RoundingMode>(s.below(pq::kNumRoundingModes));
  const pq::DType xd = s.pick(kFloatTypes);
  const pq::Dims out = draw_out_shape(s);
  const bool huge = checked_numel(out) > (std::int64_t{1} << 40);
  // x
  {
    pq::Dims xs = (huge || s.chance(10)) ? pq::Dims{} : out;
    if (!huge && s.chance(30)) xs = operand_shape(s, out, false);
    const bool bits = s.chance(10);
    c.in.push_back(make_tensor(s, xd, xs, true, [&](void* buf, std::int64_t i) {
      if (bits) {
        store_bits(buf, xd, i, s.u64());
      } else {
        store(buf, xd, i, data_value(s));
      }
    }));
  }
  if (huge) {  // every operand must stay tiny: make x a zero-stride view of one element
    Tensor& x = c.in[0];
    x.shape = out;
    x.strides = pq::Dims{};
    x.strides.rank = out.rank;
    x.offset = 0;
  }
  auto shape = [&](bool single = false) { return huge ? pq::Dims{} : operand_shape(s, out, single); };
  const double scales[] = {1.0, 0.5, 0.25, 2.0, 0.37, 3.0, 1e-3, 1e3, 0.0, -0.0, -0.5, kNaN, kInf, -kInf, 1e-40,
                           5e-324, 6e-8, 1e38, 1e300, 0.1};
  const double zeropts[] = {0.0, 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -3.25, 128.0, kNaN, kInf, 1e30};
  // Absurd widths too: 2^40 and -2^40 (a Python int width reaches the core as int64), 2^63,
  // -inf, 1e300 (inf in float32), each also as raw bits of every dtype (param_tensor).
  const double bitwidths[] = {1,    2,   3,   4,    8,    16,   2.5,           0.5,            24,     25,    31,
                              32,   53,  64,  0,    -1,   kNaN, kInf,          -kInf,          1e300,  1023,  1024,
                              65,   128, 200, -128, 1e18, 9.3e18, 1099511627776.0, -1099511627776.0};
  auto pick_from = [&](const auto& arr) { return [&s, &arr] { return s.pick(arr); }; };
  switch (c.op) {
    case Op::kIntQuant:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(zeropts)));
      c.in.push_back(param_tensor(s, xd, s.chance(97) ? shape(true) : shape(), pick_from(bitwidths)));
      c.iq = {s.chance(50), s.chance(50), c.mode};
      break;
    case Op::kBipolar:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      break;
    case Op::kTruncV1:
    case Op::kTruncV2:
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(zeropts)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(bitwidths)));
      if (c.op == Op::kTruncV2) c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(bitwidths)));
      c.t2 = {s.chance(50), s.chance(50), c.mode};
      break;
    case Op::kFloatQuant: {
      static const double ebits[] = {1, 2, 3, 4, 5, 8, 2.5, 0, 11, -1, kNaN, 1e4, kInf, -kInf, 1099511627776.0, 1e300};
      static const double mbits[] = {0, 1, 2, 3, 4, 7, 10, 23, 2.5, 52, -1, kNaN, 1e9, 1099511627776.0};
      static const double biases[] = {0, 1, 3, 7, 15, 127, -3, 2.5, 1e3, kNaN, -1e3, kInf, -kInf, 1e300, -1099511627776.0};
      static const double maxvals[] = {448, 57344, 1, 0, 0.5, 240, 3e38, kInf, kNaN, -1, 1e-40, 6, -kInf, 1e300, -0.0};
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(scales)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(ebits)));
      c.in.push_back(param_tensor(s, xd, s.chance(97) ? shape(true) : shape(), pick_from(mbits)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(biases)));
      c.in.push_back(param_tensor(s, xd, shape(), pick_from(maxvals)));
      c.fq.has_inf = s.chance(30);
      c.fq.has_nan = s.chance(50);
      c.fq.has_subnormal = s.chance(50);
      c.fq.saturation = s.chance(70);
      c.fq.rounding_mode = c.mode;
      break;
    }
  }
  if (s.chance(15)) c.weak = static_cast<unsigned>(s.u64() & 0x3f);
  return c;
}

pq::TensorSpec spec_of(Case& c) {
  auto v = [&](int i) { return c.operand(c.in, i); };
  switch (c.op) {
    case Op::kIntQuant: return qx::int_quant_spec(v(0), v(1), v(2), v(3), c.iq);
    case Op::kBipolar: return qx::bipolar_quant_spec(v(0), v(1));
    case Op::kTruncV1: return qx::trunc_spec(v(0), v(1), v(2), v(3), v(4));
    case Op::kTruncV2: return qx::trunc_v2_spec(v(0), v(1), v(2), v(3), v(4), v(5));
    case Op::kFloatQuant: return qx::float_quant_spec(v(0), v(1), v(2), v(3), v(4), v(5), c.fq);
  }
  std::abort();
}

void run_op(Case& c, std::vector<Tensor>& in, const pq::MutableTensorView& out) {
  auto v = [&](int i) { return c.operand(in, i); };
  switch (c.op) {
    case Op::kIntQuant: qx::int_quant(v(0), v(1), v(2), v(3), c.iq, out); return;
    case Op::kBipolar: qx::bipolar_quant(v(0), v(1), out); return;
    case Op::kTruncV1: qx::trunc(v(0), v(1), v(2), v(3), v(4), c.mode, out); return;
    case Op::kTruncV2: qx::trunc_v2(v(0), v(1), v(2), v(3), v(4), v(5), c.t2, out); return;
    case Op::kFloatQuant: qx::float_quant(v(0), v(1), v(2), v(3), v(4), v(5), c.fq, out); return;
  }
}

// ---- the run ----------------------------------------------------------------------------------

void run_case(Source& s, Stats& st) {
  Case c = draw_case(s);
  ++st.cases;
  ++st.per_op[static_cast<int>(c.op)];
  // The spec must agree on every kernel set (it does not depend on one, but check anyway).
  std::optional<pq::TensorSpec> spec;
  std::string error;
  try {
    spec = spec_of(c);
  } catch (const pq::Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    fail(c.describe(), std::string("the spec threw a non-polyquant exception: ") + e.what());
  }
  if (!spec) {
    ++st.rejected;
    return;
  }
  const std::int64_t n = checked_numel(spec->shape);
  if (n > (std::int64_t{1} << 22)) {
    ++st.rejected;  // accepted a huge broadcast: the spec is all we can check without the memory
    return;
  }
  const bool strided_out = s.chance(20);
  const bool check_layout = s.chance(50);
  std::optional<Tensor> reference;
  std::string reference_error;
  for (const std::string& set : g_sets) {
    select_set(set);
    Tensor out = output_for(*spec, strided_out);
    std::string err;
    try {
      run_op(c, c.in, out.mutable_view());
    } catch (const pq::Error& e) {
      err = e.what();
    } catch (const std::exception& e) {
      fail(c.describe(), "kernel set " + set + " threw a non-polyquant exception: " + e.what());
    }
    ++st.executions;
    if (!reference && reference_error.empty()) {  // the first set (scalar) is the reference
      if (err.empty()) {
        reference = std::move(out);
      } else {
        reference_error = err;
      }
      continue;
    }
    if (!reference_error.empty() || !err.empty()) {
      if (err != reference_error) {
        fail(c.describe(), "kernel set " + set + " error '" + err + "' differs from the scalar set's '" + reference_error + "'");
      }
      continue;
    }
    compare(c.describe(), out, *reference, "kernel set " + set + " vs scalar", st);
  }
  if (check_layout && reference) {
    std::vector<Tensor> copies;
    for (const Tensor& t : c.in) copies.push_back(contiguous_copy(t));
    for (const std::string& set : g_sets) {
      select_set(set);
      Tensor out = output_for(*spec, false);
      try {
        run_op(c, copies, out.mutable_view());
      } catch (const std::exception& e) {
        fail(c.describe(), "contiguous copies on kernel set " + set + " threw: " + e.what());
      }
      ++st.executions;
      compare(c.describe(), out, *reference, "contiguous copies on kernel set " + set + " vs the strided inputs on scalar", st);
    }
  }
  select_set(g_sets.back());
}


// The deterministic driver (or libFuzzer) over run_case.
Driver make_driver() {
  Driver d;
  d.name = "polyquant_fuzz_qonnx";
  d.op_names.assign(std::begin(kOpNames), std::end(kOpNames));
  d.run_case = run_case;
  d.extra_flag = [](const std::string& flag) {
    if (flag != "--no-overflow-shapes") return false;
    g_overflow_shapes = false;
    return true;
  };
  d.extra_usage = " [--no-overflow-shapes]";
  return d;
}

}  // namespace

POLYQUANT_FUZZ_ENTRY_POINT(make_driver)
