// Fuzz harness of AIMET's affine ops (<polyquant/aimet.h>): quantize, quantize_dequantize (no-grad
// shortcut and training path), dequantize and their gradients, over drawn shapes, parameter
// layouts (one value, one axis, several axes, blockwise with -1 entries, occasionally invalid),
// grids, offsets, x dtypes (float16, bfloat16, float32, float64) with any bit pattern, strided /
// reversed / zero-stride views and reversed outputs. Every kernel set and one thread must equal
// the scalar set on contiguous copies (NaN payloads aside), errors must agree, and a rejected call
// must leave its output untouched. "quantizer_params" feeds the quantizer modules' parameter
// arithmetic (<polyquant/aimet_quantizer.h>) any int64 grid, any float bits and LPBQ shapes,
// groupings and bitwidths: a grid is refused exactly when its int64 arithmetic would overflow, and
// nothing else may go wrong. Runs under ASan + UBSan in CI (scripts/fuzz.sh).
#include "fuzz_support.h"
#include "polyquant/aimet_quantizer.h"

namespace {

using namespace polyquant::fuzz;
namespace aimet = polyquant::aimet;

const char* const kOpNames[] = {"quantize", "qdq_no_grad", "qdq_training", "dequantize", "backward", "quantizer_params"};
const pq::DType kXTypes[] = {pq::DType::kFloat32, pq::DType::kFloat16, pq::DType::kBFloat16, pq::DType::kFloat64};
const aimet::Grid kGrids[] = {{0, 255}, {-128, 127}, {0, 15}, {-8, 7}, {0, 1}, {-1, 0}, {0, 65535}, {-32768, 32767},
                              {-(1 << 20), (1 << 20) - 1}, {0, (std::int64_t{1} << 32) - 1}, {3, 3}, {5, 4}};

// A value (or, now and then, any bit pattern) of `dtype` at element i.
void fill_value(Source& s, void* base, pq::DType dtype, std::int64_t i, double value) {
  if (s.chance(8)) {
    store_bits(base, dtype, i, s.u64());
  } else if (dtype == pq::DType::kBFloat16) {
    const float f = static_cast<float>(value);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    store_bits(base, dtype, i, u >> 16);  // bfloat16 by truncation: any pattern is a legal input
  } else {
    store(base, dtype, i, value);
  }
}

struct Case {
  int op = 0;
  aimet::AffineOp backward_op = aimet::AffineOp::kQuantizeDequantize;
  Tensor x, scale, offset, grad;
  aimet::Grid grid;
  std::vector<std::int64_t> block;

