// Fuzz harness of AIMET's encoding analyzers (<polyquant/aimet_analyzers.h>): MinMax, Percentile,
// SQNR and TfEnhanced over drawn encoding shapes (per tensor, per channel, invalid), block sizes
// (with -1 entries, occasionally invalid), options (bin counts, percentiles, SQNR candidate counts
// and lanes, in and out of range), batches (empty, any dtype, any bit pattern, strided / reversed /
// zero-stride views; rarely 2^17+ values, enough to be split across threads) and states (round
// trips, and states with sizes or bytes garbled). Nothing may crash or throw anything but
// polyquant::Error; every kernel set and one thread must give the scalar set's results bit for bit
// (encodings, states and error messages alike). Runs under ASan + UBSan in CI (scripts/fuzz.sh).
// Against the scalar model, and for merges of split batches: tests/cpp/aimet/test_analyzers.cc.
#include <memory>

#include "fuzz_support.h"
#include "polyquant/aimet_analyzers.h"

namespace {

using namespace polyquant::fuzz;
namespace aimet = polyquant::aimet;

const char* const kOpNames[] = {"minmax", "percentile", "sqnr", "tfenhanced"};
const pq::DType kXTypes[] = {pq::DType::kFloat32, pq::DType::kFloat16, pq::DType::kBFloat16, pq::DType::kFloat64};

struct Case {
  int op = 0;
  aimet::AnalyzerShape shape;
  std::int64_t num_bins = 64;
  double percentile = 99;
  aimet::SqnrOptions sqnr;
  std::vector<Tensor> batches;
  std::vector<double> steps;
  int garble = 0;  // 0: round trip only; 1: sizes changed; 2: random bytes in the values
  std::uint64_t garble_seed = 0;

