// AIMET's encoding analyzers in C++ (polyquant/aimet_analyzers.h): option validation (issue 17:
// SQNR candidate counts of 0 / 1 crashed or gave NaN), empty batches, set_state's size checks, the
// state round trip, self-merge and concurrent use of one analyzer; the statistics (MinMax's min /
// max, the histograms' ranges, edges and counts) and the MinMax / Percentile encodings against the
// independent scalar model of analyzer_model.h; the same bits on every kernel set and thread count;
// merges and state round trips against one analyzer fed every batch.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "aimet/analyzer_model.h"
#include "polyquant/aimet_analyzers.h"
#include "polyquant/runtime.h"
#include "test_util.h"

namespace polyquant {
namespace {

using test::expect_error;
namespace aimet = polyquant::aimet;

aimet::AnalyzerShape per_tensor() {
  aimet::AnalyzerShape s;
  s.shape = Dims{1};
  return s;
}

std::vector<float> ramp(std::int64_t n, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  return v;
}

TensorView view1d(const std::vector<float>& v) {
  return TensorView(v.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(v.size())}, Dims{1});
}

TEST(AimetAnalyzers, SqnrCandidateCountsAreValidated) {
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, (std::int64_t{1} << 24) + 1}) {
    aimet::SqnrOptions o;
    o.num_bins = 64;
    o.asymmetric_delta_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"asymmetric_delta_candidates", "2 to"});
    o.asymmetric_delta_candidates = 17;
    o.symmetric_delta_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"symmetric_delta_candidates", "2 to"});
  }
  for (std::int64_t bad : {0, 2, -5}) {
    aimet::SqnrOptions o;
    o.offset_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"offset_candidates", "1 or"});
  }
  aimet::SqnrOptions o;
  o.num_bins = 64;
  o.asymmetric_delta_candidates = o.symmetric_delta_candidates = 2;
  o.offset_candidates = 1;  // only the observed offset
  aimet::SqnrEncodingAnalyzer a(per_tensor(), o);
  const auto x = ramp(100, -1, 1);
  a.update_stats(view1d(x));
  for (bool sym : {false, true}) {
    const aimet::EncodingRange r = a.compute_encodings(255, sym);
    EXPECT_TRUE(std::isfinite(r.min[0]) && std::isfinite(r.max[0]) && r.min[0] <= 0 && r.max[0] > 0) << r.min[0] << " " << r.max[0];
  }
}

TEST(AimetAnalyzers, EmptyBatchIsAValueError) {
  const std::vector<float> none;
  const TensorView empty(none.data(), DType::kFloat32, Dims{0}, Dims{1});
  aimet::MinMaxEncodingAnalyzer mm(per_tensor());
  expect_error([&] { mm.update_stats(empty); }, ErrorKind::kValue, "batch is empty");
  aimet::PercentileEncodingAnalyzer pc(per_tensor(), 16, 99);
  expect_error([&] { pc.update_stats(empty); }, ErrorKind::kValue, "batch is empty");
  expect_error([&] { pc.compute_dynamic_encodings(empty, 255, false); }, ErrorKind::kValue, "batch is empty");
  EXPECT_FALSE(pc.has_stats());
}

TEST(AimetAnalyzers, SetStateChecksSizesAndRoundTrips) {
  aimet::AnalyzerShape shape;
  shape.shape = Dims{2, 1};
  aimet::PercentileEncodingAnalyzer a(shape, 32, 99);
  std::vector<float> x(2 * 300);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * (i < 300 ? 1.0f : 3.0f);
  const TensorView v(x.data(), DType::kFloat32, Dims{2, 300}, Dims{300, 1});
  a.update_stats(v);
  const aimet::HistogramState s = a.state();
  aimet::PercentileEncodingAnalyzer b(shape, 32, 99);
  b.set_state(s);
  for (bool sym : {false, true}) {
    const auto p = a.compute_encodings(255, sym), q = b.compute_encodings(255, sym);
    EXPECT_EQ(std::memcmp(p.min.data(), q.min.data(), 16), 0);
    EXPECT_EQ(std::memcmp(p.max.data(), q.max.data(), 16), 0);
  }
  auto bad = s;
  bad.counts.pop_back();
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "histogram");
  bad = s;
  bad.edges.push_back(0);
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "bin_edges");
  bad = s;
  bad.num_bins = 31;
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "num_bins");
  bad = s;
  bad.limit_hi.clear();
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "range_limit");
  bad = s;
  bad.dtype = DType::kInt8;
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "dtype");
  aimet::MinMaxEncodingAnalyzer m(shape);
  aimet::MinMaxEncodingAnalyzer::State ms;
  ms.min = {0.0};
  ms.max = {1.0, 2.0};
  expect_error([&] { m.set_state(ms); }, ErrorKind::kValue, "min and max");
}

TEST(AimetAnalyzers, SelfMergeDoublesCountsAndConcurrentUpdatesAreSerial) {
  aimet::PercentileEncodingAnalyzer a(per_tensor(), 64, 99);
  auto x = ramp(4096, -2, 2);
  a.update_stats(view1d(x));
  const auto before = a.state();
  a.merge(a);
  const auto after = a.state();
  for (std::size_t i = 0; i < before.counts.size(); ++i) EXPECT_EQ(after.counts[i], 2 * before.counts[i]);
  // 8 threads x 8 batches of the same range: the counts add exactly whatever the order.
  aimet::PercentileEncodingAnalyzer shared(per_tensor(), 64, 99), serial(per_tensor(), 64, 99);
  shared.update_stats(view1d(x));
  serial.update_stats(view1d(x));
  for (int i = 0; i < 64; ++i) serial.update_stats(view1d(x));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 8; ++i) shared.update_stats(view1d(x));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.state().counts, serial.state().counts);
}


// ---- the scalar model (analyzer_model.h) ------------------------------------------------------------
namespace model = test::aimet_model;
using model::Batch;

aimet::AnalyzerShape geometry(Dims shape, std::optional<std::vector<std::int64_t>> block = std::nullopt) {
  aimet::AnalyzerShape s;
  s.shape = shape;
  s.block_size = std::move(block);
  return s;
}

std::string describe(const Dims& x, const aimet::AnalyzerShape& a, DType t) {
  std::string s = std::string(dtype_name(t)) + " x " + x.str() + " shape " + a.shape.str();
  if (a.block_size) {
    s += " block (";
    for (auto b : *a.block_size) s += std::to_string(b) + " ";
    s += ")";
  }
  return s;
}