  std::string describe() const {
    std::string b;
    for (auto v : block) b += std::to_string(v) + " ";
    return std::string(kOpNames[op]) + (op == 4 ? " op " + std::to_string(static_cast<int>(backward_op)) : "") + ": x " +
           pq::dtype_name(x.dtype) + x.shape.str() + " scale " + pq::dtype_name(scale.dtype) + scale.shape.str() +
           " offset " + offset.shape.str() + " grid [" + std::to_string(grid.qmin) + ", " + std::to_string(grid.qmax) +
           "] block (" + b + ")";
  }
};

pq::Dims draw_shape(Source& s) {
  static const std::int64_t dims[] = {0, 1, 1, 2, 3, 4, 5, 8, 16, 17, 33};
  pq::Dims d;
  d.rank = static_cast<int>(s.below(5));
  for (int i = 0; i < d.rank; ++i) d[i] = s.pick(dims);
  if (checked_numel(d) > 4096) d.rank = 1;
  return d;
}

void draw_params(Source& s, Case& c, pq::Dims& sshape, pq::Dims& oshape) {
  const pq::Dims& xs = c.x.shape;
  const int kind = static_cast<int>(s.below(xs.rank ? 100 : 40));
  sshape.rank = 0;
  if (kind < 25) {  // one value
    sshape.rank = static_cast<int>(std::min<std::uint64_t>(s.below(3), static_cast<std::uint64_t>(xs.rank)));
    for (int i = 0; i < sshape.rank; ++i) sshape[i] = 1;
  } else if (kind < 40 && xs.rank) {  // invalid or arbitrary
    sshape.rank = static_cast<int>(s.below(static_cast<std::uint64_t>(xs.rank) + 2));
    for (int i = 0; i < sshape.rank; ++i) sshape[i] = static_cast<std::int64_t>(s.below(5));
  } else if (kind < 70 && xs.rank) {  // axes
    sshape.rank = 1 + static_cast<int>(s.below(static_cast<std::uint64_t>(xs.rank)));
    for (int i = 0; i < sshape.rank; ++i) sshape[i] = s.chance(50) ? xs[xs.rank - sshape.rank + i] : 1;
  } else if (xs.rank) {  // blocks
    sshape.rank = 1 + static_cast<int>(s.below(static_cast<std::uint64_t>(xs.rank)));
    for (int i = 0; i < sshape.rank; ++i) {
      const std::int64_t d = xs[xs.rank - sshape.rank + i];
      std::vector<std::int64_t> divisors;
      for (std::int64_t b = 1; b <= std::max<std::int64_t>(d, 1); ++b) {
        if (d % b == 0) divisors.push_back(b);
      }
      const std::int64_t b = d == 0 ? 1 : divisors[s.below(divisors.size())];
      sshape[i] = d == 0 ? 1 : d / b;
      c.block.push_back(s.chance(30) ? -1 : b);
      if (s.chance(3)) c.block.back() += 1;  // does not divide
    }
  }
  oshape = sshape;
  if (s.chance(25)) oshape.rank = 0;
  if (s.chance(3) && oshape.rank) oshape[0] += 1;  // incompatible
}

struct Outcome {
  bool ok = true;
  std::string error;
};

Outcome execute(Case& c, const pq::TensorView& x, const pq::TensorView& scale, const pq::TensorView& offset,
                const pq::TensorView& grad, Tensor& out, Tensor& gs, Tensor& go) {
  const aimet::AffineArgs args{c.grid, c.block};
  try {
    switch (c.op) {
      case 0: aimet::quantize(x, scale, offset, args, out.mutable_view()); break;
      case 1: aimet::quantize_dequantize(x, scale, offset, args, aimet::QdqPath::kNoGrad, out.mutable_view()); break;
      case 2: aimet::quantize_dequantize(x, scale, offset, args, aimet::QdqPath::kTraining, out.mutable_view()); break;
      case 3: aimet::dequantize(x, scale, offset, c.block, out.mutable_view()); break;
      default:
        aimet::affine_backward(c.backward_op, grad, x, scale, offset, args, out.mutable_view(), gs.mutable_view(),
                               go.mutable_view());
        break;
    }
  } catch (const pq::Error& e) {
    return {false, e.what()};
  }
  return {};
}

Tensor plain_like(const pq::Dims& shape, pq::DType dtype, bool reversed) { return output_for({dtype, shape}, reversed); }

// The quantizer modules' parameter arithmetic over any grid and any float bits.
void run_quantizer_case(Source& s, Stats& st) {
  static const std::int64_t edges[] = {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::min() + 1,
                                       -(std::int64_t{1} << 62), -128, -1, 0, 1, 127, 255, (std::int64_t{1} << 62) - 1,
                                       std::numeric_limits<std::int64_t>::max() - 1, std::numeric_limits<std::int64_t>::max()};
  const auto draw = [&] { return s.chance(70) ? s.pick(edges) : static_cast<std::int64_t>(s.u64()); };
  const aimet::Grid g{draw(), draw()};
  const __int128 steps = static_cast<__int128>(g.qmax) - g.qmin, sum = static_cast<__int128>(g.qmax) + g.qmin;
  const bool grid_ok = g.qmin <= g.qmax && g.qmin != std::numeric_limits<std::int64_t>::min() &&
                       steps <= std::numeric_limits<std::int64_t>::max() && sum >= std::numeric_limits<std::int64_t>::min() &&
                       sum <= std::numeric_limits<std::int64_t>::max();
  const std::size_t n = s.below(9);
  std::vector<float> a(n), b(n), out1(n), out2(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bits = s.u64();
    std::uint32_t u = static_cast<std::uint32_t>(bits), v = static_cast<std::uint32_t>(bits >> 32);
    std::memcpy(&a[i], &u, 4);
    std::memcpy(&b[i], &v, 4);
  }
  const bool symmetric = s.chance(50);
  const std::string what = "quantizer_params grid [" + std::to_string(g.qmin) + ", " + std::to_string(g.qmax) + "]";
  const auto expect = [&](auto&& call, const char* name) {
    bool ok = true;
    try {
      call();
    } catch (const pq::Error& e) {
      ok = false;
      if (grid_ok) fail(what, std::string(name) + " refused a valid grid: " + e.what());
    }
    if (ok && !grid_ok) fail(what, std::string(name) + " accepted a grid whose int64 arithmetic overflows");
  };
  expect([&] { aimet::quantizer_scale(a, b, g, out1); }, "quantizer_scale");
  expect([&] { aimet::quantizer_offset(a, b, g, symmetric, out1); }, "quantizer_offset");
  expect([&] { aimet::quantizer_range(a, b, g, out1, out2); }, "quantizer_range");
  expect([&] { aimet::scale_offset_from_range(a, b, g, symmetric, out1, out2); }, "scale_offset_from_range");
  expect([&] { aimet::range_for_scale_offset(a, b, g, symmetric, out1, out2); }, "range_for_scale_offset");
  expect([&] { (void)aimet::symmetric_offset(g); }, "symmetric_offset");
  // LPBQ: a drawn shape, grouping (-1, 0, divisors and non-divisors) and bitwidths
  std::vector<std::int64_t> shape(1 + s.below(3)), grouping(shape.size());
  std::int64_t numel = 1, n_pc = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    shape[d] = static_cast<std::int64_t>(s.below(5));
    static const std::int64_t groups[] = {-1, 0, 1, 2, 3, 4};
    grouping[d] = s.chance(5) ? static_cast<std::int64_t>(s.u64()) : s.pick(groups);
    numel *= shape[d];
  }
  std::vector<std::int64_t> pc_shape;
  try {
    pc_shape = aimet::lpbq_channel_shape(shape, grouping);
  } catch (const pq::Error&) {
    ++st.cases;
    return;
  }
  for (const std::int64_t d : pc_shape) n_pc *= d;
  static const std::int64_t bws[] = {1, 4, 8, 16, 31, 62, 63, 64, 0, -1};
  const std::int64_t bw = s.chance(10) ? static_cast<std::int64_t>(s.u64()) : s.pick(bws);
  const std::int64_t dbw = s.chance(10) ? static_cast<std::int64_t>(s.u64()) : s.pick(bws);
  std::vector<float> raw(static_cast<std::size_t>(numel)), pc(static_cast<std::size_t>(n_pc)), sc(raw.size()),
      ints(raw.size());
  for (float& r : raw) {
    const std::uint32_t u = static_cast<std::uint32_t>(s.u64());
    std::memcpy(&r, &u, 4);
  }
  try {
    aimet::lpbq_scales(raw, shape, grouping, bw, dbw, pc, sc, ints);
    if (bw < 1 || bw > 63 || dbw < bw || dbw > 63) fail(what, "lpbq_scales accepted bitwidths outside [1, 63]");
  } catch (const pq::Error&) {
  }
  ++st.cases;
}