  std::string describe() const {
    std::string b = "shape " + shape.shape.str();
    if (shape.block_size) {
      b += " block (";
      for (auto v : *shape.block_size) b += std::to_string(v) + " ";
      b += ")";
    }
    b += " bins " + std::to_string(num_bins);
    if (op == 1) b += " p " + std::to_string(percentile);
    if (op == 2)
      b += " cand " + std::to_string(sqnr.asymmetric_delta_candidates) + "/" + std::to_string(sqnr.symmetric_delta_candidates) + "/" +
           std::to_string(sqnr.offset_candidates) + " par " + std::to_string(sqnr.max_parallelism) + " lanes " +
           std::to_string(sqnr.torch_sum_lanes);
    for (const Tensor& x : batches) b += " | x " + std::string(pq::dtype_name(x.dtype)) + x.shape.str();
    return std::string(kOpNames[op]) + ": " + b + " garble " + std::to_string(garble);
  }
};

pq::Dims draw_dims(Source& s, int max_rank) {
  static const std::int64_t dims[] = {0, 1, 1, 2, 3, 4, 5, 8, 16, 17, 33, 64};
  pq::Dims d;
  d.rank = static_cast<int>(s.below(static_cast<std::uint64_t>(max_rank) + 1));
  for (int i = 0; i < d.rank; ++i) d[i] = s.pick(dims);
  if (checked_numel(d) > 8192) d.rank = 1;
  return d;
}

// The encoding shape: per tensor, trailing dimensions of x (kept or 1), or anything (invalid too).
void draw_shape(Source& s, Case& c, const pq::Dims& xs) {
  pq::Dims& sh = c.shape.shape;
  const int kind = static_cast<int>(s.below(100));
  if (kind < 30 || xs.rank == 0) {
    sh.rank = 1;
    sh[0] = 1;
  } else if (kind < 70) {
    sh.rank = 1 + static_cast<int>(s.below(static_cast<std::uint64_t>(xs.rank)));
    for (int i = 0; i < sh.rank; ++i) sh[i] = s.chance(60) ? xs[xs.rank - sh.rank + i] : 1;
  } else {
    sh.rank = static_cast<int>(s.below(4));
    for (int i = 0; i < sh.rank; ++i) sh[i] = static_cast<std::int64_t>(s.below(6)) - (s.chance(10) ? 2 : 0);
  }
  if (s.chance(25) && sh.rank > 0) {
    std::vector<std::int64_t> block(static_cast<std::size_t>(1 + s.below(static_cast<std::uint64_t>(sh.rank))));
    for (auto& b : block) b = s.chance(40) ? -1 : static_cast<std::int64_t>(s.below(5)) - (s.chance(5) ? 3 : 0);
    c.shape.block_size = block;
  }
}

Tensor draw_batch(Source& s, const pq::Dims& xs, pq::DType xt) {
  return make_tensor(s, xt, xs, true, [&](void* base, std::int64_t i) {
    if (s.chance(5)) store_bits(base, xt, i, s.u64());
    else if (xt == pq::DType::kBFloat16) {
      const float f = static_cast<float>(data_value(s));
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      store_bits(base, xt, i, u >> 16);
    } else {
      store(base, xt, i, data_value(s));
    }
  });
}

std::unique_ptr<aimet::HistogramEncodingAnalyzer> make_histogram(const Case& c) {
  if (c.op == 1) return std::make_unique<aimet::PercentileEncodingAnalyzer>(c.shape, c.num_bins, c.percentile);
  if (c.op == 2) return std::make_unique<aimet::SqnrEncodingAnalyzer>(c.shape, c.sqnr);
  return std::make_unique<aimet::SqnrEncodingAnalyzer>(c.shape, aimet::tf_enhanced_options(c.sqnr.torch_sum_lanes));
}

template <class T>
void put(std::string& log, const std::vector<T>& v) {
  log.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  log += ';';
}

void put_range(std::string& log, const aimet::EncodingRange& r) {
  log += pq::dtype_name(r.dtype);
  put(log, r.min);
  put(log, r.max);
}

template <class F>
void attempt(std::string& log, F&& f) {
  try {
    f();
    log += "ok;";
  } catch (const pq::Error& e) {
    log += std::string("error: ") + e.what() + ";";
  }
}

// Garbles a copy of a state: sizes changed, or values replaced by random bytes. set_state must
// reject a size mismatch; values it accepts must not make compute_encodings crash.
template <class V>
void garble_vector(Source& g, V& v, int how) {
  using T = typename V::value_type;
  if (how == 1) {
    v.resize(static_cast<std::size_t>(g.below(v.size() + 3)));
  } else {
    for (auto& x : v)
      if (g.chance(30)) {
        const std::uint64_t bits = g.u64();
        std::memcpy(&x, &bits, sizeof(T));
      }
  }
}

// The whole sequence of one case on the current kernel set; its results and errors as bytes.
std::string execute(const Case& c) {
  std::string log;
  auto garble_state = [&](auto state) {
    Source g;
    g.state = c.garble_seed;
    const int which = static_cast<int>(g.below(3));
    if (which == 0) garble_vector(g, state.min, c.garble);
    else if (which == 1) garble_vector(g, state.max, c.garble);
    else if constexpr (requires { state.counts; }) garble_vector(g, state.counts, c.garble);
    return state;
  };
  if (c.op == 0) {
    std::unique_ptr<aimet::MinMaxEncodingAnalyzer> a;
    attempt(log, [&] { a = std::make_unique<aimet::MinMaxEncodingAnalyzer>(c.shape); });
    if (!a) return log;
    for (const Tensor& x : c.batches) attempt(log, [&] { a->update_stats(const_cast<Tensor&>(x).view()); });
    for (double n : c.steps) {
      attempt(log, [&] { put_range(log, a->compute_encodings(n, n > 100)); });
      attempt(log, [&] { put_range(log, a->compute_dynamic_encodings(const_cast<Tensor&>(c.batches[0]).view(), n, n < 100)); });
    }
    const auto state = a->state();
    put(log, state.min);
    put(log, state.max);
    aimet::MinMaxEncodingAnalyzer b(c.shape);
    attempt(log, [&] { b.set_state(c.garble ? garble_state(state) : state); });
    attempt(log, [&] { b.merge(*a); });
    attempt(log, [&] { a->merge(*a); });
    for (double n : c.steps) attempt(log, [&] { put_range(log, b.compute_encodings(n, false)); });
    if (!c.garble && state.min.size()) {  // the round trip is exact
      aimet::MinMaxEncodingAnalyzer r(c.shape);
      r.set_state(state);
      for (double n : c.steps) {
        std::string p, q;
        attempt(p, [&] { put_range(p, a->compute_encodings(n, true)); });
        attempt(q, [&] { put_range(q, r.compute_encodings(n, true)); });
        if (p != q) fail(c.describe(), "MinMax state round trip changed the encodings");
      }
    }
    return log;
  }
  std::unique_ptr<aimet::HistogramEncodingAnalyzer> a;
  attempt(log, [&] { a = make_histogram(c); });
  if (!a) return log;
  for (const Tensor& x : c.batches) attempt(log, [&] { a->update_stats(const_cast<Tensor&>(x).view()); });
  for (double n : c.steps) {
    attempt(log, [&] { put_range(log, a->compute_encodings(n, n > 100)); });
    attempt(log, [&] { put_range(log, a->compute_dynamic_encodings(const_cast<Tensor&>(c.batches[0]).view(), n, n < 100)); });
  }
  const aimet::HistogramState state = a->state();
  put(log, state.counts);
  put(log, state.edges);
  put(log, state.min);
  put(log, state.max);
  if (!state.empty()) {  // the round trip is exact
    std::unique_ptr<aimet::HistogramEncodingAnalyzer> r = make_histogram(c);
    r->set_state(state);
    for (double n : c.steps) {
      std::string p, q;
      attempt(p, [&] { put_range(p, a->compute_encodings(n, n > 100)); });
      attempt(q, [&] { put_range(q, r->compute_encodings(n, n > 100)); });
      if (p != q) fail(c.describe(), "histogram state round trip changed the encodings");
    }
  }
  std::unique_ptr<aimet::HistogramEncodingAnalyzer> b = make_histogram(c);
  attempt(log, [&] { b->set_state(c.garble ? garble_state(state) : state); });
  for (double n : c.steps) attempt(log, [&] { put_range(log, b->compute_encodings(n, n > 100)); });
  attempt(log, [&] { b->merge(*a); });
  attempt(log, [&] { a->merge(*a); });
  attempt(log, [&] { b->update_stats(const_cast<Tensor&>(c.batches.back()).view()); });
  for (double n : c.steps) attempt(log, [&] { put_range(log, b->compute_encodings(n, false)); });
  return log;
}

// A batch of 2^17 values or more, rank 1 or 2: the analyzers split work across threads only from
// there (histogram slices, histograms in parallel), so without it the thread comparison below
// compares one-threaded runs.
pq::Dims draw_large_dims(Source& s) {
  static const std::int64_t rows[] = {1, 2, 3, 7};
  const std::int64_t n = (std::int64_t{1} << 17) + static_cast<std::int64_t>(s.below(4099));
  const std::int64_t r = s.pick(rows);
  return r == 1 ? pq::Dims{n} : pq::Dims{r, n / r + 1};
}

void run_case(Source& s, Stats& st) {
  Case c;
  c.op = static_cast<int>(s.below(std::size(kOpNames)));
  const pq::DType xt = s.pick(kXTypes);
  const bool large = s.chance(2);
  const pq::Dims xs = large ? draw_large_dims(s) : draw_dims(s, 4);
  if (large) c.shape.shape = xs.rank == 2 && s.chance(50) ? pq::Dims{xs[0], 1} : pq::Dims{1};  // few histograms
  else draw_shape(s, c, xs);
  static const std::int64_t bins[] = {1, 2, 3, 7, 16, 64, 64, 512, 0, -1};
  static const std::int64_t deltas[] = {2, 3, 5, 17, 101, 1, 0, -1};
  static const std::int64_t offsets[] = {1, 3, 4, 21, 2, 0, -5};
  static const std::int64_t par[] = {1, 3, 64, 0};
  static const int lanes[] = {8, 16, 8, 4};
  static const double percentiles[] = {50, 90, 99, 99.9, 100, 49, 101};
  c.num_bins = s.chance(95) ? s.pick(bins) : static_cast<std::int64_t>(s.u64());
  c.percentile = s.pick(percentiles);
  c.sqnr.num_bins = c.num_bins;
  c.sqnr.asymmetric_delta_candidates = s.pick(deltas);
  c.sqnr.symmetric_delta_candidates = s.pick(deltas);
  c.sqnr.offset_candidates = s.pick(offsets);
  c.sqnr.max_parallelism = s.pick(par);
  c.sqnr.gamma = s.chance(80) ? 3.0 : 1.0;
  c.sqnr.torch_sum_lanes = s.pick(lanes);
  if (s.chance(20)) c.sqnr.histogram_growth_limit = s.chance(50) ? 3.0 : 0.5;
  const int nb = 1 + static_cast<int>(s.below(3));
  for (int i = 0; i < nb; ++i) c.batches.push_back(draw_batch(s, s.chance(80) ? xs : draw_dims(s, 4), xt));
  static const double steps[] = {255, 15, 1, 3, 254, 65535, 0, -1};
  const int ns = 1 + static_cast<int>(s.below(2));
  for (int i = 0; i < ns; ++i) c.steps.push_back(s.pick(steps));
  c.garble = s.chance(30) ? 1 + static_cast<int>(s.below(2)) : 0;
  c.garble_seed = s.u64();
  st.per_op[static_cast<std::size_t>(c.op)]++;
  const std::string what = c.describe();

  select_set(g_sets.front());
  const std::string want = execute(c);
  if (want.find("error") != std::string::npos) ++st.rejected;
  for (std::size_t k = 1; k < g_sets.size(); ++k) {
    select_set(g_sets[k]);
    if (execute(c) != want) fail(what, "kernel set " + g_sets[k] + " differs from " + g_sets.front());
    ++st.executions;
  }
  if (s.chance(20) || large) {
    pq::set_num_threads(1);
    const std::string got = execute(c);
    pq::set_num_threads(256);
    if (got != want) fail(what, "one thread differs from the thread pool");
  }
  ++st.cases;
}

// The deterministic driver (or libFuzzer) over run_case.
Driver make_driver() {
  Driver d;
  d.name = "polyquant_fuzz_aimet_analyzers";
  d.op_names.assign(std::begin(kOpNames), std::end(kOpNames));
  d.run_case = run_case;

  return d;
}

}  // namespace

POLYQUANT_FUZZ_ENTRY_POINT(make_driver)