double subnormal(DType t) {
  switch (t) {
    case DType::kFloat16: return std::ldexp(1.0, -20);
    case DType::kFloat64: return 1e-310;
    default: return 1e-39;  // float32 / bfloat16
  }
}

// x's values, chosen per encoding element by its index mod 6: 0: a spread around an element-specific
// centre; 1: >= 0 with +0 zeros (min +0); 2: <= 0 with -0 zeros (max -0); 3: one NaN among values
// (histograms: one +inf instead); 4: an -inf and subnormals of both signs; 5: zeros of both signs
// and positives (min a zero of either sign).
std::vector<double> element_values(const Dims& x, const aimet::AnalyzerShape& a, DType t, std::uint64_t salt, bool histogram) {
  auto rng = test::make_rng(salt);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const auto el = model::element_of(x, a);
  std::vector<double> v(el.size());
  std::vector<bool> special_done(static_cast<std::size_t>(model::numel(a.shape)), false);
  std::vector<int> size(special_done.size(), 0);
  for (std::int64_t e : el) ++size[static_cast<std::size_t>(e)];
  for (std::size_t e = 0; e < size.size(); ++e) special_done[e] = size[e] < 2;  // (a histogram needs a finite value)
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t e = el[i];
    const double centre = static_cast<double>(e % 7) - 3.0, width = 1.0 + static_cast<double>(e % 5);
    double r = centre + width * unit(rng);
    const bool first = !special_done[static_cast<std::size_t>(e)];
    switch (e % 6) {
      case 1: r = rng() % 5 == 0 ? 0.0 : std::abs(r); break;
      case 2: r = rng() % 5 == 0 ? -0.0 : -std::abs(r); break;
      case 3:
        if (first && i % 3 == 0) r = histogram ? INFINITY : NAN, special_done[static_cast<std::size_t>(e)] = true;
        break;
      case 4:
        if (first && i % 2 == 1) r = -INFINITY, special_done[static_cast<std::size_t>(e)] = true;
        else if (rng() % 4 == 0) r = (rng() % 2 ? 1 : -1) * subnormal(t);
        break;
      case 5: r = rng() % 3 == 0 ? (rng() % 2 ? 0.0 : -0.0) : std::abs(r); break;
      default: break;
    }
    // An element of one value: its histogram spans [v - 0.5, v + 0.5] and v sits on the middle edge
    // when the bin count is even; a multiple of 1/8 keeps that edge exact (the bin unambiguous).
    if (size[static_cast<std::size_t>(e)] == 1) r = std::round(r * 8) / 8;
    v[i] = r;
  }
  return v;
}

// The value of a min / max against the model: the same value (NaN: any NaN); a zero's sign only
// where the element's zeros all have one sign.
::testing::AssertionResult same_extreme(double got, double want, bool pos_zero, bool neg_zero) {
  if (std::isnan(want) ? std::isnan(got) : got == want) {
    if (want != 0 || (pos_zero && neg_zero) || std::signbit(got) == std::signbit(want)) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << (std::signbit(got) ? " (sign bit set)" : "") << ", want " << want
                                       << (std::signbit(want) ? " (sign bit set)" : "");
}

struct Geometry {
  Dims x;
  aimet::AnalyzerShape a;
};

// Per tensor, per leading and per trailing channel, a middle axis, blocks (with -1 and an
// omitted leading entry), and one value per element.
std::vector<Geometry> geometries() {
  return {
      {Dims{6, 50}, geometry(Dims{6, 1})},
      {Dims{40, 7}, geometry(Dims{7})},
      {Dims{3, 4, 10}, geometry(Dims{4, 1})},
      {Dims{3, 4, 10}, geometry(Dims{1})},
      {Dims{8, 12}, geometry(Dims{4, 3}, std::vector<std::int64_t>{2, 4})},
      {Dims{2, 6, 8}, geometry(Dims{3, 2}, std::vector<std::int64_t>{-1, 4})},
      {Dims{6, 8}, geometry(Dims{6, 2}, std::vector<std::int64_t>{4})},
      {Dims{5}, geometry(Dims{5})},
  };
}

const DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64};

TEST(AimetAnalyzers, MinMaxStatisticsMatchScalarModel) {
  std::uint64_t salt = 0;
  for (const Geometry& g : geometries())
    for (DType t : kDtypes)
      for (bool transposed : {false, true}) {
        if (transposed && g.x.rank != 2) continue;
        const Batch b = model::make_batch(t, g.x, element_values(g.x, g.a, t, ++salt, false), transposed);
        SCOPED_TRACE(describe(g.x, g.a, t) + (transposed ? " (transposed view)" : ""));
        aimet::MinMaxEncodingAnalyzer an(g.a);
        an.update_stats(b.view());
        const auto s = an.state();
        const auto want = model::minmax_stats(b, g.a);
        EXPECT_EQ(s.dtype, t);
        ASSERT_EQ(s.min.size(), want.min.size());
        ASSERT_EQ(s.max.size(), want.max.size());
        for (std::size_t e = 0; e < want.min.size(); ++e) {
          EXPECT_TRUE(same_extreme(s.min[e], want.min[e], want.pos_zero[e], want.neg_zero[e])) << "min of element " << e;
          EXPECT_TRUE(same_extreme(s.max[e], want.max[e], want.pos_zero[e], want.neg_zero[e])) << "max of element " << e;
        }
      }
}