void run_case(Source& s, Stats& st) {
  Case c;
  c.op = static_cast<int>(s.below(6));
  if (c.op == 5) {
    st.per_op[5]++;
    run_quantizer_case(s, st);
    return;
  }
  c.backward_op = static_cast<aimet::AffineOp>(s.below(4));
  c.grid = s.pick(kGrids);
  const pq::DType xt = s.pick(kXTypes);
  const pq::Dims xs = draw_shape(s);
  c.x = make_tensor(s, xt, xs, true, [&](void* base, std::int64_t i) { fill_value(s, base, xt, i, data_value(s)); });
  pq::Dims sshape, oshape;
  draw_params(s, c, sshape, oshape);
  static const double scales[] = {0.05, 0.1, 1.0 / 255, 3.0, 1e-30, 0.0, -0.25, 0.0078125, 1e30, 7e-46};
  static const double offsets[] = {0, -3, -128, 128, -0.5, 2.5, 1e9, -300, 7};
  const pq::DType st_dtype = s.chance(80) ? pq::DType::kFloat32 : s.pick(kXTypes);
  c.scale = make_tensor(s, st_dtype, sshape, true, [&](void* base, std::int64_t i) {
    fill_value(s, base, st_dtype, i, s.chance(90) ? s.pick(scales) : data_value(s));
  });
  c.offset = make_tensor(s, pq::DType::kFloat32, oshape, true, [&](void* base, std::int64_t i) {
    fill_value(s, base, pq::DType::kFloat32, i, s.chance(90) ? s.pick(offsets) : data_value(s));
  });
  c.grad = make_tensor(s, xt, xs, true, [&](void* base, std::int64_t i) { fill_value(s, base, xt, i, data_value(s)); });
  st.per_op[static_cast<std::size_t>(c.op)]++;
  const std::string what = c.describe();

  // The reference: the scalar set on contiguous copies into contiguous outputs.
  Tensor xc = contiguous_copy(c.x), sc = contiguous_copy(c.scale), oc = contiguous_copy(c.offset), gc = contiguous_copy(c.grad);
  select_set(g_sets.front());
  Tensor want = plain_like(xs, xt, false), want_s = plain_like(sshape, st_dtype, false),
         want_o = plain_like(oshape, pq::DType::kFloat32, false);
  const Outcome ref = execute(c, xc.view(), sc.view(), oc.view(), gc.view(), want, want_s, want_o);
  if (!ref.ok) ++st.rejected;

  auto check = [&](const Outcome& got, Tensor& out, Tensor& gs, Tensor& go, const std::string& how) {
    if (got.ok != ref.ok || got.error != ref.error) fail(what, how + ": outcome '" + got.error + "' vs '" + ref.error + "'");
    if (!ref.ok) {
      check_untouched(what, out, 0x5A, true, how + ": a rejected call wrote its output");
      return;
    }
    compare(what, out, want, how + " output", st);
    if (c.op == 4) {
      compare(what, gs, want_s, how + " grad_scale", st);
      compare(what, go, want_o, how + " grad_offset", st);
    }
  };
  // Every kernel set on the drawn layouts, into reversed outputs; then one thread.
  for (std::size_t k = 0; k < g_sets.size(); ++k) {
    select_set(g_sets[k]);
    Tensor out = plain_like(xs, xt, true), gs = plain_like(sshape, st_dtype, true), go = plain_like(oshape, pq::DType::kFloat32, true);
    check(execute(c, c.x.view(), c.scale.view(), c.offset.view(), c.grad.view(), out, gs, go), out, gs, go,
          "kernel set " + g_sets[k]);
    ++st.executions;
  }
  if (s.chance(20)) {
    pq::set_num_threads(1);
    Tensor out = plain_like(xs, xt, false), gs = plain_like(sshape, st_dtype, false), go = plain_like(oshape, pq::DType::kFloat32, false);
    const Outcome got = execute(c, c.x.view(), c.scale.view(), c.offset.view(), c.grad.view(), out, gs, go);
    pq::set_num_threads(256);
    check(got, out, gs, go, "one thread");
  }
  ++st.cases;
}

// The deterministic driver (or libFuzzer) over run_case.
Driver make_driver() {
  Driver d;
  d.name = "polyquant_fuzz_aimet";
  d.op_names.assign(std::begin(kOpNames), std::end(kOpNames));
  d.run_case = run_case;

  return d;
}

}  // namespace

POLYQUANT_FUZZ_ENTRY_POINT(make_driver)