// Later batches fold in with torch.minimum / maximum: NaN propagates and the dtype promotes
// (float16 with bfloat16 or float32: float32; anything with float64: float64).
TEST(AimetAnalyzers, MinMaxStatisticsFoldBatchesOfMixedDtypes) {
  const Geometry g{Dims{6, 50}, geometry(Dims{6, 1})};
  const std::vector<std::pair<std::vector<DType>, DType>> sequences = {
      {{DType::kFloat16, DType::kFloat16}, DType::kFloat16},
      {{DType::kFloat16, DType::kBFloat16}, DType::kFloat32},
      {{DType::kBFloat16, DType::kFloat32, DType::kFloat16}, DType::kFloat32},
      {{DType::kFloat32, DType::kFloat64}, DType::kFloat64},
  };
  std::uint64_t salt = 100;
  for (const auto& [dtypes, want_dtype] : sequences) {
    aimet::MinMaxEncodingAnalyzer an(g.a);
    std::vector<double> mn(6, INFINITY), mx(6, -INFINITY);
    std::vector<bool> pz(6, false), nz(6, false);
    for (DType t : dtypes) {
      auto values = element_values(g.x, g.a, t, ++salt, false);
      for (auto& v : values) v *= 1.0 + static_cast<double>(salt % 3);  // ranges differ per batch
      const Batch b = model::make_batch(t, g.x, values);
      an.update_stats(b.view());
      const auto m = model::minmax_stats(b, g.a);
      for (std::size_t e = 0; e < 6; ++e) {
        mn[e] = std::isnan(mn[e]) || std::isnan(m.min[e]) ? NAN : std::min(mn[e], m.min[e]);
        mx[e] = std::isnan(mx[e]) || std::isnan(m.max[e]) ? NAN : std::max(mx[e], m.max[e]);
        pz[e] = pz[e] || m.pos_zero[e];
        nz[e] = nz[e] || m.neg_zero[e];
      }
    }
    const auto s = an.state();
    EXPECT_EQ(s.dtype, want_dtype) << dtype_name(s.dtype);
    for (std::size_t e = 0; e < 6; ++e) {
      EXPECT_TRUE(same_extreme(s.min[e], mn[e], pz[e], nz[e])) << "min of element " << e << " (batch dtypes from salt " << salt << ")";
      EXPECT_TRUE(same_extreme(s.max[e], mx[e], pz[e], nz[e])) << "max of element " << e;
    }
  }
}

// A batch whose values all sit clearly inside a bin (the model's binning is exact there): values
// the model finds ambiguous are replaced by their element's minimum (bin 0; the range stays).
Batch unambiguous_batch(DType t, const Dims& x, const aimet::AnalyzerShape& a, std::int64_t bins, std::uint64_t salt) {
  Batch b = model::make_batch(t, x, element_values(x, a, t, salt, true));
  const model::Histograms hs = model::first_batch(b, a, bins);
  const auto el = model::element_of(x, a);
  std::vector<double> v = b.values;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto e = static_cast<std::size_t>(el[i]);
    bool ambiguous = false;
    model::histc_bin(v[i], hs.edges.data() + e * static_cast<std::size_t>(bins + 1), bins, &ambiguous);
    if (ambiguous) v[i] = hs.min[e];
  }
  return model::make_batch(t, x, v);
}

void expect_histograms(const aimet::HistogramState& s, const model::Histograms& want) {
  ASSERT_EQ(s.num_bins, want.bins);
  ASSERT_EQ(s.min.size(), want.min.size());
  for (std::size_t e = 0; e < want.min.size(); ++e) {
    EXPECT_EQ(s.min[e], want.min[e]) << "min of element " << e;
    EXPECT_EQ(s.max[e], want.max[e]) << "max of element " << e;
  }
  EXPECT_TRUE(test::all_same(s.edges, want.edges)) << "edges";
  EXPECT_TRUE(test::all_same(s.counts, want.counts)) << "counts";
}

TEST(AimetAnalyzers, HistogramStatisticsMatchScalarModel) {
  std::uint64_t salt = 200;
  const std::int64_t bin_counts[] = {1, 7, 64, 512};
  std::size_t k = 0;
  for (const Geometry& g : geometries())
    for (DType t : kDtypes) {
      const std::int64_t bins = bin_counts[k++ % std::size(bin_counts)];
      const Batch b = unambiguous_batch(t, g.x, g.a, bins, ++salt);
      SCOPED_TRACE(describe(g.x, g.a, t) + " bins " + std::to_string(bins));
      aimet::PercentileEncodingAnalyzer an(g.a, bins, 99);
      an.update_stats(b.view());
      const aimet::HistogramState s = an.state();
      EXPECT_EQ(s.dtype, t);
      expect_histograms(s, model::first_batch(b, g.a, bins));
      for (std::size_t e = 0; e < s.min.size(); ++e)  // no growth limit: the range may grow without bound
        EXPECT_TRUE(s.limit_lo[e] == -INFINITY && s.limit_hi[e] == INFINITY) << "element " << e;
    }
}

// With a growth limit g the range of a histogram grows at most to [lo - g r / 2, hi + g r / 2]
// (r = hi - lo of the first batch); values beyond it land in the end bins, so no count is lost.
TEST(AimetAnalyzers, HistogramGrowthIsClampedToTheLimit) {
  aimet::SqnrOptions o;
  o.num_bins = 50;
  o.histogram_growth_limit = 3;
  aimet::SqnrEncodingAnalyzer an(geometry(Dims{2, 1}), o);
  std::vector<double> first(200), second(200);
  for (std::size_t i = 0; i < 100; ++i) {
    first[i] = -1.0 + 2.0 * static_cast<double>(i) / 99.0;        // element 0: [-1, 1], limits [-4, 4]
    first[100 + i] = 3.0 + 0.5 * static_cast<double>(i) / 99.0;   // element 1: [3, 3.5], limits [2.25, 4.25]
    second[i] = -10.0 + 12.0 * static_cast<double>(i) / 99.0;     // [-10, 2]: clamped to [-4, 2]
    second[100 + i] = 2.5 + 0.75 * static_cast<double>(i) / 99.0;  // inside the limits: [2.5, 3.5]
  }
  an.update_stats(model::make_batch(DType::kFloat32, Dims{2, 100}, first).view());
  const auto s1 = an.state();
  EXPECT_EQ(s1.limit_lo[0], -4.0f);
  EXPECT_EQ(s1.limit_hi[0], 4.0f);
  EXPECT_EQ(s1.limit_lo[1], 2.25f);
  EXPECT_EQ(s1.limit_hi[1], 4.25f);
  an.update_stats(model::make_batch(DType::kFloat32, Dims{2, 100}, second).view());
  const auto s = an.state();
  EXPECT_EQ(s.min[0], -4.0);
  EXPECT_EQ(s.max[0], 2.0);
  EXPECT_EQ(s.edges[0], -4.0f);
  EXPECT_EQ(s.min[1], 2.5);
  EXPECT_EQ(s.max[1], 3.5);
  for (std::size_t e = 0; e < 2; ++e) {
    const auto first_bin = s.counts.begin() + static_cast<std::ptrdiff_t>(e * 50);
    EXPECT_EQ(std::accumulate(first_bin, first_bin + 50, 0.0), 200.0) << "element " << e;
  }
}

// A later batch inside every element's range adds its counts over the same edges. Each element's
// range is fixed by two values (lo_e, hi_e with power-of-two edges) that every batch holds; as
// AIMET's, the later batch is binned by contiguous chunks of x (the header's quirk), which are the
// elements' own values only in the first two geometries.
TEST(AimetAnalyzers, HistogramLaterBatchInsideTheRangeAddsCounts) {
  const Geometry cases[] = {
      {Dims{4, 96}, geometry(Dims{4, 1})},
      {Dims{8, 12}, geometry(Dims{4, 1}, std::vector<std::int64_t>{2, 12})},
      {Dims{96, 4}, geometry(Dims{4})},  // trailing channels: chunks are not the channels' values
  };
  std::uint64_t salt = 300;
  for (const Geometry& g : cases)
    for (DType t : {DType::kFloat32, DType::kFloat16}) {
      SCOPED_TRACE(describe(g.x, g.a, t));
      const std::int64_t bins = 64;
      auto batch = [&](double shrink) {
        auto rng = test::make_rng(++salt);
        std::uniform_real_distribution<double> unit(0.02, 0.98);
        const auto el = model::element_of(g.x, g.a);
        std::vector<double> v(el.size());
        std::vector<int> seen(4, 0);
        for (std::size_t i = 0; i < v.size(); ++i) {
          const auto e = static_cast<std::size_t>(el[i]);
          const double lo = -4.0 * static_cast<double>(e + 1), hi = 4.0 * static_cast<double>(e + 1);
          if (shrink == 1.0 && seen[e] < 2) v[i] = seen[e]++ ? hi : lo;
          else {
            const double w = (hi - lo) / bins;
            v[i] = (lo + w * (std::floor(unit(rng) * bins) + unit(rng))) * shrink;  // never near an edge
          }
        }
        return model::make_batch(t, g.x, v);
      };
      const Batch b1 = batch(1.0), b2 = batch(0.25);  // b2: every chunk inside element 0's range [-4, 4]
      aimet::PercentileEncodingAnalyzer an(g.a, bins, 99);
      an.update_stats(b1.view());
      an.update_stats(b2.view());
      model::Histograms want = model::first_batch(b1, g.a, bins);
      model::add_inside(want, b2);
      const aimet::HistogramState s = an.state();
      expect_histograms(s, want);
      EXPECT_EQ(s.dtype, DType::kFloat32);  // float32 after a later batch (AIMET's)
    }
}

// MinMax's encodings from float32 statistics: hand-worked literals (AIMET's test_encoding_analyzer)
// and the float32 model over random ranges, degenerate ones and infinities.
TEST(AimetAnalyzers, MinMaxEncodingsMatchScalarModel) {
  const float eps = FLT_EPSILON;
  struct Literal {
    std::vector<double> x;
    double n;
    bool symmetric;
    float lo, hi;
  };
  std::vector<double> half_steps, m2_9;
  for (int i = 0; i <= 51; ++i) half_steps.push_back(0.5 * i);
  for (int i = -2; i <= 9; ++i) m2_9.push_back(i);
  const Literal literals[] = {
      {half_steps, 255, false, 0.0f, 25.5f}, {half_steps, 254, true, -25.5f, 25.5f}, {m2_9, 7, true, -12.0f, 9.0f},
      {{3.0}, 255, false, 0.0f, 3.0f},       {{3.0}, 254, true, -3.0f, 3.0f},        {{0.0}, 255, false, 0.0f, 255 * eps},
      {{0.0}, 255, true, -128 * eps, 127 * eps}, {{-1.0, 3.0}, 3, true, -3.0f, 1.5f},  // N == 3: delta = max / 2
  };
  for (const Literal& l : literals)
    for (DType t : {DType::kFloat32, DType::kFloat16}) {
      if (t == DType::kFloat16 && l.hi < 1e-4f) continue;  // eps-sized ranges are not float16 values
      aimet::MinMaxEncodingAnalyzer an(per_tensor());
      const Batch b = model::make_batch(t, Dims{static_cast<std::int64_t>(l.x.size())}, l.x);
      an.update_stats(b.view());
      const auto r = an.compute_encodings(l.n, l.symmetric);
      EXPECT_EQ(r.dtype, t);
      EXPECT_EQ(r.min[0], l.lo) << dtype_name(t) << " x[0] " << l.x[0] << " N " << l.n << " sym " << l.symmetric;
      EXPECT_EQ(r.max[0], l.hi) << dtype_name(t) << " x[0] " << l.x[0] << " N " << l.n << " sym " << l.symmetric;
    }
  // Random ranges through set_state (float32 statistics), checked against the model.
  auto rng = test::make_rng(400);
  std::uniform_real_distribution<float> expo(-30.0f, 30.0f), unit(-1.0f, 1.0f);
  aimet::AnalyzerShape shape;
  shape.shape = Dims{4096};
  aimet::MinMaxEncodingAnalyzer an(shape);
  aimet::MinMaxEncodingAnalyzer::State st;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-39f, -1e-39f, FLT_MAX, -FLT_MAX, 3e-6f, -3e-6f};
  for (int i = 0; i < 4096; ++i) {
    float a = unit(rng) * std::exp2(expo(rng)), b = unit(rng) * std::exp2(expo(rng));
    if (i % 8 == 0) a = specials[rng() % std::size(specials)];
    if (i % 8 == 1) b = specials[rng() % std::size(specials)];
    if (i % 8 == 2) b = a + std::abs(a) * 1e-7f;  // narrower than N * min_scale
    st.min.push_back(std::min(a, b));
    st.max.push_back(std::max(a, b));
  }
  an.set_state(st);
  for (double n : {255.0, 254.0, 15.0, 3.0, 65535.0})
    for (bool sym : {false, true}) {
      const auto r = an.compute_encodings(n, sym);
      for (std::size_t i = 0; i < st.min.size(); ++i) {
        float lo, hi;
        model::minmax_encoding(static_cast<float>(st.min[i]), static_cast<float>(st.max[i]), n, sym, lo, hi);
        ASSERT_TRUE(test::same_value(static_cast<float>(r.min[i]), lo) && test::same_value(static_cast<float>(r.max[i]), hi))
            << "stats [" << st.min[i] << ", " << st.max[i] << "] N " << n << " sym " << sym << ": got [" << r.min[i] << ", " << r.max[i]
            << "], model [" << lo << ", " << hi << "]";
      }
    }
}

// Percentile's encodings against the model (left edge of the percentile bin, then MinMax's
// adjustments without the N == 3 rule) on model histograms, and AIMET's literals.
TEST(AimetAnalyzers, PercentileEncodingsMatchScalarModel) {
  std::vector<double> ramp1001(1001);
  std::iota(ramp1001.begin(), ramp1001.end(), 0.0);
  aimet::PercentileEncodingAnalyzer lit(per_tensor(), 500, 99);
  lit.update_stats(model::make_batch(DType::kFloat32, Dims{1001}, ramp1001).view());
  EXPECT_EQ(lit.compute_encodings(255, false).min[0], 0.0);
  EXPECT_EQ(lit.compute_encodings(255, false).max[0], 990.0);
  EXPECT_EQ(lit.compute_encodings(254, true).min[0], -990.0);
  EXPECT_EQ(lit.compute_encodings(254, true).max[0], 990.0);
  std::uint64_t salt = 500;
  for (const Geometry& g : geometries())
    for (double p : {100.0, 99.0, 90.0, 50.0}) {
      const std::int64_t bins = 64;
      const Batch b = unambiguous_batch(DType::kFloat32, g.x, g.a, bins, ++salt);
      aimet::PercentileEncodingAnalyzer an(g.a, bins, p);
      an.update_stats(b.view());
      const model::Histograms hs = model::first_batch(b, g.a, bins);
      for (double n : {255.0, 3.0, 15.0})
        for (bool sym : {false, true}) {
          const auto r = an.compute_encodings(n, sym);
          for (std::size_t e = 0; e < hs.min.size(); ++e) {
            float lo, hi;
            model::percentile_encoding(hs.counts.data() + e * 64, hs.edges.data() + e * 65, bins, p, n, sym, lo, hi);
            EXPECT_TRUE(test::same_value(static_cast<float>(r.min[e]), lo) && test::same_value(static_cast<float>(r.max[e]), hi))
                << describe(g.x, g.a, DType::kFloat32) << " p " << p << " N " << n << " sym " << sym << " element " << e << ": got ["
                << r.min[e] << ", " << r.max[e] << "], model [" << lo << ", " << hi << "]";
          }
        }
    }
}

// ---- every kernel set and thread count ----------------------------------------------------------------
// Restores the kernel set and thread count a test changes.
class RuntimeGuard {
 public:
  RuntimeGuard() : before_(runtime_info()) {}
  ~RuntimeGuard() {
    set_kernel_set(before_.isa);
    set_num_threads(before_.num_threads);
  }
  RuntimeGuard(const RuntimeGuard&) = delete;
  RuntimeGuard& operator=(const RuntimeGuard&) = delete;
  const RuntimeInfo& before() const { return before_; }

 private:
  RuntimeInfo before_;
};

// Named byte strings of an analyzer's results (state fields, encodings), compared part by part.
using Parts = std::vector<std::pair<std::string, std::string>>;

template <class T>
void put(Parts& parts, std::string name, const std::vector<T>& v) {
  parts.emplace_back(std::move(name), std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

void put_range(Parts& parts, const std::string& name, const aimet::EncodingRange& r) {
  put(parts, name + " min", r.min);
  put(parts, name + " max", r.max);
  parts.emplace_back(name + " dtype", dtype_name(r.dtype));
}

void put_encodings(Parts& parts, const std::string& name, const std::function<aimet::EncodingRange(double, bool)>& f) {
  for (double n : {255.0, 15.0})
    for (bool sym : {false, true}) put_range(parts, name + " N " + std::to_string(static_cast<int>(n)) + (sym ? " sym" : " asym"), f(n, sym));
}

// Runs `f` on every kernel set with 1, 2, 7 and 256 threads (at most the pool's size) and expects
// every part to equal that of the scalar set with one thread, bit for bit.
void expect_same_everywhere(const std::string& what, const std::function<Parts()>& f) {
  const RuntimeGuard guard;
  const auto& sets = guard.before().supported;
  std::optional<Parts> want;
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) {  // scalar first
    set_kernel_set(*it);
    for (int threads : {1, 2, 7, 256}) {
      set_num_threads(threads);
      const Parts got = f();
      if (!want) {
        want = got;
        continue;
      }
      ASSERT_EQ(got.size(), want->size()) << what;
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(got[i].first == (*want)[i].first && got[i].second == (*want)[i].second)
            << what << ": " << (*want)[i].first << " differs on kernel set " << *it << " with " << threads << " threads from scalar, 1 thread";
    }
  }
}

// Large batches (split across threads, long enough for every vector path), odd shapes, blocks,
// a transposed view, each dtype, NaN / inf / +-0 / subnormals; two batches (the second grows the
// histograms' ranges).
struct LargeCase {
  Dims x;
  aimet::AnalyzerShape a;
  DType dtype;
  bool transposed = false;
  bool sqnr = true;  // few enough histograms for SQNR's grid search
};

std::vector<LargeCase> large_cases() {
  return {
      {Dims{257, 263}, geometry(Dims{257, 1}), DType::kFloat32, false, false},
      {Dims{257, 263}, geometry(Dims{263}), DType::kFloat32, true, false},
      {Dims{3, 65537}, geometry(Dims{1}), DType::kFloat16},
      {Dims{4, 40001}, geometry(Dims{4, 1}), DType::kFloat32},
      {Dims{64, 2080}, geometry(Dims{8, 65}, std::vector<std::int64_t>{8, 32}), DType::kBFloat16, false, false},
      {Dims{140003}, geometry(Dims{1}), DType::kFloat64},
      {Dims{9, 3, 5003}, geometry(Dims{3, 1}), DType::kBFloat16},
  };
}

Batch large_batch(const LargeCase& c, std::uint64_t salt, double scale) {
  auto rng = test::make_rng(salt);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), expo(-20.0, 12.0);
  const auto n = static_cast<std::size_t>(model::numel(c.x));
  std::vector<double> v(n);
  const double specials[] = {0.0, -0.0, 0.0, -0.0, INFINITY, -INFINITY, NAN, subnormal(c.dtype), -subnormal(c.dtype)};
  for (std::size_t i = 0; i < n; ++i) {
    const auto p = rng() % 64;
    if (p == 0) v[i] = specials[rng() % std::size(specials)];
    else if (p < 8) v[i] = (i / 97 % 2 ? 0.0 : -0.0);  // runs of zeros of one sign
    else if (p < 16) v[i] = unit(rng) * std::exp2(expo(rng));
    else v[i] = unit(rng) * scale * (1.0 + static_cast<double>(i % 13));
  }
  return model::make_batch(c.dtype, c.x, std::move(v), c.transposed);
}

TEST(AimetAnalyzers, SameBitsOnEveryKernelSetAndThreadCount) {
  std::uint64_t salt = 600;
  for (const LargeCase& c : large_cases()) {
    const Batch b1 = large_batch(c, ++salt, 1.0), b2 = large_batch(c, ++salt, 1.5);
    const std::string what = describe(c.x, c.a, c.dtype) + (c.transposed ? " (transposed view)" : "");
    expect_same_everywhere("MinMax " + what, [&] {
      Parts parts;
      aimet::MinMaxEncodingAnalyzer an(c.a);
      put(parts, "batch min", an.batch_stats(b1.view()).min);
      an.update_stats(b1.view());
      an.update_stats(b2.view());
      const auto s = an.state();
      put(parts, "min", s.min);
      put(parts, "max", s.max);
      put_encodings(parts, "encodings", [&](double n, bool sym) { return an.compute_encodings(n, sym); });
      put_encodings(parts, "dynamic", [&](double n, bool sym) { return an.compute_dynamic_encodings(b2.view(), n, sym); });
      return parts;
    });
    for (int kind = 0; kind < 3; ++kind) {
      if (kind > 0 && !c.sqnr) continue;
      const char* names[] = {"Percentile", "SQNR", "TfEnhanced"};
      expect_same_everywhere(names[kind] + (" " + what), [&] {
        std::unique_ptr<aimet::HistogramEncodingAnalyzer> an;
        if (kind == 0) an = std::make_unique<aimet::PercentileEncodingAnalyzer>(c.a, 512, 99.9);
        else if (kind == 1) an = std::make_unique<aimet::SqnrEncodingAnalyzer>(c.a);
        else an = std::make_unique<aimet::SqnrEncodingAnalyzer>(c.a, aimet::tf_enhanced_options());
        Parts parts;
        an->update_stats(b1.view());
        const auto s1 = an->state();
        put(parts, "first counts", s1.counts);
        put(parts, "first edges", s1.edges);
        try {
          an->update_stats(b2.view());
        } catch (const Error& e) {  // a float64 batch that grows a range: AIMET's error
          parts.emplace_back("second batch's error", e.what());
        }
        const auto s = an->state();
        put(parts, "counts", s.counts);
        put(parts, "edges", s.edges);
        put(parts, "min", s.min);
        put(parts, "max", s.max);
        put(parts, "limits", s.limit_lo);
        put_encodings(parts, "encodings", [&](double n, bool sym) { return an->compute_encodings(n, sym); });
        if (kind == 0) put_encodings(parts, "dynamic", [&](double n, bool sym) { return an->compute_dynamic_encodings(b1.view(), n, sym); });
        return parts;
      });
    }
  }
}

// ---- merges and state round trips -------------------------------------------------------------------
bool same_state(const aimet::MinMaxEncodingAnalyzer::State& a, const aimet::MinMaxEncodingAnalyzer::State& b) {
  return a.dtype == b.dtype && test::all_same(a.min, b.min) && test::all_same(a.max, b.max);
}

::testing::AssertionResult same_state(const aimet::HistogramState& a, const aimet::HistogramState& b) {
  if (a.dtype != b.dtype || a.num_bins != b.num_bins) return ::testing::AssertionFailure() << "dtype or num_bins";
  for (auto [name, r] : {std::pair{"counts", test::all_same(a.counts, b.counts)}, std::pair{"edges", test::all_same(a.edges, b.edges)},
                         std::pair{"min", test::all_same(a.min, b.min)}, std::pair{"max", test::all_same(a.max, b.max)},
                         std::pair{"limit_lo", test::all_same(a.limit_lo, b.limit_lo)},
                         std::pair{"limit_hi", test::all_same(a.limit_hi, b.limit_hi)}})
    if (!r) return ::testing::AssertionFailure() << name << ": " << r.message();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_encodings(const aimet::EncodingRange& a, const aimet::EncodingRange& b) {
  if (a.dtype != b.dtype) return ::testing::AssertionFailure() << "dtype";
  auto r = test::all_same(a.min, b.min);
  if (!r) return ::testing::AssertionFailure() << "min: " << r.message();
  r = test::all_same(a.max, b.max);
  if (!r) return ::testing::AssertionFailure() << "max: " << r.message();
  return ::testing::AssertionSuccess();
}

// MinMax: "exactly the statistics of one analyzer fed both analyzers' batches", for any split of
// the batches (dtypes mixed, zeros of both signs, NaN), and merging an empty analyzer changes nothing.
TEST(AimetAnalyzers, MinMaxMergeEqualsOneAnalyzer) {
  const Geometry geoms[] = {{Dims{16, 33}, geometry(Dims{33})}, {Dims{16, 33}, geometry(Dims{16, 1})}, {Dims{16, 33}, geometry(Dims{1})}};
  const DType dtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat16, DType::kFloat32};
  std::uint64_t salt = 700;
  for (const Geometry& g : geoms) {
    std::vector<Batch> batches;
    for (DType t : dtypes) batches.push_back(model::make_batch(t, g.x, element_values(g.x, g.a, t, ++salt, false)));
    aimet::MinMaxEncodingAnalyzer one(g.a);
    for (const Batch& b : batches) one.update_stats(b.view());
    for (std::size_t split = 0; split <= batches.size(); ++split) {
      aimet::MinMaxEncodingAnalyzer a(g.a), b(g.a);
      for (std::size_t i = 0; i < batches.size(); ++i) (i < split ? a : b).update_stats(batches[i].view());
      a.merge(b);
      EXPECT_TRUE(same_state(a.state(), one.state())) << describe(g.x, g.a, DType::kFloat32) << " split after " << split;
      for (bool sym : {false, true}) EXPECT_TRUE(same_encodings(a.compute_encodings(255, sym), one.compute_encodings(255, sym)));
    }
  }
}

// Histograms: when every part of the split data reaches each histogram's min and max (same edges),
// the merge is bit for bit one analyzer fed all the batches (contiguous slices); otherwise every
// count is kept and the range covers both. Where the slices are not contiguous the merge gives the
// elements' own counts (the model's), not AIMET's chunked ones.
TEST(AimetAnalyzers, HistogramMergeEqualsOneAnalyzerWhenTheEdgesAgree) {
  const Geometry geoms[] = {{Dims{4, 300}, geometry(Dims{4, 1})}, {Dims{1200}, geometry(Dims{1})}, {Dims{300, 4}, geometry(Dims{4})}};
  std::uint64_t salt = 800;
  for (const Geometry& g : geoms) {
    const bool contiguous = g.a.shape.rank == 2 || g.a.shape[0] == 1;
    auto batch = [&](double lo_scale, double hi_scale) {  // every element holds its lo and hi
      auto rng = test::make_rng(++salt);
      std::uniform_real_distribution<double> unit(0.0, 1.0);
      const auto el = model::element_of(g.x, g.a);
      std::vector<double> v(el.size());
      std::vector<int> seen(4, 0);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const auto e = static_cast<std::size_t>(el[i]);
        const double lo = -1.25 * static_cast<double>(e + 1) * lo_scale, hi = 0.75 * static_cast<double>(e + 2) * hi_scale;
        v[i] = seen[e] < 2 ? (seen[e]++ ? hi : lo) : lo + (hi - lo) * unit(rng);
      }
      return model::make_batch(DType::kFloat32, g.x, v);
    };
    const std::string what = describe(g.x, g.a, DType::kFloat32);
    std::vector<Batch> batches;
    for (int i = 0; i < 4; ++i) batches.push_back(batch(1.0, 1.0));
    aimet::SqnrOptions o;
    o.num_bins = 128;
    aimet::SqnrEncodingAnalyzer one(g.a, o), a(g.a, o), b(g.a, o);
    for (const Batch& x : batches) one.update_stats(x.view());
    for (int i = 0; i < 4; ++i) (i < 2 ? a : b).update_stats(batches[static_cast<std::size_t>(i)].view());
    a.merge(b);
    if (contiguous) {
      EXPECT_TRUE(same_state(a.state(), one.state())) << what;
      for (bool sym : {false, true}) EXPECT_TRUE(same_encodings(a.compute_encodings(255, sym), one.compute_encodings(255, sym))) << what;
    } else {
      // One batch per analyzer (their own later batches would be binned by AIMET's chunks), merged.
      aimet::SqnrEncodingAnalyzer m(g.a, o);
      m.update_stats(batches[0].view());
      model::Histograms want = model::first_batch(batches[0], g.a, 128);
      for (std::size_t i = 1; i < batches.size(); ++i) {
        aimet::SqnrEncodingAnalyzer x(g.a, o);
        x.update_stats(batches[i].view());
        m.merge(x);
        const model::Histograms more = model::first_batch(batches[i], g.a, 128);
        ASSERT_TRUE(test::all_same(more.edges, want.edges)) << what << ": the test's batches must share their edges";
        for (std::size_t k = 0; k < want.counts.size(); ++k) want.counts[k] += more.counts[k];
      }
      expect_histograms(m.state(), want);
    }
    // Different ranges: every count kept, the range covers both (in either order).
    const Batch wide = batch(2.0, 1.5);
    for (bool wide_first : {false, true}) {
      aimet::SqnrEncodingAnalyzer p(g.a, o), q(g.a, o);
      p.update_stats((wide_first ? wide : batches[0]).view());
      q.update_stats((wide_first ? batches[0] : wide).view());
      const auto sp = p.state(), sq = q.state();
      p.merge(q);
      const auto s = p.state();
      for (std::size_t e = 0; e < s.min.size(); ++e) {
        const auto ub = static_cast<std::size_t>(o.num_bins);
        const auto sum = [&](const aimet::HistogramState& h) {
          const auto first = h.counts.begin() + static_cast<std::ptrdiff_t>(e * ub);
          return std::accumulate(first, first + static_cast<std::ptrdiff_t>(ub), 0.0);
        };
        EXPECT_EQ(sum(s), sum(sp) + sum(sq)) << what << " element " << e;
        EXPECT_EQ(s.min[e], std::min(sp.min[e], sq.min[e])) << what << " element " << e;
        EXPECT_EQ(s.max[e], std::max(sp.max[e], sq.max[e])) << what << " element " << e;
        EXPECT_EQ(s.edges[e * (ub + 1)], static_cast<float>(s.min[e])) << what << " element " << e;
      }
    }
  }
  aimet::SqnrEncodingAnalyzer p(per_tensor()), q(per_tensor(), aimet::tf_enhanced_options());
  expect_error([&] { p.merge(q); }, ErrorKind::kValue, "bin counts differ");
}

// start_with_range over the data's finite range (the two-pass calibration): any split of the
// batches, updated in any order and merged in any order, holds bit for bit the statistics of one
// analyzer fed all the data as one batch; per tensor and per channel of an (n, 4) batch (whose
// channels are not contiguous: each is binned from its own values, as AIMET bins a first batch).
TEST(AimetAnalyzers, HistogramsStartedWithTheDataRangeEqualOneBatchOfAllTheData) {
  const std::int64_t rows[] = {37, 5, 64, 19};
  for (const std::int64_t channels : {std::int64_t{1}, std::int64_t{4}}) {
    aimet::AnalyzerShape a;
    a.shape = Dims{channels};
    std::vector<std::vector<float>> batches;
    std::vector<float> all;
    auto rng = test::make_rng(static_cast<std::uint64_t>(900 + channels));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t b = 0; b < std::size(rows); ++b) {
      std::vector<float> v(static_cast<std::size_t>(rows[b] * channels));
      for (float& x : v) x = normal(rng) * static_cast<float>(b + 1);
      if (b == 2) v[3] = INFINITY, v[5] = -INFINITY, v[7] = NAN;  // end bins / dropped, as in one batch
      batches.push_back(v);
      all.insert(all.end(), v.begin(), v.end());
    }
    auto view = [&](const std::vector<float>& v) {
      const std::int64_t n = static_cast<std::int64_t>(v.size()) / channels;
      return TensorView(v.data(), DType::kFloat32, Dims{n, channels}, Dims{channels, 1});
    };
    for (const bool tfe : {false, true}) {
      const aimet::SqnrOptions o = tfe ? aimet::tf_enhanced_options() : aimet::SqnrOptions{};
      aimet::SqnrEncodingAnalyzer one(a, o);
      one.update_stats(view(all));
      const aimet::HistogramState want = one.state();
      auto started = [&] {
        auto an = std::make_unique<aimet::SqnrEncodingAnalyzer>(a, o);
        an->start_with_range(DType::kFloat32, want.min, want.max);
        return an;
      };
      auto p = started(), q = started(), r = started(), in_order = started();
      for (const auto& v : batches) in_order->update_stats(view(v));
      p->update_stats(view(batches[3]));
      p->update_stats(view(batches[0]));
      q->update_stats(view(batches[2]));
      r->update_stats(view(batches[1]));
      q->merge(*p);
      r->merge(*q);
      const std::string what = std::to_string(channels) + (tfe ? " channels, TfEnhanced" : " channels, SQNR");
      EXPECT_TRUE(r->state().fixed_range) << what;
      EXPECT_TRUE(same_state(r->state(), want)) << what;
      EXPECT_TRUE(same_state(in_order->state(), want)) << what;
      for (bool sym : {false, true}) EXPECT_TRUE(same_encodings(r->compute_encodings(255, sym), one.compute_encodings(255, sym))) << what;
    }
  }
}

TEST(AimetAnalyzers, StartWithRangeIsValidated) {
  aimet::AnalyzerShape a;
  a.shape = Dims{2};
  aimet::PercentileEncodingAnalyzer an(a, 16, 99);
  const std::vector<double> lo{0, -1}, hi{1, 2}, one_value{0};
  expect_error([&] { an.start_with_range(DType::kFloat32, one_value, hi); }, ErrorKind::kValue, {"start_with_range: min has 1 values", "expected 2"});
  expect_error([&] { an.start_with_range(DType::kFloat32, lo, one_value); }, ErrorKind::kValue, "start_with_range: max has 1 values");
  expect_error([&] { an.start_with_range(DType::kInt8, lo, hi); }, ErrorKind::kValue, "start_with_range: dtype int8 is not supported");
  expect_error([&] { an.start_with_range(DType::kFloat32, std::vector<double>{0, NAN}, hi); }, ErrorKind::kValue, "min[1] = nan is not finite");
  expect_error([&] { an.start_with_range(DType::kFloat32, lo, std::vector<double>{1, INFINITY}); }, ErrorKind::kValue, "max[1] = inf is not finite");
  expect_error([&] { an.start_with_range(DType::kFloat32, std::vector<double>{3, 0}, hi); }, ErrorKind::kValue, "min[0] = 3 is above max[0]");
  expect_error([&] { an.start_with_range(DType::kFloat16, std::vector<double>{0.1, 0}, hi); }, ErrorKind::kValue, "is not a float16 value");
  EXPECT_FALSE(an.has_stats());
  an.start_with_range(DType::kFloat32, lo, hi);
  ASSERT_TRUE(an.has_stats());
  const std::vector<float> outside{0.5f, 3.0f}, wide(4, 0.5f);
  const std::vector<double> as_double{0.5, 0.5};
  expect_error([&] { an.update_stats(TensorView(outside.data(), DType::kFloat32, Dims{1, 2}, Dims{2, 1})); }, ErrorKind::kValue,
               {"element 1", "outside the range", "fixed by start_with_range"});
  expect_error([&] { an.update_stats(TensorView(as_double.data(), DType::kFloat64, Dims{1, 2}, Dims{2, 1})); }, ErrorKind::kValue,
               "x: dtype float64 differs from float32");
  aimet::PercentileEncodingAnalyzer streaming(a, 16, 99), other_range(a, 16, 99);
  streaming.update_stats(TensorView(wide.data(), DType::kFloat32, Dims{2, 2}, Dims{2, 1}));
  expect_error([&] { an.merge(streaming); }, ErrorKind::kValue, "merges only with another started over the same range");
  expect_error([&] { streaming.merge(an); }, ErrorKind::kValue, "merges only with another started over the same range");
  other_range.start_with_range(DType::kFloat32, lo, std::vector<double>{1, 3});
  expect_error([&] { an.merge(other_range); }, ErrorKind::kValue, "started over different ranges");
  aimet::HistogramState empty_but_fixed;
  empty_but_fixed.fixed_range = true;
  expect_error([&] { an.set_state(empty_but_fixed); }, ErrorKind::kValue, "no fixed range");
  // A state round trip keeps the fixed range.
  aimet::PercentileEncodingAnalyzer copy(a, 16, 99);
  copy.set_state(an.state());
  copy.update_stats(TensorView(wide.data(), DType::kFloat32, Dims{2, 2}, Dims{2, 1}));
  EXPECT_TRUE(copy.state().fixed_range);
}

// state() -> set_state() on a fresh analyzer reproduces the encodings bit for bit, and both then
// fold a further batch identically; for each analyzer, after batches that grew the ranges.
TEST(AimetAnalyzers, StateRoundTripsReproduceEncodings) {
  std::uint64_t salt = 900;
  for (const Geometry& g : geometries())
    for (DType t : kDtypes) {
      const std::string what = describe(g.x, g.a, t);
      std::vector<Batch> batches;
      for (double scale : {1.0, 3.0, 0.5}) {
        auto v = element_values(g.x, g.a, t, ++salt, true);
        for (auto& x : v) x *= scale;
        batches.push_back(model::make_batch(t, g.x, v));
      }
      {
        aimet::MinMaxEncodingAnalyzer a(g.a), r(g.a);
        a.update_stats(batches[0].view());
        a.update_stats(batches[1].view());
        r.set_state(a.state());
        EXPECT_TRUE(same_state(r.state(), a.state())) << what;
        for (double n : {255.0, 3.0, 65535.0})
          for (bool sym : {false, true}) EXPECT_TRUE(same_encodings(r.compute_encodings(n, sym), a.compute_encodings(n, sym))) << what;
        a.update_stats(batches[2].view());
        r.update_stats(batches[2].view());
        EXPECT_TRUE(same_state(r.state(), a.state())) << what;
      }
      for (int kind = 0; kind < 3; ++kind) {
        auto make = [&]() -> std::unique_ptr<aimet::HistogramEncodingAnalyzer> {
          aimet::SqnrOptions o;
          o.num_bins = 96;
          if (kind == 0) return std::make_unique<aimet::PercentileEncodingAnalyzer>(g.a, 96, 97.5);
          if (kind == 1) return std::make_unique<aimet::SqnrEncodingAnalyzer>(g.a, o);
          return std::make_unique<aimet::SqnrEncodingAnalyzer>(g.a, aimet::tf_enhanced_options());
        };
        auto a = make(), r = make();
        a->update_stats(batches[0].view());
        if (t != DType::kFloat64) a->update_stats(batches[1].view());  // (a float64 batch that grows a range is AIMET's error)
        r->set_state(a->state());
        EXPECT_TRUE(same_state(r->state(), a->state())) << what << " kind " << kind;
        for (double n : {255.0, 15.0})
          for (bool sym : {false, true})
            EXPECT_TRUE(same_encodings(r->compute_encodings(n, sym), a->compute_encodings(n, sym))) << what << " kind " << kind;
        auto fold = [&](aimet::HistogramEncodingAnalyzer& x) {
          try {
            x.update_stats(batches[2].view());
            return std::string("ok");
          } catch (const Error& e) {
            return std::string(e.what());
          }
        };
        EXPECT_EQ(fold(*r), fold(*a)) << what << " kind " << kind;
        EXPECT_TRUE(same_state(r->state(), a->state())) << what << " kind " << kind;
      }
    }
}

}  // namespace
}  // namespace polyquant
